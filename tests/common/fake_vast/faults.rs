//! The fault knobs: canned answers instead of the handler's (or after it: a lost answer), and
//! per-route rate limits answered with vast.ai's plain-text 429 and an optional penalty.

use std::time::Duration;

use serde_json::{json, Value};

use super::routes::Route;
use super::state::State;
use super::FakeVast;

/// A canned answer to inject.
#[derive(Debug, Clone)]
pub struct FakeReply {
    pub status: u16,
    pub body: String,
    pub content_type: String,
    pub retry_after: Option<String>,
    /// `X-RateLimit-Reset`, when set.
    pub rate_reset: Option<String>,
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
            rate_reset: None,
            hang: false,
        }
    }

    pub fn text(status: u16, body: &str) -> Self {
        FakeReply {
            status,
            body: body.into(),
            content_type: "text/plain".into(),
            retry_after: None,
            rate_reset: None,
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

    /// vast.ai's JSON 429 (the create's documented shape).
    pub fn too_frequent_json(threshold_secs: f64) -> Self {
        Self::json(
            429,
            json!({"detail": format!("API requests too frequent endpoint threshold={threshold_secs}")}),
        )
    }

    /// The daily search quota spent: a JSON 429 `search_quota_exceeded`, a `Retry-After` of
    /// hours and `X-RateLimit-Reset` saying when it refills.
    pub fn search_quota_exceeded(reset: &str) -> Self {
        let mut r = Self::json(
            429,
            json!({"success": false, "error": "search_quota_exceeded",
                   "msg": "Daily search quota exceeded", "retry_after": 7200}),
        )
        .with_retry_after("7200");
        r.rate_reset = Some(reset.into());
        r
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

pub(super) struct RateRule {
    pub(super) min_interval_ms: i64,
    pub(super) penalty_ms: i64,
    pub(super) retry_after: bool,
}

impl FakeVast {
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

    /// The next `n` requests to `route` are handled when they come (a listing says what is
    /// on the account then) and answered `delay` later, while other requests go on: a
    /// listing that was asked for before a change and arrives after it.
    pub fn answer_late(&self, route: Route, n: usize, delay: Duration) {
        let mut s = self.lock();
        let q = s.late.entry(route).or_default();
        q.extend(std::iter::repeat_n(delay, n));
    }

    /// Answers without a `Date` header (a proxy that drops it) from now on, or with it again.
    pub fn set_dateless(&self, on: bool) {
        self.lock().dateless = on;
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
}

impl State {
    pub(super) fn rate_check(&mut self, route: Route, now: i64) -> Option<FakeReply> {
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
}
