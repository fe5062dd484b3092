//! Prompt assembly and its validator: a budget and stored messages in, a request's messages
//! out. No tokenizing and no SQL here: every message carries the token count stored with it,
//! and history comes from a [`HistorySource`] read newest first, only as far as the budget
//! reaches.
//!
//! The prompt is: system (prompt file + pinned state) + tool schemas + history + this run's
//! messages. The compaction ladder, oldest first: old tool outputs become a placeholder with
//! the tool name and a one-line gist; whole old runs are dropped; unanswered operator
//! messages are dropped last. No-action and skipped runs never enter (the source yields only
//! action runs and operator exchanges).

use std::collections::BTreeSet;

use crate::llm::{ChatMessage, Role};
pub use crate::store::history::{HistoryRun, HistorySource, Stored};

/// The reply primer every request carries (see tokens.rs).
pub const REPLY_PRIMER_TOKENS: u64 = crate::tokens::REPLY_PRIMER_TOKENS;

/// The result synthesized for a tool call a crash left without one.
pub const INTERRUPTED_RESULT: &str = "interrupted: no result recorded";

/// The parts every request has.
pub struct Fixed<'a> {
    pub system: &'a str,
    pub system_tokens: u64,
    pub tools_tokens: u64,
    /// This run's messages so far (operator messages, observation, earlier rounds).
    pub current: &'a [Stored],
    /// Token count of one synthesized [`INTERRUPTED_RESULT`] tool message, without its id.
    pub interrupted_tokens: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    pub runs_full: usize,
    pub runs_compacted: usize,
    pub runs_read: usize,
    pub operator_kept: usize,
    pub synthesized_results: usize,
    /// Tool outputs of this run shown as placeholders because the run alone overflowed.
    pub current_compacted: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Assembled {
    pub messages: Vec<ChatMessage>,
    /// Estimated prompt tokens: messages, primer and tools.
    pub tokens: u64,
    pub stats: Stats,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ContextError {
    #[error(
        "the minimal prompt needs {needed} tokens but llm.context_budget_tokens leaves {budget} for the prompt \
         after its margin and llm.max_output_tokens (system+pinned {system}, tools {tools}, this run {current}); \
         raise the budget, lower max_output_tokens, or shorten the largest part"
    )]
    TooSmall {
        needed: u64,
        budget: u64,
        system: u64,
        tools: u64,
        current: u64,
    },
    #[error("history: {0}")]
    Source(String),
}

/// How many unanswered operator messages are reserved at most.
const MAX_UNANSWERED: usize = 20;

