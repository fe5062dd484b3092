//! A faithful fake of vast.ai's REST API on 127.0.0.1 (shared/reference/vastai-api.md §9):
//! offers, creates, the paginated v1 list (and the v0 list answering 410), show, stop/label,
//! destroy and logs, with bearer auth, per-route rate limits and injected failures. Time
//! comes from the `Clock` it is given, so a test sharing a `ManualClock` with the client
//! never sleeps for real. It owns no client logic and never touches the network beyond
//! its loopback socket.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use fleetagent::clock::{Clock, SystemClock};
use serde_json::{json, Map, Value};
use tiny_http::{Header, Request, Response, Server};

/// The API key the fake accepts unless told otherwise.
pub const FAKE_API_KEY: &str = "fake-vast-key-0123456789abcdef";

/// The routes the fake serves, each with its one method.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Route {
    /// POST /api/v0/bundles/
    Offers,
    /// PUT /api/v0/asks/{id}/
    Create,
    /// GET /api/v1/instances/
    ListV1,
    /// GET /api/v0/instances/ (deprecated: 410)
    ListV0,
    /// GET /api/v0/instances/{id}/
    Show,
    /// PUT /api/v0/instances/{id}/ (state, label)
    Manage,
    /// DELETE /api/v0/instances/{id}/
    Destroy,
    /// PUT /api/v0/instances/request_logs/{id}/
    RequestLogs,
    /// GET of a `result_url` (no auth)
    LogFile,
    /// Anything else: 404
    Other,
}

/// One request as the fake saw it, with the status it answered (0 = never answered).
#[derive(Debug, Clone)]
pub struct SeenRequest {
    pub method: String,
    pub route: Route,
    /// Without the query string.
    pub path: String,
    /// Raw (still encoded) query string.
    pub query: String,
    pub body: String,
    pub authorization: Option<String>,
    /// The fake's clock when the request arrived.
    pub at_ms: i64,
    pub status: u16,
}

impl SeenRequest {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }

    /// A decoded query parameter.
    pub fn param(&self, name: &str) -> Option<String> {
        parse_query(&self.query).remove(name)
    }
}

/// A canned answer to inject.
#[derive(Debug, Clone)]
pub struct FakeReply {
    pub status: u16,
    pub body: String,
    pub content_type: String,
    pub retry_after: Option<String>,
    /// Never answer (the client times out).
    pub hang: bool,
}

impl FakeReply {
    pub fn json(status: u16, body: Value) -> Self {
        FakeReply {
            status,
            body: body.to_string(),
            content_type: "application/json".into(),
            retry_after: None,
            hang: false,
        }
    }

    pub fn text(status: u16, body: &str) -> Self {
        FakeReply {
            status,
            body: body.into(),
            content_type: "text/plain".into(),
            retry_after: None,
            hang: false,
        }
    }

    /// HTTP 200 with `success: false`.
    pub fn success_false(code: &str, msg: &str) -> Self {
        Self::json(200, json!({"success": false, "error": code, "msg": msg}))
    }

    /// vast.ai's plain-text 429.
    pub fn too_frequent(threshold_secs: f64) -> Self {
        Self::text(
            429,
            &format!("API requests too frequent endpoint threshold={threshold_secs}"),
        )
    }

    pub fn hang() -> Self {
        FakeReply {
            hang: true,
            ..Self::text(0, "")
        }
    }

    pub fn with_retry_after(mut self, value: &str) -> Self {
        self.retry_after = Some(value.into());
        self
    }
}

struct RateRule {
    min_interval_ms: i64,
    penalty_ms: i64,
    retry_after: bool,
}

struct OfferRow {
    json: Value,
    rented: bool,
}

struct FakeInstance {
    obj: Map<String, Value>,
    env: BTreeMap<String, String>,
    created_ms: i64,
    /// Set by a test or a state change: progression no longer applies.
    status_pinned: bool,
    offer_id: Option<u64>,
}

struct LogObject {
    text: String,
    misses_left: u32,
}

struct State {
    clock: Arc<dyn Clock>,
    base_url: String,
    api_key: Option<String>,
    auth_error_status: u16,
    offers: Vec<OfferRow>,
    next_offer_id: u64,
    next_instance_id: u64,
    instances: BTreeMap<u64, FakeInstance>,
    tokens: HashMap<String, (u64, bool)>,
    counter: u64,
    before: HashMap<Route, VecDeque<FakeReply>>,
    after: HashMap<Route, VecDeque<FakeReply>>,
    rate: HashMap<Route, RateRule>,
    last_ok: HashMap<Route, i64>,
    blocked_until: HashMap<Route, i64>,
    log: Vec<SeenRequest>,
    log_texts: HashMap<u64, String>,
    log_misses: u32,
    log_objects: HashMap<String, LogObject>,
    show_missing_404: bool,
    progression: Option<(i64, i64)>,
}

enum Outcome {
    Reply(FakeReply),
    Hold,
}

