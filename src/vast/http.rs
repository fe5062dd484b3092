//! The ureq implementation of [`VastClient`] against vast.ai's REST API
//! (shared/reference/vastai-api.md): request shapes, lenient parsing, retries and vast.ai's
//! per-endpoint rate limits. It never decides whether to rent or stop anything, and never
//! lets the API key leave the `Authorization` header.

use std::collections::HashSet;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Map, Value};

use super::{CreateRequest, Instance, Offer, OfferQuery, VastClient, VastError};
use crate::clock::{Clock, Millis};

/// vast.ai allows one create per 4.5 s per key (create_instance.yaml `x-rate-limit`).
const CREATE_SPACING: Duration = Duration::from_millis(4_500);
/// Added to the spacing between our creates: vast.ai measures arrivals, we measure sends, and
/// a first request that must open its connection arrives later than the next one.
const CREATE_MARGIN: Duration = Duration::from_millis(250);
/// ...and blocks creates for 12 s after that limit is broken.
const CREATE_PENALTY: Duration = Duration::from_secs(12);
/// Attempts per call, the first included.
const MAX_ATTEMPTS: u32 = 4;
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
/// A rate limit that asks for a longer wait than this fails the call instead (a daily search
/// quota can ask for hours); the caller retries on a later pass.
const MAX_WAIT: Duration = Duration::from_secs(60);
/// The v1 list serves at most 25 rows a page.
const LIST_PAGE: u32 = 25;
/// 10 000 instances: far beyond any fleet; stops a server that never ends its pages.
const MAX_PAGES: usize = 400;
/// The official client polls a log's `result_url` 30 times, 0.3 s apart.
const LOG_POLLS: u32 = 30;
const LOG_POLL_GAP: Duration = Duration::from_millis(300);
const MAX_BODY_BYTES: u64 = 16 * 1024 * 1024;
/// Error messages are cut to this many characters; bodies quoted in errors to EXCERPT_CHARS.
const MSG_CHARS: usize = 300;
const EXCERPT_CHARS: usize = 120;
const NO_KEY: &str = "no vast.ai API key: set VAST_API_KEY or provide the vast_api_key \
                      credential ($CREDENTIALS_DIRECTORY/vast_api_key)";

/// A [`VastClient`] speaking HTTP to `base_url` (`https://console.vast.ai`, or a fake).
pub struct HttpVastClient {
    base_url: String,
    api_key: Option<String>,
    clock: Arc<dyn Clock>,
    agent: ureq::Agent,
    timeout: Duration,
    /// When this client last sent a create; held for a whole create so creates from
    /// several threads of one process queue up behind vast.ai's spacing.
    create_gate: Mutex<Option<Millis>>,
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

/// One HTTP answer, whatever its status.
#[derive(Debug)]
struct Answer {
    /// `METHOD /path/` it answered (set by `send`), for error messages.
    route: String,
    status: u16,
    retry_after: Option<String>,
    text: String,
    json: Option<Value>,
}

impl Answer {
    fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }

    fn field(&self, name: &str) -> Option<&Value> {
        self.json.as_ref().and_then(|j| j.get(name))
    }

    /// The `error` code of a JSON error body, or "".
    fn code(&self) -> String {
        self.field("error")
            .and_then(Value::as_str)
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    }

    fn success_false(&self) -> bool {
        self.field("success") == Some(&Value::Bool(false))
    }

    /// The server's own words: `msg`, `message`, `detail` or `error`, else a body excerpt.
    fn msg(&self) -> String {
        for key in ["msg", "message", "detail", "error"] {
            if let Some(s) = self.field(key).and_then(Value::as_str) {
                if !s.trim().is_empty() {
                    return cut(s.trim(), MSG_CHARS);
                }
            }
        }
        if self.text.trim().is_empty() {
            format!("empty body (HTTP {})", self.status)
        } else {
            excerpt(&self.text)
        }
    }
}

/// A request that got no HTTP answer.
struct TransportFailure {
    text: String,
    /// The failure happened before the request could reach the server (DNS, connect).
    never_sent: bool,
}

