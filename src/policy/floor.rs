//! The floor (DESIGN.md "The floor: the rules under every model decision"): a model that
//! answers "no action" while every worker is dead is as dangerous as a rate limiter that
//! refuses the launch. After the model's turns the rules plan the same snapshot (as the
//! model's own calls left it), and what protects the fleet that the model left undone is
//! carried out through the same tools and guardrails, with actor `floor`. Whatever the model
//! answers, the fleet serves what the rules would serve:
//!
//! - WORKERS DEAD launches, in the same pass;
//! - a deficit the rules confirm (a backlog, by their own streak and confirmation; or a seed
//!   instance), in the same pass, unless the model is acting on it: a model that launched
//!   while the deficit was open gets `policy.floor_after_mins` from its last launch before the
//!   floor adds to its answer. An answer that ran nothing (text, malformed, cut) is no action;
//! - a flagged instance (stuck, exited, offline, unknown), once it has been left for
//!   `policy.floor_flagged_passes` passes;
//! - idle surplus (and, with a price, an idle instance that no longer makes its margin),
//!   once it has been left for `policy.floor_idle_mins`; as the rules decide it: nothing
//!   started within `policy.min_rental_mins`, nothing the surplus band keeps;
//! - an outbid bid (destroyed, and replaced while demand needs it) and a fleet over a cap
//!   (the surplus that changed state last stopped first), in the same pass.
//!
//! The deficit's clock ([`Memory::deficit_since`]) opens when the rules confirm the deficit
//! and survives one pass below the backlog threshold (Curio keeps 4-8 proofs pending by
//! design once the workers are busy), and the passes after it while the backlog is back and
//! the rules' streak confirms it again: the deficit is the same, and so is a model's grace on
//! it. The floor's launches are the rules' own, on their own streak, so a model that answers
//! as the rules would is never overruled. A second pass below the threshold in a row, or the
//! rules no longer wanting capacity (the target reached, no profitable offer), closes it.
//!
//! With the model unusable (`llm.fallback = "rules"`) the pass runs the same plan as a model
//! that did nothing (`run::act::fallback`): the whole floor, stops and destroys included.
//!
//! The floor never acts on unknown demand nor while the operator has paused the agent, never
//! puts back what an operator stopped within `policy.operator_hold_mins` (the rules plan no
//! launch then: `rules::decide`), never doubles the model's launches (the rules count them
//! as coming), and never undoes what the model did in the pass: no launch for a deficit in a
//! pass where the model stopped an instance, no stop of surplus in a pass where it launched
//! one. Pure: the pass keeps the [`Memory`] between passes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::clock::{human_duration, Millis};
use crate::config::Config;
use crate::fleet::Snapshot;

use super::rules::{self, CallKind, Mode, PlannedCall};

/// What the floor remembers between passes (stored as JSON beside the streaks); its clocks.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Memory {
    /// Since when the rules have confirmed a deficit that is still open (answered or not).
    #[serde(default)]
    pub deficit_since: Option<Millis>,
    /// The last pass was below the backlog threshold with the deficit open (one such pass
    /// keeps it open; a second closes it).
    #[serde(default)]
    pub dipped: bool,
    /// The model's last launch while the deficit was open: it is acting on it, and gets
    /// `policy.floor_after_mins` from then before the floor adds to its answer.
    #[serde(default)]
    pub model_launched_at: Option<Millis>,
    /// Why the last pass ended with the open deficit unanswered: nobody launched for it,
    /// nothing of ours is coming (None: answered, coming, or no deficit open).
    #[serde(default)]
    pub unanswered: Option<String>,
    /// Since when the rules have wanted to stop idle surplus the model left.
    #[serde(default)]
    pub surplus_since: Option<Millis>,
    /// Flagged instances of ours (vast.ai id) and the passes each has been flagged so far.
    #[serde(default)]
    pub flagged_passes: BTreeMap<i64, u32>,
}

impl Memory {
    /// Some clock runs: a deficit open, surplus waiting, or a flagged instance counted.
    pub fn running(&self) -> bool {
        self.deficit_since.is_some()
            || self.surplus_since.is_some()
            || !self.flagged_passes.is_empty()
    }

