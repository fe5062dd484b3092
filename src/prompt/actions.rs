//! Ledger rows as the model reads them, pure: one line per action, where an action is what
//! one actor did of one kind with one outcome in one run for one reason (the floor's three
//! emergency launches of a pass are one line, `launch ok x3`). Times are relative to the
//! pass (`12m ago`), instance ids are kept (the model stops by id), labels are left out.
//! Used by the pinned state block's recent actions and the observation's floor lines.

use crate::clock::{human_duration, Millis};
use crate::store::actions::Action;
use crate::text::{clip, quote};

/// A reason is cut to this many characters.
pub const REASON_CHARS: usize = 80;
/// At most this many ids are named on one line; the rest are counted.
const MAX_IDS: usize = 6;

/// Consecutive actions that read the same (run, actor, kind, outcome, reason and refusal),
/// in the order given.
#[derive(Debug, Clone, PartialEq)]
pub struct Folded {
    pub at: Millis,
    pub actor: String,
    pub kind: String,
    pub outcome: String,
    pub count: usize,
    pub ids: Vec<i64>,
    /// The reason without who gave it and which of several launches it was.
    pub reason: Option<String>,
    /// Why a refused or failed call did not go through: the refusal's `error`, else the
    /// detail's first words.
    pub why_not: Option<String>,
}

/// The actions folded, one [`Folded`] per run of alike neighbours.
pub fn fold(actions: &[Action]) -> Vec<Folded> {
    let mut out: Vec<(Option<i64>, Folded)> = Vec::new();
    for a in actions {
        // The ledger keeps 400 characters of a reason; the model reads 200, as before.
        let reason = a
            .reason
            .as_deref()
            .map(|r| crate::text::clip(&plain_reason(r), 200));
        let why_not = why_not(a);
        if let Some((run, f)) = out.last_mut() {
            let alike = *run == a.run_id
                && f.actor == a.actor
                && f.kind == a.kind
                && f.outcome == a.outcome
                && f.reason == reason
                && f.why_not == why_not;
            if alike {
                f.count += 1;
                f.ids.extend(a.instance_id);
                continue;
            }
        }
        out.push((
            a.run_id,
            Folded {
                at: a.created_at,
                actor: a.actor.clone(),
                kind: a.kind.clone(),
                outcome: a.outcome.clone(),
                count: 1,
                ids: a.instance_id.into_iter().collect(),
                reason,
                why_not,
            },
        ));
    }
    out.into_iter().map(|(_, f)| f).collect()
}

impl Folded {
    /// `launch ok x3 (28412900, 28412901, 28412902): "WORKERS DEAD: ..."`: what was done,
    /// to which instances, and why (outside text quoted and cut).
    pub fn text(&self) -> String {
        let mut s = format!("{} {}", self.kind, self.outcome);
        if let Some(w) = &self.why_not {
            s.push_str(&format!(" ({w})"));
        }
        if self.count > 1 {
            s.push_str(&format!(" x{}", self.count));
        }
        if !self.ids.is_empty() {
            let mut ids: Vec<String> = self
                .ids
                .iter()
                .take(MAX_IDS)
                .map(|i| i.to_string())
                .collect();
            if self.ids.len() > MAX_IDS {
                ids.push(format!("+{}", self.ids.len() - MAX_IDS));
            }
            s.push_str(&format!(" ({})", ids.join(", ")));
        }
        if let Some(r) = self.reason.as_deref().filter(|r| !r.is_empty()) {
            s.push_str(&format!(": {}", quote(r, REASON_CHARS)));
        }
        s
    }

    /// `5m ago floor launch ok x3 (...)`: [`Folded::text`] with when and who.
    pub fn line(&self, now: Millis) -> String {
        format!("{} {} {}", ago(now, self.at), self.actor, self.text())
    }
}

/// `12m ago`, or `in 5m` for a time still ahead.
pub fn ago(now: Millis, at: Millis) -> String {
    if at > now {
        format!("in {}", human_duration(at - now))
    } else {
        format!("{} ago", human_duration(now - at))
    }
}

/// A reason as the model needs it: without the `floor (the model left it undone, ...): `,
/// `fallback (...): `, `floor: `, `fallback: ` and `rules: ` the floor, the fallback and the
/// rules put before theirs (the actor says who)
/// and the ` (launch 2 of 3)` that numbers several launches of one plan (they fold into one
/// line).
pub fn plain_reason(reason: &str) -> String {
    let mut r = reason.trim();
    for head in ["floor (", "fallback ("] {
        if let Some(rest) = r.strip_prefix(head) {
            if let Some(i) = rest.find("): ") {
                r = &rest[i + "): ".len()..];
            }
        }
    }
    for prefix in ["floor: ", "fallback: ", "rules: "] {
        r = r.strip_prefix(prefix).unwrap_or(r);
    }
    if let Some(head) = r.strip_suffix(')') {
        if let Some(i) = head.rfind(" (launch ") {
            let tail = &head[i + " (launch ".len()..];
            let numbered = tail
                .split_once(" of ")
                .is_some_and(|(a, b)| is_number(a) && is_number(b));
            if numbered {
                r = &r[..i];
            }
        }
    }
    r.to_string()
}

