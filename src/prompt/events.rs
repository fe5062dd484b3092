//! The text a pass shows the model about what woke it: folded event lines and one line for
//! every wake that came due. Pure functions of the claimed rows and `now`; no I/O.

use std::collections::BTreeMap;

use crate::clock::{human_duration, short, Millis};
use crate::store::events::Event;
use crate::store::wakes::Wake;
pub use crate::text::{clip, quote};

/// How many distinct reasons one folded line shows before "+N more".
const MAX_GROUPS: usize = 8;
/// Outside text (reasons) is quoted and cut to this many characters.
pub const MAX_REASON_CHARS: usize = 160;

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

/// Every wake this pass claimed, as ONE line however many there are.
pub fn wakes_line(wakes: &[Wake], now: Millis) -> Option<String> {
    let first = wakes.first()?;
    if wakes.len() == 1 {
        return Some(format!(
            "Wake #{} due {} UTC ({} ago): {}.",
            first.id,
            short(first.due_at),
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
        "Wakes due ({}, overdue since {} UTC ({} ago), newest {} ago): {}.",
        wakes.len(),
        short(oldest),
        human_duration(now - oldest),
        human_duration(now - newest),
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

    #[test]
    fn twenty_wakes_one_line() {
        let now = 10_000_000;
        let wakes: Vec<Wake> = (0..20)
            .map(|i| wake(i, now - 3_600_000 + i * 60_000, "check fleet"))
            .collect();
        let line = wakes_line(&wakes, now).unwrap();
        assert!(!line.contains('\n'));
        assert!(line.starts_with("Wakes due (20, overdue since"), "{line}");
        assert!(line.contains("\"check fleet\" x20"), "{line}");
    }
}
