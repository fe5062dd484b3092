//! Gathering the report: one read of each table group, the doorbell, the lock holder and the
//! config. Reads only.

use std::path::Path;

use anyhow::Result;
use serde_json::Value;

use super::{
    ActionView, DatabaseView, DoorbellView, EventView, InstanceView, LlmView, OperatorView, Report,
    RunView,
};
use crate::clock::{rfc3339, Millis};
use crate::config::Config;
use crate::doorbell::{Doorbell, FileDoorbell};
use crate::store::{calibration, events, llm_calls, messages, runs, session, wakes, Store};

/// How many runs `inspect` lists, the newest...
pub const RECENT_RUNS: i64 = 20;
/// ...and, older, those of this last while that the alert rules count (docs/monitoring: an
/// hour at most).
const ALERTED_RUNS_MS: Millis = 3_600_000;
/// How many recent calls that reported usage the token comparison covers.
const USAGE_CALLS: i64 = 100;
/// How many operator messages (newest first) `inspect` shows.
const OPERATOR_MESSAGES: i64 = 5;

/// The report on the database behind `store` and on `state_dir`, as of `now` (`units`: the
/// systemd units' states, when a manager answered).
pub fn build(
    store: &Store,
    state_dir: &Path,
    config: &Config,
    config_path: &Path,
    now: Millis,
    units: Option<Value>,
) -> Result<Report> {
    let state = session::state(&store.conn)?;
    let recent = runs::recent_and_alerted(&store.conn, RECENT_RUNS, now - ALERTED_RUNS_MS)?;
    let fleet = crate::store::instances::live(&store.conn)?;
    let ev = events::counts(&store.conn, now)?;
    let wk = wakes::counts(&store.conn, now)?;
    let bell = FileDoorbell::new(state_dir).status()?;
    let lock_path = state_dir.join(crate::paths::LOCK_FILE);
    // Read from /proc/locks, never by trying the lock (DESIGN); unknown where it is hidden.
    let lock = crate::lock::holder(&lock_path);
    let holder = lock.pid();
    let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    let curio = super::curio::gather(store, config, now)?;
    let (other_installs, other_installs_at) = crate::store::ops::foreign_installs(&store.conn)?;
    let observation = messages::latest_of_kinds(&store.conn, &["observation"])?;
    // The floor's note too: a pass it decided after an empty or cut answer showed the
    // model's answer of passes before.
    let decision = messages::latest_of_kinds(&store.conn, &["answer", "rules", "floor"])?;
    Ok(Report {
        now: rfc3339(now),
        version: env!("CARGO_PKG_VERSION"),
        commit: env!("FLEETAGENT_COMMIT"),
        state_dir: state_dir.display().to_string(),
        config_path: config_path.display().to_string(),
        config_found: true,
        sim: None,
        session_id: state.session_id,
        session_started_at: rfc3339(session::started_at(&store.conn, state.session_id)?),
        // Past the lock's note after a restore, as the next `run` goes.
        next_run_id: crate::lock::next_run_id(state_dir, store.next_run_id()?),
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
            problem: bell.problem,
        },
        lock_held: match lock {
            crate::lock::Holder::Held(_) => Some(true),
            crate::lock::Holder::Free => Some(false),
            crate::lock::Holder::Unknown => None,
        },
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
                state: i.state,
                actual_status: i.actual_status.clone(),
                gpu_name: i.gpu_name.clone(),
                dph: i.dph,
                state_since: rfc3339(i.state_since),
                last_seen_at: i.last_seen_at.map(rfc3339),
                machine_name: i.machine_name.clone(),
                adopted: i.adopted,
                is_bid: i.is_bid,
                machine_id: i.machine_id,
                storage_dph: i.storage_dph,
            })
            .collect(),
        fleet_dph: (crate::fleet::money::caps_dph(
            &fleet,
            crate::fleet::money::unpriced_dph(config).unwrap_or(0.0),
        ) * 1000.0)
            .round()
            / 1000.0
            + 0.0,
        spend_today: (super::economics::spend_today(&store.conn, config, now)? * 10_000.0).round()
            / 10_000.0
            + 0.0,
        daily_spend_max: config.policy.daily_spend_max,
        unpriced: fleet
            .iter()
            .filter(|r| crate::fleet::money::is_unpriced(r))
            .count(),
        recent_actions: crate::store::actions::recent(&store.conn, 20)?
            .into_iter()
            .map(|a| ActionView {
                said: crate::policy::action_lines::quoted_line(&a),
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
        last_observation_run: observation.as_ref().and_then(|l| l.run_id),
        last_observation: observation.map(|l| l.content),
        last_decision_run: decision.as_ref().and_then(|l| l.run_id),
        last_decision: decision.map(|l| l.content),
        demand_notes: curio
            .demand
            .as_ref()
            .map(|d| d.notes.clone())
            .unwrap_or_default(),
        demand: curio.demand,
        gpu_rates: curio.rates,
        worker_identity: curio.worker_identity,
        price: price_view(store, config, now)?,
        install_id: crate::store::ops::install_id(&store.conn)?,
        paused: crate::store::ops::paused(&store.conn, now)?.map(|p| super::PauseView {
            since: rfc3339(p.since),
            until: p.until.map(rfc3339),
            reason: p.reason,
        }),
        vast: {
            let h = crate::store::ops::vast_health(&store.conn)?;
            super::VastView {
                ok: h.ok(),
                ok_at: h.ok_at.map(rfc3339),
                error: h.error.clone(),
                error_since: h.error_at.map(rfc3339),
            }
        },
        operator_hold: crate::tools::brake::operator_hold(&store.conn, config, now)?.map(|h| {
            super::HoldView {
                stopped_at: rfc3339(h.stopped_at),
                instance_id: h.instance_id,
                label: h.label,
                until: rfc3339(h.until),
            }
        }),
        other_installs,
        other_installs_at: other_installs_at.map(rfc3339),
        bad_hosts: crate::store::bad_hosts::listed(&store.conn, now)?,
        floor: floor_view(store)?,
        day: crate::run::observe::day_profile(&store.conn, config, now)?
            .as_ref()
            .map(super::DayView::of),
        // No install can enable HA yet (docs/ha.md).
        ha: None,
    })
}

