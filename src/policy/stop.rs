//! The stop plan: every decision of `stop_instance` (and of the operator's `instances
//! stop`), as pure steps between the calls the tool makes (src/tools/stop.rs executes them).
//!
//! 1. [`Ask::new`]: the instance, the call (`vast.stop_mode`) and who asks.
//! 2. [`gate`]: nobody but the operator stops while paused;
//!    nobody stops another install's instance; an id neither ours in the snapshot nor on
//!    the account's listing is looked up in our table, and [`unknown`] answers with what it
//!    found; already stopped; the stop protections; dry run.
//! 3. [`no_key`] without a vast.ai client; else the call [`Target`] names.
//! 4. [`after_call`] with vast.ai's answer, and [`stopped`] for the result of a success.

use serde_json::json;

use super::result::ToolResult;
use crate::clock::Millis;
use crate::config::{Config, StopMode};
use crate::fleet::{Flag, FlagKind, Snapshot, GONE, OUTBID, STOPPED};
use crate::policy::guardrails::{self, Refusal, StopFacts};
use crate::store::instances::InstanceRow;
use crate::text::clip;
use crate::vast::VastError;

/// What a stop is asked: the instance, the call `vast.stop_mode` makes of it, and whether
/// the protections are lifted or the asker may not stop at all.
#[derive(Debug, Clone, PartialEq)]
pub struct Ask {
    pub instance_id: i64,
    /// `destroy` or `stop` (the action's kind too).
    pub kind: &'static str,
    /// `--force` by the operator (it counts for nobody else).
    pub forced: bool,
    /// The operator asks (`fleetagent instances stop`): the answers name commands, not the
    /// model's tools, and a pause does not hold them.
    pub operator: bool,
}

impl Ask {
    pub fn new(config: &Config, instance_id: i64, force: bool, by_operator: bool) -> Ask {
        Ask {
            instance_id,
            kind: match config.vast.stop_mode {
                StopMode::Destroy => "destroy",
                StopMode::Stop => "stop",
            },
            forced: force && by_operator,
            operator: by_operator,
        }
    }

    /// A destroy whatever `vast.stop_mode` says (`instances stop --all`: a stopped disk
    /// still bills).
    pub fn destroying(self) -> Ask {
        Ask {
            kind: "destroy",
            ..self
        }
    }
}

/// One stop row for the action ledger (kind [`Ask::kind`], instance [`Ask::instance_id`]);
/// the tool adds the run, the actor, the call id, the reason and the time.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub outcome: &'static str,
    pub label: Option<String>,
    pub dph: Option<f64>,
    pub detail: String,
    /// The kind the gate settled on, where it is not the ask's: an outbid bid or a stopped
    /// instance flagged too long is destroyed whatever `stop_mode` says.
    pub kind: Option<&'static str>,
}

fn entry(outcome: &'static str, label: Option<String>, detail: String) -> Entry {
    Entry {
        outcome,
        label,
        dph: None,
        kind: None,
        detail,
    }
}

/// A protection's refusal, recorded `refused` with the refusal's JSON as detail.
fn refused(label: Option<String>, r: &Refusal) -> Answer {
    let result = r.to_result();
    Answer {
        record: Some(entry("refused", label, result.content.to_string())),
        result,
        code: Some(r.code()),
    }
}

/// A stop that ends without a change: the ledger row to write, if any, the result, and the
/// code a decision reads of it (the ledger's `code` column: the protection that refused it,
/// or `launch::failure_code` of a failed call).
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub record: Option<Entry>,
    pub result: ToolResult,
    pub code: Option<&'static str>,
}

/// What [`gate`] decided.
#[derive(Debug, Clone, PartialEq)]
pub enum Gate {
    Answer(Answer),
    /// Neither ours in the snapshot nor on the account's listing: look in our table for a
    /// row with this vast id that is gone, then [`unknown`].
    LookUp,
    /// The protections allow it: make the call.
    Go(Box<Target>),
}

/// A stop that goes out.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    pub instance_id: i64,
    pub kind: &'static str,
    /// Our row (None for an instance that is not ours, stopped by the operator's --force).
    pub row: Option<InstanceRow>,
    pub flagged: bool,
    /// Why it is flagged (`silent 25m`, `exited`, ...): its kind goes in the action's `flag`
    /// column, the whole in its detail.
    pub flag: Option<Flag>,
    pub forced: bool,
}

impl Target {
    /// The id the call is made with.
    pub fn vast_id(&self) -> u64 {
        self.instance_id.max(0) as u64
    }

