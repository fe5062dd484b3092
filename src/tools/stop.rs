//! `stop_instance {instance_id, reason}`: destroy (or stop, per `vast.stop_mode`) one of our
//! instances, through the stop protections. [`stop`] is the same path for the operator's
//! `fleetagent instances stop ID [--force]`, where `--force` lifts the protections.

use anyhow::Result;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{parse_args, Actor, Tool, ToolCtx, ToolResult};
use crate::clock::Millis;
use crate::policy::stop::{self as plan, Answer, Ask, Done, Gate};
use crate::store::actions::{self, NewAction};
use crate::store::{instances, stops_in_flight};

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
        "Destroy (or stop, per stop_mode) one of OUR instances by its id. Refused for one \
         that is proving, for one started less than policy.min_rental_mins ago, for the last \
         live worker while proofs are queued, and while demand is unknown; flagged ones \
         (exited, offline, stuck loading) may always go."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "instance_id": {"type": "integer", "description": "an id from the state block"},
                "reason": {"type": "string", "description": "why, in your words (recorded)"}
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
/// (not ours, proving, last live worker, unknown demand).
/// Executes the stop plan (src/policy/stop.rs).
pub fn stop(
    ctx: &mut ToolCtx<'_>,
    instance_id: i64,
    reason: &str,
    force: bool,
) -> Result<ToolResult> {
    stop_as(ctx, instance_id, reason, force, false)
}

