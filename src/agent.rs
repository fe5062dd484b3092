//! The decision step of a pass: the LLM tool loop (prompt assembled within budget and
//! validated before every request, every message persisted as it happens, tool calls run
//! through the registry and its guardrails), and the rules when the model is not used.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use serde_json::json;

use crate::clock::{rfc3339, Millis};
use crate::config::Config;
use crate::context::{self, Fixed, Stored};
use crate::fleet::Snapshot;
use crate::llm::{ChatMessage, ChatRequest, LlmClient, Role, ToolCall};
use crate::store::history::{to_stored, DbHistory};
use crate::store::{actions, messages, wakes, Store};
use crate::tokens::Tokenizer;
use crate::tools::{Actor, Registry, ToolCtx, ToolResult};

/// The system prompt, a file in the repository.
pub const SYSTEM_PROMPT: &str = include_str!("../prompts/system.md");

/// Share of `context_budget_tokens` kept free for the gap between our estimate and the
/// provider's tokenizer (servers such as vLLM or Ollama count with their own).
pub const BUDGET_MARGIN_PERCENT: u64 = 5;

/// The budget the assembler works to: the configured one minus the safety margin.
pub fn effective_budget(config: &Config) -> u64 {
    let b = config.llm.context_budget_tokens;
    b - b * BUDGET_MARGIN_PERCENT / 100
}

pub fn tokenizer(config: &Config) -> Result<Tokenizer> {
    Tokenizer::for_model(&config.llm.model, config.llm.encoding.as_deref())
        .map_err(|e| anyhow::anyhow!("llm.encoding: {e}"))
}

/// Where a message goes and what it is.
pub struct Place {
    pub session_id: i64,
    pub run_id: i64,
}

