//! The floor's unit tests (src/policy/floor.rs).

use super::*;
use crate::demand::{Demand, Worker};
use crate::fleet::State;
use crate::fleet::{LOADING, PROVING, REGISTERED};
use crate::policy::rules::LOW_DEMAND_PASSES;
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
        paused_spans: Vec::new(),
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
    // The same call made by the fallback (the model never answered): not "left it undone".
    let f = as_fallback(&p.calls[0]);
    assert!(
        f.why
            .starts_with("fallback (in the same pass): WORKERS DEAD"),
        "{}",
        f.why
    );
    assert_eq!(f.arguments["reason"], f.why.as_str());
    assert_eq!((f.tool, f.kind), (p.calls[0].tool, p.calls[0].kind));
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

/// The backlog at `pending` with the rules' own streak at `passes`.
fn backlog_of(pending: u32, passes: u32) -> Snapshot {
    let mut s = backlog();
    s.demand.as_mut().unwrap().pending = pending;
    s.streaks.backlog_passes = passes;
    s
}

/// An instance of ours launched at `at`, loading.
fn booting(id: i64, at: Millis) -> InstanceRow {
    let mut r = row(id, LOADING, None);
    r.created_at = at;
    r.state_since = at;
    r
}

fn launches(p: &Plan) -> Vec<&PlannedCall> {
    p.calls
        .iter()
        .filter(|c| c.tool == "launch_instance")
        .collect()
}

#[test]
fn a_deficit_the_rules_confirm_is_answered_in_the_same_pass_when_the_model_did_nothing() {
    let c = config();
    // One pass of backlog: the rules do not confirm it yet, and neither does the floor.
    let one = plan(&backlog_of(7, 1), &c, 0, &Memory::default(), &none(), NOW);
    assert!(one.calls.is_empty(), "{:?}", one.calls);
    assert_eq!(one.memory.deficit_since, None);
    // The second: confirmed by the rules' own streak (a saturated fleet), answered at once.
    let two = plan(
        &backlog_of(7, 2),
        &c,
        0,
        &one.memory,
        &none(),
        NOW + 5 * MIN,
    );
    assert_eq!(launches(&two).len(), 1, "{:?}", two.calls);
    assert_eq!(two.deficit_calls(), 1);
    assert!(
        two.calls[0].why.starts_with(
            "floor (the model left it undone, in the same pass): backlog of 7 for 2 passes"
        ),
        "{}",
        two.calls[0].why
    );
    assert_eq!(two.memory.deficit_since, Some(NOW + 5 * MIN));
    assert_eq!(two.memory.unanswered, None);
    // Its launch is coming: nothing more, the clock runs on, the deficit is not unanswered.
    let mut coming = backlog_of(7, 3);
    coming.instances.push(booting(2, NOW + 9 * MIN));
    let three = plan(&coming, &c, 0, &two.memory, &none(), NOW + 10 * MIN);
    assert!(three.calls.is_empty(), "{:?}", three.calls);
    assert_eq!(three.memory.deficit_since, Some(NOW + 5 * MIN));
    assert_eq!(three.memory.unanswered, None);
    // Still short once it works: the floor launches again, naming how long the deficit is open.
    let four = plan(
        &backlog_of(7, 4),
        &c,
        0,
        &three.memory,
        &none(),
        NOW + 25 * MIN,
    );
    assert_eq!(launches(&four).len(), 1, "{:?}", four.calls);
    assert!(
        four.calls[0].why.contains("deficit open 20m"),
        "{}",
        four.calls[0].why
    );
}

#[test]
fn a_pass_where_the_model_stopped_or_its_launch_met_a_limit_leaves_the_deficit_unanswered() {
    let c = config();
    let open = plan(&backlog_of(7, 2), &c, 0, &Memory::default(), &none(), NOW).memory;
    let stopped = ModelDid {
        stops: 1,
        ..ModelDid::default()
    };
    let held = plan(&backlog_of(7, 3), &c, 0, &open, &stopped, NOW + 5 * MIN);
    assert!(held.calls.is_empty());
    assert_eq!(held.memory.deficit_since, Some(NOW));
    assert_eq!(
        held.memory.unanswered.as_deref(),
        Some("the model stopped an instance in this pass (the floor never undoes it)")
    );
    let blocked = ModelDid {
        launches_blocked: 1,
        ..ModelDid::default()
    };
    let held = plan(&backlog_of(7, 3), &c, 0, &open, &blocked, NOW + 5 * MIN);
    assert!(held.calls.is_empty());
    assert!(held
        .memory
        .unanswered
        .as_deref()
        .is_some_and(|w| w.starts_with("the model's launch met a rate limit")));
    // The window spent (by anyone): the rules plan no launch, and the pass says why.
    let mut spent = backlog_of(7, 3);
    spent.window_launches = vec![NOW; 3];
    let held = plan(&spent, &c, 0, &open, &none(), NOW + 5 * MIN);
    assert!(held.calls.is_empty(), "{:?}", held.calls);
    assert_eq!(
        held.memory.unanswered.as_deref(),
        Some("the launch window is spent (3 of 3 in policy.launch_window_minutes)")
    );
}