impl HttpVastClient {
    /// `api_key` is resolved by the caller (env `VAST_API_KEY` or the `vast_api_key`
    /// credential); `None` makes every call fail with [`VastError::Auth`] without sending
    /// anything. Every wait (backoff, create spacing, log polling) sleeps on `clock`.
    /// `timeout` bounds one HTTP exchange, body included.
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
            create_gate: Mutex::new(None),
        }
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
    fn scrub(&self, text: &str) -> String {
        match self.api_key.as_deref() {
            Some(k) => crate::secrets::redact(text, k),
            None => text.to_string(),
        }
    }

    /// For a body about to be parsed: the whole key only (see [`crate::secrets::redact`]).
    fn scrub_whole(&self, text: &str) -> String {
        match self.api_key.as_deref() {
            Some(k) if k.len() >= 4 => text.replace(k, "[redacted]"),
            _ => text.to_string(),
        }
    }

    fn sleep(&self, d: Duration) {
        if !d.is_zero() {
            self.clock.sleep(d);
        }
    }

    /// One HTTP exchange, no retries. `bearer` is `None` for the public log objects.
    fn exchange(
        &self,
        method: Method,
        url: &str,
        body: Option<&[u8]>,
        bearer: Option<&str>,
    ) -> Result<Answer, TransportFailure> {
        let auth = bearer.map(|k| format!("Bearer {k}"));
        let payload = body.unwrap_or(b"{}");
        let result = match method {
            Method::Get => headers(self.agent.get(url), auth.as_deref()).call(),
            Method::Post => headers(self.agent.post(url), auth.as_deref())
                .content_type("application/json")
                .send(payload),
            Method::Put => headers(self.agent.put(url), auth.as_deref())
                .content_type("application/json")
                .send(payload),
            Method::Delete => headers(self.agent.delete(url).force_send_body(), auth.as_deref())
                .content_type("application/json")
                .send(payload),
        };
        let mut response = result.map_err(|e| self.transport_failure(e))?;
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .map(|s| s.trim().to_string());
        let bytes = response
            .body_mut()
            .with_config()
            .limit(MAX_BODY_BYTES)
            .read_to_vec()
            .map_err(|e| self.transport_failure(e))?;
        // Scrubbed before anything quotes or cuts it: a cut could otherwise keep half a key.
        let text = self.scrub_whole(&String::from_utf8_lossy(&bytes));
        let json = serde_json::from_str::<Value>(&text).ok();
        Ok(Answer {
            route: String::new(),
            status,
            retry_after,
            text,
            json,
        })
    }

    fn transport_failure(&self, e: ureq::Error) -> TransportFailure {
        let never_sent = match &e {
            ureq::Error::HostNotFound | ureq::Error::ConnectionFailed => true,
            ureq::Error::Timeout(t) => {
                matches!(t, ureq::Timeout::Connect | ureq::Timeout::Resolve)
            }
            ureq::Error::Io(io) => io.kind() == std::io::ErrorKind::ConnectionRefused,
            _ => false,
        };
        let text = match &e {
            ureq::Error::Timeout(_) => format!("no answer within {:?} ({e})", self.timeout),
            _ => e.to_string(),
        };
        TransportFailure {
            text: self.scrub(&text),
            never_sent,
        }
    }

    /// Send an API call with the retries vast.ai's answers allow. Returns the final answer
    /// unless it was an auth failure, a deprecated endpoint, a rate limit that outlasted the
    /// retries, or a transport failure. `create` is the create gate, held by the caller: a
    /// create is spaced after the previous one, retried after a 429 (vast.ai refused it, so
    /// nothing was rented) and after a connection that never opened, and never retried
    /// after anything else, because the rent may have gone through.
    fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        mut create: Option<&mut Option<Millis>>,
    ) -> Result<Answer, VastError> {
        let key = self.key()?;
        let url = format!("{}{}", self.base_url, path);
        let route = format!(
            "{} {}",
            method.as_str(),
            path.split('?').next().unwrap_or(path)
        );
        let payload = body.map(|b| serde_json::to_vec(b).unwrap_or_else(|_| b"{}".to_vec()));
        let is_create = create.is_some();
        let mut backoff = FIRST_BACKOFF;
        let mut attempt = 1;
        loop {
            if let Some(last) = create.as_deref_mut() {
                if let Some(prev) = *last {
                    let due = prev + (CREATE_SPACING + CREATE_MARGIN).as_millis() as Millis;
                    let now = self.clock.now_ms();
                    if now < due {
                        self.sleep(Duration::from_millis((due - now) as u64));
                    }
                }
                *last = Some(self.clock.now_ms());
            }
            let last_attempt = attempt >= MAX_ATTEMPTS;
            let mut answer = match self.exchange(method, &url, payload.as_deref(), Some(key)) {
                Ok(a) => a,
                Err(f) => {
                    let retry = !is_create || f.never_sent;
                    if retry && !last_attempt {
                        log::info!("vast.ai {route}: {}; retrying in {backoff:?}", f.text);
                        self.sleep(backoff);
                        backoff *= 2;
                        attempt += 1;
                        continue;
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
            if answer.status == 429 {
                let wait = wait_after_429(
                    answer.retry_after.as_deref(),
                    &answer.text,
                    is_create,
                    backoff,
                );
                if last_attempt || wait > MAX_WAIT {
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
            if matches!(answer.status, 502..=504) && !is_create && !last_attempt {
                let wait = retry_after_secs(answer.retry_after.as_deref())
                    .map_or(backoff, |r| r.max(backoff));
                if wait <= MAX_WAIT {
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
                "{}: HTTP {} without a JSON object: {}",
                answer.route,
                answer.status,
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

fn headers<B>(rb: ureq::RequestBuilder<B>, auth: Option<&str>) -> ureq::RequestBuilder<B> {
    let rb = rb.header("Accept", "application/json");
    match auth {
        Some(a) => rb.header("Authorization", a),
        None => rb,
    }
}

impl VastClient for HttpVastClient {
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
        let mut gate = self.create_gate.lock().unwrap_or_else(|e| e.into_inner());
        *gate = Some(gate.map_or(at, |g| g.max(at)));
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
        let body = create_body(req);
        let path = format!("/api/v0/asks/{}/", req.offer_id);
        let mut gate = self.create_gate.lock().unwrap_or_else(|e| e.into_inner());
        let answer = self.send(Method::Put, &path, Some(&body), Some(&mut gate))?;
        drop(gate);
        let contract = answer.field("new_contract").and_then(as_id);
        if answer.ok() && !answer.success_false() {
            return match contract {
                Some(id) => Ok(id),
                None => Err(self.decode(&format!(
                    "create of offer {} answered HTTP {} without `new_contract`; it may have \
                     rented an instance: {}",
                    req.offer_id,
                    answer.status,
                    excerpt(&answer.text)
                ))),
            };
        }
        if let Some(new_contract) = contract {
            return Err(VastError::CreateFailed {
                new_contract,
                msg: self.scrub(&answer.msg()),
            });
        }
        let code = answer.code();
        let gone = match answer.status {
            404 => code == "no_such_ask" || code == "invalid_args",
            410 => code == "no_such_ask" || code.is_empty(),
            _ => false,
        };
        if gone {
            return Err(VastError::NoSuchAsk(req.offer_id));
        }
        Err(self.api_error(&answer))
    }

    /// Every page of `GET /api/v1/instances/` (25 rows each, ordered by id), following
    /// `next_token` until it is null or empty. The deprecated v0 list is never used, and a
    /// 410 anywhere is [`VastError::Deprecated`], never "no instances".
    fn list_instances(&self) -> Result<Vec<Instance>, VastError> {
        let mut out: Vec<Instance> = Vec::new();
        let mut ids = HashSet::new();
        let mut tokens = HashSet::new();
        let mut token: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let path = format!("/api/v1/instances/?{}", list_query(token.as_deref()));
            let answer = self.send(Method::Get, &path, None, None)?;
            let obj = self.expect_ok(&answer)?;
            match obj.get("instances") {
                Some(Value::Array(rows)) => {
                    for row in rows {
                        match parse_instance(row, None) {
                            Some(i) if ids.insert(i.id) => out.push(i),
                            Some(_) => {}
                            None => log::warn!("vast.ai listed an instance without an id; skipped"),
                        }
                    }
                }
                Some(Value::Null) => {}
                _ => {
                    return Err(self.decode(&format!(
                        "instance list page without an `instances` list: {}",
                        excerpt(&answer.text)
                    )))
                }
            }
            match obj.get("next_token") {
                None | Some(Value::Null) => return Ok(out),
                Some(Value::String(s)) if s.trim().is_empty() => return Ok(out),
                Some(Value::String(s)) => {
                    if !tokens.insert(s.clone()) {
                        return Err(self.decode("instance list repeated a next_token (a loop)"));
                    }
                    token = Some(s.clone());
                }
                Some(other) => {
                    return Err(self.decode(&format!(
                        "instance list next_token is not a string: {}",
                        excerpt(&other.to_string())
                    )))
                }
            }
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
        match obj.get("instances") {
            None | Some(Value::Null) => Ok(None),
            Some(v @ Value::Object(_)) => Ok(parse_instance(v, Some(id))),
            Some(_) => Err(self.decode(&format!(
                "instance {id}: `instances` is not an object: {}",
                excerpt(&answer.text)
            ))),
        }
    }

    fn stop_instance(&self, id: u64) -> Result<(), VastError> {
        self.manage(id, json!({"state": "stopped"}))
    }

    /// `DELETE /api/v0/instances/{id}/`; `no_such_instance` (already gone) is success.
    fn destroy_instance(&self, id: u64) -> Result<(), VastError> {
        let path = format!("/api/v0/instances/{id}/");
        let answer = self.send(Method::Delete, &path, Some(&json!({})), None)?;
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
        let mut last = String::new();
        for poll in 0..LOG_POLLS {
            if poll > 0 {
                self.sleep(LOG_POLL_GAP);
            }
            match self.exchange(Method::Get, &url, None, None) {
                Ok(a) if a.status == 200 => return Ok(last_lines(&a.text, tail)),
                Ok(a) => last = format!("HTTP {}", a.status),
                Err(f) => last = f.text,
            }
        }
        Err(VastError::Api {
            status: 0,
            code: "logs_not_ready".into(),
            msg: self.scrub(&format!(
                "log of instance {id} not ready after {LOG_POLLS} polls (last: {last})"
            )),
        })
    }
}

impl HttpVastClient {
    /// `PUT /api/v0/instances/{id}/` with a state or label change.
    fn manage(&self, id: u64, body: Value) -> Result<(), VastError> {
        let path = format!("/api/v0/instances/{id}/");
        let answer = self.send(Method::Put, &path, Some(&body), None)?;
        if matches!(answer.code().as_str(), "no_such_instance" | "not_found") {
            return Err(VastError::NoSuchInstance(id));
        }
        self.expect_ok(&answer).map(|_| ())
    }
}

/// The body of `POST /api/v0/bundles/`. GPU names use vast.ai's spaces (`RTX 4090`); an
/// underscore spelling (`RTX_4090`) is converted as the official CLI does. RAM goes in MB
/// (GB × 1000); `allocated_storage` prices the disk we will ask for into `dph_total`.
pub(crate) fn offer_query_body(q: &OfferQuery) -> Value {
    let mut body = Map::new();
    if q.verified_only {
        body.insert("verified".into(), json!({"eq": true}));
    }
    body.insert("external".into(), json!({"eq": false}));
    body.insert("rentable".into(), json!({"eq": true}));
    body.insert("rented".into(), json!({"eq": false}));
    let names: Vec<String> = q
        .gpu_names
        .iter()
        .map(|n| n.trim().replace('_', " "))
        .filter(|n| !n.is_empty())
        .collect();
    if !names.is_empty() {
        body.insert("gpu_name".into(), json!({ "in": names }));
    }
    body.insert("num_gpus".into(), json!({"eq": 1}));
    if let Some(gb) = q.min_gpu_ram_gb {
        body.insert("gpu_ram".into(), json!({ "gte": gb * 1000.0 }));
    }
    if let Some(r) = q.min_reliability {
        body.insert("reliability".into(), json!({ "gte": r }));
    }
    if let Some(max) = q.max_dph {
        body.insert("dph_total".into(), json!({ "lte": max }));
    }
    body.insert(
        "type".into(),
        json!(if q.interruptible { "bid" } else { "on-demand" }),
    );
    body.insert("allocated_storage".into(), json!(q.disk_gb));
    body.insert("order".into(), json!([["dph_total", "asc"]]));
    let limit = if q.limit == 0 { 20 } else { q.limit.min(1000) };
    body.insert("limit".into(), json!(limit));
    Value::Object(body)
}

/// The body of `PUT /api/v0/asks/{id}/`.
///
/// runtype `args`: the worker is the container's main process, started by the image's own
/// entrypoint (or `/bin/sh -c onstart` when an onstart command is set: in `args` mode vast.ai
/// takes `onstart` as the entrypoint, so the command goes in `args`). The ssh runtypes would
/// put vast.ai's sshd in front as the main process, which keeps a container "running" after
/// the worker died and needs an SSH key on the account; fleetagent never logs in, and wants
/// a dead worker to show up as `exited`.
pub(crate) fn create_body(req: &CreateRequest) -> Value {
    let mut body = json!({
        "client_id": "me",
        "image": req.image,
        "disk": req.disk_gb,
        "label": req.label,
        "env": req.env,
        "runtype": "args",
        "price": req.bid_price,
    });
    if let Some(cmd) = req.onstart.as_deref().filter(|c| !c.trim().is_empty()) {
        body["onstart"] = json!("/bin/sh");
        body["args"] = json!(["-c", cmd]);
    }
    body
}

/// The query string of one v1 list page. Non-string values are JSON-encoded; the opaque
/// `after_token` goes as it is (the official client's rule); everything form-encoded.
pub(crate) fn list_query(after_token: Option<&str>) -> String {
    let order = json!([{"col": "id", "dir": "asc"}]).to_string();
    let mut q = format!(
        "limit={}&order_by={}",
        form_encode(&LIST_PAGE.to_string()),
        form_encode(&order)
    );
    if let Some(t) = after_token {
        q.push_str("&after_token=");
        q.push_str(&form_encode(t));
    }
    q
}

/// `application/x-www-form-urlencoded` as Python's `quote_plus`: space becomes `+`.
pub(crate) fn form_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Seconds from a `Retry-After` header (the delta form; a date is ignored).
fn retry_after_secs(header: Option<&str>) -> Option<Duration> {
    let secs: f64 = header?.trim().parse().ok()?;
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs.min(86_400.0)))
}

/// `threshold=<seconds>` in vast.ai's plain-text 429 (`API requests too frequent endpoint
/// threshold=4.5`).
pub fn threshold_secs(body: &str) -> Option<Duration> {
    let at = body.find("threshold=")? + "threshold=".len();
    let num: String = body[at..]
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let secs: f64 = num.parse().ok()?;
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs.min(86_400.0)))
}

/// How long to wait after a 429: the longest of our backoff, `Retry-After`, a JSON
/// `retry_after` and the text's `threshold=`. A create also waits out vast.ai's 12 s
/// penalty on top of its interval, so the retry cannot extend the penalty.
pub fn wait_after_429(
    retry_after: Option<&str>,
    body: &str,
    is_create: bool,
    backoff: Duration,
) -> Duration {
    let threshold = threshold_secs(body);
    let json_retry = serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| v.get("retry_after").and_then(Value::as_f64))
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(|s| Duration::from_secs_f64(s.min(86_400.0)));
    let mut wait = [retry_after_secs(retry_after), json_retry, threshold]
        .into_iter()
        .flatten()
        .fold(backoff, Duration::max);
    if is_create {
        let interval = threshold.unwrap_or(CREATE_SPACING).max(CREATE_SPACING);
        wait = wait.max(interval + CREATE_PENALTY);
    }
    wait
}

/// The last `n` lines of a log.
pub fn last_lines(text: &str, n: u32) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let from = lines.len().saturating_sub(n as usize);
    let mut out = lines[from..].join("\n");
    if !out.is_empty() && text.ends_with('\n') {
        out.push('\n');
    }
    out
}

fn is_loopback(base_url: &str) -> bool {
    let rest = base_url
        .strip_prefix("http://")
        .or_else(|| base_url.strip_prefix("https://"))
        .unwrap_or(base_url);
    let host = rest.split(['/', ':']).next().unwrap_or("");
    matches!(host, "127.0.0.1" | "localhost") || rest.starts_with("[::1]")
}

/// At most `max` characters of `s`, with an ellipsis when cut.
fn cut(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &s[..at]),
        None => s.to_string(),
    }
}

