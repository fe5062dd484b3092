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
    /// Work waiting of at least the rules' backlog minimum with every live worker busy
    /// (`policy::streaks::backlog`); None when the probe failed, and in samples stored
    /// before this column.
    pub saturated: Option<bool>,
}

/// Store one sample and drop those older than [`KEEP_MS`] before it (in the caller's
/// transaction: the pass's observe step).
pub fn record(conn: &Connection, s: &Sample) -> Result<()> {
    conn.prepare_cached(
        "INSERT INTO samples (run_id, at, demand_ok, pending, running, running_stale, backlog,
             live_workers, completed_15m, completed_1h, ours_billing, ours_booting, ours_proving,
             capacity_pph, target_pph, fleet_dph, revenue_per_proof, ours_completed_1h,
             saturated)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17,
                 ?18, ?19)",
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
        s.saturated,
    ])?;
    conn.prepare_cached("DELETE FROM samples WHERE at < ?1")?
        .execute([s.at - KEEP_MS])?;
    Ok(())
}

/// Since when the passes have not known the price: the first sample without one after the
/// last sample that had one (the first of all when none had); None while the last sample
/// knows it, or before any sample.
pub fn price_unknown_since(conn: &Connection) -> Result<Option<Millis>> {
    let at = conn
        .prepare_cached(
            "SELECT MIN(at) FROM samples WHERE revenue_per_proof IS NULL AND at >
               COALESCE((SELECT at FROM samples WHERE revenue_per_proof IS NOT NULL
                          ORDER BY at DESC LIMIT 1), -1)",
        )?
        .query_row([], |r| r.get(0))?;
    Ok(at)
}

