//! Reading a 2xx chat-completion body: the answer's text, its tool calls (string arguments,
//! unique non-empty ids), finish_reason and usage, or why the body is unusable. Pure (no I/O).

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::Value;

use super::{AttemptFailure, ChatResponse, ToolCall, Usage};

/// How much of a non-JSON body an error keeps.
pub(crate) const SNIPPET_CHARS: usize = 200;

/// Process-wide counter for ids we make up when a server sends a tool call without one.
static SYNTHETIC_IDS: AtomicU64 = AtomicU64::new(0);

/// Read a 2xx body. Anything that is not a usable completion is a retryable failure. Pure (no
/// I/O), public for the fuzz targets.
pub fn parse_completion(body: &str, now_ms: i64) -> Result<ChatResponse, AttemptFailure> {
    // A lone surrogate escape (half an emoji) reads as U+FFFD, not as a broken body.
    let v: Value = crate::json::parse_loose(body)
        .map_err(|e| AttemptFailure::BadBody(format!("not JSON ({e}): {}", snippet(body))))?;
    if !v.is_object() {
        return Err(AttemptFailure::BadBody(format!(
            "not a JSON object: {}",
            snippet(body)
        )));
    }
    if let Some(err) = v.get("error").filter(|e| !e.is_null()) {
        return Err(AttemptFailure::ErrorInBody(error_text(err)));
    }
    let choice = match v.get("choices").and_then(Value::as_array) {
        Some(choices) if !choices.is_empty() => &choices[0],
        _ => return Err(AttemptFailure::NoChoices),
    };
    // Arguments sent as an object were read by serde_json, which keeps the last of a key sent
    // twice (`{"offer_id": 501, "offer_id": 502}` rented 502: a re-test); string arguments
    // are read strictly by the tools (`crate::json`). Such a body is read strictly too.
    if object_arguments(choice) {
        crate::json::parse(body).map_err(|e| {
            AttemptFailure::BadBody(format!("a tool call's arguments: {e}: {}", snippet(body)))
        })?;
    }
    if let Some(err) = choice.get("error").filter(|e| !e.is_null()) {
        return Err(AttemptFailure::ErrorInBody(error_text(err)));
    }
    let finish_reason = choice
        .get("finish_reason")
        .and_then(Value::as_str)
        .map(str::to_string);
    if finish_reason.as_deref() == Some("error") {
        let native = choice
            .get("native_finish_reason")
            .and_then(Value::as_str)
            .unwrap_or("none given");
        return Err(AttemptFailure::ErrorInBody(format!(
            "finish_reason \"error\" (native: {native})"
        )));
    }
    let Some(message) = choice.get("message").filter(|m| m.is_object()) else {
        return Err(AttemptFailure::BadBody(format!(
            "choices[0] has no message: {}",
            snippet(body)
        )));
    };
    // `tool_calls` that is neither a list nor one call is an answer that cannot be read (a
    // walkthrough saw it taken for "no calls", silently), as is `finish_reason: tool_calls`
    // with no call and no text.
    match message.get("tool_calls") {
        None | Some(Value::Null | Value::Array(_) | Value::Object(_)) => {}
        Some(other) => {
            return Err(AttemptFailure::BadBody(format!(
                "choices[0].message.tool_calls is not a list: {}",
                snippet(&other.to_string())
            )))
        }
    }
    let calls = tool_calls(message, now_ms);
    let content = message_text(message);
    let no_text = content.as_deref().is_none_or(|t| t.trim().is_empty());
    if calls.is_empty() && no_text && finish_reason.as_deref() == Some("tool_calls") {
        return Err(AttemptFailure::BadBody(format!(
            "finish_reason \"tool_calls\" without a tool call or text: {}",
            snippet(body)
        )));
    }
    Ok(ChatResponse {
        content,
        tool_calls: calls,
        finish_reason,
        usage: usage(v.get("usage"), v.get("timings")),
        attempts: 0,
    })
}

fn error_text(err: &Value) -> String {
    match err {
        Value::String(s) => s.clone(),
        Value::Object(o) => match o.get("message").and_then(Value::as_str) {
            Some(m) => m.to_string(),
            None => snippet(&err.to_string()),
        },
        other => snippet(&other.to_string()),
    }
}

