//! The rules policy's unit tests (src/policy/rules.rs).

use super::*;
use crate::demand::{Demand, Worker};
use crate::fleet::State;
use crate::fleet::{BOOTED, PROVING};
use crate::policy::streaks::next_streaks;
use InstanceRow;

const NOW: i64 = 1_000_000_000;

fn config() -> Config {
    let mut c = Config::default();
    c.vast.image = Some("img".into());
    c.policy.max_dph_total = Some(10.0);
    c.policy.max_instances = Some(20);
    c.policy.target_proofs_per_hour = 500.0;
    c.policy.proofs_per_hour_per_instance = 50.0;
    c
}

fn row(id: i64, state: State, machine: Option<&str>, dph: f64) -> InstanceRow {
    InstanceRow {
        label: format!("fleetagent-{id}"),
        vast_id: Some(id),
        state,
        actual_status: Some(
            if state == LOADING {
                "loading"
            } else {
                "running"
            }
            .into(),
        ),
        status_msg: None,
        gpu_name: Some("RTX 4090".into()),
        dph: Some(dph),
        offer_id: None,
        public_ip: None,
        machine_name: machine.map(String::from),
        worker_address: None,
        launched_run: None,
        adopted: false,
        created_at: NOW - 60_000,
        state_since: NOW - 60_000,
        last_seen_at: Some(NOW),
        gone_at: None,
        machine_id: None,
        is_bid: false,
        storage_dph: None,
        paused_spans: Vec::new(),
    }
}

/// A row rented two hours ago (past `min_rental_mins`).
fn old(id: i64, state: State, machine: Option<&str>, dph: f64) -> InstanceRow {
    InstanceRow {
        created_at: NOW - 120 * 60_000,
        ..row(id, state, machine, dph)
    }
}

fn worker(name: &str, running: u32) -> Worker {
    Worker {
        machine_name: name.into(),
        host_and_port: "10.0.0.1:12300".into(),
        running,
        cordoned: false,
    }
}

fn snap(demand: Option<Demand>, instances: Vec<InstanceRow>) -> Snapshot {
    Snapshot {
        now: NOW,
        demand,
        instances,
        ..Default::default()
    }
}

/// decide() with these streaks in the snapshot, as a pass would have them.
fn decide_with(s: &Snapshot, c: &Config, st: Streaks, mode: Mode) -> Vec<PlannedCall> {
    let mut s = s.clone();
    s.streaks = st;
    decide(&s, c, st.low_demand_passes, mode)
}

fn launches(calls: &[PlannedCall]) -> usize {
    calls.iter().filter(|c| c.tool == "launch_instance").count()
}

fn stops(calls: &[PlannedCall]) -> Vec<i64> {
    calls
        .iter()
        .filter(|c| c.tool == "stop_instance")
        .map(|c| c.arguments["instance_id"].as_i64().unwrap())
        .collect()
}

#[test]
fn workers_dead_does_not_double_a_fleet_that_is_booting_to_the_target() {
    // Target 100 p/h, 10 queued, no live worker, two of ours booting for a minute
    // (100 p/h coming): nothing more, pass after pass.
    let mut c = config();
    c.policy.target_proofs_per_hour = 100.0;
    let d = Demand {
        pending: 10,
        ..Default::default()
    };
    let mut s = snap(
        Some(d),
        (1..=2).map(|i| row(i, LOADING, None, 0.44)).collect(),
    );
    assert_eq!(
        launches(&decide_with(&s, &c, Streaks::default(), Mode::Full)),
        0
    );
    // One of them has been loading longer than a normal boot (half of
    // stuck_loading_mins): it no longer counts as coming, so one replaces it.
    s.instances[0].state_since = NOW - 16 * 60_000;
    let calls = decide_with(&s, &c, Streaks::default(), Mode::LaunchOnly);
    assert_eq!(launches(&calls), 1);
    assert!(calls[0].why.contains("WORKERS DEAD"), "{}", calls[0].why);
}

#[test]
fn workers_dead_on_running_instances_are_not_waited_for_as_booting() {
    // Two of ours proved until a minute ago; now Curio has no live worker and vast.ai still
    // lists them running (booted): they lost their workers, nothing is coming.
    let mut c = config();
    c.policy.target_proofs_per_hour = 100.0;
    let d = Demand {
        pending: 10,
        ..Default::default()
    };
    let mut s = snap(
        Some(d),
        (1..=2).map(|i| row(i, BOOTED, None, 0.44)).collect(),
    );
    for r in &mut s.instances {
        r.state_since = NOW - 60_000;
        r.worker_address = Some(format!("10.0.0.{}:12300", r.vast_id.unwrap()));
    }
    let calls = decide_with(&s, &c, Streaks::default(), Mode::LaunchOnly);
    assert_eq!(launches(&calls), 2, "{calls:?}");
    assert!(calls[0].why.contains("WORKERS DEAD"), "{}", calls[0].why);
    // Booting ones that never had a worker are still waited for.
    for r in &mut s.instances {
        r.worker_address = None;
    }
    assert_eq!(
        launches(&decide_with(&s, &c, Streaks::default(), Mode::LaunchOnly)),
        0
    );
}