    /// The clocks as a pass leaves them (what the run row keeps, `inspect` and the sim's
    /// report name).
    pub fn clocks(&self) -> Clocks {
        Clocks {
            deficit_since: self.deficit_since,
            surplus_since: self.surplus_since,
            flagged_passes: self.flagged_passes.clone(),
            unanswered: self.unanswered.clone(),
        }
    }
}

/// The floor's clocks at the end of a pass (`runs.floor_clocks`, as JSON).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Clocks {
    /// Since when the rules have confirmed a deficit that is still open.
    pub deficit_since: Option<Millis>,
    /// Since when the rules have wanted to stop idle surplus that is still there.
    pub surplus_since: Option<Millis>,
    /// Flagged instances of ours (vast.ai id) and the passes each has been left so far.
    pub flagged_passes: BTreeMap<i64, u32>,
    /// Why the pass ended with the open deficit unanswered (None: it did not).
    pub unanswered: Option<String>,
}

/// What the model did in this pass (mutating calls that went through, and launches that met
/// a limit).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelDid {
    pub launches: u32,
    pub stops: u32,
    /// Launches of the model that met a limit the floor's own would meet in the same pass:
    /// refused by the launch window (`rate_limited`), or failed at vast.ai (its rate limit,
    /// a refused create, no rentable offer; not an offer taken meanwhile or refused for
    /// itself). The model asked as the rules would, and its ask is on record.
    pub launches_blocked: u32,
    /// Instances the model's stop of failed on vast.ai's rate limit, retries spent: the
    /// floor's stop of them would meet it too, so they wait for the next pass. Under
    /// `policy.dry_run` the model's dry stops too: the snapshot still shows them, and the
    /// floor repeated them.
    pub stops_blocked: Vec<i64>,
}

/// The floor's decision for one pass: the calls to make (reasons say `floor:` and why) and
/// the memory to keep.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub calls: Vec<PlannedCall>,
    pub memory: Memory,
}

impl Plan {
    /// The calls that answer the deficit (a backlog's launches, a seed).
    pub fn deficit_calls(&self) -> usize {
        self.calls
            .iter()
            .filter(|c| matches!(c.kind, CallKind::Deficit | CallKind::Seed))
            .count()
    }
}

/// Plan the floor over `snapshot` (after the model's calls), the rules' low-demand streak
/// and what the floor remembered from the passes before.
pub fn plan(
    snapshot: &Snapshot,
    config: &Config,
    low_demand_passes: u32,
    before: &Memory,
    model: &ModelDid,
    now: Millis,
) -> Plan {
    let Some(d) = snapshot
        .demand
        .as_ref()
        .filter(|_| snapshot.paused.is_none())
    else {
        // Never on unknown demand, nor while the operator's pause holds everyone: nothing is
        // done, and no clock runs on it (after a resume, what the model leaves undone is
        // timed afresh).
        let memory = Memory {
            flagged_passes: before.flagged_passes.clone(),
            ..Memory::default()
        };
        return Plan {
            calls: Vec::new(),
            memory,
        };
    };
    let pass = Pass {
        snapshot,
        config,
        before,
        model,
        now,
    };
    let wanted = rules::decide(snapshot, config, low_demand_passes, Mode::Full);
    let facts = rules::deficit(snapshot, config);
    let (mut memory, dip) = clocks(&pass, d, &wanted, &facts);
    let mut calls = at_once(&pass, &wanted);
    let emergency = emergency(&pass, &wanted);
    // Flagged instances holding the room WORKERS DEAD's launches need go first, at once (the
    // re-test: the launches refused `budget`, the destroys two passes later, the first
    // launch in the third pass).
    let held = flagged_hold_the_room(&pass, &wanted, emergency.len());
    calls.extend(held.iter().cloned());
    calls.extend(
        emergency
            .iter()
            .map(|c| c.with_reason(floor_reason(&c.why, SAME_PASS))),
    );
    if emergency.is_empty() {
        calls.extend(deficit(&pass, d, &wanted, &facts, dip, &mut memory));
    }
    calls.extend(
        flagged(&pass, &wanted, &memory)
            .into_iter()
            .filter(|c| !held.iter().any(|h| h.instance_id() == c.instance_id())),
    );
    calls.extend(surplus(&pass, &wanted, &mut memory));
    calls.retain(|c| {
        c.instance_id()
            .is_none_or(|id| !model.stops_blocked.contains(&id))
    });
    Plan { calls, memory }
}

