//! `message TEXT`: an operator message for the agent, a P0 event carrying the text.

use anyhow::Result;

use crate::cli::MessageArgs;
use crate::cmd::App;

pub fn run(app: &App, args: &MessageArgs) -> Result<()> {
    let place = super::open_for_event(app)?;
    let text = args.text.trim();
    let reason = crate::trigger::message_reason(text).map_err(crate::error::usage)?;
    let (what, then) = place.record(0, "message", &reason, Some(text), app.now())?;
    crate::outln!("message recorded as {what} (P0){then}; the agent will read it in its next run");
    super::refused_after_recording(
        &place.refused,
        &format!("the message was recorded as {what}"),
    )
}
