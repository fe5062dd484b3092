//! The ureq implementation of [`VastClient`] against vast.ai's REST API
//! (shared/reference/vastai-api.md): the HTTP transport and its retries. The request shapes
//! and the lenient parsing are in [`super::wire`]; vast.ai's per-endpoint rate limits (create
//! spacing, the penalty, 429 waits) in [`crate::ratelimit::spacing`]. It never decides
//! whether to rent or stop anything, and never lets the API key leave the `Authorization`
//! header.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Map, Value};

use super::wire::{
    as_id, create_body, cut, excerpt, headers, instances_found, is_loopback, list_query,
    offer_query_body, Answer,
};
use super::{CreateRequest, Instance, Offer, OfferQuery, VastClient, VastError};
use crate::clock::{Clock, Millis};
use crate::ratelimit::spacing::{
    retry_after_secs, CreateGate, CreateTurn, Spacer, DESTROY_SPACING, LIST_PAGE_SPACING,
};

// Where these lived before the split (`sim` still takes `wait_after_429` from here).
pub use super::wire::{last_lines, parse_instance, parse_offer};
pub use crate::ratelimit::spacing::{threshold_secs, wait_after_429};

/// Attempts per call, the first included (the simulator's vast.ai retries as this client).
pub const MAX_ATTEMPTS: u32 = 4;
pub const FIRST_BACKOFF: Duration = Duration::from_millis(500);
/// One call (a request with its retries and their waits) is bounded by this many exchange
/// timeouts (`vast.timeout_secs`): a retry is made only when its wait and a whole exchange
/// still fit, so a request left unanswered is tried twice at most. A rate limit that asks
/// for a longer wait fails the call instead (a daily search quota can ask for hours); the
/// caller retries on a later pass. Create spacing before the first attempt is fleetagent's
/// own pacing and not counted. At the default 20 s this is the minute the waits had before.
pub const CALL_BUDGET_TIMEOUTS: u32 = 3;

/// The longest one call may take with its retries: [`CALL_BUDGET_TIMEOUTS`] exchanges, and
/// for a create at least room for one retry after a 429 (the wait it implies, vast.ai's
/// create interval and 12 s penalty, then two exchanges): DESIGN.md retries a 429, and with
/// `vast.timeout_secs` at 5 or below three exchanges left no room for it. At the default 20 s
/// it is three exchanges either way.
pub fn call_budget_of(timeout: Duration, is_create: bool) -> Duration {
    let exchanges = timeout * CALL_BUDGET_TIMEOUTS;
    if !is_create {
        return exchanges;
    }
    use crate::ratelimit::spacing::{CREATE_PENALTY, CREATE_SPACING};
    exchanges.max(CREATE_SPACING + CREATE_PENALTY + timeout * 2)
}
/// 1,500 instances, a page a second: far beyond any fleet; a server that never ends its pages
/// is stopped within a minute (400 pages held `poll`, started every minute, for 400 s).
const MAX_PAGES: usize = 60;
/// Secrets shorter than this are not cut from what vast.ai and the hosts say
/// ([`HttpVastClient::with_secrets`]).
pub const SCRUB_MIN_CHARS: usize = 6;
/// The official client polls a log's `result_url` 30 times, 0.3 s apart.
const LOG_POLLS: u32 = 30;
const LOG_POLL_GAP: Duration = Duration::from_millis(300);
const MAX_BODY_BYTES: u64 = 16 * 1024 * 1024;
const NO_KEY: &str = "no vast.ai API key: set VAST_API_KEY or provide the vast_api_key \
                      credential ($CREDENTIALS_DIRECTORY/vast_api_key)";