/// The fake server. Dropping it stops the server thread.
pub struct FakeVast {
    state: Arc<Mutex<State>>,
    url: String,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl FakeVast {
    /// An empty fake (no offers, no instances, no rate limits) whose clock is `clock`;
    /// it accepts [`FAKE_API_KEY`].
    pub fn start(clock: Arc<dyn Clock>) -> FakeVast {
        let server = Arc::new(Server::http("127.0.0.1:0").expect("bind fake vast.ai"));
        let port = server
            .server_addr()
            .to_ip()
            .expect("fake vast.ai has an IP address")
            .port();
        let url = format!("http://127.0.0.1:{port}");
        let state = Arc::new(Mutex::new(State {
            clock,
            base_url: url.clone(),
            api_key: Some(FAKE_API_KEY.into()),
            auth_error_status: 401,
            offers: Vec::new(),
            next_offer_id: 20_000_001,
            next_instance_id: 9_000_001,
            instances: BTreeMap::new(),
            tokens: HashMap::new(),
            counter: 0,
            before: HashMap::new(),
            after: HashMap::new(),
            rate: HashMap::new(),
            last_ok: HashMap::new(),
            blocked_until: HashMap::new(),
            log: Vec::new(),
            log_texts: HashMap::new(),
            log_misses: 3,
            log_objects: HashMap::new(),
            show_missing_404: false,
            progression: None,
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (state, stop) = (state.clone(), stop.clone());
            std::thread::spawn(move || serve(&server, &state, &stop))
        };
        FakeVast {
            state,
            url,
            stop,
            thread: Some(thread),
        }
    }

    /// For end-to-end tests where the real binary is the client: wall-clock time.
    pub fn start_real_time() -> FakeVast {
        Self::start(Arc::new(SystemClock))
    }

    /// A fake holding `n` offers of one GPU at `dph_total` $/h (no storage cost, so the
    /// price stays `dph_total` whatever disk is asked for) and the given reliability.
    pub fn with_offers(
        clock: Arc<dyn Clock>,
        n: usize,
        gpu_name: &str,
        dph_total: f64,
        reliability: f64,
    ) -> FakeVast {
        let fake = Self::start(clock);
        fake.add_offers(n, gpu_name, dph_total, reliability);
        fake
    }

    /// Base URL, e.g. `http://127.0.0.1:40123` (no trailing slash).
    pub fn url(&self) -> String {
        self.url.clone()
    }

    pub fn api_key(&self) -> String {
        self.lock().api_key.clone().unwrap_or_default()
    }

    /// `None`: accept any caller.
    pub fn set_api_key(&self, key: Option<&str>) {
        self.lock().api_key = key.map(String::from);
    }

    /// The status of an `auth_error` answer: 401 (default), or 404 as seen in the wild.
    pub fn set_auth_error_status(&self, status: u16) {
        self.lock().auth_error_status = status;
    }

    // ---- offers ----

    /// One realistic offer; returns its id. `storage_cost` is 0, `min_bid` 60 % of the price.
    pub fn add_offer(&self, gpu_name: &str, dph_total: f64, reliability: f64) -> u64 {
        let mut s = self.lock();
        let id = s.next_offer_id;
        s.next_offer_id += 1;
        let n = id % 250;
        let offer = json!({
            "id": id, "ask_contract_id": id, "bundle_id": 880_000_000 + id,
            "machine_id": 30_000 + n, "host_id": 90_000 + n,
            "num_gpus": 1, "gpu_name": gpu_name, "gpu_ram": 24564, "gpu_total_ram": 24564,
            "gpu_arch": "nvidia", "compute_cap": 890, "cuda_max_good": 12.4,
            "driver_version": "550.54.14", "cpu_cores": 32, "cpu_cores_effective": 8.0,
            "cpu_ram": 64300, "disk_space": 180.5, "inet_up": 850.3, "inet_down": 910.7,
            "dph_base": dph_total, "storage_cost": 0.0, "storage_total_cost": 0.0,
            "dph_total": dph_total, "min_bid": (dph_total * 0.6 * 1e4).round() / 1e4,
            "is_bid": false, "reliability": reliability, "reliability2": reliability,
            "verification": "verified", "rentable": true, "rented": false, "external": false,
            "geolocation": "Oregon, US", "public_ipaddr": format!("203.0.113.{n}"),
            "start_date": 1_754_000_000.0, "end_date": 1_756_592_000.0, "duration": 2_592_000.0,
        });
        s.offers.push(OfferRow {
            json: offer,
            rented: false,
        });
        id
    }

    pub fn add_offers(
        &self,
        n: usize,
        gpu_name: &str,
        dph_total: f64,
        reliability: f64,
    ) -> Vec<u64> {
        (0..n)
            .map(|_| self.add_offer(gpu_name, dph_total, reliability))
            .collect()
    }

    /// An offer exactly as given (ids, types and whitespace untouched), for parsing tests.
    pub fn add_offer_json(&self, offer: Value) {
        self.lock().offers.push(OfferRow {
            json: offer,
            rented: false,
        });
    }

    pub fn set_offer_field(&self, id: u64, key: &str, value: Value) {
        let mut s = self.lock();
        if let Some(o) = s.offers.iter_mut().find(|o| offer_id(&o.json) == Some(id)) {
            o.json[key] = value;
        }
    }

    /// Someone else rented it: it leaves the search and a create gets `no_such_ask`.
    pub fn take_offer(&self, id: u64) {
        let mut s = self.lock();
        if let Some(o) = s.offers.iter_mut().find(|o| offer_id(&o.json) == Some(id)) {
            o.rented = true;
        }
    }

    pub fn offer_rented(&self, id: u64) -> bool {
        self.lock()
            .offers
            .iter()
            .any(|o| offer_id(&o.json) == Some(id) && o.rented)
    }

    // ---- instances ----

    /// An instance already on the account (not from an offer), `running`; returns its id.
    pub fn add_instance(&self, label: &str) -> u64 {
        let mut s = self.lock();
        let id = s.next_instance_id;
        s.next_instance_id += 1;
        let now = s.clock.now_ms();
        let mut obj = instance_object(id, &json!({"gpu_name": "RTX 4090", "dph_total": 0.4}), 40.0);
        obj.insert("label".into(), json!(label));
        obj.insert("actual_status".into(), json!("running"));
        obj.insert("start_date".into(), json!(now as f64 / 1000.0));
        s.instances.insert(
            id,
            FakeInstance {
                obj,
                env: BTreeMap::new(),
                created_ms: now,
                status_pinned: true,
                offer_id: None,
            },
        );
        id
    }

    /// Set `actual_status` (`None` = JSON null); progression stops for this instance.
    pub fn set_actual_status(&self, id: u64, status: Option<&str>) {
        let mut s = self.lock();
        if let Some(i) = s.instances.get_mut(&id) {
            i.obj.insert("actual_status".into(), json!(status));
            i.status_pinned = true;
        }
    }

    pub fn set_status_msg(&self, id: u64, msg: Option<&str>) {
        self.set_instance_field(id, "status_msg", json!(msg));
    }

    pub fn set_public_ip(&self, id: u64, ip: Option<&str>) {
        self.set_instance_field(id, "public_ipaddr", json!(ip));
    }

    /// Any field of the instance object, as the API will show it.
    pub fn set_instance_field(&self, id: u64, key: &str, value: Value) {
        let mut s = self.lock();
        if let Some(i) = s.instances.get_mut(&id) {
            if key == "actual_status" {
                i.status_pinned = true;
            }
            i.obj.insert(key.into(), value);
        }
    }

    /// Created instances go null → `loading` after `loading_after` → `running` after
    /// `running_after` (by the fake's clock), unless their status was set explicitly.
    /// Off by default: they stay null until a test moves them.
    pub fn set_progression(&self, loading_after: Duration, running_after: Duration) {
        self.lock().progression = Some((
            loading_after.as_millis() as i64,
            running_after.as_millis() as i64,
        ));
    }

    /// The instance object as the API would show it now; `None` once destroyed.
    pub fn instance(&self, id: u64) -> Option<Value> {
        let s = self.lock();
        s.instances.get(&id).map(|i| s.view(i))
    }

    /// The env a create passed (e.g. `FLEETAGENT_LABEL`).
    pub fn instance_env(&self, id: u64) -> Option<BTreeMap<String, String>> {
        self.lock().instances.get(&id).map(|i| i.env.clone())
    }

    pub fn instances(&self) -> Vec<Value> {
        let s = self.lock();
        s.instances.values().map(|i| s.view(i)).collect()
    }

    pub fn instance_ids(&self) -> Vec<u64> {
        self.lock().instances.keys().copied().collect()
    }

    /// Answer an unknown id on show with 404 `no_such_instance` instead of
    /// `{"instances": null}` (both are seen).
    pub fn set_show_missing_404(&self, on: bool) {
        self.lock().show_missing_404 = on;
    }

    // ---- logs ----

    pub fn set_log_text(&self, id: u64, text: &str) {
        self.lock().log_texts.insert(id, text.into());
    }

    /// How many times a fresh `result_url` answers 404 before serving the text (default 3).
    pub fn set_log_misses(&self, n: u32) {
        self.lock().log_misses = n;
    }

    // ---- failures and limits ----

    /// The next `n` requests to `route` get `reply` instead of being handled.
    pub fn fail_next(&self, route: Route, n: usize, reply: FakeReply) {
        let mut s = self.lock();
        let q = s.before.entry(route).or_default();
        q.extend(std::iter::repeat_n(reply, n));
    }

    /// The next `n` requests to `route` are handled (a create does rent) but answered
    /// with `reply`: a lost or garbled answer.
    pub fn lose_next_answer(&self, route: Route, n: usize, reply: FakeReply) {
        let mut s = self.lock();
        let q = s.after.entry(route).or_default();
        q.extend(std::iter::repeat_n(reply, n));
    }

    /// Calls to `route` closer than `min_interval` to the last accepted one get vast.ai's
    /// plain-text 429 (`... threshold=<s>`), and block the route for `penalty` (0: none).
    pub fn rate_limit(
        &self,
        route: Route,
        min_interval: Duration,
        penalty: Duration,
        retry_after: bool,
    ) {
        self.lock().rate.insert(
            route,
            RateRule {
                min_interval_ms: min_interval.as_millis() as i64,
                penalty_ms: penalty.as_millis() as i64,
                retry_after,
            },
        );
    }

    /// The documented per-endpoint limits: show 2 s, list 1 s, stop/label 1 s, destroy 3 s,
    /// create 4.5 s with a 12 s penalty. No `Retry-After` (the merged docs say none is sent).
    pub fn vast_rate_limits(&self) {
        let ms = Duration::from_millis;
        self.rate_limit(Route::Show, ms(2_000), ms(0), false);
        self.rate_limit(Route::ListV1, ms(1_000), ms(0), false);
        self.rate_limit(Route::Manage, ms(1_000), ms(0), false);
        self.rate_limit(Route::Destroy, ms(3_000), ms(0), false);
        self.rate_limit(Route::Create, ms(4_500), ms(12_000), false);
    }

    // ---- the request log ----

    pub fn requests(&self) -> Vec<SeenRequest> {
        self.lock().log.clone()
    }

    pub fn requests_to(&self, route: Route) -> Vec<SeenRequest> {
        self.lock()
            .log
            .iter()
            .filter(|r| r.route == route)
            .cloned()
            .collect()
    }

    pub fn count(&self, route: Route) -> usize {
        self.lock().log.iter().filter(|r| r.route == route).count()
    }

    pub fn clear_requests(&self) {
        self.lock().log.clear();
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for FakeVast {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(server: &Server, state: &Mutex<State>, stop: &AtomicBool) {
    // Held requests (FakeReply::hang) are answered 500 when dropped at shutdown.
    let mut held: Vec<Request> = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        let mut rq = match server.recv_timeout(Duration::from_millis(50)) {
            Ok(Some(rq)) => rq,
            Ok(None) | Err(_) => continue,
        };
        let mut body = String::new();
        let _ = rq.as_reader().read_to_string(&mut body);
        let authorization = rq
            .headers()
            .iter()
            .find(|h| h.field.equiv("Authorization"))
            .map(|h| h.value.as_str().to_string());
        let method = rq.method().as_str().to_uppercase();
        let url = rq.url().to_string();
        let outcome = state.lock().unwrap_or_else(|e| e.into_inner()).handle(
            &method,
            &url,
            body,
            authorization,
        );
        match outcome {
            Outcome::Hold => held.push(rq),
            Outcome::Reply(r) => {
                let mut resp = Response::from_string(r.body).with_status_code(r.status);
                if let Ok(h) = Header::from_bytes("Content-Type", r.content_type.as_bytes()) {
                    resp.add_header(h);
                }
                if let Some(ra) = r.retry_after {
                    if let Ok(h) = Header::from_bytes("Retry-After", ra.as_bytes()) {
                        resp.add_header(h);
                    }
                }
                let _ = rq.respond(resp);
            }
        }
    }
}

fn error(status: u16, code: &str, msg: &str) -> FakeReply {
    FakeReply::json(status, json!({"success": false, "error": code, "msg": msg}))
}

fn ok(body: Value) -> FakeReply {
    FakeReply::json(200, body)
}

impl State {
    fn handle(
        &mut self,
        method: &str,
        url: &str,
        body: String,
        authorization: Option<String>,
    ) -> Outcome {
        let now = self.clock.now_ms();
        let (path, query) = url.split_once('?').unwrap_or((url, ""));
        let (route, id) = route_of(method, path);
        let outcome = self.dispatch(route, id, path, query, &body, authorization.as_deref(), now);
        let status = match &outcome {
            Outcome::Reply(r) => r.status,
            Outcome::Hold => 0,
        };
        self.log.push(SeenRequest {
            method: method.into(),
            route,
            path: path.into(),
            query: query.into(),
            body,
            authorization,
            at_ms: now,
            status,
        });
        outcome
    }

    #[allow(clippy::too_many_arguments)]
    fn dispatch(
        &mut self,
        route: Route,
        id: Option<String>,
        path: &str,
        query: &str,
        body: &str,
        authorization: Option<&str>,
        now: i64,
    ) -> Outcome {
        if let Some(reply) = self.before.get_mut(&route).and_then(VecDeque::pop_front) {
            return if reply.hang {
                Outcome::Hold
            } else {
                Outcome::Reply(reply)
            };
        }
        if let Some(reply) = self.rate_check(route, now) {
            return Outcome::Reply(reply);
        }
        if !matches!(route, Route::LogFile | Route::Other) && !self.authorized(route, authorization)
        {
            return Outcome::Reply(error(
                self.auth_error_status,
                "auth_error",
                "Invalid user key",
            ));
        }
        let num = id
            .as_deref()
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(0);
        let reply = match route {
            Route::Offers => self.search(body),
            Route::Create => self.create(num, body, now),
            Route::ListV1 => self.list(query),
            Route::ListV0 => error(
                410,
                "deprecated_endpoint",
                "This endpoint is deprecated. Use /api/v1/instances/ instead.",
            ),
            Route::Show => self.show(num),
            Route::Manage => self.manage(num, body),
            Route::Destroy => self.destroy(num),
            Route::RequestLogs => self.request_logs(num, body),
            Route::LogFile => self.log_file(id.as_deref().unwrap_or("")),
            Route::Other => FakeReply {
                content_type: "text/html".into(),
                ..FakeReply::text(404, &format!("<html><body>Not Found: {path}</body></html>"))
            },
        };
        if let Some(replaced) = self.after.get_mut(&route).and_then(VecDeque::pop_front) {
            return if replaced.hang {
                Outcome::Hold
            } else {
                Outcome::Reply(replaced)
            };
        }
        Outcome::Reply(reply)
    }

    fn rate_check(&mut self, route: Route, now: i64) -> Option<FakeReply> {
        let rule = self.rate.get(&route)?;
        let blocked = self.blocked_until.get(&route).copied().unwrap_or(i64::MIN);
        let last = self.last_ok.get(&route).copied();
        let too_soon = last.is_some_and(|t| now - t < rule.min_interval_ms);
        if now < blocked || too_soon {
            let mut until = blocked.max(last.map_or(now, |t| t + rule.min_interval_ms));
            if rule.penalty_ms > 0 {
                until = until.max(now + rule.penalty_ms);
                self.blocked_until.insert(route, until);
            }
            let threshold = rule.min_interval_ms as f64 / 1000.0;
            let mut reply = FakeReply::too_frequent(threshold);
            if rule.retry_after {
                let secs = (until - now + 999) / 1000;
                reply = reply.with_retry_after(&secs.max(1).to_string());
            }
            return Some(reply);
        }
        self.last_ok.insert(route, now);
        None
    }

    fn authorized(&self, route: Route, authorization: Option<&str>) -> bool {
        let Some(key) = &self.api_key else {
            return true;
        };
        match authorization {
            // Offer search works anonymously; a wrong key is still refused.
            None => route == Route::Offers,
            Some(h) => h.strip_prefix("Bearer ") == Some(key.as_str()),
        }
    }

    fn view(&self, i: &FakeInstance) -> Value {
        let mut obj = i.obj.clone();
        if let (false, Some((loading, running))) = (i.status_pinned, self.progression) {
            let age = self.clock.now_ms() - i.created_ms;
            let status = if age >= running {
                json!("running")
            } else if age >= loading {
                json!("loading")
            } else {
                Value::Null
            };
            obj.insert("actual_status".into(), status);
        }
        Value::Object(obj)
    }

    fn search(&self, body: &str) -> FakeReply {
        let Ok(Value::Object(q)) = serde_json::from_str::<Value>(body) else {
            return error(400, "invalid_args", "the query must be a JSON object");
        };
        let mut filters: Vec<(String, String, Value)> = Vec::new();
        let mut order: Vec<(String, bool)> = Vec::new();
        let mut limit = 64usize;
        let mut storage_gb: Option<f64> = None;
        for (key, value) in &q {
            match key.as_str() {
                "order" => {
                    let Some(pairs) = value.as_array() else {
                        return error(400, "invalid_args", "order must be a list");
                    };
                    for p in pairs {
                        match (
                            p.get(0).and_then(Value::as_str),
                            p.get(1).and_then(Value::as_str),
                        ) {
                            (Some(f), Some("asc")) => order.push((f.into(), false)),
                            (Some(f), Some("desc")) => order.push((f.into(), true)),
                            _ => return error(400, "invalid_args", "bad order pair"),
                        }
                    }
                }
                "limit" => match value.as_u64() {
                    Some(n) => limit = n as usize,
                    None => return error(400, "invalid_args", "limit must be an integer"),
                },
                "type" => {
                    if !matches!(
                        value.as_str(),
                        Some("on-demand" | "ondemand" | "bid" | "reserved")
                    ) {
                        return error(400, "invalid_args", "unknown offer type");
                    }
                }
                "allocated_storage" => storage_gb = value.as_f64(),
                "disable_bundling" => {}
                field => {
                    let Some(ops) = value.as_object() else {
                        return error(400, "invalid_args", &format!("bad filter on {field}"));
                    };
                    for (op, arg) in ops {
                        if !OPS.contains(&op.as_str()) {
                            return error(400, "invalid_args", &format!("unknown operator {op}"));
                        }
                        if matches!(op.as_str(), "in" | "notin") && !arg.is_array() {
                            return error(400, "invalid_args", &format!("{op} takes a list"));
                        }
                        filters.push((field.into(), op.clone(), arg.clone()));
                    }
                }
            }
        }
        let mut rows: Vec<Value> = self
            .offers
            .iter()
            .filter(|o| !o.rented)
            .map(|o| priced(&o.json, storage_gb))
            .filter(|o| {
                filters
                    .iter()
                    .all(|(f, op, arg)| op_matches(&offer_field(o, f), op, arg))
            })
            .collect();
        rows.sort_by(|a, b| {
            for (field, desc) in &order {
                let ord = order_values(a.get(field), b.get(field), *desc);
                if ord != std::cmp::Ordering::Equal {
                    return ord;
                }
            }
            std::cmp::Ordering::Equal
        });
        rows.truncate(limit);
        ok(json!({ "offers": rows }))
    }

    fn create(&mut self, offer: u64, body: &str, now: i64) -> FakeReply {
        let Ok(Value::Object(b)) = serde_json::from_str::<Value>(body) else {
            return error(400, "invalid_args", "the body must be a JSON object");
        };
        let image = b.get("image").and_then(Value::as_str).unwrap_or("");
        if image.trim().is_empty() {
            return error(400, "invalid_args", "image is required");
        }
        let env = match b.get("env") {
            None | Some(Value::Null) => BTreeMap::new(),
            Some(Value::Object(m)) if m.values().all(Value::is_string) => m
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                .collect(),
            Some(_) => return error(400, "invalid_args", "env must be an object of strings"),
        };
        let runtype = b.get("runtype").and_then(Value::as_str).unwrap_or("ssh");
        if !runtype.split_whitespace().all(|t| RUNTYPES.contains(&t)) {
            return error(400, "invalid_args", &format!("unknown runtype {runtype:?}"));
        }
        let label = match b.get("label") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.chars().count() <= 256 => Some(s.clone()),
            Some(_) => return error(400, "label_too_long", "label must be a string of <= 256"),
        };
        let disk = match b.get("disk") {
            None => 8.0,
            Some(d) => match d.as_f64() {
                Some(d) if d > 0.0 => d,
                _ => return error(400, "invalid_args", "disk must be a positive number"),
            },
        };
        let price = match b.get("price") {
            None | Some(Value::Null) => None,
            Some(p) => match p.as_f64() {
                Some(p) if (0.001..=128.0).contains(&p) => Some(p),
                _ => return error(400, "invalid_price", "price must be within 0.001..128"),
            },
        };
        let Some(row) = self
            .offers
            .iter_mut()
            .find(|o| offer_id(&o.json) == Some(offer) && !o.rented)
        else {
            return FakeReply::json(
                404,
                json!({"success": false, "error": "no_such_ask",
                       "msg": format!("Instance type by id {offer} is not available."),
                       "ask_id": offer}),
            );
        };
        row.rented = true;
        let offer_json = row.json.clone();
        let id = self.next_instance_id;
        self.next_instance_id += 1;
        let mut obj = instance_object(id, &offer_json, disk);
        obj.insert("label".into(), json!(label));
        obj.insert("image_uuid".into(), json!(image));
        obj.insert("image_runtype".into(), json!(runtype));
        obj.insert(
            "image_args".into(),
            b.get("args").cloned().unwrap_or(json!([])),
        );
        obj.insert(
            "extra_env".into(),
            json!(env.iter().map(|(k, v)| json!([k, v])).collect::<Vec<_>>()),
        );
        obj.insert(
            "onstart".into(),
            b.get("onstart").cloned().unwrap_or(Value::Null),
        );
        obj.insert("start_date".into(), json!(now as f64 / 1000.0));
        obj.insert("is_bid".into(), json!(price.is_some()));
        let min_bid = offer_json.get("min_bid").and_then(Value::as_f64);
        let outbid = matches!((price, min_bid), (Some(p), Some(m)) if p < m);
        if outbid {
            for k in [
                "actual_status",
                "intended_status",
                "cur_state",
                "next_state",
            ] {
                obj.insert(k.into(), json!("stopped"));
            }
        }
        self.instances.insert(
            id,
            FakeInstance {
                obj,
                env,
                created_ms: now,
                status_pinned: outbid,
                offer_id: Some(offer),
            },
        );
        if outbid {
            return ok(json!({"success": false, "error": "insufficient_bid",
                             "msg": "bid is below the current minimum; the instance was created stopped",
                             "new_contract": id}));
        }
        ok(json!({"success": true, "new_contract": id,
                  "instance_api_key": format!("fake-instance-key-{id}")}))
    }

    fn list(&mut self, query: &str) -> FakeReply {
        let params = parse_query(query);
        let json_param = |name: &str| -> Result<Option<Value>, FakeReply> {
            match params.get(name) {
                None => Ok(None),
                Some(s) => serde_json::from_str(s)
                    .map(Some)
                    .map_err(|_| error(400, "invalid_args", &format!("{name} is not JSON"))),
            }
        };
        let limit = match json_param("limit") {
            Ok(None) => 25,
            Ok(Some(v)) => match v.as_i64() {
                Some(n) if n <= 0 => 5,
                Some(n) => n.min(25) as usize,
                None => return error(400, "invalid_args", "limit must be an integer"),
            },
            Err(e) => return e,
        };
        let mut desc = false;
        match json_param("order_by") {
            Ok(None) => {}
            Ok(Some(Value::Array(cols))) => {
                for c in cols {
                    match (
                        c.get("col").and_then(Value::as_str),
                        c.get("dir").and_then(Value::as_str),
                    ) {
                        (Some("id"), Some("asc") | None) => desc = false,
                        (Some("id"), Some("desc")) => desc = true,
                        _ => return error(400, "invalid_args", "the fake orders by id only"),
                    }
                }
            }
            Ok(Some(_)) => return error(400, "invalid_args", "order_by must be a list"),
            Err(e) => return e,
        }
        let mut filters: Vec<(String, String, Value)> = Vec::new();
        match json_param("select_filters") {
            Ok(None) => {}
            Ok(Some(Value::Object(m))) => {
                for (col, ops) in m {
                    if !LIST_FILTER_COLS.contains(&col.as_str()) {
                        return error(400, "invalid_args", &format!("cannot filter on {col}"));
                    }
                    let Some(ops) = ops.as_object() else {
                        return error(400, "invalid_args", "bad filter");
                    };
                    for (op, arg) in ops {
                        if !OPS.contains(&op.as_str()) {
                            return error(400, "invalid_args", &format!("unknown operator {op}"));
                        }
                        filters.push((col.clone(), op.clone(), arg.clone()));
                    }
                }
            }
            Ok(Some(_)) => return error(400, "invalid_args", "select_filters must be an object"),
            Err(e) => return e,
        }
        let cols: Option<Vec<String>> = match json_param("select_cols") {
            Ok(None) => None,
            Ok(Some(Value::Array(c))) => {
                let names: Vec<String> = c
                    .iter()
                    .filter_map(|v| v.as_str().map(String::from))
                    .collect();
                (!names.iter().any(|n| n == "*")).then_some(names)
            }
            Ok(Some(_)) => return error(400, "invalid_args", "select_cols must be a list"),
            Err(e) => return e,
        };
        let after = match params.get("after_token") {
            None => None,
            Some(t) => match self.tokens.get(t) {
                Some(&(last, d)) if d == desc => Some(last),
                _ => return error(400, "invalid_token", "invalid after_token"),
            },
        };
        let total = self.instances.len();
        let mut rows: Vec<(u64, Value)> = self
            .instances
            .iter()
            .map(|(id, i)| (*id, self.view(i)))
            .filter(|(_, v)| {
                filters
                    .iter()
                    .all(|(f, op, arg)| op_matches(v.get(f).unwrap_or(&Value::Null), op, arg))
            })
            .collect();
        if desc {
            rows.reverse();
        }
        let found = rows.len();
        let mut label_counts: BTreeMap<String, u64> = BTreeMap::new();
        for (_, v) in &rows {
            if let Some(l) = v.get("label").and_then(Value::as_str) {
                *label_counts.entry(l.to_string()).or_default() += 1;
            }
        }
        let rest: Vec<(u64, Value)> = rows
            .into_iter()
            .filter(|(id, _)| match after {
                None => true,
                Some(last) if desc => *id < last,
                Some(last) => *id > last,
            })
            .collect();
        let more = rest.len() > limit;
        let page: Vec<(u64, Value)> = rest.into_iter().take(limit).collect();
        let next_token = match (more, page.last()) {
            (true, Some((last, _))) => {
                self.counter += 1;
                // Opaque, and with characters that need URL encoding.
                let token = format!("c{:06x}+{last:x}/q==", self.counter);
                self.tokens.insert(token.clone(), (*last, desc));
                json!(token)
            }
            _ => Value::Null,
        };
        let instances: Vec<Value> = page
            .into_iter()
            .map(|(_, v)| match &cols {
                None => v,
                Some(cols) => Value::Object(
                    cols.iter()
                        .map(|c| (c.clone(), v.get(c).cloned().unwrap_or(Value::Null)))
                        .collect(),
                ),
            })
            .collect();
        ok(json!({
            "success": true,
            "instances_found": found,
            "total_instances": total,
            "label_counts": label_counts,
            "next_token": next_token,
            "instances": instances,
        }))
    }

    fn show(&self, id: u64) -> FakeReply {
        match self.instances.get(&id) {
            Some(i) => ok(json!({ "instances": self.view(i) })),
            None if self.show_missing_404 => error(
                404,
                "no_such_instance",
                &format!("Instance {id} not found."),
            ),
            None => ok(json!({ "instances": null })),
        }
    }

    fn manage(&mut self, id: u64, body: &str) -> FakeReply {
        let Ok(Value::Object(b)) = serde_json::from_str::<Value>(body) else {
            return error(400, "invalid_args", "the body must be a JSON object");
        };
        let Some(inst) = self.instances.get_mut(&id) else {
            return error(
                404,
                "no_such_instance",
                &format!("Instance {id} not found."),
            );
        };
        let mut changed = false;
        if let Some(state) = b.get("state") {
            match state.as_str() {
                Some("stopped") => {
                    for k in [
                        "actual_status",
                        "intended_status",
                        "cur_state",
                        "next_state",
                    ] {
                        inst.obj.insert(k.into(), json!("stopped"));
                    }
                    inst.obj.insert("ports".into(), Value::Null);
                }
                Some("running") => {
                    for k in [
                        "actual_status",
                        "intended_status",
                        "cur_state",
                        "next_state",
                    ] {
                        inst.obj.insert(k.into(), json!("running"));
                    }
                }
                _ => return error(400, "invalid_args", "state must be running or stopped"),
            }
            inst.status_pinned = true;
            changed = true;
        }
        if let Some(label) = b.get("label") {
            match label.as_str() {
                Some(l) if l.chars().count() <= 1024 => {
                    inst.obj.insert("label".into(), json!(l));
                }
                Some(_) => return error(400, "label_too_long", "label is too long"),
                None => return error(400, "invalid_args", "label must be a string"),
            }
            changed = true;
        }
        if !changed {
            return error(400, "invalid_args", "nothing to change");
        }
        ok(json!({"success": true}))
    }

    fn destroy(&mut self, id: u64) -> FakeReply {
        let Some(inst) = self.instances.remove(&id) else {
            return error(
                404,
                "no_such_instance",
                &format!("Instance {id} not found."),
            );
        };
        // The machine is free again.
        if let Some(offer) = inst.offer_id {
            if let Some(o) = self
                .offers
                .iter_mut()
                .find(|o| offer_id(&o.json) == Some(offer))
            {
                o.rented = false;
            }
        }
        ok(json!({"success": true}))
    }

    fn request_logs(&mut self, id: u64, body: &str) -> FakeReply {
        if !self.instances.contains_key(&id) {
            return error(404, "invalid_id", "Invalid instance id.");
        }
        let b: Value = serde_json::from_str(body).unwrap_or(json!({}));
        let tail = match b.get("tail") {
            Some(Value::String(s)) => s.trim().parse().unwrap_or(1000),
            Some(v) => v.as_u64().unwrap_or(1000) as usize,
            None => 1000,
        };
        let text = self.log_texts.get(&id).cloned().unwrap_or_else(|| {
            (1..=5)
                .map(|n| format!("instance {id} log line {n}\n"))
                .collect()
        });
        let lines: Vec<&str> = text.lines().collect();
        let kept = lines[lines.len().saturating_sub(tail)..].join("\n") + "\n";
        self.counter += 1;
        let token = format!("{id:x}{:08x}", self.counter);
        self.log_objects.insert(
            token.clone(),
            LogObject {
                text: kept,
                misses_left: self.log_misses,
            },
        );
        ok(json!({
            "success": true,
            "result_url": format!("{}/instance_logs/{token}.log", self.base_url),
            "msg": "Logs are being prepared; fetch result_url.",
        }))
    }

    fn log_file(&mut self, token: &str) -> FakeReply {
        let not_yet = FakeReply {
            content_type: "application/xml".into(),
            ..FakeReply::text(404, "<Error><Code>NoSuchKey</Code></Error>")
        };
        match self.log_objects.get_mut(token) {
            Some(o) if o.misses_left > 0 => {
                o.misses_left -= 1;
                not_yet
            }
            Some(o) => FakeReply::text(200, &o.text),
            None => not_yet,
        }
    }
}

const OPS: &[&str] = &["eq", "neq", "gt", "gte", "lt", "lte", "in", "notin"];
const RUNTYPES: &[&str] = &[
    "args",
    "ssh",
    "ssh_proxy",
    "ssh_direct",
    "ssh_direc",
    "jupyter",
    "jupyter_proxy",
    "jupyter_direct",
    "jupyter_direc",
];
const LIST_FILTER_COLS: &[&str] = &[
    "actual_status",
    "intended_status",
    "cur_state",
    "label",
    "id",
    "gpu_name",
    "verification",
];

fn route_of(method: &str, path: &str) -> (Route, Option<String>) {
    let id_of = |rest: &str| -> Option<String> {
        let id = rest.strip_suffix('/')?;
        (!id.is_empty() && id.bytes().all(|b| b.is_ascii_digit())).then(|| id.to_string())
    };
    match method {
        "POST" if path == "/api/v0/bundles/" => return (Route::Offers, None),
        "GET" if path == "/api/v1/instances/" => return (Route::ListV1, None),
        "GET" if path == "/api/v0/instances/" => return (Route::ListV0, None),
        _ => {}
    }
    if let Some(rest) = path.strip_prefix("/api/v0/asks/") {
        if let (Some(id), "PUT") = (id_of(rest), method) {
            return (Route::Create, Some(id));
        }
    }
    if let Some(rest) = path.strip_prefix("/api/v0/instances/request_logs/") {
        if let (Some(id), "PUT") = (id_of(rest), method) {
            return (Route::RequestLogs, Some(id));
        }
    }
    if let Some(rest) = path.strip_prefix("/api/v0/instances/") {
        if let Some(id) = id_of(rest) {
            match method {
                "GET" => return (Route::Show, Some(id)),
                "PUT" => return (Route::Manage, Some(id)),
                "DELETE" => return (Route::Destroy, Some(id)),
                _ => {}
            }
        }
    }
    if let Some(token) = path
        .strip_prefix("/instance_logs/")
        .and_then(|r| r.strip_suffix(".log"))
    {
        if method == "GET" {
            return (Route::LogFile, Some(token.to_string()));
        }
    }
    (Route::Other, None)
}

fn offer_id(v: &Value) -> Option<u64> {
    v.get("id").and_then(Value::as_u64)
}

/// A new instance object from an offer, priced for `disk_gb`.
fn instance_object(id: u64, offer: &Value, disk_gb: f64) -> Map<String, Value> {
    let priced = priced(offer, Some(disk_gb));
    let pick = |k: &str| priced.get(k).cloned().unwrap_or(Value::Null);
    let mut obj = Map::new();
    obj.insert("id".into(), json!(id));
    for k in [
        "machine_id",
        "host_id",
        "num_gpus",
        "gpu_name",
        "gpu_ram",
        "gpu_arch",
        "cuda_max_good",
        "driver_version",
        "cpu_cores_effective",
        "cpu_ram",
        "dph_base",
        "storage_cost",
        "storage_total_cost",
        "dph_total",
        "min_bid",
        "verification",
        "geolocation",
        "public_ipaddr",
        "end_date",
    ] {
        obj.insert(k.into(), pick(k));
    }
    obj.insert("reliability2".into(), pick("reliability"));
    obj.insert("actual_status".into(), Value::Null);
    obj.insert("intended_status".into(), json!("running"));
    obj.insert("cur_state".into(), json!("running"));
    obj.insert("next_state".into(), json!("running"));
    obj.insert("status_msg".into(), Value::Null);
    obj.insert("label".into(), Value::Null);
    obj.insert("disk_space".into(), json!(disk_gb));
    obj.insert("ssh_host".into(), json!(format!("ssh{}.vast.ai", id % 9)));
    obj.insert("ssh_port".into(), json!(10_000 + id % 50_000));
    obj.insert("ports".into(), Value::Null);
    obj.insert("time_remaining".into(), json!(""));
    obj
}

/// The offer priced for `storage_gb` of disk: dph_total = dph_base + GB × $/GB/month / 720.
fn priced(offer: &Value, storage_gb: Option<f64>) -> Value {
    let mut o = offer.clone();
    let base = o.get("dph_base").and_then(Value::as_f64);
    let cost = o.get("storage_cost").and_then(Value::as_f64);
    if let (Some(gb), Some(base), Some(cost)) = (storage_gb, base, cost) {
        let storage = gb * cost / 720.0;
        o["storage_total_cost"] = json!(storage);
        o["dph_total"] = json!(base + storage);
    }
    if o.is_object() {
        o["rented"] = json!(false);
    }
    o
}

/// A field of an offer as a filter sees it (`verified` is derived from `verification`).
fn offer_field(o: &Value, field: &str) -> Value {
    match (field, o.get(field)) {
        (_, Some(v)) => v.clone(),
        ("verified", None) => {
            json!(o.get("verification").and_then(Value::as_str) == Some("verified"))
        }
        ("external", None) => json!(false),
        ("rentable", None) => json!(true),
        _ => Value::Null,
    }
}

fn loose_eq(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

fn compare(a: &Value, b: &Value) -> Option<std::cmp::Ordering> {
    match (a, b) {
        (Value::Number(_), Value::Number(_)) => a.as_f64()?.partial_cmp(&b.as_f64()?),
        (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
        _ => None,
    }
}

fn op_matches(v: &Value, op: &str, arg: &Value) -> bool {
    use std::cmp::Ordering::*;
    let list = || arg.as_array().map(Vec::as_slice).unwrap_or(&[]);
    match op {
        "eq" => loose_eq(v, arg),
        "neq" => !loose_eq(v, arg),
        "gt" => compare(v, arg) == Some(Greater),
        "gte" => matches!(compare(v, arg), Some(Greater | Equal)),
        "lt" => compare(v, arg) == Some(Less),
        "lte" => matches!(compare(v, arg), Some(Less | Equal)),
        "in" => list().iter().any(|x| loose_eq(v, x)),
        "notin" => !list().iter().any(|x| loose_eq(v, x)),
        _ => false,
    }
}

/// Sort order of two field values; missing or null values go last either way.
fn order_values(a: Option<&Value>, b: Option<&Value>, desc: bool) -> std::cmp::Ordering {
    use std::cmp::Ordering::*;
    let a = a.filter(|v| !v.is_null());
    let b = b.filter(|v| !v.is_null());
    match (a, b) {
        (None, None) => Equal,
        (None, Some(_)) => Greater,
        (Some(_), None) => Less,
        (Some(x), Some(y)) => {
            let o = compare(x, y).unwrap_or(Equal);
            if desc {
                o.reverse()
            } else {
                o
            }
        }
    }
}

/// Decoded `application/x-www-form-urlencoded` pairs (`+` is a space).
fn parse_query(query: &str) -> HashMap<String, String> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (form_decode(k), form_decode(v))
        })
        .collect()
}

fn form_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(h * 16 + l);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
