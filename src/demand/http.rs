//! The `http` demand probe: `GET` a URL that answers the demand JSON document
//! (docs/demand.md). It only reads; any status but 200 or a bad body is an error.

use std::time::Duration;

use anyhow::{anyhow, Result};

use super::json::{excerpt, parse_demand_json};
use super::redact::{error_chain, mask, one_line, redact_url, secrets_of};
use super::{Demand, DemandProbe};

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
            .read_to_string();
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
        let shown = redact_url(&self.url);
        let secrets = secrets_of(&self.url);
        let clean =
            |msg: String| anyhow!(mask(&one_line(&format!("demand http: {msg}")), &secrets));
        let body = self.fetch(&shown).map_err(clean)?;
        parse_demand_json(&body).map_err(|e| clean(format!("{shown}: {e}")))
    }
}

fn describe(err: &ureq::Error, timeout: Duration) -> String {
    match err {
        ureq::Error::Timeout(_) => format!("no complete answer within {}s", timeout.as_secs_f64()),
        other => error_chain(other),
    }
}
