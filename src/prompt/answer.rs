//! How the model's answers are read and stored, and so sent again in later prompts: its turn
//! as it was (text capped, at most [`MAX_CALLS_PER_ANSWER`] calls, arguments and names that a
//! provider can replay, call ids unique within the prompt), and what must be said about it
//! (cut at `max_tokens`, a tool call written as text, too long to keep) as a note for the
//! message after it, never appended to the turn: small models copy what their own turns say
//! into later answers ([`read`]). A tool call written as text is recognised by its shape, also
//! when it is not valid JSON ([`tool_call_as_text`]).

use std::borrow::Cow;

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

/// The text as stored: its first [`MAX_ANSWER_CHARS`] characters, and how many more there were
/// (said in the answer's note, never in the text).
pub fn cap_answer(text: &str) -> (String, usize) {
    let n = text.chars().count();
    if n <= MAX_ANSWER_CHARS {
        return (text.to_string(), 0);
    }
    (
        text.chars().take(MAX_ANSWER_CHARS).collect(),
        n - MAX_ANSWER_CHARS,
    )
}

/// Tool calls run from one answer; more are ignored (no real decision needs them, and a flood
/// of calls and results would push the pass's next prompt over the budget).
pub const MAX_CALLS_PER_ANSWER: usize = 20;

/// How much of arguments that were not stored as sent the stored call keeps for `history`
/// (under `sent`, never replayed).
pub const KEPT_SENT_CHARS: usize = 4_000;

/// The arguments to store and replay in place of `arguments`, or `None` to keep them as they
/// are (a JSON object within [`MAX_ARGUMENT_BYTES`]). Providers parse the arguments of every
/// assistant call in the history (llama-server answers HTTP 500 "Failed to parse tool call
/// arguments as JSON" to each later request, Ollama 400 "invalid tool call arguments"), so
/// what is replayed is always a JSON object, and for anything the registry did not run as
/// sent it is `{}`: blank arguments (what the registry ran them as), text that is not a
/// JSON object, oversized ones, and the placeholders older versions stored
/// (`{"invalid_arguments": "..."}`, `{"omitted": "..."}`), which small models copied into
/// later answers. The call's tool result says what was wrong ([`arguments_note`]); `history`
/// shows what the model sent ([`stored_calls_json`]).
///
/// Arguments the registry read leniently ([`lenient_object`]: quotes HTML-escaped, the
/// object encoded twice) are replayed as the object it read, so that the model reads back
/// what ran (they went out as `{}`, "not a JSON object": the prompt fixes' re-test).
pub fn replay_arguments(arguments: &str) -> Option<String> {
    if arguments.len() > MAX_ARGUMENT_BYTES || arguments.trim().is_empty() {
        return Some("{}".into());
    }
    match crate::json::parse(arguments) {
        Ok(Value::Object(o)) if !old_placeholder(&o) => None,
        _ => match lenient_object(arguments) {
            Ok(Value::Object(o)) if !old_placeholder(&o) => Some(Value::Object(o).to_string()),
            _ => Some("{}".into()),
        },
    }
}

/// The arguments text as JSON, read as small models and their servers send it: an object
/// encoded twice (a JSON string holding the object) is the object, and quotes HTML-escaped
/// (`&#34;`, `&quot;`: llama-cpp-python's, which models copy) are quotes. The error of the
/// text as sent when none of these reads it. A key sent twice is an error ([`crate::json`]).
pub fn lenient_object(text: &str) -> serde_json::Result<Value> {
    let first = crate::json::parse(text);
    let unescaped = |t: &str| t.replace("&#34;", "\"").replace("&quot;", "\"");
    match &first {
        Ok(Value::String(inner)) => match crate::json::parse(inner) {
            Ok(v @ Value::Object(_)) => Ok(v),
            _ => first,
        },
        Err(_) if text.contains("&#34;") || text.contains("&quot;") => {
            crate::json::parse(&unescaped(text)).or(first)
        }
        _ => first,
    }
}