/// The pass the floor plans: the snapshot, the config, what the floor remembered and what
/// the model did.
struct Pass<'a> {
    snapshot: &'a Snapshot,
    config: &'a Config,
    before: &'a Memory,
    model: &'a ModelDid,
    now: Millis,
}

/// How long the floor waited, for what it does at once.
const SAME_PASS: &str = "in the same pass";

/// The clocks as this pass leaves them, and whether it is the one pass below the backlog
/// threshold that keeps the deficit open. The deficit's clock is opened by the rules'
/// confirmation (or a seed they want), kept across one pass below the backlog threshold and
/// while the backlog holds after it (with ProofShare switched off there is no deficit to keep
/// open). Each flagged instance's passes are counted.
fn clocks(
    pass: &Pass<'_>,
    d: &crate::demand::Demand,
    wanted: &[PlannedCall],
    facts: &rules::Deficit,
) -> (Memory, bool) {
    let (before, now) = (pass.before, pass.now);
    let seed = wanted.iter().any(|c| c.kind == CallKind::Seed);
    let open_before = before.deficit_since.is_some();
    let backlog = super::streaks::backlog(d);
    let dip = open_before && !backlog && !before.dipped && !d.proofshare_disabled();
    let open = facts.confirmed || seed || dip || (open_before && facts.persists);
    let mut memory = Memory {
        deficit_since: open.then(|| before.deficit_since.unwrap_or(now)),
        dipped: dip,
        model_launched_at: match (open, pass.model.launches > 0) {
            (false, _) => None,
            (true, true) => Some(now),
            (true, false) => before.model_launched_at.filter(|_| open_before),
        },
        ..Memory::default()
    };
    for f in pass.snapshot.flagged(pass.config) {
        let n = before.flagged_passes.get(&f.vast_id).copied().unwrap_or(0) + 1;
        memory.flagged_passes.insert(f.vast_id, n);
    }
    (memory, dip)
}

/// A paused bid may resume at any moment, and a fleet over a cap pays for it every minute:
/// both are answered in the same pass, before any launch (a destroy frees the slot the
/// replacement takes). The replacement waits when the model's own launch met a rate limit.
fn at_once(pass: &Pass<'_>, wanted: &[PlannedCall]) -> Vec<PlannedCall> {
    let mut kinds = vec![CallKind::Outbid, CallKind::OverCap];
    if pass.model.launches_blocked == 0 {
        kinds.push(CallKind::Replace);
    }
    // Outbid and over-cap stops first, as the rules plan them; their replacements after.
    let (stops, replace): (Vec<&PlannedCall>, Vec<&PlannedCall>) = of_kind(wanted, &kinds)
        .into_iter()
        .partition(|c| c.kind != CallKind::Replace);
    stops
        .into_iter()
        .chain(replace)
        .map(|c| c.with_reason(floor_reason(&c.why, SAME_PASS)))
        .collect()
}

/// WORKERS DEAD's launches, in the same pass: none after a model whose launch met the window
/// or vast.ai's rate limit (so would the floor's); after a model that launched, only what the
/// window has room for (the rules ask at least once in an emergency, so that a refusal is on
/// record; the model's own launches are that record), and under `policy.dry_run` only what
/// the rules ask beyond the model's dry launches.
fn emergency<'a>(pass: &Pass<'_>, wanted: &'a [PlannedCall]) -> Vec<&'a PlannedCall> {
    let mut emergency = of_kind(wanted, &[CallKind::Emergency]);
    if pass.model.launches_blocked > 0 {
        emergency.clear();
    } else if pass.model.launches > 0 {
        if pass.config.policy.dry_run {
            // A dry run's launches are neither in the window nor coming in the snapshot:
            // the model's count against what the rules ask (it was doubled).
            let left = emergency.len().saturating_sub(pass.model.launches as usize);
            emergency.truncate(left);
        }
        let w = pass.snapshot.window(pass.config);
        emergency.truncate(w.limit.saturating_sub(w.used) as usize);
    }
    emergency
}

