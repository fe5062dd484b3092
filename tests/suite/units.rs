//! The systemd units: they pass `systemd-analyze verify`, the system services' exposure stays
//! at most 2.0, and under a real systemd user manager (scripts/systemd-harness) the doorbell
//! runs the agent, a burst makes a few passes, a ring while a run exits is served, a bad
//! config neither spins nor fails the path unit, and a runaway service trips the path unit's
//! trigger limit with a fix that clears it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::Value;

use crate::common::fleet::{Fleet, Run, FAST_CONFIG};
use crate::common::systemd::{pause, wait_for, UserManager};
use fleetagent::units::{self, Scope};

const BIN: &str = env!("CARGO_BIN_EXE_fleetagent");
const REPO_UNITS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/units");

/// Scratch space outside /tmp and /home, so the user units keep PrivateTmp=yes and
/// ProtectHome=yes and the test runs them fully hardened.
fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("units-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("scratch dir")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn write_units(dir: &Path, files: &[(String, String)]) -> Vec<PathBuf> {
    std::fs::create_dir_all(dir).unwrap();
    files
        .iter()
        .map(|(name, body)| {
            let p = dir.join(name);
            std::fs::write(&p, body).unwrap();
            p
        })
        .collect()
}

#[track_caller]
fn assert_verifies(scope: Scope, files: &[PathBuf], runtime_dir: &Path) {
    let mut cmd = Command::new("systemd-analyze");
    if scope == Scope::User {
        // A user-scope verify looks up the runtime dir even though it starts no manager.
        cmd.arg("--user").env("XDG_RUNTIME_DIR", runtime_dir);
    }
    let out = cmd
        .arg("verify")
        .args(files)
        .output()
        .expect("systemd-analyze runs");
    let stderr = text(&out.stderr);
    assert!(
        out.status.success(),
        "systemd-analyze verify ({scope:?}) failed: {stderr}"
    );
    // Unknown keys and misplaced options are only warnings (rc 0): any output is a finding.
    assert!(
        stderr.trim().is_empty(),
        "systemd-analyze verify ({scope:?}) warned:\n{stderr}"
    );
}

#[test]
fn rendered_units_pass_systemd_analyze_verify() {
    let tmp = scratch();
    let runtime = tmp.path().join("runtime");
    std::fs::create_dir(&runtime).unwrap();
    // verify fails when the ExecStart= binary is missing: render with the real one.
    let cases = [
        (
            Scope::System,
            units::render(
                Scope::System,
                Path::new(BIN),
                Path::new(units::DEFAULT_CONFIG),
                Path::new(units::DEFAULT_STATE_DIR),
                600,
            ),
        ),
        (
            Scope::System,
            units::render_with(&units::UnitParams {
                scope: Scope::System,
                bin: BIN.into(),
                config: "/srv/fleetagent/config.toml".into(),
                state_dir: "/srv/fleetagent/state".into(),
                deadline_secs: 900,
                extra_write_paths: vec!["/var/lib/prometheus/node-exporter".into()],
                extra_credentials: vec!["curio_db_password".into()],
            }),
        ),
        (
            Scope::User,
            units::render(
                Scope::User,
                Path::new(BIN),
                &tmp.path().join("config.toml"),
                &tmp.path().join("state"),
                600,
            ),
        ),
        (
            Scope::User,
            units::render(
                Scope::User,
                Path::new(BIN),
                Path::new("/home/op/.config/fleetagent/config.toml"),
                Path::new("/home/op/.local/state/fleetagent"),
                600,
            ),
        ),
    ];
    for (i, (scope, files)) in cases.iter().enumerate() {
        assert_eq!(files.len(), 5);
        let written = write_units(&tmp.path().join(format!("case{i}")), files);
        assert_verifies(*scope, &written, &runtime);
    }
}