/// A [`VastClient`] speaking HTTP to `base_url` (`https://console.vast.ai`, or a fake).
pub struct HttpVastClient {
    base_url: String,
    api_key: Option<String>,
    clock: Arc<dyn Clock>,
    agent: ureq::Agent,
    timeout: Duration,
    /// Set by the first API request left unanswered (a timeout): every later call fails at
    /// once with [`VastError::Unanswered`] instead of waiting again.
    unanswered: Mutex<Option<String>>,
    /// vast.ai's clock as its last API answer with a `Date` gave it.
    server_clock: Mutex<Option<super::ServerClock>>,
    /// When this client last sent a create (vast.ai's create spacing); held for a whole
    /// create so creates from several threads of one process queue up behind it.
    create_gate: CreateGate,
    /// Destroys of one process go 3 s apart (vast.ai's DELETE interval).
    destroy_gap: Spacer,
    /// Every other secret the process can read (`secrets::known_values`: the worker env's
    /// credentials, the registry login, the LLM key, ...), redacted with the key from what vast.ai
    /// or a host says before anything quotes it: a container log, a status message, an error
    /// that echoes a request body.
    secrets: Vec<String>,
}

impl fmt::Debug for HttpVastClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpVastClient")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "[redacted]"))
            .field("timeout", &self.timeout)
            .finish()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Method {
    Get,
    Post,
    Put,
    Delete,
}

impl Method {
    fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Delete => "DELETE",
        }
    }
}

/// A create's hand-brake ([`VastClient::create_instance_unless`]): a reason not to send it.
type Withhold<'a> = &'a dyn Fn() -> Option<String>;

/// A request that got no HTTP answer.
struct TransportFailure {
    text: String,
    /// The failure happened before the request could reach the server (DNS, connect).
    never_sent: bool,
    /// No answer within the time allowed (connect or exchange).
    timed_out: bool,
    /// It answered, with a body over [`MAX_BODY_BYTES`]: reached, not readable.
    too_big: bool,
}