/// Assemble the prompt within `budget` tokens (the margin is already taken off).
pub fn assemble(
    fixed: &Fixed<'_>,
    source: &mut dyn HistorySource,
    budget: u64,
) -> Result<Assembled, ContextError> {
    let mut stats = Stats::default();
    let mut current = repair(fixed.current, fixed.interrupted_tokens, &mut stats);
    let system_cost = fixed.system_tokens;
    let base = REPLY_PRIMER_TOKENS + system_cost + fixed.tools_tokens;
    let mut current_cost: u64 = current.iter().map(|m| m.tokens).sum();
    // This run's own tool outputs are the first rung of the ladder when they alone overflow:
    // oldest first, each becomes its placeholder until the run fits.
    for m in current.iter_mut() {
        if base + current_cost <= budget {
            break;
        }
        let c = compact(m);
        if c.tokens < m.tokens {
            current_cost -= m.tokens - c.tokens;
            stats.current_compacted += 1;
            *m = c;
        }
    }
    let needed = base + current_cost;
    if needed > budget {
        return Err(ContextError::TooSmall {
            needed,
            budget,
            system: system_cost,
            tools: fixed.tools_tokens,
            current: current_cost,
        });
    }
    let mut left = budget - needed;

    // Unanswered operator messages are dropped last, so they are reserved first.
    let mut kept: Vec<Stored> = Vec::new();
    let mut kept_ids: BTreeSet<i64> = current.iter().map(|m| m.id).collect();
    let unanswered = source
        .unanswered_operator(MAX_UNANSWERED)
        .map_err(|e| ContextError::Source(format!("{e:#}")))?;
    for m in unanswered {
        if kept_ids.contains(&m.id) {
            continue;
        }
        // One too long for what is left is cut to fit rather than left out: left out, the
        // model would never see it, and its next answer would count as answering it.
        let m = if m.tokens > left {
            match cut_to_fit(&m, left) {
                Some(cut) => cut,
                None => continue,
            }
        } else {
            m
        };
        left -= m.tokens;
        kept_ids.insert(m.id);
        stats.operator_kept += 1;
        kept.push(m);
    }

    // Then whole runs, the ladder from the oldest end: first every run that fits with its
    // tool outputs compacted, newest first (the first that does not fit even so ends the
    // history: older runs are dropped whole); then, with what is left, runs get their full
    // outputs back, newest first. So a newer run's large output is compacted before an
    // older run is dropped.
    let mut runs: Vec<(Vec<Stored>, Vec<Stored>)> = Vec::new(); // (full, compacted)
    while let Some(run) = source
        .next_older()
        .map_err(|e| ContextError::Source(format!("{e:#}")))?
    {
        stats.runs_read += 1;
        let mut msgs: Vec<Stored> = run
            .messages
            .into_iter()
            .filter(|m| !kept_ids.contains(&m.id))
            .collect();
        msgs = repair(&msgs, fixed.interrupted_tokens, &mut stats);
        if msgs.is_empty() {
            continue;
        }
        let compacted: Vec<Stored> = msgs.iter().map(compact).collect();
        let cost: u64 = compacted.iter().map(|m| m.tokens).sum();
        if cost > left {
            break;
        }
        left -= cost;
        runs.push((msgs, compacted));
    }
    for (full, compacted) in runs {
        let full_cost: u64 = full.iter().map(|m| m.tokens).sum();
        let cost: u64 = compacted.iter().map(|m| m.tokens).sum();
        let msgs = if full_cost - cost <= left {
            left -= full_cost - cost;
            stats.runs_full += 1;
            full
        } else {
            stats.runs_compacted += 1;
            compacted
        };
        for m in &msgs {
            kept_ids.insert(m.id);
        }
        kept.extend(msgs);
    }

    // Chronological order; a run's block stays contiguous because ids grow within it and
    // reserved operator messages stand alone.
    kept.sort_by_key(|m| m.id);
    let mut messages = Vec::with_capacity(kept.len() + current.len() + 1);
    messages.push(ChatMessage {
        role: Role::System,
        content: fixed.system.to_string(),
        tool_calls: Vec::new(),
        tool_call_id: None,
    });
    let mut tokens = REPLY_PRIMER_TOKENS + system_cost + fixed.tools_tokens;
    for m in kept.iter().chain(current.iter()) {
        tokens += m.tokens;
        messages.push(to_chat(m));
    }
    Ok(Assembled {
        messages,
        tokens,
        stats,
    })
}

/// The note that ends an operator message cut by [`cut_to_fit`], and a bound on its tokens.
const CUT_NOTE: &str =
    "\n[operator message cut to fit the context budget; the whole text is in `fleetagent history`]";
const CUT_NOTE_TOKENS: u64 = 40;

/// `m` cut to fit `room` tokens, by its own characters-per-token ratio with a fifth to spare
/// (no tokenizer here; the validator recounts the request before it is sent). None when
/// there is no useful room.
fn cut_to_fit(m: &Stored, room: u64) -> Option<Stored> {
    let chars = m.content.chars().count() as u64;
    if room < CUT_NOTE_TOKENS + 20 || m.tokens == 0 || chars == 0 {
        return None;
    }
    let text_room = (room - CUT_NOTE_TOKENS) * 4 / 5;
    let keep = (chars * text_room / m.tokens) as usize;
    if keep == 0 {
        return None;
    }
    let mut content: String = m.content.chars().take(keep).collect();
    content.push_str(CUT_NOTE);
    Some(Stored {
        content,
        tokens: text_room + CUT_NOTE_TOKENS,
        ..m.clone()
    })
}

