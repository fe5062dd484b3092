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
    out.extend(gpu_rates(config));
    out.extend(fence_margin(config));
    out.extend(llm_budget(config));
    out
}

/// `policy.gpu_rates` keys that no offer will ever match, as vast.ai spells GPUs: one that
/// `vast.offers.gpu_names` asks for in another spelling ("RTX4090" for "RTX 4090"), or one
/// with the vendor's words vast.ai leaves out ("NVIDIA GeForce RTX 4090"). Its rate is never
/// used and offers are judged at `proofs_per_hour_per_instance`: a walkthrough saw every
/// launch, WORKERS DEAD's too, refused `unprofitable` for a pinned 60/h read as 20/h, and
/// nothing ever ran to measure it.
fn gpu_rates(config: &Config) -> Vec<Problem> {
    let squash = |s: &str| -> String {
        s.chars()
            .filter(char::is_ascii_alphanumeric)
            .collect::<String>()
            .to_ascii_lowercase()
    };
    let offers = &config.vast.offers;
    let mut out = Vec::new();
    for key in config.policy.gpu_rates.keys() {
        if !offers.gpu_names.is_empty()
            && crate::policy::offers::gpu_asked(offers, &key.replace('_', " "))
        {
            continue;
        }
        let vendor = ["nvidia", "geforce"]
            .iter()
            .any(|w| key.to_ascii_lowercase().contains(w));
        // One inside the other, letters and digits alone: "RTX4090" and "NVIDIA GeForce RTX
        // 4090" for "RTX 4090", and the re-test's "4090", "T4" ("Tesla T4"), "GH200" ("GH200
        // SXM"). A key gpu_names does not ask for is never used anyway.
        let k = squash(key);
        let near = offers.gpu_names.iter().find(|g| {
            let g = squash(g);
            !g.is_empty() && !k.is_empty() && (k.contains(&g) || g.contains(&k))
        });
        let meant = match (near, vendor) {
            (Some(g), _) => {
                format!("vast.offers.gpu_names asks for \"{g}\": is that the GPU meant?")
            }
            (None, true) => {
                "vast.ai names GPUs without the vendor's words (\"RTX 4090\", \"A100 SXM4\")"
                    .to_string()
            }
            (None, false) => continue,
        };
        out.push(
            Problem::new(format!(
                "policy.gpu_rates pins \"{key}\", which no offer fleetagent rents is named ({meant}): its rate is never used, offers are judged at policy.proofs_per_hour_per_instance ({}/h), and a launch that pays at the pinned rate may be refused unprofitable",
                config.policy.proofs_per_hour_per_instance
            ))
            .fix("spell the key as vast.ai names the GPU (as in vast.offers.gpu_names or `fleetagent inspect`'s offers; any case, `_` for a space)"),
        );
    }
    out
}

/// Room a prompt needs beyond the system prompt and the tools: the pinned state block and the
/// observation with this pass's events (measured: 650 on the incident's first hour with a
/// handful of instances; more with a larger fleet), so that a budget this close to the fixed
/// part is named before passes find it out.
pub const PROMPT_ROOM_TOKENS: u64 = 1_000;

