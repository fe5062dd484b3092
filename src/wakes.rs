//! Wakes: the one module that owns the rules of scheduled checks. A wake asks a later pass to
//! look again; the agent schedules one with the `schedule_next_check` tool (tools/schedule.rs),
//! an operator with `wakes add` (cmd/wakes.rs). Both come here for the decisions: how far
//! ahead a wake may be, how many the agent may keep pending, what its reason may be. Here too
//! are the one line a pass shows the model for the wakes it claimed, and the JSON shape of a
//! wake (`wakes list --json`, `inspect --json`). Pure: no I/O.
//!
//! The SQL is [`crate::store::wakes`]: the insert, the claim (every due wake, pending ->
//! processed with the run id, inside the claim transaction that creates the run), the hand
//! back of a failed or interrupted pass's wakes (attempts + 1, failed after
//! [`crate::store::wakes::MAX_ATTEMPTS`]), cancel, counts and lists.
//!
//! The incident fix it carries: 20 scheduled wake-ups were never marked processed and were
//! re-read by every run, forever. Wakes now drain transactionally (each is claimed once, by
//! one pass, in the transaction that creates its run), and however many are overdue they
//! reach the model as ONE folded line ([`wakes_line`]).

use std::collections::BTreeMap;

use serde_json::Value;

use crate::clock::{human_duration, rfc3339, Millis};
use crate::store::wakes::Wake;
use crate::text::{clip, quote, MAX_GROUPS, MAX_REASON_CHARS};

/// `created_by` of a wake the agent scheduled.
pub const BY_AGENT: &str = "agent";
/// `created_by` of a wake an operator added.
pub const BY_OPERATOR: &str = "operator";

/// The agent's wakes are 1..1440 minutes ahead (at most a day: a plan, not a calendar).
pub const MIN_AGENT_MINUTES: i64 = 1;
pub const MAX_AGENT_MINUTES: i64 = 1440;
/// More pending agent wakes than this is a model in a loop, not a plan.
pub const MAX_PENDING_AGENT_WAKES: i64 = 12;
/// An agent wake's reason is cut to one line of this many characters.
pub const MAX_AGENT_REASON_CHARS: usize = 200;

/// How far ahead an operator's wake (or pause) may be: a century. Past that the time is not
/// a date anyone means, and its milliseconds near what the columns hold.
pub const MAX_OPERATOR_AHEAD_MS: i64 = 36_525 * 86_400_000;
/// Beyond a year and a day ahead an operator's wake or pause is taken with a note: a typo in
/// the year is likelier than a plan.
pub const FAR_AHEAD_MS: i64 = 366 * 86_400_000;

/// The agent's request checked: the reason as it is stored (one line, cut), or why the
/// request is refused.
pub fn agent_request(minutes: i64, reason: &str) -> Result<String, String> {
    if !(MIN_AGENT_MINUTES..=MAX_AGENT_MINUTES).contains(&minutes) {
        return Err(format!(
            "minutes must be {MIN_AGENT_MINUTES}..{MAX_AGENT_MINUTES}, got {minutes}"
        ));
    }
    let reason = clip(reason, MAX_AGENT_REASON_CHARS);
    if reason.is_empty() {
        return Err("reason must not be empty".into());
    }
    Ok(reason)
}

/// Whether the agent may schedule one more wake while `pending` of its own are pending.
pub fn agent_room(pending: i64) -> Result<(), String> {
    if pending >= MAX_PENDING_AGENT_WAKES {
        return Err(format!(
            "already {pending} pending wakes scheduled by the agent; the limit is {MAX_PENDING_AGENT_WAKES}"
        ));
    }
    Ok(())
}

/// When an agent wake asked for `minutes` from `now` is due.
pub fn agent_due(now: Millis, minutes: i64) -> Millis {
    now + minutes * 60_000
}

/// Whether an operator's wake `ahead_ms` from now is beyond [`MAX_OPERATOR_AHEAD_MS`] (a time
/// in the past is not: the next pass takes it).
pub fn too_far_ahead(ahead_ms: i128) -> bool {
    ahead_ms > MAX_OPERATOR_AHEAD_MS as i128
}

/// The note for an operator's wake or pause `ahead_ms` from now beyond [`FAR_AHEAD_MS`], with
/// the command that takes it back.
pub fn far_ahead_note(ahead_ms: i64, undo: &str) -> Option<String> {
    (ahead_ms > FAR_AHEAD_MS).then(|| {
        format!(
            "note: that is {} days ahead (a typo in the year?); `{undo}` takes it back",
            ahead_ms / 86_400_000
        )
    })
}