/// [`stop`], and with `destroy` a destroy whatever `vast.stop_mode` says (the operator's
/// `instances stop --all`).
pub fn stop_as(
    ctx: &mut ToolCtx<'_>,
    instance_id: i64,
    reason: &str,
    force: bool,
    destroy: bool,
) -> Result<ToolResult> {
    let reason = match crate::policy::launch::reason(reason) {
        Ok(r) => r,
        Err(r) => return Ok(r),
    };
    let operator = ctx.actor == Actor::Operator;
    let mut ask = Ask::new(ctx.config, instance_id, force, operator);
    if destroy {
        ask = ask.destroying();
    }
    let now = ctx.clock.now_ms();
    // Read at the call: a pause pressed while this pass runs holds its remaining stops.
    ctx.snapshot.paused = crate::store::ops::paused(&ctx.store.conn, now)?;
    let target = match plan::gate(&ask, ctx.snapshot, ctx.config) {
        Gate::Answer(a) => return answer(ctx, &ask, &reason, a, now),
        Gate::LookUp => {
            let gone = instances::by_vast_id(&ctx.store.conn, instance_id)?
                .filter(|r| r.gone_at.is_some())
                .map(|r| r.label);
            return Ok(plan::unknown(&ask, gone, ctx.snapshot));
        }
        Gate::Go(t) => *t,
    };
    // Ended since this pass's listing (the operator's `instances stop` meanwhile): nothing
    // is sent, nothing recorded (a race walkthrough saw the model credited with a second
    // destroy of an instance the operator had just destroyed, and a second stop of a spare
    // the operator had just stopped, which made it no longer the operator's).
    if let Some(done) = ended_meanwhile(ctx, &ask, &target, operator)? {
        return Ok(done);
    }
    let Some(vast) = ctx.services.vast.clone() else {
        return answer(ctx, &ask, &reason, plan::no_key(&target), now);
    };
    // A pass's call is marked before it goes (the operator's command marks its own): one
    // killed before its row leaves what the next pass settles (`stops_in_flight::settle`).
    // A destroy's mark says "sent" only once its spacing is over and it goes.
    let mark = (!operator)
        .then(|| mark_sending(ctx, &target, &reason, now))
        .transpose()?;
    ctx.store.fence("before a stop")?;
    // Asked when the call could go (after vast.ai's destroy spacing, before each retry): a
    // pause pressed, or the operator's stop of the instance, meanwhile holds it.
    let (conn, clock, destroys) = (&ctx.store.conn, ctx.clock, target.destroys());
    let withhold = || -> Option<String> {
        if operator {
            return None;
        }
        let why = match crate::store::ops::paused(conn, clock.now_ms()) {
            Ok(Some(p)) => Some(p.reason),
            Ok(None) => match instances::by_vast_id(conn, instance_id) {
                Ok(r) => r.and_then(|r| ended(&r, destroys)).map(String::from),
                Err(e) => Some(format!("the instance's row could not be read: {e}")),
            },
            Err(e) => Some(format!("the pause could not be read: {e}")),
        };
        match (why, mark) {
            (None, Some(m)) => stops_in_flight::sent(conn, m)
                .err()
                .map(|e| format!("its mark could not be written: {e}")),
            (why, _) => why,
        }
    };
    let result = if destroys {
        vast.destroy_instance_unless(target.vast_id(), &withhold)
    } else {
        vast.stop_instance_unless(target.vast_id(), &withhold)
    };
    crate::faults::point("stop-after-call")?;
    let after = ctx.clock.now_ms();
    if matches!(result, Err(crate::vast::VastError::Withheld(_))) {
        if let Some(m) = mark {
            stops_in_flight::landed(&ctx.store.conn, m)?;
        }
        if let Some(done) = ended_meanwhile(ctx, &ask, &target, operator)? {
            return Ok(done);
        }
        ctx.snapshot.paused = crate::store::ops::paused(&ctx.store.conn, after)?;
        if let Gate::Answer(a) = plan::gate(&ask, ctx.snapshot, ctx.config) {
            return answer(ctx, &ask, &reason, a, after);
        }
    }
    let s = match plan::after_call(&target, result.as_ref().copied(), after) {
        Done::Stopped(s) => s,
        Done::Failed(a) => {
            if let Some(m) = mark {
                stops_in_flight::landed(&ctx.store.conn, m)?;
            }
            return answer(ctx, &ask, &reason, a, after);
        }
    };
    // A host that failed us (a boot that never finished, exited, offline, unknown) is left
    // out of offer searches for `vast.offers.bad_host_hours`.
    let host_failure = ctx
        .snapshot
        .flagged(ctx.config)
        .into_iter()
        .find(|f| f.vast_id == instance_id)
        .filter(|f| plan::host_failure(f.kind))
        .and_then(|f| Some((target.row.as_ref()?.machine_id?, f.why)));
    let hours = ctx.config.vast.offers.bad_host_hours;
    let tx = ctx.store.immediate()?;
    if let Some((machine, why)) = &host_failure {
        let until = after + (hours * 3_600_000.0) as Millis;
        crate::store::bad_hosts::mark(&tx, *machine, why, until, after)?;
    }
    let action = actions::insert(
        &tx,
        &NewAction {
            run_id: (ctx.run_id > 0).then_some(ctx.run_id),
            kind: target.kind,
            outcome: s.entry.outcome,
            actor: ctx.actor.as_str(),
            instance_id: Some(instance_id),
            label: s.entry.label.as_deref(),
            dph: s.entry.dph,
            emergency: false,
            tool_call_id: Some(&ctx.call_id),
            reason: Some(&reason),
            detail: Some(&s.entry.detail),
            flag: s.flag,
            ..Default::default()
        },
        after,
    )?;
    if let Some(r) = &s.row {
        instances::upsert(&tx, r)?;
    }
    if let Some(m) = mark {
        stops_in_flight::landed(&tx, m)?;
    }
    tx.commit()?;
    let gpu = target.row.as_ref().and_then(|r| r.gpu_name.as_deref());
    super::journal_action(&ctx.store.conn, action, gpu);
    ctx.store.fence("recording a stop")?;
    if let Some((machine, _)) = host_failure {
        // The rest of this pass searches without it too.
        ctx.snapshot.bad_hosts.push(machine);
        if let Some(offers) = ctx.snapshot.offers.as_mut() {
            offers.retain(|o| o.machine_id != u64::try_from(machine).ok());
        }
    }
    ctx.snapshot.record_stop(instance_id, s.gone);
    if s.flag == Some(crate::store::actions::FlagKind::Silent) {
        // The silent breaker counts it from now, in this pass too.
        ctx.snapshot.silent_destroys_recent += 1;
    }
    if s.flag.is_some_and(plan::boot_failure) {
        // So does the boot breaker.
        let failure = crate::fleet::BootFailure {
            at: after,
            detail: s.entry.detail.clone(),
        };
        ctx.snapshot.boot_failures.insert(0, failure);
        ctx.snapshot
            .boot_failures
            .truncate(crate::fleet::BOOT_FAILURES_MAX);
    }
    Ok(plan::stopped(&target, &s, ctx.snapshot))
}

