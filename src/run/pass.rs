//! One pass after its claim, as a script: observe, record what the model will read, decide
//! who decides (`policy::pass`), act through the tools and their guardrails, and return the
//! outcome the run row keeps. Runs inside the run lock; every message is persisted as it
//! happens.

use anyhow::Result;

use crate::agent::{self, LoopEnv};
use crate::clock::Millis;
use crate::policy::action_lines;
use crate::policy::pass::{
    counted_verdict, decider, on_model_failure, vast_failure, verdict, Decider, Facts,
    OnModelFailure,
};
use crate::store::runs::{DecidedBy, Verdict};
use crate::store::{runs, session, Store};
use crate::tokens::Tokenizer;
use crate::tools::{self, Actor};

use super::{act, observe, Claim, RunEnv};

/// What a pass did: its run row's outcome, and for the process's summary line what its
/// actions came to and whether vast.ai's listing failed.
#[derive(Debug, Clone, PartialEq)]
pub struct Done {
    pub outcome: runs::Outcome,
    /// After the verdict in the summary line (`policy::action_lines::tally`); empty when
    /// the pass asked for no launch or stop.
    pub words: String,
    /// The listing's failure (`policy::pass::vast_failure`): the process exits 1.
    pub vast_error: Option<String>,
    /// Why demand is unknown this pass (the probe failed): the fleet is held, and the
    /// summary line says so.
    pub demand_error: Option<String>,
    /// The LLM was unusable and the fallback (the floor) decided.
    pub fell_back: bool,
}

/// `deadline`: the process's (Unix ms); the model is not asked past what it leaves.
pub fn execute(
    store: &mut Store,
    env: &RunEnv<'_>,
    claim: &Claim,
    deadline: Millis,
) -> Result<Done> {
    let config = env.config;
    let tk = Tokenizer::for_config(config)?;
    let previous = session::state(&store.conn)?;

    // Observe, and record what the model reads.
    let mut snapshot = observe::observe(store, config, env.services, env.clock, claim.run_id)?;
    let now = env.clock.now_ms();
    act::record_observation(
        store,
        &tk,
        claim,
        &snapshot,
        config,
        now,
        env.peer.is_some(),
    )?;
    crate::faults::point("run-after-observe")?;

    // Decide and act.
    let le = LoopEnv {
        ctx: env.ctx,
        session_id: claim.session_id,
        run_id: claim.run_id,
        tk: &tk,
        deadline,
    };
    let registry = tools::registry();
    let mut outcome = runs::Outcome::new(snapshot.workers_dead());
    let facts = Facts {
        events: claim.events.len(),
        wakes: claim.wakes.len(),
        previous_demand: previous.last_demand.as_deref(),
        last_llm_call_at: previous.last_llm_call_at,
        operator_unheard: match previous.last_llm_call_at {
            Some(t) => crate::store::events::operator_spoke_since(&store.conn, t + 1, now)?,
            None => false,
        },
        now,
    };
    match decider(config, &facts, &snapshot) {
        Decider::Rules => {
            outcome.decided_by = Some(DecidedBy::Rules);
            let mutated = act::rules(store, &le, &registry, &mut snapshot, env.peer)?;
            outcome.verdict = verdict(mutated);
        }
        Decider::Skip => {
            outcome.verdict = Verdict::Skipped;
            act::overrule(store, &le, &registry, &mut snapshot, &mut outcome)?;
        }
        Decider::Model => match agent::ask(store, &le, &registry, &mut snapshot)? {
            Ok(o) => {
                outcome = act::model_answered(store, outcome, &o, env.clock.now_ms())?;
                act::overrule(store, &le, &registry, &mut snapshot, &mut outcome)?;
            }
            Err(failure) => {
                act::model_failed(store, &mut outcome, &failure, env.clock.now_ms())?;
                if on_model_failure(config) == OnModelFailure::FailPass {
                    runs::record_llm(&store.conn, claim.run_id, &outcome)?;
                    anyhow::bail!(
                        "the LLM is unusable and llm.fallback = \"none\": {}",
                        failure.message
                    )
                }
                crate::faults::point("fallback-before-rules")?;
                log::warn!(
                    target: crate::journal::NOTICE,
                    "run {}: the LLM is unusable ({}); the fallback decides (the floor)",
                    claim.run_id,
                    failure.message
                );
                outcome.decided_by = Some(DecidedBy::FallbackRules);
                let mutated =
                    act::floor(store, &le, &registry, &mut snapshot, Actor::Fallback)?.mutated;
                // Any earlier LLM round's mutations count too.
                outcome.verdict = verdict(mutated || failure.outcome.mutated);
            }
        },
    }
    // Whoever decided, the ledger says what the calls came to.
    let tally = action_lines::tally(&crate::store::actions::of_run(&store.conn, claim.run_id)?);
    outcome.actions = tally.counts;
    outcome.verdict = counted_verdict(outcome.verdict, tally.counts);
    if let Some(e) = &snapshot.demand_error {
        // A blind pass must not read as a calm one in the journal. Said once the pass is
        // done: a pass that fails has its one error line, and that names what failed.
        log::warn!(
            target: crate::journal::NOTICE,
            "run {}: demand unknown, the probe failed: {e}; nothing is launched or stopped for demand (the fleet is held)",
            claim.run_id
        );
    }
    warn_hands_held(claim.run_id, &snapshot, config, tally.counts);
    let fell_back = outcome.decided_by == Some(DecidedBy::FallbackRules);
    Ok(Done {
        outcome,
        words: tally.words,
        vast_error: vast_failure(&snapshot).map(String::from),
        demand_error: snapshot.demand_error.clone(),
        fell_back,
    })
}

