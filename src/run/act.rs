//! What a pass writes around its decision: the observation and operator messages the model
//! reads, the rules' calls executed through the tools with one note of what they did, and the
//! model's bookkeeping on the run row.

use anyhow::Result;

use crate::agent::{self, LlmFailure, LlmOutcome, LoopEnv, Place};
use crate::clock::Millis;
use crate::config::Config;
use crate::fleet::Snapshot;
use crate::policy::floor;
use crate::policy::pass::{demand_record, verdict};
use crate::policy::peer::Peer;
use crate::policy::rules;
use crate::prompt::notes::{call_line, compact_json, floor_note, rules_note};
use crate::prompt::observation::{pass_text, Woke};
use crate::store::{runs, session, Store};
use crate::tokens::Tokenizer;
use crate::tools::{Actor, Registry};

use super::Claim;

/// Store this pass's operator messages and its observation (the text the model reads), and
/// the demand reading for the next pass's "steady" check, in one transaction. With `peer`
/// (the simulator's: no model ever reads its session) only the demand reading.
pub fn record_observation(
    store: &mut Store,
    tk: &Tokenizer,
    claim: &Claim,
    snapshot: &Snapshot,
    config: &Config,
    now: Millis,
    peer: bool,
) -> Result<()> {
    if peer {
        return session::set_last_observed(
            &store.conn,
            Some(&demand_record(snapshot)),
            &serde_json::to_string(&snapshot.instances.len())?,
        );
    }
    let floor_before =
        crate::store::actions::floor_in_previous_pass(&store.conn, claim.run_id, 20)?;
    let woke = Woke {
        events: &claim.events,
        wakes: &claim.wakes,
        run_id: claim.run_id,
        pass_no: claim.pass_no,
        started_by: claim.started_by.as_str(),
        floor_before: &floor_before,
    };
    let text = pass_text(snapshot, config, &woke, now);
    let place = Place {
        session_id: claim.session_id,
        run_id: claim.run_id,
    };
    let tx = store.immediate()?;
    for e in claim.events.iter().filter(|e| e.kind == "message") {
        let body = e.body.as_deref().unwrap_or(&e.reason);
        // The operator's words, lines kept; no control character (ESC, CR, BEL) or
        // direction override reaches the model or the stored conversation.
        let body: String = body
            .chars()
            .filter(|&c| c == '\n' || c == '\t' || !crate::text::is_hidden(c))
            .collect();
        let msg = agent::user(format!("Operator message: {body}"));
        agent::insert_message(&tx, tk, &place, &msg, "operator", None, Some(e.id), now)?;
    }
    let msg = agent::user(text);
    agent::insert_message(&tx, tk, &place, &msg, "observation", None, None, now)?;
    session::set_last_observed(
        &tx,
        Some(&demand_record(snapshot)),
        &serde_json::to_string(&snapshot.instances.len())?,
    )?;
    tx.commit()?;
    Ok(())
}

/// The rules decide (`llm.provider = "rules"`), or a peer in their place (the simulator's);
/// the calls go through the same registry and guardrails, and one note records what they did.
pub fn rules(
    store: &mut Store,
    le: &LoopEnv<'_>,
    registry: &Registry,
    snapshot: &mut Snapshot,
    peer: Option<&dyn Peer>,
) -> Result<bool> {
    let low = super::observe::low_demand_streak(&store.conn, snapshot)?;
    let plan = match peer {
        Some(p) => p.plan(snapshot, le.config),
        None => rules::decide(snapshot, le.config, low, rules::Mode::Full),
    };
    let done = execute(
        store,
        le,
        registry,
        snapshot,
        Actor::Rules,
        |_| "rules".into(),
        &plan,
    )?;
    crate::faults::point("rules-before-note")?;
    // A peer's session is read by no model (the simulator's), so it keeps no note.
    if peer.is_none() {
        let waiting = done
            .notes
            .is_empty()
            .then(|| rules::waiting_why(snapshot, le.config))
            .flatten();
        let note = rules_note(false, &done.notes, waiting.as_deref());
        note_message(store, le, &note, "rules")?;
    }
    Ok(done.mutated())
}