#[test]
fn incident_asks_for_launches_even_as_fallback() {
    // 59p/0r, no live worker, 3 of ours loading (150 p/h coming), 3 launches in the window.
    let d = Demand {
        pending: 59,
        ..Default::default()
    };
    let mut s = snap(
        Some(d),
        (1..=3).map(|i| row(i, LOADING, None, 0.44)).collect(),
    );
    s.window_launches = vec![NOW - 600_000, NOW - 300_000, NOW - 60_000];
    let calls = decide_with(&s, &config(), Streaks::default(), Mode::LaunchOnly);
    // need 500 - 150 = 350 p/h = 7 instances, but the emergency window has 3 left.
    assert_eq!(launches(&calls), 3);
    assert!(calls[0].why.contains("WORKERS DEAD"), "{}", calls[0].why);
    assert!(stops(&calls).is_empty());
    // With the emergency window used up it still asks once (the refusal is recorded).
    s.window_launches.extend([NOW, NOW, NOW]);
    assert_eq!(
        launches(&decide_with(&s, &config(), Streaks::default(), Mode::Full)),
        1
    );
}

#[test]
fn failed_probe_holds_but_cleans_flagged() {
    let mut exited = row(9, State::Dead, None, 0.4);
    exited.actual_status = Some("exited".into());
    let mut s = snap(None, vec![exited, row(2, BOOTED, None, 0.4)]);
    s.demand_error = Some("connection refused".into());
    let calls = decide_with(&s, &config(), Streaks::default(), Mode::Full);
    assert_eq!(launches(&calls), 0);
    assert_eq!(stops(&calls), vec![9]);
    assert!(decide_with(&s, &config(), Streaks::default(), Mode::LaunchOnly).is_empty());
}

#[test]
fn steady_state_does_nothing() {
    let d = Demand {
        pending: 2,
        running: 4,
        completed_1h: 180,
        workers: (1..=4)
            .map(|i| worker(&format!("fleetagent-{i}"), 1))
            .collect(),
        ..Default::default()
    };
    let s = snap(
        Some(d.clone()),
        (1..=4)
            .map(|i| row(i, PROVING, Some(&format!("fleetagent-{i}")), 0.4))
            .collect(),
    );
    let streaks = next_streaks(Streaks::default(), s.demand.as_ref());
    assert_eq!(streaks, Streaks::default());
    assert!(decide_with(&s, &config(), streaks, Mode::Full).is_empty());
}

#[test]
fn spike_scales_up_after_two_passes_toward_target() {
    let d = Demand {
        pending: 7,
        running: 4,
        completed_1h: 190,
        workers: (1..=4)
            .map(|i| worker(&format!("fleetagent-{i}"), 1))
            .collect(),
        ..Default::default()
    };
    let s = snap(
        Some(d),
        (1..=4)
            .map(|i| row(i, PROVING, Some(&format!("fleetagent-{i}")), 0.4))
            .collect(),
    );
    let first = next_streaks(Streaks::default(), s.demand.as_ref());
    assert_eq!(first.backlog_passes, 1);
    assert_eq!(launches(&decide_with(&s, &config(), first, Mode::Full)), 0);
    let second = next_streaks(first, s.demand.as_ref());
    // target 500, projected 4 x 50 = 200, saturated (190 of 200 p/h): one more (a fleet
    // just under a steady demand is saturated too) ...
    assert_eq!(launches(&decide_with(&s, &config(), second, Mode::Full)), 1);
    // ... and once the backlog has lasted 2 x BACKLOG_STEP_PASSES, half as much again as
    // the fleet does (285 p/h): 2 more, not all 6 toward the target at once.
    let lasting = Streaks {
        backlog_passes: 2 * BACKLOG_STEP_PASSES,
        ..second
    };
    assert_eq!(
        launches(&decide_with(&s, &config(), lasting, Mode::Full)),
        2
    );
    // Something of ours still loading: wait for it.
    let mut loading = s.clone();
    loading.instances.push(row(9, LOADING, None, 0.4));
    assert_eq!(
        launches(&decide_with(&loading, &config(), second, Mode::Full)),
        0
    );
    // At target throughput: no scale-up.
    let mut at_target = s.clone();
    at_target.demand.as_mut().unwrap().completed_1h = 520;
    assert_eq!(
        launches(&decide_with(&at_target, &config(), second, Mode::Full)),
        0
    );
}

