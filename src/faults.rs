//! Fault injection for tests (test-only switches, documented in docs/testing.md). Each names
//! a persistence point of `run` or `trigger`:
//! - `FLEETAGENT_TEST_CRASH_AT=<point>`: abort the process there, as SIGKILL or power loss would;
//! - `FLEETAGENT_TEST_FAIL_AT=<point>`: the step fails there with an error (a failed pass);
//! - `FLEETAGENT_TEST_PAUSE_AT=<point>:<ms>`: sleep there, so a test can act meanwhile;
//! - `FLEETAGENT_TEST_PANIC_AT=<point>`: panic there (what a bug would do), so tests can check
//!   that a panic leaks no secret and loses nothing.
//!
//! `FLEETAGENT_TEST_BUSY_TIMEOUT_MS=<ms>` names no point: it is SQLite's busy timeout
//! (`store::busy_timeout`) instead of 30 s, so a test of a locked database need not wait.
//! `FLEETAGENT_TEST_EXIT_DELAY_MS=<ms>` is how long a `run` that cannot delete its doorbell
//! waits before it exits (`run::exit_before_start`) instead of 30 s.
//!
//! Unset (always, in production) nothing happens; the variables are read once per process.
//! They can only make the process stop, fail or wait at a point it passes anyway: none of them
//! skips a check, changes a decision or reaches another file (docs/security.md).

use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{bail, Result};

/// The named persistence points, in the order a run meets them.
pub const POINTS: &[&str] = &[
    // `trigger`, `message`, `reset-session` and `poll`: the event committed, no ring yet.
    "trigger-after-insert",
    "run-after-lock",
    "run-after-claim",
    "run-after-observe",
    // The LLM was unusable (recorded); the fallback rules have not acted yet.
    "fallback-before-rules",
    "launch-after-intent",
    "launch-after-create",
    "stop-after-call",
    "tool-before-result",
    // A tool result stored; the next call or the next round not started.
    "tool-after-result",
    // The rules' calls executed; their note not stored.
    "rules-before-note",
    "run-before-finish",
    "run-end-check",
    "run-after-last-look",
];

/// The points only a host with `[ha] enabled` reaches: a fenced push read its rows and sent
/// nothing yet; sent and committed, the local mark not yet written.
pub const HA_POINTS: &[&str] = &["ha-before-push", "ha-after-push"];

struct Switches {
    crash: Option<String>,
    panic: Option<String>,
    fail: Option<String>,
    pause: Option<(String, u64)>,
    busy_timeout: Option<Duration>,
    exit_delay: Option<Duration>,
}

fn switches() -> &'static Switches {
    static S: OnceLock<Switches> = OnceLock::new();
    S.get_or_init(|| Switches {
        crash: std::env::var("FLEETAGENT_TEST_CRASH_AT").ok(),
        panic: std::env::var("FLEETAGENT_TEST_PANIC_AT").ok(),
        fail: std::env::var("FLEETAGENT_TEST_FAIL_AT").ok(),
        pause: std::env::var("FLEETAGENT_TEST_PAUSE_AT")
            .ok()
            .and_then(|v| {
                let (name, ms) = v.rsplit_once(':')?;
                Some((name.to_string(), ms.parse().ok()?))
            }),
        busy_timeout: std::env::var("FLEETAGENT_TEST_BUSY_TIMEOUT_MS")
            .ok()
            .and_then(|ms| ms.parse().ok())
            .map(Duration::from_millis),
        exit_delay: std::env::var("FLEETAGENT_TEST_EXIT_DELAY_MS")
            .ok()
            .and_then(|ms| ms.parse().ok())
            .map(Duration::from_millis),
    })
}

/// The busy timeout a test set (`FLEETAGENT_TEST_BUSY_TIMEOUT_MS`); None: the store's own.
pub fn busy_timeout() -> Option<Duration> {
    switches().busy_timeout
}

/// The early exit's wait a test set (`FLEETAGENT_TEST_EXIT_DELAY_MS`); None: the run's own.
pub fn exit_delay() -> Option<Duration> {
    switches().exit_delay
}

/// A persistence point: abort, fail or pause here if a test switch names it.
pub fn point(name: &str) -> Result<()> {
    debug_assert!(
        POINTS.contains(&name) || HA_POINTS.contains(&name),
        "unlisted fault point {name}"
    );
    let s = switches();
    if let Some((p, ms)) = &s.pause {
        if p == name {
            // Tests wait for this line to act on the paused process (SIGSTOP, a partition).
            crate::journal::write_stderr(&format!("fleetagent: test pause at {name}"));
            #[allow(clippy::disallowed_methods)]
            std::thread::sleep(Duration::from_millis(*ms));
        }
    }
    if s.crash.as_deref() == Some(name) {
        crate::journal::write_stderr(&format!("fleetagent: test crash injected at {name}"));
        std::process::abort();
    }
    if s.panic.as_deref() == Some(name) {
        panic!("test panic injected at {name}");
    }
    if s.fail.as_deref() == Some(name) {
        bail!("test failure injected at {name}");
    }
    Ok(())
}

/// Process-wide counters of expensive set-up, printed to stderr at exit when the test-only
/// switch `FLEETAGENT_TEST_STATS=1` is set: tests and benchmarks prove with them that
/// `trigger` never loads the tokenizer or builds an HTTP client.
pub mod stats {
    use std::sync::atomic::{AtomicU64, Ordering};

    pub static TOKENIZER_LOADS: AtomicU64 = AtomicU64::new(0);
    pub static HTTP_CLIENTS: AtomicU64 = AtomicU64::new(0);

    pub fn tokenizer_loaded() {
        TOKENIZER_LOADS.fetch_add(1, Ordering::Relaxed);
    }

    pub fn http_client_built() {
        HTTP_CLIENTS.fetch_add(1, Ordering::Relaxed);
    }

    /// Print the counters if the switch is set (called by main before exiting).
    pub fn report() {
        if std::env::var_os("FLEETAGENT_TEST_STATS").is_some() {
            crate::journal::write_stderr(&format!(
                "fleetagent-stats tokenizer_loads={} http_clients={}",
                TOKENIZER_LOADS.load(Ordering::Relaxed),
                HTTP_CLIENTS.load(Ordering::Relaxed)
            ));
        }
    }
}
