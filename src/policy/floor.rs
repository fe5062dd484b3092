//! The floor (DESIGN.md "The floor: the rules under every model decision"): a model that
//! answers "no action" while every worker is dead is as dangerous as a rate limiter that
//! refuses the launch. After the model's turns the rules plan the same snapshot (as the
//! model's own calls left it), and what protects the fleet that the model left undone is
//! carried out through the same tools and guardrails, with actor `floor`:
//!
//! - WORKERS DEAD launches, in the same pass;
//! - a deficit the rules would answer (a backlog, or a seed instance), once it has gone
//!   unanswered for `policy.floor_after_mins`;
//! - a flagged instance (stuck, exited, offline, unknown), once it has been left for
//!   `policy.floor_flagged_passes` passes;
//! - idle surplus (and, with a price, an idle instance that no longer makes its margin),
//!   once it has been left for `policy.floor_idle_mins`; as the rules decide it: nothing
//!   started within `policy.min_rental_mins`, nothing the surplus band keeps;
//! - an outbid bid (destroyed, and replaced while demand needs it) and a fleet over a cap
//!   (the newest surplus stopped), in the same pass.
//!
//! The floor never acts on unknown demand nor while the operator has paused the agent, never
//! puts back what an operator stopped within `policy.operator_hold_mins` (the rules plan no
//! launch then: `rules::decide`), never doubles the model's launches (the rules
//! count them as coming), and never undoes what the model did in the pass: no launch for a
//! deficit in a pass where the model stopped an instance, no stop of surplus in a pass where
//! it launched one. Pure: the pass keeps the [`Memory`] between passes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::clock::{human_duration, Millis};
use crate::config::Config;
use crate::fleet::Snapshot;

use super::rules::{self, CallKind, Mode, PlannedCall};

/// What the floor remembers between passes (stored as JSON beside the streaks).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Memory {
    /// Since when the rules have wanted a launch for a deficit the model left unanswered.
    #[serde(default)]
    pub deficit_since: Option<Millis>,
    /// Since when the rules have wanted to stop idle surplus the model left.
    #[serde(default)]
    pub surplus_since: Option<Millis>,
    /// Flagged instances of ours (vast.ai id) and the passes each has been flagged so far.
    #[serde(default)]
    pub flagged_passes: BTreeMap<i64, u32>,
}

/// What the model did in this pass (mutating calls that went through, and launches that met
/// a limit).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelDid {
    pub launches: u32,
    pub stops: u32,
    /// Launches of the model that met a limit the floor's own would meet in the same pass:
    /// refused by the launch window (`rate_limited`), or failed on vast.ai's rate limit. The
    /// model asked as the rules would, and its ask is on record.
    pub launches_blocked: u32,
}

