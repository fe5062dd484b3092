//! The hand-brake end to end (docs/guardrails.md "The hand-brake", "Operator hold"): the real
//! binary, the fake model and the fake vast.ai. While paused a WORKERS DEAD pass launches
//! nothing and the model's own launch is answered `paused`; `instances stop --all` pauses and
//! destroys every instance of ours (not another install's, not one without our prefix) and the
//! next pass relaunches nothing; after `resume` the next pass launches; an operator's forced
//! stop is not undone by the floor while the hold lasts.

use serde_json::{json, Value};

use crate::common::fake_llm::{FakeLlm, Reply};
use crate::common::fake_vast::{FakeVast, Route};
use crate::common::fleet::Fleet;
use crate::suite::agent_e2e::{
    busy_fleet, dead_fleet, one_instance_is_enough, rig, write_demand, CAPS,
};
use crate::suite::backbone::wait_for;

fn launch_call() -> Reply {
    Reply::tool_call("launch_instance", r#"{"reason":"every worker is dead"}"#)
}

/// The ledger's launches: (actor, outcome, detail).
fn launches(f: &Fleet) -> Vec<(String, String, String)> {
    let db = f.db();
    let mut stmt = db
        .prepare("SELECT actor, outcome, COALESCE(detail, '') FROM actions WHERE kind = 'launch' ORDER BY id")
        .unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

fn last_observation(f: &Fleet) -> String {
    f.inspect()["last_observation"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn pause_stop_all_resume_and_the_operator_hold() {
    let llm = FakeLlm::start();
    llm.set_default(Reply::text("No action needed."));
    let vast = FakeVast::start_real_time();
    vast.add_offers(4, "RTX 4090", 0.40, 0.99);
    let f = rig(&llm, &vast, CAPS, "quiet_interval_mins = 0");
    one_instance_is_enough(&f);
    write_demand(f.path(), dead_fleet());
    // On the account: one of ours from before install ids, one of another install under our
    // prefix, and one that is not ours at all.
    let old = vast.add_instance("fleetagent-r0-0a0b0c0d");
    let theirs = vast.add_instance("fleetagent-zxcvbn-r4-01020304");
    let stranger = vast.add_instance("someone-else");

    // Paused: the model's launch is answered `paused`, the floor plans nothing.
    let out = f
        .cmd(&[
            "pause",
            "--for",
            "2h",
            "--reason",
            "swapping the Curio box's disk",
        ])
        .ok();
    assert!(
        out.stdout.starts_with("paused until ") && out.stdout.contains("(in 2h"),
        "{}",
        out.stdout
    );
    llm.push(launch_call());
    f.cmd(&["trigger", "-p", "1", "-r", "workers died"]).ok();
    f.cmd(&["run"]).ok();
    assert_eq!(
        vast.count(Route::Create),
        0,
        "nothing launched while paused"
    );
    let l = launches(&f);
    assert_eq!(
        l.len(),
        1,
        "only the model's call, refused; the floor asked nothing: {l:?}"
    );
    assert_eq!((l[0].0.as_str(), l[0].1.as_str()), ("llm", "refused"));
    let refusal: Value = serde_json::from_str(&l[0].2).unwrap();
    assert_eq!(refusal["error"], "paused");
    assert_eq!(refusal["reason"], "swapping the Curio box's disk");
    let tool_result = llm.requests()[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|m| m["role"] == "tool")
        .unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        tool_result.contains("\"error\":\"paused\"") && tool_result.contains("\"until\":\""),
        "{tool_result}"
    );
    let v = f.inspect();
    let p = &v["paused"];
    assert_eq!(p["reason"], "swapping the Curio box's disk", "{p}");
    assert!(p["since"].as_str().unwrap().ends_with('Z') && p["until"].is_string());
    let observation = v["last_observation"].as_str().unwrap();
    // Both name the run that wrote them: this pass's.
    let newest = v["runs"][0]["id"].as_i64().unwrap();
    assert_eq!(v["last_observation_run"].as_i64(), Some(newest), "{v}");
    assert_eq!(v["last_decision_run"].as_i64(), Some(newest), "{v}");
    assert!(
        observation.contains("\nPAUSED by the operator ")
            && observation.contains(" ago, ending in "),
        "{observation}"
    );
    let install = v["install_id"].as_str().unwrap().to_string();
    assert_eq!(install.len(), 6, "{install}");
    // The pass still observed and reconciled: the old label is ours (adopted), the other
    // install's is not.
    let fleet: Vec<Option<i64>> = v["fleet"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["vast_id"].as_i64())
        .collect();
    assert_eq!(fleet, vec![Some(old as i64)]);
    assert_eq!(v["other_installs"][0]["vast_id"], theirs);
    assert_eq!(v["other_installs"][0]["install_id"], "zxcvbn");

    // The panic button: paused (open-ended now), every instance of ours destroyed.
    let out = f
        .cmd(&["instances", "stop", "--all", "--reason", "runaway bill"])
        .ok();
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(
        lines[0], "paused until `fleetagent resume`: runaway bill",
        "{}",
        out.stdout
    );
    assert!(
        lines[1].starts_with(&format!(
            "instance {old} \"fleetagent-r0-0a0b0c0d\": destroyed"
        )),
        "{}",
        out.stdout
    );
    assert_eq!(
        lines.last().unwrap(),
        &"destroyed 1 of 1 instance(s) of ours (1 of other installs left alone); paused until `fleetagent resume`"
    );
    let destroyed: Vec<String> = vast
        .requests_to(Route::Destroy)
        .iter()
        .map(|r| r.path.clone())
        .collect();
    assert_eq!(destroyed, vec![format!("/api/v0/instances/{old}/")]);
    assert_eq!(vast.instance_ids(), vec![theirs, stranger]);
    let p = f.inspect()["paused"].clone();
    assert_eq!(
        (&p["until"], &p["reason"]),
        (&Value::Null, &json!("runaway bill")),
        "{p}"
    );

    // The next pass relaunches nothing: WORKERS DEAD, the model asks, the tool refuses.
    llm.push(launch_call());
    f.cmd(&["trigger", "-p", "1", "-r", "still dead"]).ok();
    f.cmd(&["run"]).ok();
    assert_eq!(vast.count(Route::Create), 0);
    assert!(launches(&f).iter().all(|(_, o, _)| o == "refused"));

    // resume rings; the next pass launches (the model's call goes through).
    let out = f.cmd(&["resume"]).ok();
    assert!(
        out.stdout.starts_with("resumed: the pause since ")
            && out.stdout.contains("(\"runaway bill\") is over"),
        "{}",
        out.stdout
    );
    assert!(f.doorbell().exists(), "resume rings");
    assert_eq!(f.inspect()["paused"], Value::Null);
    llm.push(launch_call());
    f.cmd(&["run"]).ok();
    assert_eq!(vast.count(Route::Create), 1, "{:?}", launches(&f));
    let ours: Vec<u64> = vast
        .instance_ids()
        .into_iter()
        .filter(|i| ![theirs, stranger].contains(i))
        .collect();
    assert_eq!(ours.len(), 1);
    let label = vast.instance(ours[0]).unwrap()["label"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        label.starts_with(&format!("fleetagent-{install}-r")),
        "new labels carry the install id: {label}"
    );

    // The operator stops it by hand; WORKERS DEAD again, the model does nothing, and the
    // floor does not put it back while the hold lasts.
    let said = f
        .cmd(&["instances", "stop", &ours[0].to_string(), "--force"])
        .ok()
        .stdout;
    assert!(
        said.contains("operator hold: the rules and the floor launch nothing for 30 min"),
        "the operator is told of the hold: {said}"
    );
    f.cmd(&["trigger", "-p", "1", "-r", "dead again"]).ok();
    let held = f.cmd(&["run"]).ok();
    assert_eq!(
        vast.count(Route::Create),
        1,
        "the floor undid the operator's stop"
    );
    // The pass's WORKERS DEAD warning says why nothing was asked (it said "ok 0, refused 0,
    // failed 0" alone).
    assert!(
        held.stderr.contains(&format!(
            "; the rules and the floor launch nothing: the operator stopped instance {} ",
            ours[0]
        )),
        "{}",
        held.stderr
    );
    let v = f.inspect();
    assert_eq!(
        v["operator_hold"]["instance_id"], ours[0],
        "{}",
        v["operator_hold"]
    );
    assert!(
        last_observation(&f).contains("Operator hold: the operator stopped instance"),
        "{}",
        last_observation(&f)
    );
    assert!(
        !launches(&f).iter().any(|(a, _, _)| a == "floor"),
        "{:?}",
        launches(&f)
    );
    // Unattended while the hold lasts: doctor says so (it said ok; the soak walkthrough).
    let doctor = f.cmd(&["doctor"]).code(1).stdout;
    assert!(
        doctor.contains(&format!(
            "OPERATOR HOLD WHILE WORKERS DEAD: the operator stopped instance {}",
            ours[0]
        )),
        "{doctor}"
    );
    f.cmd(&["message", "go on"]).ok();
    let doctor = f.cmd(&["doctor"]).stdout;
    assert!(
        !doctor.contains("OPERATOR HOLD"),
        "a message ends it: {doctor}"
    );
}

/// The panic button at a root shell on an install whose keys live only in the credential
/// store (as the README installs them): the command reads the store's file the units load,
/// and destroys. `doctor` there sees the key the service has.
#[test]
fn the_panic_button_at_a_shell_uses_the_credential_store_the_units_load() {
    let vast = FakeVast::start_real_time();
    let ours = vast.add_instance("fleetagent-r0-0a0b0c0d");
    let f = Fleet::new();
    f.write_config(&format!(
        "{}\n[vast]\nbase_url = \"{}\"\n",
        crate::common::fleet::FAST_CONFIG,
        vast.url()
    ));
    let store = f.path().join("credstore");
    std::fs::create_dir(&store).unwrap();
    let in_store = |f: &Fleet, args: &[&str]| {
        let mut c = f.command(args);
        c.env(
            "FLEETAGENT_CREDSTORE",
            format!("/nonexistent:{}", store.display()),
        );
        crate::common::fleet::Run::from(c.output().unwrap())
    };
    // Without the store's file: nothing destroyed, said.
    let out = in_store(
        &f,
        &["instances", "stop", "--all", "--reason", "runaway bill"],
    )
    .code(1);
    assert!(out.stderr.contains("no vast.ai API key"), "{}", out.stderr);
    assert_eq!(vast.count(Route::Destroy), 0);
    std::fs::write(
        store.join("fleetagent.vast_api_key"),
        crate::common::fake_vast::FAKE_API_KEY,
    )
    .unwrap();
    let doctor = in_store(&f, &["doctor"]).stdout;
    assert!(!doctor.contains("no vast.ai API key"), "{doctor}");
    let out = in_store(
        &f,
        &["instances", "stop", "--all", "--reason", "runaway bill"],
    )
    .ok();
    assert!(
        out.stdout.contains("destroyed 1 of 1 instance(s) of ours"),
        "{}",
        out.stdout
    );
    assert!(!vast.instance_ids().contains(&ours));
    // A service (systemd gives it $INVOCATION_ID) reads only what LoadCredential= handed it.
    let mut c = f.command(&["doctor"]);
    c.env("FLEETAGENT_CREDSTORE", store.display().to_string())
        .env("INVOCATION_ID", "0123456789abcdef");
    let doctor = crate::common::fleet::Run::from(c.output().unwrap()).stdout;
    assert!(doctor.contains("no vast.ai API key"), "{doctor}");
}

/// A fleet with one instance of ours and no demand, after a pass: the model, vast.ai, the
/// fleet and the instance's id.
fn one_instance_after_a_pass() -> (FakeLlm, FakeVast, Fleet, u64) {
    let llm = FakeLlm::start();
    llm.set_default(Reply::text("No action needed."));
    let vast = FakeVast::start_real_time();
    let f = rig(&llm, &vast, CAPS, "quiet_interval_mins = 0");
    write_demand(
        f.path(),
        json!({"pending": 0, "running": 0, "completed_1h": 0, "completed_15m": 0, "workers": []}),
    );
    let ours = vast.add_instance("fleetagent-r0-0a0b0c0d");
    f.cmd(&["run"]).ok();
    (llm, vast, f, ours)
}

/// vast.ai acknowledges the panic button's destroy and does nothing (seen on a misbehaving
/// API): the command names the instance still listed and exits 1, not "destroyed" and 0;
/// the next pass, paused as it is, says so at error and sends the destroy again; `doctor`'s
/// `vast` check is red while the listing shows it.
#[test]
fn a_destroy_acknowledged_but_not_done_is_named_and_sent_again() {
    let (_llm, vast, f, ours) = one_instance_after_a_pass();
    let ok = || crate::common::fake_vast::FakeReply::json(200, json!({"success": true}));
    vast.fail_next(Route::Destroy, 1, ok());

    let out = f
        .cmd(&["instances", "stop", "--all", "--reason", "runaway bill"])
        .code(1);
    assert!(
        out.stdout.contains(&format!(
            "instance {ours} \"fleetagent-r0-0a0b0c0d\": destroyed"
        )),
        "{}",
        out.stdout
    );
    let not_done = format!(
        "instance {ours}: NOT done: vast.ai acknowledged it, but still lists it \"running\": it bills"
    );
    assert!(
        out.stdout.contains(&not_done) && out.stderr.contains(&not_done),
        "{}{}",
        out.stdout,
        out.stderr
    );
    assert!(
        out.stdout
            .contains("destroyed 0 of 1 instance(s) of ours, 1 acknowledged but still listed"),
        "{}",
        out.stdout
    );
    assert_eq!(vast.instance_ids(), vec![ours]);

    // Past the listing's lag, the next pass (paused) finds it and sends the destroy again.
    f.db()
        .execute(
            "UPDATE actions SET created_at = created_at - 300000, finished_at = finished_at - 300000
              WHERE kind = 'destroy'",
            [],
        )
        .unwrap();
    vast.fail_next(Route::Destroy, 1, ok());
    f.cmd(&["trigger", "-p", "1", "-r", "check"]).ok();
    let out = f.cmd(&["run"]).ok();
    assert!(
        out.stderr.contains(&format!(
            "instance {ours} \"fleetagent-r0-0a0b0c0d\" was destroyed by us 5m"
        )) && out.stderr.contains(
            "but vast.ai still lists it booted at $0.4/h: it bills: the destroy sent again"
        ),
        "{}",
        out.stderr
    );
    assert_eq!(vast.count(Route::Destroy), 2);
    let doctor = f.cmd(&["doctor"]).code(1).stdout;
    assert!(
        doctor.contains("vast.ai acknowledged the stop or destroy of 1 instance(s) of ours but still lists them: instance"),
        "{doctor}"
    );

    // The next pass's destroy takes: gone, and doctor's vast check has nothing to say.
    f.db()
        .execute(
            "UPDATE actions SET created_at = created_at - 300000, finished_at = finished_at - 300000
              WHERE kind = 'destroy'",
            [],
        )
        .unwrap();
    f.cmd(&["trigger", "-p", "1", "-r", "check"]).ok();
    f.cmd(&["run"]).ok();
    assert!(vast.instance_ids().is_empty());
    // Red until a listing shows it gone, not on vast.ai's word alone.
    f.cmd(&["trigger", "-p", "1", "-r", "check"]).ok();
    f.cmd(&["run"]).ok();
    let doctor = f.cmd(&["doctor"]).stdout;
    assert!(
        !doctor.contains("acknowledged the stop or destroy"),
        "{doctor}"
    );
    assert_eq!(vast.count(Route::Destroy), 3);
}

/// The panic button killed after vast.ai destroyed an instance and before its row: its mark
/// in flight is left, and a pass past the settle time records the operator's destroy (not an
/// instance that vanished, nor a run's). A walkthrough saw nothing recorded.
#[test]
fn a_panic_button_killed_after_its_destroy_is_recorded_from_its_mark() {
    let (_llm, vast, f, ours) = one_instance_after_a_pass();
    let mut cmd = f.command(&["instances", "stop", "--all", "--reason", "runaway bill"]);
    cmd.env("FLEETAGENT_TEST_CRASH_AT", "stop-after-call");
    let out = crate::common::fleet::Run::from(cmd.output().unwrap());
    assert!(out.stderr.contains("test crash injected"), "{}", out.stderr);
    assert!(vast.instance_ids().is_empty(), "vast.ai destroyed it");
    assert_eq!(f.count("SELECT COUNT(*) FROM operator_stops_in_flight"), 1);
    let destroys = "SELECT COUNT(*) FROM actions WHERE kind = 'destroy' AND outcome = 'ok'";
    assert_eq!(f.count(destroys), 0);
    // A pass (paused) sees it gone; half an hour later, as the settle needs, the next records it.
    f.cmd(&["trigger", "-p", "1", "-r", "check"]).ok();
    f.cmd(&["run"]).ok();
    let db = f.db();
    db.execute_batch(
        "UPDATE operator_stops_in_flight SET typed_at = typed_at - 2400000;
         UPDATE instances SET gone_at = gone_at - 2400000, state_since = state_since - 2400000;",
    )
    .unwrap();
    f.cmd(&["trigger", "-p", "1", "-r", "check"]).ok();
    let out = f.cmd(&["run"]).ok();
    assert!(
        out.stderr.contains(&format!(
            "instance {ours}: the operator's destroy of it went through and is recorded now"
        )),
        "{}",
        out.stderr
    );
    let row: (String, Option<i64>) = db
        .query_row(
            "SELECT actor, run_id FROM actions WHERE kind = 'destroy' AND outcome = 'ok'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(row, ("operator".to_string(), None));
    assert_eq!(f.count("SELECT COUNT(*) FROM operator_stops_in_flight"), 0);
}

/// The operator's hand while a launch waits to be sent (its intent committed, its create not
/// sent: held here by the test switch; in life the create spacing, a 429's wait, a slow
/// search): a pause, then an operator's stop, each made meanwhile. The create is not sent,
/// its intent is settled `refused` (`paused`, then `operator_hold`), and nothing is rented
/// against the operator's word. Before, the pause was read once per call, the hold once per
/// pass.
#[test]
fn a_pause_or_an_operator_stop_while_a_launch_waits_holds_it() {
    let llm = FakeLlm::start();
    llm.set_default(Reply::text("No action needed."));
    let vast = FakeVast::start_real_time();
    vast.add_offers(4, "RTX 4090", 0.40, 0.99);
    let f = rig(&llm, &vast, CAPS, "quiet_interval_mins = 0")
        .env("FLEETAGENT_TEST_PAUSE_AT", "launch-after-intent:2500");
    one_instance_is_enough(&f);
    write_demand(f.path(), dead_fleet());
    let intents = |f: &Fleet| {
        f.count("SELECT COUNT(*) FROM actions WHERE kind = 'launch' AND outcome = 'intent'")
    };
    let refused = |f: &Fleet, code: &str| {
        f.count(&format!(
            "SELECT COUNT(*) FROM actions WHERE kind = 'launch' AND outcome = 'refused'
              AND actor = 'floor' AND code = '{code}'"
        ))
    };
    for (code, hand) in [
        ("paused", vec!["pause", "--reason", "hands off"]),
        (
            "operator_hold",
            vec![
                "instances",
                "stop",
                "OLD",
                "--force",
                "--reason",
                "bad host",
            ],
        ),
    ] {
        f.cmd(&["trigger", "-p", "1", "-r", "workers died"]).ok();
        let mut run = f.spawn(&["run"]);
        wait_for(
            || intents(&f) == 1 || run.try_wait().unwrap().is_some(),
            "the floor's launch intent",
        );
        if intents(&f) == 0 {
            let out = run.wait_with_output().unwrap();
            panic!(
                "{code}: no launch: {:?}\n{}\n{}{}",
                launches(&f),
                last_observation(&f),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        // One of ours the operator stops (listed only now: booting, it would have held the
        // floor's launch back).
        let old_id = if code == "operator_hold" {
            vast.add_instance("fleetagent-r0-0a0b0c0d").to_string()
        } else {
            String::new()
        };
        let hand: Vec<&str> = hand
            .iter()
            .map(|a| if *a == "OLD" { old_id.as_str() } else { a })
            .collect();
        let said = f.cmd(&hand).ok().stdout;
        if code == "paused" {
            // The operator is told what was already on its way.
            assert!(
                said.contains("1 launch(es) under way: \"fleetagent-"),
                "{said}"
            );
        }
        let out = run.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(vast.count(Route::Create), 0, "{code}: {stderr}");
        assert_eq!(intents(&f), 0, "{code}: settled");
        assert_eq!(refused(&f, code), 1, "{code}: {:?}", launches(&f));
        assert_eq!(
            f.count("SELECT COUNT(*) FROM instances WHERE state = 'launching'"),
            0,
            "{code}: its launching row is gone"
        );
        if code == "paused" {
            f.cmd(&["resume"]).ok();
        }
    }
}

/// An operator who edits the config (a cap lowered) while a run waits for the lock (or for the
/// debounce, or between its passes): that process does not pass on the config it read
/// before. It says so and leaves the events, their doorbell rung, to a new process, which
/// reads the new config. Before, a run that had waited launched under the old
/// `max_instances`.
#[test]
fn a_config_edited_while_a_run_waits_is_a_new_processs() {
    let f = Fleet::new().env("FLEETAGENT_TEST_PAUSE_AT", "run-after-lock:2000");
    f.cmd(&["trigger", "-p", "0", "-r", "first"]).ok();
    let child = f.spawn(&["run"]);
    wait_for(
        || f.inspect()["lock_holder_pid"].is_number(),
        "the run holding the lock",
    );
    let text = std::fs::read_to_string(&f.config).unwrap();
    f.write_config(&text.replace("deadline_secs = 60", "deadline_secs = 90"));
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("the config changed since this process read it: no pass on the old one; 1 event(s) wait for a new process, which reads it (the doorbell is rung)"),
        "{stderr}"
    );
    assert!(!stdout.contains("run 1:"), "no pass: {stdout}");
    assert_eq!(f.count("SELECT COUNT(*) FROM runs"), 0);
    assert!(f.doorbell().exists(), "rung for the new process");
    // The new process passes, on the new config.
    let out = f.cmd(&["run"]).ok();
    assert!(
        out.stdout.contains("run 1: started by events, 1 event(s)"),
        "{}",
        out.stdout
    );
}

/// An operator's destroy made while a pass waits for its listing (asked for before the
/// destroy, answered after it: the race walkthrough's F5). The listing still shows the
/// instance running, and the destroy is newer: the pass keeps it gone, as the destroy left
/// it. Before, it was "listed again after it was marked gone" and counted as booted
/// capacity for that pass.
#[test]
fn an_operator_destroy_made_while_a_pass_lists_is_not_undone_by_that_listing() {
    let llm = FakeLlm::start();
    llm.set_default(Reply::text("No action needed."));
    let vast = FakeVast::start_real_time();
    let f = rig(&llm, &vast, CAPS, "quiet_interval_mins = 0");
    write_demand(f.path(), busy_fleet());
    let id = vast.add_instance("fleetagent-r0-0a0b0c0d");
    f.cmd(&["run"]).ok();
    let gone = |f: &Fleet| {
        f.count(&format!(
            "SELECT COUNT(*) FROM instances WHERE vast_id = {id} AND gone_at IS NOT NULL"
        ))
    };
    assert_eq!(gone(&f), 0, "adopted by the first pass");
    let listings = vast.count(Route::ListV1);
    vast.answer_late(Route::ListV1, 1, std::time::Duration::from_millis(2_500));
    f.cmd(&["trigger", "-p", "1", "-r", "a look"]).ok();
    let run = f.spawn(&["run"]);
    wait_for(
        || vast.count(Route::ListV1) > listings,
        "the pass's listing asked for",
    );
    let id_text = id.to_string();
    f.cmd(&[
        "instances",
        "stop",
        &id_text,
        "--force",
        "--reason",
        "bad host",
    ])
    .ok();
    assert_eq!(gone(&f), 1, "the operator's destroy marks it gone");
    let out = run.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(gone(&f), 1, "kept gone by the pass: {stderr}");
    assert_eq!(
        f.count("SELECT COUNT(*) FROM events WHERE reason LIKE '%listed again%'"),
        0,
        "{stderr}"
    );
    assert!(!stderr.contains("listed again"), "{stderr}");
}

/// An operator's stop typed while a pass is about to launch, whose destroy vast.ai answers
/// only after that pass's create would go (the matrix walkthrough: a replacement rented two
/// seconds after the DELETE was sent, the hold said to be in force). The hold counts from the
/// stop typed: the pass's launch is refused `operator_hold`, nothing is created.
#[test]
fn an_operator_stop_on_its_way_to_vast_ai_holds_a_launch_meanwhile() {
    let llm = FakeLlm::start();
    llm.set_default(Reply::text("No action needed."));
    let vast = FakeVast::start_real_time();
    vast.add_offers(4, "RTX 4090", 0.40, 0.99);
    let f = rig(&llm, &vast, CAPS, "quiet_interval_mins = 0")
        .env("FLEETAGENT_TEST_PAUSE_AT", "launch-after-intent:3000");
    one_instance_is_enough(&f);
    write_demand(f.path(), dead_fleet());
    // One of ours that exited (no capacity coming): the pass adopts it and launches.
    let old_id = vast.add_instance("fleetagent-r0-0a0b0c0d");
    vast.set_actual_status(old_id, Some("exited"));
    let old = old_id.to_string();
    f.cmd(&["trigger", "-p", "1", "-r", "workers died"]).ok();
    let run = f.spawn(&["run"]);
    wait_for(
        || {
            f.count("SELECT COUNT(*) FROM actions WHERE kind = 'launch' AND outcome = 'intent'")
                == 1
        },
        "the floor's launch intent",
    );
    vast.answer_late(Route::Destroy, 1, std::time::Duration::from_millis(5_000));
    let stop = f.spawn(&["instances", "stop", &old, "--force", "--reason", "bad host"]);
    let in_flight = "SELECT COUNT(*) FROM operator_stops_in_flight";
    wait_for(|| f.count(in_flight) == 1, "the stop marked in flight");
    // A second stop, refused (not ours), neither marks nor ends the first one's hold.
    f.cmd(&["instances", "stop", "424242", "--force"]).code(1);
    assert_eq!(f.count(in_flight), 1);
    let out = run.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(vast.count(Route::Create), 0, "{stderr}");
    assert_eq!(
        f.count(
            "SELECT COUNT(*) FROM actions WHERE kind = 'launch' AND outcome = 'refused'
              AND code = 'operator_hold'"
        ),
        1,
        "{:?}",
        launches(&f)
    );
    // The operator resumes while the destroy is still on its way: the stop, dated when it
    // was typed, holds nothing once it lands (the hold came back for 30 minutes).
    assert_eq!(f.count(in_flight), 1, "still on its way");
    f.cmd(&["resume"]).ok();
    let said = stop.wait_with_output().unwrap();
    assert!(
        said.status.success(),
        "{}",
        String::from_utf8_lossy(&said.stderr)
    );
    assert_eq!(f.count(in_flight), 0, "cleared once recorded");
    assert_eq!(
        f.count("SELECT COUNT(*) FROM actions WHERE actor = 'operator' AND outcome = 'ok'"),
        1
    );
    assert_eq!(f.inspect()["operator_hold"], Value::Null);
}

/// The panic button under `policy.dry_run` (a trial left on while the fleet bills): it
/// destroys nothing, as the dry run says, and so exits 1 with a line at error naming what
/// still bills and why; `doctor` names the dry run (it was green, and the button exited 0).
#[test]
fn the_panic_button_under_a_dry_run_says_the_fleet_still_bills() {
    let llm = FakeLlm::start();
    let vast = FakeVast::start_real_time();
    let f = rig(&llm, &vast, &format!("{CAPS}\ndry_run = true"), "").env("JOURNAL_STREAM", "0:0");
    let id = vast.add_instance("fleetagent-r0-0a0b0c0d");
    let out = f
        .cmd(&["instances", "stop", "--all", "--reason", "runaway bill"])
        .code(1);
    assert!(
        out.stdout.contains(&format!(
            "instance {id} \"fleetagent-r0-0a0b0c0d\": would be destroyed"
        )),
        "{}",
        out.stdout
    );
    assert!(
        out.stderr.contains("instances stop --all: instances of ours may still bill (1 not destroyed: policy.dry_run = true"),
        "{}",
        out.stderr
    );
    assert_eq!(vast.count(Route::Destroy), 0);
    let doctor = f.cmd(&["doctor"]).code(1);
    assert!(
        doctor
            .stdout
            .contains("policy.dry_run = true: nothing is sent to vast.ai"),
        "{}",
        doctor.stdout
    );
}

/// The panic button refused before it could send anything (here a database of a newer
/// build) says that nothing was destroyed and where else to stop the bill.
#[test]
fn a_panic_button_refused_says_the_fleet_bills_on() {
    let llm = FakeLlm::start();
    let vast = FakeVast::start_real_time();
    let f = rig(&llm, &vast, CAPS, "");
    let newer = fleetagent::store::SCHEMA_VERSION + 1;
    f.db().pragma_update(None, "user_version", newer).unwrap();
    let out = f
        .cmd(&["instances", "stop", "--all", "--reason", "runaway bill"])
        .code(1);
    assert!(
        out.stderr.contains("instances stop --all destroyed nothing and the fleet bills on (vast.ai's console destroys by hand"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("newer"),
        "the cause is said: {}",
        out.stderr
    );
}

/// The offers' ids the creates went to, in order.
fn offers_rented(vast: &FakeVast) -> Vec<u64> {
    vast.requests_to(Route::Create)
        .iter()
        .filter_map(|r| {
            r.path
                .trim_end_matches('/')
                .rsplit('/')
                .next()
                .and_then(|id| id.parse().ok())
        })
        .collect()
}

/// The operator took an instance off its host ("host looks bad"): for the hold, no launch
/// (the model's included, which the hold does not bind) goes back to that host, though it
/// is the cheapest (the model rented it again ten seconds after the stop: the prompt
/// walkthrough).
#[test]
fn the_host_an_operator_took_an_instance_off_is_not_rented_again_during_the_hold() {
    let llm = FakeLlm::start();
    llm.set_default(Reply::text("No action needed."));
    let vast = FakeVast::start_real_time();
    let cheap = vast.add_offer("RTX 4090", 0.30, 0.99);
    let other = vast.add_offer("RTX 4090", 0.40, 0.99);
    let f = rig(&llm, &vast, CAPS, "quiet_interval_mins = 0");
    write_demand(f.path(), busy_fleet());
    llm.push(launch_call());
    f.cmd(&["trigger", "-p", "1", "-r", "more work"]).ok();
    f.cmd(&["run"]).ok();
    assert_eq!(offers_rented(&vast), vec![cheap]);
    let id = vast.instance_ids()[0].to_string();
    f.cmd(&[
        "instances",
        "stop",
        &id,
        "--force",
        "--reason",
        "host looks bad",
    ])
    .ok();

    llm.push(launch_call());
    f.cmd(&["trigger", "-p", "1", "-r", "more work"]).ok();
    let out = f.cmd(&["run"]).ok();
    assert_eq!(
        offers_rented(&vast),
        vec![cheap, other],
        "back on the host the operator took it off: {}",
        out.stderr
    );
}

/// A stop vast.ai answers `no_such_instance` while its listing still shows the instance: the
/// command says it is NOT done and exits 1; it printed "instance N destroyed" first, then
/// the contrary (a walkthrough).
#[test]
fn a_stop_answered_no_such_instance_while_listed_is_not_called_destroyed() {
    let (_llm, vast, f, ours) = one_instance_after_a_pass();
    let gone = json!({"success": false, "error": "no_such_instance", "msg": "Instance not found"});
    vast.fail_next(
        Route::Destroy,
        1,
        crate::common::fake_vast::FakeReply::json(404, gone),
    );
    let id = ours.to_string();
    let out = f
        .cmd(&["instances", "stop", &id, "--force", "--reason", "test"])
        .code(1);
    assert!(
        !out.stdout.contains(&format!("instance {ours} destroyed")),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains(&format!("instance {ours}: NOT done")),
        "{}",
        out.stdout
    );
}