fn to_chat(m: &Stored) -> ChatMessage {
    ChatMessage {
        role: m.role,
        content: m.content.clone(),
        tool_calls: m.tool_calls.clone(),
        tool_call_id: m.tool_call_id.clone(),
    }
}

/// A tool result with its output replaced by the stored placeholder.
fn compact(m: &Stored) -> Stored {
    match (&m.role, &m.compacted) {
        (Role::Tool, Some((text, tokens))) if *tokens < m.tokens => Stored {
            content: text.clone(),
            tokens: *tokens,
            ..m.clone()
        },
        _ => m.clone(),
    }
}

/// Make one run's messages a valid sequence: drop empty messages and tool results that do
/// not answer the assistant turn right before them; give every tool call without a result
/// the synthesized "interrupted" result. Token counts of synthesized results: the stored
/// constant plus the call id's length as an upper bound (ids are short ASCII).
fn repair(msgs: &[Stored], interrupted_tokens: u64, stats: &mut Stats) -> Vec<Stored> {
    let mut out: Vec<Stored> = Vec::with_capacity(msgs.len());
    let mut i = 0;
    while i < msgs.len() {
        let m = &msgs[i];
        i += 1;
        match m.role {
            Role::Tool => continue, // orphan: not right after its assistant turn
            Role::Assistant if !m.tool_calls.is_empty() => {
                out.push(m.clone());
                let mut answered: BTreeSet<&str> = BTreeSet::new();
                while i < msgs.len() && msgs[i].role == Role::Tool {
                    let r = &msgs[i];
                    i += 1;
                    let Some(id) = r.tool_call_id.as_deref() else {
                        continue;
                    };
                    let wanted = m.tool_calls.iter().any(|c| c.id == id);
                    if wanted && !answered.contains(id) && !r.content.is_empty() {
                        answered.insert(id);
                        out.push(r.clone());
                    }
                }
                for c in &m.tool_calls {
                    if !answered.contains(c.id.as_str()) {
                        stats.synthesized_results += 1;
                        out.push(Stored {
                            id: m.id,
                            role: Role::Tool,
                            content: INTERRUPTED_RESULT.to_string(),
                            tokens: interrupted_tokens + c.id.len() as u64,
                            tool_calls: Vec::new(),
                            tool_call_id: Some(c.id.clone()),
                            tool_name: Some(c.name.clone()),
                            compacted: None,
                            operator: false,
                        });
                    }
                }
            }
            _ if m.content.trim().is_empty() => continue,
            _ => out.push(m.clone()),
        }
    }
    out
}

