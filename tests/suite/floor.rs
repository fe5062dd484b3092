//! The floor end to end (DESIGN.md "The floor"): the real binary, the fake OpenAI server and
//! the fake vast.ai. A model that answers "No action needed" while every worker is dead is
//! overruled in the same pass; a model that launches what the rules would is not doubled;
//! the next observation tells the model what the floor did; a flagged instance the model
//! leaves is destroyed after `floor_flagged_passes` passes. Through `sim --llm` (issue 23,
//! must-show 1): a model that writes every answer as text serves at least 95 % of what the
//! rules serve on the same worlds, and with the model unusable the fallback (the whole floor)
//! leaves no flagged instance billing past `floor_flagged_passes` passes.

use rusqlite::Connection;
use serde_json::{json, Value};

use super::agent_e2e::{dead_fleet, rig, write_demand, CAPS, ONE_LAUNCH};
use super::sim_llm::{config_text, failed_checks, sim_llm};
use crate::common::fake_llm::{FakeLlm, Reply};
use crate::common::fake_vast::{FakeReply, FakeVast, Route};

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

/// The floor's launch that does not go through (no offer to rent) is still the floor's
/// decision: the run reads "decided by floor", not the model's, with the verdict the ledger
/// gives it. A launch of the floor's that a guardrail refuses (a money cap) overrules nothing,
/// since the model could not have made it either: that pass stays the model's, so the alert
/// on the floor overruling the model does not fire while a cap is reached.
#[test]
fn a_floor_whose_launch_does_not_go_through_still_decided_the_pass() {
    let llm = FakeLlm::start();
    llm.set_default(Reply::text("No action needed."));
    let vast = FakeVast::start_real_time();
    let f = rig(&llm, &vast, ONE_LAUNCH, "quiet_interval_mins = 0");
    write_demand(f.path(), dead_fleet());
    f.cmd(&["trigger", "-p", "1", "-r", "workers died"]).ok();
    f.cmd(&["run"]).ok();
    assert_eq!(vast.count(Route::Create), 0);
    let acts = floor_actions(&f);
    assert!(
        !acts.is_empty() && acts.iter().all(|(k, o, _)| k == "launch" && o != "ok"),
        "{acts:?}"
    );
    let run = &f.inspect()["runs"][0];
    assert_eq!(run["decided_by"], "floor", "{run}");
    assert!(
        matches!(
            run["verdict"].as_str(),
            Some("action-refused" | "action-failed")
        ),
        "{run}"
    );

    // Offers now, over the fleet's $/h cap: the floor asks, the guardrail refuses.
    vast.add_offers(3, "RTX 4090", 0.40, 0.99);
    let cfg = std::fs::read_to_string(&f.config)
        .unwrap()
        .replace("max_dph_total = 10.0", "max_dph_total = 0.1");
    f.write_config(&cfg);
    f.cmd(&["trigger", "-p", "1", "-r", "still dead"]).ok();
    f.cmd(&["run"]).ok();
    assert_eq!(vast.count(Route::Create), 0);
    let acts = floor_actions(&f);
    assert_eq!(acts.len(), 2, "{acts:?}");
    assert_eq!(
        (acts[1].0.as_str(), acts[1].1.as_str()),
        ("launch", "refused")
    );
    let run = &f.inspect()["runs"][0];
    assert_eq!(run["decided_by"], "llm", "{run}");
    assert_eq!(run["verdict"], "action-refused", "{run}");
}

