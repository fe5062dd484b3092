//! A model that misbehaves: forty launch calls never pass a cap, wrong arguments and unknown
//! offers are error results, and stopping everything keeps the workers that matter.

use std::collections::BTreeMap;

use fleetagent::demand::{Demand, Worker};
use fleetagent::tools::Actor;
use serde_json::json;

use super::{busy_demand, code, dead_demand, Rig, StaticDemand, BASE};
use crate::common::fake_vast::{FakeReply, Route, FAKE_API_KEY};

/// BASE with other money and count caps.
fn capped(max_dph: f64, max_instances: u32, daily: Option<f64>) -> String {
    let mut text = BASE.replace(
        "max_dph_total = 10.0\nmax_instances = 20\n",
        &format!("max_dph_total = {max_dph:?}\nmax_instances = {max_instances}\n"),
    );
    if let Some(d) = daily {
        text.push_str(&format!("daily_spend_max = {d:?}\n"));
    }
    text
}

#[test]
fn forty_launch_calls_never_pass_a_cap() {
    // (config, workers dead?, creates expected, the code of every other call)
    let cases = [
        (capped(1.5, 20, None), true, 3, "budget"),
        (capped(10.0, 2, None), true, 2, "instance_cap"),
        (capped(10.0, 20, None), false, 3, "rate_limited"),
        (capped(10.0, 20, None), true, 6, "rate_limited"),
        (capped(10.0, 20, Some(2.0)), true, 5, "daily_spend"),
    ];
    for (text, dead, expected, cap) in cases {
        let demand = if dead { dead_demand(12) } else { busy_demand() };
        let mut rig = Rig::new(&text, StaticDemand::new(demand));
        rig.fake.add_offers(50, "RTX 4090", 0.40, 0.99);
        rig.fake.vast_rate_limits();
        let mut snap = rig.pass();
        let mut codes: BTreeMap<String, usize> = BTreeMap::new();
        for _ in 0..40 {
            let r = rig.call(&mut snap, "launch_instance", json!({"reason": "go"}));
            *codes
                .entry(code(&r).unwrap_or("ok").to_string())
                .or_default() += 1;
        }
        let want: BTreeMap<String, usize> = [
            ("ok".to_string(), expected),
            (cap.to_string(), 40 - expected),
        ]
        .into();
        assert_eq!(codes, want, "{text}");
        assert_eq!(rig.creates_ok(), expected);
        assert_eq!(rig.fake.instance_ids().len(), expected);
        let fleet: f64 = rig
            .fake
            .instances()
            .iter()
            .map(|i| i["dph_total"].as_f64().unwrap())
            .sum();
        assert!(fleet <= rig.config.policy.max_dph_total.unwrap() + 1e-9);
        assert!(expected as u32 <= rig.config.policy.max_instances.unwrap());
    }
}