/// `{"invalid_arguments": "..."}` or `{"omitted": "..."}`: what an older version stored in
/// place of arguments it could not replay.
fn old_placeholder(o: &serde_json::Map<String, Value>) -> bool {
    o.len() == 1
        && ["invalid_arguments", "omitted"]
            .iter()
            .any(|k| o.get(*k).is_some_and(Value::is_string))
}

/// What the tool result of a call says about its arguments when the conversation shows them
/// as `{}` although the model sent something else (see [`replay_arguments`]); `None` when
/// they are kept as sent, or were blank (run as `{}`).
pub fn arguments_note(arguments: &str) -> Option<String> {
    if arguments.trim().is_empty() || replay_arguments(arguments).is_none_or(|r| r != "{}") {
        return None;
    }
    let len = arguments.len();
    Some(if len > MAX_ARGUMENT_BYTES {
        format!(
            "your arguments were {len} bytes, over the limit of {MAX_ARGUMENT_BYTES}; the call above shows them as {{}}"
        )
    } else {
        format!(
            "your arguments were not a JSON object of this tool's parameters ({} characters); the call above shows them as {{}}",
            arguments.chars().count()
        )
    })
}

/// Every assistant call in a prompt with arguments a provider can parse (see
/// [`replay_arguments`]): answers stored before arguments were made replayable are fixed on
/// the way out. Returns how many were replaced.
pub fn make_replayable(messages: &mut [ChatMessage]) -> usize {
    let mut replaced = 0;
    for call in messages.iter_mut().flat_map(|m| m.tool_calls.iter_mut()) {
        if let Some(arguments) = replay_arguments(&call.arguments) {
            if arguments != call.arguments {
                call.arguments = arguments;
                replaced += 1;
            }
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

/// The `tool_calls` column of a stored assistant turn: [`stored_calls`], each call whose
/// arguments are shown otherwise with what the model sent under `sent` (cut to
/// [`KEPT_SENT_CHARS`]). Reading the column back as [`ToolCall`]s ignores `sent`: `history`
/// shows it, no prompt carries it.
pub fn stored_calls_json(calls: &[ToolCall]) -> String {
    let items: Vec<Value> = calls
        .iter()
        .zip(stored_calls(calls))
        .map(|(sent, stored)| {
            let mut v = json!({
                "id": stored.id,
                "name": stored.name,
                "arguments": stored.arguments,
            });
            if stored.arguments != sent.arguments && !sent.arguments.trim().is_empty() {
                let mut kept: String = sent.arguments.chars().take(KEPT_SENT_CHARS).collect();
                if kept.len() < sent.arguments.len() {
                    kept.push('…');
                }
                v["sent"] = Value::String(kept);
            }
            v
        })
        .collect();
    Value::Array(items).to_string()
}

/// How the note about an answer begins: a user message right after the answer (after the
/// results of its calls, when it made some).
pub const NOTE_PREFIX: &str = "Note on your answer above:";
/// The same, when nothing of the answer is kept to be above (a cut answer that was only its
/// unfinished calls): the note must not point at a message the model cannot see.
pub const NOTE_PREFIX_NOT_KEPT: &str = "Note on your last answer (nothing of it is kept here):";

/// The note's sentence for a tool call written as text.
pub const AS_TEXT_NOTE: &str = "it wrote a tool call as text, so nothing ran. A tool runs only when you call it through the function-calling interface (tool_calls); a call written in the text of an answer does nothing.";

/// One answer as the tool loop acts on it and stores it.
#[derive(Debug, Clone, PartialEq)]
pub struct Read {
    /// The text to store: the answer's own, capped ([`cap_answer`]), nothing added.
    pub content: String,
    /// The calls to run and store: none from a cut answer, at most [`MAX_CALLS_PER_ANSWER`],
    /// ids unique within the prompt.
    pub calls: Vec<ToolCall>,
    /// Calls past the cap: neither run nor stored (the last result says so).
    pub dropped: usize,
    /// Cut at `max_tokens` (`finish_reason: "length"`).
    pub cut: bool,
    /// It wrote a tool call as text ([`tool_call_as_text`]).
    pub as_text: bool,
    /// A malformed answer: cut at the limit, or a tool call written as text.
    pub malformed: bool,
    /// What the model is told about this answer, as a user message after it (and after the
    /// results of its calls): cut, a call written as text, text too long to keep.
    pub note: Option<String>,
}

/// Read one answer. A reply cut at `max_tokens` is incomplete, its tool calls with it (a
/// truncated launch may lack the offer the model meant): none of them is run or stored, and
/// the note names them and the limit. A tool call written in the text (`functions.NAME:`, or
/// the shape of a JSON object naming one of `tools`) ran nothing, and the note says so.
pub fn read(
    response: &ChatResponse,
    prompt: &[ChatMessage],
    round: u32,
    tools: &[&str],
    max_output_tokens: u64,
) -> Read {
    let (content, more_chars) = cap_answer(response.content.as_deref().unwrap_or_default());
    let cut = response.cut_at_limit();
    // Only when no call runs: beside calls made through `tool_calls` (which run), a call
    // written in the text is narration, and "nothing ran" told a model whose launches had
    // gone through to launch again.
    let as_text = (cut || response.tool_calls.is_empty()) && tool_call_as_text(&content, tools);
    let mut calls: Vec<ToolCall> = Vec::new();
    let mut dropped = 0;
    let mut parts: Vec<String> = Vec::new();
    if cut {
        let names: Vec<String> = response
            .tool_calls
            .iter()
            .take(5)
            .map(|c| crate::text::clip(&c.name, 64))
            .collect();
        let more = response.tool_calls.len().saturating_sub(names.len());
        let mut part =
            format!("it was cut at max_output_tokens ({max_output_tokens}) and is incomplete");
        if !names.is_empty() {
            part.push_str(&format!(
                "; none of its tool calls ran ({}",
                names.join(", ")
            ));
            if more > 0 {
                part.push_str(&format!(" and {more} more"));
            }
            part.push(')');
        }
        part.push_str(". Keep answers short: call the tools, with no text around the calls.");
        parts.push(part);
    } else {
        calls = response.tool_calls.clone();
        dropped = calls.len().saturating_sub(MAX_CALLS_PER_ANSWER);
        calls.truncate(MAX_CALLS_PER_ANSWER);
        unique_call_ids(&mut calls, prompt, round);
    }
    if as_text {
        parts.push(AS_TEXT_NOTE.into());
    }
    if more_chars > 0 {
        parts.push(format!(
            "its text had {} characters; only the first {MAX_ANSWER_CHARS} are kept in this conversation.",
            MAX_ANSWER_CHARS + more_chars
        ));
    }
    let note = (!parts.is_empty()).then(|| {
        let sentences: Vec<String> = parts
            .iter()
            .map(|p| {
                let mut chars = p.chars();
                chars.next().map_or(String::new(), |first| {
                    first.to_uppercase().chain(chars).collect()
                })
            })
            .collect();
        let prefix = if content.trim().is_empty() && calls.is_empty() {
            NOTE_PREFIX_NOT_KEPT
        } else {
            NOTE_PREFIX
        };
        format!("{prefix} {}", sentences.join(" "))
    });
    Read {
        content,
        calls,
        dropped,
        cut,
        as_text,
        malformed: cut || as_text,
        note,
    }
}

/// Does a tool result's error code (`ToolResult::error_code`) say the call itself was
/// invalid (arguments or tool name)?
pub fn invalid_call(code: Option<&str>) -> bool {
    matches!(code, Some("invalid_args" | "unknown_tool"))
}

/// A tool call written as text instead of through the API. Recognised by its shape, not by
/// parsing, because small models rarely write valid JSON there (of Qwen2.5-Coder-0.5B's 22
/// such answers in one hour, 6 were not: a `//` comment, unescaped quotes, a `]` closing a
/// `}`, text after the object): `functions.NAME:` or `functions.NAME(` (llama-cpp-python's
/// chatml-function-calling grammar, small models), or a `{` followed by one of `tools`,
/// quoted, as the value of a name key (`"name": "launch_instance"`; also `function`, `tool`,
/// `tool_name`; a `functions.` prefix allowed) or as a key itself
/// (`"launch_instance": {...}`), with double or single quotes, HTML-escaped (`&#34;`) or
/// backslash-escaped ones too, also inside `<tool_call>` tags or a code fence, also cut short,
/// however many in one answer. One answer counts once. The sim report's `malformed_answers`
/// and `inspect` count with this function (`tools::calls_written_as_text`).
pub fn tool_call_as_text(text: &str, tools: &[&str]) -> bool {
    functions_prefix(text) || json_shape_naming_a_tool(&plain_quotes(text), tools)
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

/// Quotes as servers and models escape them: `&#34;` and `&quot;` (llama-cpp-python
/// HTML-escapes the prompt, and small models copy it) and `\"` (a call inside a JSON string).
fn plain_quotes(text: &str) -> Cow<'_, str> {
    if ["&#34;", "&quot;", "\\\""].iter().any(|q| text.contains(q)) {
        Cow::Owned(
            text.replace("&#34;", "\"")
                .replace("&quot;", "\"")
                .replace("\\\"", "\""),
        )
    } else {
        Cow::Borrowed(text)
    }
}

/// The keys whose value names the tool in a call written as JSON.
const NAME_KEYS: &[&str] = &["name", "function", "tool", "tool_name"];

fn json_shape_naming_a_tool(text: &str, tools: &[&str]) -> bool {
    let Some(brace) = text.find('{') else {
        return false;
    };
    let text = &text[brace..];
    let named = |quoted: &str, q: char| {
        text.match_indices(quoted).any(|(i, m)| {
            let after = text[i + m.len()..].trim_start();
            after.starts_with(':') || value_of_a_name_key(&text[..i], q)
        })
    };
    tools
        .iter()
        .map(|t| t.trim())
        .filter(|t| !t.is_empty())
        .any(|tool| {
            ['"', '\''].into_iter().any(|q| {
                named(&format!("{q}{tool}{q}"), q) || named(&format!("{q}functions.{tool}{q}"), q)
            })
        })
}

/// `before` ends with `"name":` (or another of [`NAME_KEYS`], quoted with `q`), whitespace
/// allowed around the colon.
fn value_of_a_name_key(before: &str, q: char) -> bool {
    let Some(key) = before.trim_end().strip_suffix(':') else {
        return false;
    };
    let key = key.trim_end();
    NAME_KEYS
        .iter()
        .any(|k| key.ends_with(&format!("{q}{k}{q}")))
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
    fn a_runaway_answer_is_cut_when_stored_and_the_note_says_so() {
        let short = "launched one";
        assert_eq!(cap_answer(short), (short.to_string(), 0));
        let long = "word ".repeat(10_000);
        let (kept, more) = cap_answer(&long);
        assert_eq!(kept.chars().count(), MAX_ANSWER_CHARS);
        assert!(long.starts_with(&kept));
        assert_eq!(more, 46_000);
        let r = read(&answer(Some(&long), vec![], "stop"), &[], 1, TOOLS, 64);
        assert_eq!(r.content, kept, "nothing added to the turn");
        assert!(!r.malformed);
        assert_eq!(
            r.note.as_deref(),
            Some("Note on your answer above: Its text had 50000 characters; only the first 4000 are kept in this conversation.")
        );
    }

    #[test]
    fn stored_calls_stay_small_and_replayable() {
        let huge = call(
            "launch_instance",
            format!("{{\"reason\":\"{}\"}}", "x".repeat(1 << 20)),
        );
        let stored = stored_calls(std::slice::from_ref(&huge));
        assert_eq!(stored[0].arguments, "{}");
        let note = arguments_note(&huge.arguments).unwrap();
        assert!(note.contains("over the limit of 16384"), "{note}");
        let json: Value = serde_json::from_str(&stored_calls_json(&[huge])).unwrap();
        let sent = json[0]["sent"].as_str().unwrap();
        assert_eq!(sent.chars().count(), KEPT_SENT_CHARS + 1);
        assert!(sent.ends_with('…'));
        let deep = call("launch_instance", "[".repeat(5_000));
        assert_eq!(stored_calls(&[deep])[0].arguments, "{}");
        let fine = call("launch_instance", r#"{"reason":"backlog"}"#.into());
        assert_eq!(
            stored_calls(std::slice::from_ref(&fine)),
            vec![fine.clone()]
        );
        assert_eq!(arguments_note(&fine.arguments), None);
        let json: Value = serde_json::from_str(&stored_calls_json(&[fine])).unwrap();
        assert!(json[0].get("sent").is_none(), "{json}");
        assert_eq!(stored_calls(&[call("", "{}".into())])[0].name, "unnamed");
        assert_eq!(
            stored_calls(&[call(&"n".repeat(500), "{}".into())])[0]
                .name
                .len(),
            64
        );
    }

    #[test]
    fn arguments_that_are_not_an_object_are_stored_as_an_empty_one() {
        for bad in [
            r#"{"reason": "59 proofs queued and every wor"#,
            "[1, 2]",
            r#""launch""#,
            "{\"reason\": \"two\nlines\"}",
            "null",
            // What older versions stored, copied back by a small model.
            r#"{"invalid_arguments": "{\"reason\": \"59"}"#,
            r#"{"omitted": "20000 bytes of arguments, refused"}"#,
        ] {
            let sent = call("launch_instance", bad.into());
            let stored = stored_calls(std::slice::from_ref(&sent));
            assert_eq!(stored[0].arguments, "{}", "{bad}");
            let note = arguments_note(bad).unwrap();
            assert!(note.ends_with("the call above shows them as {}"), "{note}");
            // `history` keeps what was sent; no prompt does.
            let json: Value = serde_json::from_str(&stored_calls_json(&[sent])).unwrap();
            assert_eq!(json[0]["sent"], bad);
            assert_eq!(json[0]["arguments"], "{}");
            let back: Vec<ToolCall> = serde_json::from_value(json).unwrap();
            assert_eq!(back, stored);
        }
        for blank in ["", "  "] {
            assert_eq!(
                stored_calls(&[call("list_instances", blank.into())])[0].arguments,
                "{}"
            );
            assert_eq!(arguments_note(blank), None, "run as {{}}: nothing to say");
            let json: Value =
                serde_json::from_str(&stored_calls_json(&[call("list_instances", blank.into())]))
                    .unwrap();
            assert!(json[0].get("sent").is_none());
        }
        // Read as the registry read them (quotes HTML-escaped, the object encoded twice):
        // replayed as the object that ran, with nothing to say.
        for read in [
            "{&#34;reason&#34;: &#34;queue&#34;}",
            r#""{\"reason\": \"queue\"}""#,
        ] {
            let stored = stored_calls(&[call("launch_instance", read.into())]);
            assert_eq!(stored[0].arguments, r#"{"reason":"queue"}"#, "{read}");
            assert_eq!(arguments_note(read), None, "{read}");
        }
        assert_eq!(replay_arguments("{ }"), None);
        assert_eq!(replay_arguments(r#"{"reason":"ok"}"#), None);
        // A model's own key of that name among others is its business.
        assert_eq!(
            replay_arguments(r#"{"omitted": "x", "reason": "ok"}"#),
            None
        );
        // Rows stored by older versions: verbatim, and the placeholder; both go out as `{}`.
        let mut prompt = vec![ChatMessage {
            role: crate::llm::Role::Assistant,
            content: String::new(),
            tool_calls: vec![
                call("launch_instance", String::new()),
                call("x", "{}".into()),
                call("launch_instance", r#"{"reason": "cut"#.into()),
                call(
                    "launch_instance",
                    r#"{"invalid_arguments":"{\"reason\": \"cut"}"#.into(),
                ),
            ],
            tool_call_id: None,
        }];
        assert_eq!(make_replayable(&mut prompt), 3);
        assert!(prompt[0].tool_calls.iter().all(|c| c.arguments == "{}"));
    }

    /// The registry's tools (`sim::report::model`'s test reads the fixture with the registry's
    /// own list).
    const TOOLS: &[&str] = &[
        "launch_instance",
        "stop_instance",
        "schedule_next_check",
        "search_offers",
        "list_instances",
        "instance_logs",
    ];

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
            // Not JSON: a comment, unescaped quotes, a wrong closing bracket, text after it.
            "{\n  \"name\": \"launch_instance\",\n  \"arguments\": {\n    \"offer_id\": null, // none\n    \"reason\": \"dead\"\n  }\n}",
            r#"{"name": "stop_instance", "arguments": {"instance_id":7,"reason":"wake #8: "check 8"}}""#,
            r#"{"name": "stop_instance", "arguments": {"instance_id":7,"reason":"ok"}]"#,
            r#"{"name": "stop_instance", "arguments": {"reason":"x"} because -> {"ok":true}}"#,
            // Fenced, several in one answer, spaced and split over lines.
            "```json\n{\"name\" :\n \"schedule_next_check\", \"arguments\": {}}\n```\n```json\n{\"name\": \"list_instances\"}\n```",
            // A Python dict, HTML-escaped quotes, a call inside a JSON string.
            "{'name': 'launch_instance', 'arguments': {'reason': 'dead'}}",
            "{&#34;name&#34;: &#34;launch_instance&#34;, &#34;arguments&#34;: {}}",
            r#"{"answer": "{\"tool\": \"search_offers\"}"}"#,
            r#"[{"tool_name": "instance_logs", "instance_id": 3}]"#,
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
            r#"{"reason": "launch_instance later"}"#,
            // A tool's name quoted, but neither a key nor a name's value, or before any brace.
            r#"{"reason": "do not call "launch_instance" now"}"#,
            r#""name": "launch_instance" was the idea, {not done}"#,
            r#"{"name": "curio: backlog", "arguments": {"curio": "6"}}"#,
            "",
        ] {
            assert!(!tool_call_as_text(text, TOOLS), "{text}");
        }
    }

    /// The 23 answers Qwen2.5-Coder-0.5B gave in one `sim --llm` hour of the incident
    /// (tests/fixtures/llm/README.md): the `--- call N: ...` line, then the answer.
    fn the_real_models_answers() -> Vec<(u32, String)> {
        let text = include_str!("../../tests/fixtures/llm/qwen2.5-coder-0.5b-incident.txt");
        let mut answers: Vec<(u32, String)> = Vec::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("--- call ") {
                let n = rest.split(':').next().unwrap().parse().unwrap();
                answers.push((n, String::new()));
            } else if let Some((_, answer)) = answers.last_mut() {
                answer.push_str(line);
                answer.push('\n');
            } else {
                assert!(line.is_empty() || line.starts_with('#'), "{line}");
            }
        }
        answers
            .into_iter()
            .map(|(n, a)| (n, a.trim_end().to_string()))
            .collect()
    }

    /// Issue 23's must-show 4: 22 of the 23 counted as tool calls written as text, the one
    /// left out names no tool of ours; 6 of the 22 are not valid JSON, and they count too.
    #[test]
    fn the_real_models_23_answers_are_counted() {
        let answers = the_real_models_answers();
        let numbers: Vec<u32> = answers.iter().map(|(n, _)| *n).collect();
        assert_eq!(numbers, (1..=23).collect::<Vec<_>>());
        let tools = TOOLS;
        let (counted, left): (Vec<_>, Vec<_>) = answers
            .iter()
            .partition(|(_, a)| tool_call_as_text(a, tools));
        assert_eq!(counted.len(), 22);
        assert_eq!(left.len(), 1);
        let (n, other) = left[0];
        assert_eq!(*n, 23);
        assert!(other.contains(r#""name": "curio: backlog""#), "{other}");
        let first_json = |a: &str| {
            let a = a.find('{').map_or("", |i| &a[i..]);
            serde_json::Deserializer::from_str(a)
                .into_iter::<Value>()
                .next()
                .is_some_and(|v| v.is_ok())
        };
        let not_json: Vec<u32> = counted
            .iter()
            .filter(|(_, a)| !first_json(a))
            .map(|(n, _)| *n)
            .collect();
        assert_eq!(not_json, vec![1, 16, 18, 19, 20, 21]);
        // Each of them, stored and read back as the report reads it, still counts.
        for (n, a) in &counted {
            let r = read(&answer(Some(a), vec![], "stop"), &[], 1, tools, 256);
            assert_eq!(&r.content, a, "call {n}: stored as it was");
            assert!(r.as_text && r.malformed, "call {n}");
            assert!(r.note.unwrap().contains(&AS_TEXT_NOTE[1..]), "call {n}");
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
    fn a_cut_answer_runs_nothing_and_its_note_says_so() {
        let cut = answer(
            None,
            vec![call("launch_instance", r#"{"reason": "59 que"#.into())],
            "length",
        );
        let r = read(&cut, &[], 1, TOOLS, 1024);
        assert!(r.calls.is_empty() && r.cut && r.malformed && !r.as_text);
        assert_eq!(r.content, "", "nothing of the model's to store");
        assert_eq!(
            r.note.as_deref(),
            Some("Note on your last answer (nothing of it is kept here): It was cut at max_output_tokens (1024) and is incomplete; none of its tool calls ran (launch_instance). Keep answers short: call the tools, with no text around the calls.")
        );
        assert!(!r.note.unwrap().contains("59 que"));
        let text = answer(Some("I think we should la"), vec![], "length");
        let r = read(&text, &[], 1, TOOLS, 64);
        assert_eq!(r.content, "I think we should la");
        assert!(r
            .note
            .unwrap()
            .starts_with("Note on your answer above: It was cut at max_output_tokens (64) and is incomplete. Keep"));
        let whole = answer(
            None,
            vec![call("list_instances", "{}".into())],
            "tool_calls",
        );
        let r = read(&whole, &[], 1, TOOLS, 64);
        assert_eq!((r.calls.len(), r.cut, r.malformed), (1, false, false));
        assert_eq!((r.content.as_str(), r.note), ("", None));
        let as_text = answer(Some("functions.launch_instance:"), vec![], "stop");
        let r = read(&as_text, &[], 1, TOOLS, 64);
        assert!(r.malformed && r.as_text && !r.cut);
        assert_eq!(r.content, "functions.launch_instance:");
        assert_eq!(
            r.note.unwrap(),
            format!("Note on your answer above: I{}", &AS_TEXT_NOTE[1..])
        );
        // Written as text beside calls made through tool_calls: they ran, the text is
        // narration, and no note says "nothing ran" (it told a model to launch again).
        let beside = answer(
            Some(r#"Launching: {"name": "launch_instance", "arguments": {"reason": "dead"}}"#),
            vec![call("launch_instance", r#"{"reason":"dead"}"#.into())],
            "tool_calls",
        );
        let r = read(&beside, &[], 1, TOOLS, 64);
        assert_eq!(
            (r.calls.len(), r.as_text, r.malformed, r.note),
            (1, false, false, None)
        );
        // Cut and written as text: one note, both said.
        let both = answer(
            Some(r#"{"name": "launch_instance", "argu"#),
            vec![],
            "length",
        );
        let r = read(&both, &[], 1, TOOLS, 64);
        assert_eq!(r.content, r#"{"name": "launch_instance", "argu"#);
        let note = r.note.unwrap();
        assert!(note.contains("It was cut") && note.contains("It wrote a tool call as text"));
        assert!(invalid_call(Some("invalid_args")));
        assert!(invalid_call(Some("unknown_tool")));
        assert!(!invalid_call(Some("rate_limited")));
        assert!(!invalid_call(None));
    }
}
