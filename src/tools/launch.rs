//! `launch_instance {offer_id?, reason}`: rent one instance, through every guardrail, with an
//! idempotent intent. The intent (its label made from the run id and the tool call id) is
//! committed before the create call and settled after it; a create that may have happened is
//! left open for the next pass's reconciliation and never retried blindly.

use std::collections::BTreeMap;

use anyhow::Result;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{parse_args, Tool, ToolCtx, ToolResult};
use crate::clock::Millis;
use crate::config::EnvValue;
use crate::policy::launch::{self as plan, Answer, Create, Entry, Next, Settle};
use crate::store::actions::{self, NewAction};
use crate::store::instances;
use crate::vast::VastClient;

pub use crate::policy::launch::{launch_label, LABEL_ENV};

pub struct LaunchInstance;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    #[serde(default)]
    offer_id: Option<u64>,
    reason: String,
}

impl Tool for LaunchInstance {
    fn name(&self) -> &'static str {
        "launch_instance"
    }

    fn description(&self) -> &'static str {
        "Rent ONE vast.ai instance as a PSProve worker; several launches are several calls. \
         Without offer_id: the best profitable offer ($/h per proof/h). Money caps, the \
         launch window and the profit margin are enforced; a refusal says which and when to \
         retry."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "offer_id": {"type": "integer", "minimum": 1,
                             "description": "omit unless search_offers returned it"},
                "reason": {"type": "string", "description": "why, in your words (recorded)"}
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
        match plan::reason(&a.reason) {
            Ok(reason) => launch(ctx, a.offer_id, &reason),
            Err(r) => Ok(r),
        }
    }
}

/// Execute the launch plan (src/policy/launch.rs): each step's answer is recorded and
/// returned, or its calls made and their answers handed to the next step.
fn launch(ctx: &mut ToolCtx<'_>, offer_id: Option<u64>, reason: &str) -> Result<ToolResult> {
    let config = ctx.config;
    let now = ctx.clock.now_ms();
    // Read at the call, not at the observation: a pause (or `instances stop --all`) pressed
    // while this pass runs holds its remaining calls (and `brake` asks again before each
    // create, the client once more when the create could go).
    ctx.snapshot.paused = crate::store::ops::paused(&ctx.store.conn, now)?;
    let ask = plan::Ask::new(
        ctx.snapshot,
        config,
        ctx.run_id,
        &ctx.call_id,
        offer_id,
        now,
    );
    let prev = actions::launch_by_label(&ctx.store.conn, &ask.label)?;
    if let Some(a) = plan::gate(&ask, config, prev.as_ref()) {
        return answer(ctx, reason, a, now);
    }
    if let Some(a) = braked(ctx, &ask, offer_id, now)? {
        return answer(ctx, reason, a, now);
    }
    let Some(vast) = ctx.services.vast.clone() else {
        return answer(ctx, reason, plan::no_key(&ask), now);
    };
    if let Some(row) = plan::restart_candidate(&ask, ctx.snapshot, config) {
        if let Some(done) = restart(ctx, vast.as_ref(), &row, reason)? {
            return Ok(done);
        }
    }
    let env = match worker_env(ctx) {
        Ok(env) => env,
        Err((name, e)) => return answer(ctx, reason, plan::env_refused(&ask, &name, &e), now),
    };
    let image_login = match crate::secrets::lookup(ctx.env, crate::secrets::Kind::VastImageLogin) {
        Ok(l) => l,
        Err(e) => {
            let name = crate::secrets::Kind::VastImageLogin.credential();
            return answer(
                ctx,
                reason,
                plan::env_refused(&ask, name, &format!("{e:#}")),
                now,
            );
        }
    };
    if let Some(query) = plan::search(ctx.snapshot, config) {
        let found = match ctx.snapshot.search_quota_this_pass {
            // Said once this pass: not asked again (each ask is counted against the quota).
            true => Err(crate::vast::VastError::SearchQuota {
                reset: ctx.snapshot.search_quota.clone().unwrap_or_default(),
            }),
            false => {
                let found = vast.search_offers(&query);
                super::note_search_quota(ctx, &found, now)?;
                found
            }
        };
        match plan::searched(&ask, config, &query.exclude_machines, found) {
            Ok(found) => {
                if found.is_empty() && !query.exclude_machines.is_empty() {
                    if let Some(reset) = left_out_offers(ctx, vast.as_ref(), &query, now)? {
                        // The quota ran out on the second search: said as such, and the
                        // pass's later launches meet it too (no offers cached).
                        let quota = Err(crate::vast::VastError::SearchQuota { reset });
                        if let Err(a) = plan::searched(&ask, config, &[], quota) {
                            return answer(ctx, reason, *a, now);
                        }
                    }
                }
                ctx.snapshot.offers = Some(found);
            }
            Err(a) => return answer(ctx, reason, *a, now),
        }
    }
    let mut ask = ask;
    ask.left_out_hosts = ctx.snapshot.left_out_offers.clone();
    let mut now = now;
    let mut attempt = 0;
    loop {
        attempt += 1;
        let offers = ctx.snapshot.offers.as_deref().unwrap_or_default();
        let mut create = match plan::choose(&ask, config, offers, env.clone()) {
            Ok(create) => create,
            Err(a) => return answer(ctx, reason, *a, now),
        };
        create.request.image_login = image_login.clone();
        // The search (up to vast.timeout_secs) or a taken offer's retry took time.
        if let Some(a) = braked(ctx, &ask, offer_id, ctx.clock.now_ms())? {
            return answer(ctx, reason, a, now);
        }
        let (result, taken) = rent(ctx, vast.as_ref(), &ask, &create, reason)?;
        if !taken || offer_id.is_some() || attempt > plan::TAKEN_RETRIES {
            return Ok(result);
        }
        // The best offer was taken between the search and the create: the caller asked for
        // the best there is, so the next one is tried, under a label of its own and through
        // every guardrail again (the failed attempt is in the ledger and the journal).
        now = ctx.clock.now_ms();
        let call = plan::taken_retry_call_id(&ctx.call_id, attempt);
        ask = plan::Ask::new(ctx.snapshot, config, ctx.run_id, &call, None, now);
        if let Some(a) = plan::gate(&ask, config, None) {
            return answer(ctx, reason, a, now);
        }
    }
}

