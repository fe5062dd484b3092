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
    /// Proofs/h offered at `hour`.
    pub fn rate_at(&self, hour: f64) -> f64 {
        self.rate
            .iter()
            .take_while(|(h, _)| *h <= hour)
            .last()
            .map(|(_, r)| *r)
            .unwrap_or(0.0)
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

/// Parse and check a scenario. The error is one line naming the line and the key, like the
/// config's; keys under `[config]` are checked against the config's own schema.
pub fn parse(text: &str) -> Result<Scenario, String> {
    let s: Scenario = toml::from_str(text).map_err(|e| crate::config::toml_error(text, &e))?;
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
                .and_then(|k| crate::config::key_line(text, &format!("config.{k}")));
            let what = e.split_once("): ").map(|(_, m)| m).unwrap_or(&e);
            return Err(match (line, key) {
                (Some(l), Some(k)) => format!("line {l} (config.{k}): {what}"),
                (None, Some(k)) => format!("config.{k}: {what}"),
                _ => format!("[config]: {e}"),
            });
        }
    }
    validate(&s).map_err(|(key, msg)| match crate::config::key_line(text, key) {
        Some(line) => format!("line {line} ({key}): {msg}"),
        None => format!("{key}: {msg}"),
    })?;
    Ok(s)
}

fn validate(s: &Scenario) -> Result<(), (&'static str, String)> {
    if s.name.trim().is_empty() {
        return Err(("name", "must not be empty".into()));
    }
    if !(s.hours > 0.0 && s.hours <= 24.0 * 366.0) {
        return Err(("hours", format!("must be in (0, 8784], got {}", s.hours)));
    }
    if s.market.rate.is_empty() {
        return Err((
            "market.rate",
            "needs at least one [hour, proofs/h] pair".into(),
        ));
    }
    let mut last = -1.0;
    for (h, r) in &s.market.rate {
        if *h < last || *h < 0.0 || *r < 0.0 || !r.is_finite() {
            return Err((
                "market.rate",
                format!("pairs must have hours >= 0 in order and rates >= 0, got [{h}, {r}]"),
            ));
        }
        last = *h;
    }
    if s.market.expire_mins <= 0.0 {
        return Err(("market.expire_mins", "must be > 0".into()));
    }
    let h = &s.hosts;
    if h.offers == 0 || h.gpus.is_empty() {
        return Err((
            "hosts.offers",
            "needs at least one offer and one GPU".into(),
        ));
    }
    for g in &h.gpus {
        if g.rate <= 0.0 || g.dph.0 <= 0.0 || g.dph.1 < g.dph.0 || g.share <= 0.0 {
            return Err((
                "hosts.gpus",
                format!(
                    "{}: rate and share must be > 0 and dph [low, high] with 0 < low <= high",
                    g.name
                ),
            ));
        }
    }
    if h.boot_mins.0 <= 0.0 || h.boot_mins.1 < h.boot_mins.0 {
        return Err((
            "hosts.boot_mins",
            "must be [median, p90] with 0 < median <= p90".into(),
        ));
    }
    for (key, v) in [("hosts.boot_fail", h.boot_fail), ("hosts.stuck", h.stuck)] {
        if !(0.0..=1.0).contains(&v) {
            return Err((key, format!("must be between 0 and 1, got {v}")));
        }
    }
    if !(0.0..=1.0).contains(&h.reliability.0)
        || h.reliability.1 < h.reliability.0
        || h.reliability.1 > 1.0
    {
        return Err((
            "hosts.reliability",
            "must be [low, high] within 0..1".into(),
        ));
    }
    for w in s.vast_429.iter().chain(&s.probe_outage) {
        if w.hours <= 0.0 || w.at_hours < 0.0 || !(0.0..=1.0).contains(&w.share) {
            return Err((
                "vast_429",
                "windows need at_hours >= 0, hours > 0, share in 0..1".into(),
            ));
        }
    }
    if s.start.loading_stuck > s.start.loading {
        return Err(("start.loading_stuck", "cannot exceed start.loading".into()));
    }
    for a in &s.events {
        if a.at_mins < 0.0
            || a.priority > 2
            || (a.count > 1
                && a.every_ms == 0
                && a.kind == ActionKind::Triggers
                && a.count > 100_000)
        {
            return Err(("event", "at_mins must be >= 0 and priority 0..2".into()));
        }
        if a.kind == ActionKind::Message && a.text.as_deref().is_none_or(|t| t.trim().is_empty()) {
            return Err(("event", "a message needs text".into()));
        }
    }
    Ok(())
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

    #[test]
    fn rate_schedule() {
        let m = Market {
            rate: vec![(0.0, 100.0), (2.0, 300.0), (5.0, 100.0)],
            expire_mins: 30.0,
        };
        assert_eq!(m.rate_at(0.0), 100.0);
        assert_eq!(m.rate_at(2.5), 300.0);
        assert_eq!(m.rate_at(9.0), 100.0);
        assert_eq!(m.changes(24.0), 2);
        assert_eq!(m.changes(3.0), 1);
    }
}
