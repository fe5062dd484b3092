//! `scripts/bench sim`: the policy against the reactive bound and the clairvoyant oracle, per
//! scenario over seeds 1-10, and on how many seeds each of issue 17's aims holds:
//! - hours below target at most the bound's plus 0.25 h per demand change;
//! - $/proof at most 1.05x the bound's;
//! - profit at least 90 % of the oracle's, where a price is modelled;
//! - on steady, launches at most twice the oracle's plus two a day, and no rental ended
//!   within 30 minutes of its start except flagged instances.
//!
//! Every report carries the oracle and the reactive bound of its own world (same scenario,
//! seed and config), so one run per seed gives all three. Seeds run on every core.
//!
//! Then issue 25's aim on every built-in scenario: the rules against each peer (the report's
//! `peers`), per seed, and on how many seeds the rules beat every peer
//! (`peer_grid::print_peers_table`).

use fleetagent::sim::{self, report::Report, scenario, Options};

use crate::peer_grid;

const SCENARIOS: &[&str] = &[
    "steady",
    "spike",
    "incident",
    "price-drop",
    "outbid",
    "dead-market",
    "day-cycle",
];
const SEEDS: u64 = 10;
/// Hours below target the aim allows past the bound's, per demand change.
const HBT_PER_CHANGE: f64 = 0.25;
const COST_RATIO: f64 = 1.05;
const PROFIT_SHARE: f64 = 0.9;

fn options(name: &str, seed: u64) -> Options {
    Options {
        with_peers: true,
        ..Options::new(scenario::load(name).unwrap(), seed)
    }
}

/// Demand changes the aim allows for: the market's rate changes within the hours, and a
/// fleet dead at the start (the incident) counts as one.
fn changes(s: &scenario::Scenario) -> usize {
    s.market.changes(s.hours) + usize::from(s.start.pending > 0 || s.start.dead > 0)
}

struct Row {
    r: Report,
    allowed: f64,
}

impl Row {
    fn hours_ok(&self) -> bool {
        self.r.hours_below_target <= self.allowed + 1e-9
    }

    fn cost_ratio(&self) -> f64 {
        ratio(
            self.r.money.dollars_per_proof,
            self.r.reactive_bound.dollars_per_proof,
        )
    }

    fn cost_ok(&self) -> bool {
        self.cost_ratio() <= COST_RATIO + 1e-9
    }

    /// profit / the oracle's, where a price is modelled.
    fn profit_share(&self) -> Option<f64> {
        match (self.r.money.profit, self.r.oracle.profit) {
            (Some(p), Some(o)) if o > 0.0 => Some(p / o),
            _ => None,
        }
    }

    fn profit_ok(&self) -> Option<bool> {
        self.profit_share().map(|s| s >= PROFIT_SHARE - 1e-9)
    }

    fn days(&self) -> f64 {
        self.r.hours / 24.0
    }

    /// Launches within twice the oracle's plus two a day, and no short unflagged rental.
    fn churn_ok(&self) -> bool {
        let most = 2.0 * self.r.oracle.launches as f64 + 2.0 * self.days();
        self.r.launches.made as f64 <= most + 1e-9 && self.r.stops.within_30_mins_of_start == 0
    }
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        0.0
    }
}

fn money(x: Option<f64>) -> String {
    x.map_or("-".into(), |v| format!("{v:.2}"))
}

