//! The report's `model` object: who decided (the configured `llm.model`, or `rules`) and how
//! it did: its calls, the tool calls it made, how many of those were invalid, answers that
//! wrote a tool call as text, what the floor had to do under it and its clocks, how much of
//! its prompts the server took from its prompt cache, and with `--llm` the same scenario and
//! seed decided by the rules beside it.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{r4, Report};
use crate::clock::Millis;
use crate::policy::floor::Clocks;
use crate::store::report as db;

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Model {
    /// `llm.model` of the config (`sim --llm`), `<llm.model> (simulated outage)`, or `rules`.
    pub name: String,
    /// Requests sent to the model (as `llm.calls`).
    pub calls: u64,
    /// Tool calls of the model that its tool loop ran.
    pub tool_calls: u64,
    /// Of those, the ones answered `invalid_args` or `unknown_tool`.
    pub invalid_calls: u64,
    /// Answers that wrote a tool call as text (`functions.NAME:`, or the shape of a JSON
    /// object naming a tool, valid JSON or not: `prompt::answer::tool_call_as_text`) instead
    /// of making it: nothing ran.
    pub malformed_answers: u64,
    /// The floor's actions (any outcome) by the rule that asked for them.
    pub floor_actions: FloorActions,
    /// Passes decided by the floor (it changed the fleet under the model's answer).
    pub floor_passes: u64,
    /// Of the prompt tokens the server reported, the share it took from its prompt cache,
    /// over the calls whose server said (null: none did); and the same without the first of
    /// them, which finds the cache empty.
    pub cache_share: Option<f64>,
    pub cache_share_after_first: Option<f64>,
    /// The floor's clocks over the run, where the floor planned (a model, or the fallback).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub floor_clocks: Option<FloorClocks>,
    /// With `--llm`: the same scenario, seed and config decided by the rules.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rules: Option<Beside>,
}

/// By the call ids' kind (`floor-<kind>_<run>_<n>`).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct FloorActions {
    pub total: u64,
    pub emergency: u64,
    pub deficit: u64,
    pub seed: u64,
    pub flagged: u64,
    pub surplus: u64,
    /// Instances below `policy.min_margin` stopped (issue 17's `unprofitable` rule).
    pub unprofitable: u64,
    /// A call id of another shape (outbid, replace, over_cap among them).
    pub other: u64,
}

/// The floor's clocks as the passes left them (`runs.floor_clocks`).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct FloorClocks {
    /// Passes that ended with a deficit open and unanswered: nobody launched for it and
    /// nothing of ours was coming.
    pub unanswered_passes: u64,
    /// The longest a deficit stayed open (confirmed by the rules, answered or not), minutes
    /// at the start of the last pass that saw it.
    pub deficit_open_mins_max: f64,
    /// The most passes a flagged instance of ours was left (the floor destroys it once left
    /// `policy.floor_flagged_passes`).
    pub flagged_passes_max: u32,
    /// The last pass that ended with the deficit unanswered, and its clocks (null: none).
    pub last_unanswered: Option<Unanswered>,
}

/// One pass's clocks, times in minutes from the simulation's start.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Unanswered {
    pub run: i64,
    pub at_mins: f64,
    pub deficit_since_mins: Option<f64>,
    pub surplus_since_mins: Option<f64>,
    /// vast.ai id -> passes left.
    pub flagged_passes: BTreeMap<i64, u32>,
    /// Why nothing answered the deficit.
    pub why: String,
}

/// The floor's clocks of every finished pass that kept some, from `start`.
pub fn clocks(conn: &rusqlite::Connection, start: Millis) -> anyhow::Result<FloorClocks> {
    let mins = |t: Millis| r4((t - start) as f64 / 60_000.0);
    let mut out = FloorClocks::default();
    for (run, at, json) in crate::store::runs::floor_clocks(conn)? {
        // Written by this binary's own floor: a row it cannot read is a bug, said as one.
        let c: Clocks = serde_json::from_str(&json)
            .map_err(|e| anyhow::anyhow!("run {run}: floor_clocks unreadable ({e}): {json}"))?;
        if let Some(since) = c.deficit_since {
            out.deficit_open_mins_max = out
                .deficit_open_mins_max
                .max(r4((at - since) as f64 / 60_000.0));
        }
        let most = c.flagged_passes.values().copied().max().unwrap_or(0);
        out.flagged_passes_max = out.flagged_passes_max.max(most);
        if let Some(why) = c.unanswered {
            out.unanswered_passes += 1;
            out.last_unanswered = Some(Unanswered {
                run,
                at_mins: mins(at),
                deficit_since_mins: c.deficit_since.map(mins),
                surplus_since_mins: c.surplus_since.map(mins),
                flagged_passes: c.flagged_passes,
                why,
            });
        }
    }
    Ok(out)
}

/// The decision-quality figures of another run of the same world (the rules'), beside the
/// model's own at the top of the report.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Beside {
    pub served_share: f64,
    pub hours_below_target: f64,
    pub dollars_per_proof: f64,
    /// $/proof over the oracle's.
    pub cost_ratio: f64,
    pub hours_below_over_oracle: f64,
    pub launches: u64,
    pub stops: u64,
    /// Revenue less dollars (null: no price modelled).
    pub profit: Option<f64>,
    pub passed: bool,
}

