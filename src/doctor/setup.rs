//! What the config and the secrets make impossible although both parse: each is a pass that
//! will hold the fleet, fall back or refuse every launch, pass after pass.

use std::path::Path;

use super::Problem;
use crate::config::Config;

/// The `config` check: the file not found at the default path (`missing`: every key has its
/// default), and launches made impossible by the config: keys unset, caps at 0.
pub(super) fn config(config: &Config, missing: Option<&Path>) -> Vec<Problem> {
    let mut out = Vec::new();
    if let Some(path) = missing {
        out.push(
            Problem::new(format!(
                "no config file at {}: every key has its default",
                path.display()
            ))
            .fix("write it there (`fleetagent init` writes a commented one), or name yours with --config or $FLEETAGENT_CONFIG"),
        );
    }
    out.extend(launch(config));
    out
}

/// Launches made impossible by the config: keys unset, caps at 0.
fn launch(config: &Config) -> Vec<Problem> {
    let mut out = Vec::new();
    let missing = config.policy.missing_launch_keys(&config.vast);
    if !missing.is_empty() {
        out.push(
            Problem::new(format!(
                "launches are impossible: {} unset",
                missing.join(", ")
            ))
            .fix(format!("set {} in the config", missing.join(", "))),
        );
    }
    let p = &config.policy;
    let mut zero = Vec::new();
    if p.max_instances == Some(0) {
        zero.push("policy.max_instances = 0");
    }
    if p.max_dph_total.is_some_and(|v| v <= 0.0) {
        zero.push("policy.max_dph_total = 0");
    }
    if p.daily_spend_max.is_some_and(|v| v <= 0.0) {
        zero.push("policy.daily_spend_max = 0 (unset it for no daily cap)");
    }
    if p.launch_window_max == 0 && p.emergency_launch_max == 0 {
        zero.push("policy.launch_window_max = 0 and policy.emergency_launch_max = 0");
    }
    if !zero.is_empty() {
        out.push(
            Problem::new(format!("launches are impossible: {}", zero.join(", ")))
                .fix("raise them in the config (docs/guardrails.md)"),
        );
    } else if p.launch_window_max == 0 {
        out.push(
            Problem::new(
                "launches are impossible but for WORKERS DEAD: policy.launch_window_max = 0 (no launch for demand ever goes out)",
            )
            .fix("raise policy.launch_window_max in the config (docs/guardrails.md)"),
        );
    }
    out
}

/// The secrets' problems, and which ones other checks must not report again.
#[derive(Debug, Clone, Default)]
pub(super) struct Secrets {
    pub problems: Vec<Problem>,
    /// No vast.ai key: the `vast` check leaves it to this one.
    pub vast_key_missing: bool,
    /// The harmonydb source has no URL: the `demand` check leaves it to this one.
    pub harmonydb_url_missing: bool,
}

/// A secret that no source has (or that cannot be read), by what it stops.
pub(super) fn secrets(config: &Config, env: &crate::env::Env) -> Secrets {
    use crate::config::{DemandSource, EnvValue, Provider};
    use crate::secrets::{lookup, Kind};
    let mut s = Secrets::default();
    let secret = |kind: Kind, what: &str, problems: &mut Vec<Problem>| -> bool {
        match lookup(env, kind) {
            Ok(Some(_)) => false,
            Ok(None) => {
                problems.push(Problem::new(format!("no {what}")).fix(kind.hint()));
                true
            }
            Err(e) => {
                problems.push(Problem::new(format!(
                    "{what}: {}",
                    crate::error::report(&e)
                )));
                true
            }
        }
    };
    s.vast_key_missing = secret(
        Kind::VastApiKey,
        "vast.ai API key (nothing can be listed, launched or stopped)",
        &mut s.problems,
    );
    if config.llm.provider == Provider::Openai {
        secret(
            Kind::LlmApiKey,
            "LLM API key (every pass that needs the model falls back or fails)",
            &mut s.problems,
        );
    }
    if config.demand.source == DemandSource::Harmonydb && config.demand.harmonydb_url.is_none() {
        s.harmonydb_url_missing = secret(
            Kind::HarmonyDbUrl,
            "HarmonyDB URL (demand is unknown and the fleet is held)",
            &mut s.problems,
        );
    }
    for (name, value) in &config.vast.env {
        if let EnvValue::Credential(c) = value {
            match crate::secrets::credential(env, &c.credential) {
                Ok(Some(_)) => {}
                Ok(None) => s.problems.push(
                    Problem::new(format!(
                        "worker credential {:?} (vast.env.{name}) not found: every launch is refused",
                        c.credential
                    ))
                    .fix(format!("load it with LoadCredential={}:<path>", c.credential)),
                ),
                Err(e) => s.problems.push(Problem::new(format!(
                    "worker credential {:?} (vast.env.{name}): {}",
                    c.credential,
                    crate::error::report(&e)
                ))),
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(policy: &str) -> Vec<String> {
        let config = crate::config::parse(&format!(
            "[vast]\nimage = \"img\"\n[policy]\nmax_dph_total = 5.0\nmax_instances = 4\n{policy}"
        ))
        .unwrap();
        launch(&config).into_iter().map(|p| p.detail).collect()
    }

    /// Every cap at 0 that refuses every launch is named; 0 reads as "none" nowhere among
    /// the caps (an unset cap is how to have none).
    #[test]
    fn a_cap_at_zero_that_refuses_every_launch_is_named() {
        assert!(problems("").is_empty());
        let daily = problems("daily_spend_max = 0");
        assert!(
            daily.len() == 1 && daily[0].contains("policy.daily_spend_max = 0"),
            "{daily:?}"
        );
        let window = problems("launch_window_max = 0");
        assert!(
            window.len() == 1
                && window[0].contains("but for WORKERS DEAD")
                && window[0].contains("policy.launch_window_max = 0"),
            "{window:?}"
        );
        let both = problems("launch_window_max = 0\nemergency_launch_max = 0");
        assert!(
            both.len() == 1
                && both[0].starts_with("launches are impossible: policy.launch_window_max = 0 and"),
            "{both:?}"
        );
        assert!(problems("daily_spend_max = 0.5").is_empty());
    }
}
