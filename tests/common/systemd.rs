//! A real, throw-away systemd user manager for one test: `scripts/systemd-harness` starts it in
//! a private mount namespace, and every command of the test runs inside that namespace
//! (`nsenter`) with the manager's environment, as it would on a machine running systemd.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// `SD_MESSAGE_UNIT_STARTING`: the manager logs it once for every start of a unit.
const UNIT_STARTING: &str = "7d4958e842da4a758f6c1cdc7b36dcc5";

pub struct UserManager {
    harness: Child,
    /// Closing it ends the harness's command, which stops the manager.
    hold: Option<ChildStdin>,
    /// A process inside the namespace, for nsenter.
    ns_pid: u32,
    env: BTreeMap<String, String>,
    pub journal: PathBuf,
}

/// Poll `cond` every 100 ms until it holds; panic with `what` and `context()` after `timeout`.
#[track_caller]
pub fn wait_for(
    what: &str,
    timeout: Duration,
    mut cond: impl FnMut() -> bool,
    context: impl Fn() -> String,
) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        if Instant::now() >= deadline {
            panic!(
                "timed out after {timeout:?} waiting for {what}\n{}",
                context()
            );
        }
        pause(Duration::from_millis(100));
    }
}

/// A real pause: these tests watch a real systemd, which has no clock of ours to move.
#[allow(clippy::disallowed_methods)]
pub fn pause(d: Duration) {
    std::thread::sleep(d);
}

impl UserManager {
    /// Start a manager, or fail the test saying why (no silent skip).
    pub fn start(scratch: &Path) -> UserManager {
        UserManager::start_with(scratch, None)
    }

    /// Start a manager that received these credentials itself (as `user@.service` would pass
    /// them): `LoadCredential=ID:NAME` finds `NAME` there, as it would in /etc/credstore/.
    pub fn start_with(scratch: &Path, manager_credentials: Option<&Path>) -> UserManager {
        UserManager::launch(scratch, manager_credentials, false)
    }

    /// Start a manager beside a real systemd-journald (`SYSTEMD_HARNESS_JOURNALD=1`):
    /// [`UserManager::journalctl`] reads what the services logged, priorities included, and
    /// [`UserManager::journal`] stays empty.
    pub fn start_with_journald(scratch: &Path) -> UserManager {
        UserManager::launch(scratch, None, true)
    }

