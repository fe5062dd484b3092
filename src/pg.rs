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

/// One connection to `url` (a `postgres://` URL or a libpq `key=value` string) without TLS:
/// `timeout` bounds the whole connect (the driver's own bound is the TCP connect alone: a
/// server that accepts the connection and never replies, stopped or behind a network that
/// drops packets, held the caller for ever) and each statement (`statement_timeout`), and
/// `application_name` is set unless the URL names one. The connect runs on a thread of its
/// own, left behind when it does not answer in time.
pub fn connect(
    url: &str,
    timeout: Duration,
    application_name: &str,
) -> Result<Client, ConnectError> {
    let (sent, answer) = std::sync::mpsc::channel();
    let (url, name) = (url.to_string(), application_name.to_string());
    let spawned = std::thread::Builder::new()
        .name("pg-connect".into())
        .spawn(move || {
            let _ = sent.send(connect_here(&url, timeout, &name));
        });
    if let Err(e) = spawned {
        return Err(ConnectError::Connect(format!("cannot start a thread: {e}")));
    }
    answer
        .recv_timeout(timeout + Duration::from_millis(500))
        .unwrap_or_else(|_| {
            Err(ConnectError::Connect(format!(
                "no answer within {}s: the server accepted the connection but never replied (stopped, overloaded, or a network that drops packets)",
                timeout.as_secs_f64()
            )))
        })
}

fn connect_here(
    url: &str,
    timeout: Duration,
    application_name: &str,
) -> Result<Client, ConnectError> {
    if let Some(mode) = tls_mode_demanded(url) {
        return Err(ConnectError::Tls(mode));
    }
    let mut config: Config = url
        .parse()
        .map_err(|e| ConnectError::BadUrl(error_chain(&e)))?;
    if config.get_ssl_mode() == SslMode::Require {
        return Err(ConnectError::Tls("require".into()));
    }
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

    /// A server that accepts the connection and never replies (a stopped postmaster, a
    /// network that drops packets after the handshake) ends the connect at its bound, named.
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
        let url = format!("postgresql://u:pw@127.0.0.1:{port}/db?sslmode=disable");
        match connect(&url, Duration::from_secs(1), "test") {
            Err(ConnectError::Connect(why)) => {
                assert!(why.contains("never replied"), "{why}")
            }
            Err(other) => panic!("{other:?}"),
            Ok(_) => panic!("connected to a silent server"),
        }
        done.send(()).unwrap();
        held.join().unwrap();
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
