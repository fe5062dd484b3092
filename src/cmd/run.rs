//! `run`: one agent process (a few passes at most), as the timer and the path unit start it.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;

use crate::app::App;
use crate::doorbell::{Doorbell, FileDoorbell};
use crate::runner::{self, RunEnv, RunFailure};

/// When the state dir is unknown, an early exit waits this long so systemd (which restarts
/// the service while the doorbell exists) runs it at most twice a minute.
const UNKNOWN_DIR_EXIT_DELAY: Duration = Duration::from_secs(30);

pub fn run(app: &App) -> Result<()> {
    let loaded = match app.load_config() {
        Ok(l) => l,
        Err(e) => return Err(early_exit(app, None, e)),
    };
    let config = &loaded.config;
    let dir = match app.state_dir(Some(config)) {
        Ok(d) => d,
        Err(e) => return Err(early_exit(app, None, e)),
    };
    if let Err(e) = crate::paths::ensure_state_dir(&dir) {
        return Err(early_exit(app, Some(&dir), e));
    }
    let doorbell = FileDoorbell::new(&dir);
    let services =
        match crate::services::build_services(config, &app.env, Arc::clone(&app.clock), true) {
            Ok(s) => s,
            Err(e) => return Err(early_exit(app, Some(&dir), e)),
        };
    spawn_watchdog(app, config.run.deadline_secs);
    let env = RunEnv {
        config,
        env: &app.env,
        state_dir: &dir,
        clock: Arc::clone(&app.clock),
        doorbell: &doorbell,
        services: &services,
        pid: std::process::id(),
    };
    let result = runner::run_process(&env);
    crate::metrics::after_run(config, &dir, app.now());
    match result {
        Ok(reports) => {
            for r in reports {
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
        Err(RunFailure::Early(e)) => Err(early_exit(app, Some(&dir), e)),
        Err(RunFailure::Pass(e)) => Err(e),
    }
}

/// An exit before any claim: delete the doorbell when the state dir is known (the events
/// stay; the timer retries), else wait so systemd cannot spin.
fn early_exit(app: &App, dir: Option<&std::path::Path>, err: anyhow::Error) -> anyhow::Error {
    let dir = dir
        .map(|d| d.to_path_buf())
        .or_else(|| app.state_dir_without_config());
    match dir {
        Some(d) => {
            let bell = FileDoorbell::new(&d);
            if let Ok(true) = bell.remove() {
                // info, not warn: the error itself is the one line a failed run prints.
                log::info!(
                    "deleted the doorbell {} so systemd does not restart a failing run; events stay for the timer",
                    bell.path().display()
                );
            }
        }
        None => {
            log::warn!(
                "state dir unknown; waiting {}s before exiting so systemd cannot restart this in a loop",
                UNKNOWN_DIR_EXIT_DELAY.as_secs()
            );
            app.clock.sleep(UNKNOWN_DIR_EXIT_DELAY);
        }
    }
    err
}

/// Hard stop past the deadline (plus a grace period): the kernel frees the lock, and the
/// next run recovers the interrupted pass. systemd's TimeoutStartSec is the outer bound.
fn spawn_watchdog(app: &App, deadline_secs: u64) {
    let clock = Arc::clone(&app.clock);
    let limit = Duration::from_secs(deadline_secs + 30);
    let _ = std::thread::Builder::new()
        .name("deadline".into())
        .spawn(move || {
            clock.sleep(limit);
            eprintln!(
                "fleetagent: run exceeded its deadline of {deadline_secs}s (+30s grace); exiting"
            );
            std::process::exit(crate::error::EXIT_RUNTIME);
        });
}
