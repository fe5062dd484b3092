//! Read-only reports over the store for `inspect` and `doctor`: what the agent did, what
//! waits, and whether anything is stuck. Never takes the run lock (reads /proc/locks).

use std::path::Path;

use anyhow::Result;
use serde::Serialize;
use serde_json::Value;

use crate::clock::{rfc3339, Millis};
use crate::config::Config;
use crate::doorbell::{Doorbell, FileDoorbell};
use crate::store::{events, llm_calls, messages, runs, session, wakes, Store};

/// How many runs `inspect` lists.
pub const RECENT_RUNS: i64 = 20;
/// How many recent calls that reported usage the token comparison covers.
const USAGE_CALLS: i64 = 100;
/// How many operator messages (newest first) `inspect` shows.
const OPERATOR_MESSAGES: i64 = 5;

#[derive(Debug, Serialize)]
pub struct RunView {
    pub id: i64,
    pub session_id: i64,
    pub pass: i64,
    pub started_by: String,
    pub status: String,
    pub verdict: Option<String>,
    pub decided_by: Option<String>,
    pub started_at: String,
    pub finished_at: Option<String>,
    pub events_claimed: i64,
    pub wakes_claimed: i64,
    pub llm_calls: i64,
    pub prompt_tokens_est: Option<i64>,
    pub prompt_tokens_reported: Option<i64>,
    pub error: Option<String>,
    pub llm_error: Option<String>,
}

