//! `trigger`: commit an event, then ring the doorbell (`crate::trigger`).

use anyhow::Result;

use crate::cli::TriggerArgs;
use crate::cmd::App;

pub fn run(app: &App, args: &TriggerArgs) -> Result<()> {
    let place = super::open_for_event(app)?;
    let reason = args.reason.trim();
    let (what, then) = place.record(args.priority, "trigger", reason, None, app.now())?;
    crate::outln!("{what} (P{}) recorded{then}; doorbell rung", args.priority);
    super::refused_after_recording(
        &place.refused,
        &format!("{what} was recorded and the doorbell rung"),
    )
}
