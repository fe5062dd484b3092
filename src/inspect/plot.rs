//! `inspect --plot FILE [--hours H]`: the database's samples of the last H hours (one per pass,
//! `store::samples`) as the panels `sim --plot` draws, with `crate::plot`.
//!
//! The time axis is the asked window (H hours to now), in UTC clock time. Nothing is made up:
//! a pass whose demand probe failed leaves a gap in the demand lines, an unknown price (or a
//! reading that could not tell our completions apart) a gap in revenue and profit, and a
//! stretch with no pass at all (more than [`MIN_BREAK_MS`], or three times the usual
//! spacing) a gap in every line. Revenue and profit count our own completions only.

use anyhow::Result;

use crate::clock::{rfc3339, Millis};
use crate::fleet::day::DayProfile;
use crate::plot::{self, Chart, Panel, Series};
use crate::store::samples::{self, Sample};
use crate::store::Store;

const HOUR_MS: f64 = 3_600_000.0;
/// No sample for this long (the timer runs a pass every 5 minutes) is a break in the lines.
pub const MIN_BREAK_MS: Millis = 15 * 60_000;

/// What `inspect --plot` drew.
pub struct Drawn {
    pub svg: String,
    pub samples: usize,
    /// Samples whose demand probe failed.
    pub without_demand: usize,
    /// Samples taken while the price of a proof was unknown.
    pub without_price: usize,
    /// The time axis drawn (ms since the epoch: the asked window) and its tick labels.
    pub x_range: (Millis, Millis),
    pub ticks: Vec<String>,
}

/// The panels titles, top to bottom (tests look for them).
pub const TITLES: [&str; 5] = [
    "PSProve queue",
    "Fleet (our instances)",
    "Throughput (proofs/h) against target and work seen",
    "Spend, revenue and profit ($/h)",
    "Spend and profit (dollars, cumulative)",
];

/// Read the samples of the last `hours` before `now` and draw them, with the day profile
/// learned at `now` (`fleet::day`; None while `policy.learn_day` is off) on the throughput
/// panel.
pub fn draw(store: &Store, now: Millis, hours: f64, day: Option<&DayProfile>) -> Result<Drawn> {
    let since = now - (hours * HOUR_MS) as Millis;
    let mut rows = samples::since(&store.conn, since)?;
    // A sample stamped after now (a clock set back) is outside the window drawn.
    rows.retain(|s| s.at <= now);
    Ok(chart(&rows, now, hours, day))
}

/// One x position of the chart (ms since the epoch): a sample, or a break between two (every
/// value unknown).
struct Point<'a> {
    x: f64,
    s: Option<&'a Sample>,
}

/// The spacing past which two samples are not joined: 3x the median spacing, at least
/// [`MIN_BREAK_MS`].
fn break_after(rows: &[Sample]) -> Millis {
    let mut gaps: Vec<Millis> = rows.windows(2).map(|w| w[1].at - w[0].at).collect();
    gaps.sort_unstable();
    let median = gaps.get(gaps.len() / 2).copied().unwrap_or(0);
    (3 * median).max(MIN_BREAK_MS)
}

/// Revenue in $/h: our completions of the last hour at the price of a proof (None: either
/// unknown).
fn revenue(s: &Sample) -> Option<f64> {
    Some(f64::from(s.ours_completed_1h?) * s.revenue_per_proof?)
}

/// The chart's positions: every sample, and a break where no pass ran for too long.
fn points(rows: &[Sample]) -> Vec<Point<'_>> {
    let limit = break_after(rows);
    let mut points = Vec::with_capacity(rows.len());
    for (i, s) in rows.iter().enumerate() {
        if i > 0 && s.at - rows[i - 1].at > limit {
            points.push(Point {
                x: ((s.at + rows[i - 1].at) / 2) as f64,
                s: None,
            });
        }
        points.push(Point {
            x: s.at as f64,
            s: Some(s),
        });
    }
    points
}

