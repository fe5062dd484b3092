//! A fluent wrapper around the real `fleetagent` binary in a temp state dir: every test gets
//! its own config, state dir and a clean environment (no keys, no FLEETAGENT_CONFIG leaking
//! in from the developer's shell).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_fleetagent");

/// Short debounce windows and one-process limits so tests run in seconds.
pub const FAST_CONFIG: &str = r#"
[run]
deadline_secs = 60
[debounce]
p0_secs = 0
p1_secs = 1
p2_secs = 1
max_wait_secs = 5
[llm]
provider = "rules"
"#;

pub struct Fleet {
    pub tmp: tempfile::TempDir,
    pub state: PathBuf,
    pub config: PathBuf,
    envs: Vec<(String, String)>,
}

/// The outcome of one command.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn from(o: Output) -> Run {
        Run {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }

    #[track_caller]
    pub fn ok(self) -> Run {
        assert_eq!(
            self.code, 0,
            "expected success\nstdout: {}\nstderr: {}",
            self.stdout, self.stderr
        );
        self
    }

    #[track_caller]
    pub fn code(self, code: i32) -> Run {
        assert_eq!(
            self.code, code,
            "expected exit {code}\nstdout: {}\nstderr: {}",
            self.stdout, self.stderr
        );
        self
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.stdout))
    }
}

impl Fleet {
    /// A config with [`FAST_CONFIG`] and an initialised state dir.
    pub fn new() -> Fleet {
        let f = Fleet::with_config(FAST_CONFIG);
        f.cmd(&["init"]).ok();
        f
    }

    /// A config with this text; the state dir is not created.
    pub fn with_config(text: &str) -> Fleet {
        let tmp = tempfile::tempdir().expect("tempdir");
        let state = tmp.path().join("state");
        let config = tmp.path().join("config.toml");
        std::fs::write(&config, text).expect("write config");
        Fleet {
            tmp,
            state,
            config,
            envs: Vec::new(),
        }
    }

    pub fn env(mut self, k: &str, v: &str) -> Fleet {
        self.envs.push((k.into(), v.into()));
        self
    }

    pub fn write_config(&self, text: &str) {
        std::fs::write(&self.config, text).expect("write config");
    }

    /// The command, with --config/--state-dir and a clean environment, not yet run.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        c.arg("--config")
            .arg(&self.config)
            .arg("--state-dir")
            .arg(&self.state)
            .args(args);
        clean_env(&mut c);
        for (k, v) in &self.envs {
            c.env(k, v);
        }
        c
    }

    pub fn cmd(&self, args: &[&str]) -> Run {
        Run::from(self.command(args).output().expect("spawn fleetagent"))
    }

    pub fn spawn(&self, args: &[&str]) -> Child {
        self.command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn fleetagent")
    }

    /// The command fails with exit 1 and a stderr that says `needle`.
    #[track_caller]
    pub fn refused(&self, args: &[&str], needle: &str) -> Run {
        let out = self.cmd(args).code(1);
        assert!(
            out.stderr.contains(needle),
            "{args:?}: no {needle:?} in: {}",
            out.stderr
        );
        out
    }

    pub fn inspect(&self) -> Value {
        self.cmd(&["inspect", "--json"]).ok().json()
    }

    pub fn doorbell(&self) -> PathBuf {
        self.state.join("trigger")
    }

    pub fn db(&self) -> rusqlite::Connection {
        let c = rusqlite::Connection::open(self.state.join("fleetagent.db")).expect("open db");
        c.busy_timeout(std::time::Duration::from_secs(10)).unwrap();
        c
    }

    pub fn count(&self, sql: &str) -> i64 {
        self.db().query_row(sql, [], |r| r.get(0)).expect(sql)
    }

    /// The last observation a pass stored for the model.
    pub fn last_observation(&self) -> String {
        self.db()
            .query_row(
                "SELECT content FROM messages WHERE kind = 'observation' ORDER BY id DESC LIMIT 1",
                [],
                |r| r.get(0),
            )
            .expect("an observation")
    }

    pub fn path(&self) -> &Path {
        self.tmp.path()
    }
}

/// Remove every variable that could point the binary at a real config, dir, key or service.
pub fn clean_env(c: &mut Command) {
    for k in [
        "FLEETAGENT_CONFIG",
        "STATE_DIRECTORY",
        "CREDENTIALS_DIRECTORY",
        "VAST_API_KEY",
        "FLEETAGENT_LLM_API_KEY",
        "OPENAI_API_KEY",
        "FLEETAGENT_HARMONYDB_URL",
        "FLEETAGENT_TEST_CRASH_AT",
        "RUST_LOG",
        "INVOCATION_ID",
    ] {
        c.env_remove(k);
    }
    // Never this machine's credential store (an operator's command reads it).
    c.env("FLEETAGENT_CREDSTORE", "");
}
