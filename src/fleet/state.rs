//! Lifecycle states of one of our instances (the `instances.state` column) and how a listed
//! instance is classified from vast.ai's status and the Curio worker matched to it.

use crate::demand::Worker;

/// Lifecycle states of an instance (the `instances.state` column).
pub const LAUNCHING: &str = "launching";
pub const LOADING: &str = "loading";
pub const BOOTED: &str = "booted";
pub const REGISTERED: &str = "registered";
pub const PROVING: &str = "proving";
pub const DEAD: &str = "dead";
pub const STOPPED: &str = "stopped";
pub const GONE: &str = "gone";

/// Is this label one of ours? Ours are `<prefix>-...`.
pub fn is_ours(label: Option<&str>, prefix: &str) -> bool {
    label
        .map(str::trim)
        .and_then(|l| l.strip_prefix(prefix))
        .is_some_and(|rest| rest.starts_with('-') && rest.len() > 1)
}

/// The lifecycle state of a listed instance from vast.ai's `actual_status` and the live
/// Curio worker matched to it (if any).
pub fn classify(actual_status: Option<&str>, worker: Option<&Worker>) -> &'static str {
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
pub fn is_running_state(state: &str) -> bool {
    matches!(state, BOOTED | REGISTERED | PROVING)
}

/// States that count toward slots and $/h: everything not stopped or gone (dead ones bill).
pub fn is_billing_state(state: &str) -> bool {
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
