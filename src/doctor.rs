//! Health checks for monitoring: each problem is one line naming what is wrong and what to
//! do. Never takes the lock, never writes (writability is checked with access(2)).

use std::path::Path;

use serde_json::Value;

use crate::clock::{human_duration, Millis};
use crate::config::Config;
use crate::demand::{Demand, RequestLoop};
use crate::store::instances::InstanceRow;
use crate::store::{calibration, events, session, wakes, Store};

/// No successful pass within this many timer periods is a problem.
const STALE_PERIODS: i64 = 3;
const DAY_MS: Millis = 86_400_000;
/// Below this many model passes in a day, the floor's share says little.
const OVERRULED_MIN_PASSES: i64 = 3;
/// The calls that reported usage whose reported/estimate ratios the calibration is checked
/// against.
const CALIBRATION_CALLS: i64 = 50;

/// The floor overruled the model on most of its passes of the last day: the model leaves the
/// fleet unprotected (a working but useless model), and the operator should know.
pub fn overruled(floor: i64, model_passes: i64) -> Option<String> {
    (model_passes >= OVERRULED_MIN_PASSES && floor * 2 > model_passes).then(|| {
        format!(
            "the floor overruled the model on {floor} of its {model_passes} passes in the last day ({}%): it leaves what protects the fleet undone; check llm.model with `fleetagent sim --llm`, or set llm.provider = \"rules\"",
            floor * 100 / model_passes
        )
    })
}

/// The model's tokenizer counts more than our estimate (a reported/estimate ratio above 1.0)
/// by more than the calibrated budget and its margin absorb: the largest recent prompt of
/// that kind would have overflowed `llm.context_budget_tokens` by the server's count. A
/// ratio the calibration covers is no problem (`inspect` shows it beside the calibrated one).
pub fn uncalibrated(
    model: &str,
    measured_max: f64,
    calls: i64,
    calibrated: Option<f64>,
) -> Option<String> {
    let ratio = calibrated.unwrap_or(1.0).max(1.0);
    let margin = crate::prompt::BUDGET_MARGIN_PERCENT as f64 / 100.0;
    let covered = ratio / (1.0 - margin);
    (measured_max > 1.0 && measured_max > covered).then(|| {
        let state = match calibrated {
            Some(r) => format!("the budget is calibrated for {r:.3}x only"),
            None => format!("the budget is not calibrated for llm.model {model:?}"),
        };
        format!(
            "the model's tokenizer counts up to {measured_max:.3}x our estimate ({model}, over the last {calls} calls that reported usage) and {state}: a prompt near llm.context_budget_tokens can overflow the server's context; every call that reports usage recalibrates it (see `fleetagent inspect`), else lower llm.context_budget_tokens"
        )
    })
}

pub fn problems(
    config: &Config,
    env: &crate::env::Env,
    state_dir: &Path,
    now: Millis,
    units: Option<&Value>,
) -> Vec<String> {
    let mut out = Vec::new();
    // A state dir on a read-only file system is a problem, and still read (read-only).
    let readable = match crate::paths::state_dir_access(state_dir) {
        Ok(crate::paths::DirAccess::Writable) => true,
        Ok(crate::paths::DirAccess::ReadOnlyFs) => {
            out.push(crate::paths::read_only_fs(state_dir));
            true
        }
        Err(e) => {
            out.push(format!("{e:#}"));
            false
        }
    };
    if readable {
        if !state_dir.join(crate::store::DB_FILE).exists() {
            out.push(format!(
                "no database in state dir {} (run `fleetagent init`)",
                state_dir.display()
            ));
        } else {
            match Store::open_for_report(state_dir, now) {
                Err(e) => out.push(format!(
                    "database: {}",
                    crate::error::report(&crate::paths::name_storage_fault(e, state_dir))
                )),
                Ok(store) => store_problems(&store, config, state_dir, now, &mut out),
            }
        }
    }
    if let Some(units) = units.and_then(|u| u.as_object()) {
        for (name, u) in units {
            if let Some(problem) = u.get("problem").and_then(|p| p.as_str()) {
                let fix = u.get("fix").and_then(|f| f.as_str()).unwrap_or("");
                out.push(format!("unit {name}: {problem}; fix: {fix}"));
            }
        }
    }
    config_problems(config, env, &mut out);
    out
}