/// The floor's clocks from its stored memory. An unreadable one is said on stderr and reads
/// as none, as the next pass starts it afresh.
fn floor_view(store: &Store) -> Result<Option<super::FloorView>> {
    let Some(json) = session::floor_memory(&store.conn)? else {
        return Ok(None);
    };
    match serde_json::from_str::<crate::policy::floor::Memory>(&json) {
        Ok(m) => Ok(super::FloorView::of(&m)),
        Err(e) => {
            log::warn!(
                "the floor's stored memory is unreadable ({e}); the next pass starts it afresh"
            );
            Ok(None)
        }
    }
}

/// The price as the last pass left it (the last reading's ask price, the FIL/USD cache) and
/// the fleet's economics at it: inspect never fetches.
fn price_view(store: &Store, config: &Config, now: Millis) -> Result<super::PriceView> {
    let stored = super::economics::stored(&store.conn, config, now)?;
    Ok(super::PriceView::of(&stored))
}

fn llm_view(store: &Store, config: &Config, state: &session::AgentState) -> Result<LlmView> {
    let usage = llm_calls::reported_usage(&store.conn, USAGE_CALLS)?;
    let measured = calibration::measured(&store.conn, USAGE_CALLS)?;
    let calibrated = calibration::get(&store.conn, &config.llm.model)?;
    let round3 = |r: f64| (r * 1000.0).round() / 1000.0;
    let texts = messages::model_texts(&store.conn, state.session_id, USAGE_CALLS)?;
    // A call written in the text of an answer that also called tools is narration: they ran.
    let without_calls: Vec<&str> = texts
        .iter()
        .filter(|(_, called)| !called)
        .map(|(t, _)| t.as_str())
        .collect();
    let malformed = crate::tools::calls_written_as_text(&without_calls);
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
        effective_budget_tokens: crate::prompt::effective_budget(config),
        last_call_at: state.last_llm_call_at.map(rfc3339),
        last_error: state.last_llm_error.clone(),
        last_error_at: state.last_llm_error_at.map(rfc3339),
        calls_with_usage: usage.calls,
        prompt_tokens_estimated: est,
        prompt_tokens_reported: rep,
        reported_to_estimate_ratio: (est > 0)
            .then(|| (rep as f64 / est as f64 * 1000.0).round() / 1000.0),
        max_prompt_tokens_estimated: usage.max_estimated,
        max_reported_to_estimate_ratio: measured.max_ratio.map(round3),
        impossible_usage_calls: measured.impossible,
        calls_with_cache: usage.with_cache,
        prompt_tokens_cached: usage.cached.unwrap_or(0),
        cache_share: match (usage.cached, usage.reported_with_cache) {
            (Some(c), Some(r)) if r > 0 => Some(round3(c.min(r) as f64 / r as f64)),
            _ => None,
        },
        // Rounded up: the figure shown must not be below the one the budget uses.
        calibrated_ratio: calibrated.map(|c| (c.ratio * 1000.0).ceil() / 1000.0),
        calibration_samples: calibrated.map_or(0, |c| c.samples),
        calibrated_budget_tokens: crate::prompt::calibration::calibrated_budget(
            crate::prompt::effective_budget(config),
            calibrated.map(|c| c.ratio),
        ),
        recent_answers: texts.len() as i64,
        malformed_answers: malformed as i64,
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
