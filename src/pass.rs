//! One pass of the agent after its claim: observe, record the observation, decide (skip, the
//! LLM's tool loop, or the rules), act through the guardrails. Runs inside the run lock;
//! every message is persisted as it happens.

use std::sync::Arc;

use anyhow::Result;

use crate::agent::{self, LoopEnv, Place};
use crate::clock::{short, Millis};
use crate::config::{Config, Fallback, Provider};
use crate::demand::{Demand, DemandProbe};
use crate::fleet::Snapshot;
use crate::llm::LlmClient;
use crate::observation;
use crate::runner::{Claim, RunEnv};
use crate::store::{runs, session, Store};
use crate::tools::Actor;
use crate::vast::VastClient;

/// The outside services a pass may use; `None` when not configured (no key, no source).
#[derive(Default, Clone)]
pub struct Services {
    pub vast: Option<Arc<dyn VastClient>>,
    pub demand: Option<Arc<dyn DemandProbe>>,
    pub llm: Option<Arc<dyn LlmClient>>,
}

/// `deadline`: the process's (Unix ms); the model is not asked past what it leaves.
pub fn execute(
    store: &mut Store,
    env: &RunEnv<'_>,
    claim: &Claim,
    deadline: crate::clock::Millis,
) -> Result<runs::Outcome> {
    let config = env.config;
    let clock = env.clock.as_ref();
    let tk = agent::tokenizer(config)?;
    let previous = session::state(&store.conn)?;
    let mut snapshot =
        crate::fleet::observe(store, config, env.env, env.services, clock, claim.run_id)?;
    let now = clock.now_ms();

    let mut lines = vec![snapshot.observation_line(config)];
    lines.extend(snapshot.lifecycle_lines(config));
    lines.extend(observation::events_line(&claim.events));
    lines.extend(crate::wakes::wakes_line(&claim.wakes, now));
    lines.push(format!(
        "(run {}, pass {}, started by {}, {} UTC)",
        claim.run_id,
        claim.pass_no,
        claim.started_by,
        short(now)
    ));
    let text = lines.join("\n");

    let place = Place {
        session_id: claim.session_id,
        run_id: claim.run_id,
    };
    let operator: Vec<_> = claim
        .events
        .iter()
        .filter(|e| e.kind == "message")
        .collect();
    {
        let tx = store.immediate()?;
        for e in &operator {
            let body = e.body.as_deref().unwrap_or(&e.reason);
            agent::insert_message(
                &tx,
                &tk,
                &place,
                &agent::user(format!("Operator message: {body}")),
                "operator",
                None,
                None,
                Some(e.id),
                now,
            )?;
        }
        agent::insert_message(
            &tx,
            &tk,
            &place,
            &agent::user(text),
            "observation",
            None,
            None,
            None,
            now,
        )?;
        session::set_last_observed(
            &tx,
            Some(&demand_record(&snapshot)),
            &serde_json::to_string(&snapshot.instances.len())?,
        )?;
        tx.commit()?;
    }
    crate::faults::point("run-after-observe")?;

    let le = LoopEnv {
        config,
        env: env.env,
        clock,
        services: env.services,
        session_id: claim.session_id,
        run_id: claim.run_id,
        tk: &tk,
        deadline,
    };
    let registry = crate::tools::registry();
    let mut outcome = runs::Outcome {
        emergency: snapshot.workers_dead(),
        ..Default::default()
    };

    if config.llm.provider == Provider::Rules {
        outcome.decided_by = Some("rules".into());
        let mutated = run_rules(store, &le, &registry, &mut snapshot, Actor::Rules)?;
        outcome.verdict = verdict(mutated);
        return Ok(outcome);
    }

    let nothing_new = claim.events.is_empty()
        && claim.wakes.is_empty()
        && snapshot.changes.is_empty()
        && !snapshot.workers_dead()
        && demand_steady(previous.last_demand.as_deref(), &snapshot);
    let quiet_ms = config.llm.quiet_interval_mins as i64 * 60_000;
    let recent_call = previous
        .last_llm_call_at
        .is_some_and(|t| now - t < quiet_ms);
    if nothing_new && recent_call {
        outcome.verdict = "skipped".into();
        return Ok(outcome);
    }

    let result = match &env.services.llm {
        Some(llm) => agent::llm_loop(store, &le, llm.as_ref(), &registry, &mut snapshot)?,
        None => Err(agent::LlmFailure {
            message: "no LLM client (provider openai without a usable configuration)".into(),
            outcome: Default::default(),
        }),
    };
    match result {
        Ok(o) => {
            session::record_llm_outcome(&store.conn, None, clock.now_ms())?;
            outcome.decided_by = Some("llm".into());
            outcome.llm_calls = o.calls;
            outcome.prompt_tokens_est = Some(o.max_prompt_est);
            outcome.prompt_tokens_reported = o.max_prompt_reported;
            outcome.completion_tokens = Some(o.completion_tokens);
            outcome.verdict = verdict(o.mutated);
            Ok(outcome)
        }
        Err(failure) => {
            session::record_llm_outcome(&store.conn, Some(&failure.message), clock.now_ms())?;
            outcome.llm_calls = failure.outcome.calls;
            outcome.prompt_tokens_est =
                (failure.outcome.max_prompt_est > 0).then_some(failure.outcome.max_prompt_est);
            outcome.prompt_tokens_reported = failure.outcome.max_prompt_reported;
            outcome.completion_tokens =
                (failure.outcome.calls > 0).then_some(failure.outcome.completion_tokens);
            outcome.llm_error = Some(failure.message.clone());
            match config.llm.fallback {
                Fallback::None => {
                    runs::record_llm(&store.conn, claim.run_id, &outcome)?;
                    anyhow::bail!(
                        "the LLM is unusable and llm.fallback = \"none\": {}",
                        failure.message
                    )
                }
                Fallback::Rules => {
                    crate::faults::point("fallback-before-rules")?;
                    log::info!(
                        "run {}: the LLM is unusable ({}); the rules decide (launch only)",
                        claim.run_id,
                        failure.message
                    );
                    outcome.decided_by = Some("fallback-rules".into());
                    let mutated = run_rules(store, &le, &registry, &mut snapshot, Actor::Fallback)?;
                    // Any earlier LLM round's mutations count too.
                    outcome.verdict = verdict(mutated || failure.outcome.mutated);
                    Ok(outcome)
                }
            }
        }
    }
}