/// `content` as a string, or text parts joined; a refusal stands in for absent content.
/// Empty text is `None`.
fn message_text(message: &Value) -> Option<String> {
    let text = match message.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    };
    if !text.is_empty() {
        return Some(text);
    }
    message
        .get("refusal")
        .and_then(Value::as_str)
        .filter(|r| !r.is_empty())
        .map(|r| format!("[refusal] {r}"))
}

/// The longest tool call id kept as the server sent it (OpenAI's are about 30 characters,
/// a UUID 36): every id is stored twice and sent back in every later prompt, so a server
/// (or a model) that sends megabytes there must not grow the database by as much a pass.
const MAX_TOOL_CALL_ID_CHARS: usize = 100;

/// Whether the choice's message holds a tool call whose `arguments` is an object.
fn object_arguments(choice: &Value) -> bool {
    let Some(message) = choice.get("message") else {
        return false;
    };
    let calls: Vec<&Value> = match message.get("tool_calls") {
        Some(Value::Array(calls)) => calls.iter().collect(),
        Some(one) => vec![one],
        None => Vec::new(),
    };
    calls
        .into_iter()
        .map(|c| c.get("function").unwrap_or(c))
        .chain(message.get("function_call"))
        .any(|f| f.get("arguments").is_some_and(Value::is_object))
}

/// Tool calls with string arguments and unique, non-empty ids. An object `arguments` (some
/// llama.cpp builds, KoboldCpp) is serialized back to a string; absent arguments become `{}`;
/// an empty, repeated, over-long ([`MAX_TOOL_CALL_ID_CHARS`]) or non-printable id is replaced
/// by a made-up one. A call the answer already holds with the same id, name and arguments (a
/// server or proxy that sent it twice) is dropped: with a made-up id it got a launch label of
/// its own and rented a second instance. A legacy `function_call` counts as one tool call.
fn tool_calls(message: &Value, now_ms: i64) -> Vec<ToolCall> {
    // One call sent as an object rather than a list of one is that call.
    let listed: Vec<&Value> = match message.get("tool_calls") {
        Some(Value::Array(calls)) => calls.iter().collect(),
        Some(one @ Value::Object(_)) => vec![one],
        _ => Vec::new(),
    };
    let mut raw: Vec<(Option<&str>, &Value)> = listed
        .into_iter()
        .map(|c| {
            let id = c.get("id").and_then(Value::as_str);
            (id, c.get("function").unwrap_or(c))
        })
        .collect();
    if raw.is_empty() {
        if let Some(f) = message.get("function_call").filter(|f| f.is_object()) {
            raw.push((None, f));
        }
    }
    let mut seen = HashSet::new();
    let mut sent = HashSet::new();
    raw.into_iter()
        .filter_map(|(id, function)| {
            let name = function
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let arguments = match function.get("arguments") {
                Some(Value::String(s)) => s.clone(),
                None | Some(Value::Null) => "{}".to_string(),
                Some(other) => other.to_string(),
            };
            if let Some(id) = id.map(str::trim).filter(|id| !id.is_empty()) {
                if !sent.insert((id.to_string(), name.clone(), arguments.clone())) {
                    log::info!(
                        "the server sent tool call {id:?} ({name}) twice; the copy is dropped"
                    );
                    return None;
                }
            }
            let id = match id.map(str::trim) {
                Some(id)
                    if !id.is_empty()
                        && id.len() <= MAX_TOOL_CALL_ID_CHARS
                        && id.chars().all(|c| c.is_ascii_graphic())
                        && !seen.contains(id) =>
                {
                    id.to_string()
                }
                _ => synthetic_id(now_ms),
            };
            seen.insert(id.clone());
            Some(ToolCall {
                id,
                name,
                arguments,
            })
        })
        .collect()
}

/// `call_fa<time>_<n>`: unique within the process (counter) and across runs (time).
fn synthetic_id(now_ms: i64) -> String {
    let n = SYNTHETIC_IDS.fetch_add(1, Ordering::Relaxed);
    format!("call_fa{now_ms:x}_{n}")
}

