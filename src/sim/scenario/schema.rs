//! What a scenario file says, as serde reads it (unknown keys refused), with the defaults of
//! a key left out and the arithmetic of the schedule the simulator follows.

use serde::Deserialize;

const HOUR_MS: f64 = 3_600_000.0;

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    pub description: String,
    /// Default length in simulated hours (`--hours` overrides).
    pub hours: f64,
    #[serde(default)]
    pub market: Market,
    #[serde(default)]
    pub hosts: Hosts,
    /// Windows in which vast.ai answers a share of calls with HTTP 429.
    #[serde(default, rename = "vast_429")]
    pub vast_429: Vec<Window>,
    /// Windows in which the demand probe fails (HarmonyDB unreachable).
    #[serde(default)]
    pub probe_outage: Vec<Window>,
    #[serde(default)]
    pub llm: LlmSpec,
    /// The price of a proof over time (None: no price modelled, as a Curio whose ask price
    /// is unset and no FIL/USD source).
    #[serde(default)]
    pub price: Option<PricePath>,
    /// Outbids and resumes of interruptible (bid) instances.
    #[serde(default)]
    pub bids: Bids,
    #[serde(default)]
    pub start: Start,
    /// Operator actions and trigger bursts, in any order.
    #[serde(default, rename = "event")]
    pub events: Vec<Action>,
    /// fleetagent config keys (the config file's format) laid over the simulator's base
    /// config; ignored when `--config` gives a whole config.
    #[serde(default)]
    pub config: Option<toml::Table>,
    #[serde(default)]
    pub expect: Expect,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Market {
    /// `[hour, proofs/h]` pairs: the rate the ProofShare market offers from that hour on.
    #[serde(deserialize_with = "pairs")]
    pub rate: Vec<(f64, f64)>,
    /// A proof not pulled by Curio within this long goes to another provider.
    pub expire_mins: f64,
}

impl Default for Market {
    fn default() -> Self {
        Market {
            rate: vec![(0.0, 150.0)],
            expire_mins: 30.0,
        }
    }
}

impl Market {
    /// Proofs/h offered at `hour`: the last pair from that hour or before (a binary search:
    /// the hours are in order, and the oracle asks every simulated minute).
    pub fn rate_at(&self, hour: f64) -> f64 {
        match self.rate.partition_point(|(h, _)| *h <= hour) {
            0 => 0.0,
            n => self.rate[n - 1].1,
        }
    }

