//! The launch window, the incident's "all 4 launches refused while every worker was dead"
//! fix: successful launches (and open intents) in the last `launch_window_minutes` are counted
//! from the action ledger (a one-shot process remembers nothing else) against
//! `launch_window_max`, and while WORKERS DEAD the same window allows `emergency_launch_max`
//! in total. Pure; the money caps are the guardrails' (`policy::guardrails`).

use crate::clock::Millis;
use crate::config::PolicyConfig;

/// The launch window right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowState {
    /// Launches counted in the window (succeeded or open intents).
    pub used: u32,
    /// `launch_window_max`, or `emergency_launch_max` while WORKERS DEAD.
    pub limit: u32,
    pub emergency: bool,
    /// When the window is full: seconds until the oldest launch that must age out does.
    pub retry_after_secs: Option<u64>,
}

/// The window over `launches` (created_at of launches that count: outcome `ok` or `intent`,
/// as `actions::launches_since` returns them). While WORKERS DEAD the same window allows
/// `emergency_launch_max` launches in total instead of `launch_window_max`.
pub fn window_state(
    launches: &[Millis],
    now: Millis,
    policy: &PolicyConfig,
    workers_dead: bool,
) -> WindowState {
    let window_ms = policy.launch_window_minutes as i64 * 60_000;
    let mut inside: Vec<Millis> = launches
        .iter()
        .copied()
        .filter(|t| *t > now - window_ms)
        .collect();
    inside.sort_unstable();
    let limit = if workers_dead {
        policy.emergency_launch_max
    } else {
        policy.launch_window_max
    };
    let used = inside.len() as u32;
    let retry_after_secs = (used >= limit).then(|| {
        if limit == 0 {
            // A window that allows nothing: no slot ever frees; say one window length.
            return (window_ms / 1000).max(1) as u64;
        }
        // One slot frees when the launch at index used - limit ages out of the window.
        let t = inside
            .get((used - limit) as usize)
            .copied()
            .unwrap_or(now - window_ms);
        let ms = (t + window_ms - now).max(0);
        ((ms + 999) / 1000).max(1) as u64
    });
    WindowState {
        used,
        limit,
        emergency: workers_dead,
        retry_after_secs,
    }
}
