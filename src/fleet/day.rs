//! Learning the day (issue 25, item 3): how demand moves with the hour of the day, learned
//! from the passes' samples (`store::samples`, one row per pass: Curio's completions as each
//! pass read them), and when that profile may be believed.
//!
//! - An hour of history (a [`Cell`]) is the mean of its samples' last-15-minutes rate (the
//!   completions times 4, each counted in the hour of its window's middle), with at least
//!   [`CELL_MIN_SAMPLES`] readings; it is `saturated` when most of them saw a backlog (every
//!   worker busy): the market then gave more than the fleet took, and the cell is a floor
//!   under demand, not its measure.
//! - The profile of an hour of the day (UTC) is the mean of its cells over the last
//!   [`PROFILE_DAYS`] days, each cell counted only once its hour has ended, a saturated cell
//!   as no less than the mean of the unsaturated ones ([`estimate`]): a floor under demand
//!   averaged in as its measure would pull the hour down, and a rise the fleet was late for
//!   once would be foretold smaller than it is.
//! - It is believed ([`DayProfile::trusted`]) only when the history covers at least
//!   [`MIN_HOURS_KNOWN`] hours of the day on an earlier day, and the last [`CHECK_HOURS`]
//!   whole hours came out as the profile foretold them (from the days before each): a mean
//!   error, beyond two Poisson deviations, of at most [`MAX_ERROR`]. A saturated hour that
//!   came out under its forecast agrees with it (demand may well have been there). Otherwise
//!   the rules react alone, as before: a forecast that was wrong in the last hours counts
//!   for nothing.
//!
//! The rules use a believed profile twice (`policy::rules`): they rent ahead of a rise it
//! shows, by a normal boot (`rules::launches::ahead`), and they hold an idle instance that it
//! says will be needed again within the stop's payback time (`rules::stops::surplus`).
//! Pure: `run::observe` reads the cells and builds the profile for the snapshot, `inspect`
//! the same way.

use serde::Serialize;

use crate::clock::Millis;

pub const HOUR_MS: Millis = 3_600_000;
pub const DAY_MS: Millis = 86_400_000;
/// Days of history the profile is learned from.
pub const PROFILE_DAYS: i64 = 7;
/// An hour of samples counts with at least this many readings (12 at the 5-minute timer).
pub const CELL_MIN_SAMPLES: u32 = 3;
/// Hours of the day the history must know from an earlier day before it is believed.
pub const MIN_HOURS_KNOWN: usize = 20;
/// Whole hours, the latest, checked against what the profile foretold for them.
pub const CHECK_HOURS: i64 = 3;
/// Of those, at least this many must have a forecast and a reading.
pub const CHECK_MIN: usize = 2;
/// The mean error (share of the larger of forecast and reading, beyond two Poisson
/// deviations) over the checked hours above which the profile counts for nothing.
pub const MAX_ERROR: f64 = 0.2;

/// One hour of history (`store::samples::Cell`: the store reads and caches them).
pub use crate::store::samples::Cell;

/// One hour of the day as learned.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Hour {
    /// The UTC hour, 0-23.
    pub hour: u32,
    /// Proofs/h the history shows then (the mean of its days, see [`estimate`]).
    pub pph: f64,
    /// Days that showed it.
    pub days: u32,
    /// Of those, days on which the fleet was saturated then: demand was at least `pph`.
    pub saturated_days: u32,
}

/// The profile as of `now`, and whether the rules believe it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DayProfile {
    /// When it was learned.
    pub now: Millis,
    /// The hours of the day the history knows, by UTC hour (those it does not are absent).
    pub hours: Vec<Hour>,
    /// Hours of history the profile spans (the oldest cell's start to `now`).
    pub history_hours: f64,
    /// The rules use it: enough history, and the last hours came out as it foretold.
    pub trusted: bool,
    /// Why it is believed or not, one line.
    pub why: String,
    /// The mean error over the checked hours (None: not checked).
    pub error: Option<f64>,
    /// The hours of history it was learned from, as read (the pass caches the complete ones,
    /// `run::sample`, rather than read them twice).
    #[serde(skip)]
    pub cells: Vec<Cell>,
}

pub fn hour_of_day(at: Millis) -> u32 {
    (at.rem_euclid(DAY_MS) / HOUR_MS) as u32
}