/// The floor (`policy::floor`): after the model's turns (or a skipped pass) the rules plan the
/// snapshot as the model left it, and what protects the fleet that the model left undone is
/// carried out with actor `floor`, with a note the next prompts carry. With `actor`
/// [`Actor::Fallback`] the model was unusable: the same plan, as under a model that did
/// nothing, is the pass's decision (ledger actor `fallback-rules`, and a note every pass).
/// The floor's clocks go on the run row when one runs. Returns whether it changed the fleet.
pub fn floor(
    store: &mut Store,
    le: &LoopEnv<'_>,
    registry: &Registry,
    snapshot: &mut Snapshot,
    actor: Actor,
) -> Result<Floored> {
    let before = match session::floor_memory(&store.conn)? {
        None => floor::Memory::default(),
        Some(json) => serde_json::from_str(&json).unwrap_or_else(|e| {
            log::warn!("the floor's stored memory is unreadable ({e}); starting it afresh");
            floor::Memory::default()
        }),
    };
    let low = super::observe::low_demand_streak(&store.conn, snapshot)?;
    let model = model_did(&store.conn, le.run_id)?;
    let mut plan = floor::plan(snapshot, le.config, low, &before, &model, le.clock.now_ms());
    if plan.memory != before {
        session::set_floor_memory(&store.conn, &serde_json::to_string(&plan.memory)?)?;
    }
    let fallback = actor == Actor::Fallback;
    if fallback {
        plan.calls = plan.calls.iter().map(floor::as_fallback).collect();
    }
    let mut mutated = false;
    let called = !plan.calls.is_empty();
    if !plan.calls.is_empty() || fallback {
        if !plan.calls.is_empty() {
            log::info!(
                "run {}: the {} carries out {} call(s)",
                le.run_id,
                if fallback {
                    "fallback (the floor, the model unusable)"
                } else {
                    "floor"
                },
                plan.calls.len()
            );
        }
        // The call id names the rule (`floor-emergency_12_1`, `fallback-flagged_12_2`): the
        // ledger keeps it, so a report can count the floor's actions by kind.
        let who = if fallback { "fallback" } else { "floor" };
        let id = |c: &rules::PlannedCall| format!("{who}-{}", c.kind.as_str());
        let done = execute(store, le, registry, snapshot, actor, id, &plan.calls)?;
        mutated = done.mutated();
        if fallback {
            crate::faults::point("rules-before-note")?;
            note_message(store, le, &rules_note(true, &done.notes, None), "rules")?;
        } else {
            note_message(store, le, &floor_note(&done.notes), "floor")?;
        }
        // Its launches for the deficit refused or failed: the deficit stays unanswered.
        let deficit: Vec<&Done> = plan
            .calls
            .iter()
            .zip(&done.calls)
            .filter(|(c, _)| matches!(c.kind, rules::CallKind::Deficit | rules::CallKind::Seed))
            .map(|(_, d)| d)
            .collect();
        if !deficit.is_empty() && deficit.iter().all(|d| !d.mutated) {
            plan.memory.unanswered = Some(format!(
                "the floor's launch did not go through: {}",
                deficit[0].answer
            ));
            session::set_floor_memory(&store.conn, &serde_json::to_string(&plan.memory)?)?;
        }
    }
    let clocks = plan.memory.running().then(|| plan.memory.clocks());
    runs::set_floor_clocks(
        &store.conn,
        le.run_id,
        clocks
            .map(|c| serde_json::to_string(&c))
            .transpose()?
            .as_deref(),
    )?;
    Ok(Floored { called, mutated })
}

/// What the floor did in a pass.
#[derive(Debug, Clone, Copy)]
pub struct Floored {
    /// It asked for launches or stops (whether or not they went through).
    pub called: bool,
    /// One of them changed the fleet.
    pub mutated: bool,
}

