//! `launch_instance {offer_id?, reason}`: rent one instance, through every guardrail, with an
//! idempotent intent. The intent (its label made from the run id and the tool call id) is
//! committed before the create call and settled after it; a create that may have happened is
//! left open for the next pass's reconciliation and never retried blindly.

use std::collections::BTreeMap;

use anyhow::Result;
use serde::Deserialize;
use serde_json::{json, Value};

use super::search::{best_offer, config_query, matches_config, offer_json};
use super::{parse_args, Tool, ToolCtx, ToolResult};
use crate::config::{EnvValue, OfferType};
use crate::fleet::LAUNCHING;
use crate::policy::guardrails::{self, LaunchFacts, Refusal};
use crate::store::actions::{self, NewAction};
use crate::store::instances::{self, InstanceRow};
use crate::text::clip;
use crate::vast::{CreateRequest, Offer, VastError};

/// The worker environment variable that carries the instance's label (defined with the
/// config, which refuses it in `[vast.env]`).
pub use crate::config::LABEL_ENV;

/// How many offers a launch looks at (the cheapest ones matching `[vast.offers]`).
const SEARCH_LIMIT: u32 = 64;

pub struct LaunchInstance;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    #[serde(default)]
    offer_id: Option<u64>,
    reason: String,
}

/// The label of a launch: `<prefix>-r<run>-<8 hex of the call id's FNV-1a hash>`. The same
/// run and call always give the same label, so a repeated call finds its own intent.
pub fn launch_label(prefix: &str, run_id: i64, call_id: &str) -> String {
    format!(
        "{prefix}-r{run_id}-{:08x}",
        fnv1a(call_id.as_bytes()) as u32
    )
}

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h ^ (h >> 32)
}

impl Tool for LaunchInstance {
    fn name(&self) -> &'static str {
        "launch_instance"
    }

    fn description(&self) -> &'static str {
        "Rent ONE vast.ai instance as a PSProve worker. Without offer_id the best offer matching \
         the configured filters (lowest $/h per proof/h) is taken. Several launches are several \
         calls. Money caps, the instance cap and the launch window are enforced; a refusal says \
         which limit and when to retry."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "offer_id": {"type": "integer", "minimum": 1,
                             "description": "An offer id from search_offers; omit for the best offer"},
                "reason": {"type": "string", "description": "Why this launch (recorded)"}
            },
            "required": ["reason"],
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
        let reason = clip(&a.reason, 200);
        if reason.is_empty() {
            return Ok(ToolResult::error(
                "invalid_args",
                json!({"message": "reason must not be empty"}),
            ));
        }
        launch(ctx, a.offer_id, &reason)
    }
}