impl Beside {
    pub fn of(r: &Report) -> Beside {
        Beside {
            served_share: r.proofs.served_share,
            hours_below_target: r.hours_below_target,
            dollars_per_proof: r.money.dollars_per_proof,
            cost_ratio: r.oracle.cost_ratio,
            hours_below_over_oracle: r.oracle.hours_below_over_oracle,
            launches: r.launches.made,
            stops: r.stops.made,
            profit: r.money.profit,
            passed: r.passed,
        }
    }
}

/// `floor_clocks`: where the floor planned (a model, or the fallback), from `runs.floor_clocks`.
pub fn build(
    conn: &rusqlite::Connection,
    name: String,
    calls: u64,
    floor_passes: u64,
    floor_clocks: Option<FloorClocks>,
    rules: Option<&Report>,
) -> anyhow::Result<Model> {
    let msgs = db::model_messages(conn)?;
    let malformed = crate::tools::calls_written_as_text(&msgs.answer_texts) as u64;
    let mut floor = FloorActions::default();
    for (kind, n) in db::floor_actions_by_kind(conn)? {
        floor.total += n;
        match kind.as_str() {
            "emergency" => floor.emergency += n,
            "deficit" => floor.deficit += n,
            "seed" => floor.seed += n,
            "flagged" => floor.flagged += n,
            "surplus" => floor.surplus += n,
            "unprofitable" => floor.unprofitable += n,
            _ => floor.other += n,
        }
    }
    let cache = crate::store::llm_calls::cache_figures(conn)?;
    Ok(Model {
        name,
        calls,
        tool_calls: msgs.tool_calls,
        invalid_calls: msgs.invalid_calls,
        malformed_answers: malformed,
        floor_actions: floor,
        floor_passes,
        cache_share: cache.share(),
        cache_share_after_first: cache.share_after_first(),
        floor_clocks,
        rules: rules.map(Beside::of),
    })
}

/// The model's line of the text report.
pub fn line(m: &Model) -> String {
    let f = &m.floor_actions;
    let mut out = format!(
        "{}: {} calls, {} tool calls ({} invalid), {} malformed answers; floor: {} actions \
         (emergency {}, deficit {}, seed {}, flagged {}, surplus {}, unprofitable {}), {} passes",
        m.name,
        m.calls,
        m.tool_calls,
        m.invalid_calls,
        m.malformed_answers,
        f.total,
        f.emergency,
        f.deficit,
        f.seed,
        f.flagged,
        f.surplus,
        f.unprofitable,
        m.floor_passes
    );
    if f.other > 0 {
        out.push_str(&format!(" ({} other)", f.other));
    }
    let pct = |x: f64| format!("{:.1}%", r4(x) * 100.0);
    out.push_str(&match (m.cache_share, m.cache_share_after_first) {
        (Some(all), Some(later)) => format!(
            "; prompt cache {} of the prompt tokens ({} after the first call)",
            pct(all),
            pct(later)
        ),
        (Some(all), None) => format!("; prompt cache {} of the prompt tokens", pct(all)),
        _ => "; prompt cache not reported".into(),
    });
    out
}