/// Insert one message with its token count (and, for tool results, the compacted
/// placeholder and its count), computed once here.
#[allow(clippy::too_many_arguments)]
pub fn insert_message(
    conn: &rusqlite::Connection,
    tk: &Tokenizer,
    place: &Place,
    msg: &ChatMessage,
    kind: &str,
    tool_name: Option<&str>,
    gist: Option<&str>,
    event_id: Option<i64>,
    now: Millis,
) -> Result<i64> {
    let tokens = tk.count_message(msg) as i64;
    let calls_json = if msg.tool_calls.is_empty() {
        None
    } else {
        Some(serde_json::to_string(&msg.tool_calls)?)
    };
    let placeholder = gist.map(|g| {
        format!(
            "[compacted] {}: {}",
            tool_name.unwrap_or("tool"),
            crate::observation::clip(g, 160)
        )
    });
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
            tool_name,
            gist: placeholder.as_deref(),
            gist_tokens,
            event_id,
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

/// The pinned state block, rebuilt from the database every pass so a compacted history can
/// never make the agent forget an instance, a launch in flight or a wake.
pub fn pinned_state(
    store: &Store,
    snapshot: &Snapshot,
    config: &Config,
    now: Millis,
) -> Result<String> {
    let mut out = String::new();
    let mut line = |s: String| {
        out.push_str(&s);
        out.push('\n');
    };
    line(format!("Time: {} UTC.", rfc3339(now)));
    if snapshot.instances.is_empty() {
        line("Our instances: none.".into());
    } else {
        line(format!("Our instances ({}):", snapshot.instances.len()));
        for i in snapshot.instances.iter().take(40) {
            line(format!(
                "- {} id={} state={} vast_status={} gpu={} ${:.3}/h since {}{}",
                i.label,
                i.vast_id
                    .map(|v| v.to_string())
                    .unwrap_or_else(|| "-".into()),
                i.state,
                i.actual_status.as_deref().unwrap_or("null"),
                i.gpu_name.as_deref().unwrap_or("?"),
                i.dph.unwrap_or(0.0),
                rfc3339(i.state_since),
                i.status_msg
                    .as_deref()
                    .map(|m| format!(" msg={}", crate::observation::quote(m, 80)))
                    .unwrap_or_default()
            ));
        }
    }
    let intents = actions::open_intents(&store.conn)?;
    if !intents.is_empty() {
        line(format!(
            "Launches in flight (recorded, not yet seen on vast.ai): {}.",
            intents
                .iter()
                .map(|a| a.label.clone().unwrap_or_default())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let pending = wakes::list(&store.conn, false, 10)?;
    if pending.is_empty() {
        line("Pending wakes: none.".into());
    } else {
        line(format!(
            "Pending wakes: {}.",
            pending
                .iter()
                .map(|w| format!(
                    "#{} at {} {}",
                    w.id,
                    rfc3339(w.due_at),
                    crate::observation::quote(&w.reason, 80)
                ))
                .collect::<Vec<_>>()
                .join("; ")
        ));
    }
    let p = &config.policy;
    line(format!(
        "Money: fleet ${:.2}/h; caps: max_dph_total={}, max_instances={}, daily_spend_max={}.",
        snapshot.fleet_dph(),
        p.max_dph_total
            .map(|v| format!("${v:.2}/h"))
            .unwrap_or_else(|| "UNSET (no launch possible)".into()),
        p.max_instances
            .map(|v| v.to_string())
            .unwrap_or_else(|| "UNSET (no launch possible)".into()),
        p.daily_spend_max
            .map(|v| format!("${v:.2}"))
            .unwrap_or_else(|| "none".into()),
    ));
    let recent = actions::recent(&store.conn, 8)?;
    if !recent.is_empty() {
        line("Recent actions (newest first):".into());
        for a in recent {
            line(format!(
                "- {} {} {} {}{} by {}{}",
                rfc3339(a.created_at),
                a.kind,
                a.outcome,
                a.label.as_deref().unwrap_or(""),
                a.instance_id
                    .map(|i| format!(" (id {i})"))
                    .unwrap_or_default(),
                a.actor,
                a.reason
                    .as_deref()
                    .map(|r| format!(": {}", crate::observation::quote(r, 100)))
                    .unwrap_or_default()
            ));
        }
    }
    Ok(out)
}

/// What the LLM loop did.
#[derive(Debug, Clone, Default)]
pub struct LlmOutcome {
    pub mutated: bool,
    pub calls: i64,
    pub max_prompt_est: i64,
    pub max_prompt_reported: Option<i64>,
    pub completion_tokens: i64,
}

/// The model could not be used this pass.
#[derive(Debug, Clone)]
pub struct LlmFailure {
    pub message: String,
    pub outcome: LlmOutcome,
}

pub struct LoopEnv<'a> {
    pub config: &'a Config,
    pub env: &'a crate::app::Env,
    pub clock: &'a dyn crate::clock::Clock,
    pub services: &'a crate::pass::Services,
    pub session_id: i64,
    pub run_id: i64,
    pub tk: &'a Tokenizer,
    /// The process's deadline (Unix ms): no model turn is started or waited for past what
    /// it leaves, less [`deadline_reserve`] for the fallback rules and the end of the run.
    pub deadline: crate::clock::Millis,
}

/// Time kept back from the run's deadline for what follows the model: the fallback rules'
/// launches (creates are spaced 4.5 s apart) and finishing the run. A fifth of the deadline,
/// between 5 s and 60 s.
pub fn deadline_reserve(config: &Config) -> Duration {
    Duration::from_secs((config.run.deadline_secs / 5).clamp(5, 60))
}

/// Below this, a model turn is not started: no answer could come in time.
const MIN_TURN: Duration = Duration::from_secs(3);

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
    let budget = effective_budget(config);
    let tools = registry.specs();
    let tools_tokens = le.tk.count_tools(&tools);
    let interrupted_tokens = le.tk.count_message(&ChatMessage {
        role: Role::Tool,
        content: context::INTERRUPTED_RESULT.into(),
        tool_calls: Vec::new(),
        tool_call_id: None,
    });
    let now = le.clock.now_ms();
    let system = format!(
        "{}\n\n## Current state (rebuilt from the database this pass)\n{}",
        SYSTEM_PROMPT.trim_end(),
        pinned_state(store, snapshot, config, now)?
    );
    let system_tokens = le.tk.count_message(&ChatMessage {
        role: Role::System,
        content: system.clone(),
        tool_calls: Vec::new(),
        tool_call_id: None,
    });
    let place = Place {
        session_id: le.session_id,
        run_id: le.run_id,
    };
    let mut out = LlmOutcome::default();
    let reserve_ms = deadline_reserve(config).as_millis() as i64;
    for round in 1..=config.llm.max_tool_rounds {
        let left_ms = le.deadline - reserve_ms - le.clock.now_ms();
        if left_ms < MIN_TURN.as_millis() as i64 {
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
        }
        let current: Vec<Stored> = messages::of_run(&store.conn, le.run_id)?
            .iter()
            .map(to_stored)
            .collect();
        let fixed = Fixed {
            system: &system,
            system_tokens,
            tools_tokens,
            current: &current,
            interrupted_tokens,
        };
        let assembled = {
            let mut source = DbHistory::new(&store.conn, le.session_id, le.run_id);
            context::assemble(&fixed, &mut source, budget)
        };
        let assembled = match assembled {
            Ok(a) => a,
            Err(context::ContextError::Source(e)) => anyhow::bail!("reading history: {e}"),
            Err(e) => {
                return Ok(Err(LlmFailure {
                    message: e.to_string(),
                    outcome: out,
                }))
            }
        };
        let request = ChatRequest {
            model: config.llm.model.clone(),
            messages: assembled.messages,
            tools: tools.clone(),
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
            "run {} round {round}: {} messages, ~{estimate} tokens ({:?})",
            le.run_id,
            request.messages.len(),
            assembled.stats
        );
        let started = Instant::now();
        let answer = llm.chat(&request);
        let latency = started.elapsed().as_millis() as i64;
        // Without a key nothing was sent: not a call.
        if !matches!(answer, Err(crate::llm::LlmError::NoKey)) {
            out.calls += 1;
        }
        out.max_prompt_est = out.max_prompt_est.max(estimate as i64);
        let at = le.clock.now_ms();
        let response = match answer {
            Ok(r) => r,
            Err(e) => {
                record_call(
                    store,
                    le.run_id,
                    at,
                    round,
                    &request,
                    estimate,
                    None,
                    latency,
                    0,
                    Some(&e.to_string()),
                )?;
                return Ok(Err(LlmFailure {
                    message: e.to_string(),
                    outcome: out,
                }));
            }
        };
        let reported = response.usage.map(|u| u.prompt_tokens as i64);
        if let Some(r) = reported {
            out.max_prompt_reported = Some(out.max_prompt_reported.unwrap_or(0).max(r));
        }
        out.completion_tokens += response
            .usage
            .map(|u| u.completion_tokens as i64)
            .unwrap_or(0);
        record_call(
            store,
            le.run_id,
            at,
            round,
            &request,
            estimate,
            response
                .usage
                .map(|u| (u.prompt_tokens as i64, u.completion_tokens as i64)),
            latency,
            response.attempts,
            None,
        )?;
        let content = cap_answer(response.content.as_deref().unwrap_or_default());
        let mut calls: Vec<ToolCall> = response.tool_calls.clone();
        // Calls past the cap never happened: neither run nor stored (the last result says so).
        let dropped = calls.len().saturating_sub(MAX_CALLS_PER_ANSWER);
        calls.truncate(MAX_CALLS_PER_ANSWER);
        unique_call_ids(&mut calls, &request.messages, round);
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
                    None,
                    at,
                )?;
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
                tool_calls: stored_calls(&calls),
                tool_call_id: None,
            },
            "tool_call",
            None,
            None,
            None,
            at,
        )?;
        for (i, call) in calls.iter().enumerate() {
            crate::faults::point("tool-before-result")?;
            let mut result = run_tool(
                store,
                le,
                registry,
                snapshot,
                Actor::Llm,
                &call.id,
                &call.name,
                &call.arguments,
            )?;
            out.mutated |= result.mutated;
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
                Some(&crate::observation::clip(&call.name, 64)),
                Some(&result.gist),
                None,
                le.clock.now_ms(),
            )?;
            crate::faults::point("tool-after-result")?;
        }
    }
    Ok(Ok(out))
}

