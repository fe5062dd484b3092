//! The checks of the agent's own passes: whether they run and succeed, what their calls came
//! to, the model's health, and the events and wakes that failed.

use std::path::Path;

use rusqlite::Connection;

use super::{unreadable, Problem};
use crate::clock::{human_duration, Millis};
use crate::config::Config;
use crate::store::runs::{Status, Verdict};
use crate::store::session::AgentState;
use crate::store::{calibration, events, health, wakes};

/// No successful pass within this many timer periods is a problem (and so is a demand
/// reading this old).
pub(super) const STALE_PERIODS: i64 = 3;
const HOUR_MS: Millis = 3_600_000;
const DAY_MS: Millis = 86_400_000;
/// Below this many model passes in a day, the floor's share says little.
const OVERRULED_MIN_PASSES: i64 = 3;
/// The calls that reported usage whose reported/estimate ratios the calibration is checked
/// against.
const CALIBRATION_CALLS: i64 = 50;

pub(super) fn last_success(state: &AgentState, config: &Config, now: Millis) -> Vec<Problem> {
    let period = config.run.timer_period_secs as i64 * 1000;
    match state.last_success_at {
        None => vec![Problem::new("no successful run yet")
            .fix("check that fleetagent.timer is active and read `journalctl -u fleetagent`")],
        Some(t) if now - t > STALE_PERIODS * period => vec![Problem::new(format!(
            "no successful run for {} (more than {STALE_PERIODS} timer periods)",
            human_duration(now - t)
        ))
        .fix("check the timer (`systemctl list-timers fleetagent.timer`), `journalctl -u fleetagent` and `fleetagent inspect`")
        .since(Some(t))],
        // After the clock, not before it: every age reads 0 and this check green for as long
        // as the step, whether passes run or not.
        Some(t) if t > now + crate::store::clock_step::CLOCK_STEP_MS => vec![Problem::new(format!(
            "the last successful run is dated {} after this host's clock: the clock stepped back (NTP, a VM restored), so every age reads short and this check cannot tell whether passes still run",
            human_duration(t - now)
        ))
        .fix("check the clock (`timedatectl`; `chronyc tracking`); the next pass dates the ledger's launches and instances to its own now, and the ages read right once the next passes succeed")],
        Some(_) => Vec::new(),
    }
}

/// Whether this install's own passes have used `kind` lately and since their last failure
/// with it, by what they recorded: a vast.ai listing that worked (the key), a good reading
/// from HarmonyDB (its URL), each within [`STALE_PERIODS`] timer periods, or a model call
/// that worked within a day (the LLM key: a quiet fleet asks the model seldom). A table that
/// cannot be read says no.
pub(super) fn service_used(
    conn: &Connection,
    config: &Config,
    kind: crate::secrets::Kind,
    now: Millis,
) -> bool {
    use crate::secrets::Kind;
    let lately = STALE_PERIODS * config.run.timer_period_secs as i64 * 1000;
    let state = crate::store::session::state(conn);
    match kind {
        Kind::VastApiKey => crate::store::ops::vast_health(conn)
            .is_ok_and(|h| h.ok() && h.ok_at.is_some_and(|at| now - at <= lately)),
        Kind::LlmApiKey => state.is_ok_and(|s| {
            s.last_llm_error.is_none()
                && s.last_llm_call_at
                    .is_some_and(|at| now - at <= crate::fleet::day::DAY_MS)
        }),
        Kind::HarmonyDbUrl => {
            let failed = state.is_ok_and(|s| {
                s.last_demand
                    .as_deref()
                    .and_then(|d| serde_json::from_str::<serde_json::Value>(d).ok())
                    .is_none_or(|v| v["error"].is_string())
            });
            config.demand.source == crate::config::DemandSource::Harmonydb
                && !failed
                && crate::store::curio::last_reading(conn)
                    .is_ok_and(|(_, at)| at.is_some_and(|at| now - at <= lately))
        }
        _ => false,
    }
}