    /// How many times the rate changes within `hours`.
    pub fn changes(&self, hours: f64) -> usize {
        self.rate
            .windows(2)
            .filter(|w| w[1].0 > 0.0 && w[1].0 < hours && w[1].1 != w[0].1)
            .count()
    }
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Gpu {
    pub name: String,
    /// True proofs/h of one instance (hosts vary by a few percent around it).
    pub rate: f64,
    /// `[low, high]` $/h of offers with this GPU.
    #[serde(deserialize_with = "pair")]
    pub dph: (f64, f64),
    /// Share of the offers.
    pub share: f64,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Hosts {
    pub offers: u32,
    pub gpus: Vec<Gpu>,
    /// `[median, p90]` minutes from create to `running` (image pull and start).
    #[serde(deserialize_with = "pair")]
    pub boot_mins: (f64, f64),
    /// Share of boots that end `exited` instead of `running`.
    pub boot_fail: f64,
    /// Share of boots that stay `loading` for ever.
    pub stuck: f64,
    /// Host disconnects (`offline`) per instance-day on a host of reliability 0.95; scales
    /// with 1 - reliability.
    pub offline_per_day: f64,
    /// Curio worker crashes (the container exits) per instance-day.
    pub crash_per_day: f64,
    /// `[low, high]` seconds from `running` to the worker's first heartbeat.
    #[serde(deserialize_with = "pair")]
    pub curio_start_secs: (f64, f64),
    /// `[low, high]` reliability of the offers.
    #[serde(deserialize_with = "pair")]
    pub reliability: (f64, f64),
}

impl Default for Hosts {
    fn default() -> Self {
        Hosts {
            offers: 48,
            gpus: vec![
                Gpu {
                    name: "RTX 4090".into(),
                    rate: 40.0,
                    dph: (0.36, 0.62),
                    share: 0.55,
                },
                Gpu {
                    name: "RTX 3090".into(),
                    rate: 22.0,
                    dph: (0.19, 0.34),
                    share: 0.45,
                },
            ],
            boot_mins: (5.0, 12.0),
            boot_fail: 0.04,
            stuck: 0.02,
            offline_per_day: 0.2,
            crash_per_day: 0.05,
            curio_start_secs: (60.0, 150.0),
            reliability: (0.95, 0.999),
        }
    }
}

/// `[a, b]`: exactly two numbers. serde's tuple took `[a, b, c]` and dropped `c` without a
/// word (a sim walkthrough); a third value is a mistake to name.
fn pair<'de, D: serde::Deserializer<'de>>(d: D) -> Result<(f64, f64), D::Error> {
    let v = Vec::<f64>::deserialize(d)?;
    two(&v).map_err(serde::de::Error::custom)
}

/// `[[a, b], ...]`: each exactly two numbers ([`pair`]).
fn pairs<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<(f64, f64)>, D::Error> {
    let v = Vec::<Vec<f64>>::deserialize(d)?;
    v.iter()
        .map(|p| two(p))
        .collect::<Result<_, _>>()
        .map_err(serde::de::Error::custom)
}

fn two(v: &[f64]) -> Result<(f64, f64), String> {
    match v {
        [a, b] => Ok((*a, *b)),
        _ => Err(format!(
            "expected a pair of two numbers, got {} value(s)",
            v.len()
        )),
    }
}

/// `[price]`: `[hour, value]` pairs, each value holding from its hour on (as `market.rate`).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PricePath {
    /// USD per FIL.
    #[serde(deserialize_with = "pairs")]
    pub fil_usd: Vec<(f64, f64)>,
    /// The ask price in FIL per proof (Curio's `proofshare_meta.pprice`).
    #[serde(deserialize_with = "pairs")]
    pub ask_fil: Vec<(f64, f64)>,
}

/// The value of a `[hour, value]` path at `hour` (0 before its first pair).
pub fn path_at(path: &[(f64, f64)], hour: f64) -> f64 {
    match path.partition_point(|(h, _)| *h <= hour) {
        0 => 0.0,
        n => path[n - 1].1,
    }
}

impl PricePath {
    /// USD one proof earns at `hour`: ask price x FIL/USD.
    pub fn revenue_per_proof(&self, hour: f64) -> f64 {
        path_at(&self.ask_fil, hour) * path_at(&self.fil_usd, hour)
    }
}

/// `[bids]`: what happens to our interruptible instances (a bid outbid stops; it may resume).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Bids {
    /// Outbids per running bid instance per day (Poisson).
    pub outbid_per_day: f64,
    /// Share of outbid instances that resume by themselves later (if not destroyed).
    pub resume_share: f64,
    /// `[low, high]` minutes from the outbid to the resume.
    #[serde(deserialize_with = "pair")]
    pub resume_mins: (f64, f64),
    /// Waves: at `at_hours`, `count` of our running bid instances are outbid at once.
    #[serde(rename = "wave")]
    pub waves: Vec<Wave>,
}

