//! The text a pass shows the model about what woke it: folded event lines (the one line for
//! every wake that came due is [`crate::wakes::wakes_line`]), and the quoting and clipping of
//! outside text. Pure functions of the claimed rows; no I/O.

use std::collections::BTreeMap;

use crate::store::events::Event;
use crate::text::{quote, MAX_GROUPS, MAX_REASON_CHARS};

/// Events of this pass (operator messages excluded: they are their own messages), folded by
/// (priority, kind, reason) into one line.
pub fn events_line(events: &[Event]) -> Option<String> {
    let relevant: Vec<&Event> = events.iter().filter(|e| e.kind != "message").collect();
    if relevant.is_empty() {
        return None;
    }
    let mut order: Vec<(u8, &str, &str)> = Vec::new();
    let mut counts: BTreeMap<(u8, &str, &str), usize> = BTreeMap::new();
    for e in &relevant {
        let key = (e.priority, e.kind.as_str(), e.reason.as_str());
        let n = counts.entry(key).or_insert(0);
        if *n == 0 {
            order.push(key);
        }
        *n += 1;
    }
    let mut parts: Vec<String> = order
        .iter()
        .take(MAX_GROUPS)
        .map(|key| {
            let (p, kind, reason) = *key;
            let n = counts[key];
            let times = if n > 1 {
                format!(" x{n}")
            } else {
                String::new()
            };
            format!("P{p} {kind} {}{times}", quote(reason, MAX_REASON_CHARS))
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
        let line = events_line(&evs).unwrap();
        assert_eq!(
            line,
            "Events (101): P1 trigger \"state change\" x100; P0 reset \"session reset\"."
        );
        assert!(events_line(&[ev(1, 0, "message", "m")]).is_none());
    }
}
