//! `combine`'s precedence, the rules one by one where `tests.rs` reaches them only through
//! `decide`, the facts they share, and the plans' arguments (src/policy/rules/*.rs).

use super::{combine, launches, stops, Asks, CallKind, Facts, Launch, Mode, PlannedCall, Stop};
use super::{decide, Config, Snapshot};
use crate::demand::Demand;
use crate::fleet::fixtures::{config, row, worker, MIN, NOW};
use crate::fleet::{OperatorHold, LAUNCHING, LOADING, OUTBID, PROVING};

/// Two proving instances of ours (50 p/h each), their workers busy, nothing queued.
fn fleet() -> Snapshot {
    let instances = (1..=2)
        .map(|i| {
            let mut r = row(&format!("fleetagent-{i}"), Some(i), PROVING, 0.4);
            r.machine_name = Some(r.label.clone());
            r
        })
        .collect();
    let d = Demand {
        running: 2,
        workers: (1..=2)
            .map(|i| worker(&format!("fleetagent-{i}"), "10.0.0.1:1", 1))
            .collect(),
        ..Default::default()
    };
    Snapshot {
        now: NOW,
        demand: Some(d),
        instances,
        ..Default::default()
    }
}

fn launch(n: u32, kind: CallKind, emergency: bool) -> Option<Launch> {
    Some(Launch {
        n,
        why: format!("rules: {}", kind.as_str()),
        kind,
        emergency,
    })
}

fn stop(instance_id: i64, kind: CallKind) -> Stop {
    Stop {
        instance_id,
        why: format!("rules: stop {instance_id}"),
        kind,
    }
}

/// Facts with this much room in the launch window and under `max_instances`.
fn room<'a>(s: &'a Snapshot, c: &'a Config, window: u32, slots: u32) -> Facts<'a> {
    let mut f = Facts::of(s, c, 0, Mode::Full);
    f.window_left = window;
    f.slots_left = slots;
    f
}

fn kinds(calls: &[PlannedCall]) -> Vec<(CallKind, Option<i64>)> {
    calls.iter().map(|c| (c.kind, c.instance_id())).collect()
}

#[test]
fn combine_makes_the_destroys_then_one_rules_launches_then_the_surplus_stop() {
    let (s, c) = (fleet(), config());
    let asks = Asks {
        flagged: vec![stop(1, CallKind::Flagged), stop(5, CallKind::Outbid)],
        over_cap: vec![stop(2, CallKind::OverCap)],
        deficit: launch(2, CallKind::Deficit, false),
        surplus: Some(stop(3, CallKind::Surplus)),
        ..Asks::default()
    };
    let calls = combine(&room(&s, &c, 3, 5), &asks);
    assert_eq!(
        kinds(&calls),
        vec![
            (CallKind::Flagged, Some(1)),
            (CallKind::Outbid, Some(5)),
            (CallKind::OverCap, Some(2)),
            (CallKind::Deficit, None),
            (CallKind::Deficit, None),
            (CallKind::Surplus, Some(3)),
        ]
    );
    assert_eq!(calls[3].why, "rules: deficit (launch 1 of 2)");
    assert_eq!(calls[4].why, "rules: deficit (launch 2 of 2)");
    assert!(calls[3].is_launch() && !calls[0].is_launch());
}