/// The passes whose hands are held say so at warning, each pass, as a blind one does: no
/// vast.ai key, a pause in force (nothing is launched or stopped but by the operator), and WORKERS DEAD
/// with what this pass's calls came to (refused by a cap, they leave the fleet dead).
fn warn_hands_held(
    run_id: i64,
    snapshot: &crate::fleet::Snapshot,
    config: &crate::config::Config,
    counts: crate::store::runs::ActionCounts,
) {
    if snapshot.listing_error.as_deref() == Some(crate::fleet::NO_VAST_KEY) {
        // The process exits 0 (no call failed: `doctor`'s `secrets` check names the missing
        // key), but a pass that can neither list, launch nor stop is blind: a missing
        // credential file left a green service with nothing at warning (a walkthrough).
        log::warn!(
            target: crate::journal::NOTICE,
            "run {run_id}: no vast.ai API key: nothing of the fleet can be listed, launched or stopped (set VAST_API_KEY or the vast_api_key credential; `fleetagent doctor` says where it looks)"
        );
    }
    if let Some(p) = &snapshot.paused {
        let until = p
            .until
            .map_or("until `fleetagent resume`".to_string(), |u| {
                format!("until {}", crate::clock::rfc3339(u))
            });
        log::warn!(
            target: crate::journal::NOTICE,
            "run {run_id}: paused since {} ({until}; {}): nothing is launched or stopped but by the operator",
            crate::clock::rfc3339(p.since),
            crate::text::quote(&p.reason, 200)
        );
    }
    if let Some(d) = snapshot.demand.as_ref().filter(|_| snapshot.workers_dead()) {
        // Why nothing was asked for, when nothing was: the line said only "ok 0, refused 0,
        // failed 0" under an operator hold (a walkthrough).
        let none_asked = counts.ok + counts.refused + counts.failed == 0;
        let taskless = match (snapshot.taskless.len(), &snapshot.hold) {
            (n, _) if n > 0 => format!(
                "; the rules launch nothing: {n} of ours run in Curio without PSProve ({})",
                crate::text::clip(&snapshot.taskless[0], 200)
            ),
            (_, Some(h)) => format!(
                "; the rules and the floor launch nothing: the operator stopped {} {} ago, and policy.operator_hold_mins holds launches until {} (`fleetagent resume` or a message ends it)",
                h.instance_id
                    .map_or("an instance".to_string(), |id| format!("instance {id}")),
                crate::clock::human_duration(snapshot.now - h.stopped_at),
                crate::clock::rfc3339(h.until)
            ),
            _ if none_asked
                && snapshot.paused.is_none()
                && crate::policy::rules::emergency_launches(snapshot, config) == 0 =>
            {
                "; nothing asked: the instances of ours coming cover the work".to_string()
            }
            _ => String::new(),
        };
        log::warn!(
            target: crate::journal::NOTICE,
            "run {run_id}: WORKERS DEAD: {} proofs queued and no live worker; this pass's calls: ok {}, refused {}, failed {}{taskless}",
            d.queued_work(),
            counts.ok,
            counts.refused,
            counts.failed
        );
    }
}