impl Default for Bids {
    fn default() -> Self {
        Bids {
            outbid_per_day: 0.0,
            resume_share: 0.5,
            resume_mins: (10.0, 60.0),
            waves: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Wave {
    pub at_hours: f64,
    pub count: u32,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Window {
    pub at_hours: f64,
    pub hours: f64,
    /// Share of calls answered 429 (vast_429 only).
    #[serde(default = "one")]
    pub share: f64,
}

fn one() -> f64 {
    1.0
}

impl Window {
    pub fn contains(&self, hour: f64) -> bool {
        hour >= self.at_hours && hour < self.at_hours + self.hours
    }
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum LlmMode {
    /// `provider = "rules"` (unless `--llm`).
    #[default]
    Rules,
    /// `provider = "openai"` with a model that never answers: every pass falls back.
    Outage,
}

#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct LlmSpec {
    pub mode: LlmMode,
}

#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Start {
    /// PSProve proofs pulled into Curio before the start, unclaimed.
    pub pending: u32,
    /// Instances of ours proving at the start.
    pub live: u32,
    /// Instances of ours still loading at the start, launched within the last launch window
    /// (they use up the window).
    pub loading: u32,
    /// Of those loading, how many never finish.
    pub loading_stuck: u32,
    /// Instances of ours whose host went offline just before the start.
    pub dead: u32,
    /// Pending wakes, one due every 5 minutes from the start.
    pub wakes: u32,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum ActionKind {
    /// `count` trigger events, `every_ms` apart, priority `priority`.
    Triggers,
    /// `fleetagent reset-session`.
    ResetSession,
    /// `fleetagent message TEXT`.
    Message,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Action {
    pub at_mins: f64,
    pub kind: ActionKind,
    #[serde(default = "one_u32")]
    pub count: u32,
    #[serde(default)]
    pub every_ms: u64,
    #[serde(default = "p1")]
    pub priority: u8,
    #[serde(default)]
    pub text: Option<String>,
    /// Repeat the whole action every this many minutes (0 = once).
    #[serde(default)]
    pub repeat_mins: f64,
}

fn one_u32() -> u32 {
    1
}

fn p1() -> u8 {
    1
}

/// The scenario's own pass/fail bounds; unset ones are not checked. The invariants (no run
/// overlap, no event lost, no wake processed twice, foreign instances untouched) are always
/// checked.
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Expect {
    pub max_hours_below_target: Option<f64>,
    /// Hours below target may exceed the oracle's by this much at most.
    pub max_hours_below_target_over_oracle: Option<f64>,
    /// Proofs completed / proofs the market offered (capped by the target).
    pub min_served_share: Option<f64>,
    pub max_dollars_per_proof: Option<f64>,
    /// $/proof at most this multiple of the oracle's.
    pub max_cost_ratio_to_oracle: Option<f64>,
    pub min_launches: Option<u64>,
    pub max_launches: Option<u64>,
    pub min_stops: Option<u64>,
    pub min_emergency_bypasses: Option<u64>,
    /// The first pass that saw WORKERS DEAD asked for a launch.
    pub first_launch_in_first_dead_pass: Option<bool>,
    /// The reset's event was claimed by a pass within this many seconds.
    pub reset_answered_within_secs: Option<f64>,
    /// After the reset the timer kept running passes (no silence longer than this).
    pub max_silence_mins: Option<f64>,
    pub max_failed_passes: Option<u64>,
    pub min_fallback_passes: Option<u64>,
    /// Share of finished passes decided by the fallback rules.
    pub min_fallback_share: Option<f64>,
    /// Where the floor plans (a model, or the fallback): the most passes a flagged instance
    /// of ours was left billing (the floor destroys it once left `policy.floor_flagged_passes`).
    pub max_flagged_passes: Option<u32>,
    pub max_passes_per_hour: Option<f64>,
    pub min_rate_limited_calls: Option<u64>,
    pub max_stuck_unhandled: Option<u64>,
    /// Launches (after the start) whose $/proof at the GPU's true rate left less than
    /// `policy.min_margin` of the revenue per proof at their time. Needs `[price]`, and is
    /// not applicable while the agent knew no price.
    pub max_unprofitable_launches: Option<u64>,
    /// Hours our instances billed below `policy.min_margin` at the price of the time (as
    /// `max_unprofitable_launches`, not applicable while the agent knew no price).
    pub max_unprofitable_instance_hours: Option<f64>,
    /// Hours our instances billed at a loss (cost per proof above the revenue per proof at
    /// the time), as `max_unprofitable_instance_hours`.
    pub max_loss_instance_hours: Option<f64>,
    /// Dollars billed while the market offered nothing, from 90 minutes after it went quiet.
    pub max_spend_in_dead_hours: Option<f64>,
    /// Of our instances billing at any minute of those dead hours, at most this many (1 is
    /// the floor: a worker keeps Curio's request loop pulling).
    pub max_instances_in_dead_hours: Option<u32>,
    /// Profit at least this share of the oracle's (needs `[price]`).
    pub min_profit_share_of_oracle: Option<f64>,
    /// Minutes of the world in which our billing instances exceeded `policy.max_instances`
    /// or `policy.max_dph_total`.
    pub max_over_cap_minutes: Option<u64>,
    /// From each outbid to the launch that replaced it (the i-th outbid is answered by the
    /// i-th launch after it), in minutes at most.
    pub max_outbid_replace_mins: Option<f64>,
    /// Our rentals ended within 30 minutes of their start, flagged instances aside.
    pub max_short_rentals: Option<u64>,
}

impl Scenario {
    /// Proofs the market is expected to offer within `hours`: rate x duration, summed.
    pub fn expected_arrivals(&self, hours: f64) -> f64 {
        let r = &self.market.rate;
        r.iter()
            .enumerate()
            .map(|(k, (from, rate))| {
                let to = r.get(k + 1).map_or(hours, |n| n.0).min(hours);
                if to > *from {
                    rate * (to - from)
                } else {
                    0.0
                }
            })
            .sum()
    }
}

/// How many times an action fires within `hours`, with the schedule's own arithmetic
/// (whole milliseconds from the start, the first at `at_mins`, then every `repeat_mins`).
pub fn repetitions(a: &Action, hours: f64) -> u64 {
    let end = (hours * HOUR_MS) as i64;
    let first = (a.at_mins * 60_000.0) as i64;
    if first >= end {
        return 0;
    }
    let step = (a.repeat_mins * 60_000.0) as i64;
    if step <= 0 {
        1
    } else {
        ((end - 1 - first) / step + 1) as u64
    }
}