pub(super) fn llm(
    conn: &Connection,
    state: &AgentState,
    config: &Config,
    now: Millis,
) -> Vec<Problem> {
    match (&state.last_llm_error, state.last_llm_error_at) {
        (Some(err), Some(at)) => {
            // How long it has failed, not only its latest failure: a dead server reads "0s
            // ago" at every pass.
            let streak = crate::store::llm_calls::failing_since(conn)
                .ok()
                .flatten()
                .filter(|(first, n)| *first < at && *n > 1);
            let since = streak.map_or(at, |(first, _)| first);
            let how_long = match streak {
                Some((first, n)) => format!(
                    "has failed since {} ago ({n} requests, none answered; the last {} ago)",
                    human_duration(now - first),
                    human_duration(now - at)
                ),
                None => format!("failed {} ago", human_duration(now - at)),
            };
            vec![Problem::new(format!(
            "the LLM {how_long}: {}",
            crate::text::clip(err, 300)
        ))
        .fix(format!("{}; the rules decide meanwhile when llm.fallback = \"rules\". This clears at the model's next good answer: a quiet tick does not ask it (llm.quiet_interval_mins), `fleetagent trigger -p 1 -r \"llm check\"` does now", llm_fix(err)))
        .since(Some(since))]
        }
        _ if config.llm.provider == crate::config::Provider::Openai => unusable_answers(conn, now),
        _ => Vec::new(),
    }
}

/// The model's last answers in a row that ran nothing though the server answered.
const UNUSABLE_ANSWERS: i64 = 3;

/// The model answers, but its last [`UNUSABLE_ANSWERS`] answers ran nothing (cut at
/// `llm.max_output_tokens`, a tool call written as text, empty): each pass read "no-action,
/// decided by llm" while the floor alone could act (the LLM walkthrough).
fn unusable_answers(conn: &Connection, now: Millis) -> Vec<Problem> {
    let Ok(Some((since, kinds))) = crate::store::llm_calls::all_unusable(conn, UNUSABLE_ANSWERS)
    else {
        return Vec::new();
    };
    let said: Vec<String> = kinds
        .iter()
        .map(|(kind, n)| match kind.as_str() {
            "cut" => format!("{n} cut at llm.max_output_tokens"),
            "as_text" => format!("{n} with a tool call written as text"),
            _ => format!("{n} empty"),
        })
        .collect();
    let fix = if kinds.iter().any(|(k, _)| k == "cut") {
        "raise llm.max_output_tokens (a cut answer's calls are not run); "
    } else {
        ""
    };
    vec![Problem::new(format!(
        "the model's last {UNUSABLE_ANSWERS} answers ran nothing ({}), the first {} ago: the model decides nothing; the floor acts only on dead workers, a deficit, flagged instances and idle surplus",
        said.join(", "),
        human_duration(now - since)
    ))
    .fix(format!("{fix}`fleetagent history -n 20` shows the answers; try the model with `fleetagent sim --llm` (docs/sim.md); this clears at its next answer that is not cut, empty or a call written as text"))
    .since(Some(since))]
}

/// What to change for the model's last failure, by its kind.
pub(super) fn llm_fix(err: &str) -> &'static str {
    if crate::prompt::calibration::is_context_overflow(err) {
        "the server's context is smaller than the prompts sent: set llm.context_budget_tokens to the server's context or below (llama.cpp: its -c; else the model's context length)"
    } else if err.contains("minimal prompt needs") {
        "raise llm.context_budget_tokens (up to the server's context) or lower llm.max_output_tokens"
    } else if err.contains("LLM API key holds spaces, line breaks") {
        "write the key alone, on one line, into /etc/credstore/fleetagent.llm_api_key (the units load it as the llm_api_key credential; at a shell FLEETAGENT_LLM_API_KEY or OPENAI_API_KEY): no comment, no second line"
    } else if err.contains("(HTTP 401)") || err.contains("(HTTP 403)") {
        "the LLM server refused the key: write the right one into /etc/credstore/fleetagent.llm_api_key (the units load it as the llm_api_key credential; at a shell FLEETAGENT_LLM_API_KEY or OPENAI_API_KEY)"
    } else if err.contains("no answer within") {
        "the model answers too slowly: raise llm.timeout_secs (and llm.retry_budget_secs with it), or serve a faster model"
    } else {
        "check llm.base_url, llm.model and the LLM API key (`fleetagent inspect` shows each failed run's error)"
    }
}

