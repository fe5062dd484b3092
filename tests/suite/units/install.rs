//! `units install`: where it writes (completions, man pages, the user's XDG dirs, the metrics
//! dir), what it refuses before writing anything, and the state dir's mode it reports.

use std::path::{Path, PathBuf};

use super::{config_text, scratch, text, OkOrPanic, BIN};
use crate::common::fleet::{Fleet, Run, FAST_CONFIG};
use crate::common::systemd::UserManager;
use fleetagent::units::{self};

#[test]
fn units_install_writes_completions_and_man_pages() {
    let f = Fleet::new();
    let dir = f.path().join("pkg");
    let out = f
        .cmd(&["units", "install", "--unit-dir", dir.to_str().unwrap()])
        .ok();
    assert!(
        out.stdout.contains("completion and man page files"),
        "{}",
        out.stdout
    );
    for name in units::TEMPLATES.iter().map(|(n, _)| *n) {
        assert!(dir.join(name).is_file(), "{name}");
    }
    let bash = std::fs::read_to_string(dir.join("completions/fleetagent.bash")).unwrap();
    assert!(bash.contains("reset-session") && bash.contains("--priority"));
    assert!(dir.join("completions/_fleetagent").is_file());
    assert!(dir.join("completions/fleetagent.fish").is_file());
    let man = std::fs::read_to_string(dir.join("man/man1/fleetagent.1")).unwrap();
    assert!(man.contains(".TH fleetagent"), "{man}");
    assert!(dir.join("man/man1/fleetagent-trigger.1").is_file());
    // Nested subcommands have their own pages (docs_gen's tests check every reference).
    let install = std::fs::read_to_string(dir.join("man/man1/fleetagent-units-install.1")).unwrap();
    assert!(install.contains("\\-\\-unit\\-dir"), "{install}");
    assert!(dir.join("man/man1/fleetagent-wakes-add.1").is_file());
    assert!(!dir.join("man/man1/fleetagent-help.1").exists());

    // Installed again for another state dir while the units' own holds a database: said (a
    // walkthrough saw the old fleet left unwatched without a word); for the same one, not.
    f.cmd(&["init"]).ok();
    let warned = "which holds a database; they now run";
    let again = f
        .cmd(&["units", "install", "--unit-dir", dir.to_str().unwrap()])
        .ok();
    assert!(!again.stderr.contains(warned), "{}", again.stderr);
    let g = Fleet::new();
    let other = g
        .cmd(&["units", "install", "--unit-dir", dir.to_str().unwrap()])
        .ok();
    assert!(
        other.stderr.contains(&format!(
            "ran state dir {}, {warned} {}",
            f.state.display(),
            g.state.display()
        )),
        "{}",
        other.stderr
    );
    assert!(
        other
            .stdout
            .contains(&format!("note: the units in {}", dir.display())),
        "{}",
        other.stdout
    );
}

/// `units install --user` in `f`'s temp dir as working directory, with exactly these of HOME,
/// XDG_CONFIG_HOME, XDG_DATA_HOME and XDG_STATE_HOME set (the others removed).
fn install_user(f: &Fleet, vars: &[(&str, &str)]) -> Run {
    let mut c = f.command(&["units", "install", "--user"]);
    for k in ["HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME"] {
        c.env_remove(k);
    }
    c.envs(vars.iter().copied()).current_dir(f.path());
    Run::from(c.output().expect("fleetagent runs"))
}