/// The deficit's launches (a backlog's, a seed), unless the model is acting on it, stopped an
/// instance in this pass (the floor never undoes it), or met a limit the floor's launch would
/// meet too: then, or when the rules launch nothing for an open deficit, why it stays
/// unanswered goes in the memory.
fn deficit(
    pass: &Pass<'_>,
    d: &crate::demand::Demand,
    wanted: &[PlannedCall],
    facts: &rules::Deficit,
    dip: bool,
    memory: &mut Memory,
) -> Vec<PlannedCall> {
    let (model, now) = (pass.model, pass.now);
    let launches = of_kind(wanted, &[CallKind::Deficit, CallKind::Seed]);
    if launches.is_empty() {
        let open = memory.deficit_since.is_some();
        if open && model.launches == 0 && facts.coming == 0 {
            memory.unanswered = no_launch_why(pass.snapshot, pass.config, d, dip, facts.confirmed);
        }
        return Vec::new();
    }
    if let Some(why) = held(pass, memory) {
        memory.unanswered = Some(why);
        return Vec::new();
    }
    let waited = now - memory.deficit_since.unwrap_or(now);
    let how_long = if waited > 0 {
        format!("deficit open {}", human_duration(waited))
    } else {
        SAME_PASS.to_string()
    };
    launches
        .iter()
        .map(|c| c.with_reason(floor_reason(&c.why, &how_long)))
        .collect()
}

/// Why the floor holds its deficit launches this pass, if it does.
fn held(pass: &Pass<'_>, memory: &Memory) -> Option<String> {
    let (p, model, now) = (&pass.config.policy, pass.model, pass.now);
    let grace_until = memory
        .model_launched_at
        .map(|t| t + p.floor_after_mins as Millis * 60_000)
        .filter(|until| now < *until);
    if let Some(until) = grace_until {
        Some(format!(
            "the model is acting on it: it launched {} ago, and policy.floor_after_mins ({}m) from its last launch leaves it {} more",
            human_duration(now - memory.model_launched_at.unwrap_or(now)),
            p.floor_after_mins,
            human_duration(until - now)
        ))
    } else if model.stops > 0 {
        Some("the model stopped an instance in this pass (the floor never undoes it)".into())
    } else if model.launches_blocked > 0 {
        Some(
            "the model's launch met a rate limit or failed at vast.ai (the floor's would too)"
                .into(),
        )
    } else {
        None
    }
}

/// The rules' destroys of flagged instances, at once, when WORKERS DEAD's `launches` are
/// planned and the caps leave them too little room (slots, or $/h at our billing instances'
/// mean price) that the flagged instances hold; none otherwise.
fn flagged_hold_the_room(
    pass: &Pass<'_>,
    wanted: &[PlannedCall],
    launches: usize,
) -> Vec<PlannedCall> {
    let flagged = of_kind(wanted, &[CallKind::Flagged]);
    if launches == 0 || flagged.is_empty() {
        return Vec::new();
    }
    if pass.snapshot.room_for(pass.config, launches) {
        return Vec::new();
    }
    flagged
        .into_iter()
        .map(|c| {
            c.with_reason(floor_reason(
                &c.why,
                "holding the room WORKERS DEAD's launches need",
            ))
        })
        .collect()
}