    /// A destroy (else a stop, which keeps the disk).
    pub fn destroys(&self) -> bool {
        self.kind == "destroy"
    }

    fn label(&self) -> Option<String> {
        self.row.as_ref().map(|r| r.label.clone())
    }
}

pub fn gate(ask: &Ask, snapshot: &Snapshot, config: &Config) -> Gate {
    let id = ask.instance_id;
    let row = snapshot.find(id).cloned();
    if !ask.operator {
        if let Err(r) = guardrails::check_paused(snapshot.paused.as_ref(), false) {
            return Gate::Answer(refused(row.map(|r| r.label), &r));
        }
    }
    if let Some(other) = snapshot.other_installs.iter().find(|o| o.vast_id == id) {
        // Forced or not: another install's instance is that install's to stop.
        return Gate::Answer(refused(None, &other_install(other)));
    }
    if row.is_none() && !snapshot.foreign.contains(&id) {
        return Gate::LookUp;
    }
    // An outbid bid (already paused by vast.ai) and a stopped instance flagged as stopped
    // too long are destroyed whatever `stop_mode` says: stopping them again frees nothing.
    // So is a stopped instance the operator stops: the one way to end a disk kept stopped
    // (an instance the operator stopped is never flagged as stopped too long).
    let paused = row.as_ref().is_some_and(|r| {
        r.state == OUTBID
            || (r.state == STOPPED && (ask.operator || snapshot.is_flagged(config, id)))
    });
    let ask = &Ask {
        kind: if paused { "destroy" } else { ask.kind },
        ..ask.clone()
    };
    if row.as_ref().is_some_and(|r| r.state == STOPPED) && ask.kind == "stop" {
        return Gate::Answer(Answer {
            record: None,
            result: ToolResult::ok(
                json!({"ok": true, "instance_id": id, "already": "stopped"}),
                false,
                format!("{id} already stopped"),
            ),
            code: None,
        });
    }
    let facts = facts(ask, snapshot, config, row.as_ref());
    let label = row.as_ref().map(|r| r.label.clone());
    if let Err(r) = guardrails::check_stop(&facts) {
        return Gate::Answer(for_asker(ask, refused(label, &r)));
    }
    if let Some(r) = row.as_ref() {
        if !facts.flagged && !ask.forced && !over_a_cap(snapshot, config) {
            if let Some(answer) = min_rental(r, snapshot.now, config) {
                return Gate::Answer(for_asker(ask, answer));
            }
        }
    }
    if config.policy.dry_run {
        return Gate::Answer(Answer {
            record: Some(Entry {
                kind: Some(ask.kind),
                ..entry("dry_run", label, "dry_run".into())
            }),
            result: ToolResult::error(
                "dry_run",
                json!({
                    "would": format!("{} instance {id}", ask.kind),
                    "message": "policy.dry_run is on: nothing was sent to vast.ai; the stop protections allow this",
                }),
            ),
            code: None,
        });
    }
    Gate::Go(Box::new(Target {
        instance_id: id,
        kind: ask.kind,
        row,
        flagged: facts.flagged,
        flag: snapshot
            .flagged(config)
            .into_iter()
            .find(|f| f.vast_id == id),
        forced: ask.forced,
    }))
}

/// The operator reads commands, the model its tools: a protection's refusal of the operator's
/// `fleetagent instances stop` says how to stop the instance anyway (the ledger's detail is
/// the answer as given).
fn for_asker(ask: &Ask, mut a: Answer) -> Answer {
    if !ask.operator || a.code != Some("protected") {
        return a;
    }
    let Some(message) = a.result.content["message"].as_str() else {
        return a;
    };
    if message.contains("--force") {
        return a;
    }
    let message = format!(
        "{message}; `fleetagent instances stop {} --force` stops it anyway",
        ask.instance_id
    );
    a.result.content["message"] = json!(message);
    if let Some(e) = a.record.as_mut() {
        e.detail = a.result.content.to_string();
    }
    a
}

/// The refusal for an instance under our prefix that carries another install's id.
pub fn other_install(other: &crate::store::ops::ForeignInstance) -> Refusal {
    Refusal::Protected {
        message: format!(
            "instance {} {} belongs to another fleetagent install on this vast.ai account (install {}, same label prefix): no install ever stops another's, --force or not; stop it from that install's state dir or in vast.ai's console",
            other.vast_id,
            crate::text::quote(&other.label, crate::fleet::LABEL_CHARS),
            other.install_id
        ),
    }
}

