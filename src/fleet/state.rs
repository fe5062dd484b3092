//! Lifecycle states of one of our instances (the `instances.state` column) and how a listed
//! instance is classified from vast.ai's status and the Curio worker matched to it.

use crate::demand::Worker;

pub use crate::store::instances::State;

/// Lifecycle states of an instance (the `instances.state` column), by their old names.
pub const LAUNCHING: State = State::Launching;
pub const LOADING: State = State::Loading;
pub const BOOTED: State = State::Booted;
pub const REGISTERED: State = State::Registered;
pub const PROVING: State = State::Proving;
pub const DEAD: State = State::Dead;
pub const STOPPED: State = State::Stopped;
pub const OUTBID: State = State::Outbid;
pub const GONE: State = State::Gone;

/// Is this label one of ours? Ours are `<prefix>-...`.
pub fn is_ours(label: Option<&str>, prefix: &str) -> bool {
    label
        .map(str::trim)
        .and_then(|l| l.strip_prefix(prefix))
        .is_some_and(|rest| rest.starts_with('-') && rest.len() > 1)
}

/// The lifecycle state of a listed instance from vast.ai's `actual_status` and the live
/// Curio worker matched to it (if any).
pub fn classify(actual_status: Option<&str>, worker: Option<&Worker>) -> State {
    let status = actual_status.map(|s| s.trim().to_ascii_lowercase());
    match status.as_deref() {
        Some("stopped") => return STOPPED,
        Some("exited" | "offline" | "frozen") => return DEAD,
        _ => {}
    }
    if let Some(w) = worker {
        return if w.running > 0 { PROVING } else { REGISTERED };
    }
    match status.as_deref() {
        Some("running") => BOOTED,
        Some("unknown") => DEAD,
        // null (provisioning), loading, created, rebooting, restarting, anything new.
        _ => LOADING,
    }
}

/// States that count as a live container (booted or better).
pub fn is_running_state(state: State) -> bool {
    matches!(state, BOOTED | REGISTERED | PROVING)
}

/// States that count toward slots and $/h: everything not stopped or gone (dead ones bill,
/// and an outbid bid may resume at any moment).
pub fn is_billing_state(state: State) -> bool {
    !matches!(state, STOPPED | GONE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ours_by_prefix_and_dash() {
        assert!(is_ours(Some("fleetagent-r1-abc"), "fleetagent"));
        assert!(!is_ours(Some("fleetagent2-x"), "fleetagent"));
        assert!(!is_ours(Some("fleetagent-"), "fleetagent"));
        assert!(!is_ours(None, "fleetagent"));
    }
}
