//! `doctor`: exit 0 when healthy, 1 with one line per problem, 2 for a config error.

use anyhow::Result;

use crate::cmd::App;
use crate::error::{Quiet, EXIT_RUNTIME};

pub fn run(app: &App, _args: &crate::cli::DoctorArgs) -> Result<()> {
    let loaded = app.load_config()?;
    let dir = app.state_dir(Some(&loaded.config))?;
    let units = crate::units::unit_states_json();
    let problems =
        crate::doctor::problems(&loaded.config, &app.env, &dir, app.now(), units.as_ref());
    let notes = crate::doctor::notes(&app.env);
    if problems.is_empty() {
        crate::outln!("ok");
        for n in &notes {
            eprintln!("note: {n}");
        }
        return Ok(());
    }
    for p in &problems {
        crate::outln!("{p}");
    }
    for n in &notes {
        eprintln!("note: {n}");
    }
    Err(Quiet(EXIT_RUNTIME).into())
}
