//! `schedule_next_check {minutes: 1..1440, reason}`: a wake for a later pass. Bounded so a
//! model cannot flood the wake table; the bounds are the rules of [`crate::wakes`].

use anyhow::Result;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{parse_args, Tool, ToolCtx, ToolResult};
use crate::clock::rfc3339;
use crate::wakes::{MAX_AGENT_MINUTES, MIN_AGENT_MINUTES};
use crate::{store, wakes};

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
        "Be woken for another look in `minutes` (1..1440), at the first 5-minute tick after."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "minutes": {"type": "integer", "minimum": MIN_AGENT_MINUTES, "maximum": MAX_AGENT_MINUTES,
                            "description": "from now"},
                "reason": {"type": "string", "description": "what to check then"}
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
        let refused =
            |message: String| ToolResult::error("invalid_args", json!({ "message": message }));
        let reason = match wakes::agent_request(a.minutes, &a.reason) {
            Ok(r) => r,
            Err(message) => return Ok(refused(message)),
        };
        if let Some(result) = reset_since(ctx)? {
            return Ok(result);
        }
        let pending = store::wakes::count_pending_by(&ctx.store.conn, wakes::BY_AGENT)?;
        if let Err(message) = wakes::agent_room(pending) {
            return Ok(refused(message));
        }
        let now = ctx.clock.now_ms();
        let due = wakes::agent_due(now, a.minutes);
        let id = store::wakes::add(
            &ctx.store.conn,
            due,
            &reason,
            wakes::BY_AGENT,
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

/// The operator reset the session while this pass ran (`reset-session` cancels the old
/// conversation's wakes): a wake the old conversation asks for now is not scheduled, or it
/// would wake the new session with the old one's reason. None: the pass's session is current.
fn reset_since(ctx: &ToolCtx<'_>) -> Result<Option<ToolResult>> {
    if ctx.run_id <= 0 {
        return Ok(None);
    }
    let conn = &ctx.store.conn;
    let ran_in = store::runs::session_of(conn, ctx.run_id)?;
    let current = store::session::current(conn)?;
    Ok(ran_in.filter(|s| *s != current).map(|s| {
        ToolResult::ok(
            json!({"ok": false, "message": format!(
                "the operator reset the session (session {s} -> {current}) during this pass: no wake is scheduled for the old conversation"
            )}),
            false,
            "no wake: the session was reset".to_string(),
        )
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_description_states_the_bounds_of_wakes_rs() {
        let bounds = format!("({MIN_AGENT_MINUTES}..{MAX_AGENT_MINUTES})");
        assert!(ScheduleNextCheck.description().contains(&bounds));
        let p = ScheduleNextCheck.parameters();
        assert_eq!(p["properties"]["minutes"]["minimum"], MIN_AGENT_MINUTES);
        assert_eq!(p["properties"]["minutes"]["maximum"], MAX_AGENT_MINUTES);
    }
}
