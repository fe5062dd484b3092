//! Fixes followed literally (the walkthrough "walk22"): each names the command that works
//! on this install, as typed.

use std::path::Path;

use super::*;
use crate::store::test_store;

const NOW: Millis = 1_800_000_000_000;

fn env() -> crate::env::Env {
    crate::env::Env::from_pairs(
        [("VAST_API_KEY", "k"), ("FLEETAGENT_LLM_API_KEY", "k")]
            .map(|(k, v)| (k.to_string(), v.to_string())),
    )
}

fn all_checks(dir: &Path, config: &Config, units: Option<&Value>) -> Vec<Check> {
    checks(&Inputs {
        config_path: Path::new("/srv/fa/config.toml"),
        config_found: true,
        config,
        env: &env(),
        state_dir: dir,
        now: NOW,
        units,
    })
    .0
}

fn fix_of(all: &[Check], name: &str) -> String {
    let c = all.iter().find(|c| c.name == name).unwrap();
    c.problems
        .iter()
        .filter_map(|p| p.fix.clone())
        .collect::<Vec<_>>()
        .join("; ")
}

/// A state dir that does not exist, or holds no database: the fix is `init` with the
/// config and state dir doctor read (a bare `fleetagent init` initialised the default
/// paths, and the state_dir check had no fix at all).
#[test]
fn a_missing_state_dir_or_database_names_init_for_this_install() {
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("state");
    let init = format!(
        "run `fleetagent --config /srv/fa/config.toml --state-dir {} init`",
        dir.display()
    );
    let all = all_checks(&dir, &Config::default(), None);
    let state_dir = fix_of(&all, "state_dir");
    assert!(state_dir.starts_with(&init), "{state_dir}");
    let database = fix_of(&all, "database");
    assert!(database.starts_with(&init), "{database}");
    // The dir is there, the database is not.
    std::fs::create_dir(&dir).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o2770)).unwrap();
    let all = all_checks(&dir, &Config::default(), None);
    assert_eq!(fix_of(&all, "state_dir"), "");
    assert!(fix_of(&all, "database").starts_with(&init));
    // The installed units run another state dir (a plain doctor by a user whose default is
    // elsewhere): look at theirs first, not `init` a second install here (the re-test).
    let units = serde_json::json!({ crate::units::SERVICE: {
        "load_state": "loaded", "active_state": "inactive", "manager": "system",
        "state_dir": "/var/lib/fleetagent", "config": "/etc/fleetagent/config.toml" } });
    let all = all_checks(&dir, &Config::default(), Some(&units));
    let fix = fix_of(&all, "database");
    assert!(
        fix.starts_with("the installed units run state dir /var/lib/fleetagent: look at that install first (`fleetagent --config /etc/fleetagent/config.toml --state-dir /var/lib/fleetagent doctor`)"),
        "{fix}"
    );
}

/// The metrics textfile's dir is missing under a `--user` install: the fix is that
/// install's own `units install --user` (a bare one wrote system units for
/// /etc/fleetagent/config.toml), and it says to make the dir.
#[test]
fn the_metrics_fix_names_the_units_install_of_this_install() {
    let (dir, _s) = test_store(NOW);
    let mut config = Config::default();
    let prom = dir.path().join("prom");
    config.metrics.textfile = Some(prom.join("fleetagent.prom"));
    let units = serde_json::json!({ crate::units::SERVICE: {
        "load_state": "loaded", "active_state": "inactive", "manager": "user",
        "state_dir": dir.path().to_str().unwrap(), "config": "/srv/fa/config.toml" }});
    let fix = fix_of(&all_checks(dir.path(), &config, Some(&units)), "metrics");
    assert!(
        fix.starts_with(&format!(
            "run `fleetagent --config /srv/fa/config.toml --state-dir {} units install --user` again (it creates the missing dir {}",
            dir.path().display(),
            prom.display()
        )),
        "{fix}"
    );
    assert!(
        fix.contains(&format!("`mkdir -p {}`", prom.display())),
        "{fix}"
    );
    // System units: no --user.
    let mut system = units.clone();
    system[crate::units::SERVICE]["manager"] = "system".into();
    let fix = fix_of(&all_checks(dir.path(), &config, Some(&system)), "metrics");
    assert!(
        fix.starts_with(&format!(
            "run `fleetagent --config /srv/fa/config.toml --state-dir {} units install` again",
            dir.path().display()
        )),
        "{fix}"
    );
}