/// The operator's hand as the database holds it now (`super::brake::launch_held`): a
/// refusal of this launch, or None.
fn braked(
    ctx: &ToolCtx<'_>,
    ask: &plan::Ask,
    offer_id: Option<u64>,
    now: Millis,
) -> Result<Option<Answer>> {
    let held = super::brake::launch_held(&ctx.store.conn, ctx.config, ctx.actor, now)?;
    Ok(held.map(|r| Answer::refused(ask, &r, offer_id)))
}

/// Start a stopped instance of ours again (`stop_mode = "stop"`), recorded as a `start`
/// action; `None` when vast.ai refused (recorded `failed`): the launch rents instead.
fn restart(
    ctx: &mut ToolCtx<'_>,
    vast: &dyn VastClient,
    row: &crate::store::instances::InstanceRow,
    reason: &str,
) -> Result<Option<ToolResult>> {
    let id = row.vast_id.unwrap_or(0);
    ctx.store.fence("before starting an instance again")?;
    let answer = vast.start_instance(id.max(0) as u64);
    let after = ctx.clock.now_ms();
    let done = plan::after_start(row, answer.as_ref().copied(), after);
    let (outcome, detail) = match &done {
        Ok(_) => ("ok", "started again instead of renting".to_string()),
        Err(d) => ("failed", d.clone()),
    };
    let tx = ctx.store.immediate()?;
    let action = actions::insert(
        &tx,
        &NewAction {
            run_id: (ctx.run_id > 0).then_some(ctx.run_id),
            kind: "start",
            outcome,
            actor: ctx.actor.as_str(),
            instance_id: Some(id),
            label: Some(&row.label),
            dph: row.dph,
            tool_call_id: Some(&ctx.call_id),
            reason: Some(reason),
            detail: Some(&detail),
            ..Default::default()
        },
        after,
    )?;
    let result = match done {
        Ok((r, result)) => {
            instances::upsert(&tx, &r)?;
            // Its boot is timed from now (`fleet::boot::boot_began`).
            ctx.snapshot.started_again.insert(id, after);
            if let Some(s) = ctx
                .snapshot
                .instances
                .iter_mut()
                .find(|x| x.label == r.label)
            {
                *s = r;
            }
            Some(result)
        }
        Err(_) => None,
    };
    tx.commit()?;
    super::journal_action(&ctx.store.conn, action, row.gpu_name.as_deref());
    ctx.store.fence("recording a start")?;
    Ok(result)
}