    fn launch(scratch: &Path, manager_credentials: Option<&Path>, journald: bool) -> UserManager {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/systemd-harness");
        let stderr_path = scratch.join("harness.stderr");
        let stderr = std::fs::File::create(&stderr_path).expect("harness stderr file");
        let mut cmd = Command::new(script);
        cmd.args([
            "bash",
            "-c",
            r#"echo "pid=$$"
               for v in XDG_RUNTIME_DIR XDG_CONFIG_HOME XDG_DATA_HOME XDG_STATE_HOME HOME \
                        SYSTEMD_HARNESS_DIR SYSTEMD_HARNESS_JOURNAL SYSTEMD_HARNESS_MANAGER_PID \
                        SYSTEMD_HARNESS_JOURNALD_DIR; do
                   echo "env $v=${!v}"
               done
               echo ready
               exec cat >/dev/null"#,
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stderr);
        if let Some(dir) = manager_credentials {
            cmd.env("SYSTEMD_HARNESS_MANAGER_CREDENTIALS", dir);
        }
        if journald {
            cmd.env("SYSTEMD_HARNESS_JOURNALD", "1");
        }
        let mut harness = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {script}: {e}"));
        let hold = harness.stdin.take();
        let stdout = BufReader::new(harness.stdout.take().expect("harness stdout"));
        let mut ns_pid = None;
        let mut env = BTreeMap::new();
        let mut ready = false;
        for line in stdout.lines() {
            let Ok(line) = line else { break };
            if let Some(p) = line.strip_prefix("pid=") {
                ns_pid = p.trim().parse().ok();
            } else if let Some((k, v)) = line.strip_prefix("env ").and_then(|l| l.split_once('=')) {
                env.insert(k.to_string(), v.to_string());
            } else if line == "ready" {
                ready = true;
                break;
            }
        }
        if !ready {
            let status = harness.wait().ok();
            panic!(
                "scripts/systemd-harness could not start a systemd user manager (exit {status:?}); \
                 these tests need root, unshare and /lib/systemd/systemd (systemd 252):\n{}",
                std::fs::read_to_string(&stderr_path).unwrap_or_default()
            );
        }
        let journal = PathBuf::from(&env["SYSTEMD_HARNESS_JOURNAL"]);
        UserManager {
            harness,
            hold,
            ns_pid: ns_pid.expect("the harness printed its pid"),
            env,
            journal,
        }
    }

    /// A command that runs inside the manager's namespace with its environment.
    /// The fleetagent binary `bin` inside the manager's namespace, with this config and
    /// state dir, run to completion.
    pub fn fleetagent(
        &self,
        bin: &str,
        config: &std::path::Path,
        state: &std::path::Path,
        args: &[&str],
    ) -> std::process::Output {
        self.cmd(bin)
            .arg("--config")
            .arg(config)
            .arg("--state-dir")
            .arg(state)
            .args(args)
            .output()
            .unwrap()
    }

    pub fn cmd(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("nsenter");
        c.arg(format!("--mount=/proc/{}/ns/mnt", self.ns_pid))
            .arg("--")
            .arg(program)
            .env_remove("DBUS_SESSION_BUS_ADDRESS")
            .env_remove("FLEETAGENT_CONFIG")
            .env_remove("STATE_DIRECTORY")
            .env_remove("CREDENTIALS_DIRECTORY")
            .envs(&self.env);
        c
    }

    pub fn env(&self, name: &str) -> &str {
        &self.env[name]
    }

    /// `journalctl --output cat ARGS` over the real journald's files (a manager started
    /// [`UserManager::start_with_journald`]): the messages, one a line.
    pub fn journalctl(&self, args: &[&str]) -> String {
        let out = self
            .cmd("journalctl")
            .arg("--directory")
            .arg(self.env("SYSTEMD_HARNESS_JOURNALD_DIR"))
            .args(["--no-pager", "--output", "cat"])
            .args(args)
            .output()
            .expect("journalctl runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The manager's environment (XDG_RUNTIME_DIR, ...), e.g. for `systemctl --user` from
    /// outside the namespace: its socket lives in the temp dir, not under /run.
    pub fn env_pairs(&self) -> Vec<(String, String)> {
        self.env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// `systemctl --user ARGS`, its output; panics when it cannot run.
    pub fn systemctl(&self, args: &[&str]) -> Output {
        self.cmd("systemctl")
            .arg("--user")
            .arg("--no-pager")
            .args(args)
            .output()
            .expect("systemctl runs")
    }

    /// `systemctl --user ARGS` that must succeed.
    #[track_caller]
    pub fn systemctl_ok(&self, args: &[&str]) {
        let out = self.systemctl(args);
        assert!(
            out.status.success(),
            "systemctl --user {} failed: {}\n{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr),
            self.journal_tail(40)
        );
    }

    /// A unit's properties (`systemctl --user show -p ...`).
    pub fn show(&self, unit: &str, props: &[&str]) -> BTreeMap<String, String> {
        let out = self.systemctl(&["show", "-p", &props.join(","), unit]);
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// ActiveState/SubState/Result of a unit, as `active/sub (result)`.
    pub fn state(&self, unit: &str) -> String {
        let p = self.show(unit, &["ActiveState", "SubState", "Result"]);
        format!(
            "{}/{} ({})",
            p.get("ActiveState").map_or("?", |s| s),
            p.get("SubState").map_or("?", |s| s),
            p.get("Result").map_or("?", |s| s)
        )
    }

    /// How often the manager has started `unit` so far (from its log).
    pub fn starts(&self, unit: &str) -> usize {
        let needle = format!("unit={unit} message_id={UNIT_STARTING} ");
        std::fs::read_to_string(&self.journal)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with(&needle))
            .count()
    }

    /// The last lines the manager and the services logged, for failure messages.
    pub fn journal_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.journal).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        format!(
            "--- last {n} journal lines ---\n{}",
            lines[lines.len().saturating_sub(n)..].join("\n")
        )
    }
}

impl Drop for UserManager {
    fn drop(&mut self) {
        // EOF on the harness command's stdin ends it; the harness then stops the manager.
        if let Some(mut h) = self.hold.take() {
            let _ = h.flush();
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match self.harness.try_wait() {
                Ok(Some(_)) => return,
                Ok(None) if Instant::now() < deadline => pause(Duration::from_millis(50)),
                _ => {
                    let _ = self.harness.kill();
                    let _ = self.harness.wait();
                    return;
                }
            }
        }
    }
}