/// The fleet is over `max_instances` or `max_dph_total` (a paused bid resumed): a stop that
/// brings it back is never held by `policy.min_rental_mins`.
fn over_a_cap(snapshot: &Snapshot, config: &Config) -> bool {
    let p = &config.policy;
    p.max_instances
        .is_some_and(|m| snapshot.billing_count() > m)
        || p.max_dph_total
            .is_some_and(|m| snapshot.fleet_dph() > m + 1e-9)
}

/// `policy.min_rental_mins`: an instance of ours started less than that ago is not stopped
/// nor destroyed (every rental paid a boot; ended sooner it paid it for nothing), unless it
/// is flagged, the operator forces it, or the fleet is over a cap. The refusal names the key
/// and when it may be stopped. None: the minimum is past.
pub fn min_rental(row: &InstanceRow, now: Millis, config: &Config) -> Option<Answer> {
    if !crate::policy::rules::within_min_rental(row, now, config) {
        return None;
    }
    let from = crate::policy::rules::may_stop_from(row, config);
    let id = row.vast_id.unwrap_or(0);
    let mins = config.policy.min_rental_mins;
    let message = format!(
        "instance {id} started {} ago; policy.min_rental_mins = {mins} keeps it until {} (in {}), unless it is flagged (billing and earning nothing)",
        crate::clock::human_duration(now - row.created_at),
        crate::clock::rfc3339(from),
        crate::clock::human_duration(from - now),
    );
    let result = ToolResult::error(
        "protected",
        json!({
            "key": "policy.min_rental_mins",
            "limit": format!("{mins} minutes"),
            "instance_id": id,
            "started_at": crate::clock::rfc3339(row.created_at),
            "may_stop_at": crate::clock::rfc3339(from),
            "message": message,
        }),
    );
    Some(Answer {
        record: Some(entry(
            "refused",
            Some(row.label.clone()),
            result.content.to_string(),
        )),
        result,
        code: Some("protected"),
    })
}

/// What the protections look at: our row, its Curio worker, the cluster's live workers and
/// the work queued.
fn facts(ask: &Ask, snapshot: &Snapshot, config: &Config, row: Option<&InstanceRow>) -> StopFacts {
    let demand = snapshot.demand.as_ref();
    let live_worker = match (row, demand) {
        (Some(r), Some(d)) => r
            .machine_name
            .as_ref()
            .is_some_and(|m| d.has_worker(m, false)),
        _ => false,
    };
    StopFacts {
        instance_id: ask.instance_id,
        ours: row.is_some(),
        flagged: snapshot.is_flagged(config, ask.instance_id),
        state: row.map(|r| r.state),
        live_worker,
        live_workers: demand.map(|d| d.live_workers()).unwrap_or(0),
        queued: demand.map(|d| d.queued_work()).unwrap_or(0),
        demand_known: demand.is_some(),
        demand_error: snapshot.demand_error.clone(),
        forced: ask.forced,
    }
}

/// The answer for an id [`gate`] could not find, given the label of our gone row with that
/// vast id, if the table has one. Nothing is recorded.
pub fn unknown(ask: &Ask, gone: Option<String>, snapshot: &Snapshot) -> ToolResult {
    let id = ask.instance_id;
    // Ours, and already gone on vast.ai (destroyed earlier, by us or by hand): stopped.
    if let Some(label) = gone {
        return ToolResult::ok(
            json!({"ok": true, "instance_id": id, "label": label, "already": "gone"}),
            false,
            format!("{id} already gone"),
        );
    }
    // Neither in our table nor on the account's listing: refused even when forced, so a
    // typo cannot destroy an instance nobody can see.
    // With the listing failed, "not ours" is not known: say what failed, not a verdict.
    let message = match &snapshot.listing_error {
        Some(e) => format!(
            "instance {id} is not in fleetagent's table, and the vast.ai listing failed ({}), so whether it is ours cannot be checked",
            clip(e, 200)
        ),
        _ if ask.operator => format!(
            "instance {id} is not one of ours: neither in fleetagent's table nor under our label prefix on vast.ai (`fleetagent instances list` shows ours)"
        ),
        _ => format!("instance {id} is not one of ours (list_instances shows them)"),
    };
    ToolResult::error("invalid_args", json!({ "message": message }))
}

/// Whether a flag says the host failed us: a boot that never finished, `exited`, `offline`,
/// `unknown`. Outbid (counted apart: twice makes a bad host) and stopped too long are not
/// the host's fault.
pub fn host_failure(kind: FlagKind) -> bool {
    match kind {
        FlagKind::Exited | FlagKind::Offline | FlagKind::Unknown | FlagKind::Loading => true,
        // A boot that never gave a worker: the host's (its disk, its network to the
        // registry), until the boot breaker says it is not.
        FlagKind::Unbooted => true,
        // A worker that heartbeats and cannot prove: a broken GPU, or parameters it could not
        // fetch on that host.
        FlagKind::Silent => true,
        // Frozen is vast.ai's (or whoever holds the account's) doing, not the host's failing.
        FlagKind::Outbid | FlagKind::Stopped | FlagKind::Frozen => false,
    }
}

