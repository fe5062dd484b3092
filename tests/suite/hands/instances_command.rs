//! `fleetagent instances` with the real binary: list, stop, forced stop, and a destroyed
//! worker that Curio still lists.

use crate::common::fake_vast::{FakeVast, FAKE_API_KEY};
use crate::common::fleet::Fleet;

#[test]
fn instances_commands_with_the_real_binary() {
    let fake = FakeVast::start_real_time();
    let a = fake.add_instance("fleetagent-a");
    let other = fake.add_instance("not-ours");
    let f = Fleet::new().env("VAST_API_KEY", FAKE_API_KEY);
    f.write_config(&format!(
        "{}\n[vast]\nbase_url = \"{}\"\n[demand]\nsource = \"command\"\ncommand = \"echo '{{\\\"pending\\\":0,\\\"running\\\":0,\\\"completed_1h\\\":0,\\\"completed_15m\\\":0}}'\"\n",
        crate::common::fleet::FAST_CONFIG,
        fake.url()
    ));
    let out = f.cmd(&["instances", "list", "--json"]).ok().json();
    let rows = out["instances"].as_array().unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["id"], a);
    assert_eq!(rows[0]["state"], "untracked");
    assert_eq!(out["not_ours"], 1);
    let offline = f.cmd(&["instances", "list", "--offline"]).ok();
    assert!(
        offline.stdout.contains("no instances"),
        "{}",
        offline.stdout
    );

    // Not ours: refused in one line, exit 1; forced: done.
    let r = f.cmd(&["instances", "stop", &other.to_string()]).code(1);
    assert!(
        r.stderr
            .trim()
            .starts_with("fleetagent: refused (protected)"),
        "{}",
        r.stderr
    );
    assert_eq!(r.stderr.trim().lines().count(), 1);
    let r = f
        .cmd(&[
            "instances",
            "stop",
            &other.to_string(),
            "--force",
            "--reason",
            "mine anyway",
        ])
        .ok();
    assert!(r.stdout.contains("destroyed"), "{}", r.stdout);
    // Not ours: no hold is recorded, and none is said (a walkthrough read "launch nothing
    // for 30 min", then saw the next pass launch).
    assert!(!r.stdout.contains("operator hold"), "{}", r.stdout);
    assert_eq!(f.inspect()["operator_hold"], serde_json::Value::Null);
    // An id on neither the table nor the listing: refused even when forced (a typo must
    // not destroy an instance nobody can see), and nothing is sent to vast.ai.
    let before = fake.instance_ids();
    let r = f.cmd(&["instances", "stop", "424242", "--force"]).code(1);
    assert!(r.stderr.contains("invalid_args"), "{}", r.stderr);
    assert_eq!(fake.instance_ids(), before);
    // Ours, idle: the protections judge on the last pass's demand reading, and there is
    // none yet (no probe is made for an operator's stop).
    let r = f.cmd(&["instances", "stop", &a.to_string()]).code(1);
    assert!(
        r.stderr
            .contains("demand is unknown (no demand reading yet")
            && r.stderr.contains("--force"),
        "{}",
        r.stderr
    );
    // After a pass read Curio (no work queued): stopped; the agent hears of it.
    f.cmd(&["run"]).ok();
    let r = f.cmd(&["instances", "stop", &a.to_string()]).ok();
    assert!(
        r.stdout
            .contains("operator hold: the rules and the floor launch nothing for "),
        "{}",
        r.stdout
    );
    assert!(fake.instance_ids().is_empty());
    assert!(f.doorbell().exists());
    assert_eq!(
        f.count("SELECT COUNT(*) FROM actions WHERE actor='operator' AND outcome='ok'"),
        2
    );
}

#[test]
fn a_destroyed_worker_that_curio_still_lists_does_not_unlock_the_last_live_one() {
    let fake = FakeVast::start_real_time();
    let a = fake.add_instance("fleetagent-w1");
    let b = fake.add_instance("fleetagent-w2");
    let f = Fleet::new().env("VAST_API_KEY", FAKE_API_KEY);
    // Curio keeps both machines live for worker_alive_secs after a destroy: the demand
    // document below does not change when one goes.
    let demand = serde_json::json!({"pending": 5, "running": 0, "completed_1h": 0, "completed_15m": 0,
        "workers": [
            {"machine_name": "fleetagent-w1", "host_and_port": "10.0.0.1:12300", "running": 0, "cordoned": false},
            {"machine_name": "fleetagent-w2", "host_and_port": "10.0.0.2:12300", "running": 0, "cordoned": false}]});
    std::fs::write(f.path().join("demand.json"), demand.to_string()).unwrap();
    f.write_config(&format!(
        "{}\n[vast]\nbase_url = \"{}\"\n[demand]\nsource = \"command\"\ncommand = \"cat {}\"\n",
        crate::common::fleet::FAST_CONFIG,
        fake.url(),
        f.path().join("demand.json").display()
    ));
    f.cmd(&["run"]).ok();
    f.cmd(&["instances", "stop", &a.to_string()]).ok();
    // w1's worker is a ghost now: w2 is the last live worker while 5 proofs wait.
    let r = f.cmd(&["instances", "stop", &b.to_string()]).code(1);
    assert!(r.stderr.contains("last live worker"), "{}", r.stderr);
    assert_eq!(fake.instance_ids(), vec![b]);
    // Stopping the destroyed one again: already gone, not "not one of ours".
    let r = f.cmd(&["instances", "stop", &a.to_string()]).ok();
    assert!(r.stdout.contains("already gone"), "{}", r.stdout);
    // The observation says so, and does not count the ghost.
    f.cmd(&["trigger", "-p", "1", "-r", "look"]).ok();
    f.cmd(&["run"]).ok();
    let history = f.cmd(&["history"]).ok().stdout;
    assert!(
        history.contains("1 live workers (1 idle) (1 more listed by Curio are instances we stopped: not counted)"),
        "{history}"
    );
}
