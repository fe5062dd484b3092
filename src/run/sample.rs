//! The pass's sample for `inspect --plot` (`store::samples`): what the observe step saw, one
//! row per pass, written in the observe step's transaction.
//!
//! A sample is a diagnostic, never a reason to fail a pass (a pass may be an emergency
//! launch): it is written under a savepoint, and if that write fails it is rolled back alone,
//! logged, and the pass goes on (the plot shows a missing sample as a gap). The pass's own
//! writes stay all-or-nothing: a database that cannot write fails them at commit anyway.

use anyhow::Result;
use rusqlite::Connection;

use crate::config::Config;
use crate::fleet::state::{BOOTED, LAUNCHING, LOADING, PROVING, REGISTERED};
use crate::fleet::Snapshot;
use crate::store::samples::{self, Sample};

/// Store this pass's sample (and drop those past 30 days) and, while `policy.learn_day` is
/// on, cache the hours of history that are now complete for the day profile
/// (`samples::cache_day_hours`); a failure is logged and rolled back alone. An `Err` is the
/// savepoint itself failing (the transaction is unusable).
pub fn record(conn: &Connection, snapshot: &Snapshot, config: &Config) -> Result<()> {
    alone(conn, |c| {
        samples::record(c, &of(snapshot, config))?;
        // The profile's cells were read at this pass's `now`, before this sample: it counts
        // in the hour of `now` less half a window, which is not complete yet, so nothing
        // cacheable is missing from them.
        if let Some(day) = &snapshot.day {
            samples::cache_day_hours(c, &day.cells, snapshot.now)?;
        }
        Ok(())
    })
}

/// Run `write` under a savepoint: kept when it succeeds, rolled back (and logged) when not.
fn alone(conn: &Connection, write: impl FnOnce(&Connection) -> Result<()>) -> Result<()> {
    conn.execute_batch("SAVEPOINT sample")?;
    match write(conn) {
        Ok(()) => conn.execute_batch("RELEASE sample")?,
        Err(e) => {
            log::warn!(
                "this pass's sample for inspect --plot (and the day profile's hours) was not stored: {e:#}"
            );
            conn.execute_batch("ROLLBACK TO sample; RELEASE sample")?;
        }
    }
    Ok(())
}

/// The sample of a snapshot: a failed probe leaves every demand field None (never zeros),
/// an unknown price `revenue_per_proof`; `ours_completed_1h` is None also when the reading
/// cannot tell our completions apart.
pub fn of(s: &Snapshot, config: &Config) -> Sample {
    let d = s.demand.as_ref();
    Sample {
        run_id: (s.run_id > 0).then_some(s.run_id),
        at: s.now,
        demand_ok: d.is_some(),
        pending: d.map(|d| d.pending),
        running: d.map(|d| d.running),
        running_stale: d.map(|d| d.running_stale),
        backlog: d.and_then(|d| d.backlog),
        live_workers: d.map(|d| d.live_workers()),
        completed_15m: d.map(|d| d.completed_15m),
        completed_1h: d.map(|d| d.completed_1h),
        ours_completed_1h: s.completions_1h().and_then(|c| c.ours),
        ours_billing: s.billing_count(),
        ours_booting: s.count_in(&[LAUNCHING, LOADING, BOOTED]),
        ours_proving: s.count_in(&[REGISTERED, PROVING]),
        capacity_pph: s.projected_pph(config),
        target_pph: config.policy.target_proofs_per_hour,
        fleet_dph: s.fleet_dph(),
        revenue_per_proof: s.price.as_ref().map(|p| p.revenue_per_proof),
        saturated: d.map(crate::policy::streaks::backlog),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{OpenMode, Store};

    #[test]
    fn a_failed_sample_is_rolled_back_alone_and_the_transaction_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path(), OpenMode::Create, 1_000).unwrap();
        let tx = store.immediate().unwrap();
        tx.execute("UPDATE agent_state SET fil_usd = 4.5", [])
            .unwrap();
        alone(&tx, |c| {
            c.execute(
                "INSERT INTO samples (at, demand_ok, ours_billing, ours_booting, ours_proving,
                     capacity_pph, target_pph, fleet_dph) VALUES (1, 1, 0, 0, 0, 0, 0, 0)",
                [],
            )?;
            // NOT NULL: the half-written sample must go with it.
            c.execute("INSERT INTO samples (at) VALUES (2)", [])?;
            Ok(())
        })
        .unwrap();
        tx.commit().unwrap();
        let n: i64 = store
            .conn
            .query_row("SELECT COUNT(*) FROM samples", [], |r| r.get(0))
            .unwrap();
        let fil: f64 = store
            .conn
            .query_row("SELECT fil_usd FROM agent_state", [], |r| r.get(0))
            .unwrap();
        assert_eq!((n, fil), (0, 4.5));
    }
}
