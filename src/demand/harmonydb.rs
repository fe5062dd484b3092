//! The `harmonydb` demand probe: reads PSProve demand from Curio's HarmonyDB (schema
//! `curio`, reference/curio-demand.md) over the Postgres protocol, without TLS, in one
//! read-only snapshot. It never writes, and no error it returns contains the password.

use std::fmt;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread;
use std::time::Duration;

use anyhow::{anyhow, Result};
use postgres::config::SslMode;
use postgres::{Client, Config, IsolationLevel, NoTls, Transaction};

use super::{Demand, DemandProbe, Worker};
use crate::secrets::redact::{error_chain, mask, one_line, redact_url, secrets_of};

/// The completion windows of [`Demand::completed_1h`] and [`Demand::completed_15m`].
const HOUR_SECS: f64 = 3600.0;
const QUARTER_SECS: f64 = 900.0;
/// Extra time past `timeout` for a server-side timeout to come back as the error before
/// the probe gives up on the connection itself.
const GRACE: Duration = Duration::from_secs(2);

/// PSProve pending, and claimed tasks split by whether the owner still sends heartbeats.
/// A missing owner row (deleted by Curio's cleanup, or never there) is stale.
const TASK_COUNTS: &str = "
SELECT
  count(*) FILTER (WHERE t.owner_id IS NULL) AS pending,
  count(*) FILTER (WHERE t.owner_id IS NOT NULL
                   AND coalesce(m.last_contact >= now() - make_interval(secs => $2), false))
    AS running,
  count(*) FILTER (WHERE t.owner_id IS NOT NULL
                   AND NOT coalesce(m.last_contact >= now() - make_interval(secs => $2), false))
    AS running_stale
FROM curio.harmony_task t
LEFT JOIN curio.harmony_machines m ON m.id = t.owner_id
WHERE t.name = $1";

/// Successful attempts in the last hour ($2) and the last 15 minutes ($3).
const COMPLETIONS: &str = "
SELECT
  count(*) AS completed_1h,
  count(*) FILTER (WHERE work_end > now() - make_interval(secs => $3)) AS completed_15m
FROM curio.harmony_task_history
WHERE name = $1 AND result AND work_end > now() - make_interval(secs => $2)";

/// Live machines whose comma-separated task list holds the task as a whole item (Curio
/// writes it without surrounding commas, so a plain `LIKE '%,name,%'` misses the first and
/// last item), with how many of those tasks each one owns.
const WORKERS: &str = "
SELECT
  coalesce(d.machine_name, '') AS machine_name,
  m.host_and_port,
  coalesce(m.unschedulable, false) AS cordoned,
  (SELECT count(*) FROM curio.harmony_task t WHERE t.owner_id = m.id AND t.name = $1)
    AS running
FROM curio.harmony_machines m
JOIN curio.harmony_machine_details d ON d.machine_id = m.id
WHERE m.last_contact >= now() - make_interval(secs => $2)
  AND $1 = ANY (SELECT btrim(item) FROM unnest(string_to_array(d.tasks, ',')) AS item)
ORDER BY machine_name, m.host_and_port";

const HAS_PROOFSHARE_QUEUE: &str = "SELECT to_regclass('curio.proofshare_queue') IS NOT NULL";

/// Unproved ProofShare work without a PSProve task yet (waiting) and with one (computing).
const PROOFSHARE: &str = "
SELECT
  count(*) FILTER (WHERE compute_task_id IS NULL) AS waiting,
  count(*) FILTER (WHERE compute_task_id IS NOT NULL) AS computing
FROM curio.proofshare_queue
WHERE NOT compute_done";

/// Reads [`Demand`] from HarmonyDB. Each probe opens one connection and closes it.
#[derive(Clone)]
pub struct HarmonyDbProbe {
    url: String,
    task: String,
    worker_alive_secs: u64,
    timeout: Duration,
}

impl HarmonyDbProbe {
    /// `url`: a `postgres://` URL or libpq `key=value` string (it may hold the password).
    /// `task`: the Curio task name (`PSProve`). A machine is live when its `last_contact`
    /// is within `worker_alive_secs`. `timeout` bounds the connect and each statement; the
    /// whole probe gives up a little after it.
    pub fn new(url: String, task: String, worker_alive_secs: u64, timeout: Duration) -> Self {
        HarmonyDbProbe {
            url,
            task,
            worker_alive_secs,
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
        // One snapshot, so pending, running and the workers agree with each other.
        let mut tx = client
            .build_transaction()
            .isolation_level(IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .map_err(|e| failed("a read-only snapshot", e))?;
        let alive_secs = self.worker_alive_secs as f64;

        let row = tx
            .query_one(TASK_COUNTS, &[&self.task, &alive_secs])
            .map_err(|e| failed("task counts (curio.harmony_task)", e))?;
        let (pending, running, running_stale) =
            (count(row.get(0)), count(row.get(1)), count(row.get(2)));

        let row = tx
            .query_one(COMPLETIONS, &[&self.task, &HOUR_SECS, &QUARTER_SECS])
            .map_err(|e| failed("completions (curio.harmony_task_history)", e))?;
        let (completed_1h, completed_15m) = (count(row.get(0)), count(row.get(1)));

        let workers = tx
            .query(WORKERS, &[&self.task, &alive_secs])
            .map_err(|e| failed("workers (curio.harmony_machines)", e))?
            .iter()
            .map(|r| Worker {
                machine_name: r.get(0),
                host_and_port: r.get(1),
                cordoned: r.get(2),
                running: count(r.get(3)),
            })
            .collect();

        let (ps_waiting, ps_computing) =
            proofshare(&mut tx).map_err(|e| failed("curio.proofshare_queue", e))?;
        tx.commit()
            .map_err(|e| failed("the end of the snapshot", e))?;

        Ok(Demand {
            pending,
            running,
            running_stale,
            completed_1h,
            completed_15m,
            workers,
            ps_waiting,
            ps_computing,
            ..Demand::default()
        })
    }
}

impl fmt::Debug for HarmonyDbProbe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HarmonyDbProbe")
            .field("url", &redact_url(&self.url))
            .field("task", &self.task)
            .field("worker_alive_secs", &self.worker_alive_secs)
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

/// ProofShare counts, or `(None, None)` on a cluster without the ProofShare tables.
fn proofshare(tx: &mut Transaction<'_>) -> Result<(Option<u32>, Option<u32>), postgres::Error> {
    let present: bool = tx.query_one(HAS_PROOFSHARE_QUEUE, &[])?.get(0);
    if !present {
        return Ok((None, None));
    }
    let row = tx.query_one(PROOFSHARE, &[])?;
    Ok((Some(count(row.get(0))), Some(count(row.get(1)))))
}

fn count(n: i64) -> u32 {
    u32::try_from(n.max(0)).unwrap_or(u32::MAX)
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
        assert_eq!(count(-1), 0);
        assert_eq!(count(7), 7);
        assert_eq!(count(i64::MAX), u32::MAX);
    }
}
