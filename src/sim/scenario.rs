//! Scenarios: what the simulated world does (market demand, hosts, failures, 429 bursts, probe
//! and LLM outages, what the fleet looks like at the start, operator actions and trigger
//! bursts) and what the agent must achieve in it. Built-in ones are TOML files embedded in
//! the binary; operators write their own in the same format (docs/sim.md), parsed strictly.

use serde::Deserialize;

use crate::error::UsageError;

/// Built-in scenarios: (name, TOML), in `--list` order.
pub const BUILT_IN: &[(&str, &str)] = &[
    ("steady", include_str!("scenarios/steady.toml")),
    ("spike", include_str!("scenarios/spike.toml")),
    ("incident", include_str!("scenarios/incident.toml")),
    (
        "vast-429-storm",
        include_str!("scenarios/vast-429-storm.toml"),
    ),
    ("llm-outage", include_str!("scenarios/llm-outage.toml")),
    (
        "trigger-storm",
        include_str!("scenarios/trigger-storm.toml"),
    ),
];

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
    pub curio_start_secs: (f64, f64),
    /// `[low, high]` reliability of the offers.
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
    /// Fallback passes never stopped or destroyed anything.
    pub fallback_never_stops: Option<bool>,
    pub max_passes_per_hour: Option<f64>,
    pub min_rate_limited_calls: Option<u64>,
    pub max_stuck_unhandled: Option<u64>,
}

/// A built-in name or a TOML file.
pub fn load(name_or_file: &str) -> Result<Scenario, UsageError> {
    if let Some((_, text)) = BUILT_IN.iter().find(|(n, _)| *n == name_or_file) {
        return parse(text)
            .map_err(|e| UsageError(format!("built-in scenario {name_or_file}: {e}")));
    }
    let path = std::path::Path::new(name_or_file);
    if !path.exists() {
        let names: Vec<&str> = BUILT_IN.iter().map(|(n, _)| *n).collect();
        return Err(UsageError(format!(
            "no scenario {name_or_file:?}: not a built-in ({}) and no such file",
            names.join(", ")
        )));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| UsageError(format!("cannot read scenario {}: {e}", path.display())))?;
    parse(&text).map_err(|e| UsageError(format!("scenario {}: {e}", path.display())))
}

/// The longest simulation: a (leap) year, in hours.
pub const MAX_HOURS: f64 = 24.0 * 366.0;
/// The shortest, in minutes: one timer period; a shorter run has no timer tick to speak of
/// and its report would check nothing (`--hours 1e-300` ran no pass and PASSED).
pub const MIN_MINUTES: f64 = 5.0;
/// Proofs/h the market may offer at most.
pub const MAX_RATE: f64 = 100_000.0;
/// Proofs the market may be expected to offer within the simulated hours (the sum of rate x
/// duration): every one is drawn, queued and tallied.
pub const MAX_ARRIVALS: f64 = 20_000_000.0;
/// Operator actions (each trigger of a burst, message and reset) scheduled within the
/// simulated hours, counting every repetition: each becomes an event row.
pub const MAX_ACTIONS: u64 = 2_000_000;
/// Characters of text those actions carry in all (a burst's reason is stored per trigger).
pub const MAX_ACTION_TEXT: u64 = 100_000_000;
pub const MAX_OFFERS: u32 = 10_000;
/// `[start]` counts (proofs pending, instances, wakes) at most.
pub const MAX_START: u32 = 100_000;
pub const MAX_EVENT_COUNT: u32 = 100_000;
pub const MAX_EVERY_MS: u64 = 3_600_000;
/// Entries of any list (`market.rate`, `hosts.gpus`, windows, events) at most.
pub const MAX_ENTRIES: usize = 10_000;
const MAX_EXPIRE_MINS: f64 = 7.0 * 24.0 * 60.0;
const MAX_BOOT_MINS: f64 = 24.0 * 60.0;
const MAX_CURIO_START_SECS: f64 = 3_600.0;
const MAX_PER_DAY: f64 = 1_000.0;
const MAX_GPU_RATE: f64 = 10_000.0;
const MAX_DPH: f64 = 1_000.0;
const MAX_SHARE_WEIGHT: f64 = 1_000.0;
/// The text of a message or a burst's reason, as `fleetagent message` allows.
const MAX_TEXT_CHARS: usize = crate::cmd::message::MAX_MESSAGE_CHARS;
const HOUR_MS: f64 = 3_600_000.0;

