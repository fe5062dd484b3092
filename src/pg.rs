//! Connecting to PostgreSQL as fleetagent does, for the HarmonyDB probe and the shared
//! database of several hosts: without TLS (a URL that asks for it is refused by name), the
//! connect and every statement bounded by one timeout, keepalives on. Each caller names its
//! database around a [`ConnectError`]; none of its texts holds the URL.

use std::time::Duration;

use postgres::config::SslMode;
use postgres::{Client, Config, NoTls};

use crate::secrets::redact::error_chain;

/// Why no connection was made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnectError {
    /// The URL asks for TLS: the `sslmode` it names (`require`, `verify-ca`, `verify-full`).
    Tls(String),
    /// The URL does not parse: the driver's reason.
    BadUrl(String),
    /// The server could not be reached or refused us: the driver's reason.
    Connect(String),
    /// Connected, but `SET statement_timeout` failed: the driver's reason.
    StatementTimeout(String),
}

/// Why [`on_thread`] has no answer.
#[derive(Debug)]
pub enum Abandoned {
    /// The job did not finish within the limit; its thread is left behind.
    Elapsed,
    /// The thread could not start, or the job panicked: the reason.
    Failed(String),
}

/// Runs `job` on a thread of its own named `name` and waits at most `limit` for it. The
/// driver bounds the TCP connect alone: a server that accepts the connection and never
/// replies (stopped, or behind a network that drops packets) would hold the caller for ever;
/// past the limit the thread is abandoned (a short-lived process exits soon after).
pub fn on_thread<T: Send + 'static>(
    name: &str,
    limit: Duration,
    job: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Abandoned> {
    let (sent, answer) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let _ = sent.send(job());
        })
        .map_err(|e| Abandoned::Failed(format!("cannot start a thread: {e}")))?;
    answer.recv_timeout(limit).map_err(|e| match e {
        std::sync::mpsc::RecvTimeoutError::Timeout => Abandoned::Elapsed,
        std::sync::mpsc::RecvTimeoutError::Disconnected => {
            Abandoned::Failed("the thread panicked".into())
        }
    })
}

/// One connection to `url` (a `postgres://` URL or a libpq `key=value` string) without TLS:
/// `timeout` bounds the TCP connect and each statement (`statement_timeout`), and
/// `application_name` is set unless the URL names one. A server that accepts and never
/// replies is not bounded here where the URL names one host: run it [`on_thread`] (the
/// HarmonyDB probe bounds its whole reading so, the shared database its connect), allowing
/// `timeout` per host ([`hosts_in`]). Where it names several, each is tried in turn, each
/// attempt bounded as a whole by `timeout`, so that a hung host hands over to the next.
pub fn connect(
    url: &str,
    timeout: Duration,
    application_name: &str,
) -> Result<Client, ConnectError> {
    if let Some(mode) = tls_mode_demanded(url) {
        return Err(ConnectError::Tls(mode));
    }
    let config: Config = url
        .parse()
        .map_err(|e| ConnectError::BadUrl(error_chain(&e)))?;
    if config.get_ssl_mode() == SslMode::Require {
        return Err(ConnectError::Tls("require".into()));
    }
    let n = host_count(&config);
    if n <= 1 {
        return connect_to(config, timeout, application_name);
    }
    // The driver tries the hosts in turn, but bounds only each TCP connect: a host that
    // accepts and never answers (a hung node of a YugabyteDB cluster) held the whole
    // attempt, and the next host was never tried (a walkthrough). Each host gets its own
    // attempt, bounded as a whole by `timeout`. The error names the hosts that answered
    // first: their reason (a refused password) is the fault, and a long list was clipped
    // before it (a re-test).
    let (mut answered, mut silent) = (Vec::new(), Vec::new());
    for i in 0..n {
        let one = only_host(&config, i);
        let shown = shown_host(&config, i);
        let app = application_name.to_string();
        match on_thread(
            "pg-connect",
            timeout + Duration::from_millis(200),
            move || connect_to(one, timeout, &app),
        ) {
            Ok(Ok(client)) => return Ok(client),
            Ok(Err(ConnectError::Connect(e))) => answered.push(format!("{shown}: {e}")),
            Ok(Err(other)) => return Err(other),
            Err(Abandoned::Elapsed) => silent.push(shown),
            Err(Abandoned::Failed(e)) => answered.push(format!("{shown}: {e}")),
        }
    }
    if !silent.is_empty() {
        answered.push(format!(
            "no answer within {}s from {}",
            timeout.as_secs_f64(),
            silent.join(", ")
        ));
    }
    Err(ConnectError::Connect(format!(
        "none of its {n} hosts answered ({})",
        answered.join("; ")
    )))
}

