//! A faithful fake of vast.ai's REST API on 127.0.0.1 (shared/reference/vastai-api.md §9):
//! offers, creates, the paginated v1 list (and the v0 list answering 410), show, stop/label,
//! destroy and logs, start and change-bid, bids that are outbid mid-life and resume (in both
//! shapes the sources describe), the daily search quota, with bearer auth, per-route rate limits and injected failures. Time
//! comes from the `Clock` it is given, so a test sharing a `ManualClock` with the client
//! never sleeps for real. It owns no client logic and never touches the network beyond
//! its loopback socket.

mod faults;
mod instances;
mod logs;
mod offers;
mod query;
mod routes;
mod state;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use fleetagent::clock::{Clock, SystemClock};
use serde_json::Value;
use tiny_http::{Header, Request, Response, Server};

pub use faults::FakeReply;
pub use routes::Route;

use query::parse_query;
use routes::Outcome;
use state::State;

/// The API key the fake accepts unless told otherwise.
pub const FAKE_API_KEY: &str = "fake-vast-key-0123456789abcdef";

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
            late: HashMap::new(),
            dateless: false,
            rate: HashMap::new(),
            last_ok: HashMap::new(),
            blocked_until: HashMap::new(),
            log: Vec::new(),
            log_texts: HashMap::new(),
            log_misses: 3,
            log_objects: HashMap::new(),
            show_missing_404: false,
            progression: None,
            search_quota: None,
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
    // Late answers (`answer_late`): sent once their time comes.
    let mut late: Vec<(std::time::Instant, Request, FakeReply, Option<i64>)> = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        let now = std::time::Instant::now();
        let (due, waiting): (Vec<_>, Vec<_>) = late.into_iter().partition(|l| l.0 <= now);
        late = waiting;
        for (_, rq, r, at) in due {
            respond(rq, r, at);
        }
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
        let (outcome, now_ms) = {
            let mut st = state.lock().unwrap_or_else(|e| e.into_inner());
            let now_ms = (!st.dateless).then(|| st.clock.now_ms());
            (st.handle(&method, &url, body, authorization), now_ms)
        };
        match outcome {
            Outcome::Hold => held.push(rq),
            Outcome::Late(r, delay) => late.push((now + delay, rq, r, now_ms)),
            Outcome::Reply(r) => respond(rq, r, now_ms),
        }
    }
}

/// Send `r`, dated `now_ms` by the fake's clock (no `Date` when None).
fn respond(rq: Request, r: FakeReply, now_ms: Option<i64>) {
    let mut resp = Response::from_string(r.body).with_status_code(r.status);
    if let Ok(h) = Header::from_bytes("Content-Type", r.content_type.as_bytes()) {
        resp.add_header(h);
    }
    // vast.ai's clock is the fake's (tiny_http's own would be the host's).
    // Without one, an empty `Date`: tiny_http adds the host's own to an answer that has none.
    let date = now_ms
        .and_then(chrono::DateTime::from_timestamp_millis)
        .map(|d| d.format("%a, %d %b %Y %H:%M:%S GMT").to_string())
        .unwrap_or_default();
    if let Ok(h) = Header::from_bytes("Date", date.as_bytes()) {
        resp.add_header(h);
    }
    if let Some(ra) = r.retry_after {
        if let Ok(h) = Header::from_bytes("Retry-After", ra.as_bytes()) {
            resp.add_header(h);
        }
    }
    if let Some(reset) = r.rate_reset {
        if let Ok(h) = Header::from_bytes("X-RateLimit-Reset", reset.as_bytes()) {
            resp.add_header(h);
        }
    }
    let _ = rq.respond(resp);
}