#[test]
fn unknown_offers_and_wrong_arguments_are_error_results() {
    let mut rig = Rig::new(BASE, StaticDemand::new(busy_demand()));
    let offers = rig.fake.add_offers(3, "RTX 4090", 0.40, 0.99);
    let mut snap = rig.pass();
    let bad: Vec<(&str, &str)> = vec![
        ("launch_instance", r#"{"offer_id": 999, "reason": "x"}"#),
        ("launch_instance", r#"{"offer_id": "abc", "reason": "x"}"#),
        ("launch_instance", r#"{"offer_id": 1.5, "reason": "x"}"#),
        ("launch_instance", r#"{"offer_id": -3, "reason": "x"}"#),
        ("launch_instance", r#"{"reason": 5}"#),
        ("launch_instance", r#"{}"#),
        ("launch_instance", r#"{"reason": "x", "count": 40}"#),
        ("launch_instance", r#"{"reason": "   "}"#),
        ("launch_instance", "launch four please"),
        ("launch_instance", "[1, 2]"),
        ("stop_instance", r#"{"instance_id": "12", "reason": "x"}"#),
        ("stop_instance", r#"{"instance_id": 12}"#),
        ("stop_instance", r#"{"instance_id": 424242, "reason": "x"}"#),
        ("search_offers", r#"{"limit": 50}"#),
        ("search_offers", r#"{"gpu_name": "H100 SXM"}"#),
        ("search_offers", r#"{"max_dph": -1}"#),
        ("instance_logs", r#"{"instance_id": 1, "tail_lines": 500}"#),
        ("instance_logs", r#"{"instance_id": 1}"#),
        ("list_instances", r#"{"all": true}"#),
    ];
    for (tool, args) in &bad {
        let r = rig.call_as(&mut snap, Actor::Llm, tool, args);
        assert_eq!(
            code(&r),
            Some("invalid_args"),
            "{tool} {args}: {:?}",
            r.content
        );
        assert!(r.content["message"].as_str().is_some_and(|m| !m.is_empty()));
    }
    let r = rig.call_as(&mut snap, Actor::Llm, "rent_gpu", "{}");
    assert_eq!(code(&r), Some("unknown_tool"));
    assert!(rig
        .call_as(
            &mut snap,
            Actor::Llm,
            "launch_instance",
            r#"{"offer_id": 999, "reason": "x"}"#
        )
        .content["message"]
        .as_str()
        .unwrap()
        .contains("offer 999"));
    assert_eq!(rig.fake.count(Route::Create), 0);

    // A known offer that someone else rents between the search and the create.
    let r = rig.call(
        &mut snap,
        "launch_instance",
        json!({"offer_id": offers[0], "reason": "x"}),
    );
    assert_eq!(code(&r), None, "{:?}", r.content);
    rig.fake.take_offer(offers[1]);
    let r = rig.call(
        &mut snap,
        "launch_instance",
        json!({"offer_id": offers[1], "reason": "x"}),
    );
    assert_eq!(code(&r), Some("vast_error"), "{:?}", r.content);
    assert!(r.content["message"]
        .as_str()
        .unwrap()
        .contains("no longer available"));
    // The failed launch released nothing it did not hold: no row, a failed ledger entry.
    assert_eq!(rig.count("SELECT COUNT(*) FROM instances"), 1);
    assert_eq!(
        rig.count("SELECT COUNT(*) FROM actions WHERE kind='launch' AND outcome='failed'"),
        1
    );
    // vast.ai errors never carry the key.
    rig.fake.fail_next(
        Route::Offers,
        1,
        FakeReply::json(
            400,
            json!({"error": "invalid_args", "msg": format!("bad key {FAKE_API_KEY}")}),
        ),
    );
    // Narrowed, so that it is sent (without a filter it reuses the pass's search).
    let r = rig.call(&mut snap, "search_offers", json!({"max_dph": 5.0}));
    assert_eq!(code(&r), Some("vast_error"));
    assert!(
        !r.content.to_string().contains(FAKE_API_KEY),
        "{}",
        r.content
    );
}

#[test]
fn stopping_every_instance_keeps_workers_that_matter() {
    // a proves, b idles (both live Curio workers), c runs without registering, d exited,
    // and one instance on the account is not ours.
    let demand = Demand {
        pending: 3,
        running: 1,
        workers: vec![
            Worker {
                machine_name: "fleetagent-a".into(),
                host_and_port: "10.0.0.1:12300".into(),
                running: 1,
                cordoned: false,
            },
            Worker {
                machine_name: "fleetagent-b".into(),
                host_and_port: "10.0.0.2:12300".into(),
                running: 0,
                cordoned: false,
            },
        ],
        ..Default::default()
    };
    let probe = StaticDemand::new(demand);
    let mut rig = Rig::new(BASE, probe.clone());
    let a = rig.fake.add_instance("fleetagent-a") as i64;
    let b = rig.fake.add_instance("fleetagent-b") as i64;
    let c = rig.fake.add_instance("fleetagent-c") as i64;
    let d = rig.fake.add_instance("fleetagent-d") as i64;
    rig.fake.set_actual_status(d as u64, Some("exited"));
    let other = rig.fake.add_instance("my-own-box") as i64;
    let mut snap = rig.pass();
    assert_eq!(snap.foreign, vec![other]);

    let mut outcome = BTreeMap::new();
    for id in [a, b, c, d, other] {
        let r = rig.call(
            &mut snap,
            "stop_instance",
            json!({"instance_id": id, "reason": "scale down"}),
        );
        outcome.insert(id, code(&r).unwrap_or("ok").to_string());
    }
    assert_eq!(outcome[&a], "protected", "proving");
    assert_eq!(outcome[&b], "ok", "a live worker remains");
    assert_eq!(outcome[&c], "ok");
    assert_eq!(outcome[&d], "ok", "flagged: exited");
    assert_eq!(outcome[&other], "protected", "not ours");
    let left = rig.fake.instance_ids();
    assert!(left.contains(&(a as u64)) && left.contains(&(other as u64)));
    assert_eq!(left.len(), 2);

    // The fallback (the floor, the model unusable) meets the same protections: a proving
    // instance is kept.
    let r = rig.call_as(
        &mut snap,
        Actor::Fallback,
        "stop_instance",
        &json!({"instance_id": a, "reason": "x"}).to_string(),
    );
    assert_eq!(code(&r), Some("protected"));

    // Next pass: a is idle now and the last live worker, with work queued.
    probe.set(Ok(Demand {
        pending: 3,
        workers: vec![Worker {
            machine_name: "fleetagent-a".into(),
            host_and_port: "10.0.0.1:12300".into(),
            running: 0,
            cordoned: false,
        }],
        ..Default::default()
    }));
    let mut snap = rig.pass();
    assert_eq!(snap.find(a).unwrap().state, "registered");
    let r = rig.call(
        &mut snap,
        "stop_instance",
        json!({"instance_id": a, "reason": "x"}),
    );
    assert_eq!(code(&r), Some("protected"));
    assert!(r.content["message"]
        .as_str()
        .unwrap()
        .contains("last live worker while 3 proofs"));
    // A failed probe holds the fleet: no stop of a working instance.
    probe.set(Err("HarmonyDB unreachable".into()));
    let mut held = rig.pass();
    let r = rig.call(
        &mut held,
        "stop_instance",
        json!({"instance_id": a, "reason": "x"}),
    );
    assert_eq!(code(&r), Some("protected"));
    // The operator can force both.
    let r = rig.force_stop(&mut snap, a);
    assert_eq!(code(&r), None, "{:?}", r.content);
    let r = rig.force_stop(&mut snap, other);
    assert_eq!(code(&r), None, "{:?}", r.content);
    assert!(rig.fake.instance_ids().is_empty());
    assert_eq!(
        rig.count("SELECT COUNT(*) FROM actions WHERE actor='operator' AND outcome='ok' AND run_id IS NULL"),
        2
    );
}

/// Offers go fast on a busy market: a launch without offer_id whose offer was taken between
/// the search and the create tries the next best, up to `TAKEN_RETRIES` more, each under a
/// label of its own and recorded; a launch of a named offer is not moved to another.
#[test]
fn a_taken_best_offer_is_followed_by_the_next_within_the_call() {
    use fleetagent::policy::launch::TAKEN_RETRIES;
    let mut rig = Rig::new(BASE, StaticDemand::new(dead_demand(12)));
    let ids: Vec<u64> = [0.30, 0.31, 0.32, 0.33, 0.34, 0.35, 0.36, 0.37]
        .iter()
        .map(|&p| rig.fake.add_offers(1, "RTX 4090", p, 0.99)[0])
        .collect();
    let mut snap = rig.pass();
    // The first launch searches (every offer cached) and rents the best.
    let r = rig.call(&mut snap, "launch_instance", json!({"reason": "dead"}));
    assert_eq!(code(&r), None, "{}", r.content);
    // Someone else rents the next two meanwhile: the second launch gets the fourth.
    rig.fake.take_offer(ids[1]);
    rig.fake.take_offer(ids[2]);
    let r = rig.call(&mut snap, "launch_instance", json!({"reason": "dead"}));
    assert_eq!(code(&r), None, "{}", r.content);
    assert_eq!(r.content["offer"]["id"], ids[3], "{}", r.content);
    assert_eq!(rig.creates_ok(), 2);
    let rows: Vec<(String, Option<i64>, String)> = {
        let conn = &rig.store.conn;
        let mut st = conn
            .prepare(
                "SELECT outcome, offer_id, label FROM actions WHERE kind = 'launch' AND tool_call_id = 'call_2' ORDER BY id",
            )
            .unwrap();
        st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .map(|r| r.unwrap())
            .collect()
    };
    let outcomes: Vec<(&str, Option<i64>)> = rows.iter().map(|r| (r.0.as_str(), r.1)).collect();
    assert_eq!(
        outcomes,
        [
            ("failed", Some(ids[1] as i64)),
            ("failed", Some(ids[2] as i64)),
            ("ok", Some(ids[3] as i64)),
        ]
    );
    let labels: std::collections::HashSet<&str> = rows.iter().map(|r| r.2.as_str()).collect();
    assert_eq!(labels.len(), 3, "one label per attempt: {rows:?}");

    // A named offer that was taken is not replaced by another.
    rig.fake.take_offer(ids[4]);
    let r = rig.call(
        &mut snap,
        "launch_instance",
        json!({"offer_id": ids[4], "reason": "that one"}),
    );
    assert_eq!(code(&r), Some("vast_error"), "{}", r.content);
    assert_eq!(rig.creates_ok(), 2);

    // Three taken in a row: the call gives up after 1 + TAKEN_RETRIES creates, saying so.
    let before = rig.fake.requests_to(Route::Create).len();
    for id in &ids[5..8] {
        rig.fake.take_offer(*id);
    }
    let r = rig.call(&mut snap, "launch_instance", json!({"reason": "dead"}));
    assert_eq!(code(&r), Some("vast_error"), "{}", r.content);
    assert_eq!(
        rig.fake.requests_to(Route::Create).len() - before,
        1 + TAKEN_RETRIES as usize
    );
    assert!(r.content["note"]
        .as_str()
        .unwrap()
        .starts_with("the offer was taken meanwhile"));
}

/// The operator resets the session while a pass runs (`reset-session` cancels the pending
/// wakes): the old conversation's `schedule_next_check` in that pass schedules nothing, or
/// it would wake the new session with the old one's reason (the race walkthrough saw one).
/// Before the reset, the same call schedules its wake.
#[test]
fn a_wake_asked_for_by_a_conversation_reset_during_its_pass_is_not_scheduled() {
    let mut rig = Rig::new(BASE, StaticDemand::new(busy_demand()));
    let mut snap = rig.pass();
    let ask = json!({"minutes": 10, "reason": "see the new worker prove"});
    let r = rig.call(&mut snap, "schedule_next_check", ask.clone());
    assert_eq!(r.content["ok"], true, "{}", r.content);
    let dir = tempfile::tempdir().unwrap();
    let doorbell = fleetagent::doorbell::FileDoorbell::new(dir.path());
    let now = rig.now();
    fleetagent::trigger::reset_session(&mut rig.store, &doorbell, false, now).unwrap();
    let r = rig.call(&mut snap, "schedule_next_check", ask);
    assert_eq!(r.content["ok"], false, "{}", r.content);
    assert!(
        r.content["message"]
            .as_str()
            .unwrap()
            .starts_with("the operator reset the session (session 1 -> 2) during this pass"),
        "{}",
        r.content
    );
    let pending: i64 = rig
        .store
        .conn
        .query_row(
            "SELECT COUNT(*) FROM wakes WHERE status = 'pending'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(
        pending, 0,
        "the first was cancelled by the reset, the second never made"
    );
}

/// vast.ai's only matching offer is on a host that failed us: a launch is refused
/// `bad_hosts` naming it, also after the model's own `search_offers` cached the empty
/// search (a re-test saw that launch blame vast.ai); with no offer anywhere, vast.ai's
/// failure as before.
#[test]
fn offers_only_on_hosts_left_out_are_named_whoever_searched_first() {
    for search_first in [false, true] {
        let mut rig = Rig::new(BASE, StaticDemand::new(dead_demand(12)));
        let offer = rig.fake.add_offer("RTX 4090", 0.40, 0.99);
        let host = 30_000 + (offer % 250) as i64;
        let now = rig.now();
        fleetagent::store::bad_hosts::mark(&rig.store.conn, host, "exited", now + 3_600_000, now)
            .unwrap();
        let mut snap = rig.pass();
        if search_first {
            let r = rig.call(&mut snap, "search_offers", json!({}));
            assert_eq!(code(&r), None, "{:?}", r.content);
            assert_eq!(
                r.content["left_out_hosts"],
                json!([host]),
                "{:?}",
                r.content
            );
        }
        let r = rig.call(&mut snap, "launch_instance", json!({"reason": "dead"}));
        assert_eq!(code(&r), Some("bad_hosts"), "{:?}", r.content);
        let msg = r.content["message"].as_str().unwrap();
        assert!(
            msg.contains(&format!("only on 1 host(s) left out ({host})")),
            "{msg}"
        );
    }
    let mut rig = Rig::new(BASE, StaticDemand::new(dead_demand(12)));
    let now = rig.now();
    fleetagent::store::bad_hosts::mark(&rig.store.conn, 30_001, "exited", now + 3_600_000, now)
        .unwrap();
    let mut snap = rig.pass();
    let r = rig.call(&mut snap, "launch_instance", json!({"reason": "dead"}));
    assert_eq!(code(&r), Some("vast_error"), "{:?}", r.content);
}