impl DayProfile {
    /// Said why the history stays short where the timer alone reads an hour fewer than
    /// [`CELL_MIN_SAMPLES`] times (`run.timer_period_secs` over 1,200 s): only hours that
    /// other passes read too (triggers, wakes) count, and "history short" would read as a
    /// wait that may never end (a walkthrough waited 48 hours at 1,800 s).
    pub fn with_period(mut self, period_secs: u64) -> DayProfile {
        let per_hour = 3_600 / period_secs.max(1);
        if !self.trusted
            && self.why.starts_with("history short")
            && per_hour < u64::from(CELL_MIN_SAMPLES)
        {
            self.why.push_str(&format!(
                " (an hour counts with {CELL_MIN_SAMPLES} readings; run.timer_period_secs = {period_secs} reads {per_hour} an hour: only hours that more passes read count; at most {} s learns every hour)",
                3_600 / u64::from(CELL_MIN_SAMPLES)
            ));
        }
        self
    }

    /// Learn the profile at `now` from `cells` (oldest first, as `samples::hourly` reads
    /// them; cells older than [`PROFILE_DAYS`] or not yet ended are left out).
    pub fn learn(cells: &[Cell], now: Millis) -> DayProfile {
        let from = now - PROFILE_DAYS * DAY_MS;
        let ended: Vec<&Cell> = cells
            .iter()
            .filter(|c| c.start >= from && c.start + HOUR_MS <= now)
            .collect();
        let mut hours = Vec::new();
        for h in 0..24u32 {
            let of_h: Vec<&&Cell> = ended.iter().filter(|c| hour_of_day(c.start) == h).collect();
            if of_h.is_empty() {
                continue;
            }
            hours.push(Hour {
                hour: h,
                pph: estimate(of_h.iter().map(|c| **c)).unwrap_or(0.0),
                days: of_h.len() as u32,
                saturated_days: of_h.iter().filter(|c| c.saturated).count() as u32,
            });
        }
        let history_hours = ended
            .first()
            .map_or(0.0, |c| (now - c.start) as f64 / HOUR_MS as f64);
        // Hours of the day known from a day before the current one (UTC): what a forecast
        // of the hours ahead reads. Yesterday's evening counts this afternoon: it is what
        // the coming hours will be foretold from.
        let today = now - now.rem_euclid(DAY_MS);
        let known = (0..24u32)
            .filter(|h| {
                ended
                    .iter()
                    .any(|c| hour_of_day(c.start) == *h && c.start < today)
            })
            .count();
        let (trusted, why, error) = if known < MIN_HOURS_KNOWN {
            (
                false,
                format!(
                    "history short: {known} of 24 hours of the day seen on an earlier day (needs {MIN_HOURS_KNOWN}); reacting alone"
                ),
                None,
            )
        } else {
            check(&ended, now)
        };
        DayProfile {
            now,
            hours,
            history_hours,
            trusted,
            why,
            error,
            cells: cells.to_vec(),
        }
    }

    /// Proofs/h the profile shows at the hour of `at` (None: that hour is not known).
    pub fn at(&self, at: Millis) -> Option<f64> {
        let h = hour_of_day(at);
        self.hours.iter().find(|x| x.hour == h).map(|x| x.pph)
    }

    /// The most the profile shows over the hours that `[from, to]` touches (None: none of
    /// them known).
    pub fn max_over(&self, from: Millis, to: Millis) -> Option<f64> {
        let mut t = from - from.rem_euclid(HOUR_MS);
        let mut best: Option<f64> = None;
        while t <= to {
            if let Some(v) = self.at(t) {
                best = Some(best.map_or(v, |b: f64| b.max(v)));
            }
            t += HOUR_MS;
        }
        best
    }
}

/// Did the last [`CHECK_HOURS`] whole hours come out as the days before them foretold?
fn check(ended: &[&Cell], now: Millis) -> (bool, String, Option<f64>) {
    let this_hour = now - now.rem_euclid(HOUR_MS);
    let mut errors = Vec::new();
    for back in 1..=CHECK_HOURS {
        let start = this_hour - back * HOUR_MS;
        let Some(cell) = ended.iter().find(|c| c.start == start) else {
            continue;
        };
        let before = ended.iter().copied().filter(|c| {
            c.start < start
                && c.start >= start - PROFILE_DAYS * DAY_MS
                && hour_of_day(c.start) == hour_of_day(start)
        });
        let Some(foretold) = estimate(before) else {
            continue;
        };
        errors.push(error(foretold, cell));
    }
    if errors.len() < CHECK_MIN {
        return (
            false,
            format!(
                "the last {CHECK_HOURS} hours cannot be checked ({} of them foretold and read, needs {CHECK_MIN}); reacting alone",
                errors.len()
            ),
            None,
        );
    }
    let mean = errors.iter().sum::<f64>() / errors.len() as f64;
    let pct = (mean * 100.0).round();
    if mean > MAX_ERROR {
        (
            false,
            format!(
                "the forecast was off by {pct}% over the last {} hours (at most {}%); reacting alone",
                errors.len(),
                (MAX_ERROR * 100.0).round()
            ),
            Some(mean),
        )
    } else {
        (
            true,
            format!(
                "the last {} hours came within {pct}% of the forecast",
                errors.len()
            ),
            Some(mean),
        )
    }
}

