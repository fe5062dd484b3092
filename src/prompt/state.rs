//! The pinned state block of the system prompt, rebuilt from the database every pass.

use crate::clock::{rfc3339, Millis};
use crate::config::Config;
use crate::fleet::Snapshot;
use crate::store::actions::Action;
use crate::store::wakes::Wake;

/// Pending wakes shown in the block.
pub const PINNED_WAKES: usize = 10;
/// Recent actions shown in the block, newest first.
pub const PINNED_ACTIONS: usize = 8;

/// What the block shows beside the snapshot, read by the caller: open launch intents, the
/// first [`PINNED_WAKES`] pending wakes and the last [`PINNED_ACTIONS`] actions.
pub struct Pinned<'a> {
    pub intents: &'a [Action],
    pub pending_wakes: &'a [Wake],
    pub recent_actions: &'a [Action],
}

/// The pinned state block, rebuilt from the database every pass so a compacted history can
/// never make the agent forget an instance, a launch in flight or a wake.
pub fn pinned_state(
    inputs: &Pinned<'_>,
    snapshot: &Snapshot,
    config: &Config,
    now: Millis,
) -> String {
    let mut out = String::new();
    let mut line = |s: String| {
        out.push_str(&s);
        out.push('\n');
    };
    line(format!("Time: {} UTC.", rfc3339(now)));
    for l in snapshot.operator_lines() {
        line(l);
    }
    if snapshot.instances.is_empty() {
        line("Our instances: none.".into());
    } else {
        line(format!("Our instances ({}):", snapshot.instances.len()));
        for i in snapshot.instances.iter().take(40) {
            line(format!(
                "- {} id={} state={} vast_status={} gpu={} ${:.3}/h since {}{}",
                i.label,
                i.vast_id
                    .map(|v| v.to_string())
                    .unwrap_or_else(|| "-".into()),
                i.state,
                i.actual_status.as_deref().unwrap_or("null"),
                i.gpu_name.as_deref().unwrap_or("?"),
                i.dph.unwrap_or(0.0),
                rfc3339(i.state_since),
                i.status_msg
                    .as_deref()
                    .map(|m| format!(" msg={}", crate::text::quote(m, 80)))
                    .unwrap_or_default()
            ));
        }
    }
    let intents = inputs.intents;
    if !intents.is_empty() {
        line(format!(
            "Launches in flight (recorded, not yet seen on vast.ai): {}.",
            intents
                .iter()
                .map(|a| a.label.clone().unwrap_or_default())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let pending = inputs.pending_wakes;
    if pending.is_empty() {
        line("Pending wakes: none.".into());
    } else {
        line(format!(
            "Pending wakes: {}.",
            pending
                .iter()
                .map(|w| format!(
                    "#{} at {} {}",
                    w.id,
                    rfc3339(w.due_at),
                    crate::text::quote(&w.reason, 80)
                ))
                .collect::<Vec<_>>()
                .join("; ")
        ));
    }
    let p = &config.policy;
    line(format!(
        "Money: fleet ${:.2}/h; caps: max_dph_total={}, max_instances={}, daily_spend_max={}.",
        snapshot.fleet_dph(),
        p.max_dph_total
            .map(|v| format!("${v:.2}/h"))
            .unwrap_or_else(|| "UNSET (no launch possible)".into()),
        p.max_instances
            .map(|v| v.to_string())
            .unwrap_or_else(|| "UNSET (no launch possible)".into()),
        p.daily_spend_max
            .map(|v| format!("${v:.2}"))
            .unwrap_or_else(|| "none".into()),
    ));
    let recent = inputs.recent_actions;
    if !recent.is_empty() {
        line("Recent actions (newest first):".into());
        for a in recent {
            line(format!(
                "- {} {} {} {}{} by {}{}",
                rfc3339(a.created_at),
                a.kind,
                a.outcome,
                a.label.as_deref().unwrap_or(""),
                a.instance_id
                    .map(|i| format!(" (id {i})"))
                    .unwrap_or_default(),
                a.actor,
                a.reason
                    .as_deref()
                    .map(|r| format!(": {}", crate::text::quote(r, 100)))
                    .unwrap_or_default()
            ));
        }
    }
    out
}
