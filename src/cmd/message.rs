//! `message TEXT`: an operator message for the agent, a P0 event carrying the text.

use anyhow::{Context, Result};

use crate::app::App;
use crate::cli::MessageArgs;
use crate::store::events;

/// Longer operator messages are refused: they must fit the prompt with room to spare.
pub const MAX_MESSAGE_CHARS: usize = 8_000;

pub fn run(app: &App, args: &MessageArgs) -> Result<()> {
    let (_config, dir, store) = super::open_existing(app)?;
    let now = app.now();
    let text = args.text.trim();
    if text.chars().count() > MAX_MESSAGE_CHARS {
        return Err(crate::error::usage(format!(
            "the message is {} characters; the limit is {MAX_MESSAGE_CHARS}",
            text.chars().count()
        )));
    }
    let reason = format!(
        "operator message: {}",
        text.chars().take(60).collect::<String>()
    );
    let id = events::insert(&store.conn, 0, "message", &reason, Some(text), now)
        .context("cannot record the message")?;
    super::trigger::ring(&dir, id, 0, &reason, now)?;
    crate::outln!("message recorded as event {id} (P0); the agent will read it in its next run");
    Ok(())
}