/// Failed or interrupted runs: every failure of the last hour, the latest run when it failed
/// (however long ago: said until a pass succeeds), and a pass left `running` that no process
/// holds the lock for (the next run marks it interrupted; not said while who holds it is
/// unknown).
pub(super) fn runs(conn: &Connection, lock: crate::lock::Holder, now: Millis) -> Vec<Problem> {
    const FIX: &str = "read `journalctl -u fleetagent` and `fleetagent history`; a run that ended unfinished (killed at its deadline or by hand, a crash, a failure it could not record as on a full disk) is marked \"interrupted\" by the next one, and its own last journal lines say why";
    let mut out = Vec::new();
    let latest = match crate::store::runs::recent(conn, 1) {
        Ok(r) => r.into_iter().next(),
        Err(e) => return vec![unreadable("runs", &e)],
    };
    let hour = match health::failed_since(conn, now - HOUR_MS) {
        Ok(f) => f,
        Err(e) => return vec![unreadable("runs", &e)],
    };
    let failed_latest = latest.as_ref().filter(|r| r.status == Status::Failed);
    let said = |id: i64, at: Millis, error: Option<&str>| {
        format!(
            "run {id} failed {} ago: {}",
            human_duration(now - at),
            crate::text::clip(error.unwrap_or("no error recorded"), 300)
        )
    };
    match (failed_latest, &hour) {
        (Some(last), _) => {
            let at = last.finished_at.unwrap_or(last.started_at);
            let in_hour = hour.as_ref().map_or(0, |h| h.count);
            let more = if in_hour > 1 {
                format!(" ({in_hour} runs failed in the last hour)")
            } else {
                String::new()
            };
            out.push(
                Problem::new(format!(
                    "the last {}{more}",
                    said(last.id, at, last.error.as_deref())
                ))
                .fix(FIX)
                .since(Some(hour.as_ref().map_or(at, |h| h.first_at.min(at)))),
            );
        }
        (None, Some(h)) => out.push(
            Problem::new(format!(
                "{} run(s) failed in the last hour; the last, {}",
                h.count,
                said(
                    h.last.id,
                    h.last.finished_at.unwrap_or(h.last.started_at),
                    h.last.error.as_deref()
                )
            ))
            .fix(FIX)
            .since(Some(h.first_at)),
        ),
        (None, None) => {}
    }
    if lock == crate::lock::Holder::Free {
        match crate::store::runs::running(conn) {
            Ok(running) => {
                if let Some(first) = running.first() {
                    let ids: Vec<String> = running.iter().map(|r| r.id.to_string()).collect();
                    out.push(
                        Problem::new(format!(
                            "run(s) {} interrupted: marked running, and no process holds the run lock",
                            ids.join(", ")
                        ))
                        .fix("the next run marks them failed and hands their events back (`fleetagent trigger -p 1 -r recover` starts one now); `journalctl -u fleetagent` says why the process ended")
                        .since(Some(first.started_at)),
                    );
                }
            }
            Err(e) => out.push(unreadable("runs", &e)),
        }
    }
    out
}