#[test]
fn the_deficit_clock_survives_one_pass_below_the_backlog_threshold() {
    let c = config();
    let confirmed = plan(&backlog_of(7, 2), &c, 0, &Memory::default(), &none(), NOW);
    assert_eq!(launches(&confirmed).len(), 1);
    // One pass with 4 pending (Curio keeps 4-8 once the workers are busy): the rules' streak
    // resets, the floor's clock does not.
    let dip = plan(
        &backlog_of(4, 0),
        &c,
        0,
        &confirmed.memory,
        &none(),
        NOW + 5 * MIN,
    );
    assert!(dip.calls.is_empty(), "{:?}", dip.calls);
    assert_eq!(dip.memory.deficit_since, Some(NOW));
    assert!(dip.memory.dipped);
    assert!(
        dip.memory
            .unanswered
            .as_deref()
            .is_some_and(|w| w.starts_with("a pass below the backlog threshold (4 waiting")),
        "{:?}",
        dip.memory.unanswered
    );
    // The backlog is back: the same deficit, still open while the rules' own streak confirms
    // it again; the floor launches as they do, never before (a model that answers as the
    // rules would is never overruled).
    let back = plan(
        &backlog_of(7, 1),
        &c,
        0,
        &dip.memory,
        &none(),
        NOW + 10 * MIN,
    );
    assert!(back.calls.is_empty(), "{:?}", back.calls);
    assert_eq!(back.memory.deficit_since, Some(NOW));
    assert_eq!(
        back.memory.unanswered.as_deref(),
        Some("the backlog is back; the rules' streak confirms it again (1 pass(es) so far)")
    );
    let again = plan(
        &backlog_of(7, 2),
        &c,
        0,
        &back.memory,
        &none(),
        NOW + 15 * MIN,
    );
    assert_eq!(launches(&again).len(), 1, "{:?}", again.calls);
    assert!(
        again.calls[0].why.contains("deficit open 15m"),
        "{}",
        again.calls[0].why
    );
    // Two passes below it in a row close the clock.
    let second = plan(
        &backlog_of(3, 0),
        &c,
        0,
        &dip.memory,
        &none(),
        NOW + 10 * MIN,
    );
    assert_eq!(second.memory.deficit_since, None);
    assert_eq!(second.memory.unanswered, None);
    // As does the target reached (the rules want no more capacity).
    let mut met = backlog_of(7, 1);
    met.demand.as_mut().unwrap().completed_1h = 100;
    assert_eq!(
        plan(&met, &c, 0, &dip.memory, &none(), NOW + 10 * MIN)
            .memory
            .deficit_since,
        None
    );
}

#[test]
fn a_model_acting_on_the_deficit_gets_floor_after_mins_from_its_last_launch() {
    let c = config();
    // The model launched in the pass the rules confirm the deficit: its instance is coming.
    let mut s = backlog_of(7, 2);
    s.instances.push(booting(2, NOW));
    let did = ModelDid {
        launches: 1,
        ..ModelDid::default()
    };
    let acted = plan(&s, &c, 0, &Memory::default(), &did, NOW);
    assert!(acted.calls.is_empty(), "{:?}", acted.calls);
    assert_eq!(acted.memory.model_launched_at, Some(NOW));
    assert_eq!(acted.memory.deficit_since, Some(NOW));
    // It works and the backlog holds; the model answers text (nothing ran): its grace holds.
    let grace = plan(
        &backlog_of(7, 4),
        &c,
        0,
        &acted.memory,
        &none(),
        NOW + 15 * MIN,
    );
    assert!(grace.calls.is_empty(), "{:?}", grace.calls);
    assert_eq!(
        grace.memory.unanswered.as_deref(),
        Some("the model is acting on it: it launched 15m ago, and policy.floor_after_mins (20m) from its last launch leaves it 5m more")
    );
    // Past it, the floor adds what the rules want.
    let due = plan(
        &backlog_of(7, 5),
        &c,
        0,
        &grace.memory,
        &none(),
        NOW + 20 * MIN,
    );
    assert_eq!(launches(&due).len(), 1, "{:?}", due.calls);
    // The deficit closed, the grace is forgotten with it.
    let closed = Memory {
        deficit_since: None,
        ..acted.memory.clone()
    };
    let fresh = plan(&backlog_of(7, 2), &c, 0, &closed, &none(), NOW + 5 * MIN);
    assert_eq!(launches(&fresh).len(), 1, "{:?}", fresh.calls);
}