#[test]
fn the_first_launch_rule_that_asks_for_any_is_the_passs() {
    let (s, c) = (fleet(), config());
    let f = room(&s, &c, 10, 10);
    let mut asks = Asks {
        workers_dead: launch(1, CallKind::Emergency, true),
        deficit: launch(2, CallKind::Deficit, false),
        seed: launch(1, CallKind::Seed, false),
        outbid_replacement: launch(1, CallKind::Replace, false),
        unprofitable_replacement: launch(1, CallKind::Unprofitable, false),
        ..Asks::default()
    };
    let launched = |asks: &Asks| kinds(&combine(&f, asks));
    assert_eq!(launched(&asks), vec![(CallKind::Emergency, None)]);
    asks.workers_dead = None;
    assert_eq!(launched(&asks), vec![(CallKind::Deficit, None); 2]);
    // Bids destroyed this pass that ask for more than the deficit: all come back.
    asks.outbid_replacement = launch(3, CallKind::Replace, false);
    assert_eq!(launched(&asks), vec![(CallKind::Replace, None); 3]);
    asks.outbid_replacement = launch(1, CallKind::Replace, false);
    // A rule that asks for none leaves it to the next.
    asks.deficit = launch(0, CallKind::Deficit, false);
    assert_eq!(launched(&asks), vec![(CallKind::Seed, None)]);
    asks.seed = None;
    assert_eq!(launched(&asks), vec![(CallKind::Replace, None)]);
    asks.outbid_replacement = launch(0, CallKind::Replace, false);
    assert_eq!(launched(&asks), vec![(CallKind::Unprofitable, None)]);
    asks.unprofitable_replacement = None;
    assert!(launched(&asks).is_empty());
}

#[test]
fn the_window_and_the_slots_cap_launches_but_one_asked_while_workers_are_dead_asks_once() {
    let (s, c) = (fleet(), config());
    let deficit = Asks {
        deficit: launch(3, CallKind::Deficit, false),
        ..Asks::default()
    };
    let calls = combine(&room(&s, &c, 1, 5), &deficit);
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].why, "rules: deficit (launch 1 of 1)");
    assert_eq!(combine(&room(&s, &c, 5, 2), &deficit).len(), 2);
    assert!(combine(&room(&s, &c, 5, 0), &deficit).is_empty());
    // The window is spent: the emergency still asks, so that the refusal is on record.
    let dead = Asks {
        workers_dead: launch(3, CallKind::Emergency, true),
        ..Asks::default()
    };
    assert_eq!(combine(&room(&s, &c, 0, 0), &dead).len(), 1);
}

#[test]
fn a_pause_plans_nothing_and_a_hold_no_launch() {
    let c = config();
    // Every worker dead, 10 queued, and an instance exited: a launch and a destroy.
    let mut s = fleet();
    s.instances[0].actual_status = Some("exited".into());
    s.instances.truncate(1);
    s.demand = Some(Demand {
        pending: 10,
        ..Default::default()
    });
    let both = decide(&s, &c, 0, Mode::Full);
    assert!(both.iter().any(|c| c.is_launch()) && both.iter().any(|c| !c.is_launch()));
    let mut held = s.clone();
    held.hold = Some(OperatorHold {
        stopped_at: NOW - MIN,
        instance_id: Some(9),
        label: None,
        until: NOW + 29 * MIN,
    });
    assert_eq!(
        kinds(&decide(&held, &c, 0, Mode::Full)),
        vec![(CallKind::Flagged, Some(1))]
    );
    // Ours run in Curio without PSProve: another of the image would not prove; stops go on.
    let mut taskless = s.clone();
    taskless.taskless = vec!["instance 1 runs Curio machine without PSProve".into()];
    assert_eq!(
        kinds(&decide(&taskless, &c, 0, Mode::Full)),
        vec![(CallKind::Flagged, Some(1))]
    );
    assert_eq!(crate::policy::rules::emergency_launches(&taskless, &c), 0);
    let mut paused = s.clone();
    paused.paused = Some(crate::store::ops::Pause {
        since: NOW - MIN,
        until: None,
        reason: "hands off".into(),
    });
    assert!(decide(&paused, &c, 0, Mode::Full).is_empty());
}