/// A run that holds the lock past the run deadline: stuck.
pub(super) fn lock(
    state_dir: &Path,
    holder: Option<u32>,
    config: &Config,
    now: Millis,
) -> Vec<Problem> {
    let Some(pid) = holder else {
        return Vec::new();
    };
    let deadline = config.run.deadline_secs as i64 * 1000;
    if let Some(since) = crate::lock::held_since(state_dir, pid) {
        if now - since <= deadline {
            return Vec::new();
        }
        // A stopped run (Ctrl-Z, SIGSTOP) keeps the lock, and `kill` waits behind the stop
        // (a walkthrough followed it: the lock stayed held).
        let (stopped, fix) = match crate::lock::process_stopped(pid) {
            None => (String::new(), format!("kill {pid}")),
            Some(crate::lock::Stopped::BySignal) => (
                format!(", and stopped (state T in /proc/{pid}/stat: SIGSTOP or Ctrl-Z), so a plain `kill {pid}` waits behind the stop; continued, it ends: its watchdog counts wall time, so once it started more than run.deadline_secs + 30 s ago it ends at once, the pass recorded interrupted and its events handed to the next (the runs check names it for an hour)"),
                format!("kill -CONT {pid}"),
            ),
            Some(crate::lock::Stopped::ByDebugger) => (
                format!(", and stopped by a debugger (state t in /proc/{pid}/stat), which neither `kill {pid}` nor `kill -CONT {pid}` ends"),
                format!("detach the debugger, or kill -9 {pid}"),
            ),
        };
        return vec![Problem::new(format!(
            "run lock held by pid {pid} for {}, past the {}s deadline: the run is stuck{stopped}",
            human_duration(now - since),
            config.run.deadline_secs
        ))
        .fix(fix)
        .since(Some(since))];
    }
    // A holder that wrote no note is not a run of ours (`flock(1)`, another program): judged
    // by how long it has been running, the longest it can have held the lock.
    match crate::lock::process_started(pid) {
        Some(started) if now - started > deadline => vec![Problem::new(format!(
            "run lock held by pid {pid}, not a fleetagent run (it wrote no note), running for {}, past the {}s deadline: no run can start while it holds the lock",
            human_duration(now - started),
            config.run.deadline_secs
        ))
        .fix(format!("see what pid {pid} is (`ps -o pid,etime,args -p {pid}`) and end it"))
        .since(Some(started))],
        _ => Vec::new(),
    }
}

/// The last pass asked for launches or stops and every one failed at vast.ai
/// (`action-failed`): the agent has no hands.
pub(super) fn actions(conn: &Connection, now: Millis) -> Vec<Problem> {
    let mut found = operator_stops_failed(conn, now);
    found.extend(pass_actions(conn, now));
    found
}

/// The operator's stop or destroy that failed on an instance vast.ai still lists: it bills,
/// and nothing sends the call again (after the panic button the passes are paused; a 500 to
/// its one call left `doctor` green: a walkthrough).
fn operator_stops_failed(conn: &Connection, now: Millis) -> Vec<Problem> {
    let failed = match health::operator_stops_failed(conn) {
        Ok(f) => f,
        Err(e) => return vec![unreadable("actions", &e)],
    };
    let Some(f) = failed.first() else {
        return Vec::new();
    };
    let (id, at) = (f.vast_id, f.at);
    let more = match failed.len() {
        1 => String::new(),
        n => format!(" ({} more like it)", n - 1),
    };
    vec![Problem::new(format!(
        "the operator's {} of instance {id} {} failed {} ago and vast.ai still lists it: it bills, and nothing sends the call again{more}: {}",
        f.kind,
        crate::text::quote(&f.label, crate::fleet::LABEL_CHARS),
        human_duration(now - at),
        crate::text::clip(&f.detail, 300)
    ))
    .fix(format!(
        "`fleetagent instances stop {id} --force --reason ...` (or `instances stop --all` again); `fleetagent instances list` shows what still bills"
    ))]
}

fn pass_actions(conn: &Connection, now: Millis) -> Vec<Problem> {
    let last = match health::last_ok_pass(conn) {
        Ok(l) => l,
        Err(e) => return vec![unreadable("runs", &e)],
    };
    // WORKERS DEAD with every launch refused is said beside the pass's failures, not instead
    // of them: a destroy of a flagged instance that failed holds the slot the refused launch
    // needed, and raising the cap is not its fix (a walkthrough).
    let failed = failed_pass(conn, last.clone(), now);
    let mut found = Vec::new();
    if let Some(run) = last.as_ref().filter(|r| r.emergency) {
        // Launches that failed at vast.ai are said here when the pass-wide line is not
        // (another call of the pass went through: a walkthrough's destroy of the dead worker
        // went, its replacement failed 402, and doctor was green).
        match dead_and_refused(conn, run, failed.is_empty(), now) {
            Ok(p) => found.extend(p),
            Err(e) => return vec![unreadable("actions", &e)],
        }
    }
    found.extend(failed);
    found
}

