//! The decision step of a pass: the LLM tool loop (prompt assembled within budget and
//! validated before every request, every message persisted as it happens, tool calls run
//! through the registry and its guardrails), and the rules when the model is not used.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use serde_json::json;

use crate::clock::Millis;
use crate::config::Config;
use crate::fleet::Snapshot;
use crate::llm::{ChatMessage, ChatRequest, LlmClient, Role};
use crate::policy::turns;
use crate::prompt::answer::{self, stored_calls, MAX_CALLS_PER_ANSWER};
use crate::prompt::context::{self, Fixed};
use crate::prompt::{effective_budget, state, SYSTEM_PROMPT};
use crate::store::history::{to_stored, DbHistory, Stored};
use crate::store::{actions, llm_calls, messages, wakes, Store};
use crate::tokens::Tokenizer;
use crate::tools::{Actor, Registry, ToolCtx, ToolResult};

/// Where a message goes and what it is.
pub struct Place {
    pub session_id: i64,
    pub run_id: i64,
}

/// What a tool result's row keeps beside its content: the tool's name, the gist its
/// placeholder shows once compacted, and the result's error code (`messages.error_code`).
#[derive(Debug, Clone, Copy)]
pub struct ToolOutput<'a> {
    pub name: &'a str,
    pub gist: &'a str,
    pub error_code: Option<&'a str>,
}

/// Insert one message with its token count (and, for tool results, the compacted
/// placeholder and its count), computed once here. An assistant turn's calls are stored in
/// the form that can be sent again (`prompt::answer::stored_calls`).
#[allow(clippy::too_many_arguments)]
pub fn insert_message(
    conn: &rusqlite::Connection,
    tk: &Tokenizer,
    place: &Place,
    msg: &ChatMessage,
    kind: &str,
    tool: Option<&ToolOutput<'_>>,
    event_id: Option<i64>,
    now: Millis,
) -> Result<i64> {
    // An assistant turn's calls are stored as they can be sent again (`answer::stored_calls`),
    // counted as stored, with what the model sent kept beside them for `history`.
    let stored;
    let (msg, calls_json) = if msg.tool_calls.is_empty() {
        (msg, None)
    } else {
        stored = ChatMessage {
            tool_calls: stored_calls(&msg.tool_calls),
            ..msg.clone()
        };
        (&stored, Some(answer::stored_calls_json(&msg.tool_calls)))
    };
    let tokens = tk.count_message(msg) as i64;
    let placeholder =
        tool.map(|t| format!("[compacted] {}: {}", t.name, crate::text::clip(t.gist, 160)));
    let gist_tokens = placeholder.as_ref().map(|p| {
        tk.count_message(&ChatMessage {
            role: msg.role,
            content: p.clone(),
            tool_calls: Vec::new(),
            tool_call_id: msg.tool_call_id.clone(),
        }) as i64
    });
    messages::insert(
        conn,
        &messages::NewMessage {
            session_id: place.session_id,
            run_id: Some(place.run_id),
            role: msg.role.as_str(),
            kind,
            content: &msg.content,
            tokens,
            tool_calls: calls_json.as_deref(),
            tool_call_id: msg.tool_call_id.as_deref(),
            tool_name: tool.map(|t| t.name),
            gist: placeholder.as_deref(),
            gist_tokens,
            event_id,
            error_code: tool.and_then(|t| t.error_code),
        },
        now,
    )
}

pub fn user(content: String) -> ChatMessage {
    ChatMessage {
        role: Role::User,
        content,
        tool_calls: Vec::new(),
        tool_call_id: None,
    }
}

/// What the LLM loop did.
#[derive(Debug, Clone, Default)]
pub struct LlmOutcome {
    pub mutated: bool,
    pub calls: i64,
    pub max_prompt_est: i64,
    pub max_prompt_reported: Option<i64>,
    pub completion_tokens: i64,
    /// Answers cut at `max_tokens`, with a tool call written as text, or empty (a note saying
    /// which follows the stored answer; `prompt::answer::read`).
    pub malformed_answers: i64,
    /// The model's tool calls answered `invalid_args` or `unknown_tool` (arguments that are
    /// not a JSON object, of the wrong shape, or no such tool).
    pub invalid_calls: i64,
    /// The model's tool calls not run: the pass's deadline left only its reserve.
    pub late_calls: i64,
}