#[test]
fn outbid_bids_come_back_as_far_as_the_demand_still_needs_them() {
    let mut c = config();
    let mut s = fleet();
    s.instances.push(row("fleetagent-3", Some(3), OUTBID, 0.4));
    s.instances.push(row("fleetagent-4", Some(4), OUTBID, 0.4));
    let asked = |s: &Snapshot, c: &Config| {
        launches::outbid_replacement(s, &Facts::of(s, c, 0, Mode::Full)).map(|l| l.n)
    };
    // Target 500, 100 p/h working: both come back (never more than were destroyed).
    assert_eq!(asked(&s, &c), Some(2));
    // 125 p/h: one is enough.
    c.policy.target_proofs_per_hour = 125.0;
    assert_eq!(asked(&s, &c), Some(1));
    // Met: the rule asks for none, and the next launch rule may.
    c.policy.target_proofs_per_hour = 100.0;
    assert_eq!(asked(&s, &c), Some(0));
    // Nothing destroyed this pass (the listing failed): nothing to replace.
    s.listing_error = Some("HTTP 500".into());
    assert_eq!(asked(&s, &c), None);
    s.listing_error = None;
    // ProofShare switched off in Curio: nothing is launched for it.
    s.demand.as_mut().unwrap().proofshare_enabled = Some(false);
    assert_eq!(asked(&s, &c), None);
}

#[test]
fn the_facts_count_this_passs_destroys_as_free_slots() {
    let mut c = config();
    c.policy.max_instances = Some(3);
    let mut s = fleet();
    s.instances.push(row("fleetagent-3", Some(3), OUTBID, 0.4));
    let f = Facts::of(&s, &c, 0, Mode::Full);
    assert_eq!((f.freed.len(), f.slots_left), (1, 1));
    assert_eq!(f.known.as_ref().map(|k| k.outbid), Some(1));
    // Launches only: nothing is destroyed, so nothing is freed.
    let f = Facts::of(&s, &c, 0, Mode::LaunchOnly);
    assert_eq!((f.destroys, f.freed.len(), f.slots_left), (false, 0, 0));
    // The launch window: the default allows 3 in its minutes, two are spent.
    s.window_launches = vec![NOW - MIN, NOW - 2 * MIN];
    assert_eq!(Facts::of(&s, &c, 0, Mode::Full).window_left, 1);
}

#[test]
fn with_demand_unknown_only_the_flagged_and_the_caps_are_answered() {
    let mut c = config();
    c.policy.max_instances = Some(1);
    let mut s = fleet();
    s.instances[0].actual_status = Some("offline".into());
    s.instances.push(row("fleetagent-9", Some(9), LOADING, 0.4));
    s.demand = None;
    let f = Facts::of(&s, &c, 1, Mode::Full);
    assert!(f.known.is_none());
    let asks = Asks::of(&s, &f);
    assert_eq!(
        (asks.flagged.len(), asks.over_cap.len()),
        (1, 1),
        "{asks:?}"
    );
    assert_eq!(
        (
            &asks.workers_dead,
            &asks.deficit,
            &asks.seed,
            &asks.outbid_replacement,
            &asks.unprofitable_replacement,
            &asks.surplus
        ),
        (&None, &None, &None, &None, &None, &None)
    );
    // Launches only: the stop rules ask nothing.
    let f = Facts::of(&s, &c, 1, Mode::LaunchOnly);
    assert!(stops::flagged(&s, &f).is_empty() && stops::over_cap(&s, &f).is_empty());
}

#[test]
fn a_planned_calls_arguments_are_the_tools_json() {
    let s = stop(7, CallKind::Surplus);
    let call = PlannedCall::stop(s);
    assert_eq!(
        call.arguments.to_json(),
        serde_json::json!({"instance_id": 7, "reason": "rules: stop 7"})
    );
    assert_eq!(
        call.arguments.to_string(),
        r#"{"instance_id":7,"reason":"rules: stop 7"}"#
    );
    assert_eq!((call.tool, call.instance_id()), (super::STOP_TOOL, Some(7)));
    let floor = call.with_reason("floor: stop 7".into());
    assert_eq!(floor.arguments["reason"], "floor: stop 7");
    assert_eq!(floor.arguments["instance_id"], 7);
    assert_eq!(
        (floor.why.as_str(), floor.kind),
        ("floor: stop 7", CallKind::Surplus)
    );
    let l = launch(1, CallKind::Seed, false).unwrap();
    let call = PlannedCall::launch(&l, "rules: seed (launch 1 of 1)".into());
    assert_eq!(
        call.arguments.to_string(),
        r#"{"reason":"rules: seed (launch 1 of 1)"}"#
    );
    assert_eq!(call.arguments["instance_id"].as_i64(), None);
    assert!(call.is_launch() && call.tool == super::LAUNCH_TOOL);
}

