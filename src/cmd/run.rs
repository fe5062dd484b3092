//! `run`: one agent process (a few passes at most), as the timer and the path unit start it.
//! The process itself is `crate::run`.

use std::io::IsTerminal;
use std::sync::Arc;

use anyhow::Result;

use crate::cmd::App;
use crate::doorbell::FileDoorbell;
use crate::run::{self, RunEnv, RunFailure};

pub fn run(app: &App) -> Result<()> {
    // Before the state dir is known only the flag or $STATE_DIRECTORY can name it. At a
    // terminal someone typed the command: no reason to wait (DESIGN.md, "Early exits").
    let exit = |dir: Option<&std::path::Path>, e| {
        let known = dir
            .map(|d| d.to_path_buf())
            .or_else(|| app.state_dir_without_config());
        let at_terminal = std::io::stdin().is_terminal() || std::io::stderr().is_terminal();
        run::exit_before_start(app.clock.as_ref(), known.as_deref(), at_terminal, e)
    };
    let loaded = app.load_config().map_err(|e| exit(None, e))?;
    let config = &loaded.config;
    let dir = app.state_dir(Some(config)).map_err(|e| exit(None, e))?;
    crate::paths::ensure_state_dir(&dir).map_err(|e| exit(Some(&dir), e))?;
    let services = crate::services::build_services(config, &app.env, Arc::clone(&app.clock), true)
        .map_err(|e| exit(Some(&dir), e))?;
    run::spawn_watchdog(Arc::clone(&app.clock), config.run.deadline_secs);
    let doorbell = FileDoorbell::new(&dir);
    let env = RunEnv {
        ctx: crate::services::Ctx {
            config,
            env: &app.env,
            clock: app.clock.as_ref(),
            services: &services,
        },
        state_dir: &dir,
        doorbell: &doorbell,
        pid: std::process::id(),
    };
    let result = run::run_process(&env);
    crate::metrics::after_run(config, &dir, app.now());
    // An early failure has already deleted the doorbell (crate::run).
    for r in result.map_err(|(RunFailure::Early(e) | RunFailure::Pass(e))| e)? {
        crate::outln!(
            "run {}: started by {}, {} event(s), {} wake(s) -> {}",
            r.run_id,
            r.started_by,
            r.events,
            r.wakes,
            r.verdict
        );
    }
    Ok(())
}
