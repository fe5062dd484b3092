//! `stop_instance {instance_id, reason}`: destroy (or stop, per `vast.stop_mode`) one of our
//! instances, through the stop protections. [`stop`] is the same path for the operator's
//! `fleetagent instances stop ID [--force]`, where `--force` lifts the protections.

use anyhow::Result;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{parse_args, Actor, Tool, ToolCtx, ToolResult};
use crate::config::StopMode;
use crate::fleet::{GONE, STOPPED};
use crate::policy::guardrails::{self, Refusal, StopFacts};
use crate::store::actions::{self, NewAction};
use crate::store::instances;
use crate::text::clip;
use crate::vast::VastError;

pub struct StopInstance;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    instance_id: i64,
    reason: String,
}

impl Tool for StopInstance {
    fn name(&self) -> &'static str {
        "stop_instance"
    }

    fn description(&self) -> &'static str {
        "Destroy (or stop, per the configured stop_mode) one of OUR instances by its vast.ai id. \
         Refused for an instance that is proving, for the last live worker while proofs are \
         queued, and while demand is unknown; flagged instances (exited, offline, stuck \
         loading) may always go."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "instance_id": {"type": "integer", "description": "vast.ai instance id (list_instances)"},
                "reason": {"type": "string", "description": "Why (recorded)"}
            },
            "required": ["instance_id", "reason"],
            "additionalProperties": false
        })
    }

    fn mutating(&self) -> bool {
        true
    }

    fn call(&self, ctx: &mut ToolCtx<'_>, args: Value) -> Result<ToolResult> {
        let a: Args = match parse_args(args) {
            Ok(a) => a,
            Err(r) => return Ok(r),
        };
        stop(ctx, a.instance_id, &a.reason, false)
    }
}

