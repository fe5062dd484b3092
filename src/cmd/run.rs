//! `run`: one agent process (a few passes at most), as the timer and the path unit start it.
//! The process itself is `crate::run`.

use std::io::IsTerminal;
use std::sync::Arc;

use anyhow::Result;

use crate::cmd::App;
use crate::doorbell::FileDoorbell;
use crate::run::{self, RunEnv, RunFailure};

pub fn run(app: &App) -> Result<()> {
    // Before the state dir is known only the flag or $STATE_DIRECTORY can name it; the latter
    // is a guess while a config that may name another dir cannot be read (no doorbell there:
    // the real one may be elsewhere, so the exit waits). `config_read`: the config was read
    // (with refused keys left out, if need be), so it names no other dir than `dir`. At a
    // terminal someone typed the command: no reason to wait (DESIGN.md, "Early exits").
    let exit_at = |dir: Option<&std::path::Path>, config_read: bool, e| {
        let sure = dir.map(|d| d.to_path_buf()).or_else(|| match config_read {
            true => app.state_dir_without_config(),
            false => app.state_dir_without_readable_config(),
        });
        let guess = app.state_dir_without_config();
        let place = match (&sure, &guess) {
            (Some(d), _) => run::DoorbellDir::Known(d),
            (None, Some(d)) if !config_read => run::DoorbellDir::Guessed(d),
            _ => run::DoorbellDir::Unknown,
        };
        let at_terminal = std::io::stdin().is_terminal() || std::io::stderr().is_terminal();
        run::exit_before_start(app.clock.as_ref(), place, at_terminal, e)
    };
    let exit = |dir: Option<&std::path::Path>, e| exit_at(dir, true, e);
    let loaded = app
        .load_config()
        .map_err(|e| match app.state_dir_of_refused_config() {
            Some(named) => exit_at(named.as_deref(), true, e),
            None => exit_at(None, false, e),
        })?;
    let config = &loaded.config;
    let dir = app.state_dir(Some(config)).map_err(|e| exit(None, e))?;
    crate::paths::ensure_state_dir(&dir).map_err(|e| exit(Some(&dir), e))?;
    // Before anything opens the database: an emptied one's WAL must survive the look.
    crate::store::refuse_lost_database(&dir).map_err(|e| exit(Some(&dir), e))?;
    crate::store::sim_config::refuse_in(&dir).map_err(|e| exit(Some(&dir), e))?;
    let services = crate::services::build_services(config, &app.env, Arc::clone(&app.clock), true)
        .map_err(|e| exit(Some(&dir), e))?;
    run::spawn_watchdog(Arc::clone(&app.clock), config.run.deadline_secs);
    let doorbell = FileDoorbell::new(&dir);
    // Read again before each pass (the wait for the lock may be long): an edited config is
    // a new process's, whose services and caps are built from it. A config that no longer
    // loads counts as changed: the new process names its error.
    let config_changed = || app.load_config().map_or(true, |l| l.config != *config);
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
        peer: None,
        config_changed: Some(&config_changed),
    };
    let result = run::run_process(&env);
    if result.is_ok() {
        prune(config, &dir, app.now());
    }
    let ha = match crate::ha::node::Settings::of(config, &app.env) {
        Ok(Some(s)) if config.metrics.textfile.is_some() => Some(crate::ha::status::read(&s)),
        _ => None,
    };
    crate::metrics::after_run(config, &dir, app.now(), ha.as_ref());
    // An early failure has already deleted the doorbell (crate::run).
    // An early failure whose doorbell could not be deleted (a directory planted in its place)
    // waits as one before the run would: systemd restarts the service while it exists.
    let reports = result.map_err(|f| match f {
        RunFailure::Early(e) => exit(Some(&dir), e),
        RunFailure::Pass(e) => e,
    })?;
    for r in &reports {
        crate::outln!("{}", summary(r));
    }
    // The passes went on without the fleet's listing (recorded ok, the model told); the
    // process fails so that the unit, and whatever watches it, does not look green.
    match reports
        .iter()
        .rev()
        .find_map(|r| Some((r.run_id, r.vast_error.as_deref()?)))
    {
        Some((id, e)) => anyhow::bail!("run {id}: the vast.ai listing failed: {e}"),
        None => Ok(()),
    }
}

/// `run 7: started by events, 2 event(s), 0 wake(s) -> action-failed: failed 1 launch (...)`.
fn summary(r: &run::PassReport) -> String {
    let mut line = format!(
        "run {}: started by {}, {} event(s), {} wake(s) -> {}",
        r.run_id, r.started_by, r.events, r.wakes, r.verdict
    );
    if !r.actions.is_empty() {
        line.push_str(": ");
        // One line whatever the labels held (stdout is the journal under systemd too).
        line.push_str(&crate::text::clip(&r.actions, 2_000));
    }
    if r.fell_back {
        line.push_str("; the LLM was unusable, the fallback decided");
    }
    if let Some(e) = &r.demand_error {
        line.push_str(&format!(
            "; demand unknown (the probe failed: {}), the fleet held",
            crate::text::clip(e, 200)
        ));
    }
    line
}

/// After the passes: what is never read again, older than `run.retention_days`
/// (`store::prune`; events only without `[ha]`, where they are this database's own). Best
/// effort: a failure is a warning, the run's outcome stands.
fn prune(config: &crate::config::Config, dir: &std::path::Path, now: crate::clock::Millis) {
    let days = config.run.retention_days;
    if days == 0 {
        return;
    }
    let done = crate::store::Store::open(dir, crate::store::OpenMode::Existing, now)
        .and_then(|store| crate::store::prune::prune(&store.conn, now, days, !config.ha.enabled));
    match done {
        Ok(p) if p.messages + p.events > 0 => log::info!(
            "pruned {} message(s) and {} event(s) older than run.retention_days = {days}",
            p.messages,
            p.events
        ),
        Ok(_) => {}
        Err(e) => log::warn!(
            "could not prune what is older than run.retention_days = {days}: {}",
            crate::error::one_line(&e)
        ),
    }
}
