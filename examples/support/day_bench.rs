//! `scripts/bench day`: issue 25's third must-show. The day-cycle scenario on seeds 1-10 with
//! the day learned (`policy.learn_day`, the default) and without it (the rules reacting
//! alone), in the same run: profit and its share of the oracle's, launches, hours below target
//! in all and around the daily rise (06:00-12:00 UTC on the days after the first, when a day
//! of history can be believed), and on how many seeds learning earns more. Then the steady
//! scenario (a week at one rate, no price) the same way: what learning costs where the day
//! is flat ($/proof, launches, hours below target).

use fleetagent::sim::{self, scenario, Options};

use crate::peer_grid::on_every_core;

const SEEDS: u64 = 10;
const SCENARIO: &str = "day-cycle";
/// The daily rise, UTC hours [from, to): the market climbs from its night to its afternoon.
const RISE: (usize, usize) = (6, 12);

struct Figures {
    dollars_per_proof: f64,
    profit: f64,
    oracle: f64,
    launches: u64,
    below: f64,
    below_rise: f64,
}

fn run(name: &str, seed: u64, learn: bool) -> Figures {
    let base = Options::new(scenario::load(name).unwrap(), seed);
    let mut config = sim::effective_config(&base).unwrap();
    config.policy.learn_day = learn;
    let r = sim::run(&Options {
        config: Some(config),
        ..base
    })
    .unwrap();
    let below_rise = r
        .below_by_hour
        .iter()
        .enumerate()
        .filter(|(h, _)| *h >= 24 && (RISE.0..RISE.1).contains(&(h % 24)))
        .map(|(_, b)| b)
        .sum();
    Figures {
        dollars_per_proof: r.report.money.dollars_per_proof,
        profit: r.report.money.profit.unwrap_or(0.0),
        oracle: r.report.oracle.profit.unwrap_or(0.0),
        launches: r.report.launches.made,
        below: r.report.hours_below_target,
        below_rise,
    }
}

pub fn bench_day() {
    let jobs: Vec<(&str, u64, bool)> = ["steady", SCENARIO]
        .into_iter()
        .flat_map(|n| (1..=SEEDS).flat_map(move |s| [(n, s, true), (n, s, false)]))
        .collect();
    let all = on_every_core(&jobs, |(name, seed, learn)| run(name, *seed, *learn));
    let (steady, out) = all.split_at(2 * SEEDS as usize);
    println!(
        "day: {SCENARIO}, seeds 1-{SEEDS}, the day learned (on) against the rules reacting alone (off); rise = {:02}:00-{:02}:00 UTC after the first day",
        RISE.0, RISE.1
    );
    println!(
        "{:>4} | {:>8} {:>8} {:>7} | {:>6} {:>6} {:>6} | {:>5} {:>5} | {:>6} {:>6} | {:>7} {:>7}",
        "seed",
        "profit",
        "off",
        "on/off",
        "share",
        "off",
        "oracle",
        "launch",
        "off",
        "below",
        "off",
        "at rise",
        "off"
    );
    let (mut better, mut sum_on, mut sum_off, mut rise_on, mut rise_off) = (0, 0.0, 0.0, 0.0, 0.0);
    let mut share_ok = 0;
    for (i, pair) in out.chunks(2).enumerate() {
        let (on, off) = (&pair[0], &pair[1]);
        let share = |f: &Figures| f.profit / f.oracle.max(1e-9);
        println!(
            "{:>4} | {:>8.2} {:>8.2} {:>7.3} | {:>6.3} {:>6.3} {:>6.2} | {:>6} {:>5} | {:>6.2} {:>6.2} | {:>7.2} {:>7.2}",
            i + 1,
            on.profit,
            off.profit,
            on.profit / off.profit.max(1e-9),
            share(on),
            share(off),
            on.oracle,
            on.launches,
            off.launches,
            on.below,
            off.below,
            on.below_rise,
            off.below_rise
        );
        better += usize::from(on.profit > off.profit);
        share_ok += usize::from(share(on) >= 0.9);
        sum_on += on.profit;
        sum_off += off.profit;
        rise_on += on.below_rise;
        rise_off += off.below_rise;
    }
    println!(
        "day: learning earns more on {better} of {SEEDS} seeds; profit {:.2} against {:.2} in all ({:.3}x); hours below target around the rise {:.2} against {:.2}; profit at least 90 % of the oracle's on {share_ok} of {SEEDS} seeds",
        sum_on,
        sum_off,
        sum_on / sum_off.max(1e-9),
        rise_on,
        rise_off
    );
    println!("day: steady (a flat week, no price), the same seeds, on against off");
    println!(
        "{:>4} | {:>8} {:>8} | {:>6} {:>5} | {:>6} {:>6}",
        "seed", "$/proof", "off", "launch", "off", "below", "off"
    );
    let (mut cheaper, mut fewer, mut below_more) = (0, 0, 0);
    for (i, pair) in steady.chunks(2).enumerate() {
        let (on, off) = (&pair[0], &pair[1]);
        println!(
            "{:>4} | {:>8.4} {:>8.4} | {:>6} {:>5} | {:>6.2} {:>6.2}",
            i + 1,
            on.dollars_per_proof,
            off.dollars_per_proof,
            on.launches,
            off.launches,
            on.below,
            off.below
        );
        cheaper += usize::from(on.dollars_per_proof <= off.dollars_per_proof);
        fewer += usize::from(on.launches <= off.launches);
        below_more += usize::from(on.below > off.below + 1e-9);
    }
    println!(
        "day: on steady, learning is as cheap or cheaper per proof on {cheaper} of {SEEDS} seeds, launches as few or fewer on {fewer}, more hours below target on {below_more}"
    );
}