/// What the config and the secrets make impossible although both parse: each is a pass that
/// will hold the fleet, fall back or refuse every launch, pass after pass.
fn config_problems(config: &Config, env: &crate::env::Env, out: &mut Vec<String>) {
    use crate::config::{DemandSource, EnvValue, Provider};
    use crate::secrets::{lookup, Kind};
    let missing = config.policy.missing_launch_keys(&config.vast);
    if !missing.is_empty() {
        out.push(format!(
            "launches are impossible: set {} in the config",
            missing.join(", ")
        ));
    }
    let p = &config.policy;
    let mut zero = Vec::new();
    if p.max_instances == Some(0) {
        zero.push("policy.max_instances = 0");
    }
    if p.max_dph_total.is_some_and(|v| v <= 0.0) {
        zero.push("policy.max_dph_total = 0");
    }
    if p.launch_window_max == 0 && p.emergency_launch_max == 0 {
        zero.push("policy.launch_window_max = 0 and policy.emergency_launch_max = 0");
    }
    if !zero.is_empty() {
        out.push(format!("launches are impossible: {}", zero.join(", ")));
    }
    let mut secret = |kind: Kind, what: &str| match lookup(env, kind) {
        Ok(Some(_)) => {}
        Ok(None) => out.push(format!("no {what}: {}", kind.hint())),
        Err(e) => out.push(format!("{what}: {}", crate::error::report(&e))),
    };
    secret(
        Kind::VastApiKey,
        "vast.ai API key (nothing can be listed, launched or stopped)",
    );
    if config.llm.provider == Provider::Openai {
        secret(
            Kind::LlmApiKey,
            "LLM API key (every pass that needs the model falls back or fails)",
        );
    }
    if config.demand.source == DemandSource::Harmonydb && config.demand.harmonydb_url.is_none() {
        secret(
            Kind::HarmonyDbUrl,
            "HarmonyDB URL (demand is unknown and the fleet is held)",
        );
    }
    for (name, value) in &config.vast.env {
        if let EnvValue::Credential(c) = value {
            match crate::secrets::credential(env, &c.credential) {
                Ok(Some(_)) => {}
                Ok(None) => out.push(format!(
                    "worker credential {:?} (vast.env.{name}) not found: every launch is refused; load it with LoadCredential={}:<path>",
                    c.credential, c.credential
                )),
                Err(e) => out.push(format!(
                    "worker credential {:?} (vast.env.{name}): {}",
                    c.credential,
                    crate::error::report(&e)
                )),
            }
        }
    }
}

/// What the last Curio reading says is wrong outside fleetagent: ProofShare switched off
/// while instances of ours bill, a stalled request loop, and the parts that could not be
/// read (a missing grant). `age_ms`: how old the reading is.
pub fn curio_problems(d: &Demand, rows: &[InstanceRow], age_ms: Millis) -> Vec<String> {
    let ago = human_duration(age_ms);
    let mut out = Vec::new();
    let billing = rows
        .iter()
        .filter(|r| crate::fleet::is_billing_state(r.state))
        .count();
    if d.proofshare_disabled() && billing > 0 {
        out.push(format!(
            "Curio: ProofShare is disabled (proofshare_meta.enabled is false, read {ago} ago) while {billing} instance(s) of ours bill: no work will come for them; enable it in Curio's web UI or stop them"
        ));
    }
    if d.request_loop == Some(RequestLoop::Stalled) {
        out.push(format!(
            "Curio: the ProofShare request loop is stalled (proofshare_meta.request_task_id points at a task nobody owns, read {ago} ago): Curio asks the market for no work; check the Curio nodes that run PSProve"
        ));
    }
    for note in &d.notes {
        out.push(format!(
            "Curio reading (read {ago} ago): {}",
            crate::text::clip(note, 300)
        ));
    }
    out
}

/// Facts `doctor` states that are not problems, one line each: whether the private image's
/// registry login (`vast_image_login`) is set (never its value).
pub fn notes(env: &crate::env::Env) -> Vec<String> {
    use crate::secrets::{lookup, Kind};
    let login = match lookup(env, Kind::VastImageLogin) {
        Ok(Some(_)) => "set: sent as image_login on every create".to_string(),
        Ok(None) => "not set (the worker image must be public)".to_string(),
        Err(e) => format!("unreadable: {}", crate::error::report(&e)),
    };
    vec![format!("vast_image_login: {login}")]
}

