//! What the journal says of the fleet's actions, from the action ledger's rows: one line per
//! action (launched, started, stopped, destroyed, refused, failed, dry run) with who decided
//! and why, and what a pass's actions came to (the counts on its run row and the words of
//! its summary line). Pure: the tools log the lines, the run prints the summary.

use serde_json::Value;

use crate::store::actions::Action;
use crate::store::runs::ActionCounts;
use crate::text::clip;

/// One action's line, and whether it is a warning (a call that failed at vast.ai, or may
/// have gone through unanswered) rather than a notice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub warning: bool,
    pub text: String,
}

/// The line of one ledger row; `gpu` is the GPU of the offer or instance, when the caller
/// knows it (the ledger does not keep it apart).
pub fn action_line(a: &Action, gpu: Option<&str>) -> Line {
    line_of(a, gpu, false)
}

/// [`action_line`]'s text with the label in quotes, for the reports (`inspect`, `history`):
/// a label vast.ai lists is whatever was typed there, and bare it could read as the line's
/// own words (`... destroyed by operator: ...`).
pub fn quoted_line(a: &Action) -> String {
    // The GPU as the journal said it: a launch's ledger detail keeps it (`offer N GPU $x/h`);
    // the reports dropped it (a walkthrough).
    line_of(a, gpu_in_detail(a), true).text
}

/// The GPU of a launch's ledger detail (`offer 20000001 RTX 4090 $0.4000/h`).
fn gpu_in_detail(a: &Action) -> Option<&str> {
    if a.kind != "launch" {
        return None;
    }
    let rest = a
        .detail
        .as_deref()?
        .strip_prefix("offer ")?
        .split_once(' ')?
        .1;
    let gpu = rest.split_once(" $")?.0.trim();
    (!gpu.is_empty()).then_some(gpu)
}

fn line_of(a: &Action, gpu: Option<&str>, quote_label: bool) -> Line {
    let asked = asked_by(a);
    let what = subject(a, quote_label);
    let terms = terms(a, gpu);
    let (warning, text) = match a.outcome.as_str() {
        "ok" => (false, format!("{} {what}{terms} {asked}", past_tense(a))),
        "refused" => (
            false,
            format!("refused {} {what}({}), {asked}", a.kind, figure(a)),
        ),
        "dry_run" => (
            false,
            format!(
                "dry run: would {} {what}{terms} {asked}{}",
                a.kind,
                if a.kind == "launch"
                    && !a.detail.as_deref().is_some_and(|d| d.contains("would start"))
                {
                    " (no offer looked up: policy.max_dph_total, the daily cap at its price and the margin are checked only against a real one)"
                } else {
                    ""
                }
            ),
        ),
        "intent" => (
            true,
            format!(
                "{} {what}{terms} may have gone through ({}): the next pass looks for its label, {asked}",
                a.kind,
                clip(a.detail.as_deref().unwrap_or("no answer"), 200)
            ),
        ),
        _ => (
            true,
            format!(
                "{} {what}{terms} failed: {}, {asked}",
                a.kind,
                clip(a.detail.as_deref().unwrap_or("unknown error"), 200)
            ),
        ),
    };
    Line {
        warning,
        text: squash(&text),
    }
}

/// `launched`, `started`, `stopped`, `destroyed`.
fn past_tense(a: &Action) -> String {
    match a.kind.as_str() {
        "stop" => "stopped".into(),
        "destroy" => "destroyed".into(),
        k => format!("{}ed", k.trim_end_matches('e')),
    }
}

/// The label and the instance, as far as the row knows them, each followed by a space.
fn subject(a: &Action, quote_label: bool) -> String {
    let mut s = String::new();
    if let Some(l) = &a.label {
        // Ours are short; an adopted instance's label is whatever vast.ai lists.
        if quote_label {
            s.push_str(&crate::text::quote(l, crate::fleet::LABEL_CHARS));
        } else {
            s.push_str(&clip(l, crate::fleet::LABEL_CHARS));
        }
        s.push(' ');
    }
    match (a.kind.as_str(), a.outcome.as_str(), a.instance_id) {
        ("launch", "ok", Some(id)) => s.push_str(&format!("as instance {id} ")),
        (_, _, Some(id)) if a.kind != "launch" => s.push_str(&format!("instance {id} ")),
        _ => {}
    }
    if a.label.is_none() && a.instance_id.is_none() && a.kind == "launch" {
        if let Some(o) = a.offer_id.filter(|_| a.outcome == "refused") {
            s.push_str(&format!("of offer {o} "));
        }
    }
    s
}

