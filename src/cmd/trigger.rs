//! `trigger`: commit an event, then ring the doorbell (`crate::trigger`).

use anyhow::Result;

use crate::cli::TriggerArgs;
use crate::cmd::App;

pub fn run(app: &App, args: &TriggerArgs) -> Result<()> {
    let super::EventPlace {
        place,
        dir,
        store,
        refused,
    } = super::open_for_event(app)?;
    let reason = args.reason.trim();
    let id = crate::trigger::record(
        &store,
        &dir,
        place != crate::trigger::Recorded::Event,
        args.priority,
        "trigger",
        reason,
        None,
        app.now(),
    )?;
    let (what, then) = crate::trigger::recorded_as(place, id);
    crate::outln!("{what} (P{}) recorded{then}; doorbell rung", args.priority);
    super::refused_after_recording(
        &refused,
        &format!("{what} was recorded and the doorbell rung"),
    )
}
