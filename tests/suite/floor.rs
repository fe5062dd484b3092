//! The floor end to end (DESIGN.md "The floor"): the real binary, the fake OpenAI server and
//! the fake vast.ai. A model that answers "No action needed" while every worker is dead is
//! overruled in the same pass; a model that launches what the rules would is not doubled;
//! the next observation tells the model what the floor did; a flagged instance the model
//! leaves is destroyed after `floor_flagged_passes` passes.

use serde_json::{json, Value};

use super::agent_e2e::{dead_fleet, rig, write_demand, CAPS, ONE_LAUNCH};
use crate::common::fake_llm::{FakeLlm, Reply};
use crate::common::fake_vast::{FakeVast, Route};

fn floor_actions(f: &crate::common::fleet::Fleet) -> Vec<(String, String, String)> {
    let db = f.db();
    let mut stmt = db
        .prepare("SELECT kind, outcome, COALESCE(reason, '') FROM actions WHERE actor = 'floor' ORDER BY id")
        .unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

fn busy_enough() -> Value {
    // One live busy worker of someone else's, nothing queued: no rule wants anything.
    json!({"pending": 0, "running": 1, "completed_1h": 20, "completed_15m": 5,
           "workers": [{"machine_name": "other-box", "host_and_port": "10.0.0.9:12300", "running": 1, "cordoned": false}]})
}

#[test]
fn a_model_that_answers_no_action_while_every_worker_is_dead_is_overruled_in_the_same_pass() {
    let llm = FakeLlm::start();
    llm.set_default(Reply::text("No action needed."));
    let vast = FakeVast::start_real_time();
    vast.add_offers(10, "RTX 4090", 0.40, 0.99);
    let f = rig(&llm, &vast, ONE_LAUNCH, "quiet_interval_mins = 0");
    write_demand(f.path(), dead_fleet());
    f.cmd(&["trigger", "-p", "1", "-r", "workers died"]).ok();
    let out = f.cmd(&["run"]).ok();
    assert!(out.stdout.contains("-> action"), "{}", out.stdout);

    // The model was asked, said no, and the floor launched anyway, in the same pass.
    assert_eq!(llm.request_count(), 1);
    let launched = vast.count(Route::Create);
    assert!(launched >= 1, "the floor launched nothing");
    let acts = floor_actions(&f);
    assert_eq!(acts.len(), launched, "{acts:?}");
    assert!(
        acts.iter().all(|(k, o, _)| k == "launch" && o == "ok"),
        "{acts:?}"
    );
    assert!(
        acts[0]
            .2
            .starts_with("floor (the model left it undone, in the same pass): WORKERS DEAD"),
        "{acts:?}"
    );
    let run = &f.inspect()["runs"][0];
    assert_eq!(run["decided_by"], "floor", "{run}");
    assert_eq!(run["verdict"], "action");
    // history shows what the floor did and why.
    let history = f.cmd(&["history", "-n", "20"]).ok().stdout;
    assert!(
        history.contains("Floor (the rules under your decision"),
        "{history}"
    );

    // The next pass tells the model in its observation.
    write_demand(f.path(), busy_enough());
    f.cmd(&["trigger", "-p", "1", "-r", "check"]).ok();
    f.cmd(&["run"]).ok();
    let reqs = llm.requests();
    assert_eq!(reqs.len(), 2);
    let observation = reqs[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        observation.contains(
            "Floor in the last pass (what you left undone, done by the rules):\n- launch ok"
        ),
        "{observation}"
    );
    // And the floor does nothing more once the fleet is covered.
    assert_eq!(floor_actions(&f).len(), launched);
}

#[test]
fn a_model_that_launches_what_the_rules_would_is_not_doubled() {
    let llm = FakeLlm::start();
    let vast = FakeVast::start_real_time();
    vast.add_offers(10, "RTX 4090", 0.40, 0.99);
    // Target 100 p/h at 50 p/h an instance: the rules want 2 for a dead fleet of 59 queued
    // (one hour of work: 59 p/h -> 2 instances).
    let f = rig(&llm, &vast, &format!("{CAPS}\n"), "quiet_interval_mins = 0");
    let cfg = std::fs::read_to_string(&f.config).unwrap().replace(
        "target_proofs_per_hour = 500",
        "target_proofs_per_hour = 100",
    );
    f.write_config(&cfg);
    write_demand(f.path(), dead_fleet());
    let launch = ("launch_instance", r#"{"reason": "every worker is dead"}"#);
    llm.push(Reply::tool_calls(&[launch, launch]));
    llm.push(Reply::text("Launched two."));
    f.cmd(&["trigger", "-p", "1", "-r", "workers died"]).ok();
    f.cmd(&["run"]).ok();
    assert_eq!(vast.count(Route::Create), 2, "the model's two, no more");
    assert!(floor_actions(&f).is_empty(), "{:?}", floor_actions(&f));
    assert_eq!(f.inspect()["runs"][0]["decided_by"], "llm");
}

#[test]
fn a_flagged_instance_the_model_leaves_is_destroyed_after_floor_flagged_passes() {
    let llm = FakeLlm::start();
    llm.set_default(Reply::text("All fine."));
    let vast = FakeVast::start_real_time();
    vast.add_offers(10, "RTX 4090", 0.40, 0.99);
    let f = rig(&llm, &vast, CAPS, "quiet_interval_mins = 0");
    let id = vast.add_instance("fleetagent-dead-1");
    vast.set_actual_status(id, Some("exited"));
    write_demand(f.path(), busy_enough());
    for n in 1..=2 {
        f.cmd(&["trigger", "-p", "1", "-r", &format!("check {n}")])
            .ok();
        f.cmd(&["run"]).ok();
        let destroys = vast.count(Route::Destroy);
        if n == 1 {
            assert_eq!(
                destroys, 0,
                "one pass left is not yet floor_flagged_passes (2)"
            );
        } else {
            assert_eq!(destroys, 1, "destroyed on the second pass");
        }
    }
    let acts = floor_actions(&f);
    assert_eq!(acts.len(), 1, "{acts:?}");
    assert!(acts[0].2.contains("left for 2 passes"), "{acts:?}");
}