/// The floor under the model (or under a skipped pass): when it asks for anything that gets
/// past the guardrails (done, or failed at vast.ai), the pass was decided by `floor`, and when
/// that changed the fleet the verdict is `action`. Calls that a guardrail all refused (the
/// daily cap reached, a full launch window) overrule nothing: the model could not have made
/// them either, so the pass stays the model's (the ledger keeps them, actor `floor`). Nor do
/// calls that all failed after a launch of the model's that failed at vast.ai too (a re-test:
/// a config vast.ai refused, a 400 for the image, made each pass the floor's, and doctor
/// told the operator to replace the model).
pub fn overrule(
    store: &mut Store,
    le: &LoopEnv<'_>,
    registry: &Registry,
    snapshot: &mut Snapshot,
    outcome: &mut runs::Outcome,
) -> Result<()> {
    let floored = floor(store, le, registry, snapshot, Actor::Floor)?;
    let conn = &store.conn;
    // The floor's calls of this pass as the ledger has them, read once: all of them `refused`
    // by a guardrail, or all refused or failed (none when it made none recorded).
    let rows = crate::store::actions::outcomes_of_run(conn, le.run_id, Actor::Floor.as_str())?;
    let all =
        |went: &[&str]| !rows.is_empty() && rows.iter().all(|a| went.contains(&a.outcome.as_str()));
    let overruled = floored.called
        && !all(&["refused"])
        && !(all(&["refused", "failed"]) && launch_failed(conn, le.run_id)?);
    if overruled {
        outcome.decided_by = Some(runs::DecidedBy::Floor);
    }
    if floored.mutated {
        outcome.verdict = verdict(true);
    }
    Ok(())
}

/// Whether a launch of the model's failed at vast.ai in this pass.
fn launch_failed(conn: &rusqlite::Connection, run_id: i64) -> Result<bool> {
    let rows = crate::store::actions::outcomes_of_run(conn, run_id, Actor::Llm.as_str())?;
    Ok(rows
        .iter()
        .any(|a| a.kind == "launch" && a.outcome == "failed"))
}

/// What the model's own calls changed in this pass (launches and stops that went through,
/// or would have under `policy.dry_run`: the floor does not double a dry run's either), and
/// its launches that met the launch window or failed at vast.ai (its rate limit, an account
/// out of credit, no rentable offer): the floor's own would meet the same, and a drill saw
/// each such pass counted as the model overruled, `doctor` telling the operator to replace
/// the model. An offer taken or refused for itself is not one: the floor's launch searches
/// afresh.
fn model_did(conn: &rusqlite::Connection, run_id: i64) -> Result<floor::ModelDid> {
    let mut did = floor::ModelDid::default();
    for a in crate::store::actions::outcomes_of_run(conn, run_id, Actor::Llm.as_str())? {
        match (a.kind.as_str(), a.outcome.as_str()) {
            ("launch", "ok" | "intent" | "dry_run") => did.launches += 1,
            (_, "dry_run") => {
                did.stops += 1;
                did.stops_blocked.extend(a.instance_id)
            }
            (_, "ok" | "intent") => did.stops += 1,
            ("launch", "refused") if a.code.as_deref() == Some("rate_limited") => {
                did.launches_blocked += 1
            }
            ("launch", "failed") if !offer_caused(a.code.as_deref()) => did.launches_blocked += 1,
            (_, "failed")
                if a.code.as_deref() == Some(crate::store::actions::VAST_RATE_LIMITED) =>
            {
                did.stops_blocked.extend(a.instance_id)
            }
            _ => {}
        }
    }
    Ok(did)
}

/// A failed launch whose offer was the cause (taken meanwhile, or refused for itself), by its
/// ledger code: the floor's own launch, which searches afresh, may go.
fn offer_caused(code: Option<&str>) -> bool {
    use crate::store::actions::{OFFER_REFUSED, OFFER_TAKEN};
    matches!(code, Some(c) if c == OFFER_TAKEN || c == OFFER_REFUSED)
}

/// One planned call as it went: its place in the plan, whether it changed the fleet, and its
/// answer (compact JSON).
struct Done {
    index: usize,
    mutated: bool,
    answer: String,
}

/// The planned calls as they went, in the plan's order (whatever order they were sent in),
/// and one note line per call in the order sent.
struct Executed {
    calls: Vec<Done>,
    notes: Vec<String>,
}

impl Executed {
    fn mutated(&self) -> bool {
        self.calls.iter().any(|c| c.mutated)
    }
}

