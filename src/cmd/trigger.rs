//! `trigger`: commit an event, then ring the doorbell. Decides nothing; stays cheap (no
//! tokenizer, no network client).

use anyhow::{Context, Result};

use crate::app::App;
use crate::cli::TriggerArgs;
use crate::clock::rfc3339;
use crate::doorbell::{Doorbell, FileDoorbell};
use crate::store::events;

pub fn run(app: &App, args: &TriggerArgs) -> Result<()> {
    let (_config, dir, store) = super::open_existing(app)?;
    let now = app.now();
    let id = events::insert(
        &store.conn,
        args.priority,
        "trigger",
        args.reason.trim(),
        None,
        now,
    )
    .context("cannot record the event")?;
    ring(&dir, id, args.priority, args.reason.trim(), now)?;
    crate::outln!("event {id} (P{}) recorded; doorbell rung", args.priority);
    Ok(())
}

/// Append the event's line to the doorbell, after its commit (`trigger`, `message`,
/// `reset-session` and `poll` all ring here).
pub(crate) fn ring(
    dir: &std::path::Path,
    id: i64,
    priority: u8,
    reason: &str,
    now: i64,
) -> Result<()> {
    crate::faults::point("trigger-after-insert")?;
    ring_on(&FileDoorbell::new(dir), id, priority, reason, now)
}

/// Append the event's line to this doorbell, after its commit.
pub(crate) fn ring_on(
    doorbell: &dyn Doorbell,
    id: i64,
    priority: u8,
    reason: &str,
    now: i64,
) -> Result<()> {
    doorbell
        .ring(&format!("{} P{priority} event={id} {reason}", rfc3339(now)))
        .with_context(|| {
            format!("event {id} is recorded but the doorbell could not be rung; the timer will pick it up")
        })
}
