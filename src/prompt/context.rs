//! Prompt assembly and its validator: a budget and stored messages in, a request's messages
//! out. No tokenizing and no SQL here: every message carries the token count stored with it,
//! and history comes from a [`HistorySource`] read newest first, only as far as the budget
//! reaches.
//!
//! The prompt is: system (the prompt file, the same every pass) + tool schemas + history, the
//! part a server's prompt cache can reuse from one request to the next; then what changes
//! every pass: the pinned state block (a user message) and this run's messages (operator
//! messages, the observation, the rounds so far). The compaction ladder, oldest first: old
//! tool outputs become a placeholder with the tool name and a one-line gist; whole old runs
//! are dropped, in steps from the oldest end; unanswered operator messages are dropped last.
//! No-action and skipped runs never enter (the source yields only action runs and operator
//! exchanges).
//!
//! The history changes only in steps. Its shape ([`Shape`]: the earliest run it holds and
//! the newest one shown with tool outputs as placeholders) is kept from one request to the
//! next (`llm_calls`), so the runs a pass adds come after an unchanged start, whole, and a
//! pass that adds none sends the history byte for byte as before, however the size of the
//! state block or the observation moves. Only when the history no longer fits is it reshaped:
//! cut from the oldest end to the newest runs that fill at most [`RESHAPE_TO_PERCENT`] of the
//! room as placeholders, and given their whole outputs back, newest first, while they stay
//! within that share. Within a pass, a later round extends the earlier round's prompt
//! ([`extend`]).

use std::collections::BTreeSet;

use crate::llm::{ChatMessage, Role};
pub use crate::store::history::{HistoryRun, HistorySource, Stored};

/// The reply primer every request carries (see tokens.rs).
pub const REPLY_PRIMER_TOKENS: u64 = crate::tokens::REPLY_PRIMER_TOKENS;

/// The result synthesized for a tool call a crash left without one.
pub const INTERRUPTED_RESULT: &str = "interrupted: no result recorded";

/// The heading of the pinned state block (the system prompt refers to a "Current state" block).
pub const STATE_HEADING: &str = "## Current state (rebuilt from the database this pass)";

/// When the history no longer fits, it is reshaped to fill at most this share of the room,
/// so the runs of the next passes fit after it unchanged (`tests::replay`, in
/// docs/architecture.md: a reshape every few action passes instead of a change every pass).
pub const RESHAPE_TO_PERCENT: u64 = 50;

/// The shape of a request's history: the earliest run it holds, and the newest run shown
/// with its tool outputs as placeholders (those up to it are; later runs are whole).
/// `None`s: no run, none compacted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Shape {
    pub from_run: Option<i64>,
    pub compacted_through: Option<i64>,
}

/// The pinned state block as the model reads it, its heading first: the text of the user
/// message the assembler puts right before this run's messages.
pub fn state_text(block: &str) -> String {
    format!("{STATE_HEADING}\n{}", block.trim_end())
}

