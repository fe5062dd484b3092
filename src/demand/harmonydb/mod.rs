//! The `harmonydb` demand probe: reads PSProve demand from Curio's HarmonyDB (schema
//! `curio`, reference/curio-demand.md) over the Postgres protocol, without TLS, in one
//! read-only snapshot. It never writes, and no error it returns contains the password.
//! The statements are in [`read`].

mod column;
mod read;

/// The history statement (`$1` task, `$2` window, `$3` hour, `$4` quarter, in seconds), for
/// `scripts/bench probe` to EXPLAIN.
pub use read::HISTORY as HISTORY_STATEMENT;

use std::fmt;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread;
use std::time::Duration;

use anyhow::{anyhow, Result};
use postgres::config::SslMode;
use postgres::{Client, Config, IsolationLevel, NoTls};

use super::{Demand, DemandProbe};
use crate::secrets::redact::{error_chain, mask, one_line, redact_url, secrets_of};

/// Extra time past `timeout` for a server-side timeout to come back as the error before
/// the probe gives up on the connection itself.
const GRACE: Duration = Duration::from_secs(2);

/// Reads [`Demand`] from HarmonyDB. Each probe opens one connection and closes it.
#[derive(Clone)]
pub struct HarmonyDbProbe {
    url: String,
    task: String,
    worker_alive_secs: u64,
    waiting_max_age_mins: u64,
    timeout: Duration,
}

impl HarmonyDbProbe {
    /// `url`: a `postgres://` URL or libpq `key=value` string (it may hold the password).
    /// `task`: the Curio task name (`PSProve`). A machine is live when its `last_contact`
    /// is within `worker_alive_secs`. A ProofShare queue row waiting for a task counts as
    /// work while younger than `waiting_max_age_mins` (`demand.waiting_max_age_mins`).
    /// `timeout` bounds the connect and each statement; the whole probe gives up a little
    /// after it.
    pub fn new(
        url: String,
        task: String,
        worker_alive_secs: u64,
        waiting_max_age_mins: u64,
        timeout: Duration,
    ) -> Self {
        HarmonyDbProbe {
            url,
            task,
            worker_alive_secs,
            waiting_max_age_mins,
            timeout,
        }
    }

    fn connect(&self, shown: &str) -> Result<Client, String> {
        if let Some(mode) = tls_mode_demanded(&self.url) {
            return Err(format!(
                "{shown} asks for TLS (sslmode={mode}), but fleetagent connects to HarmonyDB \
                 without TLS; reach it over a private network or an SSH tunnel and use \
                 sslmode=disable"
            ));
        }
        let mut config: Config = self
            .url
            .parse()
            .map_err(|e| format!("{shown} is not a valid PostgreSQL URL: {}", error_chain(&e)))?;
        if config.get_ssl_mode() == SslMode::Require {
            return Err(format!(
                "{shown} asks for TLS, but fleetagent connects to HarmonyDB without TLS"
            ));
        }
        config
            .ssl_mode(SslMode::Disable)
            .connect_timeout(self.timeout)
            .tcp_user_timeout(self.timeout)
            .keepalives(true);
        if config.get_application_name().is_none() {
            config.application_name("fleetagent");
        }
        let mut client = config
            .connect(NoTls)
            .map_err(|e| format!("cannot connect to {shown}: {}", error_chain(&e)))?;
        let statement_ms = self.timeout.as_millis().max(1);
        client
            .batch_execute(&format!("SET statement_timeout = {statement_ms}"))
            .map_err(|e| format!("setting statement_timeout on {shown}: {}", error_chain(&e)))?;
        Ok(client)
    }