impl From<&runs::Run> for RunView {
    fn from(r: &runs::Run) -> Self {
        RunView {
            id: r.id,
            session_id: r.session_id,
            pass: r.pass,
            started_by: r.started_by.clone(),
            status: r.status.clone(),
            verdict: r.verdict.clone(),
            decided_by: r.decided_by.clone(),
            started_at: rfc3339(r.started_at),
            finished_at: r.finished_at.map(rfc3339),
            events_claimed: r.events_claimed,
            wakes_claimed: r.wakes_claimed,
            llm_calls: r.llm_calls,
            prompt_tokens_est: r.prompt_tokens_est,
            prompt_tokens_reported: r.prompt_tokens_reported,
            error: r.error.clone(),
            llm_error: r.llm_error.clone(),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct EventView {
    pub id: i64,
    pub priority: u8,
    pub kind: String,
    pub reason: String,
    pub created_at: String,
    pub attempts: i64,
    pub not_before: Option<String>,
    pub failed_at: Option<String>,
    pub last_error: Option<String>,
}

impl From<&events::WaitingEvent> for EventView {
    fn from(e: &events::WaitingEvent) -> Self {
        EventView {
            id: e.id,
            priority: e.priority,
            kind: e.kind.clone(),
            reason: e.reason.clone(),
            created_at: rfc3339(e.created_at),
            attempts: e.attempts,
            not_before: e.not_before.map(rfc3339),
            failed_at: e.failed_at.map(rfc3339),
            last_error: e.last_error.clone(),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct DoorbellView {
    pub path: String,
    pub exists: bool,
    pub mtime: Option<String>,
    pub lines: usize,
}

#[derive(Debug, Serialize)]
pub struct DatabaseView {
    pub path: String,
    pub size_bytes: u64,
    pub wal_bytes: u64,
    pub schema_version: i64,
}

/// Everything `inspect --json` prints. Field names are a contract (docs/inspect.md).
#[derive(Debug, Serialize)]
pub struct Report {
    pub now: String,
    pub version: &'static str,
    pub state_dir: String,
    pub config_path: String,
    /// False when the config file does not exist (only possible for the default path):
    /// every key has its default.
    pub config_found: bool,
    pub session_id: i64,
    pub session_started_at: String,
    pub next_run_id: i64,
    pub last_run_finished_at: Option<String>,
    pub last_success_at: Option<String>,
    pub runs: Vec<RunView>,
    pub unconsumed_events: i64,
    pub deferred_events: i64,
    pub failed_events: i64,
    pub waiting_events: Vec<EventView>,
    pub failed_event_list: Vec<EventView>,
    pub pending_wakes: i64,
    pub overdue_wakes: i64,
    pub failed_wakes: i64,
    pub wakes: Vec<Value>,
    pub doorbell: DoorbellView,
    pub lock_held: bool,
    pub lock_holder_pid: Option<u32>,
    pub lock_held_since: Option<String>,
    pub database: DatabaseView,
    pub units: Option<Value>,
    pub launch_keys_missing: Vec<&'static str>,
    pub llm: LlmView,
    pub operator_messages: Vec<OperatorView>,
    /// Our instances as the local table knows them (inspect never calls vast.ai).
    pub fleet: Vec<InstanceView>,
    pub fleet_dph: f64,
    /// The action ledger, newest first: what was launched, stopped or refused, and why.
    pub recent_actions: Vec<ActionView>,
    /// What the last pass saw, and what was decided (the model's answer or the rules' note).
    pub last_observation: Option<String>,
    pub last_decision: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct InstanceView {
    pub label: String,
    pub vast_id: Option<i64>,
    pub state: String,
    pub actual_status: Option<String>,
    pub gpu_name: Option<String>,
    pub dph: Option<f64>,
    pub state_since: String,
    pub last_seen_at: Option<String>,
    pub machine_name: Option<String>,
    pub adopted: bool,
}

#[derive(Debug, Serialize)]
pub struct ActionView {
    pub at: String,
    pub run_id: Option<i64>,
    pub kind: String,
    pub outcome: String,
    pub actor: String,
    pub label: Option<String>,
    pub instance_id: Option<i64>,
    pub emergency: bool,
    pub reason: Option<String>,
    pub detail: Option<String>,
}

/// The model's side: configuration, the last failure, and how our token estimate compares
/// with what the provider reported.
#[derive(Debug, Serialize)]
pub struct LlmView {
    pub provider: &'static str,
    pub model: String,
    pub encoding: String,
    pub context_budget_tokens: u64,
    pub effective_budget_tokens: u64,
    pub last_call_at: Option<String>,
    pub last_error: Option<String>,
    pub last_error_at: Option<String>,
    /// Over the last 100 calls that reported usage.
    pub calls_with_usage: i64,
    pub prompt_tokens_estimated: i64,
    pub prompt_tokens_reported: i64,
    /// reported / estimated (below 1.0: the estimate over-counts, as intended).
    pub reported_to_estimate_ratio: Option<f64>,
    pub max_prompt_tokens_estimated: Option<i64>,
}

/// An operator message and the model's answer, if any came after it.
#[derive(Debug, Serialize)]
pub struct OperatorView {
    pub run_id: Option<i64>,
    pub at: String,
    pub message: String,
    pub answer: Option<String>,
}

pub fn build(
    store: &Store,
    state_dir: &Path,
    config: &Config,
    config_path: &Path,
    now: Millis,
    units: Option<Value>,
) -> Result<Report> {
    let state = session::state(&store.conn)?;
    let recent = runs::recent(&store.conn, RECENT_RUNS)?;
    let fleet = crate::store::instances::live(&store.conn)?;
    let ev = events::counts(&store.conn, now)?;
    let wk = wakes::counts(&store.conn, now)?;
    let bell = FileDoorbell::new(state_dir).status()?;
    let lock_path = state_dir.join(crate::paths::LOCK_FILE);
    let holder = crate::lock::holder_pid(&lock_path);
    let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    Ok(Report {
        now: rfc3339(now),
        version: env!("CARGO_PKG_VERSION"),
        state_dir: state_dir.display().to_string(),
        config_path: config_path.display().to_string(),
        config_found: true,
        session_id: state.session_id,
        session_started_at: rfc3339(session::started_at(&store.conn, state.session_id)?),
        next_run_id: store.next_run_id()?,
        last_run_finished_at: state.last_run_finished_at.map(rfc3339),
        last_success_at: state.last_success_at.map(rfc3339),
        runs: recent.iter().map(RunView::from).collect(),
        unconsumed_events: ev.unconsumed,
        deferred_events: ev.deferred,
        failed_events: ev.failed,
        waiting_events: events::list_waiting(&store.conn, false, 20)?
            .iter()
            .map(EventView::from)
            .collect(),
        failed_event_list: events::list_waiting(&store.conn, true, 20)?
            .iter()
            .map(EventView::from)
            .collect(),
        pending_wakes: wk.pending,
        overdue_wakes: wk.overdue,
        failed_wakes: wk.failed,
        wakes: wakes::list(&store.conn, false, 20)?
            .iter()
            .map(crate::wakes::wake_json)
            .collect(),
        doorbell: DoorbellView {
            path: bell.path,
            exists: bell.exists,
            mtime: bell.mtime.map(rfc3339),
            lines: bell.lines,
        },
        lock_held: holder.is_some(),
        lock_holder_pid: holder,
        lock_held_since: holder
            .and_then(|pid| crate::lock::held_since(state_dir, pid))
            .map(rfc3339),
        database: DatabaseView {
            path: store.path.display().to_string(),
            size_bytes: size(&store.path),
            wal_bytes: store.wal_bytes(),
            schema_version: crate::store::SCHEMA_VERSION,
        },
        units,
        launch_keys_missing: config.policy.missing_launch_keys(&config.vast),
        llm: llm_view(store, config, &state)?,
        operator_messages: operator_view(store, state.session_id)?,
        fleet: fleet
            .iter()
            .map(|i| InstanceView {
                label: i.label.clone(),
                vast_id: i.vast_id,
                state: i.state.clone(),
                actual_status: i.actual_status.clone(),
                gpu_name: i.gpu_name.clone(),
                dph: i.dph,
                state_since: rfc3339(i.state_since),
                last_seen_at: i.last_seen_at.map(rfc3339),
                machine_name: i.machine_name.clone(),
                adopted: i.adopted,
            })
            .collect(),
        fleet_dph: (crate::fleet::dph_of(&fleet) * 1000.0).round() / 1000.0 + 0.0,
        recent_actions: crate::store::actions::recent(&store.conn, 20)?
            .into_iter()
            .map(|a| ActionView {
                at: rfc3339(a.created_at),
                run_id: a.run_id,
                kind: a.kind,
                outcome: a.outcome,
                actor: a.actor,
                label: a.label,
                instance_id: a.instance_id,
                emergency: a.emergency,
                reason: a.reason,
                detail: a.detail,
            })
            .collect(),
        last_observation: messages::latest_of_kinds(&store.conn, &["observation"])?,
        last_decision: messages::latest_of_kinds(&store.conn, &["answer", "rules"])?,
    })
}

fn llm_view(store: &Store, config: &Config, state: &session::AgentState) -> Result<LlmView> {
    let usage = llm_calls::reported_usage(&store.conn, USAGE_CALLS)?;
    let (est, rep) = (usage.estimated.unwrap_or(0), usage.reported.unwrap_or(0));
    let encoding =
        crate::tokens::Encoding::resolve(&config.llm.model, config.llm.encoding.as_deref())
            .map(|e| e.name().to_string())
            .unwrap_or_else(|e| e);
    Ok(LlmView {
        provider: match config.llm.provider {
            crate::config::Provider::Openai => "openai",
            crate::config::Provider::Rules => "rules",
        },
        model: config.llm.model.clone(),
        encoding,
        context_budget_tokens: config.llm.context_budget_tokens,
        effective_budget_tokens: crate::agent::effective_budget(config),
        last_call_at: state.last_llm_call_at.map(rfc3339),
        last_error: state.last_llm_error.clone(),
        last_error_at: state.last_llm_error_at.map(rfc3339),
        calls_with_usage: usage.calls,
        prompt_tokens_estimated: est,
        prompt_tokens_reported: rep,
        reported_to_estimate_ratio: (est > 0)
            .then(|| (rep as f64 / est as f64 * 1000.0).round() / 1000.0),
        max_prompt_tokens_estimated: usage.max_estimated,
    })
}

fn operator_view(store: &Store, session_id: i64) -> Result<Vec<OperatorView>> {
    Ok(
        messages::operator_answers(&store.conn, session_id, OPERATOR_MESSAGES)?
            .into_iter()
            .map(|m| OperatorView {
                run_id: m.run_id,
                at: rfc3339(m.created_at),
                message: m.message,
                answer: m.answer,
            })
            .collect(),
    )
}

/// The human-readable form of the report.
pub fn render_text(r: &Report) -> String {
    let mut out = String::new();
    let mut line = |s: String| {
        out.push_str(&s);
        out.push('\n');
    };
    line(format!("fleetagent {} at {}", r.version, r.now));
    line(format!("state dir   {}", r.state_dir));
    line(format!(
        "config      {}{}",
        r.config_path,
        if r.config_found {
            ""
        } else {
            " (not found: every key has its default)"
        }
    ));
    line(format!(
        "database    {} ({} bytes, wal {} bytes, schema {})",
        r.database.path, r.database.size_bytes, r.database.wal_bytes, r.database.schema_version
    ));
    line(format!(
        "session     {} (since {}); next run id {}",
        r.session_id, r.session_started_at, r.next_run_id
    ));
    line(format!(
        "last ok run {}",
        r.last_success_at.as_deref().unwrap_or("never")
    ));
    line(format!(
        "lock        {}",
        match (r.lock_held, r.lock_holder_pid) {
            (true, Some(pid)) => format!(
                "held by pid {pid} since {}",
                r.lock_held_since.as_deref().unwrap_or("?")
            ),
            _ => "free".into(),
        }
    ));
    line(format!(
        "doorbell    {} {}",
        r.doorbell.path,
        if r.doorbell.exists {
            format!(
                "EXISTS ({} line(s), modified {})",
                r.doorbell.lines,
                r.doorbell.mtime.as_deref().unwrap_or("?")
            )
        } else {
            "absent".into()
        }
    ));
    line(format!(
        "events      {} waiting ({} deferred), {} failed",
        r.unconsumed_events, r.deferred_events, r.failed_events
    ));
    for e in &r.waiting_events {
        line(format!(
            "  #{} P{} {} {:?} at {} attempts {}{}",
            e.id,
            e.priority,
            e.kind,
            e.reason,
            e.created_at,
            e.attempts,
            e.not_before
                .as_ref()
                .map(|t| format!(", not before {t}"))
                .unwrap_or_default()
        ));
    }
    for e in &r.failed_event_list {
        line(format!(
            "  FAILED #{} P{} {} {:?}: {}",
            e.id,
            e.priority,
            e.kind,
            e.reason,
            e.last_error.as_deref().unwrap_or("")
        ));
    }
    line(format!(
        "wakes       {} pending, {} overdue, {} failed",
        r.pending_wakes, r.overdue_wakes, r.failed_wakes
    ));
    for w in &r.wakes {
        line(format!(
            "  #{} due {} {}",
            w["id"],
            w["due_at"].as_str().unwrap_or("?"),
            w["reason"].as_str().unwrap_or("")
        ));
    }
    match r.units.as_ref().and_then(|u| u.as_object()) {
        None => line("units       no systemd manager answered".into()),
        Some(units) => {
            for (name, u) in units {
                let field = |k: &str| u.get(k).and_then(|v| v.as_str()).unwrap_or("?").to_string();
                let mut text = format!(
                    "unit        {name}: {} {}/{} (result {})",
                    field("load_state"),
                    field("active_state"),
                    field("sub_state"),
                    field("result")
                );
                if let Some(p) = u.get("problem").and_then(|v| v.as_str()) {
                    text.push_str(&format!(" PROBLEM {p}; fix: {}", field("fix")));
                }
                line(text);
            }
        }
    }
    line(format!(
        "llm         {} {} ({}), budget {} tokens ({} after margin); last call {}{}",
        r.llm.provider,
        r.llm.model,
        r.llm.encoding,
        r.llm.context_budget_tokens,
        r.llm.effective_budget_tokens,
        r.llm.last_call_at.as_deref().unwrap_or("never"),
        r.llm
            .last_error
            .as_ref()
            .map(|e| format!(
                "; LAST FAILURE at {}: {e}",
                r.llm.last_error_at.as_deref().unwrap_or("?")
            ))
            .unwrap_or_default()
    ));
    if let Some(ratio) = r.llm.reported_to_estimate_ratio {
        line(format!(
            "tokens      provider reported {} vs estimated {} over {} calls (ratio {ratio}); largest prompt {}",
            r.llm.prompt_tokens_reported,
            r.llm.prompt_tokens_estimated,
            r.llm.calls_with_usage,
            r.llm.max_prompt_tokens_estimated.unwrap_or(0)
        ));
    }
    for o in &r.operator_messages {
        line(format!(
            "operator    {} {} -> {}",
            o.at,
            crate::observation::quote(&o.message, 100),
            o.answer
                .as_deref()
                .map(|a| crate::observation::quote(a, 200))
                .unwrap_or_else(|| "(no answer yet)".into())
        ));
    }
    if !r.launch_keys_missing.is_empty() {
        line(format!(
            "launches    impossible until set: {}",
            r.launch_keys_missing.join(", ")
        ));
    }
    line(format!(
        "fleet       {} instance(s), ${:.2}/h",
        r.fleet.len(),
        r.fleet_dph
    ));
    for i in &r.fleet {
        line(format!(
            "  {} id={} {} (vast {}) {} ${:.3}/h since {}",
            i.label,
            i.vast_id
                .map(|v| v.to_string())
                .unwrap_or_else(|| "-".into()),
            i.state,
            i.actual_status.as_deref().unwrap_or("null"),
            i.gpu_name.as_deref().unwrap_or("?"),
            i.dph.unwrap_or(0.0),
            i.state_since
        ));
    }
    if !r.recent_actions.is_empty() {
        line("actions     newest first:".into());
        for a in r.recent_actions.iter().take(10) {
            line(format!(
                "  {} {} {} by {}{}{}{}",
                a.at,
                a.kind,
                a.outcome,
                a.actor,
                a.label
                    .as_deref()
                    .map(|l| format!(" {l}"))
                    .unwrap_or_default(),
                if a.emergency { " (emergency)" } else { "" },
                a.reason
                    .as_deref()
                    .map(|x| format!(": {}", crate::observation::clip(x, 100)))
                    .unwrap_or_default()
            ));
        }
    }
    if let Some(o) = &r.last_observation {
        line("last observation:".into());
        for l in o.lines() {
            line(format!("  {l}"));
        }
    }
    if let Some(d) = &r.last_decision {
        line("last decision:".into());
        for l in d.lines().take(12) {
            line(format!("  {l}"));
        }
    }
    line(format!("runs        last {}:", r.runs.len()));
    for run in &r.runs {
        line(format!(
            "  {:>6} s{} {:<6} {:<7} {:<9} {} ev {} wk {}{}",
            run.id,
            run.session_id,
            run.started_by,
            run.status,
            run.verdict.as_deref().unwrap_or("-"),
            run.started_at,
            run.events_claimed,
            run.wakes_claimed,
            run.error
                .as_ref()
                .map(|e| format!("  error: {e}"))
                .unwrap_or_default()
        ));
    }
    out
}