/// `[vast.env]` with its credentials resolved, in order; the first that fails stops it
/// (its variable's name and the error's whole chain).
fn worker_env(ctx: &ToolCtx<'_>) -> Result<BTreeMap<String, String>, (String, String)> {
    let mut env = BTreeMap::new();
    for (name, value) in &ctx.config.vast.env {
        let v = match value {
            EnvValue::Literal(s) => s.clone(),
            EnvValue::Credential(c) => {
                match crate::secrets::require_credential(ctx.env, &c.credential) {
                    Ok(s) => s.expose().to_string(),
                    Err(e) => return Err((name.clone(), format!("{e:#}"))),
                }
            }
        };
        env.insert(name.clone(), v);
    }
    Ok(env)
}

/// The intent and its launching row are committed before the create is sent; the create's
/// answer settles them (or leaves them open for the next pass's reconciliation). With the
/// result: whether vast.ai answered that the offer is gone (`no_such_ask`).
fn rent(
    ctx: &mut ToolCtx<'_>,
    vast: &dyn VastClient,
    ask: &plan::Ask,
    create: &Create,
    reason: &str,
) -> Result<(ToolResult, bool)> {
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
                label: Some(&create.row.label),
                offer_id: Some(create.offer.id as i64),
                dph: Some(create.offer.dph_total),
                emergency: ask.workers_dead,
                tool_call_id: Some(&ctx.call_id),
                reason: Some(reason),
                detail: Some(&create.intent_detail),
                code: None,
                flag: None,
            },
            ask.now,
        )?;
        instances::upsert(&tx, &create.row)?;
        tx.commit()?;
        id
    };
    crate::faults::point("launch-after-intent")?;
    // The intent reaches the shared database, and the lease is checked, before the create.
    if let Err(e) = ctx.store.fence("launch intent") {
        // Not sent, and known: settled here, so that this host's next pass does not count
        // it as on its way (a leader keeps its lease through a database restart).
        let detail = format!("not sent to vast.ai: {}", crate::error::one_line(&e));
        let after = ctx.clock.now_ms();
        let tx = ctx.store.immediate()?;
        actions::settle(&tx, intent_id, "failed", None, Some(&detail), None, after)?;
        instances::delete(&tx, &create.row.label)?;
        tx.commit()?;
        return Err(e);
    }
    // Asked again by the client once the create spacing (or a 429's wait) has passed: a
    // pause pressed meanwhile holds it, and the refusal settles the intent; with several
    // hosts, a fence that no longer vouches for the lease holds it too (not sent, failed).
    let held = std::cell::RefCell::new(None);
    let created = {
        let (config, actor, clock) = (ctx.config, ctx.actor, ctx.clock);
        let store = std::cell::RefCell::new(&mut *ctx.store);
        vast.create_instance_unless(&create.request, &|| {
            let mut store = store.borrow_mut();
            if store.fence_stale("the create").is_some() {
                // The wait outlasted what the fence vouched for: the lease is asked again.
                if let Err(e) = store.fence("before the create") {
                    return Some(crate::error::one_line(&e));
                }
            }
            let conn = &store.conn;
            let r = super::brake::launch_held(conn, config, actor, clock.now_ms()).ok()??;
            let why = r.one_line();
            *held.borrow_mut() = Some(r);
            Some(why)
        })
    };
    if let Some(r) = held.into_inner() {
        return withheld(ctx, create, intent_id, &r).map(|res| (res, false));
    }
    let named = ask.offer_id.is_some();
    let code = created
        .as_ref()
        .err()
        .and_then(|e| plan::create_failure_code(e, named));
    let taken = matches!(created, Err(crate::vast::VastError::NoSuchAsk(_)));
    if let Some(cache) = ctx.snapshot.offers.as_mut() {
        // Rented now, or taken by someone else: either way not to be tried again this pass.
        cache.retain(|o| o.id != create.offer.id);
    }
    let after = ctx.clock.now_ms();
    let settle = match plan::after_create(create, created) {
        Next::Settle(s) => s,
        Next::DestroyOrphan {
            new_contract,
            error,
        } => {
            ctx.store.fence("before destroying an orphan")?;
            let destroyed = vast.destroy_instance(new_contract);
            plan::after_orphan(create, &error, destroyed.as_ref().copied())
        }
    };
    settle_intent(ctx, ask, create, intent_id, (settle, code), after).map(|r| (r, taken))
}