/// Every wake this pass claimed, as ONE line however many there are; times relative to the
/// pass (the model reads them).
pub fn wakes_line(wakes: &[Wake], now: Millis) -> Option<String> {
    let first = wakes.first()?;
    if wakes.len() == 1 {
        return Some(format!(
            "Wake #{} due {} ago: {}.",
            first.id,
            human_duration(now - first.due_at),
            quote(&first.reason, MAX_REASON_CHARS)
        ));
    }
    let oldest = wakes.iter().map(|w| w.due_at).min().unwrap_or(now);
    let newest = wakes.iter().map(|w| w.due_at).max().unwrap_or(now);
    let mut order: Vec<&str> = Vec::new();
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for w in wakes {
        let n = counts.entry(w.reason.as_str()).or_insert(0);
        if *n == 0 {
            order.push(w.reason.as_str());
        }
        *n += 1;
    }
    let mut parts: Vec<String> = order
        .iter()
        .take(MAX_GROUPS)
        .map(|r| {
            let n = counts[r];
            let times = if n > 1 {
                format!(" x{n}")
            } else {
                String::new()
            };
            format!("{}{times}", quote(r, MAX_REASON_CHARS))
        })
        .collect();
    if order.len() > MAX_GROUPS {
        parts.push(format!("+{} more distinct", order.len() - MAX_GROUPS));
    }
    Some(format!(
        "Wakes due ({}, the oldest {} ago, the newest {} ago): {}.",
        wakes.len(),
        human_duration(now - oldest),
        human_duration(now - newest),
        parts.join("; ")
    ))
}

/// A wake as `wakes list --json` and `inspect --json` show it. Field names are a contract
/// (docs/inspect.md).
pub fn wake_json(w: &Wake) -> Value {
    serde_json::json!({
        "id": w.id,
        "due_at": rfc3339(w.due_at),
        "reason": w.reason,
        "status": w.status,
        "created_at": rfc3339(w.created_at),
        "created_by": w.created_by,
        "processed_by": w.processed_by,
        "attempts": w.attempts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wake(id: i64, due: Millis, reason: &str) -> Wake {
        Wake {
            id,
            due_at: due,
            reason: reason.into(),
            created_at: 0,
            created_by: "agent".into(),
            status: "processed".into(),
            processed_by: Some(1),
            attempts: 0,
        }
    }

    #[test]
    fn twenty_wakes_one_line() {
        let now = 10_000_000;
        let wakes: Vec<Wake> = (0..20)
            .map(|i| wake(i, now - 3_600_000 + i * 60_000, "check fleet"))
            .collect();
        let line = wakes_line(&wakes, now).unwrap();
        assert!(!line.contains('\n'));
        assert!(
            line.starts_with("Wakes due (20, the oldest 1h00m ago, the newest 41m ago): "),
            "{line}"
        );
        assert!(line.contains("\"check fleet\" x20"), "{line}");
    }

    #[test]
    fn one_wake_and_none() {
        assert_eq!(wakes_line(&[], 0), None);
        let line = wakes_line(&[wake(7, 0, "look \"again\"")], 120_000).unwrap();
        assert_eq!(line, "Wake #7 due 2m ago: \"look \\\"again\\\"\".");
    }

    #[test]
    fn distinct_reasons_beyond_the_fold_are_counted() {
        let wakes: Vec<Wake> = (0..10).map(|i| wake(i, 0, &format!("r{i}"))).collect();
        let line = wakes_line(&wakes, 60_000).unwrap();
        assert!(line.ends_with("\"r7\"; +2 more distinct."), "{line}");
    }

    #[test]
    fn agent_requests_are_bounded() {
        assert_eq!(agent_request(1, "  look\nagain ").unwrap(), "look again");
        assert_eq!(agent_request(1440, "x").unwrap(), "x");
        assert_eq!(
            agent_request(0, "x").unwrap_err(),
            "minutes must be 1..1440, got 0"
        );
        assert_eq!(
            agent_request(1441, "x").unwrap_err(),
            "minutes must be 1..1440, got 1441"
        );
        assert_eq!(
            agent_request(5, " \n ").unwrap_err(),
            "reason must not be empty"
        );
        assert_eq!(
            agent_request(5, &"y".repeat(300)).unwrap().chars().count(),
            200
        );
        assert_eq!(agent_due(1_000, 5), 301_000);
    }

    #[test]
    fn the_agent_may_keep_twelve_pending() {
        assert!(agent_room(11).is_ok());
        assert_eq!(
            agent_room(12).unwrap_err(),
            "already 12 pending wakes scheduled by the agent; the limit is 12"
        );
    }

    #[test]
    fn operators_may_look_a_century_ahead_with_a_note_past_a_year() {
        assert!(!too_far_ahead(MAX_OPERATOR_AHEAD_MS as i128));
        assert!(too_far_ahead(MAX_OPERATOR_AHEAD_MS as i128 + 1));
        assert!(!too_far_ahead(-1));
        assert_eq!(human_duration(MAX_OPERATOR_AHEAD_MS), "36525d00h");
        assert_eq!(far_ahead_note(FAR_AHEAD_MS, "x"), None);
        let note = far_ahead_note(FAR_AHEAD_MS * 3, "fleetagent resume").unwrap();
        assert!(note.starts_with("note: that is 1098 days ahead"), "{note}");
        assert!(
            note.ends_with("`fleetagent resume` takes it back"),
            "{note}"
        );
    }

    #[test]
    fn json_shape() {
        let v = wake_json(&wake(3, 60_000, "r"));
        assert_eq!(
            v.to_string(),
            r#"{"attempts":0,"created_at":"1970-01-01T00:00:00Z","created_by":"agent","due_at":"1970-01-01T00:01:00Z","id":3,"processed_by":1,"reason":"r","status":"processed"}"#
        );
    }
}