/// Run planned calls through the registry (and so the guardrails), ids `<prefix>_<run>_<n>`.
fn execute(
    store: &mut Store,
    le: &LoopEnv<'_>,
    registry: &Registry,
    snapshot: &mut Snapshot,
    actor: Actor,
    prefix: impl Fn(&rules::PlannedCall) -> String,
    plan: &[rules::PlannedCall],
) -> Result<Executed> {
    let mut out = Executed {
        calls: Vec::new(),
        notes: Vec::new(),
    };
    let mut unsent = 0;
    let mut order: Vec<usize> = (0..plan.len()).collect();
    // Stops vast.ai failed in a row, and whether the plan's launches were put before the
    // stops left ([`FAILED_STOPS_BEFORE_LAUNCHES`]: once a pass).
    let mut failed_stops = 0;
    let mut reordered = false;
    let mut at = 0;
    while at < order.len() {
        let i = order[at];
        let call = &plan[i];
        if !reordered && failed_stops >= FAILED_STOPS_BEFORE_LAUNCHES && !call.is_launch() {
            reordered = true;
            let (rest, moved) = launches_first(plan, &order[at..]);
            // Only where the caps leave the launches room without the stops: where the
            // instances to stop hold it, a launch first is refused (the re-test: 4 flagged
            // under max_instances = 4, the launch refused `instance_cap`, the stops then
            // through, nothing launched where the plan's order launched one).
            let launches = order[at..].iter().filter(|&&j| plan[j].is_launch()).count();
            if moved > 0 && snapshot.room_for(le.config, launches) {
                crate::journal::eprint(
                    crate::journal::WARNING,
                    &format!(
                        "fleetagent: run {}: vast.ai failed {failed_stops} stops in a row; the plan's launches go before the {moved} stop(s) left ahead of them",
                        le.run_id,
                    ),
                );
                order.truncate(at);
                order.extend(rest);
                continue;
            }
        }
        at += 1;
        let call_id = format!("{}_{}_{}", prefix(call), le.run_id, i + 1);
        // The edge: the typed call becomes the tool's name and JSON arguments here.
        let args = call.arguments.to_json();
        // Past the pass's deadline nothing more is sent: the watchdog ends the process 30 s
        // later, and a call begun then (a create's spacing and vast.timeout_secs) would be cut
        // with the run left `running` (the scale walkthrough: 16 destroys of 3.25 s each
        // under a 10 s deadline, killed before the WORKERS DEAD launches that followed).
        let result = if le.clock.now_ms() >= le.deadline {
            unsent += 1;
            past_deadline(le)
        } else {
            agent::run_tool(
                store,
                le,
                registry,
                snapshot,
                actor,
                &call_id,
                call.tool,
                &args.to_string(),
            )?
        };
        if !call.is_launch() {
            failed_stops = if result.error_code() == Some("vast_error") {
                failed_stops + 1
            } else {
                0
            };
        }
        let answer = compact_json(&result.content);
        out.notes
            .push(call_line(call.tool, &args, &call.why, &result.content));
        out.calls.push(Done {
            index: i,
            mutated: result.mutated,
            answer,
        });
    }
    out.calls.sort_by_key(|d| d.index);
    if unsent > 0 {
        // The rest waits for no timer: an event (P1) the end of the run leaves to the next
        // process, which the doorbell starts at once (the scale walkthrough's WORKERS DEAD
        // launches came after the destroys that used up the deadline). Only after a pass
        // that changed something: one whose calls all failed would start the same pass again
        // at once, and again (the re-test: 5 runs in 45 s, 40 DELETEs answered 500).
        let progressed = out.calls.iter().any(|c| c.mutated);
        if progressed {
            crate::store::events::insert(
                &store.conn,
                1,
                "poll",
                &format!(
                    "run {} reached its deadline with {unsent} planned call(s) unsent",
                    le.run_id
                ),
                None,
                le.clock.now_ms(),
            )?;
        }
        crate::journal::eprint(
            crate::journal::WARNING,
            &format!(
                "fleetagent: run {}: {unsent} of the {} planned call(s) not sent: the pass reached its deadline (run.deadline_secs = {}); {}",
                le.run_id,
                plan.len(),
                le.config.run.deadline_secs,
                if progressed {
                    "the next run, started at once, plans again"
                } else {
                    "none of those sent changed the fleet, so the next run is the timer's"
                }
            ),
        );
    }
    Ok(out)
}

/// Stops vast.ai failed in a row after which the stops the plan has left before its launches
/// wait until those launches went: a DELETE that fails or hangs (its whole budget, 60 s at
/// the default `vast.timeout_secs`) would fail alike for the next flagged instance, and ten
/// of them used the deadline before WORKERS DEAD's launches were sent, pass after pass.
const FAILED_STOPS_BEFORE_LAUNCHES: u32 = 2;

