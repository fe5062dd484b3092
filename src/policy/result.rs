//! What a tool call answers, whoever decided it (a plan's refusal is one): the JSON fed back
//! to the model, in DESIGN.md's shape for refusals.

use serde_json::{json, Value};

/// The result of one call: the JSON fed back to the model, whether it changed the fleet,
/// a one-line gist kept when old tool outputs are compacted, and the error's code (typed:
/// what a reader decides on, never read back out of the JSON).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    pub content: Value,
    pub mutated: bool,
    pub gist: String,
    code: Option<String>,
}

impl ToolResult {
    pub fn ok(content: Value, mutated: bool, gist: impl Into<String>) -> ToolResult {
        ToolResult {
            content,
            mutated,
            gist: gist.into(),
            code: None,
        }
    }

    /// A refusal or failure in DESIGN.md's shape: `{"error": code, ...details}`.
    pub fn error(code: &str, details: Value) -> ToolResult {
        let mut content = json!({ "error": code });
        if let (Some(obj), Value::Object(extra)) = (content.as_object_mut(), details) {
            for (k, v) in extra {
                obj.insert(k, v);
            }
        }
        let gist = match content.get("message").and_then(|m| m.as_str()) {
            Some(m) => format!("error {code}: {m}"),
            None => format!("error {code}"),
        };
        ToolResult {
            content,
            mutated: false,
            gist,
            code: Some(code.to_string()),
        }
    }

    /// The code of a refusal or failure ([`ToolResult::error`]); None for a success.
    pub fn error_code(&self) -> Option<&str> {
        self.code.as_deref()
    }
}
