//! The vast.ai boundary: the [`VastClient`] trait (only the calls fleetagent makes) and its
//! data types. The ureq implementation (transport and retries) lives in `http.rs`, the
//! request bodies and the parsing of answers in `wire.rs`, and vast.ai's per-endpoint rate
//! limits in [`crate::ratelimit`]; tests and `sim` use fakes.
//! Nothing here decides anything: guardrails and reconciliation live elsewhere.

pub mod http;
pub mod wire;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One rentable offer, as `POST /api/v0/bundles/` returns it (only the fields we use).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Offer {
    pub id: u64,
    pub gpu_name: String,
    pub num_gpus: u32,
    /// MB per GPU, as the API reports it.
    pub gpu_ram_mb: f64,
    /// $/h including storage for the disk size asked for.
    pub dph_total: f64,
    /// 0..1
    pub reliability: f64,
    pub verified: bool,
    pub geolocation: Option<String>,
    pub public_ip: Option<String>,
    /// Current minimum interruptible bid, $/h for the whole offer; `None` when not reported.
    #[serde(default)]
    pub min_bid: Option<f64>,
    /// The host (`machine_id`), when reported.
    #[serde(default)]
    pub machine_id: Option<u64>,
    /// `storage_total_cost`: $/h of the disk asked for, inside `dph_total` and billed beside
    /// a bid (a bid is for the machine); `None` when not reported.
    #[serde(default)]
    pub storage_dph: Option<f64>,
}

/// Which offers to search for. Built from `[vast.offers]` plus the tool's arguments.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct OfferQuery {
    pub gpu_names: Vec<String>,
    pub max_dph: Option<f64>,
    pub min_reliability: Option<f64>,
    pub min_gpu_ram_gb: Option<f64>,
    pub verified_only: bool,
    pub interruptible: bool,
    pub disk_gb: f64,
    pub limit: u32,
    /// Hosts (`machine_id`) that failed us: left out with `{"machine_id": {"notin": [...]}}`.
    pub exclude_machines: Vec<u64>,
}

/// One of our instances as `GET /api/v1/instances/` shows it. Strings are trimmed; status
/// values are kept as given (an unknown one stays opaque).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Instance {
    pub id: u64,
    pub label: Option<String>,
    /// `None` while provisioning; else e.g. loading, running, exited, offline, or anything new.
    pub actual_status: Option<String>,
    pub intended_status: Option<String>,
    pub cur_state: Option<String>,
    #[serde(default)]
    pub next_state: Option<String>,
    /// An interruptible (bid) instance.
    #[serde(default)]
    pub is_bid: Option<bool>,
    /// The host it runs on.
    #[serde(default)]
    pub machine_id: Option<u64>,
    /// $/h of its disk (`storage_total_cost`), billed while stopped too.
    #[serde(default)]
    pub storage_dph: Option<f64>,
    pub status_msg: Option<String>,
    pub gpu_name: Option<String>,
    pub num_gpus: Option<u32>,
    pub dph_total: Option<f64>,
    pub public_ip: Option<String>,
    /// Unix seconds.
    pub start_date: Option<f64>,
    /// The image it was created with, as requested (`image_uuid`).
    #[serde(default)]
    pub image_uuid: Option<String>,
}

/// Everything a create needs. `env` already has `FLEETAGENT_LABEL` and resolved credentials.
#[derive(Debug, Clone, PartialEq)]
pub struct CreateRequest {
    pub offer_id: u64,
    pub image: String,
    pub disk_gb: f64,
    pub label: String,
    pub env: BTreeMap<String, String>,
    /// A shell command run as the container's main process (`/bin/sh -c`), replacing the
    /// image's entrypoint; `None` keeps the image's own entrypoint.
    pub onstart: Option<String>,
    /// Bid in $/h for an interruptible instance; `None` for on-demand.
    pub bid_price: Option<f64>,
    /// Registry login for a private image (`-u USER -p TOKEN registry`): a secret, sent as
    /// `image_login` and nowhere else.
    pub image_login: Option<crate::secrets::Secret>,
}

/// Whether a listing's error (as recorded) is the account's, not one host's: a rate limit,
/// vast.ai failing (5xx), the daily search quota. Another host with the same key meets it
/// too.
pub fn is_account_wide(error: &str) -> bool {
    ["vast.ai rate limit", "vast.ai HTTP 5", "search quota"]
        .iter()
        .any(|s| error.contains(s))
}

