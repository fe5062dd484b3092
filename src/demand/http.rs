//! The `http` demand probe: `GET` a URL that answers the demand JSON document
//! (docs/demand.md). It only reads; any status but 200 or a bad body is an error.

use std::time::Duration;

use anyhow::{anyhow, Result};

use super::json::{excerpt, parse_demand_json};
use super::{Demand, DemandProbe};
use crate::secrets::redact::{
    error_chain, mask, one_line, redact_url, secrets_of, without_query_values,
};

/// Bodies larger than this are not a demand document.
const MAX_BODY_BYTES: u64 = 1 << 20;

pub struct HttpProbe {
    url: String,
    timeout: Duration,
    agent: ureq::Agent,
}

impl HttpProbe {
    /// `timeout` bounds the whole request: connect, send, and reading the body.
    pub fn new(url: String, timeout: Duration) -> Self {
        crate::faults::stats::http_client_built();
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(timeout))
            .timeout_connect(Some(timeout))
            .max_redirects(3)
            .user_agent(concat!("fleetagent/", env!("CARGO_PKG_VERSION")))
            .build()
            .new_agent();
        HttpProbe {
            url,
            timeout,
            agent,
        }
    }

    fn fetch(&self, shown: &str) -> Result<String, String> {
        let mut response = self
            .agent
            .get(&self.url)
            .header("Accept", "application/json")
            .call()
            .map_err(|e| format!("GET {shown} failed: {}", describe(&e, self.timeout)))?;
        let status = response.status();
        let body = response
            .body_mut()
            .with_config()
            .limit(MAX_BODY_BYTES)
            .read_to_vec()
            // One byte that is not UTF-8 (in a note, a machine name) is read as U+FFFD, as a
            // `command` source's output is: it failed the whole reading, the fleet held blind.
            .map(|b| String::from_utf8_lossy(&b).into_owned());
        if status != 200 {
            let said = body.map(|b| excerpt(&b)).unwrap_or_default();
            let said = if said.is_empty() {
                String::new()
            } else {
                format!(": {said}")
            };
            return Err(format!(
                "GET {shown} answered HTTP {}{said}",
                status.as_u16()
            ));
        }
        body.map_err(|e| {
            format!(
                "GET {shown}: reading the body failed: {}",
                describe(&e, self.timeout)
            )
        })
    }
}

impl std::fmt::Debug for HttpProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpProbe")
            .field("url", &redact_url(&self.url))
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl DemandProbe for HttpProbe {
    fn probe(&self) -> Result<Demand> {
        self.get_parsed("demand http", parse_demand_json)
    }
}

impl HttpProbe {
    /// GET the URL and parse its body with `parse`; any failure is one line prefixed with
    /// `what` (`demand http`, `price.fil_usd_url`), the URL's secrets and query values masked.
    pub(crate) fn get_parsed<T, E: std::fmt::Display>(
        &self,
        what: &str,
        parse: impl FnOnce(&str) -> Result<T, E>,
    ) -> Result<T> {
        let shown = without_query_values(&redact_url(&self.url));
        let mut secrets = secrets_of(&self.url);
        secrets.extend(query_values(&self.url).into_iter().filter(|v| v.len() >= 4));
        let clean = |msg: String| anyhow!(mask(&one_line(&format!("{what}: {msg}")), &secrets));
        let body = self.fetch(&shown).map_err(clean)?;
        parse(&body).map_err(|e| clean(format!("{shown}: {e}")))
    }
}

/// The values of the URL's query (`?token=abc&x=1` -> `abc`, `1`): a token may travel there,
/// and the URL comes from the config, so none is ever shown.
fn query_values(url: &str) -> Vec<String> {
    let Some((_, query)) = url.split_once('?') else {
        return Vec::new();
    };
    let query = query.split('#').next().unwrap_or(query);
    query
        .split('&')
        .filter_map(|pair| pair.split_once('=').map(|(_, v)| v.to_string()))
        .filter(|v| !v.is_empty())
        .collect()
}

fn describe(err: &ureq::Error, timeout: Duration) -> String {
    match err {
        ureq::Error::Timeout(_) => format!("no complete answer within {}s", timeout.as_secs_f64()),
        other => error_chain(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_are_never_shown() {
        let url = "http://probe@127.0.0.1:1/demand?token=SECRET-TOKEN-XYZZY&cluster=main";
        assert_eq!(
            without_query_values(url),
            "http://probe@127.0.0.1:1/demand?token=***&cluster=***"
        );
        assert_eq!(query_values(url), vec!["SECRET-TOKEN-XYZZY", "main"]);
        let err = HttpProbe::new(url.into(), Duration::from_millis(300))
            .probe()
            .unwrap_err()
            .to_string();
        assert!(!err.contains("SECRET-TOKEN"), "{err}");
        assert!(err.contains("token=***"), "{err}");
    }
}
