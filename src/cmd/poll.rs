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
        eprintln!("fleetagent: poll: {e}");
    }
    match polled? {
        Polled::NoChange => crate::outln!("poll: no change"),
        Polled::Recorded => crate::outln!("poll: state recorded; nothing for the agent"),
        Polled::Rang { id, reason } => {
            crate::outln!("event {id} (P1) recorded; doorbell rung: {reason}")
        }
    }
    Ok(())
}