/// The instance `target` names ended since this pass's listing, by the table's row now (the
/// operator's stop meanwhile): gone, or stopped for a stop. The answer, with nothing sent
/// and nothing recorded; None when it did not (or for the operator's own stop).
fn ended_meanwhile(
    ctx: &mut ToolCtx<'_>,
    ask: &Ask,
    target: &plan::Target,
    operator: bool,
) -> Result<Option<ToolResult>> {
    let id = target.instance_id;
    let Some(row) = instances::by_vast_id(&ctx.store.conn, id)?.filter(|_| !operator) else {
        return Ok(None);
    };
    Ok(match ended(&row, target.destroys()) {
        Some("gone") => {
            ctx.snapshot.record_stop(id, true);
            Some(plan::unknown(ask, Some(row.label), ctx.snapshot))
        }
        Some(_) => {
            ctx.snapshot.record_stop(id, false);
            Some(ToolResult::ok(
                json!({"ok": true, "instance_id": id, "already": "stopped"}),
                false,
                format!("{id} already stopped"),
            ))
        }
        None => None,
    })
}

/// How the table's row says the instance ended since the listing: "gone", or "stopped" for a
/// stop (a destroy still ends a stopped one); None while it has not.
fn ended(row: &instances::InstanceRow, destroys: bool) -> Option<&'static str> {
    if row.gone_at.is_some() {
        Some("gone")
    } else if !destroys && row.state == crate::fleet::STOPPED {
        Some("stopped")
    } else {
        None
    }
}

/// Mark the pass's call on `target` in flight at `at`; its mark.
fn mark_sending(ctx: &ToolCtx<'_>, target: &plan::Target, reason: &str, at: Millis) -> Result<i64> {
    let row = target.row.as_ref();
    let mark = stops_in_flight::Mark {
        run_id: (ctx.run_id > 0).then_some(ctx.run_id),
        actor: ctx.actor.as_str(),
        kind: target.kind,
        instance_id: target.instance_id,
        label: row.map(|r| r.label.as_str()),
        dph: row.and_then(|r| r.dph),
        tool_call_id: Some(&ctx.call_id),
        reason: Some(reason),
        flag: target
            .flag
            .as_ref()
            .filter(|_| target.flagged)
            .map(|f| f.kind.as_str()),
        // A stop goes at once; a destroy waits for its spacing first (`sent` then).
        sent: !target.destroys(),
    };
    stops_in_flight::sending(&ctx.store.conn, &mark, at)
}

/// A stop that ends without a change: its row, if any, recorded at `at`.
fn answer(
    ctx: &mut ToolCtx<'_>,
    ask: &Ask,
    reason: &str,
    a: Answer,
    at: Millis,
) -> Result<ToolResult> {
    if let Some(e) = &a.record {
        let id = actions::insert(
            &ctx.store.conn,
            &NewAction {
                run_id: (ctx.run_id > 0).then_some(ctx.run_id),
                kind: e.kind.unwrap_or(ask.kind),
                outcome: e.outcome,
                actor: ctx.actor.as_str(),
                instance_id: Some(ask.instance_id),
                label: e.label.as_deref(),
                dph: e.dph,
                tool_call_id: Some(&ctx.call_id),
                reason: Some(reason),
                detail: Some(&e.detail),
                code: a.code,
                ..Default::default()
            },
            at,
        )?;
        super::journal_action(&ctx.store.conn, id, None);
    }
    Ok(a.result)
}