/// The last pass asked for launches or stops and every one failed at vast.ai.
fn failed_pass(
    conn: &Connection,
    last: Option<crate::store::runs::Run>,
    now: Millis,
) -> Vec<Problem> {
    let Some(run) = last.filter(|r| r.verdict == Some(Verdict::ActionFailed)) else {
        return Vec::new();
    };
    let at = run.finished_at.unwrap_or(run.started_at);
    let a = run.actions;
    // A create that may have gone through counts as failed in its pass; a later pass that
    // finds its label settles it `ok`: then the pass did change the fleet.
    let (went_through, open) = match health::run_outcomes_now(conn, run.id) {
        Ok(o) => o,
        Err(e) => return vec![unreadable("actions", &e)],
    };
    if went_through > 0 {
        return Vec::new();
    }
    let first = match health::first_failed_action(conn, run.id) {
        Ok(Some((kind, detail))) => {
            format!("; the first, a {kind}: {}", crate::text::clip(&detail, 300))
        }
        Ok(None) => String::new(),
        Err(e) => return vec![unreadable("actions", &e)],
    };
    let refused = if a.refused > 0 {
        format!(", {} refused by a guardrail", a.refused)
    } else {
        String::new()
    };
    let unanswered = if open > 0 {
        format!(
            " ({open} of them may have gone through unanswered: the next pass looks for its label)"
        )
    } else {
        String::new()
    };
    vec![Problem::new(format!(
        "the last pass (run {}, {} ago) changed nothing: its {} launch(es) or stop(s) failed at vast.ai{unanswered}{refused}{first}",
        run.id,
        human_duration(now - at),
        a.failed
    ))
    .fix(if first.contains("HTTP 403") {
        // Forbidden: a scoped key that may list but not create or destroy (a re-test).
        format!(
            "vast.ai forbids the key that (HTTP 403): give the API key the instance write permission in vast.ai's console, Account > API keys, or use an unscoped key; `fleetagent history --run {}` shows each call",
            run.id
        )
    } else {
        format!(
            "`fleetagent history --run {}` shows each call and its error; see the vast check and vast.ai's console",
            run.id
        )
    })
    .since(Some(at))]
}

/// The last pass was an emergency (WORKERS DEAD) and every launch it tried was refused by a
/// guardrail (the daily spend cap, `max_dph_total`, the profit check, ...): nothing is on its
/// way while proofs wait, and no other check says so (the caps are not reached by the fleet
/// alone, which is empty). A pause has its own check.
fn dead_and_refused(
    conn: &Connection,
    run: &crate::store::runs::Run,
    with_failures: bool,
    now: Millis,
) -> anyhow::Result<Option<Problem>> {
    let (codes, through) = health::launch_refusals(conn, run.id)?;
    let codes: Vec<String> = codes.into_iter().filter(|c| c != "paused").collect();
    if through > 0 {
        return Ok(None);
    }
    let at = run.finished_at.unwrap_or(run.started_at);
    let failed = match with_failures {
        true => health::failed_launches(conn, run.id)?,
        false => None,
    };
    if let Some((n, first)) = failed {
        let refused = match codes.is_empty() {
            true => String::new(),
            false => format!("; refused by a guardrail: {}", codes.join(", ")),
        };
        return Ok(Some(
            Problem::new(format!(
                "WORKERS DEAD and no launch of the last pass (run {}, {} ago) went through: {n} failed at vast.ai (the first: {}){refused}; nothing is on its way while proofs wait",
                run.id,
                human_duration(now - at),
                crate::text::clip(&first, 300)
            ))
            .fix(format!(
                "`fleetagent history --run {}` shows each call and its error; an account refusal (credit, billing, the key's permissions) is mended in vast.ai's console, and the next pass launches again{}",
                run.id,
                match codes.is_empty() {
                    true => String::new(),
                    false => format!("; {}", refusal_fixes(&codes)),
                }
            ))
            .since(Some(at)),
        ));
    }
    if codes.is_empty() {
        return Ok(None);
    }
    Ok(Some(
        Problem::new(format!(
            "WORKERS DEAD and every launch of the last pass (run {}, {} ago) was refused by a guardrail: {}; nothing is on its way while proofs wait",
            run.id,
            human_duration(now - at),
            codes.join(", ")
        ))
        .fix(format!(
            "`fleetagent history --run {}` names each refusal and its figure (docs/guardrails.md); {}",
            run.id,
            refusal_fixes(&codes)
        ))
        .since(Some(at)),
    ))
}