/// Parse and check a scenario. The error is one line naming the line and the key, like the
/// config's; keys under `[config]` are checked against the config's own schema. An entry of
/// an array of tables is named with its number (`event #3 repeat_mins`) and the line of its
/// key, else of its `[[event]]` header.
pub fn parse(text: &str) -> Result<Scenario, String> {
    let s: Scenario = toml::from_str(text).map_err(|e| crate::config::locate::toml_error(text, &e))?;
    if let Some(table) = &s.config {
        // The config's own strict parser, on the [config] table alone; a key error is mapped
        // back to its line in the scenario.
        let sub = toml::to_string(table).map_err(|e| format!("[config]: {e}"))?;
        if let Err(e) = crate::config::parse(&sub) {
            let key = e
                .split_once('(')
                .and_then(|(_, rest)| rest.split_once(')'))
                .map(|(k, _)| k.to_string());
            let line = key
                .as_deref()
                .and_then(|k| crate::config::locate::key_line(text, &format!("config.{k}")));
            let what = e.split_once("): ").map(|(_, m)| m).unwrap_or(&e);
            return Err(match (line, key) {
                (Some(l), Some(k)) => format!("line {l} (config.{k}): {what}"),
                (None, Some(k)) => format!("config.{k}: {what}"),
                _ => format!("[config]: {e}"),
            });
        }
    }
    validate(&s).map_err(|e| match locate(text, &e) {
        Some(line) => format!("line {line} ({}): {}", e.name(), e.msg),
        None => format!("{}: {}", e.name(), e.msg),
    })?;
    Ok(s)
}

impl Scenario {
    /// The checks [`parse`] makes, on a scenario built in code (no lines to name).
    pub fn check(&self) -> Result<(), String> {
        validate(self).map_err(|e| format!("{}: {}", e.name(), e.msg))
    }