/// What the cells of one hour of the day (on several days) show of its demand: their mean,
/// each saturated cell counted as no less than the mean of the unsaturated ones (a saturated
/// hour read what the fleet took, and the market gave at least that). None without a cell.
fn estimate<'a>(cells: impl Iterator<Item = &'a Cell>) -> Option<f64> {
    let cells: Vec<&Cell> = cells.collect();
    if cells.is_empty() {
        return None;
    }
    let free: Vec<f64> = cells
        .iter()
        .filter(|c| !c.saturated)
        .map(|c| c.pph)
        .collect();
    let floor = if free.is_empty() {
        0.0
    } else {
        free.iter().sum::<f64>() / free.len() as f64
    };
    let sum: f64 = cells
        .iter()
        .map(|c| if c.saturated { c.pph.max(floor) } else { c.pph })
        .sum();
    Some(sum / cells.len() as f64)
}

/// How far a reading fell from its forecast: beyond two Poisson deviations, as a share of
/// the larger of the two; 0 for a saturated hour that came out under it (demand may have
/// been there, the fleet could not take it).
fn error(foretold: f64, cell: &Cell) -> f64 {
    if cell.saturated && cell.pph <= foretold {
        return 0.0;
    }
    let gap = (cell.pph - foretold).abs() - 2.0 * foretold.max(1.0).sqrt();
    gap.max(0.0) / foretold.max(cell.pph).max(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY0: Millis = 1_772_409_600_000; // a UTC midnight

    /// `days` whole days of hourly cells from DAY0 at `rate(hour of day)`.
    fn cells(days: i64, rate: impl Fn(u32) -> f64) -> Vec<Cell> {
        (0..days * 24)
            .map(|i| {
                let start = DAY0 + i * HOUR_MS;
                Cell {
                    start,
                    pph: rate(hour_of_day(start)),
                    samples: 12,
                    saturated: false,
                }
            })
            .collect()
    }

    fn day(h: u32) -> f64 {
        if (8..18).contains(&h) {
            400.0
        } else {
            120.0
        }
    }

    #[test]
    fn a_day_of_history_is_learned_and_believed_when_the_present_agrees() {
        let c = cells(2, day);
        let p = DayProfile::learn(&c, DAY0 + 2 * DAY_MS);
        assert!(p.trusted, "{}", p.why);
        assert_eq!(p.hours.len(), 24);
        assert_eq!(p.at(DAY0 + 2 * DAY_MS + 9 * HOUR_MS), Some(400.0));
        assert_eq!(p.at(DAY0 + 2 * DAY_MS + 3 * HOUR_MS), Some(120.0));
        assert_eq!(p.hours[9].days, 2);
        assert_eq!(p.error, Some(0.0));
        // The rise at 08:00 is seen from 07:45 on.
        let now = DAY0 + 2 * DAY_MS + 7 * HOUR_MS + 45 * 60_000;
        assert_eq!(p.max_over(now, now + 10 * 60_000), Some(120.0));
        assert_eq!(p.max_over(now, now + 15 * 60_000), Some(400.0));
        assert_eq!(p.max_over(now - HOUR_MS, now - 50 * 60_000), Some(120.0));
    }

    #[test]
    fn less_than_a_day_of_history_is_not_believed() {
        let c = cells(1, day);
        let p = DayProfile::learn(&c[..20], DAY0 + 20 * HOUR_MS);
        assert!(!p.trusted);
        assert!(p.why.starts_with("history short: 0 of 24"), "{}", p.why);
        assert_eq!(p.hours.len(), 20);
        // At the 5-minute timer the reason stays as it is; at 30 minutes an hour is read
        // twice, under the 3 an hour needs: said.
        assert_eq!(p.clone().with_period(300).why, p.why);
        let sparse = p.clone().with_period(1_800).why;
        assert!(
            sparse.ends_with("run.timer_period_secs = 1800 reads 2 an hour: only hours that more passes read count; at most 1200 s learns every hour)"),
            "{sparse}"
        );
        assert_eq!(p.clone().with_period(1_200).why, p.why);
        // Installed at 05:00: on the next day, 19 hours of the day seen on an earlier day,
        // whatever the hour; the day after, all 24.
        let c = cells(3, day);
        let p = DayProfile::learn(&c[5..42], DAY0 + 42 * HOUR_MS);
        assert!(!p.trusted);
        assert!(p.why.starts_with("history short: 19 of 24"), "{}", p.why);
        let p = DayProfile::learn(&c[5..51], DAY0 + 51 * HOUR_MS);
        assert!(p.trusted, "{}", p.why);
        // Installed at midnight: at 18:00 on the next day yesterday's evening counts (it is
        // what the coming hours are foretold from), and the last 3 hours agree.
        let p = DayProfile::learn(&c[..42], DAY0 + 42 * HOUR_MS);
        assert!(p.trusted, "{}", p.why);
    }

    #[test]
    fn a_forecast_wrong_in_the_last_hours_counts_for_nothing() {
        let mut c = cells(2, day);
        // Today's 21:00-24:00 read 300 where the day before read 120.
        for cell in c.iter_mut().skip(24 + 21) {
            cell.pph = 300.0;
        }
        let p = DayProfile::learn(&c, DAY0 + 2 * DAY_MS);
        assert!(!p.trusted);
        assert!(p.why.starts_with("the forecast was off by"), "{}", p.why);
        assert!(p.error.unwrap() > MAX_ERROR);
    }

    #[test]
    fn noise_within_two_poisson_deviations_is_no_error() {
        let mut c = cells(2, day);
        for cell in c.iter_mut().skip(24 + 21) {
            cell.pph = 120.0 + 2.0 * 120f64.sqrt() - 0.5;
        }
        let p = DayProfile::learn(&c, DAY0 + 2 * DAY_MS);
        assert!(p.trusted, "{}", p.why);
        assert_eq!(p.error, Some(0.0));
    }

    #[test]
    fn a_saturated_hour_under_its_forecast_agrees_with_it() {
        let mut c = cells(2, day);
        for cell in c.iter_mut().skip(24 + 21) {
            cell.pph = 60.0;
            cell.saturated = true;
        }
        let p = DayProfile::learn(&c, DAY0 + 2 * DAY_MS);
        assert!(p.trusted, "{}", p.why);
        // Not saturated, the same reading is an error.
        for cell in c.iter_mut().skip(24 + 21) {
            cell.saturated = false;
        }
        assert!(!DayProfile::learn(&c, DAY0 + 2 * DAY_MS).trusted);
    }

    #[test]
    fn missing_recent_hours_cannot_be_checked() {
        let c = cells(2, day);
        // The management host was down for the last two hours.
        let p = DayProfile::learn(&c[..46], DAY0 + 2 * DAY_MS);
        assert!(!p.trusted);
        assert!(p.why.contains("cannot be checked (1 of them"), "{}", p.why);
    }

    #[test]
    fn the_profile_is_the_mean_of_the_last_week_and_skips_an_unended_hour() {
        let mut c = cells(9, |_| 100.0);
        // The oldest two days (past the week) read 1000: not counted.
        for cell in c.iter_mut().take(48) {
            cell.pph = 1000.0;
        }
        // Day 8's 05:00 read 170: the mean of the week's 7 days at 05:00 is 110.
        c[8 * 24 + 5].pph = 170.0;
        let now = DAY0 + 9 * DAY_MS;
        let p = DayProfile::learn(&c, now);
        assert_eq!(p.hours[5].pph, 110.0);
        assert_eq!(p.hours[5].days, 7);
        assert_eq!(p.hours[6].pph, 100.0);
        // An hour that has not ended does not count.
        let p = DayProfile::learn(&c, now - 30 * 60_000);
        assert_eq!(p.hours[23].days, 6);
    }

    #[test]
    fn a_saturated_hour_counts_as_no_less_than_the_free_days_showed() {
        // 08:00 on three days: free at 300 and 280, saturated at 190 (the fleet was late
        // for the rise): 190 is a floor, counted as the free days' mean, 290.
        let mut c = cells(3, |_| 100.0);
        c[8].pph = 190.0;
        c[8].saturated = true;
        c[24 + 8].pph = 300.0;
        c[2 * 24 + 8].pph = 280.0;
        let p = DayProfile::learn(&c, DAY0 + 3 * DAY_MS);
        assert_eq!(p.hours[8].pph, 290.0);
        assert_eq!(p.hours[8].saturated_days, 1);
        // A saturated hour above them stays as read: (400 + 300 + 280) / 3.
        c[8].pph = 400.0;
        let p = DayProfile::learn(&c, DAY0 + 3 * DAY_MS);
        assert!(
            (p.hours[8].pph - 326.666).abs() < 0.01,
            "{}",
            p.hours[8].pph
        );
        // Every day saturated: the mean of what they read.
        for d in 0..3 {
            c[d * 24 + 8].saturated = true;
        }
        let p = DayProfile::learn(&c, DAY0 + 3 * DAY_MS);
        assert!(
            (p.hours[8].pph - 326.666).abs() < 0.01,
            "{}",
            p.hours[8].pph
        );
    }
}