/// `(offer 20000001, RTX 4090, $0.400/h, emergency; <detail>)`: what the row says of the
/// terms, for everything but refusals (whose figure is the point).
fn terms(a: &Action, gpu: Option<&str>) -> String {
    let mut parts = Vec::new();
    if a.kind == "launch" {
        parts.push(match a.offer_id {
            Some(o) => format!("offer {o}"),
            None => "best offer".into(),
        });
    }
    if let Some(g) = gpu.filter(|g| !g.is_empty()) {
        parts.push(clip(g, 40));
    }
    if let Some(d) = a.dph {
        parts.push(format!("${d:.3}/h"));
    }
    let bid = a
        .detail
        .as_deref()
        .filter(|_| a.kind == "launch")
        .and_then(|d| d.split_once(crate::policy::launch::BID_AT))
        .and_then(|(_, b)| b.strip_suffix("/h"))
        .and_then(|b| b.parse::<f64>().ok());
    if let Some(b) = bid {
        parts.push(format!("bid ${b:.3}/h"));
    }
    if a.emergency && a.kind == "launch" {
        parts.push("emergency".into());
    }
    // A stop's detail says why beyond the reason: flagged, forced, already gone.
    if a.outcome == "ok" && a.kind != "launch" {
        if let Some(d) = a.detail.as_deref().filter(|d| *d != "ok") {
            parts.push(clip(d, 120));
        }
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("({})", parts.join(", "))
    }
}

/// `by llm: <reason>` (the decision) or, for what did not go through, `asked by llm: ...`.
fn asked_by(a: &Action) -> String {
    let verb = match a.outcome.as_str() {
        "ok" | "dry_run" => "by",
        _ => "asked by",
    };
    match a.reason.as_deref().map(|r| clip(r, 400)) {
        Some(r) if !r.is_empty() => format!("{verb} {}: {r}", a.actor),
        _ => format!("{verb} {}", a.actor),
    }
}

/// A refusal's guardrail and its figure from the row's detail (the refusal's JSON):
/// `rate_limited: 3 launches per 15 min, retry in 412s`; a plain-text detail as it is.
pub fn figure(a: &Action) -> String {
    let detail = a.detail.as_deref().unwrap_or("");
    let Ok(v) = serde_json::from_str::<Value>(detail) else {
        return clip(detail, 200);
    };
    let Some(code) = v["error"].as_str() else {
        return clip(detail, 200);
    };
    let mut parts = Vec::new();
    if let Some(m) = v["message"].as_str() {
        // Long enough for the profit check's whole sentence: its deciding figure is last.
        parts.push(clip(m, 400));
    } else if let Some(l) = v["limit"].as_str() {
        parts.push(clip(l, 80));
    }
    if let Some(r) = v["retry_after_secs"].as_u64() {
        parts.push(format!("retry in {r}s"));
    }
    if parts.is_empty() {
        code.to_string()
    } else {
        format!("{code}: {}", parts.join(", "))
    }
}

/// One space between words, none before a comma or a closing parenthesis.
fn squash(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace(" ,", ",")
        .replace(" )", ")")
}

/// What a pass's actions came to: the counts on its run row, and the words after its
/// verdict in the summary line (empty when it asked for none).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    pub counts: ActionCounts,
    pub words: String,
}

