//! `schedule_next_check {minutes: 1..1440, reason}`: a wake for a later pass. Bounded so a
//! model cannot flood the wake table.

use anyhow::Result;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{parse_args, Tool, ToolCtx, ToolResult};
use crate::clock::rfc3339;
use crate::store::wakes;

/// More pending agent wakes than this is a model in a loop, not a plan.
pub const MAX_PENDING_AGENT_WAKES: i64 = 12;

pub struct ScheduleNextCheck;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    minutes: i64,
    reason: String,
}

impl Tool for ScheduleNextCheck {
    fn name(&self) -> &'static str {
        "schedule_next_check"
    }

    fn description(&self) -> &'static str {
        "Ask to be woken for another look in `minutes` (1..1440). Wakes are served by the next \
         timer tick after they are due (5-minute resolution)."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "minutes": {"type": "integer", "minimum": 1, "maximum": 1440,
                            "description": "How long from now"},
                "reason": {"type": "string", "description": "What to check then"}
            },
            "required": ["minutes", "reason"],
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
        if !(1..=1440).contains(&a.minutes) {
            return Ok(ToolResult::error(
                "invalid_args",
                json!({"message": format!("minutes must be 1..1440, got {}", a.minutes)}),
            ));
        }
        let reason = crate::text::clip(&a.reason, 200);
        if reason.is_empty() {
            return Ok(ToolResult::error(
                "invalid_args",
                json!({"message": "reason must not be empty"}),
            ));
        }
        let pending: i64 = ctx.store.conn.query_row(
            "SELECT COUNT(*) FROM wakes WHERE status = 'pending' AND created_by = 'agent'",
            [],
            |r| r.get(0),
        )?;
        if pending >= MAX_PENDING_AGENT_WAKES {
            return Ok(ToolResult::error(
                "invalid_args",
                json!({"message": format!("already {pending} pending wakes scheduled by the agent; the limit is {MAX_PENDING_AGENT_WAKES}")}),
            ));
        }
        let now = ctx.clock.now_ms();
        let due = now + a.minutes * 60_000;
        let id = wakes::add(
            &ctx.store.conn,
            due,
            &reason,
            "agent",
            Some(ctx.run_id),
            now,
        )?;
        Ok(ToolResult::ok(
            json!({"ok": true, "wake_id": id, "due_at": rfc3339(due)}),
            false,
            format!("wake #{id} in {} min", a.minutes),
        ))
    }
}
