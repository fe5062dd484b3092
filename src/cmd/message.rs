//! `message TEXT`: an operator message for the agent, a P0 event carrying the text.

use anyhow::Result;

use crate::cli::MessageArgs;
use crate::cmd::App;

pub fn run(app: &App, args: &MessageArgs) -> Result<()> {
    let (config, dir, store, refused) = super::open_for_event(app)?;
    let text = args.text.trim();
    let reason = crate::trigger::message_reason(text).map_err(crate::error::usage)?;
    let id = crate::trigger::record(
        &store,
        &dir,
        config.config.ha.enabled,
        0,
        "message",
        &reason,
        Some(text),
        app.now(),
    )?;
    crate::outln!("message recorded as event {id} (P0); the agent will read it in its next run");
    super::refused_after_recording(&refused, &format!("the message was recorded as event {id}"))
}
