//! `poll`: cheap change detection without the LLM or the run lock (`crate::poll`).

use anyhow::Result;

use crate::cmd::App;
use crate::poll::Polled;

pub fn run(app: &App) -> Result<()> {
    let (loaded, dir, store) = super::open_existing(app)?;
    let config = &loaded.config;
    let services = crate::services::build_services(config, &app.env, app.clock.clone(), false)?;
    let mut problems = Vec::new();
    let polled = crate::poll::poll(
        &store,
        &dir,
        config,
        &services,
        app.clock.as_ref(),
        &mut problems,
    );
    for e in &problems {
        let text = format!("fleetagent: poll: {e}");
        eprintln!("{}", crate::journal::line(crate::journal::WARNING, &text));
    }
    // A minute's poll that finds nothing is not worth a journal line (-vv shows it).
    match polled? {
        Polled::NoChange => log::debug!("poll: no change"),
        Polled::Recorded => log::debug!("poll: state recorded; nothing for the agent"),
        Polled::Rang { id, reason } => {
            crate::outln!("event {id} (P1) recorded; doorbell rung: {reason}")
        }
    }
    Ok(())
}