/// `Overall exposure level for fleetagent.service: 1.1 OK`
fn exposure(stdout: &str) -> f64 {
    stdout
        .lines()
        .find_map(|l| l.split_once("Overall exposure level for "))
        .and_then(|(_, rest)| rest.split_once(": "))
        .and_then(|(_, v)| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no exposure level in:\n{stdout}"))
}

#[test]
fn system_services_expose_at_most_2_0() {
    let tmp = scratch();
    let files = units::render(
        Scope::System,
        Path::new(units::DEFAULT_BIN),
        Path::new(units::DEFAULT_CONFIG),
        Path::new(units::DEFAULT_STATE_DIR),
        600,
    );
    let written = write_units(tmp.path(), &files);
    for name in [units::SERVICE, units::POLL_SERVICE] {
        // The repo file itself is what gets installed (with other paths).
        let repo = Path::new(REPO_UNITS).join(name);
        for file in [
            repo,
            written.iter().find(|p| p.ends_with(name)).unwrap().clone(),
        ] {
            let out = Command::new("systemd-analyze")
                .args(["security", "--offline=true", "--threshold=20", "--no-pager"])
                .arg(&file)
                .output()
                .expect("systemd-analyze runs");
            let score = exposure(&text(&out.stdout));
            println!("{}: exposure {score}", file.display());
            assert!(
                out.status.success() && score <= 2.0,
                "{} scores {score} (> 2.0 or rc {:?}):\n{}",
                file.display(),
                out.status.code(),
                text(&out.stdout)
            );
        }
    }
}

// --- under a real systemd user manager --------------------------------------------------------

/// A user-scope install of the real binary under its own user manager.
struct Installed {
    sd: UserManager,
    _tmp: tempfile::TempDir,
    config: PathBuf,
    state: PathBuf,
}

/// Fast debounce windows; the model is the rules, and every outside endpoint a closed
/// loopback port (nothing here may reach the network).
fn config_text(max_passes: u32) -> String {
    format!(
        r#"[run]
deadline_secs = 60
max_passes = {max_passes}

[debounce]
p0_secs = 0
p1_secs = 1
p2_secs = 1
max_wait_secs = 5

[llm]
provider = "rules"
base_url = "http://127.0.0.1:9/v1"

[vast]
base_url = "http://127.0.0.1:9"
"#
    )
}

impl Installed {
    /// Installed, enabled and the database created: ready for triggers.
    fn new(max_passes: u32) -> Installed {
        let me = Installed::install(max_passes);
        me.fa(&["init"]).ok_or_panic("init");
        me
    }

    /// `units install --user` under a fresh manager; the path unit and the timer started.
    fn install(max_passes: u32) -> Installed {
        let tmp = scratch();
        let state = tmp.path().join("state");
        let config = tmp.path().join("config.toml");
        std::fs::write(&config, config_text(max_passes)).unwrap();
        let sd = UserManager::start(tmp.path());
        let me = Installed {
            sd,
            _tmp: tmp,
            config,
            state,
        };
        let out = me
            .fa(&["units", "install", "--user"])
            .ok_or_panic("units install --user");
        let printed = text(&out.stdout);
        assert!(
            printed.contains(
                "systemctl --user enable --now fleetagent.timer fleetagent.path fleetagent-poll.timer"
            ),
            "units install printed no enable command:\n{printed}"
        );
        let unit_dir = me.unit_dir();
        for (name, _) in units::TEMPLATES {
            assert!(unit_dir.join(name).is_file(), "{name} not written");
        }
        me.sd.systemctl_ok(&["daemon-reload"]);
        me.sd
            .systemctl_ok(&["start", units::PATH_UNIT, units::TIMER]);
        for unit in [units::PATH_UNIT, units::TIMER] {
            let state = me.sd.state(unit);
            assert!(state.starts_with("active/waiting"), "{unit} is {state}");
        }
        me
    }

    fn unit_dir(&self) -> PathBuf {
        PathBuf::from(self.sd.env("XDG_CONFIG_HOME")).join("systemd/user")
    }

    /// A test-only drop-in for `unit`, loaded at once.
    fn drop_in(&self, unit: &str, name: &str, body: &str) -> PathBuf {
        let dir = self.unit_dir().join(format!("{unit}.d"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(name), body).unwrap();
        self.sd.systemctl_ok(&["daemon-reload"]);
        dir
    }

    /// The real binary with this install's config and state dir, inside the namespace.
    fn fa(&self, args: &[&str]) -> Output {
        self.sd
            .cmd(BIN)
            .arg("--config")
            .arg(&self.config)
            .arg("--state-dir")
            .arg(&self.state)
            .args(args)
            .output()
            .expect("fleetagent runs")
    }

    fn trigger(&self, reason: &str) {
        self.fa(&["trigger", "--priority", "1", "--reason", reason])
            .ok_or_panic("trigger");
    }

    fn inspect(&self) -> Value {
        let out = self
            .fa(&["inspect", "--json"])
            .ok_or_panic("inspect --json");
        serde_json::from_slice(&out.stdout).expect("inspect prints JSON")
    }

    /// Everything rung has been served and no run is under way.
    fn settled(&self) -> bool {
        let r = self.inspect();
        r["doorbell"]["exists"] == false
            && r["unconsumed_events"] == 0
            && r["lock_held"] == false
            && !self.sd.state(units::SERVICE).starts_with("activating")
    }

    fn context(&self) -> String {
        format!(
            "service {} | path {} | timer {}\ninspect: {}\n{}",
            self.sd.state(units::SERVICE),
            self.sd.state(units::PATH_UNIT),
            self.sd.state(units::TIMER),
            text(&self.fa(&["inspect", "--json"]).stdout),
            self.sd.journal_tail(40)
        )
    }

    #[track_caller]
    fn wait_settled(&self, what: &str, timeout: Duration) {
        wait_for(what, timeout, || self.settled(), || self.context());
    }

    #[track_caller]
    fn assert_no_unit_failed(&self) {
        for unit in [units::SERVICE, units::PATH_UNIT, units::TIMER] {
            let state = self.sd.state(unit);
            assert!(
                !state.starts_with("failed"),
                "{unit} is {state}\n{}",
                self.context()
            );
        }
    }
}

trait OkOrPanic {
    fn ok_or_panic(self, what: &str) -> Output;
}

impl OkOrPanic for Output {
    #[track_caller]
    fn ok_or_panic(self, what: &str) -> Output {
        assert!(
            self.status.success(),
            "`fleetagent {what}` exited {:?}\nstdout: {}\nstderr: {}",
            self.status.code(),
            text(&self.stdout),
            text(&self.stderr)
        );
        self
    }
}

fn runs(report: &Value) -> Vec<Value> {
    report["runs"].as_array().cloned().unwrap_or_default()
}

#[test]
fn trigger_runs_the_agent_through_the_path_unit() {
    let t = Installed::new(5);
    let before = t.inspect();
    assert!(
        runs(&before).is_empty(),
        "a run before any trigger: {before}"
    );

    t.trigger("systemd test: first ring");
    wait_for(
        "a finished run started by the doorbell",
        Duration::from_secs(30),
        || {
            runs(&t.inspect())
                .iter()
                .any(|r| r["started_by"] == "events" && r["status"] == "ok")
        },
        || t.context(),
    );
    t.wait_settled(
        "the doorbell to be gone and the event consumed",
        Duration::from_secs(30),
    );
    assert!(t.sd.starts(units::SERVICE) >= 1);
    t.assert_no_unit_failed();

    // What inspect and doctor get from src/units.rs for this install: everything healthy.
    let states = units::unit_states_with_env(&t.sd.env_pairs()).expect("the user manager answers");
    assert_eq!(states.scope, Scope::User);
    let path = &states.units[units::PATH_UNIT];
    assert_eq!(
        (
            path.load_state.as_str(),
            path.active_state.as_str(),
            path.sub_state.as_str()
        ),
        ("loaded", "active", "waiting"),
        "{states:?}"
    );
    assert_eq!(states.units[units::SERVICE].result, "success", "{states:?}");
    assert!(states.problems().is_empty(), "{:?}", states.problems());
    // The same through the binary: inspect --json reports each unit.
    let report = t.inspect();
    let units_json = &report["units"];
    assert_eq!(
        units_json[units::PATH_UNIT]["active_state"],
        "active",
        "{report}"
    );
    assert_eq!(units_json[units::SERVICE]["result"], "success", "{report}");
    assert_eq!(
        units_json[units::TIMER]["active_state"],
        "active",
        "{report}"
    );
}

#[test]
fn a_burst_of_200_triggers_makes_a_few_passes() {
    let t = Installed::new(5);
    let first_run = t.inspect()["next_run_id"].as_i64().unwrap();

    // One shell inside the namespace rings 200 times as fast as it can.
    let script = format!(
        "for i in $(seq 200); do {BIN} --config {} --state-dir {} trigger -p 1 -r burst-$i || exit 1; done",
        t.config.display(),
        t.state.display()
    );
    let out = t.sd.cmd("bash").args(["-c", &script]).output().unwrap();
    assert!(out.status.success(), "burst failed: {}", text(&out.stderr));

    t.wait_settled("the burst to be served", Duration::from_secs(60));
    let report = t.inspect();
    assert_eq!(report["failed_events"], 0, "{report}");
    t.assert_no_unit_failed();

    let passes = report["next_run_id"].as_i64().unwrap() - first_run;
    let starts = t.sd.starts(units::SERVICE);
    println!("200 triggers: {passes} passes in {starts} service starts");
    assert!(passes >= 1, "no pass served the burst: {report}");
    // Without the debounce every ring could have its own pass; a few is the contract.
    assert!(
        passes <= 10,
        "200 triggers made {passes} passes (in {starts} service starts)\n{}",
        t.context()
    );
}

#[test]
fn a_ring_while_the_agent_is_exiting_still_gets_its_run() {
    let t = Installed::new(5);
    // The test switch FLEETAGENT_TEST_PAUSE_AT (src/faults.rs) holds each run for a while
    // after its last look at the events, when it has decided to exit: a ring then is for
    // the next process, which only systemd (PathExists=) can start.
    t.drop_in(
        units::SERVICE,
        "pause.conf",
        "[Service]\nEnvironment=FLEETAGENT_TEST_PAUSE_AT=run-after-last-look:4000\n",
    );
    t.trigger("systemd test: first ring");
    wait_for(
        "the first run to finish its pass and hold after its last look",
        Duration::from_secs(30),
        || {
            let r = t.inspect();
            r["lock_held"] == true
                && r["doorbell"]["exists"] == false
                && r["unconsumed_events"] == 0
                && runs(&r).first().is_some_and(|run| run["status"] == "ok")
        },
        || t.context(),
    );
    let exiting = t.sd.show(units::SERVICE, &["MainPID", "ActiveState"]);
    let first = runs(&t.inspect())[0]["id"].as_i64().unwrap();
    t.trigger("systemd test: ring while the first run exits");
    let after = t.sd.show(units::SERVICE, &["MainPID", "ActiveState"]);
    assert_eq!(
        (exiting["ActiveState"].as_str(), &after["MainPID"]),
        ("activating", &exiting["MainPID"]),
        "the ring did not land while the first process was exiting\n{}",
        t.context()
    );

    wait_for(
        "a second run to serve the ring",
        Duration::from_secs(30),
        || {
            runs(&t.inspect())
                .iter()
                .any(|r| r["id"].as_i64() > Some(first) && r["status"] == "ok")
        },
        || t.context(),
    );
    t.wait_settled("the ring to be served", Duration::from_secs(30));
    let starts = t.sd.starts(units::SERVICE);
    assert!(
        starts >= 2,
        "{starts} service start(s): the ring was not left to a new process\n{}",
        t.context()
    );
    t.assert_no_unit_failed();
}

#[test]
fn a_bad_config_does_not_spin_and_leaves_no_unit_failed() {
    let t = Installed::new(5);
    let good = std::fs::read_to_string(&t.config).unwrap();
    std::fs::write(&t.config, format!("{good}\nsurprise = 1\n")).unwrap();
    let bad = t.fa(&["inspect", "--json"]);
    assert_eq!(bad.status.code(), Some(2), "the bad config was accepted");

    // A ring as `trigger` or `poll` leaves it (the event row stays in the database).
    let doorbell = t.state.join("trigger");
    std::fs::write(&doorbell, "bad-config test\n").unwrap();
    wait_for(
        "the agent to start on the doorbell and delete it",
        Duration::from_secs(30),
        || t.sd.starts(units::SERVICE) >= 1 && !doorbell.exists(),
        || t.context(),
    );
    // The doorbell is gone after a start, so nothing may start the agent again but the
    // timer (at most twice in a minute, :00/:05 slots plus a random delay).
    for _ in 0..60 {
        pause(Duration::from_secs(1));
        let starts = t.sd.starts(units::SERVICE);
        assert!(
            starts <= 3,
            "{starts} starts within a minute: spinning\n{}",
            t.context()
        );
    }
    let starts = t.sd.starts(units::SERVICE);
    println!("bad config: {starts} service starts in about 60 s");
    assert!(!doorbell.exists(), "the early exit left the doorbell");
    let path = t.sd.state(units::PATH_UNIT);
    assert!(
        path.starts_with("active/waiting"),
        "fleetagent.path is {path}"
    );
    let service =
        t.sd.show(units::SERVICE, &["ActiveState", "Result", "ExecMainStatus"]);
    // A config error (exit 2, SuccessExitStatus=2) leaves no unit failed and no start limit;
    // the journal and `doctor` (exit 2) name it.
    assert_eq!(
        (
            service["ActiveState"].as_str(),
            service["Result"].as_str(),
            service["ExecMainStatus"].as_str()
        ),
        ("inactive", "success", "2"),
        "{service:?}"
    );
    let states = units::unit_states_with_env(&t.sd.env_pairs()).expect("the user manager answers");
    assert!(states.problems().is_empty(), "{states:?}");
    t.assert_no_unit_failed();
    let doc = t.fa(&["doctor"]);
    assert_eq!(
        doc.status.code(),
        Some(2),
        "doctor reports the config error"
    );
    assert!(
        text(&doc.stderr).contains("surprise"),
        "{}",
        text(&doc.stderr)
    );

    // Fixing the config is all it takes: the next ring runs, and the unit is clean again.
    std::fs::write(&t.config, good).unwrap();
    t.trigger("systemd test: config fixed");
    wait_for(
        "a successful run after the fix",
        Duration::from_secs(30),
        || {
            runs(&t.inspect())
                .iter()
                .any(|r| r["started_by"] == "events" && r["status"] == "ok")
        },
        || t.context(),
    );
    t.wait_settled(
        "the ring after the fix to be served",
        Duration::from_secs(30),
    );
    t.assert_no_unit_failed();
}

#[test]
fn a_runaway_service_trips_the_trigger_limit_and_the_fix_clears_it() {
    // A service that never deletes the doorbell (here: ExecStart=/bin/true) is what a broken
    // agent would look like: PathExists= restarts it as soon as it stops.
    let t = Installed::install(5);
    let dropin = t.drop_in(
        units::SERVICE,
        "runaway.conf",
        "[Service]\nExecStart=\nExecStart=/bin/true\n",
    );
    let doorbell = t.state.join("trigger");
    std::fs::write(&doorbell, "runaway\n").unwrap();

    wait_for(
        "fleetagent.path to stop the loop with trigger-limit-hit",
        Duration::from_secs(30),
        || t.sd.state(units::PATH_UNIT) == "failed/failed (trigger-limit-hit)",
        || t.context(),
    );
    let starts = t.sd.starts(units::SERVICE);
    println!("runaway service: stopped after {starts} starts");
    // TriggerLimitBurst=30: the loop ends at the limit, not at systemd's default of 200.
    assert!(
        (2..=31).contains(&starts),
        "{starts} starts\n{}",
        t.context()
    );
    let service = t.sd.state(units::SERVICE);
    assert!(
        !service.starts_with("failed"),
        "fleetagent.service is {service}"
    );

    // inspect and doctor read this through src/units.rs; ask it directly here.
    let states = units::unit_states_with_env(&t.sd.env_pairs()).expect("the user manager answers");
    assert_eq!(states.scope, Scope::User);
    let path = &states.units[units::PATH_UNIT];
    assert_eq!(
        path.problem,
        Some(units::Problem::TriggerLimitHit),
        "{states:?}"
    );
    let fix =
        "systemctl --user reset-failed fleetagent.path && systemctl --user start fleetagent.path";
    assert_eq!(path.fix.as_deref(), Some(fix));
    assert_eq!(states.units[units::SERVICE].problem, None, "{states:?}");
    assert_eq!(states.units[units::TIMER].problem, None, "{states:?}");
    // doctor names the problem and the fix, with exit 1.
    let doc = t.fa(&["doctor"]);
    assert_eq!(doc.status.code(), Some(1));
    let said = text(&doc.stdout);
    assert!(
        said.contains("fleetagent.path")
            && said.contains("trigger-limit-hit")
            && said.contains(fix),
        "{said}"
    );

    // The operator repairs the agent, then runs exactly the command that was named.
    std::fs::remove_dir_all(&dropin).unwrap();
    t.sd.systemctl_ok(&["daemon-reload"]);
    std::fs::remove_file(&doorbell).unwrap();
    let out = t.sd.cmd("sh").args(["-c", fix]).output().unwrap();
    assert!(out.status.success(), "{fix}: {}", text(&out.stderr));
    let path = t.sd.state(units::PATH_UNIT);
    assert!(
        path.starts_with("active/waiting"),
        "after the fix fleetagent.path is {path}"
    );
    let states = units::unit_states_with_env(&t.sd.env_pairs()).unwrap();
    assert!(states.problems().is_empty(), "{:?}", states.problems());
}

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
}

// --- units install: where it writes ------------------------------------------------------------

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
