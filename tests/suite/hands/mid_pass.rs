//! The operator's hand while a pass runs (a race walkthrough of 2026-12-07): a `pause` typed
//! while a pass's destroy waits for vast.ai's spacing holds it, and an instance the operator
//! destroyed while the model was asked is not destroyed (nor recorded) a second time.

use serde_json::{json, Value};

use crate::common::fake_llm::{FakeLlm, Reply};
use crate::common::fake_vast::{FakeVast, Route};
use crate::common::fleet::Fleet;
use crate::suite::agent_e2e::{rig, write_demand, CAPS};
use crate::suite::backbone::wait_for;

/// The model stops `ids` in one answer, then says it is done.
fn stops(ids: &[u64]) -> Reply {
    let calls: Vec<(String, String)> = ids
        .iter()
        .map(|id| {
            let args = json!({"instance_id": id, "reason": "earns nothing"}).to_string();
            ("stop_instance".to_string(), args)
        })
        .collect();
    Reply::dynamic(move |body: &Value| {
        let msgs = body["messages"].as_array().unwrap();
        if msgs.last().is_some_and(|m| m["role"] == "tool") {
            return Reply::text("Done.");
        }
        Reply::ToolCalls(calls.clone())
    })
}

/// Two exited instances of ours, no demand: the model, vast.ai, the fleet and the ids.
fn two_exited() -> (FakeLlm, FakeVast, Fleet, [u64; 2]) {
    let llm = FakeLlm::start();
    let vast = FakeVast::start_real_time();
    let f = rig(&llm, &vast, CAPS, "quiet_interval_mins = 0");
    write_demand(
        f.path(),
        json!({"pending": 0, "running": 0, "completed_1h": 0, "completed_15m": 0, "workers": []}),
    );
    let ids = [
        vast.add_instance("fleetagent-r0-0a0b0c01"),
        vast.add_instance("fleetagent-r0-0a0b0c02"),
    ];
    for id in ids {
        vast.set_actual_status(id, Some("exited"));
    }
    llm.set_default(Reply::text("Nothing to do yet."));
    f.cmd(&["run"]).ok();
    llm.set_default(stops(&ids));
    (llm, vast, f, ids)
}

/// The first destroy went out; `pause` returns while the second waits for vast.ai's 3 s
/// spacing: the second is not sent, and is recorded refused `paused` (it went out 2.9 s after
/// the pause returned).
#[test]
fn a_pause_typed_while_a_destroy_waits_its_spacing_holds_it() {
    let (_llm, vast, f, ids) = two_exited();
    f.cmd(&["trigger", "-p", "1", "-r", "look"]).ok();
    let pass = f.spawn(&["run"]);
    wait_for(|| vast.count(Route::Destroy) == 1, "the first destroy");
    f.cmd(&["pause", "--reason", "hands off"]).ok();
    let out = pass.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        vast.count(Route::Destroy),
        1,
        "a destroy went out after the pause"
    );
    assert_eq!(vast.instance_ids(), vec![ids[1]]);
    let refused = f.count(&format!(
        "SELECT COUNT(*) FROM actions WHERE instance_id = {} AND outcome = 'refused' AND code = 'paused' AND actor = 'llm'",
        ids[1]
    ));
    // Held, and said so (again by the pass the pause's event brings, if any).
    assert!(refused >= 1, "the model's stop was not recorded as held");
    assert_eq!(f.count("SELECT COUNT(*) FROM stops_in_flight"), 0);
}

/// The operator destroys an instance while the pass (its listing read) waits: the model's
/// stop of it sends nothing and records nothing; the ledger holds the operator's destroy once.
#[test]
fn an_instance_the_operator_destroyed_mid_pass_is_not_destroyed_again() {
    let (_llm, vast, f, ids) = two_exited();
    let [a, _] = ids;
    f.cmd(&["trigger", "-p", "1", "-r", "look"]).ok();
    let mut cmd = f.command(&["run"]);
    cmd.env("FLEETAGENT_TEST_PAUSE_AT", "run-after-observe:2500");
    let pass = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(800));
    let id = a.to_string();
    f.cmd(&["instances", "stop", &id, "--force", "--reason", "by hand"])
        .ok();
    let out = pass.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(vast.count(Route::Destroy), 2, "one destroy each: {stderr}");
    let rows: Vec<(String, String)> = {
        let db = f.db();
        let mut st = db
            .prepare("SELECT actor, outcome FROM actions WHERE instance_id = ?1 AND kind = 'destroy' ORDER BY id")
            .unwrap();
        st.query_map([a as i64], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    assert_eq!(
        rows,
        vec![("operator".to_string(), "ok".to_string())],
        "{stderr}"
    );
}

/// The operator destroys the instance a pass's destroy waits to send (vast.ai's spacing): the
/// pass sends nothing more and records nothing; the ledger holds the operator's destroy
/// alone (a re-test saw the model credited with it too).
#[test]
fn a_destroy_waiting_its_spacing_is_held_when_the_operator_ends_its_instance() {
    let (_llm, vast, f, ids) = two_exited();
    f.cmd(&["trigger", "-p", "1", "-r", "look"]).ok();
    let pass = f.spawn(&["run"]);
    wait_for(|| vast.count(Route::Destroy) == 1, "the first destroy");
    let second = ids[1].to_string();
    f.cmd(&[
        "instances",
        "stop",
        &second,
        "--force",
        "--reason",
        "by hand",
    ])
    .ok();
    let out = pass.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(vast.count(Route::Destroy), 2, "one destroy each: {stderr}");
    let rows = f.count(&format!(
        "SELECT COUNT(*) FROM actions WHERE instance_id = {} AND kind = 'destroy' AND outcome = 'ok' AND actor <> 'operator'",
        ids[1]
    ));
    assert_eq!(rows, 0, "{stderr}");
}