/// Every file and dir under `dir`, relative to it, sorted.
fn tree(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            out.push(p.strip_prefix(dir).unwrap().display().to_string());
            if p.is_dir() {
                todo.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Every destination is resolved before anything is written: a HOME that is unset (with
/// XDG_CONFIG_HOME set, so the unit dir is known but the man page dir is not) or relative,
/// or a relative XDG_* value, is an error (exit 2) naming the variable, and nothing is
/// written: no unit, no state dir, no completion under `./relhome`. (The same for the state
/// dir of a non-root user: `paths::tests::relative_or_missing_home_is_a_usage_error_...`.)
#[test]
fn units_install_user_writes_nothing_when_a_destination_is_unknown() {
    let f = Fleet::with_config(FAST_CONFIG);
    let cfg = f.path().join("xdg-config");
    let data = f.path().join("xdg-data");
    let (cfg, data) = (cfg.to_str().unwrap(), data.to_str().unwrap());
    let before = tree(f.path());
    let cases: [(&[(&str, &str)], &str); 5] = [
        (
            &[("XDG_CONFIG_HOME", cfg)],
            "neither XDG_DATA_HOME nor HOME is set",
        ),
        (
            &[("XDG_DATA_HOME", data)],
            "neither XDG_CONFIG_HOME nor HOME is set",
        ),
        (
            &[("HOME", "relhome")],
            "HOME=\"relhome\" is not an absolute path",
        ),
        (
            &[("HOME", "/nonexistent"), ("XDG_DATA_HOME", "rel-data")],
            "XDG_DATA_HOME=\"rel-data\" is not an absolute path",
        ),
        (
            &[("XDG_DATA_HOME", data), ("XDG_CONFIG_HOME", "rel-cfg")],
            "XDG_CONFIG_HOME=\"rel-cfg\" is not an absolute path",
        ),
    ];
    for (vars, said) in cases {
        let out = install_user(&f, vars).code(2);
        assert!(out.stderr.contains(said), "{vars:?}: {}", out.stderr);
        assert!(out.stdout.is_empty(), "{vars:?} wrote: {}", out.stdout);
        assert_eq!(tree(f.path()), before, "{vars:?} wrote files");
    }
    // Both XDG dirs absolute and no HOME at all: everything lands under them.
    install_user(&f, &[("XDG_CONFIG_HOME", cfg), ("XDG_DATA_HOME", data)]).ok();
    let data = Path::new(data);
    assert!(Path::new(cfg)
        .join("systemd/user/fleetagent.service")
        .is_file());
    assert!(data.join("man/man1/fleetagent.1").is_file());
    assert!(data
        .join("bash-completion/completions/fleetagent")
        .is_file());
    assert!(f.state.is_dir());

    // A file where the metrics textfile's dir would go: refused before anything is written.
    let g = Fleet::with_config(FAST_CONFIG);
    let blocked = g.path().join("afile");
    std::fs::write(&blocked, "").unwrap();
    g.write_config(&format!(
        "{FAST_CONFIG}\n[metrics]\ntextfile = \"{}/prom/fleetagent.prom\"\n",
        blocked.display()
    ));
    let (before, before_xdg) = (tree(g.path()), tree(f.path()));
    let out = install_user(&g, &[("XDG_CONFIG_HOME", cfg), ("XDG_DATA_HOME", cfg)]).code(2);
    assert!(
        out.stderr.contains(&format!(
            "cannot install into metrics dir {}/prom: a file is in the way",
            blocked.display()
        )),
        "{}",
        out.stderr
    );
    assert_eq!(tree(g.path()), before, "wrote files");
    assert_eq!(tree(f.path()), before_xdg, "wrote files under the XDG dirs");
}

/// `[metrics] textfile` in a dir that does not exist yet: `units install` (under umask 000)
/// creates it 0755 and says so, the services get `ReadWritePaths=-<dir>`, and the installed
/// service starts and writes the textfile. Before, the dir was only named in the unit, and
/// systemd failed every start with 226/NAMESPACE. Should the dir go later, the "-" keeps
/// the service running without it.
#[test]
fn units_install_creates_the_metrics_dir_and_the_service_writes_the_textfile() {
    let tmp = scratch();
    let prom_dir = tmp.path().join("prometheus/node-exporter");
    let prom = prom_dir.join("fleetagent.prom");
    let config = tmp.path().join("config.toml");
    let state = tmp.path().join("state");
    std::fs::write(
        &config,
        format!(
            "{}\n[metrics]\ntextfile = \"{}\"\n",
            config_text(1),
            prom.display()
        ),
    )
    .unwrap();
    let sd = UserManager::start(tmp.path());
    let line = format!(
        "umask 000; exec {BIN} --config {} --state-dir {} units install --user",
        config.display(),
        state.display()
    );
    let out = sd
        .cmd("sh")
        .args(["-c", &line])
        .output()
        .unwrap()
        .ok_or_panic("units install --user under umask 000");
    let printed = text(&out.stdout);
    assert!(
        printed.contains(&format!(
            "metrics dir {} (created, mode 0755",
            prom_dir.display()
        )),
        "{printed}"
    );
    let mode = |p: &Path| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
    };
    assert_eq!(mode(&prom_dir), 0o755);
    assert_eq!(mode(prom_dir.parent().unwrap()), 0o755);
    let unit_dir = PathBuf::from(sd.env("XDG_CONFIG_HOME")).join("systemd/user");
    for name in [units::SERVICE, units::POLL_SERVICE] {
        let unit = std::fs::read_to_string(unit_dir.join(name)).unwrap();
        assert!(
            unit.contains(&format!("\nReadWritePaths=-{}\n", prom_dir.display())),
            "{name}:\n{unit}"
        );
    }
    let fa = |args: &[&str]| sd.fleetagent(BIN, &config, &state, args);
    fa(&["init"]).ok_or_panic("init");
    sd.systemctl_ok(&["daemon-reload"]);
    let context = || format!("{}\n{}", sd.state(units::SERVICE), sd.journal_tail(40));
    // A oneshot: `start` returns when the run has ended.
    sd.systemctl_ok(&["start", units::SERVICE]);
    assert!(prom.is_file(), "no textfile\n{}", context());
    let written = std::fs::read_to_string(&prom).unwrap();
    assert!(
        written.contains("fleetagent_runs_total"),
        "{written}\n{}",
        context()
    );
    assert!(
        !sd.state(units::SERVICE).starts_with("failed"),
        "{}",
        context()
    );

    // The dir removed after install: the run still starts and succeeds (no 226/NAMESPACE).
    std::fs::remove_dir_all(&prom_dir).unwrap();
    sd.systemctl_ok(&["start", units::SERVICE]);
    let service = sd.show(units::SERVICE, &["Result", "ExecMainStatus"]);
    assert_eq!(
        (
            service["Result"].as_str(),
            service["ExecMainStatus"].as_str()
        ),
        ("success", "0"),
        "{}",
        context()
    );
    assert!(!prom.exists());
}

/// `units install` says the state dir's real mode: setgid 2770 for one it created, and for
/// one that existed at 0755 the mode it left (it never changes an existing dir's mode) and
/// the chmod that fixes it. Before, it printed "setgid 2770" for both.
#[test]
fn units_install_reports_the_state_dirs_real_mode() {
    use std::os::unix::fs::PermissionsExt;
    let f = Fleet::with_config(FAST_CONFIG);
    let install = |f: &Fleet| {
        let dir = f.path().join("pkg");
        f.cmd(&[
            "units",
            "install",
            "--user",
            "--unit-dir",
            dir.to_str().unwrap(),
        ])
        .ok()
    };
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    let state = f.state.display().to_string();

    let out = install(&f);
    assert_eq!(mode(&f.state), 0o2770);
    assert!(
        out.stdout
            .contains(&format!("state dir {state} (setgid 2770; ")),
        "{}",
        out.stdout
    );

    std::fs::remove_dir(&f.state).unwrap();
    std::fs::create_dir(&f.state).unwrap();
    std::fs::set_permissions(&f.state, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = install(&f);
    assert_eq!(
        mode(&f.state),
        0o755,
        "install changed an existing dir's mode"
    );
    assert!(
        out.stdout.contains(&format!(
            "state dir {state} (mode 0755, left as is: not the designed setgid 2770)"
        )) && out
            .stdout
            .contains(&format!("note: run `chmod 2770 {state}`")),
        "{}",
        out.stdout
    );
    assert!(!out.stdout.contains("(setgid 2770"), "{}", out.stdout);
}