#[test]
fn idle_surplus_stopped_on_a_low_pass_and_never_in_fallback() {
    let d = Demand {
        pending: 0,
        running: 1,
        completed_1h: 20,
        workers: vec![
            worker("fleetagent-1", 1),
            worker("fleetagent-2", 0),
            worker("fleetagent-3", 0),
        ],
        ..Default::default()
    };
    let s = snap(
        Some(d),
        vec![
            old(1, PROVING, Some("fleetagent-1"), 0.4),
            old(2, REGISTERED, Some("fleetagent-2"), 0.4),
            old(3, REGISTERED, Some("fleetagent-3"), 0.6),
        ],
    );
    // Not a low pass (nothing idle was seen): nothing stops.
    assert!(stops(&decide_with(&s, &config(), Streaks::default(), Mode::Full)).is_empty());
    // One pass short of LOW_DEMAND_PASSES: nothing yet (a round trip pays a boot).
    let mut st = Streaks::default();
    for _ in 1..LOW_DEMAND_PASSES {
        st = next_streaks(st, s.demand.as_ref());
    }
    assert!(stops(&decide_with(&s, &config(), st, Mode::Full)).is_empty());
    let st = next_streaks(st, s.demand.as_ref());
    assert_eq!(st.low_demand_passes, LOW_DEMAND_PASSES);
    // The dearest idle one goes, one per pass.
    assert_eq!(stops(&decide_with(&s, &config(), st, Mode::Full)), vec![3]);
    assert!(stops(&decide_with(&s, &config(), st, Mode::LaunchOnly)).is_empty());
    // A failed probe neither counts nor resets.
    let unknown = snap(None, vec![]);
    assert_eq!(next_streaks(st, unknown.demand.as_ref()), st);
}

#[test]
fn seed_when_target_and_nothing_alive() {
    let s = snap(Some(Demand::default()), vec![]);
    let calls = decide_with(&s, &config(), Streaks::default(), Mode::LaunchOnly);
    assert_eq!(launches(&calls), 1);
    let mut no_target = config();
    no_target.policy.target_proofs_per_hour = 0.0;
    assert!(decide_with(&s, &no_target, Streaks::default(), Mode::Full).is_empty());
}

/// Four 4090s proving at 50 p/h each (config), all busy, a backlog for two passes.
fn busy_fleet(completed_1h: u32, completed_15m: u32) -> Snapshot {
    let d = Demand {
        pending: 7,
        running: 4,
        completed_1h,
        completed_15m,
        workers: (1..=4)
            .map(|i| worker(&format!("fleetagent-{i}"), 1))
            .collect(),
        ..Default::default()
    };
    let mut s = snap(
        Some(d),
        (1..=4)
            .map(|i| row(i, PROVING, Some(&format!("fleetagent-{i}")), 0.4))
            .collect(),
    );
    s.streaks = Streaks {
        low_demand_passes: 0,
        backlog_passes: BACKLOG_PASSES,
    };
    s
}

#[test]
fn a_fifteen_minute_burst_is_not_a_large_deficit() {
    // 55 in 15 min (220/h) on 200 p/h of capacity, but 160 in the hour: a burst on a
    // fleet with room over the hour. Not after two passes (it may be the arrivals'
    // noise); after BACKLOG_WEAK_PASSES, one launch, not half as much again (3).
    let asked = |s: &Snapshot| launches(&decide_with(s, &config(), s.streaks, Mode::Full));
    let mut burst = busy_fleet(160, 55);
    assert_eq!(asked(&burst), 0);
    burst.streaks.backlog_passes = BACKLOG_WEAK_PASSES;
    assert_eq!(
        asked(&burst),
        1 + BACKLOG_WEAK_PASSES as usize / BACKLOG_STEP_PASSES as usize
    );
    // Demand rose (a dead market waking): the quarter fills the fleet at three times the
    // hour's pace. The hour is low for want of work, not room: a deficit after 2 passes.
    let waking = busy_fleet(60, 50);
    assert!(asked(&waking) > 0);
    // Saturated for the hour (195 of 200 p/h): one more at once; once the backlog has
    // lasted 2 x BACKLOG_STEP_PASSES the deficit is large, 300 p/h wanted.
    let mut saturated = busy_fleet(195, 50);
    assert_eq!(asked(&saturated), 1);
    saturated.streaks.backlog_passes = 2 * BACKLOG_STEP_PASSES;
    assert_eq!(asked(&saturated), 2);
}