/// The parts every request has.
pub struct Fixed<'a> {
    /// The system prompt: nothing in it may change from pass to pass (a chat template puts
    /// the tools inside or right after it, ahead of the history).
    pub system: &'a str,
    pub system_tokens: u64,
    pub tools_tokens: u64,
    /// The pinned state block ([`state_text`]), sent as a user message right before this
    /// run's messages; never compacted.
    pub state: &'a str,
    pub state_tokens: u64,
    /// This run's messages so far (operator messages, observation, earlier rounds).
    pub current: &'a [Stored],
    /// Token count of one synthesized [`INTERRUPTED_RESULT`] tool message, without its id.
    pub interrupted_tokens: u64,
    /// The previous request's history (`llm_calls`): older runs than its start are not read
    /// again, and it is kept while it fits. `Shape::default()`: as far back as the budget
    /// reaches, every run whole while all fit.
    pub history: Shape,
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
    /// The history no longer fitted as it was and was reshaped ([`RESHAPE_TO_PERCENT`]).
    pub reshaped: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Assembled {
    pub messages: Vec<ChatMessage>,
    /// Estimated prompt tokens: messages, primer and tools.
    pub tokens: u64,
    pub stats: Stats,
    /// The index of the state block: the messages before it (the system prompt and the
    /// history) are the part that stays the same from request to request while nothing in
    /// them changed; it and everything after it are this pass's.
    pub per_pass_from: usize,
    /// The history's shape, for the next request.
    pub history: Shape,
    /// The newest of this run's stored messages in the prompt (0: none).
    pub current_upto: i64,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ContextError {
    #[error(
        "the minimal prompt needs {needed} tokens but llm.context_budget_tokens leaves {budget} for the prompt \
         after its margin and llm.max_output_tokens (system {system}, pinned state {state}, tools {tools}, \
         this run {current}); raise the budget, lower max_output_tokens, or shorten the largest part"
    )]
    TooSmall {
        needed: u64,
        budget: u64,
        system: u64,
        state: u64,
        tools: u64,
        current: u64,
    },
    #[error("history: {0}")]
    Source(String),
}

/// How many unanswered operator messages are reserved at most.
const MAX_UNANSWERED: usize = 20;

/// One earlier run as the ladder weighs it: its messages whole and with tool outputs as
/// placeholders, and what each costs.
struct Weighed {
    run_id: i64,
    full: Vec<Stored>,
    compacted: Vec<Stored>,
    full_cost: u64,
    compacted_cost: u64,
}

/// Assemble the prompt within `budget` tokens (the margin is already taken off).
pub fn assemble(
    fixed: &Fixed<'_>,
    source: &mut dyn HistorySource,
    budget: u64,
) -> Result<Assembled, ContextError> {
    let mut stats = Stats::default();
    let mut current = repair(fixed.current, fixed.interrupted_tokens, &mut stats);
    let base = REPLY_PRIMER_TOKENS + fixed.system_tokens + fixed.tools_tokens + fixed.state_tokens;
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
            system: fixed.system_tokens,
            state: fixed.state_tokens,
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

    let (runs, history) = earlier_runs(fixed, source, &kept_ids, left, &mut stats)?;
    for run in runs {
        let whole = history.compacted_through.is_none_or(|c| run.run_id > c);
        if whole || run.full_cost == run.compacted_cost {
            stats.runs_full += 1;
        } else {
            stats.runs_compacted += 1;
        }
        kept.extend(if whole { run.full } else { run.compacted });
    }

    // Chronological order; a run's block stays contiguous because ids grow within it and
    // reserved operator messages stand alone.
    kept.sort_by_key(|m| m.id);
    let mut messages = Vec::with_capacity(kept.len() + current.len() + 2);
    messages.push(ChatMessage {
        role: Role::System,
        content: fixed.system.to_string(),
        tool_calls: Vec::new(),
        tool_call_id: None,
    });
    let mut tokens = base;
    for m in &kept {
        tokens += m.tokens;
        messages.push(to_chat(m));
    }
    let per_pass_from = messages.len();
    messages.push(ChatMessage {
        role: Role::User,
        content: fixed.state.to_string(),
        tool_calls: Vec::new(),
        tool_call_id: None,
    });
    for m in &current {
        tokens += m.tokens;
        messages.push(to_chat(m));
    }
    Ok(Assembled {
        messages,
        tokens,
        stats,
        per_pass_from,
        history,
        current_upto: fixed.current.iter().map(|m| m.id).max().unwrap_or(0),
    })
}

