//! `trigger`: commit an event, then ring the doorbell (`crate::trigger`).

use anyhow::Result;

use crate::cli::TriggerArgs;
use crate::cmd::App;

pub fn run(app: &App, args: &TriggerArgs) -> Result<()> {
    let (config, dir, store) = super::open_existing(app)?;
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
    Ok(())
}