/// A pass that answers no backlog says why, in the note `history` shows: the streak it
/// waits for, or ours booting (it said "Rules: no action." alone: a walkthrough).
#[test]
fn a_backlog_the_rules_wait_on_is_said_with_what_they_wait_for() {
    let c = config();
    let burst = busy_fleet(160, 55);
    let why = super::waiting_why(&burst, &c).unwrap();
    assert!(
        why.starts_with(&format!(
            "a backlog of 7 with every live worker busy, {BACKLOG_PASSES} pass(es) in a row: the rules launch for it once it lasts {BACKLOG_WEAK_PASSES} ("
        )),
        "{why}"
    );
    assert!(
        why.contains("it shows 80 % of the fleet's capacity)"),
        "{why}"
    );
    let mut booting = busy_fleet(195, 50);
    booting.instances.push(row(9, BOOTED, None, 0.4));
    let why = super::waiting_why(&booting, &c).unwrap();
    assert!(
        why.ends_with("the rules wait for the 1 instance(s) of ours booting before renting more"),
        "{why}"
    );
    // Answered: nothing to say.
    assert_eq!(super::waiting_why(&busy_fleet(195, 50), &c), None);
    // Whatever the streak, a full window launches nothing: said instead of a promise.
    let mut full = busy_fleet(160, 55);
    full.window_launches = vec![full.now - 60_000; c.policy.launch_window_max as usize];
    let why = super::waiting_why(&full, &c).unwrap();
    assert!(
        why.ends_with("and no launch can go: the launch window is spent (3 of 3 in policy.launch_window_minutes)"),
        "{why}"
    );
}

#[test]
fn an_instance_running_without_its_worker_yet_holds_scale_up_back() {
    let mut s = busy_fleet(195, 50);
    let st = s.streaks;
    s.instances.push(row(9, BOOTED, None, 0.4));
    assert_eq!(launches(&decide_with(&s, &config(), st, Mode::Full)), 0);
    // Once its worker registers it counts as working capacity, and the backlog decides.
    s.instances.pop();
    assert!(launches(&decide_with(&s, &config(), st, Mode::Full)) > 0);
}

/// Three proving 4090s (50 p/h each in this config) and two idle: a 4090 at $0.60
/// (dearest per proof) and a 3090 at $0.25 (22 p/h): 222 p/h working. `history`: the
/// proofs Curio's six hours hold.
fn surplus_case(c1h: u32, history: Option<u32>) -> (Snapshot, Config) {
    let mut c = config();
    c.policy.gpu_rates.insert("RTX 3090".into(), 22.0);
    let d = Demand {
        pending: 0,
        running: 3,
        completed_1h: c1h,
        completed_15m: c1h / 4,
        workers: (1..=5)
            .map(|i| worker(&format!("fleetagent-{i}"), u32::from(i <= 3)))
            .collect(),
        history: history
            .map(|proofs| {
                vec![crate::demand::WorkerHistory {
                    host_and_port: "10.0.0.1:12300".into(),
                    proofs,
                    first_end_secs_ago: 6 * 3600,
                    last_end_secs_ago: 10,
                    busy_secs: None,
                    completed_1h: None,
                }]
            })
            .unwrap_or_default(),
        ..Default::default()
    };
    let mut rows: Vec<InstanceRow> = (1..=3)
        .map(|i| old(i, PROVING, Some(&format!("fleetagent-{i}")), 0.4))
        .collect();
    rows.push(old(4, REGISTERED, Some("fleetagent-4"), 0.6));
    let mut small = old(5, REGISTERED, Some("fleetagent-5"), 0.25);
    small.gpu_name = Some("RTX 3090".into());
    rows.push(small);
    let mut s = snap(Some(d), rows);
    s.streaks = Streaks {
        low_demand_passes: LOW_DEMAND_PASSES,
        backlog_passes: 0,
    };
    (s, c)
}

/// The surplus stops of [`surplus_case`] without a price (the target the goal).
fn surplus_stops(c1h: u32, history: Option<u32>) -> Vec<i64> {
    let (s, c) = surplus_case(c1h, history);
    stops(&decide_with(&s, &c, s.streaks, Mode::Full))
}