/// `usage`, with the prompt cache's share from `usage.prompt_tokens_details.cached_tokens`
/// (OpenAI, vLLM, newer llama.cpp) or llama.cpp's `timings.cache_n`. llama.cpp counts the
/// whole prompt in `usage.prompt_tokens` (`timings.prompt_n` is the part it had to process,
/// `cache_n` the part it reused); without `usage`, its timings give the same figures.
/// A `usage` without a readable `prompt_tokens` (absent, negative, fractional, past what the
/// ledger stores) is no report: it was stored as a report of 0, or wrapped to -1.
fn usage(usage: Option<&Value>, timings: Option<&Value>) -> Option<Usage> {
    let count = |v: &Value| v.as_u64().filter(|&n| n <= MAX_REPORTED_TOKENS);
    let timing = |name: &str| timings.and_then(|t| t.get(name)).and_then(count);
    let cache_n = timing("cache_n");
    let obj = usage.and_then(Value::as_object);
    let field = |name: &str| obj.and_then(|o| o.get(name)).and_then(count);
    let Some(prompt_tokens) = field("prompt_tokens") else {
        let (cached, processed) = (cache_n?, timing("prompt_n")?);
        let completion_tokens = timing("predicted_n").unwrap_or(0);
        return Some(Usage {
            prompt_tokens: cached + processed,
            completion_tokens,
            total_tokens: cached + processed + completion_tokens,
            cached_tokens: Some(cached),
        });
    };
    let completion_tokens = field("completion_tokens").unwrap_or(0);
    let cached_tokens = obj
        .and_then(|o| o.get("prompt_tokens_details"))
        .and_then(|d| d.get("cached_tokens"))
        .and_then(count)
        .or(cache_n);
    Some(Usage {
        prompt_tokens,
        completion_tokens,
        total_tokens: field("total_tokens").unwrap_or(prompt_tokens + completion_tokens),
        cached_tokens,
    })
}

/// The largest token count read from a server (2^40, a thousand times any context window):
/// sums of a few stay far inside the ledger's i64.
const MAX_REPORTED_TOKENS: u64 = 1 << 40;

