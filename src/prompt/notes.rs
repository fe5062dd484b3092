//! The notes the rules leave in the conversation, so `history` and later prompts show what
//! they did and why.

/// A summary line of calls the rules made, stored as one message so `history` and later
/// prompts show what was done and why; with no call, why not when the rules know
/// (`waiting`: a backlog their streak does not answer yet).
pub fn rules_note(fallback: bool, lines: &[String], waiting: Option<&str>) -> String {
    let who = if fallback {
        "Rules (the LLM was unusable; the floor: what protects the fleet)"
    } else {
        "Rules"
    };
    if lines.is_empty() {
        match waiting {
            Some(why) => format!("{who}: no action: {why}."),
            None => format!("{who}: no action."),
        }
    } else {
        format!("{who} decided:\n{}", lines.join("\n"))
    }
}

/// A compact JSON value of a tool result for notes.
pub fn compact_json(v: &serde_json::Value) -> String {
    crate::text::clip(&v.to_string(), 300)
}

/// One call of a rules or floor note, one line: the tool with its arguments but the reason
/// (said once, after it), and what the tool answered, cut to [`RESULT_CHARS`]. The notes stay
/// in later prompts, so each line is short (`- stop_instance({"instance_id":7}): why -> {...}`).
pub fn call_line(
    tool: &str,
    arguments: &serde_json::Value,
    why: &str,
    result: &serde_json::Value,
) -> String {
    let mut args = arguments.clone();
    if let Some(o) = args.as_object_mut() {
        o.remove("reason");
    }
    let args = match args.as_object() {
        Some(o) if o.is_empty() => String::new(),
        _ => compact_json(&args),
    };
    format!(
        "- {tool}({args}): {why} -> {}",
        crate::text::clip(&result.to_string(), RESULT_CHARS)
    )
}

/// A tool result in a note is cut to this many characters.
pub const RESULT_CHARS: usize = 160;

/// The note the floor leaves when it carried out what the model left undone.
pub fn floor_note(lines: &[String]) -> String {
    format!(
        "Floor (the rules under your decision did what you left undone; you may change it next pass):\n{}",
        lines.join("\n")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_call_line_says_the_reason_once() {
        let line = call_line(
            "stop_instance",
            &json!({"instance_id": 7, "reason": "instance 7 is exited"}),
            "instance 7 is exited",
            &json!({"ok": true, "done": "destroyed"}),
        );
        assert_eq!(
            line,
            r#"- stop_instance({"instance_id":7}): instance 7 is exited -> {"done":"destroyed","ok":true}"#
        );
        let long = json!({"ok": true, "offer": "x".repeat(400)});
        let line = call_line("launch_instance", &json!({"reason": "r"}), "r", &long);
        assert!(line.starts_with("- launch_instance(): r -> {"), "{line}");
        assert!(line.chars().count() < 200, "{line}");
    }
}