/// The same with a price at which every instance makes its margin (profit judges).
fn surplus_stops_priced(c1h: u32, history: Option<u32>) -> Vec<i64> {
    let (mut s, c) = surplus_case(c1h, history);
    priced(&mut s, 1.0);
    stops(&decide_with(&s, &c, s.streaks, Mode::Full))
}

#[test]
fn surplus_leaves_capacity_for_demands_upper_band() {
    // With a price. No history: the hour's count, +/- its square root. 150 done: the band
    // is 174.5: the 4090 (172 left) cannot go, the 3090 (200 left) can.
    assert_eq!(surplus_stops_priced(150, None), vec![5]);
    // 100 done: 120: the dearest per proof goes first.
    assert_eq!(surplus_stops_priced(100, None), vec![4]);
    // 180 done: 207 is more than either leaves: nothing goes.
    assert!(surplus_stops_priced(180, None).is_empty());
    // 175 done: 201.5: nothing, on the hour alone...
    assert!(surplus_stops_priced(175, None).is_empty());
    // ...but six hours at 165/h say demand is steady and known to +/- 5: 175.5, at 90 %
    // busy 195, and the 3090 goes.
    assert_eq!(surplus_stops_priced(175, Some(990)), vec![5]);
    // Steady at 150/h: 160 at 90 % is 177.8: the 4090 (172 left) still cannot go.
    assert_eq!(surplus_stops_priced(150, Some(900)), vec![5]);
    // Demand fell (six hours at 200/h, this hour 100): the hour decides, as it moved.
    assert_eq!(surplus_stops_priced(100, Some(1200)), vec![4]);

    // Without a price the fleet is left at most 85 % busy at the band's top, steady or not
    // (UNPRICED_STOP_UTILISATION_MAX). 150 done: 174.5 needs 205.3 left: neither goes.
    assert!(surplus_stops(150, None).is_empty());
    // 100 done: 120 needs 141.2: the dearest per proof goes, as with a price.
    assert_eq!(surplus_stops(100, None), vec![4]);
    // Steady at 165/h: 175.5 needs 206.5: the 3090 (200 left) stays.
    assert!(surplus_stops(175, Some(990)).is_empty());
    // Steady at 150/h: 160 needs 188.2: the 3090 goes, the 4090 (172 left) stays.
    assert_eq!(surplus_stops(150, Some(900)), vec![5]);
    assert_eq!(surplus_stops(100, Some(1200)), vec![4]);
}

#[test]
fn nothing_is_stopped_within_min_rental_mins_of_its_start() {
    let (mut s, mut c) = surplus_case(100, None);
    // The 4090 started 20 minutes ago: the 3090 goes instead.
    s.instances[3].created_at = NOW - 20 * 60_000;
    assert_eq!(stops(&decide_with(&s, &c, s.streaks, Mode::Full)), vec![5]);
    // Both young: nothing.
    s.instances[4].created_at = NOW - 29 * 60_000;
    assert!(stops(&decide_with(&s, &c, s.streaks, Mode::Full)).is_empty());
    // A flagged young one is destroyed all the same.
    s.instances[4].actual_status = Some("exited".into());
    s.instances[4].state = State::Dead;
    assert_eq!(stops(&decide_with(&s, &c, s.streaks, Mode::Full)), vec![5]);
    // min_rental_mins = 0: the 4090 goes.
    c.policy.min_rental_mins = 0;
    s.instances.pop();
    assert_eq!(stops(&decide_with(&s, &c, s.streaks, Mode::Full)), vec![4]);
}

#[test]
fn a_stop_pays_for_itself_only_if_demand_leaves_it_idle_longer_than_a_relaunch() {
    let c = config();
    // A relaunch: a 15-minute boot plus 10 % of a failed one (30 + 15 minutes).
    assert!((relaunch_hours(&c) - 0.325).abs() < 1e-9);
    let band = DemandBand {
        hour: 200.0,
        long: None,
        level: 200.0,
        sigma: 200f64.sqrt(),
        steady: false,
    };
    // Capacity left at the level: demand needs more half the passes, after 10 minutes.
    assert!(!stop_pays(&band, 200.0, &c));
    assert!((band.hours_until_needed(200.0, 1.0 / 12.0) - 1.0 / 6.0).abs() < 1e-6);
    // One deviation above: about one pass in six, after half an hour: it pays.
    assert!(stop_pays(&band, 200.0 + 200f64.sqrt(), &c));
    assert!((normal_tail(0.0) - 0.5).abs() < 1e-6 && (normal_tail(1.0) - 0.158_655).abs() < 1e-5);
    assert!((normal_tail(-1.0) - 0.841_345).abs() < 1e-5);
}