/// Give a call whose id the conversation already holds a new one, `<id>~r<round>` (then
/// `~2`, `~3`, ...). Some servers restart their ids every turn (`call_0`, or
/// `launch_instance:0`); taken as is, a second launch in the pass would share the first one's
/// idempotency label and be answered "already executed" without reaching vast.ai, and the
/// prompt would hold two calls with one id.
fn unique_call_ids(calls: &mut [ToolCall], prompt: &[ChatMessage], round: u32) {
    let mut used: std::collections::HashSet<String> = prompt
        .iter()
        .flat_map(|m| {
            m.tool_calls
                .iter()
                .map(|c| c.id.clone())
                .chain(m.tool_call_id.clone())
        })
        .collect();
    for call in calls.iter_mut() {
        if used.contains(&call.id) {
            let base = format!("{}~r{round}", call.id);
            let mut id = base.clone();
            let mut n = 1;
            while used.contains(&id) {
                n += 1;
                id = format!("{base}~{n}");
            }
            log::info!(
                "the model reused tool call id {:?}; renamed to {id:?}",
                call.id
            );
            call.id = id;
        }
        used.insert(call.id.clone());
    }
}

/// The model's text is stored, and so replayed, up to this many characters: a runaway
/// answer must not make every later prompt of the pass too big to send.
pub const MAX_ANSWER_CHARS: usize = 4_000;

fn cap_answer(text: &str) -> String {
    let n = text.chars().count();
    if n <= MAX_ANSWER_CHARS {
        return text.to_string();
    }
    let mut kept: String = text.chars().take(MAX_ANSWER_CHARS).collect();
    kept.push_str(&format!(
        "\n[answer cut: {} more characters not stored]",
        n - MAX_ANSWER_CHARS
    ));
    kept
}

/// Tool calls run from one answer; more are ignored (no real decision needs them, and a flood
/// of calls and results would push the pass's next prompt over the budget).
pub const MAX_CALLS_PER_ANSWER: usize = 20;

/// Arguments longer than this that are not a JSON object are stored as a placeholder.
const STORED_BAD_ARGUMENT_BYTES: usize = 1024;