/// How the ledger's outcomes count: `ok` and `dry_run` went through (a dry run's answer is
/// what the guardrails allowed: docs/guardrails.md), `refused` was refused by a guardrail,
/// `failed` and `intent` (a create left open, unanswered) failed at vast.ai.
pub fn tally(rows: &[Action]) -> Tally {
    let mut counts = ActionCounts::default();
    let mut done: Vec<String> = Vec::new();
    let mut refused: Vec<&Action> = Vec::new();
    let mut failed: Vec<&Action> = Vec::new();
    for a in rows {
        match a.outcome.as_str() {
            "ok" | "dry_run" => {
                counts.ok += 1;
                let verb = if a.outcome == "dry_run" {
                    format!("would {} (dry run)", a.kind)
                } else {
                    past_tense(a)
                };
                let what = a
                    .label
                    .as_deref()
                    .map(|l| clip(l, crate::fleet::LABEL_CHARS))
                    .or_else(|| a.instance_id.map(|i| format!("instance {i}")));
                done.push(match what {
                    Some(w) => format!("{verb} {w}"),
                    None => verb,
                });
            }
            "refused" => {
                counts.refused += 1;
                refused.push(a);
            }
            _ => {
                counts.failed += 1;
                failed.push(a);
            }
        }
    }
    let mut parts = Vec::new();
    if !done.is_empty() {
        let shown = done.len().min(3);
        let mut s = done[..shown].join(", ");
        if done.len() > shown {
            s.push_str(&format!(" and {} more", done.len() - shown));
        }
        parts.push(s);
    }
    if !refused.is_empty() {
        let mut codes: Vec<String> = refused.iter().map(|a| code(a)).collect();
        codes.dedup();
        codes.sort();
        codes.dedup();
        parts.push(format!(
            "refused {} ({})",
            kinds(&refused),
            clip(&codes.join(", "), 120)
        ));
    }
    if let Some(first) = failed.first() {
        let why = first.detail.as_deref().unwrap_or("unknown error");
        parts.push(format!("failed {} ({})", kinds(&failed), clip(why, 120)));
    }
    Tally {
        counts,
        words: parts.join("; "),
    }
}

/// `2 launches`, `1 launch and 1 destroy`.
fn kinds(rows: &[&Action]) -> String {
    let mut by: Vec<(&str, usize)> = Vec::new();
    for a in rows {
        match by.iter_mut().find(|(k, _)| *k == a.kind) {
            Some((_, n)) => *n += 1,
            None => by.push((&a.kind, 1)),
        }
    }
    by.iter()
        .map(|(k, n)| match (*k, *n) {
            (k, 1) => format!("1 {k}"),
            ("launch", n) => format!("{n} launches"),
            (k, n) => format!("{n} {k}s"),
        })
        .collect::<Vec<_>>()
        .join(" and ")
}