/// A short single-line quote of a body, for error texts.
fn excerpt(text: &str) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.is_empty() {
        "(empty body)".into()
    } else {
        format!("{:?}", cut(&flat, EXCERPT_CHARS))
    }
}

/// A number as f64: JSON ints, floats, or numeric strings (some SDKs send strings).
fn num(v: Option<&Value>) -> Option<f64> {
    let n = match v? {
        Value::Number(n) => n.as_f64()?,
        Value::String(s) => s.trim().parse().ok()?,
        _ => return None,
    };
    n.is_finite().then_some(n)
}

/// An id: a non-negative integer, also when sent as `123.0` or `"123"`.
fn as_id(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64().or_else(|| {
            let f = n.as_f64()?;
            (f >= 0.0 && f.fract() == 0.0 && f < 1e18).then_some(f as u64)
        }),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// A trimmed string; empty or absent is `None`.
fn text(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.trim().to_string()).filter(|s| !s.is_empty()),
        _ => None,
    }
}

/// One offer row. Skipped (`None`) without an id or a price: an offer priced at nothing
/// would look cheapest to every budget rule.
pub fn parse_offer(v: &Value) -> Option<Offer> {
    let id = v.get("id").and_then(as_id)?;
    let Some(dph_total) = num(v.get("dph_total")).filter(|p| *p >= 0.0) else {
        log::warn!("vast.ai offer {id} has no usable dph_total; skipped");
        return None;
    };
    let verified = match v.get("verified") {
        Some(Value::Bool(b)) => *b,
        _ => text(v.get("verification")).is_some_and(|s| s.eq_ignore_ascii_case("verified")),
    };
    Some(Offer {
        id,
        gpu_name: text(v.get("gpu_name")).unwrap_or_default(),
        num_gpus: num(v.get("num_gpus")).map_or(1, |n| n.max(0.0) as u32),
        gpu_ram_mb: num(v.get("gpu_ram")).unwrap_or(0.0),
        dph_total,
        reliability: num(v.get("reliability"))
            .or_else(|| num(v.get("reliability2")))
            .unwrap_or(0.0),
        verified,
        geolocation: text(v.get("geolocation")),
        public_ip: text(v.get("public_ipaddr")),
        min_bid: num(v.get("min_bid")),
    })
}