/// What lifts each refusal code, once each, in the order of `codes`.
fn refusal_fixes(codes: &[String]) -> String {
    let mut fixes: Vec<&str> = Vec::new();
    for code in codes {
        let fix = match code.as_str() {
            "not_configured" => "set what the refusal names (the secrets and config checks name it too: a vast.ai key, vast.image, policy.max_dph_total, policy.max_instances)",
            "daily_spend" => "raise policy.daily_spend_max if the fleet should run (the day's spend is counted until 00:00 UTC)",
            "budget" => "raise policy.max_dph_total if the fleet should run",
            "instance_cap" => "raise policy.max_instances if the fleet should run",
            "unprofitable" => "check the price ([price], the inspect price line) and policy.min_margin: no offer pays at today's price",
            "rate_limited" => "wait for the launch window (policy.launch_window_minutes, policy.launch_window_max)",
            "demand_unknown" => "see the demand check: a fleet with unknown demand is held",
            "proofshare_disabled" => "enable ProofShare in Curio (proofshare_meta.enabled) if the fleet should prove for it",
            "boot_failures" => "see the boot_failures check: rentals in a row never booted a Curio worker, and launches wait for the one that is booting; mend the worker image or [vast.env] (docs/worker-image.md)",
            "no_psprove" => "fix the worker image's layers (CURIO_LAYERS, EnableProofShare; docs/worker-image.md), then destroy the instance Curio runs without PSProve (the worker_identity check names it)",
            "operator_hold" => "an operator's stop holds the rules' and the floor's launches for policy.operator_hold_mins; `fleetagent resume` or a message ends it",
            "bad_hosts" => "every matching offer is on a host left out (one that failed us, for vast.offers.bad_host_hours; one the operator took an instance off, for policy.operator_hold_mins): widen [vast.offers] (gpu_names, max_dph_per_instance, min_reliability) or lower vast.offers.bad_host_hours; `fleetagent inspect --json` lists bad_hosts, and where their reasons are boots that failed (loading, unbooted) mend the worker image first, or more rentals fail alike (docs/worker-image.md)",
            _ => "see docs/guardrails.md for the refusal",
        };
        if !fixes.contains(&fix) {
            fixes.push(fix);
        }
    }
    fixes.join("; ")
}

/// The floor overruled the model on most of its passes of the last day: the model leaves the
/// fleet unprotected (a working but useless model), and the operator should know.
pub(super) fn overruled(floor: i64, model_passes: i64) -> Option<Problem> {
    (model_passes >= OVERRULED_MIN_PASSES && floor * 2 > model_passes).then(|| {
        Problem::new(format!(
            "the floor overruled the model on {floor} of its {model_passes} passes in the last day ({}%): it leaves what protects the fleet undone",
            floor * 100 / model_passes
        ))
        .fix("check llm.model with `fleetagent sim --llm`, or set llm.provider = \"rules\"")
    })
}

pub(super) fn floor(conn: &Connection, now: Millis) -> Vec<Problem> {
    match crate::store::runs::decided_since(conn, now - DAY_MS) {
        Ok(d) => overruled(d.floor, d.llm + d.floor).into_iter().collect(),
        Err(e) => vec![unreadable("runs", &e)],
    }
}

/// The model's tokenizer counts more than our estimate (a reported/estimate ratio above 1.0)
/// by more than the calibrated budget and its margin absorb: the largest recent prompt of
/// that kind would have overflowed `llm.context_budget_tokens` by the server's count. A
/// ratio the calibration covers is no problem (`inspect` shows it beside the calibrated one).
pub(super) fn uncalibrated(
    model: &str,
    measured_max: f64,
    calls: i64,
    calibrated: Option<f64>,
) -> Option<Problem> {
    let ratio = calibrated.unwrap_or(1.0).max(1.0);
    let margin = crate::prompt::BUDGET_MARGIN_PERCENT as f64 / 100.0;
    let covered = ratio / (1.0 - margin);
    (measured_max > 1.0 && measured_max > covered).then(|| {
        let state = match calibrated {
            Some(r) => format!("the budget is calibrated for {r:.3}x only"),
            None => format!("the budget is not calibrated for llm.model {model:?}"),
        };
        Problem::new(format!(
            "the model's tokenizer counts up to {measured_max:.3}x our estimate ({model}, over the last {calls} calls that reported usage) and {state}: a prompt near llm.context_budget_tokens can overflow the server's context"
        ))
        .fix("every call that reports usage recalibrates it (see `fleetagent inspect`), else lower llm.context_budget_tokens")
    })
}