/// A run stopped by SIGSTOP or Ctrl-Z holds the lock past its deadline, and `kill PID`
/// waits behind the stop (a walkthrough followed it: still held): said, with `kill -CONT`.
#[test]
fn a_stopped_lock_holder_is_named_with_kill_cont() {
    use nix::sys::signal::{kill, Signal};
    use nix::sys::wait::{waitpid, WaitPidFlag};
    use nix::unistd::Pid;
    let dir = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    let pid = child.id();
    let now = NOW;
    std::fs::write(
        dir.path().join(crate::paths::LOCK_FILE),
        format!("{pid} {}\n", now - 120_000),
    )
    .unwrap();
    let mut config = Config::default();
    config.run.deadline_secs = 60;
    let running = agent::lock(dir.path(), Some(pid), &config, now);
    kill(Pid::from_raw(pid as i32), Signal::SIGSTOP).unwrap();
    waitpid(Pid::from_raw(pid as i32), Some(WaitPidFlag::WUNTRACED)).unwrap();
    let stopped = agent::lock(dir.path(), Some(pid), &config, now);
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(
        running[0].fix.as_deref(),
        Some(format!("kill {pid}").as_str())
    );
    assert!(
        !running[0].detail.contains("stopped"),
        "{}",
        running[0].detail
    );
    assert_eq!(stopped.len(), 1, "{stopped:?}");
    assert!(
        stopped[0].detail.contains(&format!(
            "the run is stuck, and stopped (state T in /proc/{pid}/stat: SIGSTOP or Ctrl-Z), so a plain `kill {pid}` waits behind the stop"
        )),
        "{}",
        stopped[0].detail
    );
    assert_eq!(
        stopped[0].fix.as_deref(),
        Some(format!("kill -CONT {pid}").as_str())
    );
}

/// The binary the service's ExecStart= runs is gone: the units check names it, and the
/// reset-failed that would trip the limit again at once waits for it (a walkthrough looped).
#[test]
fn a_unit_whose_binary_is_gone_is_named() {
    let here = tempfile::tempdir().unwrap();
    let same = here.path().to_str().unwrap();
    let shown = |exec: &str| {
        serde_json::json!({
            crate::units::SERVICE: {
                "load_state": "loaded", "active_state": "inactive", "manager": "user",
                "state_dir": same, "exec_path": exec },
            crate::units::PATH_UNIT: {
                "load_state": "loaded", "active_state": "failed", "manager": "user",
                "problem": "trigger-limit-hit",
                "fix": "systemctl --user reset-failed fleetagent.path && systemctl --user start fleetagent.path" },
        })
    };
    let c = Config::default();
    let config = Path::new("/srv/fa/config.toml");
    let p = host::units(
        Some(&shown("/gone/bin/fleetagent")),
        here.path(),
        &c,
        Some(config),
    );
    assert_eq!(p.len(), 2, "{p:?}");
    assert!(
        p[0].detail.starts_with(
            "the installed fleetagent.service runs /gone/bin/fleetagent, which does not exist"
        ),
        "{p:?}"
    );
    let fix = p[0].fix.as_deref().unwrap();
    assert!(
        fix.starts_with("put the fleetagent binary (executable) back at /gone/bin/fleetagent, or install the units from the binary to run (`")
            && fix.contains(&format!(" --config /srv/fa/config.toml --state-dir {same} units install --user`")),
        "{fix}"
    );
    assert!(
        p[1].line().starts_with(
            "unit fleetagent.path: trigger-limit-hit; fix: once /gone/bin/fleetagent is there again, executable: systemctl --user reset-failed fleetagent.path"
        ),
        "{p:?}"
    );
    // There without an execute bit (copied without +x: the re-test): named the same way.
    let plain = here.path().join("fleetagent");
    std::fs::write(&plain, b"#!/bin/sh\n").unwrap();
    let p = host::units(
        Some(&shown(plain.to_str().unwrap())),
        here.path(),
        &c,
        Some(config),
    );
    assert!(
        p[0].detail
            .contains("which is not executable (no x bit: `chmod 0755` it)"),
        "{p:?}"
    );
    // Executable by its owner alone, and the service runs as another user (the re-test's
    // `install -m 0700` owned by root under User=fleetagent): named; as root, not.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o700)).unwrap();
    let as_user = |user: &str| {
        let mut v = shown(plain.to_str().unwrap());
        v[crate::units::SERVICE]["user"] = serde_json::json!(user);
        host::units(Some(&v), here.path(), &c, Some(config))
    };
    if nix::unistd::geteuid().is_root() {
        let p = as_user("nobody");
        assert!(
            p[0].detail
                .contains("User=nobody may not execute (mode 700"),
            "{p:?}"
        );
    }
    assert!(as_user(
        &nix::unistd::User::from_uid(nix::unistd::geteuid())
            .unwrap()
            .unwrap()
            .name
    )
    .iter()
    .all(|p| !p.detail.contains("may not execute")),);
    // A User= this host does not know (removed since: 217/USER), by name or number.
    for ghost in ["no-such-user-fa22", "4000000"] {
        let p = as_user(ghost);
        assert!(
            p[0].detail.contains("which this host does not know"),
            "{ghost}: {p:?}"
        );
    }
    // In a directory the user may not enter (the last re-test's 0700 parent, a 0755 binary).
    if nix::unistd::geteuid().is_root() {
        let closed = here.path().join("closed");
        std::fs::create_dir(&closed).unwrap();
        std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o700)).unwrap();
        let inside = closed.join("fleetagent");
        std::fs::write(&inside, b"#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&inside, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut v = shown(inside.to_str().unwrap());
        v[crate::units::SERVICE]["user"] = serde_json::json!("nobody");
        let p = host::units(Some(&v), here.path(), &c, Some(config));
        assert!(
            p[0].detail.contains(&format!(
                "User=nobody may not enter its directory {}",
                closed.display()
            )),
            "{p:?}"
        );
    }
    // A binary that is there: only the unit's own line, its fix as systemd's.
    let p = host::units(Some(&shown("/bin/sh")), here.path(), &c, Some(config));
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(
        p[0].line().contains("; fix: systemctl --user reset-failed"),
        "{p:?}"
    );
}