impl HttpVastClient {
    /// `api_key` is resolved by the caller (env `VAST_API_KEY` or the `vast_api_key`
    /// credential); `None` makes every call fail with [`VastError::Auth`] without sending
    /// anything. Every wait (backoff, create spacing, log polling) sleeps on `clock`.
    /// `timeout` (`vast.timeout_secs`) bounds one HTTP exchange, body included, and
    /// [`CALL_BUDGET_TIMEOUTS`] of it one call with its retries.
    pub fn new(
        base_url: &str,
        api_key: Option<String>,
        clock: Arc<dyn Clock>,
        timeout: Duration,
    ) -> Self {
        crate::faults::stats::http_client_built();
        let base_url = base_url.trim().trim_end_matches('/').to_string();
        let mut config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(timeout))
            .timeout_connect(Some(timeout.min(Duration::from_secs(10))))
            .user_agent(concat!("fleetagent/", env!("CARGO_PKG_VERSION")));
        if is_loopback(&base_url) {
            // A proxy from the environment must not capture a local (test) endpoint.
            config = config.proxy(None);
        }
        HttpVastClient {
            base_url,
            api_key: api_key.map(|k| k.trim().to_string()),
            clock,
            agent: config.build().into(),
            timeout,
            unanswered: Mutex::new(None),
            server_clock: Mutex::new(None),
            create_gate: CreateGate::new(),
            destroy_gap: Spacer::new(DESTROY_SPACING),
            secrets: Vec::new(),
        }
    }

    /// The client with `secrets` redacted, as the key is, from every text outside it says
    /// (logs, `status_msg`, errors): `services::build_vast` gives it every secret the
    /// process can read.
    /// A value under [`SCRUB_MIN_CHARS`] is left out: a local server's stand-in key
    /// (`local`, the docs' example) is no secret, and cut from every log it turned
    /// `localhost` into `[redacted]host`.
    pub fn with_secrets(mut self, mut secrets: Vec<String>) -> Self {
        secrets.retain(|s| s.chars().count() >= SCRUB_MIN_CHARS);
        self.secrets = secrets;
        self
    }

    fn key(&self) -> Result<&str, VastError> {
        match self.api_key.as_deref() {
            None | Some("") => Err(VastError::Auth(NO_KEY.into())),
            Some(k) if !k.bytes().all(|b| b.is_ascii_graphic()) => Err(VastError::Auth(
                "the vast.ai API key holds spaces or non-ASCII characters; check VAST_API_KEY \
                 or the vast_api_key credential"
                    .into(),
            )),
            Some(k) => Ok(k),
        }
    }

    /// Text that may have come from the server, with the key cut out wherever it appears.
    /// For text that is shown (errors, logs): the key and any piece of it.
    /// Every other known secret too ([`Self::with_secrets`]): an error that echoes a create's
    /// body quotes its `env`, whose credential values are the worker's secrets.
    fn scrub(&self, text: &str) -> String {
        let text = match self.api_key.as_deref() {
            Some(k) => crate::secrets::redact(text, k),
            None => text.to_string(),
        };
        crate::secrets::redact_all(&text, &self.secrets)
    }

    /// An instance as listed, its `status_msg` (the host's words) scrubbed.
    fn scrubbed_instance(&self, mut i: Instance) -> Instance {
        i.status_msg = i.status_msg.map(|m| self.scrub(&m));
        i
    }

    /// For a body about to be parsed: the whole key only (see [`crate::secrets::redact`]).
    fn scrub_whole(&self, text: &str) -> String {
        let text = match self.api_key.as_deref() {
            Some(k) if k.len() >= 4 => text.replace(k, "[redacted]"),
            _ => text.to_string(),
        };
        // Every other known secret too, whole, before any excerpt cuts one short of the
        // pieces `scrub` matches (a 400 echoing the create body as text kept 9 characters of
        // the worker's credential: the re-test).
        self.secrets
            .iter()
            .fold(text, |t, s| t.replace(s.as_str(), "[redacted]"))
    }

    fn sleep(&self, d: Duration) {
        if !d.is_zero() {
            self.clock.sleep(d);
        }
    }

    /// The longest one call but a create may take with its retries ([`call_budget_of`]).
    pub fn call_budget(&self) -> Duration {
        call_budget_of(self.timeout, false)
    }

    /// Fails at once when vast.ai already left a request of this process unanswered.
    fn answering(&self) -> Result<(), VastError> {
        match self.unanswered.lock().map(|u| u.clone()) {
            Ok(Some(what)) => Err(VastError::Unanswered(what)),
            _ => Ok(()),
        }
    }

    /// Whether waiting `wait` from now still leaves a whole exchange before `deadline`.
    fn fits(&self, wait: Duration, deadline: Millis) -> bool {
        let end = self.clock.now_ms() + (wait + self.timeout).as_millis() as i64;
        end <= deadline
    }

    /// One HTTP exchange, no retries, bounded by `limit` (at most the client's timeout).
    /// `bearer` is `None` for the public log objects.
    fn exchange(
        &self,
        method: Method,
        url: &str,
        body: Option<&[u8]>,
        bearer: Option<&str>,
        limit: Duration,
    ) -> Result<Answer, TransportFailure> {
        let auth = bearer.map(|k| format!("Bearer {k}"));
        let payload = body.unwrap_or(b"{}");
        let auth = auth.as_deref();
        let result = match method {
            Method::Get => self.prepared(self.agent.get(url), auth, limit).call(),
            Method::Post => self
                .prepared(self.agent.post(url), auth, limit)
                .content_type("application/json")
                .send(payload),
            Method::Put => self
                .prepared(self.agent.put(url), auth, limit)
                .content_type("application/json")
                .send(payload),
            Method::Delete => self
                .prepared(self.agent.delete(url).force_send_body(), auth, limit)
                .content_type("application/json")
                .send(payload),
        };
        let mut response = result.map_err(|e| self.transport_failure(e, limit))?;
        let status = response.status().as_u16();
        if bearer.is_some() {
            // vast.ai's own answers (a log object is another server's): its clock, for a
            // host whose own stepped (`run::observe`, `doctor`).
            let date = response.headers().get("date").and_then(|v| v.to_str().ok());
            if let Some(server_ms) = date.and_then(super::http_date_ms) {
                let received = std::time::Instant::now();
                if let Ok(mut c) = self.server_clock.lock() {
                    *c = Some(super::ServerClock {
                        server_ms,
                        received,
                    });
                }
            }
        }
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .map(|s| s.trim().to_string());
        let rate_reset = response
            .headers()
            .get("x-ratelimit-reset")
            .and_then(|v| v.to_str().ok())
            .map(|s| crate::text::clip(s.trim(), 64));
        let bytes = response
            .body_mut()
            .with_config()
            .limit(MAX_BODY_BYTES)
            .read_to_vec()
            .map_err(|e| self.transport_failure(e, limit))?;
        // Scrubbed before anything quotes or cuts it: a cut could otherwise keep half a key.
        let text = self.scrub_whole(&String::from_utf8_lossy(&bytes));
        let (json, json_error) = match crate::json::parse_loose(&text) {
            Ok(v) => (Some(v), None),
            Err(e) => (None, Some(e.to_string())),
        };
        Ok(Answer {
            route: String::new(),
            status,
            retry_after,
            rate_reset,
            text,
            json,
            json_error,
        })
    }

    /// The request with its headers, bounded by `limit` when that is shorter than the
    /// client's timeout.
    fn prepared<B>(
        &self,
        rb: ureq::RequestBuilder<B>,
        auth: Option<&str>,
        limit: Duration,
    ) -> ureq::RequestBuilder<B> {
        let rb = headers(rb, auth);
        if limit < self.timeout {
            rb.config().timeout_global(Some(limit)).build()
        } else {
            rb
        }
    }

    fn transport_failure(&self, e: ureq::Error, limit: Duration) -> TransportFailure {
        let timed_out = matches!(e, ureq::Error::Timeout(_));
        let never_sent = match &e {
            ureq::Error::HostNotFound | ureq::Error::ConnectionFailed => true,
            ureq::Error::Timeout(t) => {
                matches!(t, ureq::Timeout::Connect | ureq::Timeout::Resolve)
            }
            ureq::Error::Io(io) => io.kind() == std::io::ErrorKind::ConnectionRefused,
            _ => false,
        };
        let text = match &e {
            ureq::Error::Timeout(_) => format!("no answer within {limit:?} ({e})"),
            ureq::Error::BodyExceedsLimit(n) => format!("a body over {n} bytes"),
            _ => e.to_string(),
        };
        TransportFailure {
            text: self.scrub(&text),
            never_sent,
            timed_out,
            too_big: matches!(e, ureq::Error::BodyExceedsLimit(_)),
        }
    }

    /// Send an API call with the retries vast.ai's answers allow, within the call's budget
    /// ([`CALL_BUDGET_TIMEOUTS`]). Returns the final answer unless it was an auth failure, a
    /// deprecated endpoint, a rate limit that outlasted the retries, or a transport failure.
    /// A call that ends unanswered (a timeout) makes every later call of this client fail at
    /// once ([`VastError::Unanswered`]): one hung vast.ai costs a process one call's wait.
    /// `create` is the create gate, held by the caller: a create is spaced after the previous
    /// one, retried after a 429 (vast.ai refused it, so nothing was rented) and after a
    /// connection that never opened, and never retried after anything else, because the rent
    /// may have gone through.
    fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        mut create: Option<(Option<&mut CreateTurn<'_>>, Withhold<'_>)>,
    ) -> Result<Answer, VastError> {
        let key = self.key()?;
        self.answering()?;
        let url = format!("{}{}", self.base_url, path);
        let route = format!(
            "{} {}",
            method.as_str(),
            path.split('?').next().unwrap_or(path)
        );
        let payload = body.map(|b| serde_json::to_vec(b).unwrap_or_else(|_| b"{}".to_vec()));
        // A withhold without a create turn: a destroy, asked again before each attempt.
        let is_create = create.as_ref().is_some_and(|(t, _)| t.is_some());
        let mut backoff = FIRST_BACKOFF;
        let mut attempt = 1;
        let mut deadline: Option<Millis> = None;
        loop {
            if let Some((turn, withhold)) = create.as_mut() {
                if let Some(turn) = turn.as_mut() {
                    turn.space(self.clock.as_ref());
                }
                if let Some(why) = withhold() {
                    return Err(VastError::Withheld(why));
                }
            }
            let deadline = *deadline.get_or_insert_with(|| {
                self.clock.now_ms() + call_budget_of(self.timeout, is_create).as_millis() as i64
            });
            let last_attempt = attempt >= MAX_ATTEMPTS;
            let exchanged =
                self.exchange(method, &url, payload.as_deref(), Some(key), self.timeout);
            let mut answer = match exchanged {
                Ok(a) => a,
                Err(f) => {
                    let retry = !is_create || f.never_sent;
                    if retry && !last_attempt && self.fits(backoff, deadline) {
                        log::info!("vast.ai {route}: {}; retrying in {backoff:?}", f.text);
                        self.sleep(backoff);
                        backoff *= 2;
                        attempt += 1;
                        continue;
                    }
                    if f.timed_out {
                        if let Ok(mut u) = self.unanswered.lock() {
                            u.get_or_insert_with(|| format!("{route}: {}", f.text));
                        }
                    }
                    if f.too_big {
                        // Reached, and it answered: not "unreachable".
                        return Err(VastError::Decode(format!("{route}: {}", f.text)));
                    }
                    return Err(VastError::Transport(if is_create && !f.never_sent {
                        format!(
                            "{route}: {}; the create may have gone through: look for its label \
                             before renting again",
                            f.text
                        )
                    } else {
                        format!("{route}: {}", f.text)
                    }));
                }
            };
            if answer.code() == "auth_error" || answer.status == 401 {
                return Err(VastError::Auth(self.scrub(&format!(
                    "HTTP {} on {route}: {} (check VAST_API_KEY or the vast_api_key credential)",
                    answer.status,
                    answer.msg()
                ))));
            }
            if answer.status == 410 && answer.code() == "deprecated_endpoint" {
                return Err(VastError::Deprecated(
                    self.scrub(&format!("{route}: {}", answer.msg())),
                ));
            }
            if answer.status == 429 && answer.code() == "search_quota_exceeded" {
                // The daily search quota: its Retry-After can be hours; never retried.
                return Err(VastError::SearchQuota {
                    reset: self.scrub(answer.rate_reset.as_deref().unwrap_or("")),
                });
            }
            if answer.status == 429 {
                let wait = wait_after_429(
                    answer.retry_after.as_deref(),
                    &answer.text,
                    is_create,
                    backoff,
                );
                // A read waits out more of them within the call's budget: two processes
                // paging one key's listing at vast.ai's 1 s limit (a poll beside a run, at
                // 200 instances 8 pages each) refused each other until one gave up blind
                // (the scale walkthrough); the doubling waits part them.
                let cap = match method {
                    Method::Get => MAX_ATTEMPTS * 2,
                    _ => MAX_ATTEMPTS,
                };
                if attempt >= cap || !self.fits(wait, deadline) {
                    return Err(VastError::RateLimited(self.scrub(&format!(
                        "{route}: {} (after {attempt} attempt(s); wait {:.1} s)",
                        answer.msg(),
                        wait.as_secs_f64()
                    ))));
                }
                log::info!("vast.ai {route}: HTTP 429, waiting {wait:?}");
                self.sleep(wait);
                backoff *= 2;
                attempt += 1;
                continue;
            }
            // 500 too: all but a create are idempotent (a panic button's DELETE got one try).
            if matches!(answer.status, 500 | 502..=504) && !is_create && !last_attempt {
                let wait = retry_after_secs(answer.retry_after.as_deref())
                    .map_or(backoff, |r| r.max(backoff));
                if self.fits(wait, deadline) {
                    log::info!(
                        "vast.ai {route}: HTTP {}, retrying in {wait:?}",
                        answer.status
                    );
                    self.sleep(wait);
                    backoff *= 2;
                    attempt += 1;
                    continue;
                }
            }
            answer.route.clone_from(&route);
            return Ok(answer);
        }
    }

    fn api_error(&self, answer: &Answer) -> VastError {
        let code = match answer.code() {
            c if !c.is_empty() => c,
            _ if answer.ok() => "success_false".to_string(),
            _ => "http_error".to_string(),
        };
        VastError::Api {
            status: answer.status,
            code: self.scrub(&cut(&code, 64)),
            msg: self.scrub(&format!("{}: {}", answer.route, answer.msg())),
        }
    }

    /// The JSON object of a successful answer: 2xx, a JSON object, and not `success: false`.
    fn expect_ok<'a>(&self, answer: &'a Answer) -> Result<&'a Map<String, Value>, VastError> {
        if !answer.ok() {
            return Err(self.api_error(answer));
        }
        let Some(obj) = answer.json.as_ref().and_then(Value::as_object) else {
            return Err(VastError::Decode(self.scrub(&format!(
                "{}: HTTP {} without a JSON object{}: {}",
                answer.route,
                answer.status,
                answer
                    .json_error
                    .as_deref()
                    .filter(|_| !answer.text.trim().is_empty())
                    .map_or(String::new(), |e| format!(" ({})", crate::text::clip(e, 120))),
                excerpt(&answer.text)
            ))));
        };
        if answer.success_false() {
            return Err(self.api_error(answer));
        }
        Ok(obj)
    }

    fn decode(&self, what: &str) -> VastError {
        VastError::Decode(self.scrub(what))
    }
}

