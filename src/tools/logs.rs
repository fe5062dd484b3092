//! `instance_logs {instance_id, tail_lines? <= 200}`: the last lines of one of OUR
//! instances' container log, each line and the whole cut short (the text is outside data
//! and enters the prompt).

use anyhow::Result;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{parse_args, Tool, ToolCtx, ToolResult};
use crate::text::clip;

pub const MAX_TAIL: u32 = 200;
const DEFAULT_TAIL: u32 = 40;
const LINE_CHARS: usize = 240;
/// The whole log text in a result, at most (the newest lines are kept).
const TOTAL_CHARS: usize = 6_000;

pub struct InstanceLogs;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    instance_id: i64,
    #[serde(default)]
    tail_lines: Option<u32>,
}

impl Tool for InstanceLogs {
    fn name(&self) -> &'static str {
        "instance_logs"
    }

    fn description(&self) -> &'static str {
        "The last lines (default 40, at most 200) of one of our instances' container log."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "instance_id": {"type": "integer", "description": "an id from the state block"},
                "tail_lines": {"type": "integer", "minimum": 1, "maximum": MAX_TAIL}
            },
            "required": ["instance_id"],
            "additionalProperties": false
        })
    }

    fn mutating(&self) -> bool {
        false
    }

    fn call(&self, ctx: &mut ToolCtx<'_>, args: Value) -> Result<ToolResult> {
        let a: Args = match parse_args(args) {
            Ok(a) => a,
            Err(r) => return Ok(r),
        };
        let tail = a.tail_lines.unwrap_or(DEFAULT_TAIL);
        if !(1..=MAX_TAIL).contains(&tail) {
            return Ok(ToolResult::error(
                "invalid_args",
                json!({"message": format!("tail_lines must be 1..{MAX_TAIL}, got {tail}")}),
            ));
        }
        if ctx.snapshot.find(a.instance_id).is_none() {
            return Ok(ToolResult::error(
                "invalid_args",
                json!({"message": format!("instance {} is not one of ours (list_instances shows them)", a.instance_id)}),
            ));
        }
        let Some(vast) = ctx.services.vast.clone() else {
            return Ok(ToolResult::error(
                "not_configured",
                json!({"message": "no vast.ai API key: set VAST_API_KEY or the vast_api_key credential"}),
            ));
        };
        match vast.instance_logs(a.instance_id.max(0) as u64, tail) {
            Ok(text) => {
                let log = tail_text(&text);
                let lines = log.lines().count();
                Ok(ToolResult::ok(
                    json!({"instance_id": a.instance_id, "lines": lines, "log": log}),
                    false,
                    format!("{lines} log lines of {}", a.instance_id),
                ))
            }
            Err(e) => Ok(ToolResult::error(
                "vast_error",
                json!({"message": clip(&e.to_string(), 300), "instance_id": a.instance_id}),
            )),
        }
    }
}

/// The newest lines, each cut to `LINE_CHARS`, together at most `TOTAL_CHARS`.
fn tail_text(text: &str) -> String {
    let mut kept: Vec<String> = Vec::new();
    let mut total = 0;
    for line in text.lines().rev().filter(|l| !l.trim().is_empty()) {
        let line = clip(line, LINE_CHARS);
        total += line.chars().count() + 1;
        if total > TOTAL_CHARS {
            break;
        }
        kept.push(line);
    }
    kept.reverse();
    kept.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_newest_and_bounds() {
        let text: String = (0..1000)
            .map(|i| format!("line {i} {}\n", "x".repeat(100)))
            .collect();
        let t = tail_text(&text);
        assert!(t.chars().count() <= TOTAL_CHARS);
        assert!(t.ends_with(&format!("line 999 {}", "x".repeat(100))));
        assert!(!t.contains("line 0 "));
    }
}