/// Stop one instance. `force` counts only for [`Actor::Operator`]: it lifts the protections
/// (not ours, proving, last live worker, unknown demand). The fallback rules never stop.
pub fn stop(
    ctx: &mut ToolCtx<'_>,
    instance_id: i64,
    reason: &str,
    force: bool,
) -> Result<ToolResult> {
    let reason = clip(reason, 200);
    if reason.is_empty() {
        return Ok(ToolResult::error(
            "invalid_args",
            json!({"message": "reason must not be empty"}),
        ));
    }
    let forced = force && ctx.actor == Actor::Operator;
    let kind = match ctx.config.vast.stop_mode {
        StopMode::Destroy => "destroy",
        StopMode::Stop => "stop",
    };
    let now = ctx.clock.now_ms();
    if ctx.actor == Actor::Fallback {
        let r = Refusal::Protected {
            message: "the fallback rules only launch; stops wait for the model or the operator"
                .into(),
        };
        return refuse(ctx, kind, instance_id, None, &r, &reason, now);
    }

    let row = ctx.snapshot.find(instance_id).cloned();
    let foreign = ctx.snapshot.foreign.contains(&instance_id);
    if row.is_none() && !foreign {
        // Ours, and already gone on vast.ai (destroyed earlier, by us or by hand): stopped.
        if let Some(gone) = crate::store::instances::by_vast_id(&ctx.store.conn, instance_id)?
            .filter(|r| r.gone_at.is_some())
        {
            return Ok(ToolResult::ok(
                json!({"ok": true, "instance_id": instance_id, "label": gone.label, "already": "gone"}),
                false,
                format!("{instance_id} already gone"),
            ));
        }
        // Neither in our table nor on the account's listing: refused even when forced, so a
        // typo cannot destroy an instance nobody can see.
        let message = match &ctx.snapshot.listing_error {
            Some(e) if forced => format!(
                "instance {instance_id} is not one of ours, and the vast.ai listing failed ({}), so it cannot be checked",
                clip(e, 200)
            ),
            _ => format!(
                "instance {instance_id} is not one of ours (list_instances shows them)"
            ),
        };
        return Ok(ToolResult::error(
            "invalid_args",
            json!({ "message": message }),
        ));
    }
    if let Some(r) = &row {
        if r.state == STOPPED && kind == "stop" {
            return Ok(ToolResult::ok(
                json!({"ok": true, "instance_id": instance_id, "already": "stopped"}),
                false,
                format!("{instance_id} already stopped"),
            ));
        }
    }
    let demand = ctx.snapshot.demand.as_ref();
    let live_worker = match (&row, demand) {
        (Some(r), Some(d)) => r.machine_name.as_ref().is_some_and(|m| {
            d.workers
                .iter()
                .any(|w| &w.machine_name == m && !w.cordoned)
        }),
        _ => false,
    };
    let facts = StopFacts {
        instance_id,
        ours: row.is_some(),
        flagged: ctx.snapshot.is_flagged(ctx.config, instance_id),
        state: row.as_ref().map(|r| r.state.clone()).unwrap_or_default(),
        live_worker,
        live_workers: demand.map(|d| d.live_workers()).unwrap_or(0),
        queued: demand
            .map(|d| d.pending + d.running_stale + d.ps_waiting.unwrap_or(0))
            .unwrap_or(0),
        demand_known: demand.is_some(),
        forced,
    };
    let label = row.as_ref().map(|r| r.label.clone());
    if let Err(r) = guardrails::check_stop(&facts) {
        return refuse(ctx, kind, instance_id, label.as_deref(), &r, &reason, now);
    }

    if ctx.config.policy.dry_run {
        record(
            ctx,
            kind,
            "dry_run",
            instance_id,
            label.as_deref(),
            &reason,
            "dry_run",
            now,
        )?;
        return Ok(ToolResult::error(
            "dry_run",
            json!({
                "would": format!("{kind} instance {instance_id}"),
                "message": "policy.dry_run is on: nothing was sent to vast.ai; the stop protections allow this",
            }),
        ));
    }
    let Some(vast) = ctx.services.vast.clone() else {
        let r = Refusal::NotConfigured {
            key: None,
            message: "no vast.ai API key: set VAST_API_KEY or the vast_api_key credential".into(),
        };
        return refuse(ctx, kind, instance_id, label.as_deref(), &r, &reason, now);
    };
    let id = instance_id.max(0) as u64;
    let result = match kind {
        "destroy" => vast.destroy_instance(id),
        _ => vast.stop_instance(id),
    };
    crate::faults::point("stop-after-call")?;
    let after = ctx.clock.now_ms();
    let destroyed = kind == "destroy";
    match result {
        Ok(()) | Err(VastError::NoSuchInstance(_)) => {
            let detail = match &result {
                Err(_) => "already gone on vast.ai",
                Ok(()) => {
                    if facts.flagged {
                        "flagged: earned nothing"
                    } else if forced {
                        "forced by the operator"
                    } else {
                        "ok"
                    }
                }
            };
            let gone = destroyed || result.is_err();
            let tx = ctx.store.immediate()?;
            actions::insert(
                &tx,
                &NewAction {
                    run_id: (ctx.run_id > 0).then_some(ctx.run_id),
                    kind,
                    outcome: "ok",
                    actor: ctx.actor.as_str(),
                    instance_id: Some(instance_id),
                    label: label.as_deref(),
                    dph: row.as_ref().and_then(|r| r.dph),
                    emergency: false,
                    tool_call_id: Some(&ctx.call_id),
                    reason: Some(&reason),
                    detail: Some(detail),
                    ..Default::default()
                },
                after,
            )?;
            if let Some(mut r) = row.clone() {
                if gone {
                    r.state = GONE.into();
                    r.gone_at = Some(after);
                } else {
                    r.state = STOPPED.into();
                    r.machine_name = None;
                }
                r.state_since = after;
                instances::upsert(&tx, &r)?;
            }
            tx.commit()?;
            ctx.snapshot.record_stop(instance_id, gone);
            let done = if gone { "destroyed" } else { "stopped" };
            Ok(ToolResult::ok(
                json!({
                    "ok": true,
                    "instance_id": instance_id,
                    "done": done,
                    "note": if result.is_err() { Some("it was already gone") } else { None },
                    "fleet_dph": (ctx.snapshot.fleet_dph() * 100.0).round() / 100.0,
                }),
                true,
                format!("{done} {instance_id}"),
            ))
        }
        Err(e) => {
            let msg = clip(&e.to_string(), 300);
            record(
                ctx,
                kind,
                "failed",
                instance_id,
                label.as_deref(),
                &reason,
                &msg,
                after,
            )?;
            Ok(ToolResult::error(
                "vast_error",
                json!({"message": msg, "instance_id": instance_id}),
            ))
        }
    }
}

fn refuse(
    ctx: &mut ToolCtx<'_>,
    kind: &str,
    instance_id: i64,
    label: Option<&str>,
    r: &Refusal,
    reason: &str,
    now: i64,
) -> Result<ToolResult> {
    let result = r.to_result();
    record(
        ctx,
        kind,
        "refused",
        instance_id,
        label,
        reason,
        &result.content.to_string(),
        now,
    )?;
    Ok(result)
}

#[allow(clippy::too_many_arguments)]
fn record(
    ctx: &mut ToolCtx<'_>,
    kind: &str,
    outcome: &str,
    instance_id: i64,
    label: Option<&str>,
    reason: &str,
    detail: &str,
    now: i64,
) -> Result<()> {
    actions::insert(
        &ctx.store.conn,
        &NewAction {
            run_id: (ctx.run_id > 0).then_some(ctx.run_id),
            kind,
            outcome,
            actor: ctx.actor.as_str(),
            instance_id: Some(instance_id),
            label,
            tool_call_id: Some(&ctx.call_id),
            reason: Some(reason),
            detail: Some(detail),
            ..Default::default()
        },
        now,
    )?;
    Ok(())
}
