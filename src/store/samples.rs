//! The `samples` table: one row per pass of the fleet and the demand as the pass saw them
//! (sql/0005_economics.sql), kept [`KEEP_MS`] and drawn by `inspect --plot`.

use anyhow::Result;
use rusqlite::{params, Connection};

use crate::clock::Millis;

/// How long samples are kept: 30 days.
pub const KEEP_MS: Millis = 30 * 86_400_000;

/// One pass's sample. The demand fields are None when the probe failed (`demand_ok` false),
/// and `backlog` also when the source does not read it; `revenue_per_proof` is None when the
/// price was unknown.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub run_id: Option<i64>,
    pub at: Millis,
    pub demand_ok: bool,
    pub pending: Option<u32>,
    pub running: Option<u32>,
    pub running_stale: Option<u32>,
    pub backlog: Option<u32>,
    pub live_workers: Option<u32>,
    pub completed_15m: Option<u32>,
    pub completed_1h: Option<u32>,
    /// Of `completed_1h`, those of our own instances' workers (None also when the reading
    /// could not tell them apart, and in samples stored before this column).
    pub ours_completed_1h: Option<u32>,
    pub ours_billing: u32,
    pub ours_booting: u32,
    pub ours_proving: u32,
    pub capacity_pph: f64,
    pub target_pph: f64,
    pub fleet_dph: f64,
    pub revenue_per_proof: Option<f64>,
}

/// Store one sample and drop those older than [`KEEP_MS`] before it (in the caller's
/// transaction: the pass's observe step).
pub fn record(conn: &Connection, s: &Sample) -> Result<()> {
    conn.prepare_cached(
        "INSERT INTO samples (run_id, at, demand_ok, pending, running, running_stale, backlog,
             live_workers, completed_15m, completed_1h, ours_billing, ours_booting, ours_proving,
             capacity_pph, target_pph, fleet_dph, revenue_per_proof, ours_completed_1h)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17,
                 ?18)",
    )?
    .execute(params![
        s.run_id,
        s.at,
        s.demand_ok,
        s.pending,
        s.running,
        s.running_stale,
        s.backlog,
        s.live_workers,
        s.completed_15m,
        s.completed_1h,
        s.ours_billing,
        s.ours_booting,
        s.ours_proving,
        s.capacity_pph,
        s.target_pph,
        s.fleet_dph,
        s.revenue_per_proof,
        s.ours_completed_1h,
    ])?;
    conn.prepare_cached("DELETE FROM samples WHERE at < ?1")?
        .execute([s.at - KEEP_MS])?;
    Ok(())
}