impl VastClient for HttpVastClient {
    fn ask_again(&self) {
        if let Ok(mut u) = self.unanswered.lock() {
            *u = None;
        }
    }

    fn search_offers(&self, query: &OfferQuery) -> Result<Vec<Offer>, VastError> {
        let body = offer_query_body(query);
        let answer = self.send(Method::Post, "/api/v0/bundles/", Some(&body), None)?;
        let obj = self.expect_ok(&answer)?;
        match obj.get("offers") {
            Some(Value::Array(rows)) => Ok(rows.iter().filter_map(parse_offer).collect()),
            Some(Value::Null) => Ok(Vec::new()),
            _ => Err(self.decode(&format!(
                "offer search answer without an `offers` list: {}",
                excerpt(&answer.text)
            ))),
        }
    }

    fn previous_create(&self, at: Millis) {
        self.create_gate.previous_create(at);
    }

    /// Rents `req.offer_id` (`PUT /api/v0/asks/{id}/`). Creates are spaced 4.5 s apart
    /// (after this client's last create, or the one [`VastClient::previous_create`] reported),
    /// and a 429 is waited out (its implied wait plus vast.ai's 12 s
    /// penalty) and retried, since vast.ai refused that request. A timeout, a dropped
    /// connection, a gateway error (5xx) or an unreadable 2xx is NOT retried: the rent may
    /// have gone through, and only the listing can tell. Such errors answer `true` to
    /// [`VastError::may_have_created`]; reconcile by label before renting again.
    /// `success: false` that still names `new_contract` (a bid too low for an interruptible)
    /// is [`VastError::CreateFailed`]: that instance exists and should be destroyed.
    fn create_instance(&self, req: &CreateRequest) -> Result<u64, VastError> {
        self.create_instance_unless(req, &|| None)
    }