/// Under `policy.dry_run` too: the model's two dry launches are what it did (the floor
/// added a third "would launch" and took the pass from the model: a walkthrough).
#[test]
fn a_model_that_launches_what_the_rules_would_is_not_doubled() {
    for dry_run in [false, true] {
        let llm = FakeLlm::start();
        let vast = FakeVast::start_real_time();
        vast.add_offers(10, "RTX 4090", 0.40, 0.99);
        // Target 100 p/h at 50 p/h an instance: the rules want 2 for a dead fleet of 59
        // queued (one hour of work: 59 p/h -> 2 instances).
        let f = rig(
            &llm,
            &vast,
            &format!("{CAPS}\ndry_run = {dry_run}\n"),
            "quiet_interval_mins = 0",
        );
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
        let want = if dry_run { 0 } else { 2 };
        assert_eq!(vast.count(Route::Create), want, "the model's two, no more");
        assert!(
            floor_actions(&f).is_empty(),
            "{dry_run}: {:?}",
            floor_actions(&f)
        );
        assert_eq!(f.inspect()["runs"][0]["decided_by"], "llm", "{dry_run}");
    }
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

/// What Qwen2.5-Coder-0.5B sent on llama-server for 22 of 23 turns: a tool call written as
/// JSON text, so nothing ran.
const TEXT_ANSWER: &str =
    r#"{"name": "launch_instance", "arguments": {"reason": "WORKERS DEAD, 59 proofs queued"}}"#;

#[test]
fn a_model_that_answers_text_every_pass_serves_what_the_rules_serve() {
    // Horizons that hold each story: the incident's dead fleet and its recovery, the spike's
    // rise (at hour 6), a steady morning. Each pass is one HTTP call to the fake.
    for (scenario, hours) in [("incident", "2"), ("spike", "7"), ("steady", "2")] {
        let llm = FakeLlm::start();
        llm.set_default(Reply::text(TEXT_ANSWER));
        let run = sim_llm(
            &config_text(&llm, ""),
            None,
            &["--scenario", scenario, "--hours", hours],
        );
        let r = &run.report;
        let model = &r["model"];
        // Every answer was text: nothing the model asked for ran.
        assert_eq!(model["tool_calls"], 0, "{scenario}: {model}");
        assert!(
            model["calls"].as_u64().unwrap() >= 1 && model["malformed_answers"] == model["calls"],
            "{scenario}: {model}"
        );
        let served = r["proofs"]["served_share"].as_f64().unwrap();
        let rules = model["rules"]["served_share"].as_f64().unwrap();
        assert!(
            served >= 0.95 * rules,
            "{scenario}: served {served} against the rules' {rules}: {model}"
        );
        // The invariants hold whoever decided (the scenario's cost bounds are the rules'
        // aims: the floor leaves surplus for policy.floor_idle_mins).
        let broken: Vec<Value> = failed_checks(r)
            .into_iter()
            .filter(|c| c["expected"] == "<= 0")
            .collect();
        assert!(broken.is_empty(), "{scenario}: {broken:#?}");
        if scenario == "spike" {
            // The rise is a deficit the rules confirm: the floor answered it itself.
            assert!(
                model["floor_actions"]["deficit"].as_u64().unwrap() >= 1,
                "{scenario}: {model}"
            );
        }
    }
}

/// For each instance the fallback destroyed: the passes from the first whose clocks counted
/// it flagged to the destroy's, both included (finished passes only).
fn passes_each_flagged_instance_billed(state: &std::path::Path) -> Vec<(i64, i64)> {
    let db = Connection::open(state.join("fleetagent.db")).unwrap();
    let mut stmt = db
        .prepare(
            "SELECT a.instance_id, a.run_id,
                    (SELECT MIN(r.id) FROM runs r, json_each(r.floor_clocks, '$.flagged_passes') f
                      WHERE f.key = CAST(a.instance_id AS TEXT))
               FROM actions a
              WHERE a.actor = 'fallback-rules' AND a.kind IN ('stop', 'destroy') AND a.outcome = 'ok'
                AND a.tool_call_id LIKE 'fallback-flagged%'",
        )
        .unwrap();
    let rows: Vec<(i64, i64, i64)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    rows.into_iter()
        .map(|(id, destroyed, first)| {
            let passes: i64 = db
                .query_row(
                    "SELECT COUNT(*) FROM runs WHERE status = 'ok' AND id BETWEEN ?1 AND ?2",
                    [first, destroyed],
                    |r| r.get(0),
                )
                .unwrap();
            (id, passes)
        })
        .collect()
}

#[test]
fn with_the_model_unusable_no_flagged_instance_bills_past_floor_flagged_passes() {
    // llama-server's final 500 on every turn (one request each, no retry), on the incident:
    // a stuck loader and two dead instances; then a budget too small for the minimal prompt
    // (nothing is sent) on the outage scenario's three dead instances and stuck loader.
    let parse_error = Reply::status(
        500,
        r#"{"error":{"code":500,"message":"Failed to parse tool call arguments as JSON: [json.exception.parse_error.101]","type":"server_error"}}"#,
    );
    for (scenario, extra, flagged) in [
        ("incident", "", 3),
        ("llm-outage", "context_budget_tokens = 2000", 4),
    ] {
        let llm = FakeLlm::start();
        llm.set_default(parse_error.clone());
        let run = sim_llm(
            &config_text(&llm, extra),
            None,
            &["--scenario", scenario, "--hours", "2"],
        );
        let r = &run.report;
        assert_eq!(
            r["runs"]["by_decider"]["fallback-rules"], r["runs"]["passes"],
            "{scenario}: every pass decided by the fallback: {}",
            r["runs"]
        );
        let clocks = &r["model"]["floor_clocks"];
        assert!(
            clocks["flagged_passes_max"].as_u64().unwrap() <= 2,
            "{scenario}: {clocks}"
        );
        assert_eq!(r["stuck_instances"]["unhandled"], 0, "{scenario}");
        // Each flagged instance was destroyed by the fallback within floor_flagged_passes
        // passes of the first that saw it flagged.
        let billed = passes_each_flagged_instance_billed(&run.state);
        assert!(billed.len() >= flagged, "{scenario}: {billed:?}");
        assert!(
            billed.iter().all(|(_, passes)| *passes <= 2),
            "{scenario}: {billed:?}"
        );
        assert!(
            r["incident"]["fallback_stops"].as_u64().unwrap() >= flagged as u64,
            "{scenario}: {}",
            r["incident"]
        );
        // The fallback launched for the demand, as the rules would.
        assert!(r["launches"]["made"].as_u64().unwrap() >= 1, "{scenario}");
    }
    // The text report says the model never answered before its verdict: the checks judged
    // the fallback rules (a walkthrough read PASSED as the model's).
    let llm = FakeLlm::start();
    llm.set_default(parse_error);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    std::fs::write(&path, config_text(&llm, "")).unwrap();
    let mut c = std::process::Command::new(crate::common::fleet::BIN);
    crate::common::fleet::clean_env(&mut c);
    let out = c
        .arg("--config")
        .arg(&path)
        .args([
            "sim",
            "--llm",
            "--llm-latency",
            "3",
            "--scenario",
            "incident",
        ])
        .args(["--hours", "0.5"])
        .env("FLEETAGENT_LLM_API_KEY", "sk-sim")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("NOTE: the model gave no usable answer (")
            && text.contains("the checks below judge the rules, not the model"),
        "{text}"
    );
}

