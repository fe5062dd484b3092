//! How long the model may take: each turn gets what the run's deadline leaves, less a reserve
//! for the fallback rules and the end of the run. Pure.

use std::time::Duration;

use crate::clock::Millis;
use crate::config::Config;

/// Time kept back from the run's deadline for what follows the model: the fallback rules'
/// launches (creates are spaced 4.5 s apart) and finishing the run. A fifth of the deadline,
/// between 5 s and 60 s.
pub fn deadline_reserve(config: &Config) -> Duration {
    Duration::from_secs((config.run.deadline_secs / 5).clamp(5, 60))
}

/// Below this, a model turn is not started: no answer could come in time.
pub const MIN_TURN: Duration = Duration::from_secs(3);

/// Time for the next model turn: `Some(ms)` to wait at most, or None when what the deadline
/// leaves (less the reserve) is below [`MIN_TURN`] and no turn should start.
pub fn turn_budget(config: &Config, deadline: Millis, now: Millis) -> Option<i64> {
    let reserve_ms = deadline_reserve(config).as_millis() as i64;
    let left_ms = deadline - reserve_ms - now;
    (left_ms >= MIN_TURN.as_millis() as i64).then_some(left_ms)
}

/// Whether a model's tool call may still run: the time the deadline leaves is above the
/// reserve, which is the floor's and the end of the run's (each create is spaced 4.5 s, so
/// an answer of many launches could run past the deadline and be killed mid-pass).
pub fn call_allowed(config: &Config, deadline: Millis, now: Millis) -> bool {
    deadline - deadline_reserve(config).as_millis() as i64 - now > 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turn_starts_only_with_time_left_beyond_the_reserve() {
        let mut c = Config::default();
        c.run.deadline_secs = 100; // reserve 20 s
        let deadline = 1_000_000;
        assert_eq!(turn_budget(&c, deadline, deadline - 30_000), Some(10_000));
        assert_eq!(turn_budget(&c, deadline, deadline - 23_000), Some(3_000));
        assert_eq!(turn_budget(&c, deadline, deadline - 22_999), None);
        assert!(call_allowed(&c, deadline, deadline - 20_001));
        assert!(!call_allowed(&c, deadline, deadline - 20_000));
        c.run.deadline_secs = 1_000; // reserve capped at 60 s
        assert_eq!(deadline_reserve(&c), Duration::from_secs(60));
        c.run.deadline_secs = 10; // at least 5 s
        assert_eq!(deadline_reserve(&c), Duration::from_secs(5));
    }
}
