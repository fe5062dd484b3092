//! `usage.prompt_tokens` the way OpenAI documents counting (o200k_base, the cookbook's rules).

use serde_json::Value;

pub(super) fn count(text: &str) -> u64 {
    tiktoken_rs::o200k_base_singleton().count_ordinary(text) as u64
}

/// `usage.prompt_tokens` as OpenAI documents it for gpt-4o-class models, computed from the wire
/// body: the cookbook's message rule (3 per message, plus the tokens of every string field,
/// plus 1 for a `name`) extended to nested tool calls (every string in them, plus 1 per call,
/// as tiktoken-rs does), the reply primer 3, and the cookbook's `num_tokens_for_tools`.
pub fn provider_prompt_tokens(body: &Value) -> u64 {
    let messages = body["messages"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let tools = body["tools"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    cookbook_message_tokens(messages) + cookbook_tool_tokens(tools)
}

/// [`provider_prompt_tokens`] of `body`, and what a server's prefix cache (llama.cpp's,
/// OpenAI's) reuses of it when `previous` was the prompt before: the tools and the leading
/// messages both have alike, counted the same way; nothing when the tools or the first
/// message differ (chat templates put the tools in or right after the system message). Each
/// message is counted once.
pub fn prompt_and_cached_tokens(previous: Option<&Value>, body: &Value) -> (u64, u64) {
    let messages = body["messages"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let tools = body["tools"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    let each: Vec<u64> = messages.iter().map(message_tokens).collect();
    let tools_tokens = cookbook_tool_tokens(tools);
    let prompt = each.iter().sum::<u64>() + 3 + tools_tokens;
    let Some(previous) = previous.filter(|p| p["tools"] == body["tools"]) else {
        return (prompt, 0);
    };
    let before = previous["messages"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let shared = before
        .iter()
        .zip(messages)
        .take_while(|(a, b)| a == b)
        .count();
    if shared == 0 {
        return (prompt, 0);
    }
    // Without the reply primer, which follows the last message.
    (prompt, tools_tokens + each[..shared].iter().sum::<u64>())
}

/// The cookbook's `num_tokens_from_messages` (o200k_base): messages plus the reply primer.
pub fn cookbook_message_tokens(messages: &[Value]) -> u64 {
    messages.iter().map(message_tokens).sum::<u64>() + 3
}

/// One message: 3, plus the tokens of every string field (1 more for a `name`), of text
/// parts, and of every string in its tool calls (plus 1 per call).
fn message_tokens(m: &Value) -> u64 {
    let mut n = 3;
    if let Some(fields) = m.as_object() {
        for (key, value) in fields {
            match value {
                Value::String(s) => {
                    n += count(s);
                    if key == "name" {
                        n += 1;
                    }
                }
                Value::Array(items) if key == "content" => {
                    n += items
                        .iter()
                        .filter_map(|p| p["text"].as_str())
                        .map(count)
                        .sum::<u64>();
                }
                Value::Array(calls) if key == "tool_calls" => {
                    for call in calls {
                        n += 1 + strings_in(call);
                    }
                }
                _ => {}
            }
        }
    }
    n
}

fn strings_in(v: &Value) -> u64 {
    match v {
        Value::String(s) => count(s),
        Value::Array(a) => a.iter().map(strings_in).sum(),
        Value::Object(o) => o.values().map(strings_in).sum(),
        _ => 0,
    }
}

/// The cookbook's `num_tokens_for_tools` for gpt-4o/gpt-4o-mini (`func_init=7, prop_init=3,
/// prop_key=3, enum_init=-3, enum_item=3, func_end=12`) over wire-format tools
/// (`{"type":"function","function":{…}}`). Zero without tools.
pub fn cookbook_tool_tokens(tools: &[Value]) -> u64 {
    const FUNC_INIT: i64 = 7;
    const PROP_INIT: i64 = 3;
    const PROP_KEY: i64 = 3;
    const ENUM_INIT: i64 = -3;
    const ENUM_ITEM: i64 = 3;
    const FUNC_END: i64 = 12;
    if tools.is_empty() {
        return 0;
    }
    let text = |v: &Value| -> String {
        match v {
            Value::String(s) => s.clone(),
            Value::Null => String::new(),
            other => other.to_string(),
        }
    };
    let no_period = |s: String| s.strip_suffix('.').map(str::to_string).unwrap_or(s);
    let mut n: i64 = 0;
    for tool in tools {
        let f = &tool["function"];
        n += FUNC_INIT;
        let desc = no_period(text(&f["description"]));
        n += count(&format!("{}:{}", text(&f["name"]), desc)) as i64;
        let Some(props) = f["parameters"]["properties"].as_object() else {
            continue;
        };
        if props.is_empty() {
            continue;
        }
        n += PROP_INIT;
        for (key, prop) in props {
            n += PROP_KEY;
            if let Some(items) = prop["enum"].as_array() {
                n += ENUM_INIT;
                for item in items {
                    n += ENUM_ITEM + count(&text(item)) as i64;
                }
            }
            let p_desc = no_period(text(&prop["description"]));
            n += count(&format!("{key}:{}:{p_desc}", text(&prop["type"]))) as i64;
        }
    }
    (n + FUNC_END).max(0) as u64
}
