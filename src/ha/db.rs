//! One connection to the shared database: connect without TLS (as the HarmonyDB probe does),
//! name what failed in one line without the password, and retry serialization failures and
//! deadlocks (40001, 40P01) a bounded number of times, as YugabyteDB asks of its clients.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Result};
use postgres::error::SqlState;
use postgres::Client;

use crate::clock::Clock;
use crate::pg::ConnectError;
use crate::secrets::redact::{error_chain, mask, one_line, redact_url, secrets_of};

/// How often and how patiently a statement is tried again after 40001 or 40P01.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    /// Tries in all, the first included (at least 1).
    pub attempts: u32,
    /// The wait after the first failure; it doubles after each further one.
    pub first_backoff: Duration,
    /// The longest wait between two tries.
    pub max_backoff: Duration,
}

impl Default for Retry {
    /// 6 tries, 200 ms doubling to at most 8 s (harmonyquery's back-offs): about 6 s in all,
    /// well inside the 75 s fence margin.
    fn default() -> Self {
        Retry {
            attempts: 6,
            first_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(8),
        }
    }
}

impl Retry {
    fn backoff(&self, failed_tries: u32) -> Duration {
        let factor = 1u32 << failed_tries.saturating_sub(1).min(16);
        self.first_backoff
            .saturating_mul(factor)
            .min(self.max_backoff)
    }
}

/// A connection to the shared database (`ha_db_url`).
pub struct SharedDb {
    client: Client,
    shown: String,
    secrets: Vec<String>,
    retry: Retry,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for SharedDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedDb")
            .field("url", &self.shown)
            .field("retry", &self.retry)
            .finish()
    }
}

impl SharedDb {
    /// Connects to `url` (a `postgres://` URL or libpq `key=value` string, which may hold the
    /// password) without TLS. `timeout` bounds the connect, each statement (a fence waiting
    /// on a takeover's row lock included) and each wait inside a transaction (the server ends
    /// the session). Backoffs sleep on `clock`.
    pub fn connect(url: &str, timeout: Duration, clock: Arc<dyn Clock>) -> Result<SharedDb> {
        let shown = redact_url(url);
        let secrets = secrets_of(url);
        let clean = |msg: String| anyhow!(mask(&one_line(&format!("ha database {msg}")), &secrets));
        // A server that accepts and never replies is given up on at the bound, named.
        // Several hosts are tried in turn, `timeout` each (`pg::connect`).
        let owned = url.to_string();
        let limit = timeout * crate::pg::hosts_in(url) + Duration::from_millis(500);
        let connected = crate::pg::on_thread("ha-connect", limit, move || {
            crate::pg::connect(&owned, timeout, "fleetagent-ha")
        })
        .unwrap_or_else(|gone| {
            Err(ConnectError::Connect(match gone {
                crate::pg::Abandoned::Elapsed => format!(
                    "no answer within {}s: the server accepted the connection but never replied (stopped, overloaded, or a network that drops packets)",
                    (limit - Duration::from_millis(500)).as_secs_f64()
                ),
                crate::pg::Abandoned::Failed(why) => why,
            }))
        });
        let mut client = connected.map_err(|e| match e {
            ConnectError::Tls(_) => clean(format!(
                "{shown} asks for TLS, but fleetagent connects without TLS; use \
                 sslmode=disable over a private network or an SSH tunnel"
            )),
            ConnectError::BadUrl(why) => {
                clean(format!("{shown} is not a valid PostgreSQL URL: {why}"))
            }
            ConnectError::Connect(why) => clean(format!("{shown}: cannot connect: {why}")),
            ConnectError::StatementTimeout(why) => {
                clean(format!("{shown}: setting statement_timeout: {why}"))
            }
        })?;
        // A host stalled inside a transaction (stopped, swapped out, cut off mid-write) holds
        // the fence's share lock on the lease row: the server ends such a session after the
        // same bound, so another host can take over once the lease lapses. A server that does
        // not know the setting (42704) is used without it.
        let idle_ms = timeout.as_millis().max(1);
        if let Err(e) = client.batch_execute(&format!(
            "SET idle_in_transaction_session_timeout = {idle_ms}"
        )) {
            if e.code() != Some(&SqlState::UNDEFINED_OBJECT) {
                return Err(clean(format!(
                    "{shown}: setting idle_in_transaction_session_timeout: {}",
                    error_chain(&e)
                )));
            }
            log::debug!("ha database {shown}: no idle_in_transaction_session_timeout: {e}");
        }
        Ok(SharedDb {
            client,
            shown,
            secrets,
            retry: Retry::default(),
            clock,
        })
    }

    /// The same connection with another retry policy (tests scale the backoffs down).
    pub fn with_retry(mut self, retry: Retry) -> SharedDb {
        self.retry = retry;
        self
    }