/// A refusal's guardrail code (`rate_limited`), or the start of a plain-text detail.
fn code(a: &Action) -> String {
    let detail = a.detail.as_deref().unwrap_or("");
    match serde_json::from_str::<Value>(detail) {
        Ok(v) if v["error"].is_string() => v["error"].as_str().unwrap_or("").to_string(),
        _ => clip(detail, 40),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(kind: &str, outcome: &str, actor: &str) -> Action {
        Action {
            id: 1,
            run_id: Some(7),
            kind: kind.into(),
            outcome: outcome.into(),
            actor: actor.into(),
            instance_id: None,
            label: None,
            offer_id: None,
            dph: None,
            emergency: false,
            reason: Some("59 queued, every worker dead".into()),
            detail: None,
            created_at: 0,
        }
    }

    #[test]
    fn a_launch_names_label_offer_gpu_price_actor_and_reason() {
        let mut a = row("launch", "ok", "llm");
        a.label = Some("fleetagent-r7-1a2b3c4d".into());
        a.instance_id = Some(9_000_001);
        a.offer_id = Some(20_000_001);
        a.dph = Some(0.4);
        a.emergency = true;
        let l = action_line(&a, Some("RTX 4090"));
        assert!(!l.warning);
        assert_eq!(
            l.text,
            "launched fleetagent-r7-1a2b3c4d as instance 9000001 (offer 20000001, RTX 4090, \
             $0.400/h, emergency) by llm: 59 queued, every worker dead"
        );
        // A bid says what it bid; the offer's full price stays (the caps count it).
        a.detail = Some("offer 20000001 RTX 4090 $0.4000/h, a bid at $0.1440/h".into());
        let l = action_line(&a, Some("RTX 4090"));
        assert!(
            l.text
                .contains("(offer 20000001, RTX 4090, $0.400/h, bid $0.144/h, emergency)"),
            "{}",
            l.text
        );
        // The reports say the GPU as the journal did, from the ledger's detail.
        assert!(
            quoted_line(&a).contains("(offer 20000001, RTX 4090, $0.400/h, bid $0.144/h"),
            "{}",
            quoted_line(&a)
        );
        a.detail = Some("offer 20000001 RTX 4090 $0.4000/h".into());
        assert!(quoted_line(&a).contains("(offer 20000001, RTX 4090, $0.400/h, emergency)"));
    }

    #[test]
    fn a_refusal_names_its_guardrail_and_figure() {
        let mut a = row("launch", "refused", "rules");
        a.detail = Some(
            r#"{"error":"rate_limited","limit":"3 launches per 15 min","retry_after_secs":412}"#
                .into(),
        );
        let l = action_line(&a, None);
        assert!(!l.warning);
        assert_eq!(
            l.text,
            "refused launch (rate_limited: 3 launches per 15 min, retry in 412s), asked by \
             rules: 59 queued, every worker dead"
        );
        let mut s = row("destroy", "refused", "llm");
        s.instance_id = Some(12);
        s.label = Some("fleetagent-r2-aa".into());
        s.detail = Some(r#"{"error":"protected","message":"instance 12 is proving"}"#.into());
        assert_eq!(
            action_line(&s, None).text,
            "refused destroy fleetagent-r2-aa instance 12 (protected: instance 12 is proving), \
             asked by llm: 59 queued, every worker dead"
        );
    }

    #[test]
    fn a_failure_is_a_warning_with_its_error() {
        let mut a = row("launch", "failed", "fallback-rules");
        a.offer_id = Some(5);
        a.detail = Some("vast.ai refused the API key: HTTP 401 on PUT /api/v0/asks/5/".into());
        let l = action_line(&a, None);
        assert!(l.warning);
        assert_eq!(
            l.text,
            "launch (offer 5) failed: vast.ai refused the API key: HTTP 401 on PUT \
             /api/v0/asks/5/, asked by fallback-rules: 59 queued, every worker dead"
        );
        let mut open = row("launch", "intent", "llm");
        open.label = Some("fleetagent-r7-bb".into());
        open.detail = Some("vast.ai unreachable: no answer within 20s".into());
        let l = action_line(&open, None);
        assert!(
            l.warning && l.text.contains("may have gone through"),
            "{l:?}"
        );
    }

    #[test]
    fn the_reports_quote_the_label() {
        let mut a = row("destroy", "ok", "operator");
        a.instance_id = Some(9);
        a.label = Some("fleetagent-spare destroyed by llm: typed".into());
        a.reason = None;
        a.detail = Some("ok".into());
        assert_eq!(
            quoted_line(&a),
            "destroyed \"fleetagent-spare destroyed by llm: typed\" instance 9 by operator"
        );
    }

    #[test]
    fn stops_say_what_was_done_and_why() {
        let mut a = row("destroy", "ok", "floor");
        a.instance_id = Some(9);
        a.label = Some("fleetagent-r1-cc".into());
        a.dph = Some(0.35);
        a.detail = Some("flagged (silent 25m): earned nothing".into());
        assert_eq!(
            action_line(&a, Some("RTX 3090")).text,
            "destroyed fleetagent-r1-cc instance 9 (RTX 3090, $0.350/h, flagged (silent 25m): \
             earned nothing) by floor: 59 queued, every worker dead"
        );
        let mut b = row("stop", "ok", "operator");
        b.instance_id = Some(4);
        b.reason = None;
        b.detail = Some("ok".into());
        assert_eq!(action_line(&b, None).text, "stopped instance 4 by operator");
        let d = row("launch", "dry_run", "llm");
        assert_eq!(
            action_line(&d, None).text,
            "dry run: would launch (best offer) by llm: 59 queued, every worker dead (no offer \
             looked up: policy.max_dph_total, the daily cap at its price and the margin are \
             checked only against a real one)"
        );
    }

    #[test]
    fn a_pass_is_tallied_with_what_it_did_refused_and_failed() {
        assert_eq!(tally(&[]), Tally::default());
        let mut ok = row("launch", "ok", "llm");
        ok.label = Some("fleetagent-r7-aa".into());
        let mut refused = row("launch", "refused", "llm");
        refused.detail = Some(r#"{"error":"rate_limited","limit":"x"}"#.into());
        let mut refused2 = refused.clone();
        refused2.detail = Some(r#"{"error":"budget","limit":"$1/h"}"#.into());
        let mut failed = row("launch", "failed", "floor");
        failed.detail = Some("vast.ai refused the API key: HTTP 401".into());
        let open = row("launch", "intent", "llm");
        let dry = row("destroy", "dry_run", "llm");
        let t = tally(&[ok, refused.clone(), refused, refused2, failed, open, dry]);
        assert_eq!(
            t.counts,
            ActionCounts {
                ok: 2,
                refused: 3,
                failed: 2
            }
        );
        assert_eq!(
            t.words,
            "launched fleetagent-r7-aa, would destroy (dry run); refused 3 launches \
             (budget, rate_limited); failed 2 launches (vast.ai refused the API key: HTTP 401)"
        );
    }
}