/// When vast.ai's search quota refills, as shown: its `X-RateLimit-Reset` (outside text: a
/// time, so only the characters of one, at most 40), or "its daily reset" without one.
pub fn quota_until(reset: &str) -> String {
    let shown: String = reset
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || " :+-.,".contains(*c))
        .take(40)
        .collect();
    if shown.trim().is_empty() {
        "its daily reset".to_string()
    } else {
        shown
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum VastError {
    /// `auth_error` (401/403/404 with that code) or a missing key.
    #[error("vast.ai refused the API key: {0}")]
    Auth(String),
    /// HTTP 410 `deprecated_endpoint`: never read as "no instances".
    #[error("vast.ai endpoint is deprecated: {0}")]
    Deprecated(String),
    /// Still rate limited after the retries.
    #[error("vast.ai rate limit: {0}")]
    RateLimited(String),
    /// HTTP 429 `search_quota_exceeded`: the daily search quota is spent until `reset`
    /// (`X-RateLimit-Reset` as sent, "" without one). Never retried.
    #[error("vast.ai search quota exhausted until {}", quota_until(reset))]
    SearchQuota { reset: String },
    /// The offer is gone (404/410 `no_such_ask`).
    #[error("offer {0} is no longer available")]
    NoSuchAsk(u64),
    /// The instance does not exist (404 `no_such_instance`).
    #[error("no such instance {0}")]
    NoSuchInstance(u64),
    /// A create that failed but named an instance (`success:false` with `new_contract`).
    #[error("create failed ({msg}) but vast.ai created instance {new_contract}")]
    CreateFailed { new_contract: u64, msg: String },
    /// Any other answer the API gave: HTTP status, `error` code, `msg`.
    #[error("vast.ai HTTP {status} {code}: {msg}")]
    Api {
        status: u16,
        code: String,
        msg: String,
    },
    /// Connection failure or timeout.
    #[error("vast.ai unreachable: {0}")]
    Transport(String),
    /// Not sent: vast.ai left an earlier request of this process unanswered (`{0}` says which
    /// and how long it was waited for). One hung vast.ai costs a process one wait, not one
    /// per call.
    #[error(
        "vast.ai did not answer earlier in this process ({0}); not asked again by this process"
    )]
    Unanswered(String),
    /// A body that is not what the API documents.
    #[error("vast.ai answered something unreadable: {0}")]
    Decode(String),
    /// Not sent: the caller's hand-brake held it when it could have gone (a pause pressed
    /// while it waited for the create spacing or a 429's retry).
    #[error("not sent to vast.ai: {0}")]
    Withheld(String),
}

impl VastError {
    /// The error with `secret` (and any long piece of it) cut out of its texts.
    pub fn scrubbed(self, secret: &str) -> VastError {
        let r = |t: String| crate::secrets::redact(&t, secret);
        match self {
            VastError::Auth(m) => VastError::Auth(r(m)),
            VastError::RateLimited(m) => VastError::RateLimited(r(m)),
            VastError::CreateFailed { new_contract, msg } => VastError::CreateFailed {
                new_contract,
                msg: r(msg),
            },
            VastError::Api { status, code, msg } => VastError::Api {
                status,
                code: r(code),
                msg: r(msg),
            },
            VastError::Transport(m) => VastError::Transport(r(m)),
            VastError::Decode(m) => VastError::Decode(r(m)),
            other => other,
        }
    }
}

impl VastError {
    /// Whether a failed create may still have rented an instance: the request went out and
    /// no clear refusal came back (a timeout, a dropped connection, a gateway error, an
    /// unreadable answer), or vast.ai named the instance it made anyway. The caller must look
    /// for the launch's label in the listing before renting again.
    pub fn may_have_created(&self) -> bool {
        match self {
            VastError::Transport(_) | VastError::Decode(_) | VastError::CreateFailed { .. } => true,
            VastError::Api { status, .. } => *status >= 500,
            _ => false,
        }
    }
}

/// vast.ai's clock as an answer gave it (its HTTP `Date`, to the second), and when that
/// answer came on this process's monotonic clock: an outside clock for a host whose own
/// stepped, even between the answer and the moment its skew is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerClock {
    /// The answer's `Date`.
    pub server_ms: crate::clock::Millis,
    /// When the answer came (monotonic: a step of the wall clock does not move it).
    pub received: std::time::Instant,
}

impl ServerClock {
    /// How far this host's clock, reading `host_now` now, is ahead of vast.ai's (negative:
    /// behind): vast.ai's time now is its `Date` plus the monotonic time since the answer
    /// came. A wall clock set right between the listing and the moment a pass or `poll`
    /// stores the skew is measured as set right (a re-test: a pass stored the slow clock's
    /// skew after a `poll` had repaired, and the next listing "repaired" again, a pause and a
    /// wake two hours late). It includes the answer's way back and `Date`'s truncation to
    /// the second (under 2 s on a sound link).
    pub fn skew_at(&self, host_now: crate::clock::Millis) -> crate::clock::Millis {
        let since = self.received.elapsed().as_millis();
        host_now - self.server_ms - crate::clock::Millis::try_from(since).unwrap_or(0)
    }
}