    /// The database's URL without its password.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// One line naming what failed, never the password.
    pub(crate) fn failed(&self, what: &str, e: &postgres::Error, tries: u32) -> anyhow::Error {
        let code = e
            .code()
            .map(|c| format!(" (SQLSTATE {})", c.code()))
            .unwrap_or_default();
        let after = if tries > 1 {
            format!(", after {tries} tries")
        } else {
            String::new()
        };
        let msg = format!(
            "ha database {}: {what}: {}{code}{after}",
            self.shown,
            error_chain(e)
        );
        anyhow!(mask(&one_line(&msg), &self.secrets))
    }

    /// Runs `op` (one statement or one short transaction), again while it fails with a
    /// serialization failure or a deadlock, at most `retry.attempts` times in all.
    pub(crate) fn retrying<T>(
        &mut self,
        what: &str,
        op: impl FnMut(&mut Client) -> Result<T, postgres::Error>,
    ) -> Result<T> {
        self.retrying_on(what, is_transient, op)
    }

    /// As [`Self::retrying`], on the SQLSTATEs `again` accepts.
    pub(crate) fn retrying_on<T>(
        &mut self,
        what: &str,
        again: fn(&SqlState) -> bool,
        mut op: impl FnMut(&mut Client) -> Result<T, postgres::Error>,
    ) -> Result<T> {
        let attempts = self.retry.attempts.max(1);
        let mut tries = 0;
        loop {
            tries += 1;
            match op(&mut self.client) {
                Ok(value) => return Ok(value),
                Err(e) if tries < attempts && e.code().is_some_and(again) => {
                    log::debug!("ha: {what}: {} (try {tries} of {attempts})", e);
                    self.clock.sleep(self.retry.backoff(tries));
                }
                Err(e) => return Err(self.failed(what, &e, tries)),
            }
        }
    }
}

/// A serialization failure or a deadlock: the transaction was rolled back whole, and running
/// it again is safe (YugabyteDB reports its conflicts this way).
pub(crate) fn is_transient(code: &SqlState) -> bool {
    *code == SqlState::T_R_SERIALIZATION_FAILURE || *code == SqlState::T_R_DEADLOCK_DETECTED
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::SystemClock;

    #[test]
    fn backoff_doubles_up_to_its_bound() {
        let retry = Retry {
            attempts: 10,
            first_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(1),
        };
        let waits: Vec<u128> = (1..6).map(|n| retry.backoff(n).as_millis()).collect();
        assert_eq!(waits, [200, 400, 800, 1000, 1000]);
    }

    /// A server that accepts the connection and never replies (a stopped postmaster, a
    /// network that drops packets after the handshake) ends the connect at its bound, named
    /// (`ha status`, doctor and inspect waited for ever).
    #[test]
    fn a_server_that_never_replies_is_given_up_on_at_the_bound() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let (done, wait) = std::sync::mpsc::channel::<()>();
        let held = std::thread::spawn(move || {
            // Accept and hold the connection open, silent, until the test is done with it.
            let (conn, _) = listener.accept().unwrap();
            let _ = wait.recv_timeout(Duration::from_secs(30));
            drop(conn);
        });
        let url = format!("postgresql://u:secret-pw@127.0.0.1:{port}/db?sslmode=disable");
        let err = SharedDb::connect(&url, Duration::from_secs(1), Arc::new(SystemClock))
            .expect_err("connected to a silent server")
            .to_string();
        assert!(
            err.contains("never replied") && !err.contains("secret-pw"),
            "{err}"
        );
        done.send(()).unwrap();
        held.join().unwrap();
    }

    #[test]
    fn a_failed_connect_names_the_database_without_its_password() {
        // Nothing listens on port 1 of loopback: the connect fails at once.
        let url = "postgresql://fleetagent:s3cret-pw@127.0.0.1:1/shared?sslmode=disable";
        let err = SharedDb::connect(url, Duration::from_secs(2), Arc::new(SystemClock))
            .unwrap_err()
            .to_string();
        assert!(!err.contains("s3cret-pw"), "{err}");
        assert!(!err.contains('\n'), "{err}");
        assert!(
            err.starts_with("ha database postgresql://fleetagent@127.0.0.1:1/shared"),
            "{err}"
        );
        assert!(err.contains("cannot connect"), "{err}");
    }

    #[test]
    fn a_url_demanding_tls_is_refused_by_name() {
        let url = "postgresql://u:pw@127.0.0.1:1/db?sslmode=require";
        let err = SharedDb::connect(url, Duration::from_secs(2), Arc::new(SystemClock))
            .unwrap_err()
            .to_string();
        assert!(err.contains("asks for TLS"), "{err}");
        assert!(!err.contains(":pw@"), "{err}");
    }
}