/// The price as the last pass left it: unknown (why, and the keys that make it known), or
/// known while the FIL/USD fetch fails (the cached value ages towards unknown).
pub fn price_problems(store: &Store, config: &Config, now: Millis) -> Vec<String> {
    let mut out = Vec::new();
    let (price, cache) = match crate::run::observe::stored_price(&store.conn, config, now) {
        Ok(p) => p,
        Err(e) => {
            out.push(format!("database: {}", crate::error::report(&e)));
            return out;
        }
    };
    match (price, &cache.error) {
        (Err(why), _) => out.push(format!(
            "price unknown: {why}: the profit check is off, so launches are not judged by profit; set price.proof_price_fil (or Curio's ask price, proofshare_meta.pprice) and one of price.fil_usd, price.fil_usd_command, price.fil_usd_url"
        )),
        (Ok(p), Some(e)) if config.price.fil_usd.is_none() => out.push(format!(
            "the FIL/USD fetch failed: {e}; the value fetched {} ago is used until it is older than price.max_age_mins ({})",
            human_duration(now - p.fil_usd_at),
            config.price.max_age_mins
        )),
        (Ok(_), _) => {}
    }
    out
}

fn store_problems(
    store: &Store,
    config: &Config,
    state_dir: &Path,
    now: Millis,
    out: &mut Vec<String>,
) {
    match store.quick_check() {
        Ok(bad) if bad.is_empty() => {}
        // SQLite's findings can span lines; a problem is one line.
        Ok(bad) => out.push(format!(
            "database integrity check failed: {} ({})",
            crate::text::clip(&bad.join("; "), 300),
            crate::error::DAMAGED_DATABASE_HINT
        )),
        Err(e) => out.push(format!(
            "database integrity check could not run: {}",
            crate::error::report(&e)
        )),
    }
    // Worker identity, from the table as the last pass left it.
    match crate::store::instances::live(&store.conn) {
        Ok(rows) => {
            out.extend(crate::fleet::identity::problems(&rows, config, now));
            match crate::store::curio::last_reading(&store.conn) {
                Ok((Some(json), Some(at))) => match serde_json::from_str::<Demand>(&json) {
                    Ok(d) => out.extend(curio_problems(&d, &rows, now - at)),
                    Err(e) => out.push(format!(
                        "database: agent_state.last_reading is not a demand reading: {e}"
                    )),
                },
                Ok(_) => {}
                Err(e) => out.push(format!("database: {}", crate::error::report(&e))),
            }
        }
        Err(e) => out.push(format!("database: {}", crate::error::report(&e))),
    }
    out.extend(price_problems(store, config, now));
    let period = config.run.timer_period_secs as i64 * 1000;
    match session::state(&store.conn) {
        Err(e) => out.push(format!("database: {}", crate::error::report(&e))),
        Ok(state) => {
            match state.last_success_at {
                None => out.push(
                    "no successful run yet: check that fleetagent.timer is active and read `journalctl -u fleetagent`".into(),
                ),
                Some(t) if now - t > STALE_PERIODS * period => out.push(format!(
                    "no successful run for {} (more than {STALE_PERIODS} timer periods): check the timer and `fleetagent inspect`",
                    human_duration(now - t)
                )),
                Some(_) => {}
            }
            if let (Some(err), Some(at)) = (&state.last_llm_error, state.last_llm_error_at) {
                out.push(format!(
                    "the LLM failed {} ago: {err}",
                    human_duration(now - at)
                ));
            }
        }
    }
    // The latest pass failed (an LLM with fallback "none", a database error, or a process
    // killed at its deadline, which the next run marks failed "interrupted"): say so until a
    // pass succeeds, so one bad run is seen before the staleness check above fires.
    if let Ok(Some(last)) = crate::store::runs::recent(&store.conn, 1).map(|r| r.into_iter().next())
    {
        if last.status == crate::store::runs::Status::Failed {
            out.push(format!(
                "the last run ({}) failed {} ago: {}",
                last.id,
                human_duration(now - last.finished_at.unwrap_or(last.started_at)),
                crate::text::clip(last.error.as_deref().unwrap_or("no error recorded"), 300)
            ));
        }
    }
    if let Ok(d) = crate::store::runs::decided_since(&store.conn, now - DAY_MS) {
        if let Some(line) = overruled(d.floor, d.llm + d.floor) {
            out.push(line);
        }
    }
    if config.llm.provider == crate::config::Provider::Openai {
        let model = &config.llm.model;
        if let (Ok(m), Ok(c)) = (
            calibration::measured(&store.conn, CALIBRATION_CALLS),
            calibration::ratio(&store.conn, model),
        ) {
            if let Some(line) = m
                .max_ratio
                .and_then(|max| uncalibrated(model, max, m.calls, c))
            {
                out.push(line);
            }
        }
    }
    if let Ok(c) = events::counts(&store.conn, now) {
        if c.failed > 0 {
            out.push(format!(
                "{} event(s) failed after {} attempts (kept; see `fleetagent inspect`)",
                c.failed,
                events::MAX_ATTEMPTS
            ));
        }
    }
    if let Ok(c) = wakes::counts(&store.conn, now) {
        if c.failed > 0 {
            out.push(format!(
                "{} wake(s) failed after {} attempts (see `fleetagent wakes list --all`)",
                c.failed,
                wakes::MAX_ATTEMPTS
            ));
        }
    }
    if let Ok(n) = crate::store::actions::silent_destroys_since(
        &store.conn,
        now - crate::fleet::SILENT_WINDOW_MS,
    ) {
        if n >= crate::fleet::SILENT_DESTROYS_MAX {
            out.push(format!(
                "{n} silent workers (heartbeat, no proof while work waited) were destroyed in the last 6 h: no more are flagged silent until fewer remain in that window, since the cause is likely the worker image (its proof-parameter fetch) or Curio, not the hosts; read a worker's log and docs/worker-image.md"
            ));
        }
    }
    if let Ok(Some((reset, at))) = crate::store::bad_hosts::search_quota(&store.conn) {
        if now - at < DAY_MS {
            let until = crate::vast::quota_until(&reset);
            out.push(format!(
                "vast.ai search quota exhausted until {until} (said {} ago): no launch can search offers before then",
                human_duration(now - at)
            ));
        }
    }
    let lock_path = state_dir.join(crate::paths::LOCK_FILE);
    if let Some(pid) = crate::lock::holder_pid(&lock_path) {
        let deadline = config.run.deadline_secs as i64 * 1000;
        if let Some(since) = crate::lock::held_since(state_dir, pid) {
            if now - since > deadline {
                out.push(format!(
                    "run lock held by pid {pid} for {}, past the {}s deadline: the run is stuck (kill {pid})",
                    human_duration(now - since),
                    config.run.deadline_secs
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_overruled_on_most_passes_is_reported_with_the_figure() {
        assert_eq!(overruled(0, 100), None);
        assert_eq!(overruled(5, 10), None, "half is not most");
        assert_eq!(overruled(2, 2), None, "too few passes to judge");
        let line = overruled(14, 20).unwrap();
        assert!(
            line.starts_with(
                "the floor overruled the model on 14 of its 20 passes in the last day (70%)"
            ),
            "{line}"
        );
    }

    #[test]
    fn a_tokenizer_ratio_is_a_problem_only_where_the_calibration_does_not_cover_it() {
        let model = "qwen2.5-coder-0.5b";
        // Our estimate over-counts, or the calibrated budget and its margin absorb the ratio.
        assert_eq!(uncalibrated(model, 0.9, 10, None), None);
        assert_eq!(uncalibrated(model, 1.04, 10, None), None, "the 5 % margin");
        assert_eq!(uncalibrated(model, 1.166, 10, Some(1.19)), None);
        assert_eq!(uncalibrated(model, 1.24, 10, Some(1.19)), None);
        // Beyond it: one line with the figure and the model.
        let line = uncalibrated(model, 1.166, 12, None).unwrap();
        assert!(
            line.starts_with(
                "the model's tokenizer counts up to 1.166x our estimate (qwen2.5-coder-0.5b, over the last 12 calls that reported usage) and the budget is not calibrated for llm.model \"qwen2.5-coder-0.5b\""
            ),
            "{line}"
        );
        let line = uncalibrated(model, 1.5, 50, Some(1.19)).unwrap();
        assert!(line.contains("calibrated for 1.190x only"), "{line}");
        assert!(!line.contains('\n'));
    }
}