/// The model could not be used this pass.
#[derive(Debug, Clone)]
pub struct LlmFailure {
    pub message: String,
    pub outcome: LlmOutcome,
}

pub struct LoopEnv<'a> {
    pub ctx: crate::services::Ctx<'a>,
    pub session_id: i64,
    pub run_id: i64,
    pub tk: &'a Tokenizer,
    /// The process's deadline (Unix ms): no model turn is started or waited for past what
    /// it leaves, less `policy::turns::deadline_reserve` for the fallback rules and the end of the run.
    pub deadline: crate::clock::Millis,
}

crate::deref_ctx!(LoopEnv);

/// Ask the model (through [`llm_loop`]) when a client exists; without one the model is
/// unusable this pass.
pub fn ask(
    store: &mut Store,
    le: &LoopEnv<'_>,
    registry: &Registry,
    snapshot: &mut Snapshot,
) -> Result<std::result::Result<LlmOutcome, LlmFailure>> {
    match &le.services.llm {
        Some(llm) => llm_loop(store, le, llm.as_ref(), registry, snapshot),
        None => Ok(Err(LlmFailure {
            message: "no LLM client (provider openai without a usable configuration)".into(),
            outcome: Default::default(),
        })),
    }
}

/// The tool loop: assemble, validate, ask, persist, execute, up to `max_tool_rounds`.
/// `Ok(Err(failure))` when the model is unusable (the caller falls back or fails the pass);
/// `Err` for database failures.
pub fn llm_loop(
    store: &mut Store,
    le: &LoopEnv<'_>,
    llm: &dyn LlmClient,
    registry: &Registry,
    snapshot: &mut Snapshot,
) -> Result<std::result::Result<LlmOutcome, LlmFailure>> {
    let config = le.config;
    let full_budget = effective_budget(config);
    // The model's tokenizer may count more than ours: the budget is divided by its ratio.
    let mut ratio = crate::store::calibration::ratio(&store.conn, &config.llm.model)?;
    let tools = registry.specs();
    let tool_names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    let tools_tokens = le.tk.count_tools(&tools);
    let interrupted_tokens = le.tk.count_message(&ChatMessage {
        role: Role::Tool,
        content: context::INTERRUPTED_RESULT.into(),
        tool_calls: Vec::new(),
        tool_call_id: None,
    });
    let now = le.clock.now_ms();
    let intents = actions::open_intents(&store.conn)?;
    let pending_wakes = wakes::list(&store.conn, false, state::PINNED_WAKES as i64)?;
    let recent_actions = actions::recent(&store.conn, state::PINNED_ACTIONS as i64)?;
    let pinned = state::Pinned {
        intents: &intents,
        pending_wakes: &pending_wakes,
        recent_actions: &recent_actions,
    };
    // The system prompt is the same every pass and the state block follows the history, so
    // the system prompt, the tools and the history are a prefix the server's prompt cache
    // can reuse from one request to the next (`prompt::context`).
    let system = SYSTEM_PROMPT.trim_end();
    let system_tokens = le.tk.count_message(&ChatMessage {
        role: Role::System,
        content: system.to_string(),
        tool_calls: Vec::new(),
        tool_call_id: None,
    });
    let state_block = context::state_text(&state::pinned_state(&pinned, snapshot, config, now));
    let state_tokens = le.tk.count_message(&user(state_block.clone()));
    let place = Place {
        session_id: le.session_id,
        run_id: le.run_id,
    };
    let mut out = LlmOutcome::default();
    // The first few invalid calls, named for the journal.
    let mut invalid: Vec<String> = Vec::new();
    // The previous round's prompt: a later round appends to it while it fits.
    let mut previous: Option<context::Assembled> = None;
    // Whether a call written as text was asked again (once a pass).
    let mut reasked = false;
    // Whether an earlier round of this pass made tool calls: an empty answer after them is
    // the model's "done" (small local models close so), not an answer that ran nothing.
    let mut called = false;
    for round in 1..=config.llm.max_tool_rounds {
        let Some(left_ms) = turns::turn_budget(config, le.deadline, le.clock.now_ms()) else {
            let message = format!(
                "the run's deadline (run.deadline_secs = {}) leaves no time for model turn {round}",
                config.run.deadline_secs
            );
            if out.calls == 0 {
                // Nothing asked yet: the model is unusable this pass; the fallback decides.
                return Ok(Err(LlmFailure {
                    message,
                    outcome: out,
                }));
            }
            // The pass's tool calls ran and are stored; the model's last word is missing.
            log::warn!("run {}: {message}; ending the tool loop", le.run_id);
            break;
        };
        let current: Vec<Stored> = messages::of_run(&store.conn, le.run_id)?
            .iter()
            .map(to_stored)
            .collect();
        let mut budget = crate::prompt::calibration::calibrated_budget(full_budget, ratio);
        let extended = previous
            .as_ref()
            .and_then(|p| context::extend(p, &current, interrupted_tokens, budget));
        let mut assembled = match extended {
            Some(a) => a,
            None => {
                let fixed = Fixed {
                    system,
                    system_tokens,
                    tools_tokens,
                    state: &state_block,
                    state_tokens,
                    current: &current,
                    interrupted_tokens,
                    history: {
                        let (from_run, compacted_through) = llm_calls::last_history(&store.conn)?;
                        context::Shape {
                            from_run,
                            compacted_through,
                        }
                    },
                };
                let mut source = DbHistory::new(&store.conn, le.session_id, le.run_id);
                let mut attempt = context::assemble(&fixed, &mut source, budget);
                if matches!(attempt, Err(context::ContextError::TooSmall { .. })) {
                    if let Some(r) = lower_inferred_ratio(&store.conn, config, ratio, le)? {
                        ratio = Some(r);
                        budget = crate::prompt::calibration::calibrated_budget(full_budget, ratio);
                        let mut source = DbHistory::new(&store.conn, le.session_id, le.run_id);
                        attempt = context::assemble(&fixed, &mut source, budget);
                    }
                }
                match attempt {
                    Ok(a) => a,
                    Err(context::ContextError::Source(e)) => {
                        anyhow::bail!("reading history: {e}")
                    }
                    Err(e) => {
                        return Ok(Err(LlmFailure {
                            message: e.to_string(),
                            outcome: out,
                        }))
                    }
                }
            }
        };
        // Answers stored before their arguments were made replayable are fixed on the way
        // out (the recount below sees the replacement).
        let replaced = answer::make_replayable(&mut assembled.messages);
        if replaced > 0 {
            log::info!(
                "run {}: {replaced} stored tool call(s) with arguments that are not a JSON object replayed as one",
                le.run_id
            );
        }
        let request = ChatRequest {
            model: config.llm.model.clone(),
            messages: assembled.messages.clone(),
            tools: tools.clone(),
            max_tokens: Some(config.llm.max_output_tokens),
            budget: Some(Duration::from_millis(left_ms as u64)),
        };
        // The last check before sending: recount the whole request with the tokenizer
        // (stored counts could come from another encoding) and check the sequence.
        let recount = le.tk.count_request(&request);
        let estimate = recount.max(assembled.tokens);
        if let Err(e) = context::validate(&request.messages, estimate, budget) {
            return Ok(Err(LlmFailure {
                message: format!("prompt failed validation, not sent: {e}"),
                outcome: out,
            }));
        }
        log::debug!(
            "run {} round {round}: {} messages, ~{estimate} tokens, this pass's part from message {} ({:?})",
            le.run_id,
            request.messages.len(),
            assembled.per_pass_from,
            assembled.stats
        );
        let history = assembled.history;
        previous = Some(assembled);
        let started = Instant::now();
        let answer = llm.chat(&request);
        let latency = started.elapsed().as_millis() as i64;
        // Without a usable key nothing was sent: not a call.
        use crate::llm::LlmError;
        if !matches!(answer, Err(LlmError::NoKey | LlmError::BadKey)) {
            out.calls += 1;
        }
        out.max_prompt_est = out.max_prompt_est.max(estimate as i64);
        let at = le.clock.now_ms();
        // The request as sent; the answer (or the error) completes the row.
        let sent = llm_calls::Call {
            run_id: le.run_id,
            at,
            round,
            messages: request.messages.len(),
            estimate,
            tools_estimate: tools_tokens,
            history_from_run: history.from_run,
            history_compacted_through_run: history.compacted_through,
            latency_ms: latency,
            ..Default::default()
        };
        let response = match answer {
            Ok(r) => r,
            Err(e) => {
                // One line: a server's message may carry a traceback or a pasted upstream body,
                // which split the journal's warning into entries of their own.
                let error = crate::secrets::redact::one_line(&e.to_string());
                llm_calls::insert(
                    &store.conn,
                    &llm_calls::Call {
                        error: Some(&error),
                        ..sent
                    },
                )?;
                let refused = crate::prompt::calibration::overflow_sample(
                    &e,
                    effective_budget(config),
                    estimate,
                    ratio,
                );
                if let Some(s) = refused {
                    calibrate(&store.conn, config, s, at)?;
                }
                return Ok(Err(LlmFailure {
                    message: error,
                    outcome: out,
                }));
            }
        };
        if response.attempts > 1 {
            // Recovered, but slow or failing: the step before the fallback decides a pass.
            log::warn!(
                "run {}: the LLM answered on attempt {} after {:.1}s (timeouts or server errors before it; llm.retry_budget_secs = {} bounds them, then the fallback decides)",
                le.run_id,
                response.attempts,
                latency as f64 / 1000.0,
                le.config.llm.retry_budget_secs
            );
        }
        let reported = response.usage.map(|u| u.prompt_tokens as i64);
        if let Some(r) = reported {
            out.max_prompt_reported = Some(out.max_prompt_reported.unwrap_or(0).max(r));
        }
        out.completion_tokens += response
            .usage
            .map(|u| u.completion_tokens as i64)
            .unwrap_or(0);
        if let Some(s) =
            reported.and_then(|r| crate::prompt::calibration::sample(r as u64, estimate))
        {
            ratio = Some(calibrate(&store.conn, config, s, at)?);
        } else if let Some(r) =
            reported.filter(|r| crate::prompt::calibration::impossible(*r as u64, estimate))
        {
            log::warn!(
                "run {}: the LLM server reported {r} prompt tokens for a request we count at {estimate}: over {}x, not a count of this prompt; left out of the token calibration",
                le.run_id,
                crate::prompt::calibration::MAX_RATIO
            );
        }
        let answer::Read {
            content,
            calls,
            dropped,
            cut,
            as_text,
            malformed,
            note,
        } = answer::read(
            &response,
            &request.messages,
            round,
            &tool_names,
            config.llm.max_output_tokens,
        );
        // No text and no tool call: nothing ran and nothing was said (it was stored nowhere,
        // and an operator's message read "no answer yet" for ever).
        let empty = !called && calls.is_empty() && content.trim().is_empty() && !malformed;
        let unusable = match (cut, as_text, empty) {
            (true, _, _) => Some("cut"),
            (_, true, _) => Some("as_text"),
            (_, _, true) => Some("empty"),
            _ => None,
        };
        llm_calls::insert(
            &store.conn,
            &llm_calls::Call {
                usage: response
                    .usage
                    .map(|u| (u.prompt_tokens as i64, u.completion_tokens as i64)),
                cached: response
                    .usage
                    .and_then(|u| u.cached_tokens)
                    .map(|c| c as i64),
                attempts: response.attempts,
                unusable,
                ..sent
            },
        )?;
        if malformed {
            out.malformed_answers += 1;
            log::warn!(
                "run {} round {round}: malformed answer ({})",
                le.run_id,
                match (cut, as_text) {
                    (true, true) => "cut at max_output_tokens, a tool call written as text",
                    (true, false) => "cut at max_output_tokens",
                    _ => "a tool call written as text",
                }
            );
        }
        if empty {
            out.malformed_answers += 1;
            log::warn!(
                "run {} round {round}: the model's answer was empty (no text, no tool call): nothing ran",
                le.run_id
            );
        }
        // The model's turn is stored as it was; what must be said about it follows it in a
        // message of its own, after the results of its calls (small models copy what their
        // own turns say).
        let note_message = |conn: &rusqlite::Connection, note: String, at: Millis| {
            insert_message(conn, le.tk, &place, &user(note), "note", None, None, at)
        };
        if calls.is_empty() {
            if !content.trim().is_empty() {
                insert_message(
                    &store.conn,
                    le.tk,
                    &place,
                    &ChatMessage {
                        role: Role::Assistant,
                        content,
                        tool_calls: Vec::new(),
                        tool_call_id: None,
                    },
                    "answer",
                    None,
                    None,
                    at,
                )?;
            }
            if let Some(note) = note {
                note_message(&store.conn, note, at)?;
            } else if empty {
                let note = crate::store::messages::EMPTY_ANSWER_NOTE.to_string();
                note_message(&store.conn, note, at)?;
            }
            // A call written as text ran nothing: asked once more in this pass, the note
            // after it, while a round is left (it ended the pass, and the model read the
            // note only next pass, after the floor had acted: the prompt walkthrough).
            // Only with time for a turn as long as this one, twice over (a re-ask that timed
            // out made the pass read as the model unusable: the re-test).
            let time_for_it = turns::turn_budget(config, le.deadline, le.clock.now_ms())
                .is_some_and(|left| left >= 2 * latency);
            if as_text && !reasked && round < config.llm.max_tool_rounds && time_for_it {
                reasked = true;
                continue;
            }
            break;
        }
        insert_message(
            &store.conn,
            le.tk,
            &place,
            &ChatMessage {
                role: Role::Assistant,
                content,
                tool_calls: calls.clone(),
                tool_call_id: None,
            },
            "tool_call",
            None,
            None,
            at,
        )?;
        called = true;
        for (i, call) in calls.iter().enumerate() {
            crate::faults::point("tool-before-result")?;
            let mut result = if turns::call_allowed(config, le.deadline, le.clock.now_ms()) {
                run_tool(
                    store,
                    le,
                    registry,
                    snapshot,
                    Actor::Llm,
                    &call.id,
                    &call.name,
                    &call.arguments,
                )?
            } else {
                out.late_calls += 1;
                late_call(config, le)
            };
            out.mutated |= result.mutated;
            if answer::invalid_call(result.error_code()) {
                out.invalid_calls += 1;
                if invalid.len() < 5 {
                    invalid.push(format!(
                        "{} ({})",
                        crate::text::clip(&call.name, 60),
                        result.error_code().unwrap_or("?")
                    ));
                }
            }
            // The stored call shows `{}` for arguments it could not keep: its result says so.
            if let (Some(n), Some(obj)) = (
                answer::arguments_note(&call.arguments),
                result.content.as_object_mut(),
            ) {
                obj.entry("note").or_insert(json!(n));
            }
            if dropped > 0 && i + 1 == calls.len() {
                if let Some(obj) = result.content.as_object_mut() {
                    obj.insert(
                        "dropped_calls".into(),
                        json!(format!(
                            "your answer had {} tool calls; only the first {MAX_CALLS_PER_ANSWER} were run, the other {dropped} were ignored",
                            dropped + MAX_CALLS_PER_ANSWER
                        )),
                    );
                }
            }
            let text = serde_json::to_string(&result.content)?;
            insert_message(
                &store.conn,
                le.tk,
                &place,
                &ChatMessage {
                    role: Role::Tool,
                    content: text,
                    tool_calls: Vec::new(),
                    tool_call_id: Some(call.id.clone()),
                },
                "tool_result",
                Some(&ToolOutput {
                    name: &crate::text::clip(&call.name, 64),
                    gist: &result.gist,
                    error_code: result.error_code(),
                }),
                None,
                le.clock.now_ms(),
            )?;
            crate::faults::point("tool-after-result")?;
        }
        if let Some(note) = note {
            note_message(&store.conn, note, le.clock.now_ms())?;
        }
    }
    if out.late_calls > 0 {
        log::warn!(
            target: crate::journal::NOTICE,
            "run {}: {} tool call(s) of the model not run: the pass's deadline (run.deadline_secs = {}) left only its reserve for the floor and the end of the run; the model hears so and may ask again next pass",
            le.run_id,
            out.late_calls,
            config.run.deadline_secs
        );
    }
    if out.malformed_answers > 0 || out.invalid_calls > 0 {
        // The journal's warning: the model asked for something that was not done.
        log::warn!(
            target: crate::journal::NOTICE,
            "run {}: the model's answers were unusable in part: {} malformed answer(s), {} invalid call(s){}; nothing was done for them",
            le.run_id,
            out.malformed_answers,
            out.invalid_calls,
            if invalid.is_empty() {
                String::new()
            } else {
                // At most five are named: the rest counted, never silently left out.
                let more = (out.invalid_calls as usize).saturating_sub(invalid.len());
                format!(
                    ": {}{}",
                    crate::output::terminal_safe(&invalid.join(", ")),
                    if more > 0 {
                        format!(" and {more} more")
                    } else {
                        String::new()
                    }
                )
            }
        );
    }
    Ok(Ok(out))
}