/// Cumulative dollars over the sampled intervals (a break is not counted), `(spend, profit)`:
/// spend at the $/h of each interval's first sample; profit over the intervals whose first
/// sample knew it, shown where the sample knows it.
fn cumulative(points: &[Point<'_>]) -> (Vec<Option<f64>>, Vec<Option<f64>>) {
    let (mut spend, mut profit) = (0.0, 0.0);
    let mut spend_cum = Vec::with_capacity(points.len());
    let mut profit_cum = Vec::with_capacity(points.len());
    let mut prev: Option<&Sample> = None;
    for p in points {
        let Some(s) = p.s else {
            prev = None;
            spend_cum.push(None);
            profit_cum.push(None);
            continue;
        };
        if let Some(a) = prev {
            let dt = (s.at - a.at) as f64 / HOUR_MS;
            spend += a.fleet_dph * dt;
            if let Some(r) = revenue(a) {
                profit += (r - a.fleet_dph) * dt;
            }
        }
        prev = Some(s);
        spend_cum.push(Some(spend));
        profit_cum.push(revenue(s).map(|_| profit));
    }
    (spend_cum, profit_cum)
}

fn chart(rows: &[Sample], now: Millis, hours: f64, day: Option<&DayProfile>) -> Drawn {
    let points = points(rows);
    let (spend_cum, profit_cum) = cumulative(&points);
    let col = |f: &dyn Fn(&Sample) -> Option<f64>| -> Vec<Option<f64>> {
        points.iter().map(|p| p.s.and_then(f)).collect()
    };
    let series = |name: &str, color: &'static str, dashed: bool, values: Vec<Option<f64>>| Series {
        name: name.to_string(),
        color,
        dashed,
        values,
    };
    let count = |f: fn(&u32) -> f64, v: Option<u32>| v.as_ref().map(f);
    let n = |v: &u32| f64::from(*v);
    let demand_gaps = "gaps: no demand reading (the probe failed) or no pass ran";
    let panels = vec![
        Panel {
            title: TITLES[0].into(),
            series: vec![
                series("pending", "#d62728", false, col(&|s| count(n, s.pending))),
                series("running", "#1f77b4", false, col(&|s| count(n, s.running))),
                series(
                    "stale owner",
                    "#7f7f7f",
                    true,
                    col(&|s| count(n, s.running_stale)),
                ),
            ],
            note: Some(demand_gaps.into()),
            integer: true,
        },
        Panel {
            title: TITLES[1].into(),
            series: vec![
                series("proving", "#2ca02c", false, col(&|s| Some(n(&s.ours_proving)))),
                series("booting", "#ff7f0e", false, col(&|s| Some(n(&s.ours_booting)))),
                series("billing", "#8c564b", true, col(&|s| Some(n(&s.ours_billing)))),
            ],
            note: Some(
                "proving: registered or proving in Curio; booting: launching, loading or no worker yet; billing: all but stopped"
                    .into(),
            ),
            integer: true,
        },
        Panel {
            title: TITLES[2].into(),
            series: vec![
                series(
                    "ours (1h)",
                    "#1f77b4",
                    false,
                    col(&|s| count(n, s.ours_completed_1h)),
                ),
                series(
                    "others (1h)",
                    "#17becf",
                    true,
                    col(&|s| Some(f64::from(s.completed_1h?.saturating_sub(s.ours_completed_1h?)))),
                ),
                series(
                    "work seen",
                    "#9467bd",
                    false,
                    col(&|s| {
                        let waiting = s.backlog.or(s.pending)?;
                        Some(f64::from(s.completed_1h?) + f64::from(waiting))
                    }),
                ),
                series("capacity (ours)", "#2ca02c", true, col(&|s| Some(s.capacity_pph))),
                series(
                    "target",
                    "#d62728",
                    true,
                    col(&|s| (s.target_pph > 0.0).then_some(s.target_pph)),
                ),
            ]
            .into_iter()
            .chain(day.map(|p| {
                let name = if p.trusted {
                    "day profile (believed)"
                } else {
                    "day profile (not believed)"
                };
                series(name, "#e377c2", true, col(&|s| p.at(s.at)))
            }))
            .collect(),
            note: Some(format!(
                "completed in the last hour: ours by our instances' workers, others by the rest of the cluster; work seen = both + waiting now{}",
                day.map_or(String::new(), |p| format!(
                    "; day profile: what the history of the days before expects at that hour of the day ({})",
                    p.why
                ))
            )),
            integer: false,
        },
        Panel {
            title: TITLES[3].into(),
            series: vec![
                series("spend", "#8c564b", false, col(&|s| Some(s.fleet_dph))),
                series("revenue", "#2ca02c", false, col(&revenue)),
                series(
                    "profit",
                    "#1f77b4",
                    false,
                    col(&|s| Some(revenue(s)? - s.fleet_dph)),
                ),
            ],
            note: Some(
                "revenue = our completions of the last hour x the price of a proof; gaps: price or our completions unknown"
                    .into(),
            ),
            integer: false,
        },
        Panel {
            title: TITLES[4].into(),
            series: vec![
                series("spend", "#8c564b", false, spend_cum),
                series("profit", "#1f77b4", false, profit_cum),
            ],
            note: Some(
                "summed over the samples since the window's first; profit only over intervals with a known revenue"
                    .into(),
            ),
            integer: false,
        },
    ];
    let without_demand = rows.iter().filter(|s| !s.demand_ok).count();
    let without_price = rows
        .iter()
        .filter(|s| s.revenue_per_proof.is_none())
        .count();
    let window = format!("{} h", plot::trim(hours));
    // The asked window, whatever the samples span: --hours 1 and --hours 24 differ.
    let lo = now - (hours * HOUR_MS).round() as Millis;
    let title = if rows.is_empty() {
        format!(
            "fleetagent: no samples in the last {window} (to {})",
            rfc3339(now)
        )
    } else {
        format!(
            "fleetagent: the last {window} to {} ({} samples: {without_demand} without demand, {without_price} price unknown)",
            rfc3339(now),
            rows.len()
        )
    };
    let ticks = plot::time_ticks(lo, now);
    let tick_labels = ticks.iter().map(|(_, l)| l.clone()).collect();
    let svg = plot::svg(&Chart {
        title,
        x: points.iter().map(|p| p.x).collect(),
        x_lo: lo as f64,
        x_hi: now as f64,
        ticks,
        panels,
        message: rows
            .is_empty()
            .then(|| format!("no samples in the last {window}")),
    });
    Drawn {
        svg,
        samples: rows.len(),
        without_demand,
        without_price,
        x_range: (lo, now),
        ticks: tick_labels,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2027-01-15T08:00:00Z.
    const NOW: Millis = 1_800_000_000_000;

    fn at(mins_ago: i64, demand_ok: bool, price: Option<f64>) -> Sample {
        let d = |v: u32| demand_ok.then_some(v);
        Sample {
            run_id: Some(1),
            at: NOW - mins_ago * 60_000,
            demand_ok,
            pending: d(4),
            running: d(2),
            running_stale: d(1),
            backlog: d(3),
            live_workers: d(2),
            completed_15m: d(10),
            completed_1h: d(50),
            ours_completed_1h: d(40),
            ours_billing: 2,
            ours_booting: 1,
            ours_proving: 1,
            capacity_pph: 50.0,
            target_pph: 60.0,
            fleet_dph: 1.0,
            revenue_per_proof: price,
            saturated: demand_ok.then_some(false),
        }
    }

    #[test]
    fn every_panel_is_drawn_with_its_title() {
        let rows: Vec<Sample> = (0..12).rev().map(|m| at(m * 5, true, Some(0.05))).collect();
        let d = chart(&rows, NOW, 1.0, None);
        for t in TITLES {
            assert!(d.svg.contains(t), "{t}");
        }
        // 3 + 3 + 5 + 3 + 2 lines, none broken.
        assert_eq!(d.svg.matches("<polyline").count(), 16, "{}", d.svg);
        assert_eq!((d.samples, d.without_demand, d.without_price), (12, 0, 0));
        // The hour to 08:00 UTC, every 10 minutes on the clock.
        assert_eq!(d.x_range, (NOW - 3_600_000, NOW));
        assert_eq!(
            d.ticks,
            ["07:00", "07:10", "07:20", "07:30", "07:40", "07:50", "08:00"]
        );
        assert!(d.svg.contains(">07:10<"), "{}", d.svg);
    }

    #[test]
    fn the_asked_window_is_drawn_whatever_the_samples_span() {
        // Three samples a minute apart: one hour and one day are different axes.
        let rows: Vec<Sample> = (0..3).rev().map(|m| at(m, true, Some(0.05))).collect();
        let hour = chart(&rows, NOW, 1.0, None);
        let day = chart(&rows, NOW, 24.0, None);
        assert_eq!(hour.x_range, (NOW - 3_600_000, NOW));
        assert_eq!(day.x_range, (NOW - 86_400_000, NOW));
        assert_eq!(
            day.ticks,
            [
                "01-14 09:00",
                "12:00",
                "15:00",
                "18:00",
                "21:00",
                "01-15 00:00",
                "03:00",
                "06:00"
            ]
        );
        assert_ne!(hour.svg, day.svg);
        // Half an hour: every 5 minutes, seconds never.
        assert_eq!(chart(&rows, NOW, 0.5, None).ticks.len(), 7);
    }

    #[test]
    fn revenue_and_profit_count_our_completions_and_others_are_drawn_apart() {
        let mut rows: Vec<Sample> = (0..6).rev().map(|m| at(m * 5, true, Some(0.05))).collect();
        // 40 of ours at $0.05 = $2/h against $1/h: $1/h of profit (the cluster's 50 would
        // say $1.50/h).
        assert_eq!(revenue(&rows[0]), Some(2.0));
        // A reading that could not tell ours apart: revenue unknown, not the cluster's.
        rows[3].ours_completed_1h = None;
        assert_eq!(revenue(&rows[3]), None);
        let d = chart(&rows, NOW, 1.0, None);
        assert!(d.svg.contains(">others (1h)<"), "{}", d.svg);
        let (_, profit) = cumulative(&points(&rows));
        assert_eq!(profit[3], None);
    }

    #[test]
    fn a_failed_probe_is_a_gap_not_a_zero_and_so_is_an_unknown_price() {
        let mut rows: Vec<Sample> = (0..6).rev().map(|m| at(m * 5, true, Some(0.05))).collect();
        rows[2] = at(15, false, None);
        let d = chart(&rows, NOW, 24.0, None);
        assert_eq!((d.without_demand, d.without_price), (1, 1));
        // 40 proofs/h at $0.05 = $2/h against $1/h: $1/h of profit, over 5-minute intervals,
        // the one starting at the unknown sample not counted.
        let (_, profit) = cumulative(&points(&rows));
        assert_eq!(profit[2], None);
        let last = profit.last().unwrap().unwrap();
        assert!((last - 4.0 / 12.0).abs() < 1e-9, "{profit:?}");
        // Every demand and money line but spend breaks in two: queue 3, throughput 3
        // (ours, others, work seen), revenue and profit, the cumulative profit.
        let broken = 3 + 3 + 2 + 1;
        let whole = 3 + 2 + 1 + 1;
        assert_eq!(
            d.svg.matches("<polyline").count(),
            2 * broken + whole,
            "{}",
            d.svg
        );
    }

    #[test]
    fn a_stretch_without_passes_breaks_every_line_and_counts_no_spend() {
        let mut rows: Vec<Sample> = (0..4).rev().map(|m| at(120 + m * 5, true, None)).collect();
        rows.extend((0..4).rev().map(|m| at(m * 5, true, None)));
        let d = chart(&rows, NOW, 24.0, None);
        // Price unknown: no revenue or profit at all; the rest 3 + 3 + 5 + 1 + 1, in two.
        assert_eq!(d.svg.matches("<polyline").count(), 2 * 13, "{}", d.svg);
        // 2 x 15 minutes at $1/h = $0.50, not the two hours between.
        let (spend, profit) = cumulative(&points(&rows));
        assert_eq!(spend.len(), rows.len() + 1);
        assert_eq!(spend[4], None);
        assert!(
            (spend.last().unwrap().unwrap() - 0.5).abs() < 1e-9,
            "{spend:?}"
        );
        assert!(profit.iter().all(Option::is_none));
    }

    #[test]
    fn no_samples_says_so_over_the_asked_window() {
        let d = chart(&[], NOW, 6.0, None);
        assert_eq!(d.samples, 0);
        assert!(d.svg.contains("no samples in the last 6 h"), "{}", d.svg);
        assert_eq!(d.x_range, (NOW - 6 * 3_600_000, NOW));
        assert_eq!(d.ticks.first().map(String::as_str), Some("02:00"));
    }

    #[test]
    fn the_day_profile_is_drawn_on_the_throughput_panel_saying_whether_it_is_believed() {
        let rows: Vec<Sample> = (0..6).rev().map(|m| at(m * 5, true, Some(0.05))).collect();
        let without = chart(&rows, NOW, 1.0, None);
        assert!(!without.svg.contains("day profile"), "{}", without.svg);
        let cells: Vec<crate::fleet::day::Cell> = (1..=48)
            .map(|h| crate::fleet::day::Cell {
                start: NOW - NOW.rem_euclid(3_600_000) - h * 3_600_000,
                pph: 70.0,
                samples: 12,
                saturated: false,
            })
            .collect();
        let p = DayProfile::learn(&cells, NOW);
        assert!(p.trusted, "{}", p.why);
        let with = chart(&rows, NOW, 1.0, Some(&p));
        assert!(
            with.svg.contains(">day profile (believed)<"),
            "{}",
            with.svg
        );
        assert!(
            with.svg.contains("came within 0% of the forecast"),
            "{}",
            with.svg
        );
        assert_eq!(
            with.svg.matches("<polyline").count(),
            without.svg.matches("<polyline").count() + 1
        );
    }
}
