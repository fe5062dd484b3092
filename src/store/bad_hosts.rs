//! Hosts (vast.ai `machine_id`) that failed us: a boot that never finished, an instance that
//! went exited/offline/unknown, or two outbids. Left out of offer searches until `until`
//! (`vast.offers.bad_host_hours` after the failure).

use anyhow::Result;
use rusqlite::{params, Connection};

use crate::clock::Millis;

/// Outbids on one host that make it a bad host.
pub const OUTBID_LIMIT: i64 = 2;

/// Mark `machine_id` bad until `until` for `reason` (a later failure extends it).
pub fn mark(
    conn: &Connection,
    machine_id: i64,
    reason: &str,
    until: Millis,
    now: Millis,
) -> Result<()> {
    conn.execute(
        "INSERT INTO bad_hosts (machine_id, reason, until, updated_at) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT(machine_id) DO UPDATE SET reason = excluded.reason,
            until = MAX(COALESCE(until, 0), excluded.until), updated_at = excluded.updated_at",
        params![machine_id, reason, until, now],
    )?;
    Ok(())
}

/// One more outbid on `machine_id`; at [`OUTBID_LIMIT`] the host is bad until `until`.
/// Returns the outbids counted so far.
pub fn outbid(conn: &Connection, machine_id: i64, until: Millis, now: Millis) -> Result<i64> {
    conn.execute(
        "INSERT INTO bad_hosts (machine_id, reason, outbid_count, updated_at)
              VALUES (?1, 'outbid', 1, ?2)
         ON CONFLICT(machine_id) DO UPDATE SET outbid_count = outbid_count + 1,
            updated_at = excluded.updated_at",
        params![machine_id, now],
    )?;
    let n: i64 = conn.query_row(
        "SELECT outbid_count FROM bad_hosts WHERE machine_id = ?1",
        params![machine_id],
        |r| r.get(0),
    )?;
    if n >= OUTBID_LIMIT {
        mark(conn, machine_id, &format!("outbid {n} times"), until, now)?;
    }
    Ok(n)
}

/// Hosts bad at `now`, by id.
pub fn current(conn: &Connection, now: Millis) -> Result<Vec<i64>> {
    let mut stmt = conn.prepare_cached(
        "SELECT machine_id FROM bad_hosts WHERE until IS NOT NULL AND until > ?1 ORDER BY machine_id",
    )?;
    let rows = stmt
        .query_map(params![now], |r| r.get(0))?
        .collect::<rusqlite::Result<Vec<i64>>>()?;
    Ok(rows)
}

/// A host left out of offer searches, for `inspect`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct BadHost {
    pub machine_id: i64,
    pub reason: String,
    pub until: String,
}

/// Hosts bad at `now`, with why and until when, soonest back first.
pub fn listed(conn: &Connection, now: Millis) -> Result<Vec<BadHost>> {
    let mut stmt = conn.prepare_cached(
        "SELECT machine_id, reason, until FROM bad_hosts
          WHERE until IS NOT NULL AND until > ?1 ORDER BY until, machine_id",
    )?;
    let rows = stmt
        .query_map(params![now], |r| {
            let until: Millis = r.get(2)?;
            Ok(BadHost {
                machine_id: r.get(0)?,
                reason: r.get(1)?,
                until: crate::clock::rfc3339(until),
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// vast.ai said the daily search quota is spent, refilling at `reset` (its
/// `X-RateLimit-Reset`, as sent; "" when it sent none).
pub fn set_search_quota(conn: &Connection, reset: &str, now: Millis) -> Result<()> {
    conn.execute(
        "UPDATE agent_state SET search_quota_until = ?1, search_quota_at = ?2 WHERE id = 1",
        params![reset, now],
    )?;
    Ok(())
}

/// A search went through: the quota is no longer spent.
pub fn clear_search_quota(conn: &Connection) -> Result<()> {
    conn.execute(
        "UPDATE agent_state SET search_quota_until = NULL, search_quota_at = NULL WHERE id = 1 AND search_quota_at IS NOT NULL",
        [],
    )?;
    Ok(())
}

/// The last "search quota exhausted" vast.ai gave (reset text, when), if not cleared since.
pub fn search_quota(conn: &Connection) -> Result<Option<(String, Millis)>> {
    use rusqlite::OptionalExtension;
    Ok(conn
        .query_row(
            "SELECT COALESCE(search_quota_until, ''), search_quota_at FROM agent_state
              WHERE id = 1 AND search_quota_at IS NOT NULL",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_store;

    #[test]
    fn two_outbids_make_a_bad_host_and_it_expires() {
        let (_dir, s) = test_store(0);
        assert_eq!(outbid(&s.conn, 7, 1_000, 10).unwrap(), 1);
        assert!(current(&s.conn, 10).unwrap().is_empty());
        assert_eq!(outbid(&s.conn, 7, 1_000, 20).unwrap(), 2);
        mark(&s.conn, 9, "exited", 500, 20).unwrap();
        assert_eq!(current(&s.conn, 30).unwrap(), vec![7, 9]);
        assert_eq!(current(&s.conn, 600).unwrap(), vec![7]);
        assert!(current(&s.conn, 1_000).unwrap().is_empty());
        assert!(search_quota(&s.conn).unwrap().is_none());
        set_search_quota(&s.conn, "1800000000", 5).unwrap();
        assert_eq!(
            search_quota(&s.conn).unwrap(),
            Some(("1800000000".into(), 5))
        );
        clear_search_quota(&s.conn).unwrap();
        assert!(search_quota(&s.conn).unwrap().is_none());
    }
}
