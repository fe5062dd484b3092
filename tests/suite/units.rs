//! The systemd units: they pass `systemd-analyze verify`, the system services' exposure stays
//! at most 2.0, and under a real systemd user manager (scripts/systemd-harness) the doorbell
//! runs the agent, a burst makes a few passes, a ring while a run exits is served, a bad
//! config neither spins nor fails the path unit, and a runaway service trips the path unit's
//! trigger limit with a fix that clears it.

mod analyze;
mod doorbell;
mod failures;
mod install;

use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

use serde_json::Value;

use crate::common::systemd::{wait_for, UserManager};
use fleetagent::units::{self};

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
        // The service's state dir as the real manager reports its ExecStart: `doctor` names
        // units that run another one than its own.
        let shown = me.inspect();
        assert_eq!(
            shown["units"][units::SERVICE]["state_dir"].as_str(),
            me.state.to_str(),
            "{shown}"
        );
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
