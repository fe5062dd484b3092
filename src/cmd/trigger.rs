//! `trigger`: commit an event, then ring the doorbell (`crate::trigger`).

use anyhow::Result;

use crate::cli::TriggerArgs;
use crate::cmd::App;

pub fn run(app: &App, args: &TriggerArgs) -> Result<()> {
    let (config, dir, store, refused) = super::open_for_event(app)?;
    let reason = args.reason.trim();
    let id = crate::trigger::record(
        &store,
        &dir,
        config.config.ha.enabled,
        args.priority,
        "trigger",
        reason,
        None,
        app.now(),
    )?;
    crate::outln!("event {id} (P{}) recorded; doorbell rung", args.priority);
    super::refused_after_recording(
        &refused,
        &format!("event {id} was recorded and the doorbell rung"),
    )
}