fn priced(s: &mut Snapshot, revenue: f64) {
    s.price = Some(crate::price::Price {
        revenue_per_proof: revenue,
        proof_fil: revenue,
        proof_fil_source: "config",
        fil_usd: 1.0,
        fil_usd_source: "config",
        fil_usd_at: NOW,
    });
}

#[test]
fn an_unprofitable_instance_goes_first_on_surplus_and_is_replaced_on_a_deficit() {
    // Revenue 0.012 $/proof, margin 0.2: at most 0.0096 $/proof. The 3090 ($0.25 over
    // 22 p/h = 0.0114) loses its margin; the 4090s (0.4 / 50 = 0.008) keep it, the idle one
    // at $0.60 (0.012) loses it too, and is the worse.
    let (mut s, c) = surplus_case(150, None);
    priced(&mut s, 0.012);
    let losing: Vec<i64> = unprofitable(&s, &c)
        .iter()
        .map(|(r, _)| r.vast_id.unwrap())
        .collect();
    assert_eq!(losing, vec![4, 5]);
    // 150 done: the surplus band would let only the 3090 go; unprofitable ones go on the
    // hour (150 x 1.05 = 157.5; the 4090 leaves 172): the worse first.
    let calls = decide_with(&s, &c, s.streaks, Mode::Full);
    assert_eq!(stops(&calls), vec![4]);
    assert_eq!(calls[0].kind, CallKind::Unprofitable);
    // At a price every instance makes its margin at, the plain surplus rule: the 3090.
    assert_eq!(surplus_stops_priced(150, None), vec![5]);
    // A deficit (saturated, backlog) with an unprofitable instance: one launch more.
    let mut b = busy_fleet(195, 50);
    let plain = launches(&decide_with(&b, &config(), b.streaks, Mode::Full));
    priced(&mut b, 0.012);
    b.instances[0].dph = Some(0.55);
    let calls = decide_with(&b, &config(), b.streaks, Mode::Full);
    assert_eq!(launches(&calls), plain + 1);
    assert!(
        calls[0].why.contains("to replace instance 1"),
        "{}",
        calls[0].why
    );
}

#[test]
fn an_unprofitable_instance_is_replaced_without_a_deficit_and_goes_once_idle() {
    // No backlog streak: no deficit. Instance 1 at $0.55 over 50 p/h (0.011 $/proof)
    // leaves less than the margin of a 0.012 revenue (0.0096); the others keep it.
    let mut b = busy_fleet(195, 50);
    b.streaks.backlog_passes = 0;
    priced(&mut b, 0.012);
    b.instances[0].dph = Some(0.55);
    let calls = decide_with(&b, &config(), b.streaks, Mode::Full);
    // Without it the fleet has 150 p/h for an hour of 195: one replacement.
    assert_eq!(launches(&calls), 1, "{calls:?}");
    assert_eq!(calls[0].kind, CallKind::Unprofitable);
    assert!(calls[0].why.contains("instance 1"), "{}", calls[0].why);
    // The market had no profitable offer a moment ago: no ask (each is a search).
    let mut refused = b.clone();
    refused.unprofitable_refused_at = Some(NOW - 60_000);
    assert_eq!(
        launches(&decide_with(
            &refused,
            &config(),
            refused.streaks,
            Mode::Full
        )),
        0
    );
    // The rest covers the hour (100 done): nothing to rent, and once it is idle and past
    // its minimum rental it goes, though the queue is not low (7 pending).
    let mut idle = b.clone();
    idle.demand.as_mut().unwrap().completed_1h = 100;
    idle.demand.as_mut().unwrap().workers[0].running = 0;
    idle.instances[0].state = REGISTERED;
    idle.instances[0].created_at = NOW - 2 * 3_600_000;
    idle.instances[0].state_since = NOW - 2 * 3_600_000;
    let calls = decide_with(&idle, &config(), idle.streaks, Mode::Full);
    assert_eq!(launches(&calls), 0, "{calls:?}");
    assert_eq!(stops(&calls), vec![1]);
    assert_eq!(calls[0].kind, CallKind::Unprofitable);
    // A profitable idle instance is not stopped on that queue.
    idle.price = None;
    assert!(stops(&decide_with(&idle, &config(), idle.streaks, Mode::Full)).is_empty());
}