#[test]
fn the_deficit_and_the_rent_ahead_share_a_place_the_larger_ask_wins() {
    let (s, c) = (fleet(), config());
    let f = room(&s, &c, 5, 5);
    let ask = |deficit: u32, ahead: u32| Asks {
        deficit: launch(deficit, CallKind::Deficit, false),
        ahead: launch(ahead, CallKind::Ahead, false),
        seed: launch(1, CallKind::Seed, false),
        ..Asks::default()
    };
    assert_eq!(
        kinds(&combine(&f, &ask(1, 3))),
        vec![(CallKind::Ahead, None); 3]
    );
    assert_eq!(
        kinds(&combine(&f, &ask(2, 2))),
        vec![(CallKind::Deficit, None); 2]
    );
    // Neither asks: the next rule's turn.
    assert_eq!(
        kinds(&combine(&f, &ask(0, 0))),
        vec![(CallKind::Seed, None)]
    );
}

/// WORKERS DEAD and a launch whose create may not have happened (its intent open: a 5xx):
/// counted as coming while it is young or while the listing failed, not once a good listing
/// a minute after the create did not show it (it waited 10 minutes for the intent's grace).
#[test]
fn a_launch_a_good_listing_does_not_show_holds_no_dead_fleet_back() {
    let mut c = config();
    c.policy.target_proofs_per_hour = 50.0;
    let at = |created: i64, listing_error: Option<&str>| {
        let mut phantom = row("fleetagent-qwerty-r1-0badf00d", None, LAUNCHING, 0.33);
        phantom.created_at = NOW - created;
        phantom.state_since = NOW - created;
        Snapshot {
            now: NOW,
            demand: Some(Demand {
                pending: 9,
                ..Default::default()
            }),
            instances: vec![phantom],
            listing_error: listing_error.map(String::from),
            ..Default::default()
        }
    };
    let asked = |s: &Snapshot| launches::workers_dead(s, &Facts::of(s, &c, 0, Mode::Full));
    assert!(at(2 * MIN, None).demand.as_ref().unwrap().workers_dead());
    assert_eq!(
        asked(&at(2 * MIN, None)).map(|l| (l.n, l.emergency)),
        Some((1, true))
    );
    assert!(asked(&at(MIN / 2, None)).is_none(), "just created");
    assert!(
        asked(&at(2 * MIN, Some("HTTP 500"))).is_none(),
        "not looked for"
    );
}

/// The last live worker, idle, past its minimum rental, nothing queued: kept while it
/// earns more than it costs (it proves the next work at once), stopped once each proof
/// costs more than it earns.
#[test]
fn the_last_worker_goes_only_when_it_loses_money_on_every_proof() {
    let c = config();
    let mut r = row("fleetagent-1", Some(1), crate::fleet::REGISTERED, 0.4);
    r.machine_name = Some(r.label.clone());
    r.created_at = NOW - 120 * MIN;
    let priced = |revenue: f64| Snapshot {
        now: NOW,
        demand: Some(Demand {
            workers: vec![worker("fleetagent-1", "10.0.0.1:1", 0)],
            ..Default::default()
        }),
        instances: vec![r.clone()],
        price: Some(crate::price::Price {
            revenue_per_proof: revenue,
            proof_fil: revenue / 4.0,
            proof_fil_source: "config",
            fil_usd: 4.0,
            fil_usd_source: "config",
            fil_usd_at: NOW,
        }),
        ..Default::default()
    };
    // 50 p/h at $0.40/h: $0.008 a proof.
    let stop = |s: &Snapshot| stops::surplus(s, &Facts::of(s, &c, 0, Mode::Full));
    assert!(
        stop(&priced(0.009)).is_none(),
        "under the margin, still earning"
    );
    let gone = stop(&priced(0.006)).expect("losing on every proof");
    assert_eq!((gone.instance_id, gone.kind), (1, CallKind::Unprofitable));
    assert!(
        gone.why.contains("loses money on every proof"),
        "{}",
        gone.why
    );
}