/// The floor's decision for one pass: the calls to make (reasons say `floor:` and why) and
/// the memory to keep.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub calls: Vec<PlannedCall>,
    pub memory: Memory,
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
    if snapshot.demand.is_none() || snapshot.paused.is_some() {
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
    }
    let wanted = rules::decide(snapshot, config, low_demand_passes, Mode::Full);
    let p = &config.policy;
    let mut memory = Memory::default();
    for f in snapshot.flagged(config) {
        let n = before.flagged_passes.get(&f.vast_id).copied().unwrap_or(0) + 1;
        memory.flagged_passes.insert(f.vast_id, n);
    }
    // A paused bid may resume at any moment, and a fleet over a cap pays for it every
    // minute: both are answered in the same pass, before any launch (a destroy frees the
    // slot the replacement takes).
    let mut calls: Vec<PlannedCall> = of_kind(&wanted, &[CallKind::Outbid, CallKind::OverCap])
        .into_iter()
        .map(|c| c.with_reason(floor_reason(&c.why, "in the same pass")))
        .collect();
    if model.launches_blocked == 0 {
        calls.extend(
            of_kind(&wanted, &[CallKind::Replace])
                .into_iter()
                .map(|c| c.with_reason(floor_reason(&c.why, "in the same pass"))),
        );
    }

    let mut emergency: Vec<&PlannedCall> = of_kind(&wanted, &[CallKind::Emergency]);
    if model.launches_blocked > 0 {
        // The model's launch met the window or vast.ai's rate limit: so would the floor's.
        emergency.clear();
    } else if model.launches > 0 {
        // The rules ask at least once in an emergency, so that a refusal is on record; the
        // model's own launches are that record: the floor adds only what the window has room for.
        let w = snapshot.window(config);
        emergency.truncate(w.limit.saturating_sub(w.used) as usize);
    }
    for c in &emergency {
        calls.push(c.with_reason(floor_reason(&c.why, "in the same pass")));
    }

    let deficit = of_kind(&wanted, &[CallKind::Deficit, CallKind::Seed]);
    if !deficit.is_empty() && emergency.is_empty() {
        let since = before.deficit_since.unwrap_or(now);
        let waited = now - since;
        // Not in a pass where the model stopped an instance (never undo it), nor where its
        // launch met a limit the floor's would meet too (its clock runs on).
        if waited >= p.floor_after_mins as i64 * 60_000
            && model.stops == 0
            && model.launches_blocked == 0
        {
            let left = format!("left unanswered for {}", human_duration(waited));
            calls.extend(
                deficit
                    .iter()
                    .map(|c| c.with_reason(floor_reason(&c.why, &left))),
            );
        } else {
            memory.deficit_since = Some(since);
        }
    }

    for c in of_kind(&wanted, &[CallKind::Flagged]) {
        let id = c.arguments["instance_id"].as_i64().unwrap_or(0);
        let passes = memory.flagged_passes.get(&id).copied().unwrap_or(0);
        if passes >= p.floor_flagged_passes {
            let left = format!("left for {passes} passes");
            calls.push(c.with_reason(floor_reason(&c.why, &left)));
        }
    }

    // Surplus and unprofitable stops are the rules' own: never within `min_rental_mins` of a
    // start, never what the surplus band keeps.
    let surplus = of_kind(&wanted, &[CallKind::Surplus, CallKind::Unprofitable]);
    if !surplus.is_empty() {
        let since = before.surplus_since.unwrap_or(now);
        let waited = now - since;
        if waited >= p.floor_idle_mins as i64 * 60_000 && model.launches == 0 {
            let left = format!("left idle for {}", human_duration(waited));
            calls.extend(
                surplus
                    .iter()
                    .map(|c| c.with_reason(floor_reason(&c.why, &left))),
            );
        } else {
            memory.surplus_since = Some(since);
        }
    }
    Plan { calls, memory }
}

fn of_kind<'a>(calls: &'a [PlannedCall], kinds: &[CallKind]) -> Vec<&'a PlannedCall> {
    calls.iter().filter(|c| kinds.contains(&c.kind)).collect()
}