/// Under `policy.dry_run` a model's dry stops are what it did: the floor does not repeat them
/// (a fleet over `max_instances`, the model dry-stops its surplus, and the floor logged
/// "would destroy" the same instance again and took the pass: a re-test).
#[test]
fn a_models_dry_stops_are_not_repeated_by_the_floor() {
    let llm = FakeLlm::start();
    let vast = FakeVast::start_real_time();
    let f = rig(
        &llm,
        &vast,
        "max_dph_total = 10.0\nmax_instances = 1\ndry_run = true\nmin_rental_mins = 0",
        "quiet_interval_mins = 0",
    );
    write_demand(f.path(), busy_enough());
    let ids: Vec<u64> = (0..3)
        .map(|i| vast.add_instance(&format!("fleetagent-r0-0a0b0c0{i}")))
        .collect();
    let stop = |id: u64| {
        (
            "stop_instance",
            format!(r#"{{"instance_id": {id}, "reason": "over the cap"}}"#),
        )
    };
    let calls: Vec<(String, String)> = ids[1..]
        .iter()
        .map(|id| {
            let (n, a) = stop(*id);
            (n.to_string(), a)
        })
        .collect();
    let refs: Vec<(&str, &str)> = calls
        .iter()
        .map(|(n, a)| (n.as_str(), a.as_str()))
        .collect();
    llm.push(Reply::tool_calls(&refs));
    llm.push(Reply::text("Stopped the two over the cap."));
    f.cmd(&["trigger", "-p", "1", "-r", "look"]).ok();
    f.cmd(&["run"]).ok();
    let dry: i64 =
        f.count("SELECT COUNT(*) FROM actions WHERE actor = 'llm' AND outcome = 'dry_run'");
    assert_eq!(dry, 2, "{:?}", floor_actions(&f));
    assert!(floor_actions(&f).is_empty(), "{:?}", floor_actions(&f));
    assert_eq!(vast.count(Route::Destroy), 0);
}

/// A drill: vast.ai refused every create (an account out of credit) and the floor sent a
/// second one after the model's, took the pass, and `doctor` told the operator to replace
/// the model. A launch of the model's that failed at vast.ai is what the floor's would meet:
/// nothing more is sent and the pass stays the model's. An offer the model named that was
/// taken meanwhile is another matter: the floor's launch searches afresh and rents.
#[test]
fn a_models_launch_that_vast_ai_refused_is_not_repeated_by_the_floor() {
    let llm = FakeLlm::start();
    let vast = FakeVast::start_real_time();
    let offers = vast.add_offers(3, "RTX 4090", 0.40, 0.99);
    let f = rig(&llm, &vast, ONE_LAUNCH, "quiet_interval_mins = 0");
    write_demand(f.path(), dead_fleet());
    let no_credit = FakeReply::json(
        400,
        json!({"success": false, "error": "missing_billing",
               "msg": "Your account has insufficient credit. Please add credit to continue."}),
    );
    vast.fail_next(Route::Create, 1, no_credit);
    let launch = ("launch_instance", r#"{"reason": "every worker is dead"}"#);
    llm.push(Reply::tool_calls(&[launch]));
    llm.push(Reply::text("vast.ai refused it."));
    f.cmd(&["trigger", "-p", "1", "-r", "workers died"]).ok();
    f.cmd(&["run"]).ok();
    assert_eq!(
        vast.count(Route::Create),
        1,
        "the model's create, no second"
    );
    assert!(floor_actions(&f).is_empty(), "{:?}", floor_actions(&f));
    assert_eq!(f.inspect()["runs"][0]["decided_by"], "llm");
    let doctor = f.cmd(&["doctor", "--json"]).json();
    let floor = doctor["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "floor")
        .unwrap()
        .clone();
    assert_eq!(floor["ok"], true, "{floor}");

    // The model names an offer that was rented meanwhile: the floor rents another.
    vast.clear_requests();
    let taken = FakeReply::json(
        404,
        json!({"success": false, "error": "no_such_ask",
               "msg": format!("Instance type by id {} is not available.", offers[0]),
               "ask_id": offers[0]}),
    );
    named_offer_refused_then_the_floor_rents(&llm, &vast, &f, taken, offers[0]);
}

/// The model names `offer`, vast.ai answers its create `refused`, and the floor's own launch
/// rents another in the same pass.
fn named_offer_refused_then_the_floor_rents(
    llm: &FakeLlm,
    vast: &FakeVast,
    f: &crate::common::fleet::Fleet,
    refused: FakeReply,
    offer: u64,
) {
    vast.fail_next(Route::Create, 1, refused);
    let args = format!(r#"{{"offer_id": {offer}, "reason": "every worker is dead"}}"#);
    llm.push(Reply::tool_calls(&[("launch_instance", &args)]));
    llm.push(Reply::text("That offer did not go."));
    f.cmd(&["trigger", "-p", "1", "-r", "still dead"]).ok();
    f.cmd(&["run"]).ok();
    assert_eq!(
        vast.count(Route::Create),
        2,
        "the model's, then the floor's"
    );
    let acts = floor_actions(f);
    assert_eq!(acts.len(), 1, "{acts:?}");
    assert_eq!((acts[0].0.as_str(), acts[0].1.as_str()), ("launch", "ok"));
}

/// A re-test: a model naming a host in maintenance pass after pass (vast.ai refused that
/// offer alone, 400 invalid_args) held the floor's WORKERS DEAD launch while other offers
/// rented fine. A create refused for its offer leaves the floor's own launch to go.
#[test]
fn a_models_launch_refused_for_its_offer_alone_leaves_the_floor_to_rent_another() {
    let llm = FakeLlm::start();
    let vast = FakeVast::start_real_time();
    let offers = vast.add_offers(3, "RTX 4090", 0.40, 0.99);
    let f = rig(&llm, &vast, ONE_LAUNCH, "quiet_interval_mins = 0");
    write_demand(f.path(), dead_fleet());
    let maintenance = FakeReply::json(
        400,
        json!({"success": false, "error": "invalid_args", "msg": "host is in maintenance"}),
    );
    named_offer_refused_then_the_floor_rents(&llm, &vast, &f, maintenance, offers[1]);
}

/// A third re-test: a 400 that was our own config's (the image), on an offer the model named,
/// let the floor try too, and each such pass read as the floor overruling the model (doctor:
/// replace the model). A pass whose floor calls all failed after a failed launch of the
/// model's stays the model's.
#[test]
fn a_floor_that_fails_as_the_model_did_overrules_nothing() {
    let llm = FakeLlm::start();
    let vast = FakeVast::start_real_time();
    let offers = vast.add_offers(3, "RTX 4090", 0.40, 0.99);
    let f = rig(&llm, &vast, ONE_LAUNCH, "quiet_interval_mins = 0");
    write_demand(f.path(), dead_fleet());
    let bad_image = FakeReply::json(
        400,
        json!({"success": false, "error": "invalid_args", "msg": "image: invalid reference format"}),
    );
    vast.fail_next(Route::Create, 5, bad_image);
    let args = format!(
        r#"{{"offer_id": {}, "reason": "every worker is dead"}}"#,
        offers[0]
    );
    llm.push(Reply::tool_calls(&[("launch_instance", &args)]));
    llm.push(Reply::text("vast.ai refused it."));
    f.cmd(&["trigger", "-p", "1", "-r", "dead"]).ok();
    f.cmd(&["run"]).ok();
    assert_eq!(
        vast.count(Route::Create),
        2,
        "the model's, then the floor's"
    );
    assert_eq!(f.inspect()["runs"][0]["decided_by"], "llm");
}