pub(super) fn calibration(conn: &Connection, config: &Config) -> Vec<Problem> {
    if config.llm.provider != crate::config::Provider::Openai {
        return Vec::new();
    }
    let model = &config.llm.model;
    match (
        calibration::measured(conn, CALIBRATION_CALLS),
        calibration::ratio(conn, model),
    ) {
        (Ok(m), Ok(c)) => m
            .max_ratio
            .and_then(|max| uncalibrated(model, max, m.calls, c))
            .into_iter()
            .collect(),
        (Err(e), _) | (_, Err(e)) => vec![unreadable("the token calibration", &e)],
    }
}

/// How long a failed event or wake keeps its check red: long enough for the morning to see a
/// night's failure, short enough that one failure does not hide every later problem from a
/// monitor on `doctor` (nothing cleared the check: it was red for good after one bad night).
/// The rows stay, shown by `inspect` and `wakes list --all`.
pub const FAILED_RED_MS: Millis = 86_400_000;

pub(super) fn events(conn: &Connection, now: Millis) -> Vec<Problem> {
    match events::failed_since(conn, now - FAILED_RED_MS) {
        Ok((n, Some(newest))) if n > 0 => vec![Problem::new(format!(
            "{n} event(s) failed after {} attempts in the last 24 h, the newest {} ago (kept): the agent never read them",
            events::MAX_ATTEMPTS,
            crate::clock::human_duration(now - newest)
        ))
        .fix("see `fleetagent inspect` for each event and its error; send an operator message among them again (`fleetagent message`); this check clears 24 h after the last failure")],
        Ok(_) => Vec::new(),
        Err(e) => vec![unreadable("events", &e)],
    }
}

pub(super) fn wakes(conn: &Connection, now: Millis) -> Vec<Problem> {
    match wakes::failed_since(conn, now - FAILED_RED_MS) {
        Ok((n, Some(newest))) if n > 0 => vec![Problem::new(format!(
            "{n} wake(s) failed after {} attempts in the last 24 h, the newest {} ago",
            wakes::MAX_ATTEMPTS,
            crate::clock::human_duration(now - newest)
        ))
        .fix("see `fleetagent wakes list --all`; add one again if it still matters (`fleetagent wakes add`); this check clears 24 h after the last failure")],
        Ok(_) => Vec::new(),
        Err(e) => vec![unreadable("wakes", &e)],
    }
}

pub(super) fn silent_destroys(conn: &Connection, now: Millis) -> Vec<Problem> {
    match crate::store::actions::silent_destroys_since(conn, now - crate::fleet::SILENT_WINDOW_MS)
    {
        Ok(n) if n >= crate::fleet::SILENT_DESTROYS_MAX => vec![Problem::new(format!(
            "{n} silent workers (heartbeat and no proof while work waited, or the worker gone from a running container) were destroyed in the last 6 h: no more are flagged silent until fewer remain in that window, since the cause is likely the worker image (its proof-parameter fetch) or Curio, not the hosts"
        ))
        .fix("read a worker's log (vast.ai's console) and docs/worker-image.md")],
        Ok(_) => Vec::new(),
        Err(e) => vec![unreadable("actions", &e)],
    }
}

