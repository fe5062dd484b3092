//! The notes the rules leave in the conversation, so `history` and later prompts show what
//! they did and why.

/// A summary line of calls the rules made, stored as one message so `history` and later
/// prompts show what was done and why.
pub fn rules_note(fallback: bool, lines: &[String]) -> String {
    let who = if fallback {
        "Rules (the LLM was unusable; the floor: what protects the fleet)"
    } else {
        "Rules"
    };
    if lines.is_empty() {
        format!("{who}: no action.")
    } else {
        format!("{who} decided:\n{}", lines.join("\n"))
    }
}

/// A compact JSON value of a tool result for notes.
pub fn compact_json(v: &serde_json::Value) -> String {
    crate::text::clip(&v.to_string(), 300)
}

/// The note the floor leaves when it carried out what the model left undone.
pub fn floor_note(lines: &[String]) -> String {
    format!(
        "Floor (the rules under your decision did what you left undone; you may change it next pass):\n{}",
        lines.join("\n")
    )
}
