//! The text a pass shows the model about what woke it: folded event lines (the one line for
//! every wake that came due is [`crate::wakes::wakes_line`]), and the quoting and clipping of
//! outside text. Pure functions of the claimed rows; no I/O.

use std::collections::BTreeMap;

use crate::store::events::Event;
use crate::text::{quote, MAX_GROUPS, MAX_REASON_CHARS};

/// An event this old when its pass reads it is said with its age: it waited through a
/// host that was away or runs that failed, and what it says may be over (the away
/// walkthrough: a `pause` event of 3 days before read as news, the pause long ended).
pub const OLD_EVENT_MS: crate::clock::Millis = 3_600_000;

/// Events of this pass (operator messages excluded: they are their own messages), folded by
/// (priority, kind, reason) into one line; a group whose oldest is [`OLD_EVENT_MS`] old or
/// more says how old, at `now`.
pub fn events_line(events: &[Event], now: crate::clock::Millis) -> Option<String> {
    let relevant: Vec<&Event> = events.iter().filter(|e| e.kind != "message").collect();
    if relevant.is_empty() {
        return None;
    }
    let mut order: Vec<(u8, &str, &str)> = Vec::new();
    // Each group's count and its oldest event's time.
    let mut groups: BTreeMap<(u8, &str, &str), (usize, crate::clock::Millis)> = BTreeMap::new();
    for e in &relevant {
        let key = (e.priority, e.kind.as_str(), e.reason.as_str());
        let (n, oldest) = groups.entry(key).or_insert((0, e.created_at));
        if *n == 0 {
            order.push(key);
        }
        *n += 1;
        *oldest = (*oldest).min(e.created_at);
    }
    let mut parts: Vec<String> = order
        .iter()
        .take(MAX_GROUPS)
        .map(|key| {
            let (p, kind, reason) = *key;
            let (n, oldest) = groups[key];
            let times = if n > 1 {
                format!(" x{n}")
            } else {
                String::new()
            };
            let age = now - oldest;
            let age = if age >= OLD_EVENT_MS {
                format!(
                    " ({} {} ago)",
                    if n > 1 { "the oldest" } else { "sent" },
                    crate::clock::human_duration(age)
                )
            } else {
                String::new()
            };
            format!(
                "P{p} {kind} {}{times}{age}",
                quote(reason, MAX_REASON_CHARS)
            )
        })
        .collect();
    if order.len() > MAX_GROUPS {
        parts.push(format!("+{} more distinct", order.len() - MAX_GROUPS));
    }
    Some(format!(
        "Events ({}): {}.",
        relevant.len(),
        parts.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(id: i64, p: u8, kind: &str, reason: &str) -> Event {
        Event {
            id,
            priority: p,
            kind: kind.into(),
            reason: reason.into(),
            body: None,
            created_at: 0,
            attempts: 0,
        }
    }

    #[test]
    fn events_fold_by_reason() {
        let mut evs: Vec<Event> = (0..100)
            .map(|i| ev(i, 1, "trigger", "state change"))
            .collect();
        evs.push(ev(200, 0, "reset", "session reset"));
        evs.push(ev(201, 0, "message", "operator message"));
        let line = events_line(&evs, 0).unwrap();
        assert_eq!(
            line,
            "Events (101): P1 trigger \"state change\" x100; P0 reset \"session reset\"."
        );
        assert!(events_line(&[ev(1, 0, "message", "m")], 0).is_none());
    }

    #[test]
    fn an_event_an_hour_old_or_more_says_its_age() {
        let day = 86_400_000;
        let mut pause = ev(1, 1, "pause", "operator paused fleetagent (pause): maint");
        pause.created_at = 0;
        let mut fresh = ev(2, 1, "trigger", "state change");
        fresh.created_at = 3 * day - 60_000;
        let mut older = fresh.clone();
        older.id = 3;
        older.created_at = 3 * day - OLD_EVENT_MS;
        assert_eq!(
            events_line(&[pause, fresh.clone()], 3 * day).unwrap(),
            "Events (2): P1 pause \"operator paused fleetagent (pause): maint\" (sent 3d00h ago); P1 trigger \"state change\"."
        );
        assert_eq!(
            events_line(&[fresh, older], 3 * day).unwrap(),
            "Events (2): P1 trigger \"state change\" x2 (the oldest 1h00m ago)."
        );
    }
}