fn is_number(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// Why a refused or failed action did not go through, short: the refusal's `error` code
/// (`rate_limited`), else the detail's first words.
fn why_not(a: &Action) -> Option<String> {
    if !matches!(a.outcome.as_str(), "refused" | "failed") {
        return None;
    }
    let detail = a.detail.as_deref()?.trim();
    let code = serde_json::from_str::<serde_json::Value>(detail)
        .ok()
        .and_then(|v| v["error"].as_str().map(|e| clip(e, 32)));
    Some(code.unwrap_or_else(|| quote(detail, 60)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: Millis = 1_800_000_000_000;
    const MIN: Millis = 60_000;

    fn action(
        run: i64,
        actor: &str,
        kind: &str,
        outcome: &str,
        id: Option<i64>,
        reason: &str,
    ) -> Action {
        Action {
            id: 0,
            run_id: Some(run),
            kind: kind.into(),
            outcome: outcome.into(),
            actor: actor.into(),
            instance_id: id,
            label: Some("fleetagent-qwerty-r3-0a0b0c0d".into()),
            offer_id: None,
            dph: None,
            emergency: false,
            reason: Some(reason.into()),
            detail: None,
            created_at: NOW - 5 * MIN,
        }
    }

    #[test]
    fn a_plans_launches_fold_into_one_line_and_others_stay_apart() {
        let why = "floor: rules: WORKERS DEAD: 59 proofs queued and no live worker; 0 p/h coming";
        let mut acts: Vec<Action> = (1..=3)
            .map(|i| {
                action(
                    12,
                    "floor",
                    "launch",
                    "ok",
                    Some(28_412_900 + i),
                    &format!("{why} (launch {i} of 3)"),
                )
            })
            .collect();
        acts.push(action(
            12,
            "floor",
            "destroy",
            "ok",
            Some(28_412_634),
            "floor: rules: instance 28412634 is exited: it bills and earns nothing",
        ));
        let mut refused = action(
            11,
            "llm",
            "launch",
            "refused",
            None,
            "more \"capacity\"\nplease",
        );
        refused.detail = Some(r#"{"error":"rate_limited","limit":"3 launches per 15 min"}"#.into());
        refused.created_at = NOW - 12 * MIN;
        acts.push(refused);
        let mut failed = action(11, "llm", "launch", "failed", None, "more");
        failed.detail = Some("vast.ai rate limit: retries spent".into());
        acts.push(failed);
        // The same kind in another run is another line.
        acts.push(action(
            10,
            "floor",
            "destroy",
            "ok",
            Some(28_412_634),
            "floor: rules: instance 28412634 is exited: it bills and earns nothing",
        ));
        let lines: Vec<String> = fold(&acts).iter().map(|f| f.line(NOW)).collect();
        assert_eq!(
            lines,
            [
                "5m ago floor launch ok x3 (28412901, 28412902, 28412903): \"WORKERS DEAD: 59 proofs queued and no live worker; 0 p/h coming\"",
                "5m ago floor destroy ok (28412634): \"instance 28412634 is exited: it bills and earns nothing\"",
                "12m ago llm launch refused (rate_limited): \"more \\\"capacity\\\" please\"",
                "5m ago llm launch failed (\"vast.ai rate limit: retries spent\"): \"more\"",
                "5m ago floor destroy ok (28412634): \"instance 28412634 is exited: it bills and earns nothing\"",
            ]
        );
    }

    #[test]
    fn reasons_lose_only_who_gave_them_and_the_launch_number() {
        assert_eq!(
            plain_reason("floor: rules: backlog (launch 2 of 3)"),
            "backlog"
        );
        assert_eq!(plain_reason("rules: backlog"), "backlog");
        assert_eq!(
            plain_reason(
                "floor (the model left it undone, left for 2 passes): instance 7 is exited"
            ),
            "instance 7 is exited"
        );
        assert_eq!(plain_reason("keep (launch soon)"), "keep (launch soon)");
        assert_eq!(
            plain_reason("x (launch 2 of three)"),
            "x (launch 2 of three)"
        );
        assert_eq!(ago(NOW, NOW - 12 * MIN), "12m ago");
        assert_eq!(ago(NOW, NOW + 5 * MIN), "in 5m");
    }

    #[test]
    fn many_ids_are_counted_past_six() {
        let acts: Vec<Action> = (0..9)
            .map(|i| {
                action(
                    3,
                    "rules",
                    "destroy",
                    "ok",
                    Some(100 + i),
                    "rules: over cap",
                )
            })
            .collect();
        let f = fold(&acts);
        assert_eq!(f.len(), 1);
        assert_eq!(
            f[0].text(),
            "destroy ok x9 (100, 101, 102, 103, 104, 105, +3): \"over cap\""
        );
    }
}