#[test]
fn with_a_price_the_target_is_a_cap_and_unprofitable_growth_is_not_asked() {
    // Target 0 (no cap) with a price: a saturated backlog grows the fleet all the same.
    let mut c = config();
    c.policy.target_proofs_per_hour = 0.0;
    let mut b = busy_fleet(195, 50);
    priced(&mut b, 0.05);
    assert!(launches(&decide_with(&b, &c, b.streaks, Mode::Full)) > 0);
    // The best instance we rent proves at 0.008 $/proof: at 0.009 revenue the next one
    // leaves less than the 20 % margin: no launch.
    priced(&mut b, 0.009);
    assert_eq!(launches(&decide_with(&b, &c, b.streaks, Mode::Full)), 0);
    // A cap reached: none either.
    priced(&mut b, 0.05);
    c.policy.target_proofs_per_hour = 150.0;
    assert_eq!(launches(&decide_with(&b, &c, b.streaks, Mode::Full)), 0);
    // No worker, nothing queued, no target, a price: one seed instance.
    c.policy.target_proofs_per_hour = 0.0;
    let mut empty = snap(Some(Demand::default()), vec![]);
    assert!(decide_with(&empty, &c, Streaks::default(), Mode::Full).is_empty());
    priced(&mut empty, 0.05);
    assert_eq!(
        launches(&decide_with(&empty, &c, Streaks::default(), Mode::Full)),
        1
    );
}

#[test]
fn a_silent_worker_is_destroyed_and_learned_rates_size_the_fleet() {
    let mut c = config();
    c.policy.silent_worker_mins = 20;
    let mut silent = row(1, REGISTERED, Some("fleetagent-1"), 0.4);
    silent.state_since = NOW - 30 * 60_000;
    let d = Demand {
        pending: 6,
        workers: vec![worker("fleetagent-1", 0)],
        ..Default::default()
    };
    let mut s = snap(Some(d), vec![silent]);
    s.work_waiting_since = Some(NOW - 40 * 60_000);
    let calls = decide_with(&s, &c, Streaks::default(), Mode::Full);
    assert_eq!(stops(&calls), vec![1]);
    assert!(calls[0].why.contains("is silent 30m"), "{}", calls[0].why);
    // The fallback never stops.
    assert!(stops(&decide_with(&s, &c, Streaks::default(), Mode::LaunchOnly)).is_empty());

    // Capacity: two 4090s proving, measured at 100/h each (unpinned), reach the target
    // of 500 less than the configured 50/h would say: the rate is what the fleet does.
    let two = vec![
        row(2, PROVING, Some("fleetagent-2"), 0.4),
        row(3, PROVING, Some("fleetagent-3"), 0.4),
    ];
    let mut m = snap(None, two);
    assert_eq!(m.projected_pph(&c), 100.0);
    m.measured_rates.insert("RTX 4090".into(), 100.0);
    assert_eq!(m.projected_pph(&c), 200.0);
    c.policy.gpu_rates.insert("RTX 4090".into(), 60.0);
    assert_eq!(m.projected_pph(&c), 120.0);
}

/// A day profile the rules believe, learned at `now` from two days of hours: each hour at
/// `rate(offset)`, its offset from the hour of `now` (0 its own, 1 the next, -1 the last).
fn believed(now: i64, rate: impl Fn(i64) -> f64) -> crate::fleet::day::DayProfile {
    use crate::fleet::day::{Cell, DayProfile, HOUR_MS};
    let this = now - now.rem_euclid(HOUR_MS);
    let cells: Vec<Cell> = (1..=48i64)
        .rev()
        .map(|k| {
            let off = (-k).rem_euclid(24);
            Cell {
                start: this - k * HOUR_MS,
                pph: rate(if off > 12 { off - 24 } else { off }),
                samples: 12,
                saturated: false,
            }
        })
        .collect();
    let p = DayProfile::learn(&cells, now);
    assert!(p.trusted, "{}", p.why);
    p
}