/// A model's call the deadline leaves no time for: not run, and said to the model as a rate
/// limit of time (ask again next pass).
fn late_call(config: &Config, le: &LoopEnv<'_>) -> ToolResult {
    let left = (le.deadline - le.clock.now_ms()).max(0) / 1000;
    ToolResult::error(
        "rate_limited",
        json!({
            "limit": format!("run.deadline_secs = {}", config.run.deadline_secs),
            "message": format!("not run: the pass's deadline is {left}s away, kept for the floor and the end of the run; ask again next pass"),
            "retry_after_secs": config.run.timer_period_secs,
        }),
    )
}

/// The stored ratio leaves no room for the minimal prompt, and it is above what the
/// provider's own counts say (the newest calls that reported usage): refusals of over-long
/// prompts raised it while the budget was above the server's context, and with no call sent
/// no report could ever bring it down, even after the operator lowered the budget. It goes
/// back to what the reports say (1.0 with none), said in the journal; the new ratio, or None
/// when it was no higher than that.
fn lower_inferred_ratio(
    conn: &rusqlite::Connection,
    config: &Config,
    ratio: Option<f64>,
    le: &LoopEnv<'_>,
) -> Result<Option<f64>> {
    let Some(stored) = ratio else {
        return Ok(None);
    };
    let measured = crate::store::calibration::measured(conn, REPORTED_CALLS)?;
    let reported = crate::prompt::calibration::fold(None, measured.max_ratio.unwrap_or(1.0));
    if reported >= stored - 1e-9 {
        return Ok(None);
    }
    crate::store::calibration::record(conn, &config.llm.model, reported, le.clock.now_ms())?;
    let from = match measured.calls {
        0 => "no call has reported usage yet: the margin alone".to_string(),
        n => format!("what the provider's counts over {n} call(s) say"),
    };
    log::warn!(
        "run {}: the token calibration of {} ({stored:.2}, raised by the server's refusals of over-long prompts) left no room for the minimal prompt under llm.context_budget_tokens = {}: set back to {reported:.2} ({from})",
        le.run_id,
        crate::output::terminal_safe(&config.llm.model),
        config.llm.context_budget_tokens,
    );
    Ok(Some(reported))
}

