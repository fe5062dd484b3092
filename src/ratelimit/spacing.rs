//! vast.ai's own per-endpoint rate limits, as the HTTP client must keep them: creates one
//! call per 4.5 s per key (create_instance.yaml `x-rate-limit`), a 12 s penalty when that is
//! broken, and the wait a 429 implies (shared/reference/vastai-api.md). The HTTP client
//! (`vast/http.rs`) sends and retries; this file says how long to wait.

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use serde_json::Value;

use crate::clock::{Clock, Millis};

/// vast.ai allows one create per 4.5 s per key (create_instance.yaml `x-rate-limit`).
pub const CREATE_SPACING: Duration = Duration::from_millis(4_500);
/// Added to the spacing between our creates: vast.ai measures arrivals, we measure sends, and
/// a first request that must open its connection arrives later than the next one.
pub const CREATE_MARGIN: Duration = Duration::from_millis(250);
/// ...and blocks creates for 12 s after that limit is broken.
pub const CREATE_PENALTY: Duration = Duration::from_secs(12);

/// vast.ai's documented interval between destroys (`DELETE /instances/{id}/`, 3.0 s).
pub const DESTROY_SPACING: Duration = Duration::from_millis(3_000);
/// ...and between the pages of the v1 list (1.0 s per call).
pub const LIST_PAGE_SPACING: Duration = Duration::from_millis(1_000);

/// The plain form of the create gate for the other spaced endpoints (destroys): calls of one
/// process go at least `gap` apart, plus our margin.
#[derive(Debug)]
pub struct Spacer {
    gap: Duration,
    last: Mutex<Option<Millis>>,
}

impl Spacer {
    pub fn new(gap: Duration) -> Self {
        Spacer {
            gap,
            last: Mutex::new(None),
        }
    }

    /// Sleeps on `clock` until `gap` (plus the margin) has passed since the last call, then
    /// records this one as sent now.
    pub fn space(&self, clock: &dyn Clock) {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        wait_gap(&mut last, self.gap, clock);
    }

    /// Records a call as sent now: after a call whose retries (a 429 waited out) sent it
    /// again later than [`Self::space`] recorded, the next one is spaced from the last
    /// attempt (the scale walkthrough: each destroy after a 429 went 0.25 s after the
    /// previous one's retry, and was refused too).
    pub fn mark(&self, clock: &dyn Clock) {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        *last = Some(clock.now_ms());
    }
}

/// When this process last sent a create (or the latest one another process sent, as
/// [`CreateGate::previous_create`] reported). Held for a whole create, retries included, so
/// creates from several threads of one process queue up behind vast.ai's spacing.
#[derive(Debug, Default)]
pub struct CreateGate {
    last: Mutex<Option<Millis>>,
}

/// One create's hold on the [`CreateGate`]: no other create starts until it is dropped.
#[derive(Debug)]
pub struct CreateTurn<'a> {
    last: MutexGuard<'a, Option<Millis>>,
}

impl CreateGate {
    pub fn new() -> Self {
        Self::default()
    }

    /// A create this account sent at `at` from another process: the next create here is
    /// spaced after it too (vast.ai spaces creates per key, not per process). An earlier
    /// time than one already known changes nothing.
    pub fn previous_create(&self, at: Millis) {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        *last = Some(last.map_or(at, |g| g.max(at)));
    }

    /// Waits for any create already under way in this process, then holds the gate.
    pub fn turn(&self) -> CreateTurn<'_> {
        CreateTurn {
            last: self.last.lock().unwrap_or_else(|e| e.into_inner()),
        }
    }
}

impl CreateTurn<'_> {
    /// Before each create attempt: sleeps on `clock` until 4.5 s (plus our margin) have
    /// passed since the last create sent, then records this attempt as sent now.
    pub fn space(&mut self, clock: &dyn Clock) {
        wait_gap(&mut self.last, CREATE_SPACING, clock);
    }
}

use crate::store::clock_step::CLOCK_STEP_MS;

/// Sleeps on `clock` until `gap` plus our margin has passed since `last`, then records this
/// call in `last` as sent now. A last call dated more than [`CLOCK_STEP_MS`] after now (the
/// clock stepped back since: NTP, a VM restored) counts as sent now, so the wait is one gap:
/// waiting for the clock to catch up slept a run 2 hours past its deadline while every
/// worker was dead.
fn wait_gap(last: &mut Option<Millis>, gap: Duration, clock: &dyn Clock) {
    if let Some(prev) = *last {
        let full = (gap + CREATE_MARGIN).as_millis() as Millis;
        let now = clock.now_ms();
        // Seconds ahead is another process a moment ago; a minute ahead is a clock that moved.
        let prev = if prev > now + CLOCK_STEP_MS {
            now
        } else {
            prev
        };
        let wait = prev + full - now;
        if wait > 0 {
            clock.sleep(Duration::from_millis(wait as u64));
        }
    }
    *last = Some(clock.now_ms());
}

/// Seconds from a `Retry-After` header (the delta form; a date is ignored).
pub fn retry_after_secs(header: Option<&str>) -> Option<Duration> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

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
    fn destroys_are_spaced_three_seconds_apart() {
        let clock = ManualClock::new(10_000);
        let spacer = Spacer::new(DESTROY_SPACING);
        spacer.space(&clock);
        assert_eq!(clock.now_ms(), 10_000, "the first goes at once");
        spacer.space(&clock);
        assert_eq!(clock.now_ms(), 13_250, "3 s plus the margin");
    }

    #[test]
    fn creates_are_spaced_after_the_last_one_known() {
        let clock = ManualClock::new(10_000);
        let gate = CreateGate::new();
        gate.turn().space(&clock);
        assert_eq!(clock.now_ms(), 10_000, "the first create goes at once");
        gate.turn().space(&clock);
        assert_eq!(clock.now_ms(), 14_750, "4.5 s plus the margin");
        gate.previous_create(16_000);
        gate.previous_create(1_000);
        gate.turn().space(&clock);
        assert_eq!(clock.now_ms(), 20_750, "after the other process's create");
        // A create dated 2 hours ahead (the clock stepped back since): one gap, not 2 hours.
        gate.previous_create(20_750 + 7_200_000);
        gate.turn().space(&clock);
        assert_eq!(clock.now_ms(), 25_500, "at most the gap and its margin");
    }
}