/// A create the operator's hand held once it could go: its intent settled `refused` with the
/// refusal's code, its launching row gone.
fn withheld(
    ctx: &mut ToolCtx<'_>,
    create: &Create,
    intent_id: i64,
    r: &crate::policy::guardrails::Refusal,
) -> Result<ToolResult> {
    let result = r.to_result();
    let detail = result.content.to_string();
    let after = ctx.clock.now_ms();
    let tx = ctx.store.immediate()?;
    actions::settle(
        &tx,
        intent_id,
        "refused",
        None,
        Some(&detail),
        Some(r.code()),
        after,
    )?;
    instances::delete(&tx, &create.row.label)?;
    tx.commit()?;
    super::journal_action(&ctx.store.conn, intent_id, Some(&create.offer.gpu_name));
    ctx.store.fence("launch withheld")?;
    Ok(result)
}

fn settle_intent(
    ctx: &mut ToolCtx<'_>,
    ask: &plan::Ask,
    create: &Create,
    intent_id: i64,
    settle: (Settle, Option<&str>),
    after: Millis,
) -> Result<ToolResult> {
    let result = settled(ctx, ask, create, intent_id, settle, after);
    if result.is_ok() {
        super::journal_action(&ctx.store.conn, intent_id, Some(&create.offer.gpu_name));
        ctx.store.fence("launch settle")?;
    }
    result
}

fn settled(
    ctx: &mut ToolCtx<'_>,
    ask: &plan::Ask,
    create: &Create,
    intent_id: i64,
    (settle, code): (Settle, Option<&str>),
    after: Millis,
) -> Result<ToolResult> {
    // vast.ai answered with an instance our table already holds under another label (a
    // fuzz walkthrough: two creates answered alike failed the pass on the table's unique
    // id, after both were sent): the answer says nothing sure of this create, which is left
    // open for the next listing to settle by its label.
    // So is an answer naming an instance this pass listed as not ours (no label of ours, or
    // another install's): adopted, it counted against our caps and `instances stop --all`
    // destroyed it (a walkthrough with an unlabelled instance on the account).
    let foreign = match &settle {
        Settle::Launched { instance_id, .. } => {
            not_ours(ctx.snapshot, *instance_id as i64).map(|whose| (*instance_id, whose))
        }
        _ => None,
    };
    let settle = match foreign {
        Some((instance_id, whose)) => plan::left_open(
            create,
            crate::text::clip(
                &format!(
                    "vast.ai answered the create with instance {instance_id}, which this pass's listing shows as {whose}; left open: the next listing settles this launch by its label"
                ),
                300,
            ),
        ),
        None => settle,
    };
    let settle = match settle {
        Settle::Launched { instance_id, row } => {
            match instances::by_vast_id(&ctx.store.conn, instance_id as i64)? {
                Some(other) if other.label != row.label => plan::left_open(
                    create,
                    crate::text::clip(
                        &format!(
                            "vast.ai answered the create with instance {instance_id}, which fleetagent's table holds as {}; left open: the next listing settles this launch by its label",
                            crate::text::quote(&other.label, crate::fleet::LABEL_CHARS)
                        ),
                        300,
                    ),
                ),
                _ => Settle::Launched { instance_id, row },
            }
        }
        other => other,
    };
    match settle {
        Settle::Launched { instance_id, row } => {
            crate::faults::point("launch-after-create")?;
            let tx = ctx.store.immediate()?;
            let id = Some(instance_id as i64);
            actions::settle(&tx, intent_id, "ok", id, None, None, after)?;
            instances::upsert(&tx, &row)?;
            tx.commit()?;
            ctx.snapshot.record_launch(*row, ask.now);
            Ok(plan::launched(
                ask,
                ctx.config,
                create,
                instance_id,
                ctx.snapshot,
                after,
            ))
        }
        Settle::Open { note, result } => {
            actions::note(&ctx.store.conn, intent_id, &note)?;
            ctx.snapshot.record_launch(create.row.clone(), ask.now);
            Ok(result)
        }
        Settle::Failed { detail, result } => {
            let tx = ctx.store.immediate()?;
            actions::settle(&tx, intent_id, "failed", None, Some(&detail), code, after)?;
            instances::delete(&tx, &create.row.label)?;
            tx.commit()?;
            Ok(result)
        }
    }
}