/// The boot breaker holds (`fleet::boot`): rentals in a row never booted a Curio worker (a
/// drill saw 12 rented for nothing with `doctor` green, and vast.ai's reason, "pull access
/// denied", nowhere an operator reads).
pub(super) fn boot_failures(conn: &Connection, now: Millis) -> Vec<Problem> {
    let read = || -> anyhow::Result<Option<String>> {
        let row = crate::run::boots::read(conn, &[], now)?.row;
        if row.len() < crate::fleet::BOOT_FAILURES_MAX {
            return Ok(None);
        }
        let live = crate::store::instances::live(conn)?;
        let waiting = live.iter().find(|r| crate::fleet::boot::is_unproven(r));
        Ok(Some(crate::fleet::boot::boot_message(&row, waiting, now)))
    };
    match read() {
        Ok(Some(line)) => vec![Problem::new(line).fix(
            "read why in vast.ai's words (the line above, `fleetagent inspect`'s actions, the instance's log in vast.ai's console); mend vast.image (its name, its registry's login), [vast.env] or vast.onstart, see docs/worker-image.md; the next rental that boots ends this, and `fleetagent instances stop ID` ends one that waits",
        )],
        Ok(None) => Vec::new(),
        Err(e) => vec![unreadable("actions", &e)],
    }
}

/// The newest calls the tools_in_prompt check reads (a bounded read at any table size).
const COUNTED_CALLS: i64 = 20;
/// The newest this many calls that reported a prompt count must all count short, none of
/// their passes with a tool call, for the check to say so: a template drops the tools on
/// every request; one odd count is not that.
pub(super) const SHORT_CALLS: usize = 3;

/// The server counted too few prompt tokens for the tools to have been in the prompt: its
/// chat template drops them (SmolLM2's own has no tools branch, and llama-server drops
/// `tools` without a word), so the model can call none. The lines, measured with
/// Qwen2.5-Coder-0.5B's own template through llama-server on fleetagent's real requests
/// (docs/operations.md, "tools_in_prompt"): with the tools it counted 1.15x our estimate of
/// the request, without them 0.83x (a request of 2,819 tokens by our count, 736 of them the
/// tools) to 0.99x (5,742): its tokenizer counts 1.12-1.13x ours, the tools are 928 of its
/// tokens. So a count below our estimate of the tools alone is certain (every request also
/// carries the system prompt, longer than the tools); for a model we count with a stand-in
/// tokenizer, a count below our estimate of the whole request is the sign, until the
/// history outgrows the tools about 8 to 1. OpenAI's own models count below our estimate by
/// design (they render tools more compactly than the JSON we count) and always get the
/// tools: for them only the certain line holds. A pass in which the model called a tool
/// had its tools.
pub(super) fn tools_dropped(
    counted: &[crate::store::llm_calls::Counted],
    stand_in_tokenizer: bool,
) -> Option<Problem> {
    let short = |c: &crate::store::llm_calls::Counted| {
        !c.run_called_a_tool
            && (c.reported < c.tools_estimated || (stand_in_tokenizer && c.reported < c.estimated))
    };
    let streak = counted.iter().take_while(|c| short(c)).count();
    if streak < SHORT_CALLS {
        return None;
    }
    let newest = counted[0];
    let below = if newest.reported < newest.tools_estimated {
        format!(
            "fewer than our estimate of its tools alone ({})",
            newest.tools_estimated
        )
    } else {
        format!(
            "fewer than our estimate of the request ({}, of which the tools {}), where a server that renders the tools counts more",
            newest.estimated, newest.tools_estimated
        )
    };
    Some(
        Problem::new(format!(
            "the LLM server counted {} prompt tokens for the last request (run {}), {below}; each of the {streak} latest calls that reported usage counted short, and the model called no tool in them: its chat template likely drops the tools (SmolLM2's own does, and llama-server drops them without a word), so the model cannot call any",
            newest.reported, newest.run_id
        ))
        .fix("serve the model with a chat template that renders tools (llama-server --jinja with a tool-aware template, or --chat-template-file); `fleetagent sim --llm` shows whether it calls tools; else llm.provider = \"rules\"")
        .since(counted.get(streak - 1).map(|c| c.at)),
    )
}

pub(super) fn tools_in_prompt(conn: &Connection, config: &Config) -> Vec<Problem> {
    if config.llm.provider != crate::config::Provider::Openai {
        return Vec::new();
    }
    let stand_in = crate::tokens::Encoding::of_openai_model(&config.llm.model).is_none();
    match crate::store::llm_calls::recent_counted(conn, COUNTED_CALLS) {
        Ok(counted) => tools_dropped(&counted, stand_in).into_iter().collect(),
        Err(e) => vec![unreadable("llm_calls", &e)],
    }
}