/// The checks every request passes just before it is sent: within budget; every tool result
/// directly follows the assistant turn that called it and every call has exactly one result;
/// no empty or orphaned messages; the system message first.
pub fn validate(messages: &[ChatMessage], tokens: u64, budget: u64) -> Result<(), String> {
    if tokens > budget {
        return Err(format!(
            "prompt is {tokens} tokens, over the budget of {budget}"
        ));
    }
    if messages.first().map(|m| m.role) != Some(Role::System) {
        return Err("the first message is not the system message".into());
    }
    let mut i = 0;
    while i < messages.len() {
        let m = &messages[i];
        match m.role {
            Role::Tool => {
                return Err(format!(
                    "message {i}: a tool result without a preceding assistant tool call"
                ))
            }
            Role::Assistant if !m.tool_calls.is_empty() => {
                let mut ids: BTreeSet<&str> = BTreeSet::new();
                for c in &m.tool_calls {
                    if c.id.is_empty() || c.name.is_empty() {
                        return Err(format!("message {i}: a tool call without id or name"));
                    }
                    if !ids.insert(c.id.as_str()) {
                        return Err(format!("message {i}: duplicate tool call id {}", c.id));
                    }
                }
                let mut j = i + 1;
                while j < messages.len() && messages[j].role == Role::Tool {
                    let r = &messages[j];
                    let id = r.tool_call_id.as_deref().unwrap_or("");
                    if !ids.remove(id) {
                        return Err(format!(
                            "message {j}: tool result {id:?} answers no open call of message {i}"
                        ));
                    }
                    if r.content.is_empty() {
                        return Err(format!("message {j}: empty tool result"));
                    }
                    j += 1;
                }
                if let Some(id) = ids.iter().next() {
                    return Err(format!("message {i}: tool call {id} has no result"));
                }
                i = j;
                continue;
            }
            _ if m.content.trim().is_empty() => {
                return Err(format!("message {i}: empty {} message", m.role.as_str()))
            }
            _ => {}
        }
        if m.tool_call_id.is_some() && m.role != Role::Tool {
            return Err(format!(
                "message {i}: tool_call_id on a {} message",
                m.role.as_str()
            ));
        }
        i += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::ToolCall;
    use proptest::prelude::*;

    /// An in-memory source over runs (newest first) for tests.
    pub struct VecSource {
        runs: Vec<HistoryRun>,
        next: usize,
        unanswered: Vec<Stored>,
    }

    impl HistorySource for VecSource {
        fn next_older(&mut self) -> anyhow::Result<Option<HistoryRun>> {
            let r = self.runs.get(self.next).cloned();
            self.next += 1;
            Ok(r)
        }
        fn unanswered_operator(&mut self, limit: usize) -> anyhow::Result<Vec<Stored>> {
            Ok(self.unanswered.iter().take(limit).cloned().collect())
        }
    }

    fn msg(id: i64, role: Role, tokens: u64) -> Stored {
        Stored {
            id,
            role,
            content: format!("m{id}"),
            tokens,
            tool_calls: Vec::new(),
            tool_call_id: None,
            tool_name: None,
            compacted: None,
            operator: false,
        }
    }

    fn call(id: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: "launch_instance".into(),
            arguments: "{}".into(),
        }
    }

    /// Messages of one run: observation, then rounds of assistant calls with results (some
    /// missing or truncated), and a final answer.
    #[derive(Debug, Clone)]
    struct RunShape {
        obs_tokens: u64,
        operator: Option<u64>,
        rounds: Vec<(Vec<u64>, usize)>, // result sizes; how many results were recorded
        answer: Option<u64>,
        action: bool,
    }

    fn run_shape() -> impl Strategy<Value = RunShape> {
        (
            1u64..400,
            proptest::option::weighted(0.2, 1u64..200),
            proptest::collection::vec(
                (proptest::collection::vec(1u64..3000, 1..4), 0usize..4),
                0..3,
            ),
            proptest::option::of(1u64..300),
            proptest::bool::weighted(0.4),
        )
            .prop_map(|(obs_tokens, operator, rounds, answer, action)| RunShape {
                obs_tokens,
                operator,
                rounds,
                answer,
                action,
            })
    }

    fn build(shapes: &[RunShape], next_id: &mut i64) -> Vec<(i64, Vec<Stored>, bool)> {
        let mut runs = Vec::new();
        for (r, s) in shapes.iter().enumerate() {
            let mut ms = Vec::new();
            let mut id = || {
                *next_id += 1;
                *next_id
            };
            if let Some(t) = s.operator {
                let mut m = msg(id(), Role::User, t);
                m.operator = true;
                ms.push(m);
            }
            ms.push(msg(id(), Role::User, s.obs_tokens));
            for (k, (results, recorded)) in s.rounds.iter().enumerate() {
                let ids: Vec<String> = (0..results.len())
                    .map(|j| format!("c{r}_{k}_{j}"))
                    .collect();
                let mut a = msg(id(), Role::Assistant, 20 + 10 * ids.len() as u64);
                a.content = String::new();
                a.tool_calls = ids.iter().map(|i| call(i)).collect();
                ms.push(a);
                for (j, size) in results.iter().enumerate().take(*recorded) {
                    let mut t = msg(id(), Role::Tool, *size);
                    t.tool_call_id = Some(ids[j].clone());
                    t.tool_name = Some("launch_instance".into());
                    t.compacted = Some(("[compacted] launch_instance: ok".into(), 12));
                    ms.push(t);
                }
            }
            if let Some(t) = s.answer {
                ms.push(msg(id(), Role::Assistant, t));
            }
            runs.push((r as i64 + 1, ms, s.action));
        }
        runs
    }

    /// What the store would yield: action runs whole, other runs only operator messages and
    /// answers; newest first.
    fn source_of(runs: &[(i64, Vec<Stored>, bool)]) -> VecSource {
        let mut out = Vec::new();
        for (run_id, ms, action) in runs.iter().rev() {
            let messages: Vec<Stored> = if *action {
                ms.clone()
            } else {
                ms.iter()
                    .filter(|m| {
                        m.operator || (m.role == Role::Assistant && m.tool_calls.is_empty())
                    })
                    .cloned()
                    .collect()
            };
            if !messages.is_empty() {
                out.push(HistoryRun {
                    run_id: *run_id,
                    messages,
                });
            }
        }
        let unanswered = runs
            .iter()
            .rev()
            .flat_map(|(_, ms, _)| ms.iter().filter(|m| m.operator).cloned())
            .take(3)
            .collect();
        VecSource {
            runs: out,
            next: 0,
            unanswered,
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 10_000, ..ProptestConfig::default() })]

        /// Random histories from empty to many times the budget: every prompt fits and is valid.
        #[test]
        fn every_prompt_fits_and_validates(
            shapes in proptest::collection::vec(run_shape(), 0..40),
            current in run_shape(),
            budget in 3_000u64..30_000,
        ) {
            let mut next_id = 0;
            let history = build(&shapes, &mut next_id);
            let current_runs = build(std::slice::from_ref(&current), &mut next_id);
            let current_msgs = &current_runs[0].1;
            let fixed = Fixed {
                system: "system",
                system_tokens: 900,
                tools_tokens: 600,
                current: current_msgs,
                interrupted_tokens: 12,
            };
            let mut source = source_of(&history);
            match assemble(&fixed, &mut source, budget) {
                Ok(a) => {
                    prop_assert!(a.tokens <= budget, "{} > {budget}", a.tokens);
                    let v = validate(&a.messages, a.tokens, budget);
                    prop_assert!(v.is_ok(), "{v:?}");
                    // Reads stop once the budget is full: never more runs than exist.
                    prop_assert!(a.stats.runs_read <= source.runs.len());
                }
                Err(ContextError::TooSmall { needed, .. }) => prop_assert!(needed > budget),
                Err(e) => prop_assert!(false, "{e}"),
            }
        }
    }

    #[test]
    fn interrupted_call_gets_a_synthesized_result() {
        let mut a = msg(2, Role::Assistant, 30);
        a.content.clear();
        a.tool_calls = vec![call("x"), call("y")];
        let mut r = msg(3, Role::Tool, 40);
        r.tool_call_id = Some("x".into());
        let current = vec![msg(1, Role::User, 10), a, r];
        let fixed = Fixed {
            system: "s",
            system_tokens: 5,
            tools_tokens: 0,
            current: &current,
            interrupted_tokens: 12,
        };
        let mut src = VecSource {
            runs: vec![],
            next: 0,
            unanswered: vec![],
        };
        let out = assemble(&fixed, &mut src, 1_000).unwrap();
        assert_eq!(out.stats.synthesized_results, 1);
        let last = out.messages.last().unwrap();
        assert_eq!(last.content, INTERRUPTED_RESULT);
        assert_eq!(last.tool_call_id.as_deref(), Some("y"));
        validate(&out.messages, out.tokens, 1_000).unwrap();
    }

    #[test]
    fn old_tool_outputs_compact_before_runs_drop() {
        // Two old action runs with a 5000-token tool output each; room for one in full.
        let mut next = 0;
        let shape = RunShape {
            obs_tokens: 50,
            operator: None,
            rounds: vec![(vec![5_000], 1)],
            answer: Some(20),
            action: true,
        };
        let runs = build(&[shape.clone(), shape], &mut next);
        let current = vec![msg(1000, Role::User, 100)];
        let fixed = Fixed {
            tools_tokens: 100,
            ..plain(&current)
        };
        let out = assemble(&fixed, &mut source_of(&runs), 6_000).unwrap();
        assert_eq!(out.stats.runs_full, 1);
        assert_eq!(out.stats.runs_compacted, 1);
        assert!(out
            .messages
            .iter()
            .any(|m| m.content.starts_with("[compacted]")));
        let out = assemble(&fixed, &mut source_of(&runs), 1_000).unwrap();
        assert_eq!(out.stats.runs_full + out.stats.runs_compacted, 2);
        let out = assemble(&fixed, &mut source_of(&runs), 400).unwrap();
        assert_eq!(out.stats.runs_full + out.stats.runs_compacted, 0);
    }

    #[test]
    fn a_newer_runs_large_output_is_compacted_before_an_older_run_is_dropped() {
        // An older run with an operator exchange (no large output), then a newer action run
        // with a 1000-token tool output. The room left after this run: 1100 tokens.
        let mut next = 0;
        let older = RunShape {
            obs_tokens: 100,
            operator: Some(150),
            rounds: vec![],
            answer: Some(50),
            action: true,
        };
        let newer = RunShape {
            obs_tokens: 50,
            operator: None,
            rounds: vec![(vec![1_000], 1)],
            answer: Some(20),
            action: true,
        };
        let runs = build(&[older, newer], &mut next);
        let current = vec![msg(1000, Role::User, 100)];
        let fixed = Fixed {
            tools_tokens: 100,
            ..plain(&current)
        };
        let budget = REPLY_PRIMER_TOKENS + 300 + 1_100;
        let out = assemble(&fixed, &mut source_of(&runs), budget).unwrap();
        // Both runs are there: the newer one's output as its placeholder, not the older run
        // dropped to keep that output whole.
        assert_eq!((out.stats.runs_full, out.stats.runs_compacted), (1, 1));
        assert!(out
            .messages
            .iter()
            .any(|m| m.content.starts_with("[compacted]")));
        assert!(out.tokens <= budget);
        validate(&out.messages, out.tokens, budget).unwrap();
        // With room for everything, everything is whole.
        let out = assemble(&fixed, &mut source_of(&runs), budget + 2_000).unwrap();
        assert_eq!((out.stats.runs_full, out.stats.runs_compacted), (2, 0));
    }

    #[test]
    fn this_runs_own_large_tool_outputs_compact_before_failing() {
        let mut a = msg(2, Role::Assistant, 30);
        a.content.clear();
        a.tool_calls = vec![call("x"), call("y")];
        let mut rx = msg(3, Role::Tool, 3_000);
        rx.tool_call_id = Some("x".into());
        rx.compacted = Some(("[compacted] search_offers: 20 offers".into(), 15));
        let mut ry = msg(4, Role::Tool, 3_000);
        ry.tool_call_id = Some("y".into());
        ry.compacted = Some(("[compacted] list_instances: 40".into(), 15));
        let current = vec![msg(1, Role::User, 100), a, rx, ry];
        let fixed = Fixed {
            system: "s",
            system_tokens: 500,
            tools_tokens: 500,
            current: &current,
            interrupted_tokens: 12,
        };
        let mut src = VecSource {
            runs: vec![],
            next: 0,
            unanswered: vec![],
        };
        let out = assemble(&fixed, &mut src, 5_000).unwrap();
        assert_eq!(out.stats.current_compacted, 1, "only the oldest output");
        assert!(out.tokens <= 5_000);
        validate(&out.messages, out.tokens, 5_000).unwrap();
        assert!(out.messages[3].content.starts_with("[compacted]"));
        assert!(!out.messages[4].content.starts_with("[compacted]"));
    }

    /// A system of 100 tokens, no tools, and this run's messages.
    fn plain(current: &[Stored]) -> Fixed<'_> {
        Fixed {
            system: "s",
            system_tokens: 100,
            tools_tokens: 0,
            current,
            interrupted_tokens: 12,
        }
    }

    #[test]
    fn unanswered_operator_messages_survive_longest() {
        let mut op = msg(1, Role::User, 50);
        op.operator = true;
        let mut src = VecSource {
            runs: vec![HistoryRun {
                run_id: 1,
                messages: vec![op.clone(), msg(2, Role::User, 5_000)],
            }],
            next: 0,
            unanswered: vec![op],
        };
        let current = vec![msg(10, Role::User, 100)];
        let fixed = plain(&current);
        let out = assemble(&fixed, &mut src, 1_000).unwrap();
        assert_eq!(out.stats.operator_kept, 1);
        assert!(out.messages.iter().any(|m| m.content == "m1"));
        assert!(!out.messages.iter().any(|m| m.content == "m2"));
    }

    #[test]
    fn an_operator_message_too_long_for_the_room_left_is_cut_not_dropped() {
        let mut big = msg(1, Role::User, 2_000);
        big.operator = true;
        big.content = "word ".repeat(1_600);
        let mut src = VecSource {
            runs: vec![],
            next: 0,
            unanswered: vec![big],
        };
        let current = vec![msg(10, Role::User, 100)];
        let fixed = plain(&current);
        let budget = 1_000;
        let out = assemble(&fixed, &mut src, budget).unwrap();
        assert_eq!(out.stats.operator_kept, 1);
        let shown = out
            .messages
            .iter()
            .find(|m| m.content.starts_with("word"))
            .unwrap();
        assert!(shown.content.ends_with(CUT_NOTE), "{}", shown.content);
        assert!(shown.content.len() < 8_000);
        assert!(out.tokens <= budget, "{}", out.tokens);
    }

    #[test]
    fn minimal_prompt_too_big_names_sizes() {
        let current = vec![msg(1, Role::User, 500)];
        let fixed = Fixed {
            system: "s",
            system_tokens: 800,
            tools_tokens: 700,
            current: &current,
            interrupted_tokens: 12,
        };
        let mut src = VecSource {
            runs: vec![],
            next: 0,
            unanswered: vec![],
        };
        let err = assemble(&fixed, &mut src, 1_500).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("2003") && text.contains("1500"), "{text}");
    }

    #[test]
    fn validator_rejects_what_openai_rejects() {
        let sys = ChatMessage {
            role: Role::System,
            content: "s".into(),
            tool_calls: vec![],
            tool_call_id: None,
        };
        let tool = ChatMessage {
            role: Role::Tool,
            content: "r".into(),
            tool_calls: vec![],
            tool_call_id: Some("x".into()),
        };
        let asst = ChatMessage {
            role: Role::Assistant,
            content: String::new(),
            tool_calls: vec![call("x")],
            tool_call_id: None,
        };
        let user = ChatMessage {
            role: Role::User,
            content: "u".into(),
            tool_calls: vec![],
            tool_call_id: None,
        };
        assert!(validate(&[sys.clone(), tool.clone()], 1, 10).is_err());
        assert!(validate(&[sys.clone(), asst.clone(), user.clone()], 1, 10).is_err());
        assert!(validate(
            &[sys.clone(), asst.clone(), tool.clone(), tool.clone()],
            1,
            10
        )
        .is_err());
        assert!(validate(&[sys.clone(), asst, tool, user.clone()], 1, 10).is_ok());
        assert!(validate(&[sys.clone(), user.clone()], 11, 10).is_err());
        let empty = ChatMessage {
            content: " ".into(),
            ..user
        };
        assert!(validate(&[sys, empty], 1, 10).is_err());
    }
}