/// The fleet as the last pass left it, over a cap the config now sets (lowered since): the
/// next pass stops the surplus, young rentals too if no other can go, never one that is
/// proving (only the operator's `--force` stops one: a walkthrough saw a busy fleet kept over
/// a lowered cap pass after pass while this said the next pass stops it), and nothing while
/// the fleet is held (`held` says by what: the operator's pause, a failed demand probe).
/// Said before it does.
pub(super) fn fleet_over_caps(
    conn: &rusqlite::Connection,
    config: &Config,
    held: Option<&str>,
) -> Vec<Problem> {
    let rows = match crate::store::instances::live(conn) {
        Ok(r) => r,
        Err(e) => return vec![super::unreadable("instances", &e)],
    };
    let rows: Vec<&crate::store::instances::InstanceRow> = rows.iter().collect();
    let Some(figures) = crate::fleet::over_caps(&rows, &config.policy) else {
        return Vec::new();
    };
    if let Some(held) = held {
        return vec![Problem::new(format!(
            "the fleet of ours is over {figures}, and {held}: no pass stops the surplus (rule over_cap) while it lasts"
        ))
        .fix("end the hold (the check it names says how), or end the surplus now with `fleetagent instances stop ID --force` (`fleetagent instances list` names them)")];
    }
    let billing = rows
        .iter()
        .filter(|r| crate::fleet::is_billing_state(r.state));
    let (proving, idle) = billing.clone().fold((0, 0), |(p, i), r| match r.state {
        crate::fleet::PROVING => (p + 1, i),
        _ => (p, i + 1),
    });
    let mut proving_said = match (proving, idle) {
        (0, _) => String::new(),
        (p, 0) => format!("; but all {p} are proving, and a pass never stops one that proves: nothing goes until a proof ends (on a busy cluster that may be never)"),
        (p, _) => format!("; {p} proving are not stopped while they prove"),
    };
    // The stop guardrail keeps the cluster's last live worker while proofs wait, over a cap
    // too (a walkthrough's `max_instances = 0` kept it, refused every pass, while this said
    // the next pass stops it): named with the way to end it.
    let last_reading: Option<crate::demand::Demand> = crate::store::curio::last_reading(conn)
        .ok()
        .and_then(|(j, _)| j)
        .and_then(|j| serde_json::from_str(&j).ok());
    let last_worker = last_reading
        .filter(|d| d.live_workers() <= 1 && d.queued_work() > 0)
        .and_then(|d| {
            billing
                .clone()
                .find(|r| {
                    r.state != crate::fleet::PROVING
                        && r.machine_name
                            .as_ref()
                            .is_some_and(|m| d.has_worker(m, false))
                })
                .map(|r| (r.vast_id.unwrap_or(0), d.queued_work()))
        });
    if let Some((id, queued)) = last_worker {
        proving_said.push_str(&format!("; instance {id} is the cluster's last live worker while {queued} proofs wait, which no pass stops (only `fleetagent instances stop {id} --force` does)"));
    }
    vec![Problem::new(format!(
        "the fleet of ours is over {figures}: the next pass stops the surplus (rule over_cap), an instance within policy.min_rental_mins of its start too when no other can go{proving_said}{}",
        if config.policy.dry_run {
            " (under policy.dry_run it only says what it would stop)"
        } else {
            ""
        }
    ))
    .fix("if the cap was lowered on purpose, or vast.ai bills an instance above its offer (a journal line at warning says so): the next pass stops what is idle, and `fleetagent instances stop ID --force` ends one that is proving now (its proof is handed back to Curio) or the last live worker; if not, set it back before the next pass, or `fleetagent pause --reason ...` (a pause stops nothing) while you decide")]
}