/// The floor's clocks line: `3 passes ended with a deficit unanswered (the last, run 42 at
/// 135m: deficit since 115m, surplus since -, flagged 7 for 1 pass: why); deficits open up to
/// 40m; a flagged instance left at most 2 passes`.
pub fn clocks_line(c: &FloorClocks) -> String {
    let last = match &c.last_unanswered {
        None => String::new(),
        Some(u) => {
            let since = |m: Option<f64>| m.map_or("-".into(), |m| format!("{}m", super::fmt(m)));
            let flagged = if u.flagged_passes.is_empty() {
                "none".to_string()
            } else {
                u.flagged_passes
                    .iter()
                    .map(|(id, n)| format!("{id} for {n} pass{}", if *n == 1 { "" } else { "es" }))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            format!(
                " (the last, run {} at {}m: deficit since {}, surplus since {}, flagged {flagged}: {})",
                u.run,
                super::fmt(u.at_mins),
                since(u.deficit_since_mins),
                since(u.surplus_since_mins),
                u.why
            )
        }
    };
    format!(
        "{} passes ended with a deficit unanswered{last}; deficits open up to {}m; a flagged instance left at most {} passes",
        c.unanswered_passes,
        super::fmt(c.deficit_open_mins_max),
        c.flagged_passes_max
    )
}

/// The rules' line beside the model's.
pub fn rules_line(b: &Beside) -> String {
    format!(
        "{:.1}% served, {} h below target (+{} over the oracle), ${:.4}/proof ({:.2}x the oracle), \
         {} launches, {} stops, profit {}, {}",
        r4(b.served_share) * 100.0,
        super::fmt(b.hours_below_target),
        super::fmt(b.hours_below_over_oracle),
        b.dollars_per_proof,
        b.cost_ratio,
        b.launches,
        b.stops,
        b.profit.map_or("unknown".into(), |p| format!("${p:.2}")),
        if b.passed { "passed" } else { "failed" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::floor::Clocks;
    use crate::store::runs::{self, Outcome, StartedBy};

    #[test]
    fn the_line_shows_the_prompt_cache_share_or_that_none_was_reported() {
        let mut m = Model {
            name: "qwen".into(),
            calls: 40,
            tool_calls: 3,
            invalid_calls: 0,
            malformed_answers: 1,
            floor_actions: FloorActions::default(),
            floor_passes: 2,
            cache_share: Some(0.7512),
            cache_share_after_first: Some(0.8123),
            floor_clocks: None,
            rules: None,
        };
        assert!(
            line(&m).ends_with(
                "2 passes; prompt cache 75.1% of the prompt tokens (81.2% after the first call)"
            ),
            "{}",
            line(&m)
        );
        m.cache_share_after_first = None;
        assert!(line(&m).ends_with("; prompt cache 75.1% of the prompt tokens"));
        m.cache_share = None;
        assert!(line(&m).ends_with("; prompt cache not reported"));
    }

    /// The report counts with the registry's own tool names: the real model's 23 answers
    /// (tests/fixtures/llm/README.md) give 22, as `prompt::answer`'s test counts them.
    #[test]
    fn the_real_models_answers_count_22_with_the_registrys_tools() {
        let text = include_str!("../../../tests/fixtures/llm/qwen2.5-coder-0.5b-incident.txt");
        let names: Vec<String> = crate::tools::registry()
            .specs()
            .into_iter()
            .map(|s| s.name)
            .collect();
        let tools: Vec<&str> = names.iter().map(String::as_str).collect();
        let answers: Vec<&str> = text.split("\n--- call ").skip(1).collect();
        assert_eq!(answers.len(), 23);
        let counted = answers
            .iter()
            .filter(|a| crate::prompt::answer::tool_call_as_text(a, &tools))
            .count();
        assert_eq!(counted, 22);
    }

    #[test]
    fn the_clocks_count_unanswered_passes_and_name_the_last() {
        let (_dir, s) = crate::store::test_store(0);
        let min = 60_000;
        let pass = |at: i64, c: Option<Clocks>| {
            let id = runs::create(&s.conn, 1, 1, 1, StartedBy::Tick, at).unwrap();
            let json = c.map(|c| serde_json::to_string(&c).unwrap());
            runs::set_floor_clocks(&s.conn, id, json.as_deref()).unwrap();
            runs::finish_ok(&s.conn, id, &Outcome::new(false), at + 1).unwrap();
            id
        };
        let open = |why: Option<&str>, flagged: u32| Clocks {
            deficit_since: Some(10 * min),
            unanswered: why.map(String::from),
            flagged_passes: [(7, flagged)].into_iter().collect(),
            ..Clocks::default()
        };
        pass(5 * min, None);
        pass(
            10 * min,
            Some(open(Some("a pass below the backlog threshold"), 1)),
        );
        let last = pass(15 * min, Some(open(Some("the launch window is spent"), 2)));
        pass(20 * min, Some(open(None, 2)));
        let c = super::clocks(&s.conn, 0).unwrap();
        assert_eq!(c.unanswered_passes, 2);
        assert_eq!(c.deficit_open_mins_max, 10.0);
        assert_eq!(c.flagged_passes_max, 2);
        let u = c.last_unanswered.as_ref().unwrap();
        assert_eq!(
            (u.run, u.at_mins, u.deficit_since_mins),
            (last, 15.0, Some(10.0))
        );
        assert_eq!(
            super::clocks_line(&c),
            "2 passes ended with a deficit unanswered (the last, run 3 at 15m: deficit since 10m, \
             surplus since -, flagged 7 for 2 passes: the launch window is spent); deficits open \
             up to 10m; a flagged instance left at most 2 passes"
        );
    }

    /// The rule the report counts malformed answers by is the one `prompt::answer` stores them
    /// with: these are the shapes the report must count.
    const TOOLS: &[&str] = &["launch_instance", "stop_instance", "list_instances"];

    #[test]
    fn tool_calls_written_as_text_are_found() {
        for text in [
            "functions.launch_instance:",
            "I will call functions.stop_instance ({\"instance_id\": 3})",
            r#"{"name": "launch_instance", "arguments": {"reason": "dead"}}"#,
            r#"<tool_call>{"function": {"name": "functions.list_instances"}}</tool_call>"#,
            "```json\n{\"launch_instance\": {\"reason\": \"x\"}}\n```",
            r#"[{"tool": "stop_instance"}]"#,
            r#"Sure: {"name": "launch_instance", "arguments": {"rea"#,
        ] {
            assert!(
                crate::prompt::answer::tool_call_as_text(text, TOOLS),
                "{text}"
            );
        }
        for text in [
            "No action needed.",
            "Launched two instances; functions are fine.",
            "functions.: nothing",
            r#"{"name": "something_else"}"#,
            r#"{"reason": "launch_instance later"}"#,
            "The queue {59 proofs} is served.",
        ] {
            assert!(
                !crate::prompt::answer::tool_call_as_text(text, TOOLS),
                "{text}"
            );
        }
    }
}