/// Samples taken at or after `since`, oldest first.
pub fn since(conn: &Connection, since: Millis) -> Result<Vec<Sample>> {
    let mut stmt = conn.prepare_cached(
        "SELECT run_id, at, demand_ok, pending, running, running_stale, backlog, live_workers,
             completed_15m, completed_1h, ours_billing, ours_booting, ours_proving,
             capacity_pph, target_pph, fleet_dph, revenue_per_proof, ours_completed_1h,
             saturated
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
                saturated: r.get(18)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// One hour of history as the day profile (`fleet::day`) reads it: its start (a whole UTC
/// hour), the mean rate its samples read (completions of the last 15 minutes times 4), how
/// many, and whether most of them saw a backlog with every worker busy (the market then gave
/// more than the fleet took: the hour is a floor under demand, not its measure).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Cell {
    pub start: Millis,
    pub pph: f64,
    pub samples: u32,
    pub saturated: bool,
}

/// How long the day profile's cached hours (`day_hours`, sql/0009_day_hours.sql) are kept:
/// 8 days (the profile reads 7).
pub const DAY_HOURS_KEEP_MS: Millis = 8 * 86_400_000;

const HOUR_MS: Millis = 3_600_000;
/// A sample counts in the hour of its 15-minute window's middle.
const HALF_WINDOW_MS: Millis = 450_000;

/// The hours of history from `since` (a whole hour) on, as the day profile reads them: the
/// cached ones (`day_hours`), then those summed from the samples after the last cached hour
/// ([`hourly`]), oldest first.
pub fn day_cells(
    conn: &Connection,
    since: Millis,
    min_samples: u32,
    backlog_min: u32,
) -> Result<Vec<Cell>> {
    let mut cells = conn
        .prepare_cached(
            "SELECT start, pph, samples, saturated FROM day_hours WHERE start >= ?1 ORDER BY start",
        )?
        .query_map([since], |r| {
            Ok(Cell {
                start: r.get(0)?,
                pph: r.get(1)?,
                samples: r.get(2)?,
                saturated: r.get(3)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let fresh_from = cells.last().map_or(since, |c| c.start + HOUR_MS);
    cells.extend(hourly(
        conn,
        fresh_from + HALF_WINDOW_MS,
        min_samples,
        backlog_min,
    )?);
    Ok(cells)
}

/// Cache the hours among `cells` whose samples are all in at `now` (the last one counting in
/// an hour is taken up to half a window after it ends) and not cached yet, and drop cached
/// hours older than [`DAY_HOURS_KEEP_MS`]. In the pass's transaction (`run::sample`).
pub fn cache_day_hours(conn: &Connection, cells: &[Cell], now: Millis) -> Result<()> {
    let mut insert = conn.prepare_cached(
        "INSERT OR IGNORE INTO day_hours (start, pph, samples, saturated) VALUES (?1, ?2, ?3, ?4)",
    )?;
    for c in cells
        .iter()
        .filter(|c| c.start + HOUR_MS + HALF_WINDOW_MS <= now)
    {
        insert.execute(params![c.start, c.pph, c.samples, c.saturated])?;
    }
    conn.prepare_cached("DELETE FROM day_hours WHERE start < ?1")?
        .execute([now - DAY_HOURS_KEEP_MS])?;
    Ok(())
}

/// The hours of history since `since` as the day profile reads them ([`Cell`]),
/// oldest first: per whole UTC hour, the mean of the last-15-minutes rate (completions times
/// 4) of the samples whose window's middle falls in it, from passes that read demand, with
/// at least `min_samples` of them; saturated when most were saturated (`Sample::saturated`;
/// a sample stored before that column: a backlog, else pending, of `backlog_min` or more
/// with as many tasks running as live workers, which orphan tasks on a dead day are not).
pub fn hourly(
    conn: &Connection,
    since: Millis,
    min_samples: u32,
    backlog_min: u32,
) -> Result<Vec<Cell>> {
    // Read in the index's order and summed here: a GROUP BY on the hour would sort every
    // row on every pass (a week of samples is 2,016 rows; the simulator runs a pass per
    // simulated 5 minutes).
    let mut stmt = conn.prepare_cached(
        "SELECT at, completed_15m,
                coalesce(saturated, coalesce(backlog, pending) >= ?2 AND live_workers > 0
                                    AND running >= live_workers)
         FROM samples
         WHERE at >= ?1 AND demand_ok AND completed_15m IS NOT NULL
         ORDER BY at",
    )?;
    let mut rows = stmt.query(params![since, backlog_min])?;
    let mut cells: Vec<Cell> = Vec::new();
    // The hour being summed: its start, readings, completions and readings with a backlog.
    let mut open: Option<(Millis, u32, u64, u32)> = None;
    let close = |c: (Millis, u32, u64, u32), cells: &mut Vec<Cell>| {
        if c.1 >= min_samples {
            cells.push(Cell {
                start: c.0,
                samples: c.1,
                pph: c.2 as f64 * 4.0 / f64::from(c.1),
                saturated: f64::from(c.3) / f64::from(c.1) > 0.5,
            });
        }
    };
    while let Some(r) = rows.next()? {
        let at: Millis = r.get(0)?;
        let done: u32 = r.get(1)?;
        let backlog: bool = r.get::<_, Option<bool>>(2)?.unwrap_or(false);
        let mid = at - HALF_WINDOW_MS;
        let start = mid - mid.rem_euclid(HOUR_MS);
        match open.as_mut() {
            Some(c) if c.0 == start => {
                c.1 += 1;
                c.2 += u64::from(done);
                c.3 += u32::from(backlog);
            }
            _ => {
                if let Some(c) = open.take() {
                    close(c, &mut cells);
                }
                open = Some((start, 1, u64::from(done), u32::from(backlog)));
            }
        }
    }
    if let Some(c) = open {
        close(c, &mut cells);
    }
    Ok(cells)
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
            saturated: demand_ok.then_some(false),
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
    fn the_price_is_unknown_since_the_first_sample_after_the_last_that_knew_it() {
        let dir = tempfile::tempdir().unwrap();
        let now = 100 * 86_400_000;
        let store = Store::open(dir.path(), OpenMode::Create, now).unwrap();
        assert_eq!(price_unknown_since(&store.conn).unwrap(), None);
        let priced = |at: Millis, known: bool| {
            let mut s = sample(at, true);
            s.revenue_per_proof = known.then_some(0.05);
            record(&store.conn, &s).unwrap();
        };
        priced(now - 50, false);
        assert_eq!(price_unknown_since(&store.conn).unwrap(), Some(now - 50));
        priced(now - 40, true);
        assert_eq!(price_unknown_since(&store.conn).unwrap(), None);
        priced(now - 30, false);
        priced(now - 20, false);
        assert_eq!(price_unknown_since(&store.conn).unwrap(), Some(now - 30));
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
            // Six waiting in every reading (orphan tasks among them, the walkthrough's dead
            // day): what counts is whether the pass saw the fleet saturated.
            s.pending = Some(6);
            s.saturated = Some(k < 7);
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
        assert!(cells[0].saturated, "7 of 12 saw the fleet saturated");
        assert_eq!(
            (cells[1].start, cells[1].samples, cells[1].pph),
            (h0 + 3_600_000, 1, 40.0)
        );
        assert!(!cells[1].saturated);
        // At least 3 readings: only the first hour; and `since` leaves out earlier samples.
        assert_eq!(hourly(&store.conn, 0, 3, 5).unwrap().len(), 1);
        assert_eq!(hourly(&store.conn, at(70), 1, 5).unwrap().len(), 2);
        // Only 6 of 12 saturated: not the hour.
        store
            .conn
            .execute("UPDATE samples SET saturated = 0 WHERE at = ?1", [at(40)])
            .unwrap();
        assert!(!hourly(&store.conn, 0, 1, 5).unwrap()[0].saturated);
        // Samples stored before the column: 6 waiting with every live worker running one is
        // a backlog; with workers idle (orphan tasks on a dead day: the re-test upgraded at
        // 06:50 and the old rows rented ahead at 07:30) it is not.
        store
            .conn
            .execute("UPDATE samples SET saturated = NULL", [])
            .unwrap();
        assert!(hourly(&store.conn, 0, 1, 5).unwrap()[0].saturated);
        store
            .conn
            .execute("UPDATE samples SET running = 0", [])
            .unwrap();
        assert!(!hourly(&store.conn, 0, 1, 5).unwrap()[0].saturated);
    }

    /// Migration 19 reads again the cached hours the old reading marked saturated, where
    /// their samples are kept: orphan tasks with every worker idle were never a backlog.
    #[test]
    fn migration_19_reads_cached_hours_again_by_their_samples() {
        let dir = tempfile::tempdir().unwrap();
        let h0 = 100 * 86_400_000;
        let store = Store::open(dir.path(), OpenMode::Create, h0).unwrap();
        for m in (10..=65).step_by(5) {
            let mut s = sample(h0 + m * 60_000, true);
            (s.pending, s.running, s.saturated) = (Some(6), Some(0), None);
            record(&store.conn, &s).unwrap();
        }
        let cached = |start: Millis, saturated: bool| {
            store
                .conn
                .execute(
                    "INSERT INTO day_hours (start, pph, samples, saturated) VALUES (?1, 40, 12, ?2)",
                    params![start, saturated],
                )
                .unwrap();
        };
        // Hour 0 has its samples; the hour before has none left (pruned): kept as it was.
        cached(h0, true);
        cached(h0 - HOUR_MS, true);
        let sql = include_str!("../../sql/0019_sample_saturated.sql");
        let update = &sql[sql.find("UPDATE day_hours").unwrap()..];
        store.conn.execute_batch(update).unwrap();
        let flags: Vec<bool> = store
            .conn
            .prepare("SELECT saturated FROM day_hours ORDER BY start")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert_eq!(flags, vec![true, false]);
    }

    #[test]
    fn complete_hours_are_cached_and_read_back_with_the_fresh_ones_after_them() {
        let dir = tempfile::tempdir().unwrap();
        let h0 = 100 * 86_400_000;
        let store = Store::open(dir.path(), OpenMode::Create, h0).unwrap();
        // Three hours of samples every 5 minutes (windows' middles from 00:00 on).
        for m in (0..180).step_by(5) {
            let mut s = sample(h0 + HALF_WINDOW_MS + m * 60_000, true);
            s.completed_15m = Some(10 + (m / 60) as u32);
            record(&store.conn, &s).unwrap();
        }
        let cells = day_cells(&store.conn, h0, 3, 5).unwrap();
        let rates: Vec<f64> = cells.iter().map(|c| c.pph).collect();
        assert_eq!(rates, vec![40.0, 44.0, 48.0]);
        // At 02:05 the first hour is complete (its last sample, 01:07:30, is in); the second
        // is not (01:07:30 past its end is 02:07:30): one hour cached.
        let now = h0 + 2 * HOUR_MS + 5 * 60_000;
        cache_day_hours(&store.conn, &cells, now).unwrap();
        let cached: i64 = store
            .conn
            .query_row("SELECT COUNT(*) FROM day_hours", [], |r| r.get(0))
            .unwrap();
        assert_eq!(cached, 1);
        // Read back: the cached hour, then the two summed from the samples: the same cells.
        assert_eq!(day_cells(&store.conn, h0, 3, 5).unwrap(), cells);
        // A cached hour is what is read, even if its samples went (pruned, or changed).
        store
            .conn
            .execute("DELETE FROM samples WHERE at < ?1", [h0 + HOUR_MS])
            .unwrap();
        assert_eq!(day_cells(&store.conn, h0, 3, 5).unwrap(), cells);
        // Hours older than 8 days go.
        cache_day_hours(&store.conn, &cells, h0 + DAY_HOURS_KEEP_MS + HOUR_MS).unwrap();
        let left: Vec<i64> = store
            .conn
            .prepare("SELECT start FROM day_hours ORDER BY start")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(left, vec![h0 + HOUR_MS, h0 + 2 * HOUR_MS]);
    }
}