#[test]
fn a_rise_the_believed_day_shows_within_a_boot_is_rented_ahead() {
    // Two proving instances (100 p/h), nothing queued; NOW is 46 minutes past the hour, so
    // a normal boot (15 minutes) from now falls in the next hour, which history puts at 300:
    // less two deviations (265), 3 more would each be at least half busy; the window allows 3.
    let busy: Vec<InstanceRow> = (1..=2)
        .map(|i| row(i, PROVING, Some(&format!("fleetagent-{i}")), 0.4))
        .collect();
    let d = Demand {
        running: 2,
        completed_1h: 100,
        completed_15m: 25,
        workers: (1..=2)
            .map(|i| worker(&format!("fleetagent-{i}"), 1))
            .collect(),
        ..Default::default()
    };
    let mut s = snap(Some(d), busy);
    let st = Streaks::default();
    assert_eq!(launches(&decide_with(&s, &config(), st, Mode::Full)), 0);
    s.day = Some(believed(NOW, |off| if off == 1 { 300.0 } else { 100.0 }));
    let calls = decide_with(&s, &config(), st, Mode::Full);
    assert_eq!(launches(&calls), 3, "{calls:?}");
    assert!(calls.iter().all(|c| c.kind == CallKind::Ahead));
    assert!(
        calls[0]
            .why
            .starts_with("rules: the day's history expects 300 p/h from "),
        "{}",
        calls[0].why
    );
    // 180 p/h ahead, less two deviations 153: the one more would be busy all the time, a
    // second 6 %: one.
    s.day = Some(believed(NOW, |off| if off == 1 { 180.0 } else { 100.0 }));
    assert_eq!(launches(&decide_with(&s, &config(), st, Mode::Full)), 1);
    // 140, less two deviations 116: it would be a third busy: none. Nor from a profile the
    // rules do not believe.
    s.day = Some(believed(NOW, |off| if off == 1 { 140.0 } else { 100.0 }));
    assert_eq!(launches(&decide_with(&s, &config(), st, Mode::Full)), 0);
    let mut doubted = believed(NOW, |off| if off == 1 { 300.0 } else { 100.0 });
    doubted.trusted = false;
    s.day = Some(doubted);
    assert_eq!(launches(&decide_with(&s, &config(), st, Mode::Full)), 0);
}

#[test]
fn idle_capacity_the_believed_day_needs_within_the_payback_is_held() {
    // 100 done an hour: the dearest per proof (instance 4) goes, reacting alone.
    assert_eq!(surplus_stops(100, None), vec![4]);
    let (mut s, c) = surplus_case(100, None);
    // History puts the next hour at 250: more than either stop leaves (172, 200) within
    // the payback (about 20 minutes, reaching into the next hour): nothing goes.
    s.day = Some(believed(NOW, |off| if off == 1 { 250.0 } else { 100.0 }));
    assert!(stops(&decide_with(&s, &c, s.streaks, Mode::Full)).is_empty());
    // A flat day at 100: the same stop as reacting alone.
    s.day = Some(believed(NOW, |_| 100.0));
    assert_eq!(stops(&decide_with(&s, &c, s.streaks, Mode::Full)), vec![4]);
}

#[test]
fn a_fall_the_believed_day_shows_lets_the_surplus_go_before_the_hour_shows_it() {
    // 180 done in the hour, 100/h in the last quarter: on the hour alone the band is 207 and
    // nothing goes.
    let (mut s, c) = surplus_case(180, None);
    if let Some(d) = s.demand.as_mut() {
        d.completed_15m = 25;
    }
    assert!(stops(&decide_with(&s, &c, s.streaks, Mode::Full)).is_empty());
    // History: 300 the last hour, 120 this one and the next (a fall past two deviations):
    // the level is 120 (the quarter does 100), the band 142, and the dearest goes.
    s.day = Some(believed(NOW, |off| if off == -1 { 300.0 } else { 120.0 }));
    let calls = decide_with(&s, &c, s.streaks, Mode::Full);
    assert_eq!(stops(&calls), vec![4]);
    assert!(
        calls[0]
            .why
            .ends_with("(the day's history shows demand falling to 120/h)"),
        "{}",
        calls[0].why
    );
    // The quarter doing 180 keeps it: the present must not be doing more.
    if let Some(d) = s.demand.as_mut() {
        d.completed_15m = 45;
    }
    assert!(stops(&decide_with(&s, &c, s.streaks, Mode::Full)).is_empty());
}

#[test]
fn launches_vast_ai_refused_with_429_are_still_owed_while_the_others_boot() {
    // A deficit of 2 (300 p/h wanted of a fleet doing 200, the backlog long enough), one of
    // ours booting from the last pass, whose other launch vast.ai refused with 429.
    let mut s = busy_fleet(195, 50);
    s.streaks.backlog_passes = 2 * BACKLOG_STEP_PASSES;
    s.instances.push(row(9, LOADING, None, 0.4));
    let st = s.streaks;
    assert_eq!(launches(&decide_with(&s, &config(), st, Mode::Full)), 0);
    // The refused one is owed: rented now, no more than that though the step asks for 2.
    s.rate_limited_owed = 1;
    assert_eq!(launches(&decide_with(&s, &config(), st, Mode::Full)), 1);
    // Owed, but the deficit is gone (the hour at the target): nothing.
    s.demand.as_mut().unwrap().completed_1h = 520;
    assert_eq!(launches(&decide_with(&s, &config(), st, Mode::Full)), 0);
}