/// The calls `rest` (indexes into `plan`, in their order) with the stops before the last
/// launch put right after it, and how many were moved; the launches and everything after the
/// last launch keep their order. Without a launch, `rest` as it is.
fn launches_first(plan: &[rules::PlannedCall], rest: &[usize]) -> (Vec<usize>, usize) {
    let Some(last) = rest.iter().rposition(|&j| plan[j].is_launch()) else {
        return (rest.to_vec(), 0);
    };
    let (ahead, after) = rest.split_at(last + 1);
    let launches = ahead.iter().filter(|&&j| plan[j].is_launch());
    let stops: Vec<usize> = ahead
        .iter()
        .filter(|&&j| !plan[j].is_launch())
        .copied()
        .collect();
    let moved = stops.len();
    let order = launches.chain(&stops).chain(after).copied().collect();
    (order, moved)
}

/// What a planned call not sent past the deadline answers (no request, nothing recorded).
fn past_deadline(le: &LoopEnv<'_>) -> crate::tools::ToolResult {
    crate::tools::ToolResult::error(
        "rate_limited",
        serde_json::json!({
            "limit": format!("run.deadline_secs = {}", le.config.run.deadline_secs),
            "message": "not sent: the pass reached its deadline; the next pass plans again",
            "retry_after_secs": le.config.run.timer_period_secs,
        }),
    )
}

fn note_message(store: &Store, le: &LoopEnv<'_>, text: &str, kind: &str) -> Result<()> {
    let place = Place {
        session_id: le.session_id,
        run_id: le.run_id,
    };
    let note = agent::user(text.to_string());
    let now = le.clock.now_ms();
    agent::insert_message(&store.conn, le.tk, &place, &note, kind, None, None, now)?;
    Ok(())
}

/// The model answered: its counts go on the run row.
pub fn model_answered(
    store: &Store,
    mut outcome: runs::Outcome,
    o: &LlmOutcome,
    now: Millis,
) -> Result<runs::Outcome> {
    session::record_llm_outcome(&store.conn, None, now)?;
    outcome.decided_by = Some(runs::DecidedBy::Llm);
    outcome.llm_calls = o.calls;
    outcome.prompt_tokens_est = Some(o.max_prompt_est);
    outcome.prompt_tokens_reported = o.max_prompt_reported;
    outcome.completion_tokens = Some(o.completion_tokens);
    outcome.verdict = verdict(o.mutated);
    Ok(outcome)
}

/// The model was unusable: what it cost and why go on the run row and the session.
pub fn model_failed(
    store: &Store,
    outcome: &mut runs::Outcome,
    failure: &LlmFailure,
    now: Millis,
) -> Result<()> {
    session::record_llm_outcome(&store.conn, Some(&failure.message), now)?;
    let o = &failure.outcome;
    outcome.llm_calls = o.calls;
    outcome.prompt_tokens_est = (o.max_prompt_est > 0).then_some(o.max_prompt_est);
    outcome.prompt_tokens_reported = o.max_prompt_reported;
    outcome.completion_tokens = (o.calls > 0).then_some(o.completion_tokens);
    outcome.llm_error = Some(failure.message.clone());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rules::{CallKind, Launch, PlannedCall, Stop};

    fn stop(id: i64, kind: CallKind) -> PlannedCall {
        PlannedCall::stop(Stop {
            instance_id: id,
            why: "flagged".into(),
            kind,
        })
    }

    fn launch() -> PlannedCall {
        let l = Launch {
            n: 1,
            why: "WORKERS DEAD".into(),
            kind: CallKind::Emergency,
            emergency: true,
        };
        PlannedCall::launch(&l, "WORKERS DEAD (launch 1 of 2)".into())
    }

    #[test]
    fn the_stops_left_before_the_launches_go_after_them_and_the_rest_keeps_its_place() {
        // Destroys 0-3 (two already failed: the rest starts at 2), launches 4 and 5, surplus 6.
        let plan = vec![
            stop(1, CallKind::Flagged),
            stop(2, CallKind::Flagged),
            stop(3, CallKind::Flagged),
            stop(4, CallKind::Flagged),
            launch(),
            launch(),
            stop(5, CallKind::Surplus),
        ];
        assert_eq!(
            launches_first(&plan, &[2, 3, 4, 5, 6]),
            (vec![4, 5, 2, 3, 6], 2)
        );
        // Nothing to put after: no launch left, or none but launches before the last one.
        assert_eq!(launches_first(&plan, &[6]), (vec![6], 0));
        assert_eq!(launches_first(&plan, &[4, 5, 6]), (vec![4, 5, 6], 0));
    }
}