/// `policy.daily_spend_max` reached: today's spend and an hour of the fleet as it is pass the
/// cap, so no launch can fit until 00:00 UTC, WORKERS DEAD's included (the guardrail's own
/// test, without an offer). The refusals are notices; this says it while it lasts.
pub(super) fn daily_spend_reached(
    conn: &rusqlite::Connection,
    config: &Config,
    now: crate::clock::Millis,
) -> Vec<Problem> {
    use crate::fleet::day::DAY_MS;
    let Some(max) = config.policy.daily_spend_max else {
        return Vec::new();
    };
    let (spent, live) = match (
        crate::metrics::spend_today(conn, config, now),
        crate::store::instances::live(conn),
    ) {
        (Ok(s), Ok(l)) => (s, l),
        (Err(e), _) | (_, Err(e)) => return vec![super::unreadable("instances", &e)],
    };
    // As the guardrail counts the fleet: one listed without a price at the most it may cost.
    let unpriced = crate::fleet::money::unpriced_dph(config).unwrap_or(0.0);
    let fleet = crate::fleet::money::caps_dph(&live, unpriced);
    let hours = crate::policy::guardrails::DAILY_LOOKAHEAD_HOURS;
    if spent + fleet * hours <= max {
        return Vec::new();
    }
    vec![Problem::new(format!(
        "policy.daily_spend_max is reached: ${spent:.2} spent today (UTC) + {hours:.0} h of the fleet (${fleet:.2}/h) passes ${max:.2}, so every launch is refused until 00:00 UTC (in {}), WORKERS DEAD's included",
        crate::clock::human_duration(DAY_MS - now.rem_euclid(DAY_MS))
    ))
    .fix(format!("the cap holds back launches only: what runs bills on (${fleet:.2}/h, about ${:.2} more by 00:00 UTC); stop instances (`fleetagent instances stop ID`, or `instances stop --all --reason ...`) if the spend must end; if it is meant, raise policy.daily_spend_max", fleet * (DAY_MS - now.rem_euclid(DAY_MS)) as f64 / 3_600_000.0))]
}

/// `[llm]` with `provider = "openai"`: a budget that, after its margin and
/// `max_output_tokens`, cannot hold the system prompt, the tools and the room of a minimal
/// pass: every pass that asks the model is refused before the request and decided by the
/// fallback (validation knows no token counts, so the config loads).
fn llm_budget(config: &Config) -> Vec<Problem> {
    use crate::llm::{ChatMessage, Role};
    if config.llm.provider != crate::config::Provider::Openai {
        return Vec::new();
    }
    let Ok(tk) = crate::tokens::Tokenizer::for_config(config) else {
        return Vec::new(); // a bad llm.encoding is refused by the config's validation
    };
    let fixed = tk.count_message(&ChatMessage {
        role: Role::System,
        content: crate::prompt::SYSTEM_PROMPT.trim_end().to_string(),
        tool_calls: Vec::new(),
        tool_call_id: None,
    }) + tk.count_tools(&crate::tools::registry().specs());
    let budget = crate::prompt::effective_budget(config);
    let needed = fixed + PROMPT_ROOM_TOKENS;
    if budget >= needed {
        return Vec::new();
    }
    let l = &config.llm;
    // The smallest budget whose share for the prompt holds `needed` (from the estimate, to
    // the token: the margin is rounded down).
    let margin = crate::prompt::BUDGET_MARGIN_PERCENT;
    let share = |b: u64| {
        let mut c = config.clone();
        c.llm.context_budget_tokens = b;
        crate::prompt::effective_budget(&c)
    };
    let mut least = ((needed + l.max_output_tokens) * 100).div_ceil(100 - margin);
    while share(least) < needed {
        least += 1;
    }
    while least > 0 && share(least - 1) >= needed {
        least -= 1;
    }
    vec![Problem::new(format!(
        "llm.context_budget_tokens = {} leaves {budget} tokens for the prompt (after its {margin} % margin and llm.max_output_tokens = {}), and the system prompt and the tools alone take {fixed}, with about {PROMPT_ROOM_TOKENS} more for the state and the observation: the model is asked seldom or never, and the fallback decides the rest",
        l.context_budget_tokens, l.max_output_tokens
    ))
    .fix(format!(
        "raise llm.context_budget_tokens to {least} or more (the server's context must hold it), or lower llm.max_output_tokens"
    ))]
}

