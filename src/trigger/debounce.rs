//! Priority debounce: a pure function of (most urgent waiting priority, doorbell mtime, now,
//! when waiting began). A burst of rings becomes one pass.

use std::time::Duration;

use crate::clock::Millis;
use crate::config::DebounceConfig;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Claim now.
    Go,
    /// Look again after this long.
    Wait(Duration),
}

/// Wait until the doorbell has been quiet (not modified; an absent doorbell is quiet) for
/// the window of the most urgent waiting priority, but never past `max_wait_secs` since
/// `started`. Nothing waiting: go at once.
pub fn step(
    top_priority: Option<u8>,
    doorbell_mtime: Option<Millis>,
    now: Millis,
    started: Millis,
    cfg: &DebounceConfig,
) -> Step {
    let Some(priority) = top_priority else {
        return Step::Go;
    };
    let Some(mtime) = doorbell_mtime else {
        return Step::Go;
    };
    // A ring dated over a minute after now was not made by this clock as it reads now (it
    // stepped back since): no quiet could be measured from it, and the pass waited
    // max_wait_secs in silence.
    if mtime > now + crate::store::clock_step::CLOCK_STEP_MS {
        return Step::Go;
    }
    let window = cfg.window_secs(priority) as i64 * 1000;
    let quiet_for = now - mtime;
    if quiet_for >= window {
        return Step::Go;
    }
    let waited = now - started;
    let max_wait = cfg.max_wait_secs as i64 * 1000;
    if waited >= max_wait {
        return Step::Go;
    }
    let left = (window - quiet_for).min(max_wait - waited).max(1);
    Step::Wait(Duration::from_millis(left as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> DebounceConfig {
        DebounceConfig::default()
    }

    #[test]
    fn nothing_waiting_goes() {
        assert_eq!(step(None, Some(0), 0, 0, &cfg()), Step::Go);
    }

    #[test]
    fn absent_doorbell_is_quiet() {
        assert_eq!(step(Some(2), None, 0, 0, &cfg()), Step::Go);
    }

    #[test]
    fn a_ring_dated_after_a_clock_step_back_is_quiet() {
        // Two hours ahead: the clock stepped back since; no wait of max_wait_secs.
        assert_eq!(
            step(Some(0), Some(7_210_000), 10_000, 10_000, &cfg()),
            Step::Go
        );
        // A few seconds ahead (a coarse mtime): still debounced.
        assert!(matches!(
            step(Some(1), Some(12_000), 10_000, 10_000, &cfg()),
            Step::Wait(_)
        ));
    }

    #[test]
    fn waits_for_the_window_of_the_top_priority() {
        // P1: 10 s window; last ring 3 s ago -> wait 7 s.
        assert_eq!(
            step(Some(1), Some(7_000), 10_000, 10_000, &cfg()),
            Step::Wait(Duration::from_millis(7_000))
        );
        // P0 arrives: 2 s window, quiet for 3 s -> go.
        assert_eq!(step(Some(0), Some(7_000), 10_000, 10_000, &cfg()), Step::Go);
        // P2: 30 s window.
        assert_eq!(
            step(Some(2), Some(10_000), 10_000, 10_000, &cfg()),
            Step::Wait(Duration::from_millis(30_000))
        );
    }

    #[test]
    fn never_longer_than_max_wait() {
        // Rung continuously: after 60 s of waiting, go anyway.
        assert_eq!(
            step(Some(2), Some(70_000), 70_000, 10_000, &cfg()),
            Step::Go
        );
        // 55 s waited, 30 s window: wait only the 5 s left.
        assert_eq!(
            step(Some(2), Some(65_000), 65_000, 10_000, &cfg()),
            Step::Wait(Duration::from_millis(5_000))
        );
    }
}
