//! `inspect [--json]`: everything needed to diagnose the agent.

use anyhow::Result;

use crate::cli::InspectArgs;
use crate::cmd::App;

pub fn run(app: &App, args: &InspectArgs) -> Result<()> {
    let (loaded, dir, store) = super::open_existing(app)?;
    let units = crate::units::unit_states_json();
    let mut report =
        crate::inspect::build(&store, &dir, &loaded.config, &loaded.path, app.now(), units)?;
    report.config_found = loaded.file_found;
    if args.json {
        crate::outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        crate::out!("{}", crate::inspect::render_text(&report));
    }
    Ok(())
}