/// The start of a body on one line, at most [`SNIPPET_CHARS`] characters.
pub(crate) fn snippet(body: &str) -> String {
    let flat = body.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.is_empty() {
        return "(empty body)".into();
    }
    match flat.char_indices().nth(SNIPPET_CHARS) {
        Some((cut, _)) => format!("{}…", &flat[..cut]),
        None => flat,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(body: &str) -> ChatResponse {
        parse_completion(body, 0).unwrap()
    }

    /// A re-test: half an emoji escaped (`\ud83d`) in the model's text or in a tool call's
    /// arguments string failed the whole answer, three retries, then the fallback decided.
    #[test]
    fn a_lone_surrogate_escape_does_not_fail_the_answer() {
        let r = ok(
            r#"{"choices":[{"finish_reason":"tool_calls","message":{"content":"ok \ud83d",
            "tool_calls":[{"id":"call_a","type":"function",
              "function":{"name":"launch_instance","arguments":"{\"reason\": \"dead \ud83d\"}"}}]}}]}"#,
        );
        assert_eq!(r.content.as_deref(), Some("ok \u{fffd}"));
        assert_eq!(r.tool_calls[0].arguments, "{\"reason\": \"dead \u{fffd}\"}");
    }

    #[test]
    fn tool_calls_are_normalised() {
        let r = ok(
            r#"{"choices":[{"finish_reason":"tool_calls","message":{"content":"",
            "tool_calls":[
              {"id":"call_a","type":"function","function":{"name":"a","arguments":{"x":1}}},
              {"id":"","type":"function","function":{"name":"b","arguments":"{\"y\":2}"}},
              {"id":"call_a","type":"function","function":{"name":"c"}}]}}]}"#,
        );
        assert_eq!(r.content, None);
        assert_eq!(r.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(r.usage, None);
        let ids: Vec<&str> = r.tool_calls.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids[0], "call_a");
        assert!(ids[1].starts_with("call_fa") && ids[2].starts_with("call_fa"));
        assert_ne!(ids[1], ids[2]);
        assert_eq!(r.tool_calls[0].arguments, r#"{"x":1}"#);
        assert_eq!(r.tool_calls[1].arguments, r#"{"y":2}"#);
        assert_eq!(r.tool_calls[2].arguments, "{}");
        // An object with a key twice is not read as its last value.
        let twice = r#"{"choices":[{"message":{"tool_calls":[
              {"id":"call_a","type":"function","function":{"name":"launch_instance","arguments":{"offer_id":501,"reason":"r","offer_id":502}}}]}}]}"#;
        let e = parse_completion(twice, 0).unwrap_err();
        assert!(
            matches!(&e, AttemptFailure::BadBody(m) if m.contains("the key \"offer_id\" appears twice")),
            "{e:?}"
        );
        // The same call twice (id, name and arguments): once. The same id with other
        // arguments stays a call of its own (a made-up id).
        let r = ok(
            r#"{"choices":[{"finish_reason":"tool_calls","message":{"content":"",
            "tool_calls":[
              {"id":"call_l","type":"function","function":{"name":"launch_instance","arguments":"{\"reason\":\"q\"}"}},
              {"id":"call_l","type":"function","function":{"name":"launch_instance","arguments":"{\"reason\":\"q\"}"}},
              {"id":"call_l","type":"function","function":{"name":"launch_instance","arguments":"{\"reason\":\"r\"}"}}]}}]}"#,
        );
        let ids: Vec<&str> = r.tool_calls.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids.len(), 2, "{ids:?}");
        assert_eq!(ids[0], "call_l");
        assert!(ids[1].starts_with("call_fa"), "{ids:?}");
        assert_eq!(r.tool_calls[1].arguments, r#"{"reason":"r"}"#);
    }

    #[test]
    fn an_over_long_or_unprintable_tool_call_id_is_made_up() {
        let long = "x".repeat(3_000_000);
        let body = serde_json::json!({"choices": [{"finish_reason": "tool_calls", "message": {
            "content": "", "tool_calls": [
                {"id": long, "type": "function", "function": {"name": "a", "arguments": "{}"}},
                {"id": "call\"}\n<0>x", "type": "function", "function": {"name": "b", "arguments": "{}"}},
                {"id": "x".repeat(100), "type": "function", "function": {"name": "c", "arguments": "{}"}}
            ]}}]})
        .to_string();
        let ids: Vec<String> = ok(&body).tool_calls.into_iter().map(|c| c.id).collect();
        assert!(
            ids[0].starts_with("call_fa") && ids[1].starts_with("call_fa"),
            "{ids:?}"
        );
        assert_eq!(ids[2], "x".repeat(100));
    }

    #[test]
    fn legacy_function_call_and_text_parts() {
        let r = ok(
            r#"{"choices":[{"finish_reason":"function_call","message":{"content":null,
            "function_call":{"name":"list_instances","arguments":"{}"}}}],
            "usage":{"prompt_tokens":10,"completion_tokens":2}}"#,
        );
        assert_eq!(r.tool_calls.len(), 1);
        assert_eq!(r.tool_calls[0].name, "list_instances");
        assert_eq!(
            r.usage,
            Some(Usage {
                prompt_tokens: 10,
                completion_tokens: 2,
                total_tokens: 12,
                cached_tokens: None,
            })
        );
        let r = ok(r#"{"choices":[{"finish_reason":"stop","message":{
            "content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}}]}"#);
        assert_eq!(r.content.as_deref(), Some("ab"));
    }

    #[test]
    fn one_tool_call_sent_as_an_object_is_that_call() {
        let r = ok(
            r#"{"choices":[{"finish_reason":"tool_calls","message":{"content":null,
            "tool_calls":{"id":"c1","type":"function","function":{"name":"schedule_next_check",
            "arguments":"{\"minutes\":5,\"reason\":\"r\"}"}}}}]}"#,
        );
        assert_eq!(r.tool_calls.len(), 1);
        assert_eq!(r.tool_calls[0].name, "schedule_next_check");
        assert_eq!(r.tool_calls[0].id, "c1");
    }

    #[test]
    fn unusable_bodies_are_retryable_failures() {
        let cases = [
            ("<html>502 Bad Gateway</html>", "BadBody"),
            (r#"{"choices":[{"message":{"content":"hal"#, "BadBody"),
            (
                r#"{"error":{"message":"upstream died","code":502}}"#,
                "ErrorInBody",
            ),
            (
                r#"{"choices":[{"error":{"message":"boom"},"message":{"content":""}}]}"#,
                "ErrorInBody",
            ),
            (
                r#"{"choices":[{"finish_reason":"error","message":{"content":""}}]}"#,
                "ErrorInBody",
            ),
            (r#"{"choices":[]}"#, "NoChoices"),
            (r#"{"id":"x"}"#, "NoChoices"),
            (r#"{"choices":[{"finish_reason":"stop"}]}"#, "BadBody"),
            ("[1,2]", "BadBody"),
            // Calls that cannot be read are no "no calls" (they were taken for one, silently).
            (
                r#"{"choices":[{"finish_reason":"tool_calls","message":{"content":null,"tool_calls":"notalist"}}]}"#,
                "BadBody",
            ),
            (
                r#"{"choices":[{"finish_reason":"tool_calls","message":{"content":null,"tool_calls":[]}}]}"#,
                "BadBody",
            ),
            (
                r#"{"choices":[{"finish_reason":"tool_calls","message":{"content":" \n\n ","tool_calls":null}}]}"#,
                "BadBody",
            ),
        ];
        for (body, kind) in cases {
            let got = parse_completion(body, 0).unwrap_err();
            let name = match got {
                AttemptFailure::BadBody(_) => "BadBody",
                AttemptFailure::ErrorInBody(_) => "ErrorInBody",
                AttemptFailure::NoChoices => "NoChoices",
                _ => "other",
            };
            assert_eq!(name, kind, "{body}");
        }
    }

    #[test]
    fn the_prompt_cache_is_read_from_usage_or_llama_cpp_timings() {
        let cached = |body: &str| ok(body).usage.map(|u| (u.prompt_tokens, u.cached_tokens));
        let message = r#""choices":[{"finish_reason":"stop","message":{"content":"ok"}}]"#;
        // OpenAI (and newer llama.cpp): the details of usage.
        assert_eq!(
            cached(&format!(
                r#"{{{message},"usage":{{"prompt_tokens":912,"completion_tokens":31,
                "prompt_tokens_details":{{"cached_tokens":768}}}}}}"#
            )),
            Some((912, Some(768)))
        );
        // llama.cpp without the details: its timings; usage counts the whole prompt.
        assert_eq!(
            cached(&format!(
                r#"{{{message},"usage":{{"prompt_tokens":3131,"completion_tokens":27}},
                "timings":{{"cache_n":2900,"prompt_n":231,"predicted_n":27}}}}"#
            )),
            Some((3131, Some(2900)))
        );
        // Timings alone: the prompt is what was reused plus what was processed.
        let r = ok(&format!(
            r#"{{{message},"timings":{{"cache_n":2900,"prompt_n":231,"predicted_n":27}}}}"#
        ));
        assert_eq!(
            r.usage,
            Some(Usage {
                prompt_tokens: 3131,
                completion_tokens: 27,
                total_tokens: 3158,
                cached_tokens: Some(2900),
            })
        );
        // Nothing said about a cache: unknown, not 0.
        assert_eq!(
            cached(&format!(
                r#"{{{message},"usage":{{"prompt_tokens":10,"completion_tokens":2}}}}"#
            )),
            Some((10, None))
        );
        assert_eq!(ok(&format!("{{{message}}}")).usage, None);
        // A prompt count that is no count is no report (it was a report of 0, or -1 stored).
        for bad in [
            r#"{"completion_tokens":2}"#,
            r#"{"prompt_tokens":-5,"completion_tokens":2}"#,
            r#"{"prompt_tokens":"12","completion_tokens":2}"#,
            r#"{"prompt_tokens":12.5,"completion_tokens":2}"#,
            r#"{"prompt_tokens":18446744073709551615,"completion_tokens":2}"#,
        ] {
            assert_eq!(
                ok(&format!(r#"{{{message},"usage":{bad}}}"#)).usage,
                None,
                "{bad}"
            );
        }
        let huge = ok(&format!(
            r#"{{{message},"usage":{{"prompt_tokens":10,"completion_tokens":18446744073709551615}}}}"#
        ));
        assert_eq!(huge.usage.map(|u| u.total_tokens), Some(10));
    }
}
