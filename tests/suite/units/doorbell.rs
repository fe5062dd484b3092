//! Under a real systemd user manager the doorbell runs the agent: a trigger starts a run, a
//! burst of 200 makes a few passes, a ring while a run exits is served.

use std::time::Duration;

use super::{runs, text, Installed, BIN};
use crate::common::systemd::wait_for;
use fleetagent::units::{self, Scope};

#[test]
fn trigger_runs_the_agent_through_the_path_unit() {
    let t = Installed::new(5);
    let before = t.inspect();
    assert!(
        runs(&before).is_empty(),
        "a run before any trigger: {before}"
    );

    t.trigger("systemd test: first ring");
    wait_for(
        "a finished run started by the doorbell",
        Duration::from_secs(30),
        || {
            runs(&t.inspect())
                .iter()
                .any(|r| r["started_by"] == "events" && r["status"] == "ok")
        },
        || t.context(),
    );
    t.wait_settled(
        "the doorbell to be gone and the event consumed",
        Duration::from_secs(30),
    );
    assert!(t.sd.starts(units::SERVICE) >= 1);
    t.assert_no_unit_failed();

    // What inspect and doctor get from src/units.rs for this install: everything healthy,
    // once the poll timer runs too, as the README enables it (started last: its first poll
    // comes 30 s later, after this test).
    t.sd.systemctl_ok(&["start", units::POLL_TIMER]);
    let states = units::unit_states_with_env(&t.sd.env_pairs()).expect("the user manager answers");
    assert_eq!(states.scope, Scope::User);
    let path = &states.units[units::PATH_UNIT];
    assert_eq!(
        (
            path.load_state.as_str(),
            path.active_state.as_str(),
            path.sub_state.as_str()
        ),
        ("loaded", "active", "waiting"),
        "{states:?}"
    );
    assert_eq!(states.units[units::SERVICE].result, "success", "{states:?}");
    assert!(states.problems().is_empty(), "{:?}", states.problems());
    // The same through the binary: inspect --json reports each unit.
    let report = t.inspect();
    let units_json = &report["units"];
    assert_eq!(
        units_json[units::PATH_UNIT]["active_state"],
        "active",
        "{report}"
    );
    assert_eq!(units_json[units::SERVICE]["result"], "success", "{report}");
    assert_eq!(
        units_json[units::TIMER]["active_state"],
        "active",
        "{report}"
    );
}

#[test]
fn a_burst_of_200_triggers_makes_a_few_passes() {
    let t = Installed::new(5);
    let first_run = t.inspect()["next_run_id"].as_i64().unwrap();

    // One shell inside the namespace rings 200 times as fast as it can.
    let script = format!(
        "for i in $(seq 200); do {BIN} --config {} --state-dir {} trigger -p 1 -r burst-$i || exit 1; done",
        t.config.display(),
        t.state.display()
    );
    let out = t.sd.cmd("bash").args(["-c", &script]).output().unwrap();
    assert!(out.status.success(), "burst failed: {}", text(&out.stderr));

    t.wait_settled("the burst to be served", Duration::from_secs(60));
    let report = t.inspect();
    assert_eq!(report["failed_events"], 0, "{report}");
    t.assert_no_unit_failed();

    let passes = report["next_run_id"].as_i64().unwrap() - first_run;
    let starts = t.sd.starts(units::SERVICE);
    println!("200 triggers: {passes} passes in {starts} service starts");
    assert!(passes >= 1, "no pass served the burst: {report}");
    // Without the debounce every ring could have its own pass; a few is the contract.
    assert!(
        passes <= 10,
        "200 triggers made {passes} passes (in {starts} service starts)\n{}",
        t.context()
    );
}

#[test]
fn a_ring_while_the_agent_is_exiting_still_gets_its_run() {
    let t = Installed::new(5);
    // The test switch FLEETAGENT_TEST_PAUSE_AT (src/faults.rs) holds each run for a while
    // after its last look at the events, when it has decided to exit: a ring then is for
    // the next process, which only systemd (PathExists=) can start.
    t.drop_in(
        units::SERVICE,
        "pause.conf",
        "[Service]\nEnvironment=FLEETAGENT_TEST_PAUSE_AT=run-after-last-look:4000\n",
    );
    t.trigger("systemd test: first ring");
    wait_for(
        "the first run to finish its pass and hold after its last look",
        Duration::from_secs(30),
        || {
            let r = t.inspect();
            r["lock_held"] == true
                && r["doorbell"]["exists"] == false
                && r["unconsumed_events"] == 0
                && runs(&r).first().is_some_and(|run| run["status"] == "ok")
        },
        || t.context(),
    );
    let exiting = t.sd.show(units::SERVICE, &["MainPID", "ActiveState"]);
    let first = runs(&t.inspect())[0]["id"].as_i64().unwrap();
    t.trigger("systemd test: ring while the first run exits");
    let after = t.sd.show(units::SERVICE, &["MainPID", "ActiveState"]);
    assert_eq!(
        (exiting["ActiveState"].as_str(), &after["MainPID"]),
        ("activating", &exiting["MainPID"]),
        "the ring did not land while the first process was exiting\n{}",
        t.context()
    );

    wait_for(
        "a second run to serve the ring",
        Duration::from_secs(30),
        || {
            runs(&t.inspect())
                .iter()
                .any(|r| r["id"].as_i64() > Some(first) && r["status"] == "ok")
        },
        || t.context(),
    );
    t.wait_settled("the ring to be served", Duration::from_secs(30));
    let starts = t.sd.starts(units::SERVICE);
    assert!(
        starts >= 2,
        "{starts} service start(s): the ring was not left to a new process\n{}",
        t.context()
    );
    t.assert_no_unit_failed();
}
