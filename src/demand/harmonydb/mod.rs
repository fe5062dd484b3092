//! The `harmonydb` demand probe: reads PSProve demand from Curio's HarmonyDB (schema
//! `curio`, reference/curio-demand.md) over the Postgres protocol, without TLS, in one
//! read-only snapshot. It never writes, and no error it returns contains the password.
//! The statements are in [`read`].

mod column;
mod read;

/// The history statement (`$1` task, `$2` window, `$3` hour, `$4` quarter, in seconds), for
/// `scripts/bench probe` to EXPLAIN.
pub use read::HISTORY as HISTORY_STATEMENT;
pub use read::NO_GPU_NOTE;

use std::fmt;
use std::time::Duration;

use anyhow::{anyhow, Result};
use postgres::{Client, IsolationLevel};

use crate::pg::Abandoned;

use super::{Demand, DemandProbe};
use crate::pg::ConnectError;
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
        crate::pg::connect(&self.url, self.timeout, "fleetagent").map_err(|e| match e {
            ConnectError::Tls(mode) => format!(
                "{shown} asks for TLS (sslmode={mode}), but fleetagent connects to HarmonyDB \
                 without TLS; reach it over a private network or an SSH tunnel and use \
                 sslmode=disable"
            ),
            ConnectError::BadUrl(why) => format!("{shown} is not a valid PostgreSQL URL: {why}"),
            ConnectError::Connect(why) => format!("cannot connect to {shown}: {why}"),
            ConnectError::StatementTimeout(why) => {
                format!("setting statement_timeout on {shown}: {why}")
            }
        })
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
        // Each host of a list gets `timeout` to connect (`pg::connect`).
        let job = self.clone();
        let limit = self.timeout * crate::pg::hosts_in(&self.url) + GRACE;
        match crate::pg::on_thread("harmonydb-probe", limit, move || job.read()) {
            Ok(result) => result.map_err(|msg| clean(&msg)),
            Err(Abandoned::Elapsed) => Err(clean(&format!(
                "no answer from {} within {}s",
                redact_url(&self.url),
                limit.as_secs_f64()
            ))),
            Err(Abandoned::Failed(why)) => Err(clean(&format!("the probe: {why}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