    fn read(&self) -> Result<Demand, String> {
        let shown = redact_url(&self.url);
        let mut client = self.connect(&shown)?;
        let failed = |what: &str, e: postgres::Error| {
            format!("reading {what} from {shown}: {}", error_chain(&e))
        };
        // One snapshot, so every count agrees with every other.
        let mut tx = client
            .build_transaction()
            .isolation_level(IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .map_err(|e| failed("a read-only snapshot", e))?;
        let params = read::Params {
            shown: &shown,
            task: &self.task,
            alive_secs: self.worker_alive_secs as f64,
            waiting_max_age_mins: i32::try_from(self.waiting_max_age_mins).unwrap_or(i32::MAX),
        };
        let demand = read::read(&mut tx, &params)?;
        tx.commit()
            .map_err(|e| failed("the end of the snapshot", e))?;
        Ok(demand)
    }
}

impl fmt::Debug for HarmonyDbProbe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HarmonyDbProbe")
            .field("url", &redact_url(&self.url))
            .field("task", &self.task)
            .field("worker_alive_secs", &self.worker_alive_secs)
            .field("waiting_max_age_mins", &self.waiting_max_age_mins)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl DemandProbe for HarmonyDbProbe {
    fn probe(&self) -> Result<Demand> {
        let secrets = secrets_of(&self.url);
        let clean = |msg: &str| anyhow!(mask(&one_line(&format!("harmonydb: {msg}")), &secrets));
        // The driver bounds the TCP connect, not a server that accepts and then never
        // answers; so the whole probe runs on a thread that is abandoned past the limit.
        let (tx, rx) = mpsc::channel();
        let job = self.clone();
        thread::Builder::new()
            .name("harmonydb-probe".into())
            .spawn(move || {
                let _ = tx.send(job.read());
            })
            .map_err(|e| clean(&format!("cannot start the probe thread: {e}")))?;
        match rx.recv_timeout(self.timeout + GRACE) {
            Ok(result) => result.map_err(|msg| clean(&msg)),
            Err(RecvTimeoutError::Timeout) => Err(clean(&format!(
                "no answer from {} within {}s",
                redact_url(&self.url),
                (self.timeout + GRACE).as_secs_f64()
            ))),
            Err(RecvTimeoutError::Disconnected) => Err(clean("the probe thread panicked")),
        }
    }
}

/// The `sslmode` of `url` when it insists on TLS (`require`, `verify-ca`, `verify-full`).
fn tls_mode_demanded(url: &str) -> Option<String> {
    let mut rest = url;
    while let Some(at) = rest.find("sslmode") {
        rest = &rest[at + "sslmode".len()..];
        let Some(value) = rest.trim_start().strip_prefix('=') else {
            continue;
        };
        let value = value.trim_start().trim_start_matches('\'');
        let end = value
            .find(|c: char| c == '&' || c == '#' || c == '\'' || c.is_whitespace())
            .unwrap_or(value.len());
        let mode = &value[..end];
        if matches!(mode, "require" | "verify-ca" | "verify-full") {
            return Some(mode.to_string());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_demanding_urls_are_recognised() {
        assert_eq!(
            tls_mode_demanded("postgres://u@h/db?sslmode=require").as_deref(),
            Some("require")
        );
        assert_eq!(
            tls_mode_demanded("postgres://u@h/db?x=1&sslmode=verify-full&y=2").as_deref(),
            Some("verify-full")
        );
        assert_eq!(
            tls_mode_demanded("host=h sslmode = 'verify-ca' user=u").as_deref(),
            Some("verify-ca")
        );
        assert_eq!(tls_mode_demanded("postgres://u@h/db?sslmode=disable"), None);
        assert_eq!(tls_mode_demanded("postgres://u@h/db?sslmode=prefer"), None);
        assert_eq!(tls_mode_demanded("postgres://u@h/db"), None);
    }

    #[test]
    fn debug_never_shows_the_password() {
        let probe = HarmonyDbProbe::new(
            "postgresql://yugabyte:hunter2@h:5433/yugabyte".into(),
            "PSProve".into(),
            150,
            60,
            Duration::from_secs(10),
        );
        let shown = format!("{probe:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(
            shown.contains("postgresql://yugabyte@h:5433/yugabyte"),
            "{shown}"
        );
    }

    #[test]
    fn counts_saturate_instead_of_wrapping() {
        use read::count;
        assert_eq!(count(-1), 0);
        assert_eq!(count(7), 7);
        assert_eq!(count(i64::MAX), u32::MAX);
    }
}
