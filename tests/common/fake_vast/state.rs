//! What the fake holds: offers, instances, list tokens, queued failures, rate-limit
//! bookkeeping, the request log and the log objects.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use fleetagent::clock::Clock;
use serde_json::{Map, Value};

use super::faults::{FakeReply, RateRule};
use super::routes::Route;
use super::SeenRequest;

pub(super) struct OfferRow {
    pub(super) json: Value,
    pub(super) rented: bool,
}

pub(super) struct FakeInstance {
    pub(super) obj: Map<String, Value>,
    pub(super) env: BTreeMap<String, String>,
    pub(super) created_ms: i64,
    /// Set by a test or a state change: progression no longer applies.
    pub(super) status_pinned: bool,
    pub(super) offer_id: Option<u64>,
}

pub(super) struct LogObject {
    pub(super) text: String,
    pub(super) misses_left: u32,
}

pub(super) struct State {
    pub(super) clock: Arc<dyn Clock>,
    pub(super) base_url: String,
    pub(super) api_key: Option<String>,
    pub(super) auth_error_status: u16,
    pub(super) offers: Vec<OfferRow>,
    pub(super) next_offer_id: u64,
    pub(super) next_instance_id: u64,
    pub(super) instances: BTreeMap<u64, FakeInstance>,
    pub(super) tokens: HashMap<String, (u64, bool)>,
    pub(super) counter: u64,
    pub(super) before: HashMap<Route, VecDeque<FakeReply>>,
    pub(super) after: HashMap<Route, VecDeque<FakeReply>>,
    /// Answers handled at once (the state as it is when asked) but sent this much later.
    pub(super) late: HashMap<Route, VecDeque<std::time::Duration>>,
    /// Answers carry no usable `Date` (a proxy that drops it; tiny_http would add its own).
    pub(super) dateless: bool,
    pub(super) rate: HashMap<Route, RateRule>,
    pub(super) last_ok: HashMap<Route, i64>,
    pub(super) blocked_until: HashMap<Route, i64>,
    pub(super) log: Vec<SeenRequest>,
    pub(super) log_texts: HashMap<u64, String>,
    pub(super) log_misses: u32,
    pub(super) log_objects: HashMap<String, LogObject>,
    pub(super) show_missing_404: bool,
    pub(super) progression: Option<(i64, i64)>,
    /// Searches left today and the `X-RateLimit-Reset` sent once they are spent.
    pub(super) search_quota: Option<(u32, String)>,
}