/// The floor decided most of the model's passes: the fix's `sim --llm` names the config
/// doctor read (`sim` reads no other, and `--llm` exits 2 without one: a walkthrough).
#[test]
fn sim_llm_in_a_fix_names_the_config() {
    use crate::store::runs::{self, DecidedBy, Outcome, StartedBy};
    let (dir, s) = test_store(NOW);
    for _ in 0..4 {
        let id = runs::create(&s.conn, 1, 1, 1, StartedBy::Tick, NOW - 120_000).unwrap();
        let o = Outcome {
            decided_by: Some(DecidedBy::Floor),
            ..Outcome::new(false)
        };
        runs::finish_ok(&s.conn, id, &o, NOW - 60_000).unwrap();
    }
    let all = all_checks(dir.path(), &Config::default(), None);
    assert_eq!(
        fix_of(&all, "floor"),
        "check llm.model with `fleetagent --config /srv/fa/config.toml sim --llm --scenario incident`, or set llm.provider = \"rules\""
    );
    // The llm check's and tools_in_prompt's say it alike.
    let said = scope::sim_with_config(
        "`fleetagent sim --llm` shows whether it calls tools",
        Path::new("/srv/fa/config.toml"),
    );
    assert_eq!(
        said,
        "`fleetagent --config /srv/fa/config.toml sim --llm --scenario incident` shows whether it calls tools"
    );
}

/// The search quota's fix names what spends searches (launches, the model's search_offers),
/// not run.timer_period_secs, which sets no timer and no search (a walkthrough).
#[test]
fn the_search_quota_fix_names_what_spends_searches() {
    let (_dir, s) = test_store(NOW);
    crate::store::bad_hosts::set_search_quota(&s.conn, "2027-01-16T00:00:00Z", NOW - 60_000)
        .unwrap();
    let p = outside::search_quota(&s.conn, NOW);
    let fix = p[0].fix.as_deref().unwrap();
    assert!(!fix.contains("timer_period_secs"), "{fix}");
    assert!(
        fix.starts_with(
            "wait for the reset. Searches are spent by launches, not by passes or the timer"
        ) && fix.contains("the model's search_offers calls (up to 3 a pass)")
            && fix.contains("policy.launch_window_max"),
        "{fix}"
    );
}

/// A path in a fix is one shell word: a space or a quote in it is quoted (the re-test pasted
/// an unquoted `o'brien` whose quote swallowed `--state-dir`, and `init` ran on the default
/// dir), and the shell reads the command back as the arguments doctor meant.
#[test]
fn paths_in_fixes_are_one_shell_word() {
    use super::scope::word;
    assert_eq!(word(Path::new("/srv/fa/state")), "/srv/fa/state");
    for odd in ["/srv/my fa/state", "/home/o'brien/fa", "/tmp/a\"b $x"] {
        let q = word(Path::new(odd));
        assert_eq!(shlex::split(&q), Some(vec![odd.to_string()]), "{q}");
    }
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("o'brien state");
    let all = all_checks(&dir, &Config::default(), None);
    let fix = fix_of(&all, "state_dir");
    let command = fix
        .split('`')
        .nth(1)
        .unwrap_or_else(|| panic!("no command in {fix}"));
    let args = shlex::split(command).unwrap();
    let at = args.iter().position(|a| a == "--state-dir").unwrap();
    assert_eq!(args[at + 1], dir.display().to_string(), "{command}");
    assert_eq!(args.last().map(String::as_str), Some("init"));
    // The chmod beside it too (the second re-test: `chmod 2770 my fleet` changed nothing).
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o2775)).unwrap();
    let fix = fix_of(&all_checks(&dir, &Config::default(), None), "state_dir");
    let chmod = fix.split(" (").next().unwrap();
    assert_eq!(
        shlex::split(chmod),
        Some(vec![
            "chmod".into(),
            "2770".into(),
            dir.display().to_string()
        ]),
        "{fix}"
    );
}
