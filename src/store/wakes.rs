//! Wakes: scheduled checks. pending -> processed by exactly one pass (in the transaction
//! that creates its run) | cancelled | failed after repeated hand-backs.

use anyhow::{bail, Result};
use rusqlite::{params, Connection, OptionalExtension};
use serde::Serialize;

use crate::clock::Millis;

pub use super::events::MAX_ATTEMPTS;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Wake {
    pub id: i64,
    pub due_at: Millis,
    pub reason: String,
    pub created_at: Millis,
    pub created_by: String,
    pub status: String,
    pub processed_by: Option<i64>,
    pub attempts: i64,
}

const DUE: &str =
    "status = 'pending' AND due_at <= ?1 AND (not_before IS NULL OR not_before <= ?1)";

pub fn add(
    conn: &Connection,
    due_at: Millis,
    reason: &str,
    created_by: &str,
    created_run: Option<i64>,
    now: Millis,
) -> Result<i64> {
    conn.execute(
        "INSERT INTO wakes (due_at, reason, created_at, created_by, created_run, status)
         VALUES (?1, ?2, ?3, ?4, ?5, 'pending')",
        params![due_at, reason, now, created_by, created_run],
    )?;
    Ok(conn.last_insert_rowid())
}

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Wake> {
    Ok(Wake {
        id: r.get(0)?,
        due_at: r.get(1)?,
        reason: r.get(2)?,
        created_at: r.get(3)?,
        created_by: r.get(4)?,
        status: r.get(5)?,
        processed_by: r.get(6)?,
        attempts: r.get(7)?,
    })
}

const COLS: &str = "id, due_at, reason, created_at, created_by, status, processed_by, attempts";

/// Mark every due wake processed by `run_id`; returns them, by due time. While this clock
/// runs ahead of vast.ai's (`clock_step::Ahead`), a wake added before it ran ahead is due by
/// vast.ai's time (a re-test: `wakes add --in 30m`, then the clock 2 h ahead, and the check
/// ran 21 minutes early).
pub fn claim_due(conn: &Connection, run_id: i64, now: Millis) -> Result<Vec<Wake>> {
    let (since, ahead) =
        crate::store::clock_step::ahead(conn)?.map_or((Millis::MIN, 0), |a| (a.since, a.ms));
    conn.execute(
        &format!(
            "UPDATE wakes SET status = 'processed', processed_by = ?2, processed_at = ?1
              WHERE {DUE} AND (created_at >= ?3 OR due_at <= ?1 - ?4)"
        ),
        params![now, run_id, since, ahead],
    )?;
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLS} FROM wakes WHERE processed_by = ?1 AND status = 'processed' ORDER BY due_at, id"
    ))?;
    let rows = stmt
        .query_map(params![run_id], row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// Whether a pending wake was due at or before `at` (a pass should have run it by now).
pub fn any_due_by(conn: &Connection, at: Millis) -> Result<bool> {
    Ok(conn
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM wakes WHERE status = 'pending' AND due_at <= ?1)",
        )?
        .query_row(params![at], |r| r.get(0))?)
}

/// Give a failed or interrupted pass's wakes back (attempts + 1); after [`MAX_ATTEMPTS`] they
/// are marked failed.
pub fn hand_back(
    conn: &Connection,
    run_id: i64,
    not_before: Option<Millis>,
    now: Millis,
) -> Result<super::events::HandBack> {
    let failed = conn.execute(
        "UPDATE wakes SET status = 'failed', attempts = attempts + 1, finished_at = ?2
         WHERE processed_by = ?1 AND status = 'processed' AND attempts + 1 >= ?3",
        params![run_id, now, MAX_ATTEMPTS],
    )?;
    let returned = conn.execute(
        "UPDATE wakes SET status = 'pending', processed_by = NULL, processed_at = NULL,
                attempts = attempts + 1, not_before = ?2
         WHERE processed_by = ?1 AND status = 'processed'",
        params![run_id, not_before],
    )?;
    Ok(super::events::HandBack { returned, failed })
}

/// Cancel one pending wake. Errors name why it could not be cancelled.
pub fn cancel(conn: &Connection, id: i64, now: Millis) -> Result<()> {
    let status: Option<String> = conn
        .query_row("SELECT status FROM wakes WHERE id = ?1", params![id], |r| {
            r.get(0)
        })
        .optional()?;
    match status.as_deref() {
        None => bail!("no wake with id {id}"),
        Some("pending") => {
            conn.execute(
                "UPDATE wakes SET status = 'cancelled', finished_at = ?2 WHERE id = ?1",
                params![id, now],
            )?;
            Ok(())
        }
        Some(other) => bail!("wake {id} is {other}, not pending"),
    }
}