/// One instance object; `fallback_id` is the id asked for when the row omits its own.
pub fn parse_instance(v: &Value, fallback_id: Option<u64>) -> Option<Instance> {
    let id = v.get("id").and_then(as_id).or(fallback_id)?;
    Some(Instance {
        id,
        label: text(v.get("label")),
        actual_status: text(v.get("actual_status")),
        intended_status: text(v.get("intended_status")),
        cur_state: text(v.get("cur_state")),
        status_msg: text(v.get("status_msg")),
        gpu_name: text(v.get("gpu_name")),
        num_gpus: num(v.get("num_gpus")).map(|n| n.max(0.0) as u32),
        dph_total: num(v.get("dph_total")),
        public_ip: text(v.get("public_ipaddr")),
        start_date: num(v.get("start_date")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn query() -> OfferQuery {
        OfferQuery {
            gpu_names: vec!["RTX_4090".into(), " RTX 3090 ".into()],
            max_dph: Some(0.6),
            min_reliability: Some(0.98),
            min_gpu_ram_gb: Some(20.0),
            verified_only: true,
            interruptible: false,
            disk_gb: 40.0,
            limit: 10,
        }
    }

    #[test]
    fn offer_query_has_defaults_units_and_order() {
        let b = offer_query_body(&query());
        assert_eq!(b["verified"], json!({"eq": true}));
        assert_eq!(b["external"], json!({"eq": false}));
        assert_eq!(b["rentable"], json!({"eq": true}));
        assert_eq!(b["rented"], json!({"eq": false}));
        assert_eq!(b["gpu_name"], json!({"in": ["RTX 4090", "RTX 3090"]}));
        assert_eq!(b["num_gpus"], json!({"eq": 1}));
        assert_eq!(b["gpu_ram"]["gte"].as_f64(), Some(20_000.0));
        assert_eq!(b["reliability"], json!({"gte": 0.98}));
        assert_eq!(b["dph_total"], json!({"lte": 0.6}));
        assert_eq!(b["type"], "on-demand");
        assert_eq!(b["allocated_storage"].as_f64(), Some(40.0));
        assert_eq!(b["order"], json!([["dph_total", "asc"]]));
        assert_eq!(b["limit"], 10);
    }

    #[test]
    fn offer_query_leaves_out_unset_filters() {
        let q = OfferQuery {
            interruptible: true,
            disk_gb: 20.0,
            ..OfferQuery::default()
        };
        let b = offer_query_body(&q);
        for key in [
            "verified",
            "gpu_name",
            "gpu_ram",
            "reliability",
            "dph_total",
        ] {
            assert!(b.get(key).is_none(), "{key} should be absent: {b}");
        }
        assert_eq!(b["type"], "bid");
        assert_eq!(b["limit"], 20, "limit 0 means the default");
    }

    #[test]
    fn create_body_uses_args_runtype_and_env_object() {
        let mut env = BTreeMap::new();
        env.insert("FLEETAGENT_LABEL".to_string(), "fleetagent-7-a".to_string());
        let mut req = CreateRequest {
            offer_id: 5,
            image: "img:1".into(),
            disk_gb: 40.0,
            label: "fleetagent-7-a".into(),
            env,
            onstart: None,
            bid_price: None,
        };
        let b = create_body(&req);
        assert_eq!(b["client_id"], "me");
        assert_eq!(b["runtype"], "args");
        assert_eq!(b["env"], json!({"FLEETAGENT_LABEL": "fleetagent-7-a"}));
        assert_eq!(b["price"], Value::Null);
        assert!(b.get("onstart").is_none() && b.get("args").is_none());

        req.onstart = Some("/opt/start-worker.sh".into());
        req.bid_price = Some(0.25);
        let b = create_body(&req);
        assert_eq!(b["onstart"], "/bin/sh");
        assert_eq!(b["args"], json!(["-c", "/opt/start-worker.sh"]));
        assert_eq!(b["price"], json!(0.25));
    }

    #[test]
    fn list_query_encodes_json_and_keeps_token_raw() {
        assert_eq!(
            list_query(None),
            "limit=25&order_by=%5B%7B%22col%22%3A%22id%22%2C%22dir%22%3A%22asc%22%7D%5D"
        );
        assert!(list_query(Some("a+b/c= d")).ends_with("&after_token=a%2Bb%2Fc%3D+d"));
    }

    #[test]
    fn threshold_parses_from_vast_429_text() {
        let t = "API requests too frequent endpoint threshold=4.5";
        assert_eq!(threshold_secs(t), Some(Duration::from_millis(4_500)));
        assert_eq!(
            threshold_secs("threshold=12 more"),
            Some(Duration::from_secs(12))
        );
        assert_eq!(threshold_secs("API requests too frequent"), None);
        assert_eq!(threshold_secs("threshold=abc"), None);
    }

    #[test]
    fn wait_after_429_takes_the_longest_hint() {
        let b = Duration::from_millis(500);
        assert_eq!(wait_after_429(None, "too frequent", false, b), b);
        assert_eq!(
            wait_after_429(
                Some("3"),
                "API requests too frequent endpoint threshold=1.0",
                false,
                b
            ),
            Duration::from_secs(3)
        );
        assert_eq!(
            wait_after_429(None, "threshold=2.0", false, b),
            Duration::from_secs(2)
        );
        assert_eq!(
            wait_after_429(None, r#"{"detail":"slow down","retry_after":7}"#, false, b),
            Duration::from_secs(7)
        );
        assert_eq!(
            wait_after_429(Some("Wed, 21 Oct 2015 07:28:00 GMT"), "", false, b),
            b
        );
    }

    #[test]
    fn create_429_adds_the_penalty() {
        let b = Duration::from_millis(500);
        assert_eq!(
            wait_after_429(
                None,
                "API requests too frequent endpoint threshold=4.5",
                true,
                b
            ),
            Duration::from_millis(16_500)
        );
        assert_eq!(
            wait_after_429(None, "API requests too frequent", true, b),
            Duration::from_millis(16_500)
        );
        assert_eq!(
            wait_after_429(Some("30"), "", true, b),
            Duration::from_secs(30)
        );
    }

    #[test]
    fn offers_parse_leniently() {
        let rows = json!([
            {"id": 1, "gpu_name": " RTX 4090 ", "dph_total": 1, "gpu_ram": 24564.0,
             "reliability2": "0.99", "verification": "verified", "public_ipaddr": "1.2.3.4 \n",
             "num_gpus": 1.0, "min_bid": null, "something_new": {"x": 1}},
            {"id": 2.0, "gpu_name": "A100", "dph_total": "0.5", "reliability": 0.97,
             "verified": false, "geolocation": "  "},
            {"gpu_name": "no id", "dph_total": 0.1},
            {"id": 4, "gpu_name": "no price", "dph_total": null},
        ]);
        let offers: Vec<Offer> = rows
            .as_array()
            .unwrap()
            .iter()
            .filter_map(parse_offer)
            .collect();
        assert_eq!(offers.len(), 2);
        let a = &offers[0];
        assert_eq!(
            (a.id, a.gpu_name.as_str(), a.dph_total),
            (1, "RTX 4090", 1.0)
        );
        assert_eq!((a.reliability, a.verified, a.num_gpus), (0.99, true, 1));
        assert_eq!(a.public_ip.as_deref(), Some("1.2.3.4"));
        assert_eq!(a.min_bid, None);
        let b = &offers[1];
        assert_eq!((b.id, b.dph_total, b.verified), (2, 0.5, false));
        assert_eq!(b.geolocation, None);
    }

    #[test]
    fn instance_statuses_stay_opaque() {
        let i = parse_instance(
            &json!({"actual_status": " scheduling ", "label": "x ", "num_gpus": "2"}),
            Some(9),
        )
        .unwrap();
        assert_eq!(i.id, 9);
        assert_eq!(i.actual_status.as_deref(), Some("scheduling"));
        assert_eq!(i.label.as_deref(), Some("x"));
        assert_eq!(i.num_gpus, Some(2));
        assert!(parse_instance(&json!({"actual_status": null}), None).is_none());
    }

    #[test]
    fn helpers_cut_and_quote() {
        assert_eq!(last_lines("a\nb\nc\n", 2), "b\nc\n");
        assert_eq!(last_lines("a\nb", 5), "a\nb");
        assert_eq!(last_lines("", 3), "");
        assert_eq!(cut("héllo", 2), "hé…");
        assert_eq!(
            excerpt("<html>\n  <b>x</b>\n</html>"),
            "\"<html> <b>x</b> </html>\""
        );
        assert!(excerpt(&"x".repeat(1000)).chars().count() < EXCERPT_CHARS + 5);
        assert!(is_loopback("http://127.0.0.1:4000"));
        assert!(!is_loopback("https://console.vast.ai"));
    }

    #[test]
    fn debug_never_shows_the_key() {
        let c = HttpVastClient::new(
            "http://127.0.0.1:1/",
            Some("sekrit-key-123".into()),
            Arc::new(crate::clock::ManualClock::new(0)),
            Duration::from_secs(1),
        );
        let shown = format!("{c:?}");
        assert!(!shown.contains("sekrit"), "{shown}");
        assert!(
            shown.contains("http://127.0.0.1:1\""),
            "base url trimmed: {shown}"
        );
        assert_eq!(c.scrub("echo sekrit-key-123 back"), "echo [redacted] back");
    }

    #[test]
    fn missing_or_malformed_key_is_an_auth_error_naming_the_sources() {
        let clock = Arc::new(crate::clock::ManualClock::new(0));
        for key in [None, Some(""), Some("two words")] {
            let c = HttpVastClient::new(
                "http://127.0.0.1:1",
                key.map(String::from),
                clock.clone(),
                Duration::from_secs(1),
            );
            match c.list_instances() {
                Err(VastError::Auth(m)) => {
                    assert!(
                        m.contains("VAST_API_KEY") && m.contains("vast_api_key"),
                        "{m}"
                    )
                }
                other => panic!("expected Auth, got {other:?}"),
            }
        }
    }
}