/// The rules' destroys of flagged instances left for `policy.floor_flagged_passes`.
fn flagged(pass: &Pass<'_>, wanted: &[PlannedCall], memory: &Memory) -> Vec<PlannedCall> {
    let min = pass.config.policy.floor_flagged_passes;
    of_kind(wanted, &[CallKind::Flagged])
        .into_iter()
        .filter_map(|c| {
            let id = c.instance_id().unwrap_or(0);
            let passes = memory.flagged_passes.get(&id).copied().unwrap_or(0);
            let left = format!("left for {passes} passes");
            (passes >= min).then(|| c.with_reason(floor_reason(&c.why, &left)))
        })
        .collect()
}

/// The rules' surplus and unprofitable stops (never within `min_rental_mins` of a start,
/// never what the surplus band keeps), once left for `policy.floor_idle_mins` and not in a
/// pass where the model launched; until then the surplus clock runs. It runs on after the
/// floor's stop while the rules still want one: the rest of the surplus has been left as
/// long (a walkthrough saw the clock start again after each stop, one idle instance stopped
/// every 120 minutes where the rules stop one a pass: 1.57x the rules' spend on an idle day).
fn surplus(pass: &Pass<'_>, wanted: &[PlannedCall], memory: &mut Memory) -> Vec<PlannedCall> {
    let stops = of_kind(wanted, &[CallKind::Surplus, CallKind::Unprofitable]);
    if stops.is_empty() {
        return Vec::new();
    }
    let now = pass.now;
    let since = pass.before.surplus_since.unwrap_or(now);
    let waited = now - since;
    let idle_ms = pass.config.policy.floor_idle_mins as i64 * 60_000;
    if waited < idle_ms || pass.model.launches > 0 {
        memory.surplus_since = Some(since);
        return Vec::new();
    }
    memory.surplus_since = Some(since);
    let left = format!("left idle for {}", human_duration(waited));
    stops
        .iter()
        .map(|c| c.with_reason(floor_reason(&c.why, &left)))
        .collect()
}

/// Why an open deficit gets no launch from the rules in this pass, when that leaves it
/// unanswered: a pass below the backlog threshold, the rules' streak confirming it again
/// after one, the operator's hold, the launch window spent, `max_instances` reached. None
/// when the rules judge what works and comes enough.
fn no_launch_why(
    snapshot: &Snapshot,
    config: &Config,
    d: &crate::demand::Demand,
    dip: bool,
    confirmed: bool,
) -> Option<String> {
    if dip {
        return Some(format!(
            "a pass below the backlog threshold ({} waiting, {} idle workers); one keeps the deficit open",
            d.backlog_signal(),
            d.idle_workers()
        ));
    }
    if !confirmed {
        return Some(format!(
            "the backlog is back; the rules' streak confirms it again ({} pass(es) so far)",
            snapshot.streaks.backlog_passes
        ));
    }
    rules::launches_held(snapshot, config)
}

fn of_kind<'a>(calls: &'a [PlannedCall], kinds: &[CallKind]) -> Vec<&'a PlannedCall> {
    calls.iter().filter(|c| kinds.contains(&c.kind)).collect()
}

/// A floor call as the fallback makes it (the model unusable, `llm.fallback = "rules"`):
/// `fallback (left for 2 passes): ...`, not `floor (the model left it undone, left for 2
/// passes): ...`, which said the model had answered when it never did.
pub fn as_fallback(call: &PlannedCall) -> PlannedCall {
    let rewritten = call
        .why
        .strip_prefix(FLOOR_REASON_PREFIX)
        .map(|rest| format!("fallback ({rest}"));
    let why = rewritten.unwrap_or_else(|| {
        let why = call.why.strip_prefix("rules: ").unwrap_or(&call.why);
        format!("fallback: {why}")
    });
    call.with_reason(why)
}

/// How [`floor_reason`] begins.
const FLOOR_REASON_PREFIX: &str = "floor (the model left it undone, ";

/// `floor (the model left it undone, left for 3 passes): instance 7 is exited: ...`.
fn floor_reason(rules_why: &str, how_long: &str) -> String {
    let why = rules_why.strip_prefix("rules: ").unwrap_or(rules_why);
    format!("{FLOOR_REASON_PREFIX}{how_long}): {why}")
}

#[cfg(test)]
mod tests;