fn launch(ctx: &mut ToolCtx<'_>, offer_id: Option<u64>, reason: &str) -> Result<ToolResult> {
    let config = ctx.config;
    let policy = &config.policy;
    let now = ctx.clock.now_ms();
    let label = launch_label(&config.vast.label_prefix, ctx.run_id, &ctx.call_id);

    // The same call again (a retried tool call): answer from the ledger, never rent twice.
    if let Some(prev) = actions::launch_by_label(&ctx.store.conn, &label)? {
        return Ok(ToolResult::ok(
            json!({
                "ok": prev.outcome == "ok",
                "already": prev.outcome,
                "label": label,
                "instance_id": prev.instance_id,
                "message": "this call was already executed; nothing new was sent to vast.ai",
            }),
            false,
            format!("launch {label} already {}", prev.outcome),
        ));
    }

    if let Err(r) = guardrails::check_configured(config) {
        return refuse(ctx, &r, offer_id, reason, now);
    }
    let workers_dead = ctx.snapshot.workers_dead();
    let fleet_dph = ctx.snapshot.fleet_dph();
    let instances = ctx.snapshot.billing_count();
    let spent_today = ctx.snapshot.spent_today;
    let window = ctx.snapshot.window_launches.clone();
    let facts = LaunchFacts {
        now,
        fleet_dph,
        instances,
        window_launches: &window,
        workers_dead,
        spent_today,
    };
    let slots = match guardrails::check_launch_slots(&facts, policy) {
        Ok(w) => w,
        Err(r) => return refuse(ctx, &r, offer_id, reason, now),
    };
    // The daily cap with the fleet as it is: no offer could fit.
    if let Err(r) = guardrails::check_launch_money(&facts, 0.0, policy) {
        if r.code() == "daily_spend" {
            return refuse(ctx, &r, offer_id, reason, now);
        }
    }

    if policy.dry_run {
        let detail = "dry_run: would search offers and launch one";
        record(
            ctx,
            "dry_run",
            None,
            offer_id,
            None,
            workers_dead,
            reason,
            detail,
            now,
        )?;
        return Ok(ToolResult::error(
            "dry_run",
            json!({
                "would": "launch_instance",
                "offer_id": offer_id,
                "window": format!("{}/{} used", slots.used, slots.limit),
                "message": "policy.dry_run is on: nothing was sent to vast.ai; the instance cap, \
                            the launch window and the daily cap allow this launch",
            }),
        ));
    }

    let Some(vast) = ctx.services.vast.clone() else {
        let r = Refusal::NotConfigured {
            key: None,
            message: "no vast.ai API key: set VAST_API_KEY or the vast_api_key credential".into(),
        };
        return refuse(ctx, &r, offer_id, reason, now);
    };

    // Worker environment: [vast.env] with credentials resolved, plus the label.
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    for (name, value) in &config.vast.env {
        let v = match value {
            EnvValue::Literal(s) => s.clone(),
            EnvValue::Credential(crate::config::CredentialRef { credential }) => {
                match crate::secrets::require_credential(ctx.env, credential) {
                    Ok(s) => s.expose().to_string(),
                    Err(e) => {
                        let r = Refusal::NotConfigured {
                            key: Some(format!("vast.env.{name}")),
                            message: clip(&format!("{e:#}"), 300),
                        };
                        return refuse(ctx, &r, offer_id, reason, now);
                    }
                }
            }
        };
        env.insert(name.clone(), v);
    }
    env.insert(LABEL_ENV.into(), label.clone());

    // The offers matching [vast.offers], searched once per pass.
    let offers = match &ctx.snapshot.offers {
        Some(o) => o.clone(),
        None => match vast.search_offers(&config_query(config, None, None, SEARCH_LIMIT)) {
            Ok(o) => {
                let o: Vec<Offer> = o
                    .into_iter()
                    .filter(|o| matches_config(o, config))
                    .collect();
                ctx.snapshot.offers = Some(o.clone());
                o
            }
            Err(e) => return vast_failure(ctx, &e, offer_id, reason, now),
        },
    };
    let headroom = guardrails::offer_headroom(&facts, policy);
    let offer: Offer = match offer_id {
        Some(id) => match offers.iter().find(|o| o.id == id) {
            Some(o) => o.clone(),
            None => {
                let msg = format!(
                    "offer {id} is not among the current offers matching [vast.offers] (unknown, \
                     taken, or outside the configured filters); call search_offers, or omit offer_id"
                );
                record(
                    ctx,
                    "refused",
                    None,
                    Some(id),
                    None,
                    workers_dead,
                    reason,
                    &msg,
                    now,
                )?;
                return Ok(ToolResult::error("invalid_args", json!({ "message": msg })));
            }
        },
        None => {
            if offers.is_empty() {
                let msg = "vast.ai has no rentable offer matching [vast.offers] right now";
                record(
                    ctx,
                    "failed",
                    None,
                    None,
                    None,
                    workers_dead,
                    reason,
                    msg,
                    now,
                )?;
                return Ok(ToolResult::error("vast_error", json!({ "message": msg })));
            }
            let fitting: Vec<Offer> = offers
                .iter()
                .filter(|o| o.dph_total <= headroom + 1e-9)
                .cloned()
                .collect();
            match best_offer(&fitting, config) {
                Some(o) => o.clone(),
                // Nothing fits: refuse on the cheapest, naming the limit it breaks.
                None => offers
                    .iter()
                    .min_by(|a, b| a.dph_total.total_cmp(&b.dph_total))
                    .cloned()
                    .unwrap_or_else(|| offers[0].clone()),
            }
        }
    };
    if let Err(r) = guardrails::check_launch_money(&facts, offer.dph_total, policy) {
        return refuse(ctx, &r, Some(offer.id), reason, now);
    }

    // The intent (and its launching row) is committed before the create is sent.
    let row = InstanceRow {
        label: label.clone(),
        vast_id: None,
        state: LAUNCHING.into(),
        actual_status: None,
        status_msg: None,
        gpu_name: Some(offer.gpu_name.clone()),
        dph: Some(offer.dph_total),
        offer_id: Some(offer.id as i64),
        public_ip: None,
        machine_name: None,
        launched_run: (ctx.run_id > 0).then_some(ctx.run_id),
        adopted: false,
        created_at: now,
        state_since: now,
        last_seen_at: None,
        gone_at: None,
    };
    let intent_id = {
        let tx = ctx.store.immediate()?;
        let id = actions::insert(
            &tx,
            &NewAction {
                run_id: (ctx.run_id > 0).then_some(ctx.run_id),
                kind: "launch",
                outcome: "intent",
                actor: ctx.actor.as_str(),
                instance_id: None,
                label: Some(&label),
                offer_id: Some(offer.id as i64),
                dph: Some(offer.dph_total),
                emergency: workers_dead,
                tool_call_id: Some(&ctx.call_id),
                reason: Some(reason),
                detail: Some(&format!(
                    "offer {} {} ${:.4}/h",
                    offer.id, offer.gpu_name, offer.dph_total
                )),
            },
            now,
        )?;
        instances::upsert(&tx, &row)?;
        tx.commit()?;
        id
    };
    crate::faults::point("launch-after-intent")?;

    let bid_price = match config.vast.offers.offer_type {
        OfferType::OnDemand => None,
        OfferType::Interruptible => Some(offer.min_bid.unwrap_or(offer.dph_total)),
    };
    let req = CreateRequest {
        offer_id: offer.id,
        image: config.vast.image.clone().unwrap_or_default(),
        disk_gb: config.vast.disk_gb,
        label: label.clone(),
        env,
        onstart: config.vast.onstart.clone(),
        bid_price,
    };
    let created = vast.create_instance(&req);
    if let Some(cache) = ctx.snapshot.offers.as_mut() {
        // Rented now, or taken by someone else: either way not to be tried again this pass.
        cache.retain(|o| o.id != offer.id);
    }
    let after = ctx.clock.now_ms();
    match created {
        Ok(instance_id) => {
            crate::faults::point("launch-after-create")?;
            let mut row = row;
            row.vast_id = Some(instance_id as i64);
            let tx = ctx.store.immediate()?;
            actions::settle(&tx, intent_id, "ok", Some(instance_id as i64), None, after)?;
            instances::upsert(&tx, &row)?;
            tx.commit()?;
            ctx.snapshot.record_launch(row, now);
            let w = guardrails::window_state(
                &ctx.snapshot.window_launches,
                after,
                policy,
                workers_dead,
            );
            Ok(ToolResult::ok(
                json!({
                    "ok": true,
                    "instance_id": instance_id,
                    "label": label,
                    "offer": offer_json(&offer, config),
                    "fleet_dph": round2(ctx.snapshot.fleet_dph()),
                    "window": format!("{}/{} used{}", w.used, w.limit, if w.emergency { " (emergency)" } else { "" }),
                }),
                true,
                format!(
                    "launched {instance_id} ({} ${:.2}/h){}",
                    offer.gpu_name,
                    offer.dph_total,
                    if workers_dead { " emergency" } else { "" }
                ),
            ))
        }
        Err(VastError::CreateFailed { new_contract, msg })
            if matches!(
                vast.destroy_instance(new_contract),
                Ok(()) | Err(VastError::NoSuchInstance(_))
            ) =>
        {
            // vast.ai reported a failure and made an instance anyway (a stopped one, for a
            // bid too low): it would bill its disk and never prove, so it is destroyed at
            // once and the launch counts as failed. (Were the destroy to fail, the arm below
            // keeps the intent open and the next pass adopts the instance.)
            let msg = clip(
                &format!(
                    "create failed ({msg}); vast.ai made instance {new_contract} anyway, destroyed"
                ),
                300,
            );
            let tx = ctx.store.immediate()?;
            actions::settle(&tx, intent_id, "failed", None, Some(&msg), after)?;
            instances::delete(&tx, &label)?;
            tx.commit()?;
            Ok(ToolResult::error(
                "vast_error",
                json!({ "message": msg, "offer_id": offer.id, "destroyed": new_contract }),
            ))
        }
        Err(e) if e.may_have_created() => {
            // Left open: the next pass looks for this label in the listing (adopts it if it
            // is there, settles it failed if it never shows up). It counts meanwhile.
            let msg = clip(&e.to_string(), 300);
            actions::note(&ctx.store.conn, intent_id, &msg)?;
            ctx.snapshot.record_launch(row, now);
            Ok(ToolResult::error(
                "vast_error",
                json!({
                    "message": msg,
                    "label": label,
                    "may_have_created": true,
                    "note": "the create may have gone through: it is kept as an open launch and the next pass checks the listing for its label; do not launch again for it",
                }),
            ))
        }
        Err(e) => {
            let msg = clip(&e.to_string(), 300);
            let tx = ctx.store.immediate()?;
            actions::settle(&tx, intent_id, "failed", None, Some(&msg), after)?;
            instances::delete(&tx, &label)?;
            tx.commit()?;
            let mut details = json!({ "message": msg, "offer_id": offer.id });
            if matches!(e, VastError::NoSuchAsk(_)) {
                details["note"] = json!("the offer was taken meanwhile; launch again for another");
            }
            Ok(ToolResult::error("vast_error", details))
        }
    }
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// A refusal: recorded in the ledger (outcome `refused`, no label) and returned.
fn refuse(
    ctx: &mut ToolCtx<'_>,
    r: &Refusal,
    offer_id: Option<u64>,
    reason: &str,
    now: i64,
) -> Result<ToolResult> {
    let result = r.to_result();
    let workers_dead = ctx.snapshot.workers_dead();
    record(
        ctx,
        "refused",
        None,
        offer_id,
        None,
        workers_dead,
        reason,
        &result.content.to_string(),
        now,
    )?;
    Ok(result)
}

fn vast_failure(
    ctx: &mut ToolCtx<'_>,
    e: &VastError,
    offer_id: Option<u64>,
    reason: &str,
    now: i64,
) -> Result<ToolResult> {
    let msg = clip(&e.to_string(), 300);
    let workers_dead = ctx.snapshot.workers_dead();
    record(
        ctx,
        "failed",
        None,
        offer_id,
        None,
        workers_dead,
        reason,
        &msg,
        now,
    )?;
    Ok(ToolResult::error("vast_error", json!({ "message": msg })))
}

#[allow(clippy::too_many_arguments)]
fn record(
    ctx: &mut ToolCtx<'_>,
    outcome: &str,
    label: Option<&str>,
    offer_id: Option<u64>,
    dph: Option<f64>,
    emergency: bool,
    reason: &str,
    detail: &str,
    now: i64,
) -> Result<()> {
    actions::insert(
        &ctx.store.conn,
        &NewAction {
            run_id: (ctx.run_id > 0).then_some(ctx.run_id),
            kind: "launch",
            outcome,
            actor: ctx.actor.as_str(),
            instance_id: None,
            label,
            offer_id: offer_id.map(|o| o as i64),
            dph,
            emergency,
            tool_call_id: Some(&ctx.call_id),
            reason: Some(reason),
            detail: Some(detail),
        },
        now,
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_stable_short_and_distinct() {
        let a = launch_label("fleetagent", 42, "call_abc");
        assert_eq!(a, launch_label("fleetagent", 42, "call_abc"));
        assert!(a.starts_with("fleetagent-r42-"), "{a}");
        assert_eq!(a.len(), "fleetagent-r42-".len() + 8);
        assert_ne!(a, launch_label("fleetagent", 42, "call_abd"));
        assert_ne!(a, launch_label("fleetagent", 43, "call_abc"));
        assert!(crate::fleet::is_ours(Some(&a), "fleetagent"));
    }
}