    /// The work `hours` of this scenario make (market arrivals, operator actions), within
    /// the stated limits; for a `--hours` that overrides the scenario's own.
    pub fn check_work(&self, hours: f64) -> Result<(), String> {
        work(self, hours).map_err(|e| format!("{}: {}", e.name(), e.msg))
    }

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

/// Simulated hours (the scenario's or `--hours`) within bounds: at least one timer period,
/// at most a year, a finite number.
pub fn check_hours(hours: f64) -> Result<(), String> {
    if !(hours.is_finite() && hours * 60.0 >= MIN_MINUTES && hours <= MAX_HOURS) {
        return Err(format!(
            "must be at least 5 minutes (one timer period, 0.0834 h) and at most {MAX_HOURS} \
             (a year), got {}",
            num(hours)
        ));
    }
    Ok(())
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

/// What is wrong, and where: a dotted key (`hosts.boot_mins`), or an entry of an array
/// (`event`, `market.rate`, `hosts.gpus`) by its index and the field within it.
#[derive(Debug, Clone, PartialEq)]
struct Invalid {
    key: &'static str,
    index: Option<usize>,
    field: Option<&'static str>,
    msg: String,
}

impl Invalid {
    fn key(key: &'static str, msg: String) -> Invalid {
        Invalid {
            key,
            index: None,
            field: None,
            msg,
        }
    }

    fn entry(key: &'static str, index: usize, field: Option<&'static str>, msg: String) -> Invalid {
        Invalid {
            key,
            index: Some(index),
            field,
            msg,
        }
    }

    /// `hosts.offers`, `market.rate #2`, `event #3 repeat_mins` (entries count from 1).
    fn name(&self) -> String {
        match (self.index, self.field) {
            (None, _) => self.key.to_string(),
            (Some(i), None) => format!("{} #{}", self.key, i + 1),
            (Some(i), Some(f)) => format!("{} #{} {f}", self.key, i + 1),
        }
    }
}

/// The line an error is about: the key's; for an entry of an array, its field's line, else
/// the entry's own (the N-th `[[event]]` header, or the N-th value of an inline array).
fn locate(text: &str, e: &Invalid) -> Option<usize> {
    let Some(index) = e.index else {
        return crate::config::locate::key_line(text, e.key);
    };
    let line_of = |offset: usize| text[..offset.min(text.len())].matches('\n').count() + 1;
    if let Ok(doc) = toml_edit::Document::parse(text.to_owned()) {
        let mut item = doc.as_item();
        for part in e.key.split('.') {
            item = item.get(part)?;
        }
        let span = match item {
            toml_edit::Item::ArrayOfTables(a) => {
                let t = a.get(index)?;
                e.field
                    .and_then(|f| t.key(f))
                    .and_then(|k| k.span())
                    .or_else(|| t.span())
            }
            toml_edit::Item::Value(toml_edit::Value::Array(a)) => {
                let v = a.get(index)?;
                match (v, e.field) {
                    (toml_edit::Value::InlineTable(t), Some(f)) => {
                        t.key(f).and_then(|k| k.span()).or_else(|| v.span())
                    }
                    _ => v.span(),
                }
            }
            _ => None,
        };
        if let Some(span) = span {
            return Some(line_of(span.start));
        }
    }
    // toml_edit refuses some text serde's parser took (an integer past i64): the N-th
    // `[[key]]` header, line by line.
    text.lines()
        .enumerate()
        .filter(|(_, l)| {
            let t = l.trim_start();
            t.strip_prefix("[[")
                .and_then(|r| r.split_once("]]"))
                .is_some_and(|(name, _)| name.trim().trim_matches('"') == e.key)
        })
        .nth(index)
        .map(|(i, _)| i + 1)
        .or_else(|| crate::config::locate::key_line(text, e.key))
}

/// A number as the errors show it: `0.5`, `1e-300`, `NaN` (never 300 digits).
fn num(v: f64) -> String {
    if v == 0.0 || !v.is_finite() || (1e-4..1e16).contains(&v.abs()) {
        format!("{v}")
    } else {
        format!("{v:e}")
    }
}

/// A finite number within [lo, hi].
fn within(v: f64, lo: f64, hi: f64) -> bool {
    v.is_finite() && v >= lo && v <= hi
}

fn validate(s: &Scenario) -> Result<(), Invalid> {
    let bad = |key: &'static str, msg: String| Err(Invalid::key(key, msg));
    if s.name.trim().is_empty() {
        return bad("name", "must not be empty".into());
    }
    check_hours(s.hours).or_else(|m| bad("hours", m))?;

    let m = &s.market;
    if m.rate.is_empty() {
        return bad(
            "market.rate",
            "needs at least one [hour, proofs/h] pair".into(),
        );
    }
    if m.rate.len() > MAX_ENTRIES {
        return bad(
            "market.rate",
            format!("has {} pairs; at most {MAX_ENTRIES}", m.rate.len()),
        );
    }
    let mut last = 0.0;
    for (i, (h, r)) in m.rate.iter().enumerate() {
        if !within(*h, last, MAX_HOURS) || !within(*r, 0.0, MAX_RATE) {
            return Err(Invalid::entry(
                "market.rate",
                i,
                None,
                format!(
                    "pairs must be [hour, proofs/h] with hours in order within 0..={MAX_HOURS} \
                     and rates within 0..={MAX_RATE}, got [{}, {}]",
                    num(*h),
                    num(*r)
                ),
            ));
        }
        last = *h;
    }
    if !(within(m.expire_mins, 0.0, MAX_EXPIRE_MINS) && m.expire_mins > 0.0) {
        return bad(
            "market.expire_mins",
            format!(
                "must be > 0 and at most {MAX_EXPIRE_MINS} (a week), got {}",
                num(m.expire_mins)
            ),
        );
    }

    let h = &s.hosts;
    if h.offers == 0 || h.offers > MAX_OFFERS {
        return bad(
            "hosts.offers",
            format!("must be between 1 and {MAX_OFFERS}, got {}", h.offers),
        );
    }
    if h.gpus.is_empty() || h.gpus.len() > 100 {
        return bad(
            "hosts.gpus",
            format!("needs between 1 and 100 GPUs, got {}", h.gpus.len()),
        );
    }
    for (i, g) in h.gpus.iter().enumerate() {
        let gpu = |field, msg: String| Err(Invalid::entry("hosts.gpus", i, Some(field), msg));
        if g.name.trim().is_empty() {
            return gpu("name", "must not be empty".into());
        }
        if !(within(g.rate, 0.0, MAX_GPU_RATE) && g.rate > 0.0) {
            return gpu(
                "rate",
                format!(
                    "{}: proofs/h must be > 0 and at most {MAX_GPU_RATE}, got {}",
                    g.name,
                    num(g.rate)
                ),
            );
        }
        let (lo, hi) = g.dph;
        if !(within(lo, 0.0, MAX_DPH) && lo > 0.0 && within(hi, lo, MAX_DPH)) {
            return gpu(
                "dph",
                format!(
                    "{}: must be [low, high] $/h with 0 < low <= high <= {MAX_DPH}, got [{}, {}]",
                    g.name,
                    num(lo),
                    num(hi)
                ),
            );
        }
        if !(within(g.share, 0.0, MAX_SHARE_WEIGHT) && g.share > 0.0) {
            return gpu(
                "share",
                format!(
                    "{}: must be > 0 and at most {MAX_SHARE_WEIGHT}, got {}",
                    g.name,
                    num(g.share)
                ),
            );
        }
    }
    let (median, p90) = h.boot_mins;
    if !(within(median, 0.0, MAX_BOOT_MINS) && median > 0.0 && within(p90, median, MAX_BOOT_MINS)) {
        return bad(
            "hosts.boot_mins",
            format!(
                "must be [median, p90] minutes with 0 < median <= p90 <= {MAX_BOOT_MINS}, \
                 got [{}, {}]",
                num(median),
                num(p90)
            ),
        );
    }
    for (key, v) in [("hosts.boot_fail", h.boot_fail), ("hosts.stuck", h.stuck)] {
        if !within(v, 0.0, 1.0) {
            return bad(key, format!("must be between 0 and 1, got {}", num(v)));
        }
    }
    for (key, v) in [
        ("hosts.offline_per_day", h.offline_per_day),
        ("hosts.crash_per_day", h.crash_per_day),
    ] {
        if !within(v, 0.0, MAX_PER_DAY) {
            return bad(
                key,
                format!("must be between 0 and {MAX_PER_DAY}, got {}", num(v)),
            );
        }
    }
    let (lo, hi) = h.curio_start_secs;
    if !(within(lo, 0.0, MAX_CURIO_START_SECS) && within(hi, lo, MAX_CURIO_START_SECS)) {
        return bad(
            "hosts.curio_start_secs",
            format!(
                "must be [low, high] seconds with 0 <= low <= high <= {MAX_CURIO_START_SECS}, \
                 got [{}, {}]",
                num(lo),
                num(hi)
            ),
        );
    }
    let (lo, hi) = h.reliability;
    if !(within(lo, 0.0, 1.0) && within(hi, lo, 1.0)) {
        return bad(
            "hosts.reliability",
            format!(
                "must be [low, high] with 0 <= low <= high <= 1, got [{}, {}]",
                num(lo),
                num(hi)
            ),
        );
    }

    for (key, windows) in [("vast_429", &s.vast_429), ("probe_outage", &s.probe_outage)] {
        if windows.len() > MAX_ENTRIES {
            return bad(
                key,
                format!("has {} windows; at most {MAX_ENTRIES}", windows.len()),
            );
        }
        for (i, w) in windows.iter().enumerate() {
            let window = |field, msg: String| Err(Invalid::entry(key, i, Some(field), msg));
            if !within(w.at_hours, 0.0, MAX_HOURS) {
                return window(
                    "at_hours",
                    format!("must be between 0 and {MAX_HOURS}, got {}", num(w.at_hours)),
                );
            }
            if !(within(w.hours, 0.0, MAX_HOURS) && w.hours > 0.0) {
                return window(
                    "hours",
                    format!("must be > 0 and at most {MAX_HOURS}, got {}", num(w.hours)),
                );
            }
            if !within(w.share, 0.0, 1.0) {
                return window(
                    "share",
                    format!("must be between 0 and 1, got {}", num(w.share)),
                );
            }
        }
    }

    let st = &s.start;
    for (key, v) in [
        ("start.pending", st.pending),
        ("start.live", st.live),
        ("start.loading", st.loading),
        ("start.loading_stuck", st.loading_stuck),
        ("start.dead", st.dead),
        ("start.wakes", st.wakes),
    ] {
        if v > MAX_START {
            return bad(key, format!("must be at most {MAX_START}, got {v}"));
        }
    }
    if st.loading_stuck > st.loading {
        return bad(
            "start.loading_stuck",
            format!(
                "cannot exceed start.loading ({}), got {}",
                st.loading, st.loading_stuck
            ),
        );
    }
    // Each starting instance rents an offer, and one offer holds the account's instance
    // that is not ours.
    let fleet = st.live + st.loading + st.dead;
    if fleet >= h.offers {
        let key = [
            ("start.live", st.live),
            ("start.dead", st.dead),
            ("start.loading", st.loading),
        ]
        .into_iter()
        .max_by_key(|(_, v)| *v)
        .map_or("start.live", |(k, _)| k);
        return bad(
            key,
            format!(
                "start.live + start.loading + start.dead is {fleet}: each rents one of the \
                 {} offers (hosts.offers) and one holds the account's foreign instance, so at \
                 most {}",
                h.offers,
                h.offers - 1
            ),
        );
    }

    if s.events.len() > MAX_ENTRIES {
        return bad(
            "event",
            format!("has {} entries; at most {MAX_ENTRIES}", s.events.len()),
        );
    }
    for (i, a) in s.events.iter().enumerate() {
        let event = |field, msg: String| Err(Invalid::entry("event", i, Some(field), msg));
        if !within(a.at_mins, 0.0, MAX_HOURS * 60.0) {
            return event(
                "at_mins",
                format!(
                    "must be between 0 and {}, got {}",
                    MAX_HOURS * 60.0,
                    num(a.at_mins)
                ),
            );
        }
        if a.priority > 2 {
            return event("priority", format!("must be 0, 1 or 2, got {}", a.priority));
        }
        if a.count > MAX_EVENT_COUNT || (a.kind == ActionKind::Triggers && a.count == 0) {
            return event(
                "count",
                format!("must be between 1 and {MAX_EVENT_COUNT}, got {}", a.count),
            );
        }
        if a.every_ms > MAX_EVERY_MS {
            return event(
                "every_ms",
                format!(
                    "must be at most {MAX_EVERY_MS} (an hour), got {}",
                    a.every_ms
                ),
            );
        }
        if !(a.repeat_mins == 0.0 || within(a.repeat_mins, 1.0, MAX_HOURS * 60.0)) {
            return event(
                "repeat_mins",
                format!(
                    "must be 0 (once) or between 1 and {} minutes, got {}",
                    MAX_HOURS * 60.0,
                    num(a.repeat_mins)
                ),
            );
        }
        let text = a.text.as_deref().unwrap_or("");
        if text.chars().count() > MAX_TEXT_CHARS {
            return event(
                "text",
                format!(
                    "is {} characters; at most {MAX_TEXT_CHARS}",
                    text.chars().count()
                ),
            );
        }
        if a.kind == ActionKind::Message && text.trim().is_empty() {
            return event("text", "a message needs text".into());
        }
    }

    let e = &s.expect;
    for (key, v) in [
        ("expect.max_hours_below_target", e.max_hours_below_target),
        (
            "expect.max_hours_below_target_over_oracle",
            e.max_hours_below_target_over_oracle,
        ),
        ("expect.min_served_share", e.min_served_share),
        ("expect.max_dollars_per_proof", e.max_dollars_per_proof),
        (
            "expect.max_cost_ratio_to_oracle",
            e.max_cost_ratio_to_oracle,
        ),
        (
            "expect.reset_answered_within_secs",
            e.reset_answered_within_secs,
        ),
        ("expect.max_silence_mins", e.max_silence_mins),
        ("expect.min_fallback_share", e.min_fallback_share),
        ("expect.max_passes_per_hour", e.max_passes_per_hour),
    ] {
        if let Some(v) = v {
            if !(v.is_finite() && v >= 0.0) {
                return bad(key, format!("must be a number >= 0, got {}", num(v)));
            }
        }
    }

    work(s, s.hours)
}

/// The work of `hours` of this scenario, within the limits: the market's expected arrivals
/// and the operator actions scheduled (every trigger of a burst, every repetition).
fn work(s: &Scenario, hours: f64) -> Result<(), Invalid> {
    let arrivals = s.expected_arrivals(hours);
    if !arrivals.is_finite() || arrivals > MAX_ARRIVALS {
        return Err(Invalid::key(
            "market.rate",
            format!(
                "in {} h the market would offer about {arrivals:.0} proofs (at most \
                 {MAX_ARRIVALS}); lower the rates or shorten the hours",
                num(hours)
            ),
        ));
    }
    let mut actions: u64 = 0;
    let mut text: u64 = 0;
    // Per entry: (actions, characters, repetitions), to name the one that adds the most.
    let mut each = Vec::with_capacity(s.events.len());
    for a in &s.events {
        let reps = repetitions(a, hours);
        let per = match a.kind {
            ActionKind::Triggers => a.count as u64,
            _ => 1,
        };
        let n = reps.saturating_mul(per);
        // A burst's reason gets " #N" (and is "state change" when unset).
        let chars = match (a.kind, a.text.as_deref()) {
            (ActionKind::Triggers, t) => t.map_or(12, |t| t.chars().count()) as u64 + 8,
            (_, t) => t.map_or(0, |t| t.chars().count()) as u64,
        };
        let c = n.saturating_mul(chars);
        actions = actions.saturating_add(n);
        text = text.saturating_add(c);
        each.push((n, c, reps));
    }
    let (what, by_text) = if actions > MAX_ACTIONS {
        (
            format!("would fire {actions} actions (at most {MAX_ACTIONS})"),
            false,
        )
    } else if text > MAX_ACTION_TEXT {
        (
            format!("would carry {text} characters of text (at most {MAX_ACTION_TEXT} in all)"),
            true,
        )
    } else {
        return Ok(());
    };
    let (i, &(n, c, reps)) = each
        .iter()
        .enumerate()
        .max_by_key(|(_, (n, c, _))| if by_text { *c } else { *n })
        .expect("some event fires");
    let a = &s.events[i];
    let how = match a.kind {
        ActionKind::Triggers => format!("count {} x {reps} repetitions", a.count),
        _ => format!("{reps} repetitions"),
    };
    let mine = if by_text {
        format!("{c} characters, {how}")
    } else {
        format!("{n} actions, {how}")
    };
    Err(Invalid::entry(
        "event",
        i,
        None,
        format!(
            "in {} h the events {what}, this one {mine}; lower the count, repeat less \
             often or shorten the hours",
            num(hours)
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_ins_parse() {
        for (name, text) in BUILT_IN {
            let s = parse(text).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(&s.name, name);
        }
    }

    #[test]
    fn unknown_key_names_key_and_line() {
        let err = parse(
            "name = \"x\"\ndescription = \"d\"\nhours = 1\n[market]\nrate = [[0, 10]]\nbogus = 2\n",
        )
        .unwrap_err();
        assert!(err.contains("line 6"), "{err}");
        assert!(err.contains("bogus"), "{err}");
    }

    #[test]
    fn unknown_config_key_is_mapped_to_its_line() {
        let err = parse("name = \"x\"\ndescription = \"d\"\nhours = 1\n\n[config.policy]\ntarget_proofs_per_hour = 5\nnope = 1\n")
            .unwrap_err();
        assert!(err.contains("nope"), "{err}");
        assert!(err.contains("line 7"), "{err}");
    }

    const TOP: &str = "name = \"x\"\ndescription = \"d\"\nhours = 2\n";

    /// The error for TOP + `rest`, which must name `key` at `line` and show `value`.
    fn refused(rest: &str, line: usize, key: &str, value: &str) {
        let text = format!("{TOP}{rest}");
        let err = parse(&text).expect_err(&text);
        assert!(
            err.starts_with(&format!("line {line} ({key}): ")),
            "wanted line {line} ({key}) for\n{text}\ngot: {err}"
        );
        assert!(err.contains(value), "wanted {value:?} in: {err}");
        assert!(!err.contains('\n'), "{err}");
    }

    #[test]
    fn nan_and_infinity_are_refused_everywhere() {
        // `x <= 0.0` is false for NaN: every float is checked as finite first.
        refused(
            "[market]\nrate = [[nan, 100]]\n",
            5,
            "market.rate #1",
            "NaN",
        );
        refused("[market]\nrate = [[0, nan]]\n", 5, "market.rate #1", "NaN");
        refused("[market]\nrate = [[0, inf]]\n", 5, "market.rate #1", "inf");
        refused(
            "[market]\nexpire_mins = nan\n",
            5,
            "market.expire_mins",
            "NaN",
        );
        refused(
            "[hosts]\nboot_mins = [5, nan]\n",
            5,
            "hosts.boot_mins",
            "NaN",
        );
        refused("[hosts]\nboot_fail = nan\n", 5, "hosts.boot_fail", "NaN");
        refused(
            "[hosts]\ncrash_per_day = nan\n",
            5,
            "hosts.crash_per_day",
            "NaN",
        );
        refused(
            "[hosts]\noffline_per_day = inf\n",
            5,
            "hosts.offline_per_day",
            "inf",
        );
        refused(
            "[hosts]\ncurio_start_secs = [nan, 10]\n",
            5,
            "hosts.curio_start_secs",
            "NaN",
        );
        refused(
            "[hosts]\nreliability = [0.9, nan]\n",
            5,
            "hosts.reliability",
            "NaN",
        );
        refused(
            "[[vast_429]]\nat_hours = 1\nhours = 1\nshare = nan\n",
            7,
            "vast_429 #1 share",
            "NaN",
        );
        refused(
            "[[probe_outage]]\nat_hours = inf\nhours = 1\n",
            5,
            "probe_outage #1 at_hours",
            "inf",
        );
        refused(
            "[[event]]\nat_mins = 1\nkind = \"reset-session\"\nrepeat_mins = nan\n",
            7,
            "event #1 repeat_mins",
            "NaN",
        );
        refused(
            "[[event]]\nat_mins = nan\nkind = \"reset-session\"\n",
            5,
            "event #1 at_mins",
            "NaN",
        );
        refused(
            "[expect]\nmin_served_share = nan\n",
            5,
            "expect.min_served_share",
            "NaN",
        );
        refused(
            "[expect]\nmax_silence_mins = -1\n",
            5,
            "expect.max_silence_mins",
            "-1",
        );
        let err = parse("name = \"x\"\ndescription = \"d\"\nhours = nan\n").unwrap_err();
        assert!(
            err.starts_with("line 3 (hours): ") && err.contains("NaN"),
            "{err}"
        );
    }

    #[test]
    fn every_number_has_an_upper_bound() {
        refused(
            "[[event]]\nat_mins = 1\nkind = \"reset-session\"\nrepeat_mins = 0.00000001\n",
            7,
            "event #1 repeat_mins",
            "got 1e-8",
        );
        refused(
            "[market]\nrate = [[0, 1e12]]\n",
            5,
            "market.rate #1",
            "1000000000000]",
        );
        refused(
            "[market]\nrate = [[0, 10], [1, 100001]]\n",
            5,
            "market.rate #2",
            "100001",
        );
        refused(
            "[market]\nrate = [[2, 10], [1, 100]]\n",
            5,
            "market.rate #2",
            "[1, 100]",
        );
        refused(
            "[market]\nexpire_mins = 10081\n",
            5,
            "market.expire_mins",
            "10081",
        );
        refused(
            "[hosts]\noffers = 4000000000\n",
            5,
            "hosts.offers",
            "4000000000",
        );
        refused("[hosts]\noffers = 0\n", 5, "hosts.offers", "got 0");
        refused(
            "[hosts]\nboot_mins = [5, 1441]\n",
            5,
            "hosts.boot_mins",
            "1441",
        );
        refused(
            "[hosts]\nboot_mins = [0, 1]\n",
            5,
            "hosts.boot_mins",
            "[0, 1]",
        );
        refused(
            "[hosts]\ncurio_start_secs = [100, 50]\n",
            5,
            "hosts.curio_start_secs",
            "[100, 50]",
        );
        refused(
            "[hosts]\ncurio_start_secs = [0, 3601]\n",
            5,
            "hosts.curio_start_secs",
            "3601",
        );
        refused(
            "[hosts]\ncrash_per_day = 1001\n",
            5,
            "hosts.crash_per_day",
            "1001",
        );
        refused(
            "[start]\npending = 4000000000\n",
            5,
            "start.pending",
            "4000000000",
        );
        refused("[start]\nwakes = 100001\n", 5, "start.wakes", "100001");
        // The fleet at the start rents offers, one of them held by the foreign instance.
        refused(
            "[hosts]\noffers = 10\n[start]\nlive = 2\nloading = 8\n",
            8,
            "start.loading",
            "at most 9",
        );
        refused(
            "[[event]]\nat_mins = 1\nkind = \"triggers\"\ncount = 4000000000\nevery_ms = 1\n",
            7,
            "event #1 count",
            "4000000000",
        );
        refused(
            "[[event]]\nat_mins = 1\nkind = \"triggers\"\nevery_ms = 3600001\n",
            7,
            "event #1 every_ms",
            "3600001",
        );
        refused(
            "[[event]]\nat_mins = 1\nkind = \"triggers\"\npriority = 3\n",
            7,
            "event #1 priority",
            "got 3",
        );
        let long = "a".repeat(8001);
        refused(
            &format!("[[event]]\nat_mins = 1\nkind = \"message\"\ntext = \"{long}\"\n"),
            7,
            "event #1 text",
            "8001 characters",
        );
        refused(
            "[hosts]\ngpus = [{ name = \"A\", rate = 40, dph = [0.5, 0.3], share = 1 }]\n",
            5,
            "hosts.gpus #1 dph",
            "[0.5, 0.3]",
        );
        assert!(parse(&format!(
            "{TOP}[[event]]\nat_mins = 1\nkind = \"message\"\ntext = \"{}\"\n",
            "a".repeat(8000)
        ))
        .is_ok());
    }

    #[test]
    fn the_bad_entry_of_an_array_is_named_with_its_number_and_line() {
        // A bad [[probe_outage]] after a good [[vast_429]]: probe_outage, at its own line.
        refused(
            "\n[[vast_429]]\nat_hours = 1\nhours = 2\n\n[[probe_outage]]\nat_hours = 5\nhours = -1\n",
            11,
            "probe_outage #1 hours",
            "-1",
        );
        // The third [[event]]: its field's line.
        let events = "[[event]]\nat_mins = 1\nkind = \"reset-session\"\n\n\
                      [[event]]\nat_mins = 2\nkind = \"triggers\"\n\n\
                      [[event]]\nat_mins = 3\nkind = \"triggers\"\nrepeat_mins = 0.5\n";
        refused(events, 15, "event #3 repeat_mins", "0.5");
        // A field left out: the entry's own [[event]] header.
        let events = "[[event]]\nat_mins = 1\nkind = \"reset-session\"\n\n\
                      [[event]]\nat_mins = 2\nkind = \"message\"\n";
        refused(events, 8, "event #2 text", "needs text");
        // A GPU of an inline array, at its own line.
        refused(
            "[hosts]\ngpus = [\n  { name = \"A\", rate = 40, dph = [0.3, 0.5], share = 1 },\n  \
             { name = \"B\", rate = inf, dph = [0.3, 0.5], share = 1 },\n]\n",
            7,
            "hosts.gpus #2 rate",
            "inf",
        );
        // An integer past i64 (toml_edit refuses the text): the N-th header, found by hand.
        refused(
            "[[event]]\nat_mins = 1\nkind = \"reset-session\"\n\n\
             [[event]]\nat_mins = 2\nkind = \"triggers\"\nevery_ms = 9223372036854775808\n",
            8,
            "event #2 every_ms",
            "9223372036854775808",
        );
    }

    #[test]
    fn the_work_of_the_hours_is_bounded() {
        // 100000 proofs/h for 201 h: 20.1 million arrivals.
        let text =
            "name = \"x\"\ndescription = \"d\"\nhours = 201\n[market]\nrate = [[0, 100000]]\n";
        let err = parse(text).unwrap_err();
        assert!(
            err.starts_with("line 5 (market.rate): ") && err.contains("20100000"),
            "{err}"
        );
        let ok = parse(&text.replace("201", "199")).unwrap();
        // --hours longer than the file's is checked where it is known.
        assert!(ok.check_work(199.0).is_ok());
        let err = ok.check_work(201.0).unwrap_err();
        assert!(err.starts_with("market.rate: "), "{err}");
        // Rates after the horizon cost nothing.
        let late = parse(&format!("{TOP}[market]\nrate = [[0, 10], [100, 100000]]\n")).unwrap();
        assert_eq!(late.expected_arrivals(2.0), 20.0);
        assert_eq!(late.expected_arrivals(101.0), 1000.0 + 100_000.0);

        // 100000 triggers every 3 minutes for 2 h: 40 bursts, 4 million triggers. The event
        // that adds the most is named.
        let burst = "[[event]]\nat_mins = 0\nkind = \"reset-session\"\n\n\
                     [[event]]\nat_mins = 0\nkind = \"triggers\"\ncount = 100000\nrepeat_mins = 3\n";
        refused(burst, 8, "event #2", "4000000 actions");
        // Once an hour for 2 h: 2 bursts.
        assert!(parse(&format!("{TOP}{}", burst.replace("= 3", "= 60"))).is_ok());
        // Messages of 8000 characters every minute for a week: 80 million characters.
        let text = format!(
            "name = \"x\"\ndescription = \"d\"\nhours = 168\n[[event]]\nat_mins = 0\nkind = \"message\"\ntext = \"{}\"\nrepeat_mins = 1\n",
            "a".repeat(8000)
        );
        assert!(parse(&text).is_ok());
        let err = parse(&text.replace("168", "240")).unwrap_err();
        assert!(
            err.starts_with("line 4 (event #1): ") && err.contains("characters"),
            "{err}"
        );
    }

    #[test]
    fn hours_are_one_timer_period_to_a_year() {
        assert!(check_hours(5.0 / 60.0).is_ok());
        assert!(check_hours(8784.0).is_ok());
        for h in [0.0, 1e-300, 0.08, -1.0, 8784.5, f64::NAN, f64::INFINITY] {
            let err = check_hours(h).unwrap_err();
            assert!(err.contains("5 minutes"), "{h}: {err}");
        }
        assert!(check_hours(1e-300).unwrap_err().ends_with("got 1e-300"));
        let err = parse("name = \"x\"\ndescription = \"d\"\nhours = 0.01\n").unwrap_err();
        assert!(
            err.starts_with("line 3 (hours): ") && err.contains("0.01"),
            "{err}"
        );
    }

    #[test]
    fn repetitions_count_what_the_schedule_fires() {
        let a = |at_mins: f64, repeat_mins: f64| Action {
            at_mins,
            kind: ActionKind::ResetSession,
            count: 1,
            every_ms: 0,
            priority: 1,
            text: None,
            repeat_mins,
        };
        assert_eq!(repetitions(&a(45.0, 0.0), 0.5), 0);
        assert_eq!(repetitions(&a(45.0, 0.0), 1.0), 1);
        assert_eq!(repetitions(&a(1.0, 20.0), 1.0), 3); // 1, 21, 41
        assert_eq!(repetitions(&a(0.0, 20.0), 1.0), 3); // 0, 20, 40 (60 is the end)
        assert_eq!(repetitions(&a(0.0, 1.0), 8784.0), 527_040);
    }

    #[test]
    fn rate_schedule() {
        let m = Market {
            rate: vec![(0.0, 100.0), (2.0, 300.0), (5.0, 100.0)],
            expire_mins: 30.0,
        };
        assert_eq!(m.rate_at(-1.0), 0.0);
        assert_eq!(m.rate_at(0.0), 100.0);
        assert_eq!(m.rate_at(2.0), 300.0);
        assert_eq!(m.rate_at(2.5), 300.0);
        assert_eq!(m.rate_at(9.0), 100.0);
        assert_eq!(m.changes(24.0), 2);
        assert_eq!(m.changes(3.0), 1);
        // Two pairs at one hour: the later one holds, as a walk from the start gives.
        let m = Market {
            rate: vec![(0.0, 100.0), (2.0, 300.0), (2.0, 50.0)],
            expire_mins: 30.0,
        };
        assert_eq!(m.rate_at(1.9), 100.0);
        assert_eq!(m.rate_at(2.0), 50.0);
    }
}
