//! `doctor [--json]`: exit 0 when healthy, 1 with one line per problem (or every check as
//! JSON), 2 for a config error.

use anyhow::Result;

use crate::cmd::App;
use crate::error::{Quiet, EXIT_RUNTIME};

pub fn run(app: &App, args: &crate::cli::DoctorArgs) -> Result<()> {
    let loaded = match app.load_config() {
        Ok(loaded) => loaded,
        Err(e) => {
            let unattended = unattended_fleet(app);
            // A monitor reading --json gets JSON here too: the config check fails, the rest
            // are not checked; the error line and exit 2 as for every config error.
            if args.json {
                // The keys that name the install are there, null where the config would
                // have said (a re-test found them missing on a config error).
                let mut checks = crate::doctor::config_unreadable(&e);
                let config_check = checks.iter_mut().find(|c| c.name == "config");
                if let (Some(line), Some(check)) = (&unattended, config_check) {
                    check
                        .problems
                        .push(crate::doctor::Problem::new(line.clone()));
                }
                let state_dir = app.state_dir_flag.as_ref().map(|d| d.display().to_string());
                let config = Some(app.config_path().0.display().to_string());
                crate::outln!("{}", json(&checks, state_dir, config, None));
            } else if let Some(line) = &unattended {
                crate::outln!("config: {line}");
            }
            return Err(e);
        }
    };
    let dir = app.state_dir(Some(&loaded.config))?;
    let units = crate::units::unit_states_json();
    let (checks, speaks_for) = crate::doctor::checks(&crate::doctor::Inputs {
        config: &loaded.config,
        config_path: &loaded.path,
        config_found: loaded.file_found,
        env: &app.env,
        state_dir: &dir,
        now: app.now(),
        units: units.as_ref(),
    });
    let ok = checks.iter().all(crate::doctor::Check::ok);
    // Which install these checks speak for: with two installs on a host, or a stray
    // FLEETAGENT_CONFIG in a shell, "ok" could be the other's (a walkthrough).
    // A database of an older schema (README's upgrade: the new build's doctor before the
    // switch) is read as it is: its install id is there (a walkthrough saw "install unknown:
    // no readable database" beside the database check that had just read it).
    // With several hosts, the shared state's (as `inspect` says it): a follower that never
    // led holds its own `init`'s, never used (a walkthrough). Read again only where the
    // checks could not say.
    let install = speaks_for.or_else(|| {
        crate::store::Store::open_for_report(&dir, app.now())
            .or_else(|_| crate::store::Store::open_read_only_as_is(&dir))
            .ok()
            .and_then(|s| crate::store::ops::install_id(&s.conn).ok())
    });
    let config_path = loaded.file_found.then(|| loaded.path.display().to_string());
    if args.json {
        let state_dir = Some(dir.display().to_string());
        let v = json(&checks, state_dir, config_path.clone(), install.clone());
        crate::outln!("{v}");
    } else if ok {
        crate::outln!("ok");
    } else {
        for line in crate::doctor::lines(&checks) {
            crate::outln!("{line}");
        }
    }
    note(&format!(
        "state dir {} (install {}), config {}",
        dir.display(),
        install
            .as_deref()
            .unwrap_or("unknown: no readable database"),
        config_path
            .as_deref()
            .unwrap_or("none (every key at its default)")
    ));
    for n in crate::doctor::notes(&app.env) {
        note(&n);
    }
    if let Some(leader) = checks.iter().find_map(|c| c.leader.as_deref()) {
        note(&format!(
            "this host follows ({leader}): the checks of the passes (last_success, runs, demand, vast, ...) are the leader's; run doctor there"
        ));
    }
    if units.is_none() {
        // Not a problem (a container, a test), but not a pass either: say it was not looked at.
        note("the systemd units were not checked: no systemd manager answered (run doctor as the units' user; `--user` units need that user's session)");
    }
    if ok {
        Ok(())
    } else {
        Err(Quiet(EXIT_RUNTIME).into())
    }
}

/// A fact doctor states on stderr that is not a problem: `note: ...`, at notice priority when
/// stderr is the journal.
/// `doctor --json`: the checks, and the install they speak for (null where unknown).
fn json(
    checks: &[crate::doctor::Check],
    state_dir: Option<String>,
    config: Option<String>,
    install_id: Option<String>,
) -> serde_json::Value {
    let mut v = crate::doctor::json(checks);
    v["state_dir"] = state_dir.into();
    v["config"] = config.into();
    v["install_id"] = install_id.into();
    v
}

fn note(text: &str) {
    crate::journal::eprint(crate::journal::NOTICE_PRIORITY, &format!("note: {text}"));
}

/// With the config refused, what of ours bills with no pass deciding, read as the hand-brake
/// reads the config (a key its checks refuse left out): a walkthrough's doctor said only the
/// config's line while an instance billed, and the commands that name it refused too. None
/// when nothing bills or the database cannot be read that way.
fn unattended_fleet(app: &App) -> Option<String> {
    let (path, origin) = app.config_path();
    let (loaded, _) = crate::config::load_for_brake(&path, origin).ok()?;
    let dir = app.state_dir(Some(&loaded.config)).ok()?;
    let store = crate::store::Store::open_for_report(&dir, app.now()).ok()?;
    let rows = crate::store::instances::live(&store.conn).ok()?;
    let billing = rows
        .iter()
        .filter(|r| crate::fleet::is_billing_state(r.state) || r.state == crate::fleet::STOPPED)
        .count();
    if billing == 0 {
        return None;
    }
    let dph = crate::fleet::money::dph_of(&rows);
    Some(format!(
        "{billing} instance(s) of ours bill ${dph:.2}/h (as the last pass saw them) and no pass decides while every run refuses this config: `fleetagent instances list` names them; `fleetagent pause` and `fleetagent instances stop` work on this config as it is"
    ))
}