/// `[ha]`: a fence margin the lease cannot keep between two renewals (the keeper renews every
/// 2/15 of the lease): every fenced step would find "less than the margin left" and the
/// leader would stop itself.
fn fence_margin(config: &Config) -> Vec<Problem> {
    let ha = &config.ha;
    let kept = ha.lease_ttl_secs as f64 * 13.0 / 15.0;
    if !ha.enabled || ha.fence_margin_secs as f64 <= kept {
        return Vec::new();
    }
    vec![Problem::new(format!(
        "ha.fence_margin_secs = {} is more than the lease keeps between renewals ({:.0}s of lease_ttl_secs = {}): the leader's fenced steps fail as if the lease were lost",
        ha.fence_margin_secs, kept, ha.lease_ttl_secs
    ))
    .fix(format!(
        "lower ha.fence_margin_secs to {:.0} or less (the default is half the lease)",
        kept.floor()
    ))]
}

/// Launches made impossible by the config: keys unset, caps at 0, a dry run.
fn launch(config: &Config) -> Vec<Problem> {
    let mut out = Vec::new();
    if config.policy.dry_run {
        // A trial left on is a fleet nobody tends: WORKERS DEAD said every pass, nothing
        // rented, and doctor was green (a walkthrough).
        out.push(
            Problem::new(
                "policy.dry_run = true: nothing is sent to vast.ai, no launch, no stop, WORKERS DEAD's launches and `instances stop` (--all too) included",
            )
            .fix("set policy.dry_run = false once the trial is over"),
        );
    }
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
    /// Secrets no source of this process has, with the index of their problem.
    missing: Vec<(crate::secrets::Kind, usize)>,
}

impl Secrets {
    /// Leave out the secrets this process lacks that the service's own passes, by the
    /// database, have used lately (`used`: `doctor::agent::service_used`): doctor at a shell
    /// does not see a user manager's `EnvironmentFile=` drop-in, nor credentials only the
    /// units load, and "no vast.ai API key" sent the operator after the wrong cause. Once:
    /// the problems' indices are spent.
    pub fn leave_out_used(&mut self, used: impl Fn(crate::secrets::Kind) -> bool) {
        use crate::secrets::Kind;
        let mut gone: Vec<usize> = Vec::new();
        for (kind, at) in std::mem::take(&mut self.missing) {
            if used(kind) {
                gone.push(at);
                match kind {
                    Kind::VastApiKey => self.vast_key_missing = false,
                    Kind::HarmonyDbUrl => self.harmonydb_url_missing = false,
                    _ => {}
                }
            }
        }
        let mut at = 0;
        self.problems.retain(|_| {
            at += 1;
            !gone.contains(&(at - 1))
        });
    }
}

