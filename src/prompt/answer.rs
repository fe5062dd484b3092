//! How the model's answers are read and stored, and so sent again in later prompts: its text
//! capped, at most [`MAX_CALLS_PER_ANSWER`] calls, arguments and names that a provider can
//! replay, call ids unique within the prompt; an answer cut at `max_tokens` runs none of its
//! calls, and a tool call written as text is named for what it is ([`read`]).

use serde_json::{json, Value};

use crate::llm::{ChatMessage, ChatResponse, ToolCall};

/// Arguments longer than this are refused by the tool registry (and stored as a placeholder).
pub const MAX_ARGUMENT_BYTES: usize = 16 * 1024;

/// Give a call whose id the conversation already holds a new one, `<id>~r<round>` (then
/// `~2`, `~3`, ...). Some servers restart their ids every turn (`call_0`, or
/// `launch_instance:0`); taken as is, a second launch in the pass would share the first one's
/// idempotency label and be answered "already executed" without reaching vast.ai, and the
/// prompt would hold two calls with one id.
pub fn unique_call_ids(calls: &mut [ToolCall], prompt: &[ChatMessage], round: u32) {
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

pub fn cap_answer(text: &str) -> String {
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

/// How much of arguments that are not a JSON object their stored placeholder quotes.
pub const QUOTED_BAD_ARGUMENT_CHARS: usize = 200;

/// The arguments to store and replay in place of `arguments`, or `None` to keep them as they
/// are (a JSON object within [`MAX_ARGUMENT_BYTES`]). Providers parse the arguments of every
/// assistant call in the history (llama-server answers HTTP 500 "Failed to parse tool call
/// arguments as JSON" to each later request, Ollama 400 "invalid tool call arguments"), so
/// what is replayed is always a small JSON object: blank arguments as `{}` (what the registry
/// ran them as), anything else that is not an object as
/// `{"invalid_arguments": "<the original, cut>"}` (the registry answered the call
/// `invalid_args`; `history` still shows what the model sent), oversized ones as
/// `{"omitted": "N bytes of arguments, refused"}`.
pub fn replay_arguments(arguments: &str) -> Option<String> {
    let len = arguments.len();
    if len > MAX_ARGUMENT_BYTES {
        return Some(
            json!({ "omitted": format!("{len} bytes of arguments, refused") }).to_string(),
        );
    }
    if arguments.trim().is_empty() {
        return Some("{}".into());
    }
    match serde_json::from_str::<Value>(arguments) {
        Ok(Value::Object(_)) => None,
        _ => {
            let mut quoted: String = arguments.chars().take(QUOTED_BAD_ARGUMENT_CHARS).collect();
            if quoted.len() < len {
                quoted.push('…');
            }
            Some(json!({ "invalid_arguments": quoted }).to_string())
        }
    }
}

/// Every assistant call in a prompt with arguments a provider can parse (see
/// [`replay_arguments`]): answers stored before arguments were made replayable are fixed on
/// the way out. Returns how many were replaced.
pub fn make_replayable(messages: &mut [ChatMessage]) -> usize {
    let mut replaced = 0;
    for call in messages.iter_mut().flat_map(|m| m.tool_calls.iter_mut()) {
        if let Some(arguments) = replay_arguments(&call.arguments) {
            call.arguments = arguments;
            replaced += 1;
        }
    }
    replaced
}

/// The calls as stored, and so replayed in later prompts: arguments as
/// [`replay_arguments`] makes them; an empty name becomes `unnamed` (providers reject an
/// empty one in history) and names are cut to 64 characters. Without this, one answer with a
/// megabyte of arguments would push every later prompt of its pass over the budget, and an
/// empty name or unparseable arguments would make each of them invalid.
pub fn stored_calls(calls: &[ToolCall]) -> Vec<ToolCall> {
    calls
        .iter()
        .map(|c| {
            let arguments = replay_arguments(&c.arguments).unwrap_or_else(|| c.arguments.clone());
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

/// The note a stored answer gets when it was a tool call written as text.
pub const MALFORMED_NOTE: &str = "[malformed: tool call written as text, not run]";

/// One answer as the tool loop acts on it and stores it.
#[derive(Debug, Clone, PartialEq)]
pub struct Read {
    /// The text to store: capped ([`cap_answer`]), with a note when the answer was cut at
    /// `max_tokens` or wrote a tool call as text.
    pub content: String,
    /// The calls to run and store: none from a cut answer, at most [`MAX_CALLS_PER_ANSWER`],
    /// ids unique within the prompt.
    pub calls: Vec<ToolCall>,
    /// Calls past the cap: neither run nor stored (the last result says so).
    pub dropped: usize,
    /// Cut at `max_tokens` (`finish_reason: "length"`).
    pub cut: bool,
    /// A malformed answer: cut at the limit, or a tool call written as text.
    pub malformed: bool,
}

/// Read one answer. A reply cut at `max_tokens` is incomplete, its tool calls with it (a
/// truncated launch may lack the offer the model meant): none of them is run, and the stored
/// text names them and the limit. A tool call written in the text (`functions.NAME:`, or a
/// JSON object naming one of `tools`) ran nothing and is marked as such.
pub fn read(
    response: &ChatResponse,
    prompt: &[ChatMessage],
    round: u32,
    tools: &[&str],
    max_output_tokens: u64,
) -> Read {
    let mut content = cap_answer(response.content.as_deref().unwrap_or_default());
    let cut = response.cut_at_limit();
    let as_text = tool_call_as_text(&content, tools);
    let mut calls: Vec<ToolCall> = Vec::new();
    let mut dropped = 0;
    let mut notes: Vec<String> = Vec::new();
    if cut {
        let names: Vec<String> = response
            .tool_calls
            .iter()
            .take(5)
            .map(|c| crate::text::clip(&c.name, 64))
            .collect();
        let more = response.tool_calls.len().saturating_sub(names.len());
        let mut note =
            format!("[cut at max_output_tokens ({max_output_tokens}): the answer is incomplete");
        if !names.is_empty() {
            note.push_str(&format!(
                "; its tool calls were not run: {}",
                names.join(", ")
            ));
            if more > 0 {
                note.push_str(&format!(" and {more} more"));
            }
        }
        note.push(']');
        notes.push(note);
    } else {
        calls = response.tool_calls.clone();
        dropped = calls.len().saturating_sub(MAX_CALLS_PER_ANSWER);
        calls.truncate(MAX_CALLS_PER_ANSWER);
        unique_call_ids(&mut calls, prompt, round);
    }
    if as_text {
        notes.push(MALFORMED_NOTE.into());
    }
    for note in notes {
        if !content.trim().is_empty() {
            content.push('\n');
        }
        content.push_str(&note);
    }
    Read {
        content,
        calls,
        dropped,
        cut,
        malformed: cut || as_text,
    }
}

/// Does a tool result say the call itself was invalid (arguments or tool name)?
pub fn invalid_call(result: &Value) -> bool {
    matches!(
        result.get("error").and_then(Value::as_str),
        Some("invalid_args" | "unknown_tool")
    )
}

/// How many `{` of one answer are tried as the start of a JSON object.
const MAX_OBJECTS_TRIED: usize = 64;

/// A tool call written as text instead of through the API: `functions.NAME:` or
/// `functions.NAME(` (llama-cpp-python's chatml-function-calling grammar, small models), or a
/// JSON object naming one of `tools` (`{"name": "launch_instance", ...}`, a tool name as a
/// key, `{"function": {"name": ...}}`), also inside `<tool_call>` tags or a code fence, also
/// cut short.
pub fn tool_call_as_text(text: &str, tools: &[&str]) -> bool {
    functions_prefix(text) || json_naming_a_tool(text, tools)
}

fn functions_prefix(text: &str) -> bool {
    text.match_indices("functions.").any(|(i, m)| {
        let after = &text[i + m.len()..];
        let name_len = after
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
            .unwrap_or(after.len());
        name_len > 0
            && after[name_len..]
                .trim_start_matches(' ')
                .starts_with([':', '('])
    })
}

fn json_naming_a_tool(text: &str, tools: &[&str]) -> bool {
    text.match_indices('{')
        .take(MAX_OBJECTS_TRIED)
        .any(|(i, _)| {
            let rest = &text[i..];
            match serde_json::Deserializer::from_str(rest)
                .into_iter::<Value>()
                .next()
            {
                Some(Ok(v)) => names_a_tool(&v, tools, 0),
                // Cut short (finish_reason length): a quoted tool name after the brace.
                Some(Err(e)) if e.is_eof() => {
                    tools.iter().any(|t| rest.contains(&format!("\"{t}\"")))
                }
                _ => false,
            }
        })
}

fn names_a_tool(v: &Value, tools: &[&str], depth: usize) -> bool {
    if depth > 4 {
        return false;
    }
    let known = |s: &str| {
        let s = s.trim();
        tools.contains(&s.strip_prefix("functions.").unwrap_or(s))
    };
    match v {
        Value::Object(o) => o.iter().any(|(k, val)| {
            known(k)
                || (matches!(k.as_str(), "name" | "function" | "tool" | "tool_name")
                    && val.as_str().is_some_and(known))
                || names_a_tool(val, tools, depth + 1)
        }),
        Value::Array(items) => items.iter().any(|i| names_a_tool(i, tools, depth + 1)),
        _ => false,
    }
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
        assert!(stored_calls(&[deep])[0].arguments.len() < 300);
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

    #[test]
    fn arguments_that_are_not_an_object_are_replayed_as_one() {
        for bad in [
            r#"{"reason": "59 proofs queued and every wor"#,
            "[1, 2]",
            r#""launch""#,
            "{&#34;reason&#34;: &#34;queue&#34;}",
            "{\"reason\": \"two\nlines\"}",
            "null",
        ] {
            let stored = stored_calls(&[call("launch_instance", bad.into())]);
            let v: Value = serde_json::from_str(&stored[0].arguments).unwrap();
            assert_eq!(v["invalid_arguments"], bad, "{bad}");
            assert_ne!(stored[0].arguments, bad);
        }
        for blank in ["", "  "] {
            assert_eq!(
                stored_calls(&[call("list_instances", blank.into())])[0].arguments,
                "{}"
            );
        }
        assert_eq!(replay_arguments("{ }"), None);
        assert_eq!(replay_arguments(r#"{"reason":"ok"}"#), None);
        let long = format!("[{}", "1,".repeat(1_000));
        let v: Value = serde_json::from_str(&replay_arguments(&long).unwrap()).unwrap();
        let quoted = v["invalid_arguments"].as_str().unwrap();
        assert_eq!(quoted.chars().count(), QUOTED_BAD_ARGUMENT_CHARS + 1);
        assert!(quoted.ends_with('…'));
        let mut prompt = vec![ChatMessage {
            role: crate::llm::Role::Assistant,
            content: String::new(),
            tool_calls: vec![
                call("launch_instance", String::new()),
                call("x", "{}".into()),
            ],
            tool_call_id: None,
        }];
        assert_eq!(make_replayable(&mut prompt), 1);
        assert_eq!(prompt[0].tool_calls[0].arguments, "{}");
    }

    const TOOLS: &[&str] = &["launch_instance", "stop_instance", "list_instances"];

    #[test]
    fn tool_calls_written_as_text_are_recognised() {
        for text in [
            "functions.launch_instance:",
            "functions.launch_instance:\n{\"reason\": \"queue\"}",
            "I will call functions.stop_instance(instance_id=4)",
            r#"{"name": "launch_instance", "arguments": {"reason": "queue"}}"#,
            "<tool_call>\n{\"name\": \"launch_instance\", \"arguments\": {\"reason\": \"59 proofs",
            "```json\n{\"launch_instance\": {\"reason\": \"queue\"}}\n```",
            r#"{"tool_calls": [{"function": {"name": "list_instances", "arguments": "{}"}}]}"#,
            r#"{"name": "functions.launch_instance", "arguments": {}}"#,
        ] {
            assert!(tool_call_as_text(text, TOOLS), "{text}");
        }
        for text in [
            "No action needed.",
            "The fleet is fine; launch_instance is not needed.",
            r#"Queue: {"pending": 3, "running": 2}"#,
            "see functions.rs for details",
            r#"{"name": "something_else"}"#,
            "{ unbalanced",
        ] {
            assert!(!tool_call_as_text(text, TOOLS), "{text}");
        }
    }

    fn answer(content: Option<&str>, calls: Vec<ToolCall>, finish: &str) -> ChatResponse {
        ChatResponse {
            content: content.map(str::to_string),
            tool_calls: calls,
            finish_reason: Some(finish.into()),
            usage: None,
            attempts: 1,
        }
    }

    #[test]
    fn a_cut_answer_runs_nothing_and_says_so() {
        let cut = answer(
            None,
            vec![call("launch_instance", r#"{"reason": "59 que"#.into())],
            "length",
        );
        let r = read(&cut, &[], 1, TOOLS, 1024);
        assert!(r.calls.is_empty() && r.cut && r.malformed);
        assert_eq!(
            r.content,
            "[cut at max_output_tokens (1024): the answer is incomplete; its tool calls were not run: launch_instance]"
        );
        assert!(!r.content.contains("59 que"));
        let text = answer(Some("I think we should la"), vec![], "length");
        let r = read(&text, &[], 1, TOOLS, 64);
        assert_eq!(
            r.content,
            "I think we should la\n[cut at max_output_tokens (64): the answer is incomplete]"
        );
        let whole = answer(
            None,
            vec![call("list_instances", "{}".into())],
            "tool_calls",
        );
        let r = read(&whole, &[], 1, TOOLS, 64);
        assert_eq!((r.calls.len(), r.cut, r.malformed), (1, false, false));
        assert_eq!(r.content, "");
        let as_text = answer(Some("functions.launch_instance:"), vec![], "stop");
        let r = read(&as_text, &[], 1, TOOLS, 64);
        assert!(r.malformed && !r.cut);
        assert_eq!(
            r.content,
            format!("functions.launch_instance:\n{MALFORMED_NOTE}")
        );
        assert!(invalid_call(
            &json!({"error": "invalid_args", "message": "x"})
        ));
        assert!(invalid_call(&json!({"error": "unknown_tool"})));
        assert!(!invalid_call(&json!({"error": "rate_limited"})));
        assert!(!invalid_call(&json!({"ok": true})));
    }
}