/// The HTTP `Date` of an answer (IMF-fixdate, `Sun, 06 Nov 1994 08:49:37 GMT`), in ms; None
/// when it is not one.
pub fn http_date_ms(value: &str) -> Option<crate::clock::Millis> {
    chrono::DateTime::parse_from_rfc2822(value.trim())
        .ok()
        .map(|d| d.timestamp_millis())
}

pub trait VastClient: Send + Sync {
    fn search_offers(&self, query: &OfferQuery) -> Result<Vec<Offer>, VastError>;
    /// Rent an offer; returns the new instance id (`new_contract`). Never retried blindly
    /// once the request may have reached vast.ai: see [`VastError::may_have_created`].
    fn create_instance(&self, req: &CreateRequest) -> Result<u64, VastError>;
    /// [`VastClient::create_instance`], unless `withhold` gives a reason not to at the moment
    /// the create could go (after the create spacing, and before each attempt after a 429):
    /// then [`VastError::Withheld`], nothing sent. An operator's pause pressed while a
    /// launch waits must hold it.
    fn create_instance_unless(
        &self,
        req: &CreateRequest,
        withhold: &dyn Fn() -> Option<String>,
    ) -> Result<u64, VastError> {
        if let Some(why) = withhold() {
            return Err(VastError::Withheld(why));
        }
        self.create_instance(req)
    }
    /// Every instance on the account (all pages).
    fn list_instances(&self) -> Result<Vec<Instance>, VastError>;
    /// One instance; `Ok(None)` when it no longer exists.
    fn show_instance(&self, id: u64) -> Result<Option<Instance>, VastError>;
    fn stop_instance(&self, id: u64) -> Result<(), VastError>;
    /// [`VastClient::stop_instance`], unless `withhold` gives a reason not to before an
    /// attempt (a retry after a 429 included): then [`VastError::Withheld`].
    fn stop_instance_unless(
        &self,
        id: u64,
        withhold: &dyn Fn() -> Option<String>,
    ) -> Result<(), VastError> {
        if let Some(why) = withhold() {
            return Err(VastError::Withheld(why));
        }
        self.stop_instance(id)
    }
    /// Start a stopped instance again (`{"state": "running"}`); it may sit scheduling.
    fn start_instance(&self, id: u64) -> Result<(), VastError>;
    /// Change the bid of an interruptible instance to `price` $/h.
    fn change_bid(&self, id: u64, price: f64) -> Result<(), VastError>;
    /// Destroying an instance that is already gone is success.
    fn destroy_instance(&self, id: u64) -> Result<(), VastError>;
    /// [`VastClient::destroy_instance`], unless `withhold` gives a reason not to at the
    /// moment the destroy could go (after the destroy spacing): then
    /// [`VastError::Withheld`], nothing sent. A pause pressed while a pass's destroy waits
    /// must hold it (a race walkthrough saw one sent 2.9 s after `pause` returned).
    fn destroy_instance_unless(
        &self,
        id: u64,
        withhold: &dyn Fn() -> Option<String>,
    ) -> Result<(), VastError> {
        if let Some(why) = withhold() {
            return Err(VastError::Withheld(why));
        }
        self.destroy_instance(id)
    }
    fn label_instance(&self, id: u64, label: &str) -> Result<(), VastError>;
    /// The last `tail` lines of the container log.
    fn instance_logs(&self, id: u64, tail: u32) -> Result<String, VastError>;
    /// A create this account sent at `at` from another process (the action ledger knows):
    /// the next create is spaced after it, as vast.ai spaces creates per key, not per process.
    fn previous_create(&self, _at: crate::clock::Millis) {}
    /// Forget that an earlier request of this process went unanswered, so the next call is
    /// sent (and waited for) again: for an operator's own destroy, which must be tried even
    /// after the listing hung. A pass never calls it: one hung vast.ai costs a pass one wait.
    fn ask_again(&self) {}
    /// vast.ai's clock as its last answer of this process gave it (None: no answer with a
    /// `Date` yet, or a client without one, as the simulator's).
    fn server_clock(&self) -> Option<ServerClock> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The account's failures, as their errors read, are told from a host's own: a follower
    /// lists every minute only for the latter, and doctor names the account for the former.
    #[test]
    fn account_wide_failures_are_told_from_a_hosts_own() {
        let account = [
            VastError::RateLimited("429 after 3 tries".into()),
            VastError::SearchQuota { reset: "".into() },
            VastError::Api {
                status: 503,
                code: "".into(),
                msg: "upstream".into(),
            },
        ];
        for e in account {
            assert!(is_account_wide(&e.to_string()), "{e}");
        }
        let host = [
            VastError::Auth("no key".into()),
            VastError::Transport("connection refused".into()),
            VastError::Api {
                status: 400,
                code: "bad_request".into(),
                msg: "x".into(),
            },
            VastError::Decode("not JSON".into()),
        ];
        for e in host {
            assert!(!is_account_wide(&e.to_string()), "{e}");
        }
    }
}