fn verdict(mutated: bool) -> String {
    if mutated { "action" } else { "no-action" }.into()
}

/// The rules decide; their calls go through the same registry and guardrails, and one note
/// records what they did.
fn run_rules(
    store: &mut Store,
    le: &LoopEnv<'_>,
    registry: &crate::tools::Registry,
    snapshot: &mut Snapshot,
    actor: Actor,
) -> Result<bool> {
    let mode = if actor == Actor::Fallback {
        crate::rules::Mode::LaunchOnly
    } else {
        crate::rules::Mode::Full
    };
    let low = crate::rules::update_low_demand(&store.conn, snapshot)?;
    let plan = crate::rules::decide(snapshot, le.config, low, mode);
    let mut mutated = false;
    let mut notes = Vec::new();
    for (i, call) in plan.iter().enumerate() {
        let call_id = format!("rules_{}_{}", le.run_id, i + 1);
        let args = call.arguments.to_string();
        let result = agent::run_tool(
            store, le, registry, snapshot, actor, &call_id, call.tool, &args,
        )?;
        mutated |= result.mutated;
        notes.push(format!(
            "- {}({}) because {} -> {}",
            call.tool,
            agent::compact_json(&call.arguments),
            call.why,
            agent::compact_json(&result.content)
        ));
    }
    crate::faults::point("rules-before-note")?;
    let now: Millis = le.clock.now_ms();
    agent::insert_message(
        &store.conn,
        le.tk,
        &Place {
            session_id: le.session_id,
            run_id: le.run_id,
        },
        &agent::user(agent::rules_note(actor, &notes)),
        "rules",
        None,
        None,
        None,
        now,
    )?;
    Ok(mutated)
}

/// The demand reading as recorded for the next pass's "steady" check.
pub fn demand_record(s: &Snapshot) -> String {
    serde_json::json!({ "demand": s.demand, "error": s.demand_error }).to_string()
}

/// Demand steady: pending, running and live-worker counts as in the last pass and 1 h
/// throughput within 20 %; or the probe failing the same way again.
pub fn demand_steady(previous: Option<&str>, s: &Snapshot) -> bool {
    let Some(prev) = previous.and_then(|p| serde_json::from_str::<serde_json::Value>(p).ok())
    else {
        return false;
    };
    let prev_demand: Option<Demand> = serde_json::from_value(prev["demand"].clone()).ok();
    match (prev_demand, &s.demand) {
        (Some(a), Some(b)) => {
            let (x, y) = (a.completed_1h as f64, b.completed_1h as f64);
            a.pending == b.pending
                && a.running == b.running
                && a.live_workers() == b.live_workers()
                && (x - y).abs() <= 0.2 * x.max(y)
        }
        (None, None) => prev["error"].as_str() == s.demand_error.as_deref(),
        _ => false,
    }
}

/// Config needed to build an LLM client exists (for doctor and inspect).
pub fn uses_llm(config: &Config) -> bool {
    config.llm.provider == Provider::Openai
}