#[test]
fn a_seed_instance_is_launched_in_the_same_pass() {
    let c = config();
    // No worker, nothing queued or coming, a target: the rules want one seed instance.
    let s = snapshot(Some(Demand::default()), vec![]);
    let p = plan(&s, &c, 0, &Memory::default(), &none(), NOW);
    assert_eq!(p.deficit_calls(), 1, "{:?}", p.calls);
    assert_eq!(p.calls[0].kind, CallKind::Seed);
    assert_eq!(p.memory.deficit_since, Some(NOW));
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
    // The model tried it this pass and vast.ai's rate limit refused it: the floor's destroy
    // would meet it too, and overruling a model that did what it should is noise; the next
    // pass tries again.
    let blocked = ModelDid {
        stops_blocked: vec![3],
        ..ModelDid::default()
    };
    let three = plan(&s, &c, 0, &one.memory, &blocked, NOW + 5 * MIN);
    assert!(three.calls.iter().all(|c| c.kind != CallKind::Flagged));
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
    let first = plan(
        &idle(),
        &c,
        LOW_DEMAND_PASSES,
        &Memory::default(),
        &none(),
        NOW,
    );
    assert!(first.calls.is_empty(), "{:?}", first.calls);
    assert_eq!(first.memory.surplus_since, Some(NOW));
    let due = NOW + 120 * MIN;
    let acted = plan(&idle(), &c, LOW_DEMAND_PASSES, &first.memory, &none(), due);
    assert_eq!(acted.calls.len(), 1);
    assert_eq!(acted.calls[0].tool, "stop_instance");
    assert!(
        acted.calls[0].why.contains("left idle for 2h"),
        "{}",
        acted.calls[0].why
    );
    // The rest of the surplus has been left as long: the next pass stops the next (the
    // clock started again after each stop: one every 120 minutes, a walkthrough).
    assert_eq!(acted.memory.surplus_since, Some(NOW));
    let next = plan(
        &idle(),
        &c,
        LOW_DEMAND_PASSES,
        &acted.memory,
        &none(),
        due + 5 * MIN,
    );
    assert_eq!(next.calls.len(), 1, "{:?}", next.calls);
    assert!(
        next.calls[0].why.contains("left idle for 2h05m"),
        "{}",
        next.calls[0].why
    );
    let did = ModelDid {
        launches: 1,
        ..ModelDid::default()
    };
    assert!(
        plan(&idle(), &c, LOW_DEMAND_PASSES, &first.memory, &did, due)
            .calls
            .is_empty()
    );
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
    let p = plan(&s, &c, LOW_DEMAND_PASSES, &before, &none(), NOW);
    assert!(p.calls.is_empty(), "{:?}", p.calls);
    // Past min_rental_mins, the idle surplus left that long goes.
    let p = plan(&idle(), &c, LOW_DEMAND_PASSES, &before, &none(), NOW);
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
        ..Memory::default()
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
        ..Memory::default()
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

/// WORKERS DEAD with the money cap held by flagged instances: they are destroyed at once,
/// before the launches, not after floor_flagged_passes (the re-test: launches refused
/// `budget` in pass 1, the destroys in pass 2, the first launch in pass 3). With room to
/// spare they wait as before.
#[test]
fn flagged_instances_holding_workers_deads_room_go_first_and_at_once() {
    let mut c = config();
    c.policy.max_dph_total = Some(1.1);
    let mut s = dead();
    for id in [1, 2] {
        let mut r = row(id, crate::fleet::DEAD, None);
        r.actual_status = Some("exited".into());
        s.instances.push(r);
    }
    let p = plan(&s, &c, 0, &Memory::default(), &none(), NOW);
    let kinds: Vec<CallKind> = p.calls.iter().map(|c| c.kind).collect();
    assert_eq!(
        &kinds[..2],
        &[CallKind::Flagged, CallKind::Flagged],
        "{kinds:?}"
    );
    assert!(kinds[2..].iter().all(|k| *k == CallKind::Emergency) && kinds.len() > 2);
    assert!(p.calls[0]
        .why
        .contains("holding the room WORKERS DEAD's launches need"));
    // Room to spare: the flagged wait their passes, the launches go.
    c.policy.max_dph_total = Some(10.0);
    let p = plan(&s, &c, 0, &Memory::default(), &none(), NOW);
    assert!(p.calls.iter().all(|c| c.kind == CallKind::Emergency));
}