/// The earlier runs the history holds, newest first, and its shape. Runs are read back to
/// the previous shape's start, or until even their placeholders overflow `left`. Kept as
/// they were (runs up to `compacted_through` as placeholders, the rest whole) when that
/// fits; else reshaped: the newest runs whose placeholders fill at most
/// [`RESHAPE_TO_PERCENT`] of `left` (at least the newest, when it fits), whole outputs back
/// newest first while they stay within that share.
fn earlier_runs(
    fixed: &Fixed<'_>,
    source: &mut dyn HistorySource,
    kept_ids: &BTreeSet<i64>,
    left: u64,
    stats: &mut Stats,
) -> Result<(Vec<Weighed>, Shape), ContextError> {
    let mut runs: Vec<Weighed> = Vec::new();
    let mut placeholders = 0;
    let mut overflow = false;
    while let Some(run) = source
        .next_older()
        .map_err(|e| ContextError::Source(format!("{e:#}")))?
    {
        if fixed.history.from_run.is_some_and(|from| run.run_id < from) {
            break;
        }
        stats.runs_read += 1;
        let msgs: Vec<Stored> = run
            .messages
            .into_iter()
            .filter(|m| !kept_ids.contains(&m.id))
            .collect();
        let full = repair(&msgs, fixed.interrupted_tokens, stats);
        if full.is_empty() {
            continue;
        }
        let compacted: Vec<Stored> = full.iter().map(compact).collect();
        let weighed = Weighed {
            run_id: run.run_id,
            full_cost: full.iter().map(|m| m.tokens).sum(),
            compacted_cost: compacted.iter().map(|m| m.tokens).sum(),
            full,
            compacted,
        };
        if placeholders + weighed.compacted_cost > left {
            overflow = true;
            break;
        }
        placeholders += weighed.compacted_cost;
        runs.push(weighed);
    }
    let through = fixed.history.compacted_through;
    let as_it_was: u64 = runs
        .iter()
        .map(|r| match through {
            Some(c) if r.run_id <= c => r.compacted_cost,
            _ => r.full_cost,
        })
        .sum();
    if !overflow && as_it_was <= left {
        let shape = Shape {
            from_run: runs.last().map(|r| r.run_id),
            compacted_through: through.filter(|_| !runs.is_empty()),
        };
        return Ok((runs, shape));
    }
    let share = left * RESHAPE_TO_PERCENT / 100;
    let mut sum = 0;
    let keep = runs
        .iter()
        .take_while(|r| {
            sum += r.compacted_cost;
            sum <= share
        })
        .count();
    runs.truncate(keep.max(runs.len().min(1)));
    let mut room = share.saturating_sub(runs.iter().map(|r| r.compacted_cost).sum());
    let mut compacted_through = None;
    for r in &runs {
        let extra = r.full_cost - r.compacted_cost;
        if extra > room {
            compacted_through = Some(r.run_id);
            break;
        }
        room -= extra;
    }
    let shape = Shape {
        from_run: runs.last().map(|r| r.run_id),
        compacted_through,
    };
    // The same shape again (nothing fitted, before or now) changes nothing.
    stats.reshaped = shape != fixed.history;
    Ok((runs, shape))
}

/// The previous round's prompt of this pass with this run's messages stored since appended,
/// when it still fits `budget`: the server then reuses the whole earlier prompt. `None` when
/// it does not fit (assemble again).
pub fn extend(
    previous: &Assembled,
    current: &[Stored],
    interrupted_tokens: u64,
    budget: u64,
) -> Option<Assembled> {
    let newer: Vec<Stored> = current
        .iter()
        .filter(|m| m.id > previous.current_upto)
        .cloned()
        .collect();
    let mut stats = previous.stats.clone();
    let newer = repair(&newer, interrupted_tokens, &mut stats);
    let tokens = previous.tokens + newer.iter().map(|m| m.tokens).sum::<u64>();
    if tokens > budget {
        return None;
    }
    let mut messages = previous.messages.clone();
    messages.extend(newer.iter().map(to_chat));
    Some(Assembled {
        messages,
        tokens,
        stats,
        per_pass_from: previous.per_pass_from,
        history: previous.history,
        current_upto: current
            .iter()
            .map(|m| m.id)
            .max()
            .unwrap_or(0)
            .max(previous.current_upto),
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
mod tests;