/// Every seed of `name`, on every core; `done` is seed 1's report when already run.
fn run_seeds(name: &str, done: Option<Report>) -> Vec<Row> {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let seeds: Vec<u64> = (1..=SEEDS).collect();
    let mut reports: Vec<(u64, Report)> = Vec::new();
    if let Some(r) = done {
        reports.push((1, r));
    }
    let todo: Vec<u64> = seeds
        .into_iter()
        .filter(|s| !reports.iter().any(|(k, _)| k == s))
        .collect();
    let chunks: Vec<Vec<u64>> = (0..threads)
        .map(|t| todo.iter().copied().skip(t).step_by(threads).collect())
        .collect();
    std::thread::scope(|scope| {
        let handles: Vec<_> = chunks
            .into_iter()
            .map(|chunk| {
                scope.spawn(move || {
                    chunk
                        .into_iter()
                        .map(|seed| (seed, sim::run(&options(name, seed)).unwrap().report))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for h in handles {
            reports.extend(h.join().unwrap());
        }
    });
    reports.sort_by_key(|(s, _)| *s);
    let s = scenario::load(name).unwrap();
    let extra = HBT_PER_CHANGE * changes(&s) as f64;
    reports
        .into_iter()
        .map(|(_, r)| Row {
            allowed: r.reactive_bound.hours_below_target + extra,
            r,
        })
        .collect()
}

/// One scenario over its seeds; returns its summary line.
fn print_scenario(name: &str, rows: &[Row]) -> String {
    let s = scenario::load(name).unwrap();
    println!();
    println!(
        "{name} ({} h, {} demand change(s)) over seeds 1-{}:",
        s.hours,
        changes(&s),
        rows.len()
    );
    println!(
        "{:>4} | {:>6} {:>6} {:>6} {:>7} | {:>8} {:>8} {:>6} | {:>8} {:>8} {:>6} | {:>7} {:>7} | {:>5}",
        "seed",
        "hbt",
        "bound",
        "oracle",
        "allowed",
        "$/proof",
        "bound",
        "ratio",
        "profit",
        "oracle",
        "share",
        "l/day",
        "o l/day",
        "short"
    );
    for (k, row) in rows.iter().enumerate() {
        let r = &row.r;
        println!(
            "{:>4} | {:>6.2} {:>6.2} {:>6.2} {:>7.2} | {:>8.4} {:>8.4} {:>5.2}x | {:>8} {:>8} {:>6} | {:>7.1} {:>7.1} | {:>2}+{:<2}",
            k + 1,
            r.hours_below_target,
            r.reactive_bound.hours_below_target,
            r.oracle.hours_below_target,
            row.allowed,
            r.money.dollars_per_proof,
            r.reactive_bound.dollars_per_proof,
            row.cost_ratio(),
            money(r.money.profit),
            money(r.oracle.profit),
            row.profit_share()
                .map_or("-".into(), |x| format!("{:.0}%", x * 100.0)),
            r.launches.per_day,
            r.oracle.launches as f64 / row.days(),
            r.stops.within_30_mins_of_start,
            r.stops.within_30_mins_of_start_flagged
        );
    }
    let n = rows.len();
    let count = |f: &dyn Fn(&Row) -> bool| rows.iter().filter(|r| f(r)).count();
    let hours = count(&|r| r.hours_ok());
    let cost = count(&|r| r.cost_ok());
    let ratios: Vec<f64> = rows.iter().map(Row::cost_ratio).collect();
    let lo = ratios.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = ratios.iter().copied().fold(0.0, f64::max);
    let profit = if rows.iter().any(|r| r.profit_ok().is_some()) {
        format!("{} of {n}", count(&|r| r.profit_ok() == Some(true)))
    } else {
        "n/a (no price)".into()
    };
    let churn = if name == "steady" {
        format!("{} of {n}", count(&|r| r.churn_ok()))
    } else {
        "-".into()
    };
    let line = format!(
        "{name:<12} hours {hours} of {n}, $/proof {cost} of {n} ({lo:.2}-{hi:.2}x the bound), profit {profit}, churn {churn}"
    );
    println!(
        "{name}: hours below target within the bound + {:.2} h on {hours} of {n} seeds; $/proof within {COST_RATIO}x the bound's on {cost} ({lo:.2}-{hi:.2}x); profit >= {:.0}% of the oracle's: {profit}; steady churn (launches <= 2x the oracle's + 2/day, no short unflagged rental): {churn}",
        HBT_PER_CHANGE * changes(&s) as f64,
        PROFIT_SHARE * 100.0
    );
    line
}

/// The table for every scenario, then the summary. `steady1` is steady's seed-1 week.
pub fn bench_over_seeds(steady1: Report) {
    println!();
    println!(
        "decision quality: the policy (rules) against the reactive bound (no look-ahead, inside the launch window) and the clairvoyant oracle"
    );
    println!(
        "(hbt = hours below target; allowed = the bound's + 0.25 h per demand change; short = rentals ended within 30 min of their start, unflagged+flagged; l/day = launches a day, o = the oracle's)"
    );
    let mut steady1 = Some(steady1);
    let mut summary = Vec::new();
    let mut reports: Vec<(&str, Vec<Row>)> = Vec::new();
    for name in SCENARIOS {
        let done = if *name == "steady" {
            steady1.take()
        } else {
            None
        };
        let rows = run_seeds(name, done);
        summary.push(print_scenario(name, &rows));
        reports.push((*name, rows));
    }
    println!();
    println!("aims held, seeds 1-{SEEDS}:");
    for line in summary {
        println!("  {line}");
    }
    // Issue 25's aim, on every built-in scenario: the rules against each peer.
    println!();
    println!(
        "the rules against the peers (keda, target-tracking; docs/sim.md, \"Peers\"), every built-in scenario over seeds 1-{SEEDS}: profit where priced, else $/proof and hours below target"
    );
    let mut seeds = Vec::new();
    for (name, _) in scenario::BUILT_IN {
        let rows = match reports.iter().position(|(n, _)| n == name) {
            Some(i) => reports.swap_remove(i).1,
            None => run_seeds(name, None),
        };
        for (k, row) in rows.iter().enumerate() {
            seeds.push(peer_grid::Seed::of(name, k as u64 + 1, &row.r));
        }
    }
    peer_grid::print_peers_table(&seeds);
}
