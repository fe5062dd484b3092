//! One pass of the agent after its claim: observe, record the observation, decide, act.
//! Runs inside the run lock; every message is persisted as it happens.

use std::sync::Arc;

use anyhow::Result;

use crate::clock::short;
use crate::demand::DemandProbe;
use crate::llm::LlmClient;
use crate::observation;
use crate::runner::{Claim, RunEnv};
use crate::store::{messages, runs, Store};
use crate::vast::VastClient;

/// The outside services a pass may use; `None` when not configured (no key, no source).
#[derive(Default, Clone)]
pub struct Services {
    pub vast: Option<Arc<dyn VastClient>>,
    pub demand: Option<Arc<dyn DemandProbe>>,
    pub llm: Option<Arc<dyn LlmClient>>,
}

pub fn execute(store: &mut Store, env: &RunEnv<'_>, claim: &Claim) -> Result<runs::Outcome> {
    let now = env.clock.now_ms();
    let mut lines = vec![format!(
        "Run {} (pass {}, started by {}) at {} UTC.",
        claim.run_id,
        claim.pass_no,
        claim.started_by,
        short(now)
    )];
    lines.extend(observation::events_line(&claim.events));
    lines.extend(observation::wakes_line(&claim.wakes, now));
    let text = lines.join("\n");

    let tx = store.immediate()?;
    for e in claim.events.iter().filter(|e| e.kind == "message") {
        let body = e.body.as_deref().unwrap_or(&e.reason);
        let content = format!("Operator message: {body}");
        messages::insert(
            &tx,
            &messages::NewMessage {
                session_id: claim.session_id,
                run_id: Some(claim.run_id),
                role: "user",
                kind: "operator",
                content: &content,
                tokens: tokens_of(&content),
                event_id: Some(e.id),
                ..Default::default()
            },
            now,
        )?;
    }
    messages::insert(
        &tx,
        &messages::NewMessage {
            session_id: claim.session_id,
            run_id: Some(claim.run_id),
            role: "user",
            kind: "observation",
            content: &text,
            tokens: tokens_of(&text),
            ..Default::default()
        },
        now,
    )?;
    tx.commit()?;
    crate::faults::point("run-after-observe")?;

    Ok(runs::Outcome {
        verdict: "no-action".into(),
        ..Default::default()
    })
}

fn tokens_of(text: &str) -> i64 {
    tiktoken_rs::o200k_base_singleton().count_ordinary(text) as i64 + 4
}