/// A secret that no source has (or that cannot be read), by what it stops.
pub(super) fn secrets(config: &Config, env: &crate::env::Env) -> Secrets {
    use crate::config::{DemandSource, EnvValue, Provider};
    use crate::secrets::{lookup, Kind};
    let mut s = Secrets::default();
    let secret = |kind: Kind, what: &str, s: &mut Secrets| -> bool {
        let problems = &mut s.problems;
        match lookup(env, kind) {
            Ok(Some(_)) => false,
            Ok(None) => {
                s.missing.push((kind, problems.len()));
                let problem = match crate::secrets::empty_credential_file(env, kind.credential()) {
                    Some(path) => Problem::new(format!(
                        "no {what}: the credential file {} is empty",
                        path.display()
                    ))
                    .fix(format!(
                        "write the value into {}, or {}",
                        crate::secrets::where_to_put(env, kind.credential()),
                        kind.env_hint()
                    )),
                    None => Problem::new(format!("no {what}")).fix(format!(
                        "write it into {}, or {}",
                        crate::secrets::where_to_put(env, kind.credential()),
                        kind.env_hint()
                    )),
                };
                problems.push(problem);
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
        &mut s,
    );
    if config.llm.provider == Provider::Openai {
        secret(
            Kind::LlmApiKey,
            "LLM API key (every pass that needs the model falls back or fails)",
            &mut s,
        );
    }
    if config.demand.source == DemandSource::Harmonydb && config.demand.harmonydb_url.is_none() {
        s.harmonydb_url_missing = secret(
            Kind::HarmonyDbUrl,
            "HarmonyDB URL (demand is unknown and the fleet is held)",
            &mut s,
        );
    }
    for (name, value) in &config.vast.env {
        if let EnvValue::Credential(c) = value {
            match crate::secrets::credential(env, &c.credential) {
                Ok(Some(_)) => {}
                Ok(None) => s.problems.push(
                    Problem::new(format!(
                        "worker credential {:?} (vast.env.{name}) {}: every launch is refused",
                        c.credential,
                        match crate::secrets::empty_credential_file(env, &c.credential) {
                            Some(path) => format!("is empty ({})", path.display()),
                            None => "not found".to_string(),
                        }
                    ))
                    .fix(format!(
                        "write it into {}",
                        crate::secrets::where_to_put(env, &c.credential)
                    )),
                ),
                Err(e) => s.problems.push(Problem::new(format!(
                    "worker credential {:?} (vast.env.{name}): {}",
                    c.credential,
                    crate::error::report(&e)
                ))),
            }
        }
    }
    // Unset is a public image (a note says it); unreadable refuses every launch, as the
    // launch tool reads it before each create.
    if let Err(e) = lookup(env, Kind::VastImageLogin) {
        let name = Kind::VastImageLogin.credential();
        s.problems.push(
            Problem::new(format!(
                "registry login ({name}): {}: every launch is refused",
                crate::error::report(&e)
            ))
            .fix(format!(
                "write it as UTF-8 text into {}, or {}",
                crate::secrets::where_to_put(env, name),
                Kind::VastImageLogin.env_hint()
            )),
        );
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

    /// A fence margin above what the lease keeps between renewals (13/15 of it) is named;
    /// the default, and one just within, are not.
    #[test]
    fn a_fence_margin_the_lease_cannot_keep_is_named() {
        let margin = |ha: &str| {
            let config = crate::config::parse(&format!(
                "[vast]\ntimeout_secs = 5\n[ha]\nenabled = true\n{ha}"
            ))
            .unwrap();
            fence_margin(&config)
                .into_iter()
                .map(|p| p.detail)
                .collect::<Vec<_>>()
        };
        assert!(margin("").is_empty());
        assert!(margin("lease_ttl_secs = 150\nfence_margin_secs = 130").is_empty());
        let high = margin("lease_ttl_secs = 100\nfence_margin_secs = 90");
        assert!(
            high.len() == 1
                && high[0].contains("fence_margin_secs = 90")
                && high[0].contains("87s"),
            "{high:?}"
        );
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
        // A trial left on: nothing is rented whatever happens.
        let dry = problems("dry_run = true");
        assert!(
            dry.len() == 1 && dry[0].starts_with("policy.dry_run = true: nothing is sent"),
            "{dry:?}"
        );
    }

    /// An empty credential file reads as unset, as an empty variable does, and the check
    /// names the file (the operator looks for it and finds it there); a missing one does not.
    #[test]
    fn an_empty_credential_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("vast_api_key"), " \n").unwrap();
        std::fs::write(dir.path().join("curio_pw"), "").unwrap();
        let config = crate::config::parse(
            "[llm]\nprovider = \"rules\"\n[demand]\nsource = \"http\"\nhttp_url = \"http://127.0.0.1:1/d\"\n\
             [vast.env]\nPW = { credential = \"curio_pw\" }\nOTHER = { credential = \"absent\" }",
        )
        .unwrap();
        let env = crate::env::Env::from_pairs([(
            "CREDENTIALS_DIRECTORY".to_string(),
            dir.path().display().to_string(),
        )]);
        let s = secrets(&config, &env);
        assert!(s.vast_key_missing);
        let lines: Vec<String> = s
            .problems
            .iter()
            .map(|p| format!("{} | {}", p.detail, p.fix.clone().unwrap_or_default()))
            .collect();
        let file = dir.path().join("vast_api_key").display().to_string();
        assert!(
            lines.iter().any(|l| l.starts_with("no vast.ai API key")
                && l.contains(&format!("the credential file {file} is empty"))
                && l.contains("/etc/credstore/fleetagent.vast_api_key")),
            "{lines:?}"
        );
        assert!(
            lines
                .iter()
                .any(|l| l.contains("\"curio_pw\" (vast.env.PW) is empty (")),
            "{lines:?}"
        );
        assert!(
            lines
                .iter()
                .any(|l| l.contains("\"absent\" (vast.env.OTHER) not found")
                    && l.contains("/etc/credstore/fleetagent.absent")),
            "{lines:?}"
        );
        let err = crate::secrets::require_credential(&env, "curio_pw").unwrap_err();
        assert!(format!("{err}").contains("is empty"), "{err}");
        assert!(
            !lines.iter().any(|l| l.contains("registry login")),
            "{lines:?}"
        );
        // A registry login that cannot be read (UTF-16 from a Windows editor) refuses every
        // launch: a problem, as an unreadable worker credential is.
        std::fs::write(dir.path().join("vast_image_login"), [0xff, 0xfe, b'-', 0]).unwrap();
        let login: Vec<String> = secrets(&config, &env)
            .problems
            .iter()
            .map(|p| format!("{} | {}", p.detail, p.fix.clone().unwrap_or_default()))
            .filter(|l| l.contains("vast_image_login"))
            .collect();
        assert!(
            login.len() == 1
                && login[0]
                    .starts_with("registry login (vast_image_login): cannot read credential")
                && login[0].contains("every launch is refused | write it as UTF-8 text into"),
            "{login:?}"
        );
        // At an operator's shell (no $CREDENTIALS_DIRECTORY), a missing key's and a missing
        // worker credential's fixes name the store's file the units load, not a unit line.
        let env = crate::env::Env::from_pairs([(
            "FLEETAGENT_CREDSTORE".to_string(),
            format!("{}/store:/run/credstore", dir.path().display()),
        )]);
        let store = dir.path().join("store").display().to_string();
        let fixes: Vec<String> = secrets(&config, &env)
            .problems
            .iter()
            .map(|p| format!("{} | {}", p.detail, p.fix.clone().unwrap_or_default()))
            .collect();
        for (what, file) in [
            ("no vast.ai API key", "fleetagent.vast_api_key"),
            ("(vast.env.OTHER) not found", "fleetagent.absent"),
        ] {
            assert!(
                fixes
                    .iter()
                    .any(|l| l.contains(what)
                        && l.contains(&format!("write it into {store}/{file}"))),
                "{what}: {fixes:?}"
            );
        }
    }

    /// A model budget that cannot hold the fixed part of a prompt is named with the budget
    /// that would; the default and a budget just large enough are not; the rules need none.
    #[test]
    fn a_model_budget_that_holds_no_prompt_is_named() {
        let detail = |llm: &str| -> Vec<String> {
            let config = crate::config::parse(&format!("[llm]\n{llm}")).unwrap();
            llm_budget(&config)
                .into_iter()
                .map(|p| format!("{} | {}", p.detail, p.fix.unwrap_or_default()))
                .collect()
        };
        assert!(detail("").is_empty());
        let small = detail("context_budget_tokens = 2000");
        assert!(
            small.len() == 1
                && small[0].starts_with(
                    "llm.context_budget_tokens = 2000 leaves 876 tokens for the prompt"
                ),
            "{small:?}"
        );
        // The budget it names is enough, and one token less is not.
        let least: u64 = small[0]
            .split("raise llm.context_budget_tokens to ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap();
        assert!(detail(&format!("context_budget_tokens = {least}")).is_empty());
        assert_eq!(
            detail(&format!("context_budget_tokens = {}", least - 1)).len(),
            1
        );
        assert!(detail("provider = \"rules\"\ncontext_budget_tokens = 2000").is_empty());
    }
}