/// How many of the newest calls that reported usage [`lower_inferred_ratio`] reads.
const REPORTED_CALLS: i64 = 50;

/// Fold one sample (reported over estimated prompt tokens, or the bound a refusal for an
/// over-long prompt gives) into the model's stored ratio; the new ratio.
fn calibrate(conn: &rusqlite::Connection, config: &Config, sample: f64, at: Millis) -> Result<f64> {
    let model = &config.llm.model;
    let ratio =
        crate::prompt::calibration::fold(crate::store::calibration::ratio(conn, model)?, sample);
    crate::store::calibration::record(conn, model, ratio, at)?;
    Ok(ratio)
}

/// Run one tool call through the registry with a context for this pass.
#[allow(clippy::too_many_arguments)]
pub fn run_tool(
    store: &mut Store,
    le: &LoopEnv<'_>,
    registry: &Registry,
    snapshot: &mut Snapshot,
    actor: Actor,
    call_id: &str,
    name: &str,
    arguments: &str,
) -> Result<ToolResult> {
    let mut ctx = ToolCtx {
        store,
        ctx: le.ctx,
        snapshot,
        run_id: le.run_id,
        actor,
        call_id: call_id.to_string(),
    };
    registry
        .call(&mut ctx, name, arguments)
        .with_context(|| format!("tool {name}"))
}