/// Whose an instance the pass's listing shows as not ours is, in words; None when it is not
/// listed so.
fn not_ours(snapshot: &crate::fleet::Snapshot, id: i64) -> Option<String> {
    if let Some(f) = snapshot.other_installs.iter().find(|f| f.vast_id == id) {
        return Some(format!(
            "another install's ({}, install {})",
            crate::text::quote(&f.label, crate::fleet::LABEL_CHARS),
            f.install_id
        ));
    }
    snapshot
        .foreign
        .contains(&id)
        .then(|| "not ours (no label of ours)".to_string())
}

/// A launch that ends before any create: its row, if any, recorded at `now`.
fn answer(ctx: &mut ToolCtx<'_>, reason: &str, a: Answer, now: Millis) -> Result<ToolResult> {
    if let Some(e) = &a.record {
        record(ctx, e, a.code, reason, now)?;
    }
    if a.code == Some("unprofitable") {
        // The rest of this pass (the floor's plan included) knows the market has no
        // profitable offer now, as the next pass will from the ledger.
        ctx.snapshot.unprofitable_refused_at = Some(now);
    }
    Ok(a.result)
}

fn record(
    ctx: &mut ToolCtx<'_>,
    e: &Entry,
    code: Option<&str>,
    reason: &str,
    now: Millis,
) -> Result<()> {
    let id = actions::insert(
        &ctx.store.conn,
        &NewAction {
            run_id: (ctx.run_id > 0).then_some(ctx.run_id),
            kind: "launch",
            outcome: e.outcome,
            actor: ctx.actor.as_str(),
            instance_id: None,
            label: None,
            offer_id: e.offer_id.map(|o| o as i64),
            dph: None,
            emergency: e.emergency,
            tool_call_id: Some(&ctx.call_id),
            reason: Some(reason),
            detail: Some(&e.detail),
            code,
            flag: None,
        },
        now,
    )?;
    super::journal_action(&ctx.store.conn, id, None);
    Ok(())
}

/// A search that found nothing with hosts left out: asked once more without leaving them
/// out, so that an empty market is told from one whose offers are all on those hosts (a
/// soak saw a dead fleet wait a day, every line blaming vast.ai; a re-test then saw an empty
/// market blamed on the hosts). Sets `Snapshot::left_out_offers`; the launch's and the
/// model's `search_offers` call it. Returns vast.ai's reset when that search met the daily
/// quota (a re-test saw it recorded as "no rentable offer").
pub(super) fn left_out_offers(
    ctx: &mut ToolCtx<'_>,
    vast: &dyn crate::vast::VastClient,
    query: &crate::vast::OfferQuery,
    now: Millis,
) -> Result<Option<String>> {
    if ctx.snapshot.search_quota_this_pass {
        return Ok(None);
    }
    let all = crate::vast::OfferQuery {
        exclude_machines: Vec::new(),
        ..query.clone()
    };
    let found = vast.search_offers(&all);
    super::note_search_quota(ctx, &found, now)?;
    let found = match found {
        Err(crate::vast::VastError::SearchQuota { reset }) => return Ok(Some(reset)),
        f => f.unwrap_or_default(),
    };
    let mut hosts: Vec<u64> = found
        .iter()
        .filter(|o| crate::policy::offers::matches_config(o, ctx.config))
        .filter_map(|o| o.machine_id)
        .filter(|m| query.exclude_machines.contains(m))
        .collect();
    hosts.sort_unstable();
    hosts.dedup();
    ctx.snapshot.left_out_offers = hosts;
    Ok(None)
}