    /// [`VastClient::create_instance`], with `withhold` asked after the create spacing and
    /// before each attempt after a 429. An error that echoes the body has the registry login
    /// cut out, and the worker env's credentials ([`Self::with_secrets`]).
    fn create_instance_unless(
        &self,
        req: &CreateRequest,
        withhold: &dyn Fn() -> Option<String>,
    ) -> Result<u64, VastError> {
        let login = req.image_login.as_ref().map(|l| l.expose().to_string());
        self.create(req, withhold).map_err(|e| match &login {
            Some(l) => e.scrubbed(l),
            None => e,
        })
    }

    fn server_clock(&self) -> Option<super::ServerClock> {
        self.server_clock.lock().ok().and_then(|c| *c)
    }

    /// Every page of `GET /api/v1/instances/` (25 rows each, ordered by id), following
    /// `next_token` until it is null or empty. The deprecated v0 list is never used, and a
    /// 410 anywhere is [`VastError::Deprecated`], never "no instances".
    fn list_instances(&self) -> Result<Vec<Instance>, VastError> {
        let mut out: Vec<Instance> = Vec::new();
        let mut rows_by_id: HashMap<u64, Value> = HashMap::new();
        let mut found = 0u64;
        let mut tokens = HashSet::new();
        let mut token: Option<String> = None;
        for page in 0..MAX_PAGES {
            if page > 0 {
                // vast.ai allows one list call a second.
                self.sleep(LIST_PAGE_SPACING);
            }
            let path = format!("/api/v1/instances/?{}", list_query(token.as_deref()));
            let answer = self.send(Method::Get, &path, None, None)?;
            let obj = self.expect_ok(&answer)?;
            // Read whole or not at all: what it leaves out reads as gone and is replaced while
            // it bills. The most any page counted holds (a count left off the last page).
            found = found.max(instances_found(obj));
            match obj.get("instances") {
                Some(Value::Array(rows)) => {
                    if page == 0 && rows.is_empty() && found > 0 {
                        return Err(self.decode(&format!(
                            "instance list says {found} instance(s) found and lists none"
                        )));
                    }
                    for row in rows {
                        let Some(i) = parse_instance(row, None) else {
                            return Err(self.decode(&format!(
                                "instance list row without a usable id (id {}): {}",
                                cut(&row.get("id").map_or("absent".into(), Value::to_string), 40),
                                excerpt(&row.to_string())
                            )));
                        };
                        match rows_by_id.get(&i.id) {
                            None => {
                                rows_by_id.insert(i.id, row.clone());
                                out.push(self.scrubbed_instance(i));
                            }
                            // The same row twice (pages that overlap): once.
                            Some(seen) if seen == row => {}
                            Some(_) => {
                                return Err(self.decode(&format!(
                                    "instance list has instance {} twice, in two different states: {}",
                                    i.id,
                                    excerpt(&row.to_string())
                                )))
                            }
                        }
                    }
                }
                // `null` for none, as the official client reads it (`or []`); not when the
                // same page counts some.
                Some(Value::Null) if page > 0 || found == 0 => {}
                Some(Value::Null) => {
                    return Err(self.decode(&format!(
                        "instance list says {found} instance(s) found and lists none (`instances` is null)"
                    )))
                }
                _ => {
                    return Err(self.decode(&format!(
                        "instance list page without an `instances` list: {}",
                        excerpt(&answer.text)
                    )))
                }
            }
            let next = match obj.get("next_token") {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) if s.trim().is_empty() => None,
                Some(Value::String(s)) => Some(s.clone()),
                Some(other) => {
                    return Err(self.decode(&format!(
                        "instance list next_token is not a string: {}",
                        excerpt(&other.to_string())
                    )))
                }
            };
            let Some(next) = next else {
                // The last page: every instance the listing counts must have been read (a
                // re-test saw a short last page, and an empty second one, read as the fleet).
                if (out.len() as u64) < found {
                    return Err(self.decode(&format!(
                        "instance list counts {found} instance(s) (`instances_found`) and lists {}",
                        out.len()
                    )));
                }
                return Ok(out);
            };
            if !tokens.insert(next.clone()) {
                return Err(self.decode("instance list repeated a next_token (a loop)"));
            }
            token = Some(next);
        }
        Err(self.decode(&format!(
            "instance list still had pages after {MAX_PAGES} of them"
        )))
    }

    /// `GET /api/v0/instances/{id}/`; `{"instances": null}` or a 404 mean gone.
    fn show_instance(&self, id: u64) -> Result<Option<Instance>, VastError> {
        let answer = self.send(Method::Get, &format!("/api/v0/instances/{id}/"), None, None)?;
        if answer.status == 404 && answer.json.is_some() {
            return Ok(None);
        }
        let obj = self.expect_ok(&answer)?;
        // Gone is said by `"instances": null` (or a 404): an answer without the key says
        // nothing, and taking it for gone would let a billing instance stop counting.
        match obj.get("instances") {
            Some(Value::Null) => Ok(None),
            Some(v @ Value::Object(_)) => {
                Ok(parse_instance(v, Some(id)).map(|i| self.scrubbed_instance(i)))
            }
            None => Err(self.decode(&format!(
                "instance {id}: no `instances` in the answer: {}",
                excerpt(&answer.text)
            ))),
            Some(_) => Err(self.decode(&format!(
                "instance {id}: `instances` is not an object: {}",
                excerpt(&answer.text)
            ))),
        }
    }

    fn stop_instance(&self, id: u64) -> Result<(), VastError> {
        self.stop_instance_unless(id, &|| None)
    }

    fn stop_instance_unless(&self, id: u64, withhold: Withhold<'_>) -> Result<(), VastError> {
        self.manage_unless(id, json!({"state": "stopped"}), Some(withhold))
    }

    fn start_instance(&self, id: u64) -> Result<(), VastError> {
        self.manage(id, json!({"state": "running"}))
    }

    /// `PUT /api/v0/instances/bid_price/{id}/` with `{"client_id": "me", "price": p}`.
    fn change_bid(&self, id: u64, price: f64) -> Result<(), VastError> {
        let path = format!("/api/v0/instances/bid_price/{id}/");
        let body = json!({"client_id": "me", "price": price});
        let answer = self.send(Method::Put, &path, Some(&body), None)?;
        if matches!(answer.code().as_str(), "no_such_instance" | "not_found") {
            return Err(VastError::NoSuchInstance(id));
        }
        self.expect_ok(&answer).map(|_| ())
    }

    /// `DELETE /api/v0/instances/{id}/`; `no_such_instance` (already gone) is success.
    fn destroy_instance(&self, id: u64) -> Result<(), VastError> {
        self.destroy_instance_unless(id, &|| None)
    }

    fn destroy_instance_unless(
        &self,
        id: u64,
        withhold: &dyn Fn() -> Option<String>,
    ) -> Result<(), VastError> {
        let path = format!("/api/v0/instances/{id}/");
        self.destroy_gap.space(self.clock.as_ref());
        let answer = self.send(
            Method::Delete,
            &path,
            Some(&json!({})),
            Some((None, withhold)),
        );
        self.destroy_gap.mark(self.clock.as_ref());
        let answer = answer?;
        if matches!(answer.code().as_str(), "no_such_instance" | "not_found") {
            return Ok(());
        }
        self.expect_ok(&answer).map(|_| ())
    }

    fn label_instance(&self, id: u64, label: &str) -> Result<(), VastError> {
        self.manage(id, json!({ "label": label }))
    }

    /// Asks for the log (`PUT .../request_logs/{id}/`), then fetches its `result_url`
    /// without credentials until it exists (30 tries, 0.3 s apart). Returns at most the
    /// last `tail` lines.
    fn instance_logs(&self, id: u64, tail: u32) -> Result<String, VastError> {
        let path = format!("/api/v0/instances/request_logs/{id}/");
        let body = json!({ "tail": tail.to_string() });
        let answer = self.send(Method::Put, &path, Some(&body), None)?;
        if answer.status == 404
            && matches!(
                answer.code().as_str(),
                "no_such_instance" | "invalid_id" | "not_found"
            )
        {
            return Err(VastError::NoSuchInstance(id));
        }
        let obj = self.expect_ok(&answer)?;
        let url = obj
            .get("result_url")
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|u| u.starts_with("https://") || u.starts_with("http://"))
            .ok_or_else(|| {
                self.decode(&format!(
                    "log request for {id} without a usable result_url: {}",
                    excerpt(&answer.text)
                ))
            })?
            .to_string();
        // The polls share one call's budget: a log store that hangs costs at most that.
        let deadline = self.clock.now_ms() + self.call_budget().as_millis() as i64;
        let mut last = String::new();
        let mut polls = 0;
        while polls < LOG_POLLS {
            if polls > 0 {
                self.sleep(LOG_POLL_GAP);
            }
            let left = deadline - self.clock.now_ms();
            if left <= 0 {
                break;
            }
            polls += 1;
            let limit = Duration::from_millis(left as u64);
            match self.exchange(Method::Get, &url, None, None, limit) {
                // A host's log may show any secret (a start script under `set -x`, an `env`
                // dump): scrubbed before the model, the database or `history` see it.
                Ok(a) if a.status == 200 => return Ok(self.scrub(&last_lines(&a.text, tail))),
                Ok(a) => last = format!("HTTP {}", a.status),
                Err(f) => last = f.text,
            }
        }
        Err(VastError::Api {
            status: 0,
            code: "logs_not_ready".into(),
            msg: self.scrub(&format!(
                "log of instance {id} not ready after {polls} polls (last: {last})"
            )),
        })
    }
}

mod manage;

#[cfg(test)]
mod tests;