/// Whether a flag says a rental never booted a Curio worker (stuck loading, `unbooted`): the
/// boot breaker counts those (`fleet::boot`).
pub fn boot_failure(kind: FlagKind) -> bool {
    matches!(kind, FlagKind::Loading | FlagKind::Unbooted)
}

/// No vast.ai client (no API key).
pub fn no_key(target: &Target) -> Answer {
    let r = Refusal::NotConfigured {
        key: None,
        message: "no vast.ai API key: set VAST_API_KEY or the vast_api_key credential".into(),
    };
    refused(target.label(), &r)
}

/// What follows vast.ai's answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Done {
    Stopped(Box<Stopped>),
    /// The call failed: recorded `failed` at the time of the answer.
    Failed(Answer),
}

/// A stop that went through (or found the instance already gone): record `entry` with the
/// time of the answer, write `row`, tell the snapshot (`record_stop` with `gone`).
#[derive(Debug, Clone, PartialEq)]
pub struct Stopped {
    pub entry: Entry,
    /// Our row, gone or stopped as of the answer.
    pub row: Option<InstanceRow>,
    /// Destroyed (or found gone), not just stopped.
    pub gone: bool,
    /// vast.ai said there was no such instance.
    pub already_gone: bool,
    /// Why the instance was flagged, as the detail says it (the action's `flag` column).
    pub flag: Option<FlagKind>,
}

/// vast.ai's answer to the call, received at `after`.
pub fn after_call(target: &Target, answer: Result<(), &VastError>, after: Millis) -> Done {
    let already_gone = match answer {
        Ok(()) => false,
        Err(VastError::NoSuchInstance(_)) => true,
        Err(e) => {
            let msg = clip(&e.to_string(), 300);
            let id = target.instance_id;
            return Done::Failed(Answer {
                result: ToolResult::error("vast_error", json!({"message": msg, "instance_id": id})),
                record: Some(entry("failed", target.label(), msg)),
                code: crate::policy::launch::failure_code(e),
            });
        }
    };
    let detail = if already_gone {
        "already gone on vast.ai".to_string()
    } else if target.flagged {
        match &target.flag {
            // vast.ai's word on a boot that failed (a drill: "pull access denied" reached
            // nothing an operator reads).
            Some(f) => {
                let said = match &target.row {
                    Some(r) if boot_failure(f.kind) || f.kind == FlagKind::Exited => {
                        crate::fleet::boot::vast_said(r)
                    }
                    _ => String::new(),
                };
                let flagged = crate::text::FLAGGED_DETAIL;
                format!("{flagged}{}): earned nothing{said}", f.why)
            }
            None => "flagged: earned nothing".to_string(),
        }
    } else if target.forced {
        "forced by the operator".to_string()
    } else {
        "ok".to_string()
    };
    let gone = target.destroys() || already_gone;
    let row = target.row.clone().map(|mut r| {
        if gone {
            r.state = GONE;
            r.gone_at = Some(after);
        } else {
            r.state = STOPPED;
            r.machine_name = None;
        }
        r.state_since = after;
        r
    });
    Done::Stopped(Box::new(Stopped {
        entry: Entry {
            outcome: "ok",
            label: target.label(),
            dph: target.row.as_ref().and_then(|r| r.dph),
            detail,
            kind: Some(target.kind),
        },
        row,
        gone,
        already_gone,
        // As the detail says it.
        flag: target
            .flag
            .as_ref()
            .filter(|_| target.flagged && !already_gone)
            .map(|f| f.kind),
    }))
}

/// The result of a stop that went through, from the snapshot that no longer counts it.
pub fn stopped(target: &Target, s: &Stopped, snapshot: &Snapshot) -> ToolResult {
    let id = target.instance_id;
    let done = if s.gone { "destroyed" } else { "stopped" };
    ToolResult::ok(
        json!({
            "ok": true,
            "instance_id": id,
            "done": done,
            "note": if s.already_gone { Some("it was already gone") } else { None },
            "fleet_dph": (snapshot.fleet_dph() * 100.0).round() / 100.0,
        }),
        true,
        format!("{done} {id}"),
    )
}

#[cfg(test)]
mod tests;