/// Cancel every pending wake; returns how many.
pub fn cancel_pending(conn: &Connection, now: Millis) -> Result<usize> {
    Ok(conn.execute(
        "UPDATE wakes SET status = 'cancelled', finished_at = ?1 WHERE status = 'pending'",
        params![now],
    )?)
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct WakeCounts {
    pub pending: i64,
    /// Pending whose time has come.
    pub overdue: i64,
    pub failed: i64,
}

/// Pending wakes scheduled by `created_by` (`"agent"`, `"operator"`).
pub fn count_pending_by(conn: &Connection, created_by: &str) -> Result<i64> {
    Ok(conn.query_row(
        "SELECT COUNT(*) FROM wakes WHERE status = 'pending' AND created_by = ?1",
        params![created_by],
        |r| r.get(0),
    )?)
}

pub fn counts(conn: &Connection, now: Millis) -> Result<WakeCounts> {
    let (pending, overdue): (i64, i64) = conn.query_row(
        "SELECT COUNT(*), COALESCE(SUM(due_at <= ?1), 0) FROM wakes WHERE status = 'pending'",
        params![now],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let failed = conn.query_row(
        "SELECT COUNT(*) FROM wakes WHERE status = 'failed'",
        [],
        |r| r.get(0),
    )?;
    Ok(WakeCounts {
        pending,
        overdue,
        failed,
    })
}

/// Wakes failed at or after `since`: how many, and when the newest failed.
pub fn failed_since(conn: &Connection, since: Millis) -> Result<(i64, Option<Millis>)> {
    Ok(conn
        .prepare_cached(
            "SELECT COUNT(*), MAX(finished_at) FROM wakes INDEXED BY wakes_failed
              WHERE status = 'failed' AND finished_at >= ?1",
        )?
        .query_row(params![since], |r| Ok((r.get(0)?, r.get(1)?)))?)
}

/// Pending wakes by due time, or (with `all`) the latest `limit` of every status.
pub fn list(conn: &Connection, all: bool, limit: i64) -> Result<Vec<Wake>> {
    let sql = if all {
        format!("SELECT {COLS} FROM wakes ORDER BY id DESC LIMIT ?1")
    } else {
        format!("SELECT {COLS} FROM wakes WHERE status = 'pending' ORDER BY due_at, id LIMIT ?1")
    };
    let mut stmt = conn.prepare(&sql)?;
    let rows = stmt
        .query_map(params![limit], row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_store;

    /// A wake added before this clock ran ahead of vast.ai's is due by vast.ai's time; one
    /// added since, by this clock's.
    #[test]
    fn a_clock_run_ahead_does_not_bring_a_wake_forward() {
        const MIN: Millis = 60_000;
        let t: Millis = 1_800_000_000_000;
        let (_dir, s) = test_store(t);
        let c = &s.conn;
        let before = add(c, t + 30 * MIN, "before", "operator", None, t).unwrap();
        let ahead = 120 * MIN;
        let since = t + 5 * MIN + ahead;
        c.execute(
            "UPDATE agent_state SET vast_clock_skew_ms = ?1, vast_clock_skew_since_ms = ?2",
            params![ahead, since],
        )
        .unwrap();
        let after = add(c, since + 10 * MIN, "after", "operator", None, since).unwrap();
        let claimed = |at| -> Vec<i64> {
            let run =
                crate::store::runs::create(c, 1, 1, 1, crate::store::runs::StartedBy::Tick, at)
                    .unwrap();
            claim_due(c, run, at)
                .unwrap()
                .iter()
                .map(|w| w.id)
                .collect()
        };
        // Nine minutes after the first was added, by vast.ai's clock: neither is due.
        assert!(claimed(t + 9 * MIN + ahead).is_empty());
        assert_eq!(claimed(since + 11 * MIN), vec![after]);
        assert_eq!(claimed(t + 31 * MIN + ahead), vec![before]);
    }

    #[test]
    fn pending_counted_by_creator() {
        let (_dir, s) = test_store(0);
        assert_eq!(count_pending_by(&s.conn, "agent").unwrap(), 0);
        add(&s.conn, 100, "a", "agent", None, 0).unwrap();
        add(&s.conn, 200, "b", "agent", None, 0).unwrap();
        let cancelled = add(&s.conn, 300, "c", "agent", None, 0).unwrap();
        add(&s.conn, 400, "d", "operator", None, 0).unwrap();
        cancel(&s.conn, cancelled, 1).unwrap();
        assert_eq!(count_pending_by(&s.conn, "agent").unwrap(), 2);
        assert_eq!(count_pending_by(&s.conn, "operator").unwrap(), 1);
        // A claimed wake is no longer pending.
        let run =
            crate::store::runs::create(&s.conn, 1, 1, 1, crate::store::runs::StartedBy::Tick, 150)
                .unwrap();
        claim_due(&s.conn, run, 150).unwrap();
        assert_eq!(count_pending_by(&s.conn, "agent").unwrap(), 1);
    }
}
