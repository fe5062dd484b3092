//! How the model's answers are stored, and so sent again in later prompts: its text capped,
//! at most [`MAX_CALLS_PER_ANSWER`] calls, arguments and names that a provider can replay,
//! and call ids unique within the prompt.

use serde_json::json;

use crate::llm::{ChatMessage, ToolCall};

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
            let arguments =
                if len > MAX_ARGUMENT_BYTES || (len > STORED_BAD_ARGUMENT_BYTES && !object()) {
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