/// The calls as stored, and so replayed in later prompts: arguments the registry refuses for
/// size, or long ones that are not a JSON object, become a short placeholder; an empty name
/// becomes `unnamed` (providers reject an empty one in history) and names are cut to 64
/// characters. Without this, one answer with a megabyte of arguments would push every later
/// prompt of its pass over the budget, and an empty name would make each of them invalid.
pub fn stored_calls(calls: &[ToolCall]) -> Vec<ToolCall> {
    calls
        .iter()
        .map(|c| {
            let len = c.arguments.len();
            let object = || {
                serde_json::from_str::<serde_json::Value>(&c.arguments).is_ok_and(|v| v.is_object())
            };
            let arguments = if len > crate::tools::MAX_ARGUMENT_BYTES
                || (len > STORED_BAD_ARGUMENT_BYTES && !object())
            {
                json!({ "omitted": format!("{len} bytes of arguments, refused") }).to_string()
            } else {
                c.arguments.clone()
            };
            let name: String = c.name.trim().chars().take(64).collect();
            ToolCall {
                id: c.id.clone(),
                name: if name.is_empty() {
                    "unnamed".into()
                } else {
                    name
                },
                arguments,
            }
        })
        .collect()
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
        config: le.config,
        env: le.env,
        clock: le.clock,
        services: le.services,
        snapshot,
        run_id: le.run_id,
        actor,
        call_id: call_id.to_string(),
    };
    registry
        .call(&mut ctx, name, arguments)
        .with_context(|| format!("tool {name}"))
}

#[allow(clippy::too_many_arguments)]
fn record_call(
    store: &Store,
    run_id: i64,
    at: Millis,
    round: u32,
    req: &ChatRequest,
    estimate: u64,
    usage: Option<(i64, i64)>,
    latency_ms: i64,
    attempts: u32,
    error: Option<&str>,
) -> Result<()> {
    store.conn.execute(
        "INSERT INTO llm_calls (run_id, at, round, messages, prompt_tokens_est, prompt_tokens_reported,
                                completion_tokens, latency_ms, attempts, outcome, error)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
        rusqlite::params![
            run_id,
            at,
            round,
            req.messages.len() as i64,
            estimate as i64,
            usage.map(|u| u.0),
            usage.map(|u| u.1),
            latency_ms,
            attempts,
            if error.is_some() { "error" } else { "ok" },
            error
        ],
    )?;
    Ok(())
}

/// A summary line of calls the rules made, stored as one message so `history` and later
/// prompts show what was done and why.
pub fn rules_note(actor: Actor, lines: &[String]) -> String {
    let who = match actor {
        Actor::Fallback => "Rules (the LLM was unusable; launches only)",
        _ => "Rules",
    };
    if lines.is_empty() {
        format!("{who}: no action.")
    } else {
        format!("{who} decided:\n{}", lines.join("\n"))
    }
}

/// A compact JSON value of a tool result for notes.
pub fn compact_json(v: &serde_json::Value) -> String {
    crate::observation::clip(&v.to_string(), 300)
}

pub fn error_result(message: &str) -> serde_json::Value {
    json!({ "error": "vast_error", "message": message })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(name: &str, arguments: String) -> ToolCall {
        ToolCall {
            id: "call_1".into(),
            name: name.into(),
            arguments,
        }
    }

    #[test]
    fn a_runaway_answer_is_cut_when_stored() {
        let short = "launched one";
        assert_eq!(cap_answer(short), short);
        let long = "word ".repeat(10_000);
        let capped = cap_answer(&long);
        assert!(capped.chars().count() < MAX_ANSWER_CHARS + 80);
        assert!(
            capped.ends_with("[answer cut: 46000 more characters not stored]"),
            "{}",
            &capped[capped.len() - 60..]
        );
    }

    #[test]
    fn stored_calls_stay_small_and_replayable() {
        let huge = call(
            "launch_instance",
            format!("{{\"reason\":\"{}\"}}", "x".repeat(1 << 20)),
        );
        let stored = stored_calls(&[huge]);
        assert!(stored[0].arguments.len() < 100, "{}", stored[0].arguments);
        assert!(stored[0].arguments.contains("refused"));
        let deep = call("launch_instance", "[".repeat(5_000));
        assert!(stored_calls(&[deep])[0].arguments.len() < 100);
        let fine = call("launch_instance", r#"{"reason":"backlog"}"#.into());
        assert_eq!(stored_calls(std::slice::from_ref(&fine)), vec![fine]);
        assert_eq!(stored_calls(&[call("", "{}".into())])[0].name, "unnamed");
        assert_eq!(
            stored_calls(&[call(&"n".repeat(500), "{}".into())])[0]
                .name
                .len(),
            64
        );
    }
}
