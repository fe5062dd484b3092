//! What fleetagent keeps of Curio between passes: the learned GPU rates (`measured_rates`),
//! since when work has waited (`agent_state.work_waiting_since`) and the last successful
//! demand reading with its time (`agent_state.last_reading`, `last_reading_at`).

use std::collections::BTreeMap;

use anyhow::Result;
use rusqlite::{params, Connection};

use crate::clock::Millis;

/// One GPU model's learned rate.
#[derive(Debug, Clone, PartialEq)]
pub struct MeasuredRate {
    pub gpu_name: String,
    pub proofs_per_hour: f64,
    pub proofs: i64,
    pub span_secs: i64,
    pub updated_at: Millis,
}

/// Every learned rate, by GPU name.
pub fn rates(conn: &Connection) -> Result<Vec<MeasuredRate>> {
    let mut stmt = conn.prepare_cached(
        "SELECT gpu_name, proofs_per_hour, proofs, span_secs, updated_at FROM measured_rates
         ORDER BY gpu_name",
    )?;
    let rows = stmt
        .query_map([], |r| {
            Ok(MeasuredRate {
                gpu_name: r.get(0)?,
                proofs_per_hour: r.get(1)?,
                proofs: r.get(2)?,
                span_secs: r.get(3)?,
                updated_at: r.get(4)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// GPU name -> proofs/h, of the rates measured at `since` or later.
pub fn rate_map(conn: &Connection, since: Millis) -> Result<BTreeMap<String, f64>> {
    Ok(counting(&rates(conn)?, since))
}

/// GPU name -> proofs/h of those of `rates` measured at `since` or later (`rate_map` over
/// rates already read: `inspect` shows every stored one beside those that count).
pub fn counting(rates: &[MeasuredRate], since: Millis) -> BTreeMap<String, f64> {
    rates
        .iter()
        .filter(|r| r.updated_at >= since)
        .map(|r| (r.gpu_name.clone(), r.proofs_per_hour))
        .collect()
}

/// Store a measurement (a GPU measured again replaces its row; others are kept).
pub fn set_rate(
    conn: &Connection,
    gpu_name: &str,
    proofs_per_hour: f64,
    proofs: u32,
    span_secs: u64,
    now: Millis,
) -> Result<()> {
    conn.execute(
        "INSERT INTO measured_rates (gpu_name, proofs_per_hour, proofs, span_secs, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT(gpu_name) DO UPDATE SET proofs_per_hour = excluded.proofs_per_hour,
            proofs = excluded.proofs, span_secs = excluded.span_secs,
            updated_at = excluded.updated_at",
        params![gpu_name, proofs_per_hour, proofs, span_secs as i64, now],
    )?;
    Ok(())
}

pub fn work_waiting_since(conn: &Connection) -> Result<Option<Millis>> {
    Ok(conn.query_row(
        "SELECT work_waiting_since FROM agent_state WHERE id = 1",
        [],
        |r| r.get(0),
    )?)
}

pub fn set_work_waiting_since(conn: &Connection, since: Option<Millis>) -> Result<()> {
    conn.execute(
        "UPDATE agent_state SET work_waiting_since = ?1 WHERE id = 1",
        params![since],
    )?;
    Ok(())
}

/// The last successful reading (the `Demand` JSON) and when it was read.
pub fn last_reading(conn: &Connection) -> Result<(Option<String>, Option<Millis>)> {
    Ok(conn.query_row(
        "SELECT last_reading, last_reading_at FROM agent_state WHERE id = 1",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?)
}

pub fn set_last_reading(conn: &Connection, json: &str, at: Millis) -> Result<()> {
    conn.execute(
        "UPDATE agent_state SET last_reading = ?1, last_reading_at = ?2 WHERE id = 1",
        params![json, at],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_store;

    #[test]
    fn rates_are_replaced_per_gpu_and_the_clock_and_reading_kept() {
        let (_dir, s) = test_store(0);
        assert!(rate_map(&s.conn, 0).unwrap().is_empty());
        set_rate(&s.conn, "RTX 4090", 40.0, 30, 3600, 1).unwrap();
        set_rate(&s.conn, "RTX 3090", 22.0, 10, 1200, 1).unwrap();
        set_rate(&s.conn, "RTX 4090", 42.0, 35, 4000, 2).unwrap();
        let all = rates(&s.conn).unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!((all[1].proofs_per_hour, all[1].updated_at), (42.0, 2));
        // Only those measured since the time asked count (the 3090's is older).
        let fresh = rate_map(&s.conn, 2).unwrap();
        assert_eq!(
            fresh.into_iter().collect::<Vec<_>>(),
            vec![("RTX 4090".to_string(), 42.0)]
        );
        assert_eq!(work_waiting_since(&s.conn).unwrap(), None);
        set_work_waiting_since(&s.conn, Some(5)).unwrap();
        assert_eq!(work_waiting_since(&s.conn).unwrap(), Some(5));
        assert_eq!(last_reading(&s.conn).unwrap(), (None, None));
        set_last_reading(&s.conn, "{}", 9).unwrap();
        assert_eq!(last_reading(&s.conn).unwrap(), (Some("{}".into()), Some(9)));
    }
}