/// `floor (the model left it undone, left for 3 passes): instance 7 is exited: ...`.
fn floor_reason(rules_why: &str, how_long: &str) -> String {
    let why = rules_why.strip_prefix("rules: ").unwrap_or(rules_why);
    format!("floor (the model left it undone, {how_long}): {why}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::demand::{Demand, Worker};
    use crate::fleet::State;
    use crate::fleet::{LOADING, PROVING, REGISTERED};
    use crate::store::instances::InstanceRow;
    use crate::store::session::Streaks;

    const NOW: Millis = 1_800_000_000_000;
    const MIN: Millis = 60_000;

    fn config() -> Config {
        let mut c = Config::default();
        c.vast.image = Some("img".into());
        c.policy.max_dph_total = Some(10.0);
        c.policy.max_instances = Some(10);
        c.policy.target_proofs_per_hour = 100.0;
        c.policy.proofs_per_hour_per_instance = 50.0;
        c
    }

    fn row(id: i64, state: State, machine: Option<&str>) -> InstanceRow {
        InstanceRow {
            label: format!("fleetagent-{id}"),
            vast_id: Some(id),
            state,
            actual_status: Some("running".into()),
            status_msg: None,
            gpu_name: None,
            dph: Some(0.5),
            offer_id: None,
            public_ip: None,
            machine_name: machine.map(String::from),
            worker_address: None,
            launched_run: None,
            adopted: false,
            created_at: NOW - 120 * MIN,
            state_since: NOW - 120 * MIN,
            last_seen_at: None,
            gone_at: None,
            machine_id: None,
            is_bid: false,
            storage_dph: None,
        }
    }

    fn worker(name: &str, running: u32) -> Worker {
        Worker {
            machine_name: name.into(),
            host_and_port: "10.0.0.1:1".into(),
            running,
            cordoned: false,
        }
    }

    fn snapshot(demand: Option<Demand>, instances: Vec<InstanceRow>) -> Snapshot {
        Snapshot {
            now: NOW,
            run_id: 9,
            demand,
            instances,
            ..Default::default()
        }
    }

    fn dead() -> Snapshot {
        let d = Demand {
            pending: 59,
            ..Default::default()
        };
        snapshot(Some(d), vec![])
    }

    fn backlog() -> Snapshot {
        let d = Demand {
            pending: 7,
            running: 1,
            completed_1h: 48,
            workers: vec![worker("fleetagent-1", 1)],
            ..Default::default()
        };
        let mut s = snapshot(Some(d), vec![row(1, PROVING, Some("fleetagent-1"))]);
        s.streaks = Streaks {
            low_demand_passes: 0,
            backlog_passes: 3,
        };
        s
    }

    fn idle() -> Snapshot {
        let d = Demand {
            pending: 0,
            completed_1h: 10,
            workers: vec![
                worker("fleetagent-1", 1),
                worker("fleetagent-2", 0),
                worker("fleetagent-3", 0),
            ],
            ..Default::default()
        };
        snapshot(
            Some(d),
            vec![
                row(1, PROVING, Some("fleetagent-1")),
                row(2, REGISTERED, Some("fleetagent-2")),
                row(3, REGISTERED, Some("fleetagent-3")),
            ],
        )
    }

    fn none() -> ModelDid {
        ModelDid::default()
    }

    #[test]
    fn workers_dead_launches_in_the_same_pass() {
        let p = plan(&dead(), &config(), 0, &Memory::default(), &none(), NOW);
        assert!(!p.calls.is_empty());
        assert!(p.calls.iter().all(|c| c.tool == "launch_instance"));
        assert!(
            p.calls[0]
                .why
                .starts_with("floor (the model left it undone, in the same pass): WORKERS DEAD"),
            "{}",
            p.calls[0].why
        );
        assert_eq!(p.calls[0].arguments["reason"], p.calls[0].why.as_str());
    }

    #[test]
    fn what_the_model_launched_is_not_doubled() {
        // The model launched enough: the snapshot counts them as coming, the rules ask for none.
        let mut s = dead();
        for id in 1..=2 {
            let mut r = row(id, LOADING, None);
            r.created_at = NOW;
            r.state_since = NOW;
            s.instances.push(r);
        }
        let did = ModelDid {
            launches: 2,
            ..ModelDid::default()
        };
        let p = plan(&s, &config(), 0, &Memory::default(), &did, NOW);
        assert!(p.calls.is_empty(), "{:?}", p.calls);
    }

    #[test]
    fn a_model_that_filled_the_emergency_window_gets_no_refused_extra() {
        // The model launched 6 (the emergency allowance) and they are still short of the
        // need: the rules would ask once more to record the refusal; the floor does not.
        let mut s = dead();
        for id in 1..=6 {
            let mut r = row(id, LOADING, None);
            r.created_at = NOW;
            r.state_since = NOW;
            s.instances.push(r);
            s.window_launches.push(NOW);
        }
        let mut c = config();
        c.policy.target_proofs_per_hour = 1000.0;
        let did = ModelDid {
            launches: 6,
            ..ModelDid::default()
        };
        assert!(!rules::decide(&s, &c, 0, Mode::Full).is_empty());
        assert!(plan(&s, &c, 0, &Memory::default(), &did, NOW)
            .calls
            .is_empty());
        // Nor after a model whose ask the window refused (the model asked as the rules would).
        let refused = ModelDid {
            launches_blocked: 1,
            ..ModelDid::default()
        };
        assert!(plan(&s, &c, 0, &Memory::default(), &refused, NOW)
            .calls
            .is_empty());
        // Without the model's launches on record, the floor's one ask stands (and is refused
        // by the window, on record).
        assert_eq!(
            plan(&s, &c, 0, &Memory::default(), &none(), NOW)
                .calls
                .len(),
            1
        );
    }

    #[test]
    fn a_deficit_waits_floor_after_mins_then_is_answered() {
        let c = config();
        let first = plan(&backlog(), &c, 0, &Memory::default(), &none(), NOW);
        assert!(first.calls.is_empty());
        assert_eq!(first.memory.deficit_since, Some(NOW));
        let later = NOW + 19 * MIN;
        let still = plan(&backlog(), &c, 0, &first.memory, &none(), later);
        assert!(still.calls.is_empty());
        assert_eq!(still.memory.deficit_since, Some(NOW));
        let due = NOW + 20 * MIN;
        let acted = plan(&backlog(), &c, 0, &first.memory, &none(), due);
        assert_eq!(acted.calls.len(), 1, "{:?}", acted.calls);
        assert!(
            acted.calls[0].why.contains("left unanswered for 20m"),
            "{}",
            acted.calls[0].why
        );
        // Answered: the clock starts again.
        assert_eq!(acted.memory.deficit_since, None);
        // A pass where the model stopped something never relaunches it.
        let did = ModelDid {
            stops: 1,
            ..ModelDid::default()
        };
        let held = plan(&backlog(), &c, 0, &first.memory, &did, due);
        assert!(held.calls.is_empty());
        assert_eq!(held.memory.deficit_since, Some(NOW));
        // Nor where the model's own launch met vast.ai's rate limit: the floor's would too,
        // and its clock runs on.
        let blocked = ModelDid {
            launches_blocked: 1,
            ..ModelDid::default()
        };
        let held = plan(&backlog(), &c, 0, &first.memory, &blocked, due);
        assert!(held.calls.is_empty());
        assert_eq!(held.memory.deficit_since, Some(NOW));
        // The deficit gone: nothing remembered.
        let mut gone = backlog();
        gone.streaks.backlog_passes = 0;
        assert_eq!(
            plan(&gone, &c, 0, &first.memory, &none(), due)
                .memory
                .deficit_since,
            None
        );
    }

    #[test]
    fn a_flagged_instance_is_destroyed_after_floor_flagged_passes() {
        let c = config();
        let mut s = idle();
        s.instances[2].actual_status = Some("exited".into());
        let one = plan(&s, &c, 0, &Memory::default(), &none(), NOW);
        assert!(one.calls.iter().all(|c| c.kind != CallKind::Flagged));
        assert_eq!(one.memory.flagged_passes.get(&3), Some(&1));
        let two = plan(&s, &c, 0, &one.memory, &none(), NOW + 5 * MIN);
        let stops: Vec<_> = two
            .calls
            .iter()
            .filter(|c| c.kind == CallKind::Flagged)
            .collect();
        assert_eq!(stops.len(), 1);
        assert_eq!(stops[0].arguments["instance_id"], 3);
        assert!(
            stops[0].why.contains("left for 2 passes"),
            "{}",
            stops[0].why
        );
        // Once it is gone it is forgotten.
        let mut fixed = s.clone();
        fixed.instances.remove(2);
        assert!(plan(&fixed, &c, 0, &two.memory, &none(), NOW)
            .memory
            .flagged_passes
            .is_empty());
    }

    #[test]
    fn idle_surplus_goes_after_floor_idle_mins_unless_the_model_launched() {
        let c = config();
        let first = plan(&idle(), &c, 1, &Memory::default(), &none(), NOW);
        assert!(first.calls.is_empty(), "{:?}", first.calls);
        assert_eq!(first.memory.surplus_since, Some(NOW));
        let due = NOW + 120 * MIN;
        let acted = plan(&idle(), &c, 1, &first.memory, &none(), due);
        assert_eq!(acted.calls.len(), 1);
        assert_eq!(acted.calls[0].tool, "stop_instance");
        assert!(
            acted.calls[0].why.contains("left idle for 2h"),
            "{}",
            acted.calls[0].why
        );
        let did = ModelDid {
            launches: 1,
            ..ModelDid::default()
        };
        assert!(plan(&idle(), &c, 1, &first.memory, &did, due)
            .calls
            .is_empty());
    }

    #[test]
    fn the_floor_never_stops_a_young_instance_the_rules_keep() {
        let c = config();
        let mut s = idle();
        for r in s.instances.iter_mut() {
            r.created_at = NOW - 10 * MIN;
        }
        let before = Memory {
            surplus_since: Some(NOW - 600 * MIN),
            ..Memory::default()
        };
        let p = plan(&s, &c, 1, &before, &none(), NOW);
        assert!(p.calls.is_empty(), "{:?}", p.calls);
        // Past min_rental_mins, the idle surplus left that long goes.
        let p = plan(&idle(), &c, 1, &before, &none(), NOW);
        assert_eq!(p.calls.len(), 1);
    }

    #[test]
    fn unknown_demand_does_nothing_and_runs_no_clock() {
        let c = config();
        let mut s = backlog();
        s.demand = None;
        s.demand_error = Some("timeout".into());
        let before = Memory {
            deficit_since: Some(NOW - 60 * MIN),
            surplus_since: None,
            flagged_passes: [(3, 4)].into_iter().collect(),
        };
        let p = plan(&s, &c, 0, &before, &none(), NOW);
        assert!(p.calls.is_empty());
        assert_eq!(p.memory.deficit_since, None);
        assert_eq!(p.memory.flagged_passes, before.flagged_passes);
    }

    #[test]
    fn a_pause_plans_nothing_and_a_hold_launches_nothing() {
        let c = config();
        let before = Memory {
            deficit_since: Some(NOW - 60 * MIN),
            surplus_since: None,
            flagged_passes: [(3, 4)].into_iter().collect(),
        };
        let mut s = dead();
        s.instances = vec![row(3, crate::fleet::DEAD, None)];
        s.instances[0].actual_status = Some("exited".into());
        s.paused = Some(crate::store::ops::Pause {
            since: NOW - MIN,
            until: None,
            reason: "hands off".into(),
        });
        let p = plan(&s, &c, 0, &before, &none(), NOW);
        assert!(p.calls.is_empty(), "{:?}", p.calls);
        assert_eq!(p.memory.deficit_since, None, "no clock runs while paused");
        assert_eq!(p.memory.flagged_passes, before.flagged_passes);
        // A hold: the WORKERS DEAD launches are not made; the exited one still goes.
        s.paused = None;
        s.hold = Some(crate::fleet::OperatorHold {
            stopped_at: NOW - 5 * MIN,
            instance_id: Some(7),
            label: Some("fleetagent-7".into()),
            until: NOW + 25 * MIN,
        });
        let p = plan(&s, &c, 0, &before, &none(), NOW);
        let tools: Vec<&str> = p.calls.iter().map(|c| c.tool).collect();
        assert_eq!(tools, vec!["stop_instance"], "{:?}", p.calls);
        s.hold = None;
        let p = plan(&s, &c, 0, &before, &none(), NOW);
        assert!(p.calls.iter().any(|c| c.tool == "launch_instance"));
    }

    #[test]
    fn proofshare_disabled_gives_the_floor_nothing_to_launch() {
        let c = config();
        // Queued rows and pending tasks, no worker: WORKERS DEAD were ProofShare on.
        let mut s = dead();
        s.demand.as_mut().unwrap().proofshare_enabled = Some(false);
        s.demand.as_mut().unwrap().ps_waiting = Some(4);
        let before = Memory {
            deficit_since: Some(NOW - 600 * MIN),
            ..Memory::default()
        };
        let p = plan(&s, &c, 0, &before, &ModelDid::default(), NOW);
        assert!(p.calls.is_empty(), "{:?}", p.calls);
        assert_eq!(p.memory.deficit_since, None);
        // A backlog, disabled: no deficit launch either.
        let mut b = backlog();
        b.demand.as_mut().unwrap().proofshare_enabled = Some(false);
        let p = plan(&b, &c, 0, &before, &ModelDid::default(), NOW);
        assert!(p.calls.is_empty(), "{:?}", p.calls);
    }
}