/// How many hosts a URL names (1 when it names none or does not parse): a caller that
/// bounds a whole connect ([`on_thread`]) allows each of them `timeout`.
pub fn hosts_in(url: &str) -> u32 {
    url.parse::<Config>()
        .map(|c| host_count(&c).max(1) as u32)
        .unwrap_or(1)
}

fn host_count(config: &Config) -> usize {
    config.get_hosts().len().max(config.get_hostaddrs().len())
}

/// Host `i` of a list, with its port, for an error (no user, no password).
fn shown_host(config: &Config, i: usize) -> String {
    let host = match config.get_hosts().get(i) {
        Some(postgres::config::Host::Tcp(h)) => h.clone(),
        #[cfg(unix)]
        Some(postgres::config::Host::Unix(p)) => p.display().to_string(),
        None => config
            .get_hostaddrs()
            .get(i)
            .map(|a| a.to_string())
            .unwrap_or_default(),
    };
    match port_of(config, i) {
        Some(port) => format!("host {host}:{port}"),
        None => format!("host {host}"),
    }
}

fn port_of(config: &Config, i: usize) -> Option<u16> {
    let ports = config.get_ports();
    if ports.len() == 1 {
        Some(ports[0])
    } else {
        ports.get(i).copied()
    }
}

/// `config` with host `i` of its list alone (its port and address), everything else kept.
fn only_host(config: &Config, i: usize) -> Config {
    let mut one = Config::new();
    if let Some(user) = config.get_user() {
        one.user(user);
    }
    if let Some(password) = config.get_password() {
        one.password(password);
    }
    if let Some(dbname) = config.get_dbname() {
        one.dbname(dbname);
    }
    if let Some(options) = config.get_options() {
        one.options(options);
    }
    if let Some(name) = config.get_application_name() {
        one.application_name(name);
    }
    one.ssl_mode(config.get_ssl_mode())
        .ssl_negotiation(config.get_ssl_negotiation())
        .target_session_attrs(config.get_target_session_attrs())
        .channel_binding(config.get_channel_binding());
    match config.get_hosts().get(i) {
        Some(postgres::config::Host::Tcp(h)) => {
            one.host(h);
        }
        #[cfg(unix)]
        Some(postgres::config::Host::Unix(p)) => {
            one.host_path(p);
        }
        None => {}
    }
    if let Some(addr) = config.get_hostaddrs().get(i) {
        one.hostaddr(*addr);
    }
    if let Some(port) = port_of(config, i) {
        one.port(port);
    }
    one
}

/// One connection with `config` (one host, or the driver's own walk over several).
fn connect_to(
    mut config: Config,
    timeout: Duration,
    application_name: &str,
) -> Result<Client, ConnectError> {
    config
        .ssl_mode(SslMode::Disable)
        .connect_timeout(timeout)
        .tcp_user_timeout(timeout)
        .keepalives(true);
    if config.get_application_name().is_none() {
        config.application_name(application_name);
    }
    let mut client = config
        .connect(NoTls)
        .map_err(|e| ConnectError::Connect(error_chain(&e)))?;
    let statement_ms = timeout.as_millis().max(1);
    client
        .batch_execute(&format!("SET statement_timeout = {statement_ms}"))
        .map_err(|e| ConnectError::StatementTimeout(error_chain(&e)))?;
    Ok(client)
}

/// The `sslmode` a URL or libpq string asks for when it demands TLS (`require`,
/// `verify-ca`, `verify-full`), read from the text itself: the driver knows only `require`
/// and fails to parse the others with a message that does not say TLS.
pub fn tls_mode_demanded(url: &str) -> Option<String> {
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

    /// A job that does not finish within the limit is abandoned; one that does is answered.
    #[test]
    fn a_job_on_its_thread_is_waited_for_up_to_its_limit() {
        let (done, wait) = std::sync::mpsc::channel::<()>();
        let slow = on_thread("test-slow", Duration::from_millis(200), move || {
            let _ = wait.recv_timeout(Duration::from_secs(30));
            1
        });
        assert!(matches!(slow, Err(Abandoned::Elapsed)), "{slow:?}");
        done.send(()).unwrap();
        let quick = on_thread("test-quick", Duration::from_secs(30), || 2);
        assert!(matches!(quick, Ok(2)), "{quick:?}");
    }

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
}