/// Samples taken at or after `since`, oldest first.
pub fn since(conn: &Connection, since: Millis) -> Result<Vec<Sample>> {
    let mut stmt = conn.prepare_cached(
        "SELECT run_id, at, demand_ok, pending, running, running_stale, backlog, live_workers,
             completed_15m, completed_1h, ours_billing, ours_booting, ours_proving,
             capacity_pph, target_pph, fleet_dph, revenue_per_proof, ours_completed_1h
         FROM samples WHERE at >= ?1 ORDER BY at, id",
    )?;
    let rows = stmt
        .query_map([since], |r| {
            Ok(Sample {
                run_id: r.get(0)?,
                at: r.get(1)?,
                demand_ok: r.get(2)?,
                pending: r.get(3)?,
                running: r.get(4)?,
                running_stale: r.get(5)?,
                backlog: r.get(6)?,
                live_workers: r.get(7)?,
                completed_15m: r.get(8)?,
                completed_1h: r.get(9)?,
                ours_billing: r.get(10)?,
                ours_booting: r.get(11)?,
                ours_proving: r.get(12)?,
                capacity_pph: r.get(13)?,
                target_pph: r.get(14)?,
                fleet_dph: r.get(15)?,
                revenue_per_proof: r.get(16)?,
                ours_completed_1h: r.get(17)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// The hours of history since `since` as the day profile reads them (`policy::day::Cell`),
/// oldest first: per whole UTC hour, the mean of the last-15-minutes rate (completions times
/// 4) of the samples whose window's middle falls in it, from passes that read demand, with
/// at least `min_samples` of them; saturated when most saw a backlog of `backlog_min` or more.
pub fn hourly(
    conn: &Connection,
    since: Millis,
    min_samples: u32,
    backlog_min: u32,
) -> Result<Vec<crate::policy::day::Cell>> {
    let mut stmt = conn.prepare_cached(
        "SELECT (at - 450000) / 3600000 AS hr, count(*), avg(completed_15m) * 4.0,
                avg(CASE WHEN coalesce(backlog, pending) >= ?2 THEN 1.0 ELSE 0.0 END)
         FROM samples
         WHERE at >= ?1 AND demand_ok AND completed_15m IS NOT NULL
         GROUP BY hr HAVING count(*) >= ?3 ORDER BY hr",
    )?;
    let rows = stmt
        .query_map(params![since, backlog_min, min_samples], |r| {
            Ok(crate::policy::day::Cell {
                start: r.get::<_, i64>(0)? * 3_600_000,
                samples: r.get(1)?,
                pph: r.get(2)?,
                saturated: r.get::<_, f64>(3)? > 0.5,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{OpenMode, Store};

    fn sample(at: Millis, demand_ok: bool) -> Sample {
        let d = |v: u32| demand_ok.then_some(v);
        Sample {
            run_id: None,
            at,
            demand_ok,
            pending: d(3),
            running: d(2),
            running_stale: d(0),
            backlog: None,
            live_workers: d(2),
            completed_15m: d(10),
            completed_1h: d(40),
            ours_completed_1h: d(25),
            ours_billing: 2,
            ours_booting: 0,
            ours_proving: 2,
            capacity_pph: 50.0,
            target_pph: 0.0,
            fleet_dph: 0.8,
            revenue_per_proof: demand_ok.then_some(0.05),
        }
    }

    #[test]
    fn a_sample_round_trips_with_its_unknowns_and_old_ones_are_pruned() {
        let dir = tempfile::tempdir().unwrap();
        let now = 100 * 86_400_000;
        let store = Store::open(dir.path(), OpenMode::Create, now).unwrap();
        let old = sample(now - KEEP_MS - 1, true);
        record(&store.conn, &old).unwrap();
        let kept = sample(now - KEEP_MS + 1, false);
        record(&store.conn, &kept).unwrap();
        // Recorded at `now`: the first is past 30 days, the second is not.
        let fresh = sample(now, true);
        record(&store.conn, &fresh).unwrap();
        assert_eq!(
            since(&store.conn, 0).unwrap(),
            vec![kept.clone(), fresh.clone()]
        );
        assert_eq!(since(&store.conn, now).unwrap(), vec![fresh]);
    }

    #[test]
    fn hourly_cells_average_the_quarter_rate_by_the_hour_of_its_window() {
        let dir = tempfile::tempdir().unwrap();
        let h0 = 100 * 86_400_000;
        let store = Store::open(dir.path(), OpenMode::Create, h0).unwrap();
        let at = |mins: i64| h0 + mins * 60_000;
        // 00:10 to 01:05 every 5 minutes, windows' middles in hour 0: 10 and 20 a quarter,
        // the ones at 00:05 and earlier fall in the hour before; 01:10 on falls in hour 1.
        for (k, m) in (10..=65).step_by(5).enumerate() {
            let mut s = sample(at(m), true);
            s.completed_15m = Some(if k % 2 == 0 { 10 } else { 20 });
            s.pending = Some(if k < 7 { 6 } else { 0 });
            record(&store.conn, &s).unwrap();
        }
        // Hour 1: two readings, one of them a failed probe; hour 2: one.
        record(&store.conn, &sample(at(70), true)).unwrap();
        record(&store.conn, &sample(at(75), false)).unwrap();
        record(&store.conn, &sample(at(140), true)).unwrap();
        let cells = hourly(&store.conn, 0, 1, 5).unwrap();
        assert_eq!(cells.len(), 3, "{cells:?}");
        assert_eq!(cells[0].start, h0);
        assert_eq!(cells[0].samples, 12);
        assert_eq!(cells[0].pph, 60.0);
        assert!(cells[0].saturated, "7 of 12 saw a backlog of 5 or more");
        assert_eq!(
            (cells[1].start, cells[1].samples, cells[1].pph),
            (h0 + 3_600_000, 1, 40.0)
        );
        assert!(!cells[1].saturated);
        // At least 3 readings: only the first hour; and `since` leaves out earlier samples.
        assert_eq!(hourly(&store.conn, 0, 3, 5).unwrap().len(), 1);
        assert_eq!(hourly(&store.conn, at(70), 1, 5).unwrap().len(), 2);
    }
}
