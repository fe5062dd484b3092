//! A database restored from a backup is older than the fleet: the runs after the backup, and
//! the instances they launched, are not in it. Run ids must not be given again to labels
//! vast.ai already carries (a second instance would take the label and Curio machine name of
//! one already rented), and the first pass says what it found.

use serde_json::json;

use crate::common::config::rules_config;
use crate::common::fake_vast::{FakeReply, FakeVast, Route};
use crate::common::fleet::Fleet;

/// The rules alone on a dead fleet (WORKERS DEAD), one instance of 100 p/h per 100 p/h of
/// target: raising the target by 100 makes the next pass launch one more.
fn config(vast: &FakeVast, f: &Fleet, target: u32) {
    let own = format!("[policy]\ntarget_proofs_per_hour = {target}\nproofs_per_hour_per_instance = 100\nmax_dph_total = 4.0\nmax_instances = 6");
    f.write_config(&rules_config(
        &vast.url(),
        &f.path().join("demand.json"),
        &[&own],
    ));
}

/// A fake vast.ai with six offers, and an install on it whose demand file has `pending`
/// proofs and no worker, the rules at `target` (not yet `init`ed).
fn rig(pending: u32, target: u32) -> (FakeVast, Fleet) {
    let vast = FakeVast::start_real_time();
    vast.add_offers(6, "RTX 4090", 0.40, 0.99);
    let f = Fleet::with_config("").env("VAST_API_KEY", &vast.api_key());
    write_demand(&f, pending);
    config(&vast, &f, target);
    (vast, f)
}

fn write_demand(f: &Fleet, pending: u32) {
    std::fs::write(
        f.path().join("demand.json"),
        json!({"pending": pending, "running": 0, "completed_1h": 0, "completed_15m": 0, "workers": []})
            .to_string(),
    )
    .unwrap();
}

/// A fleet of three runs, each launching one; a backup taken after the first. Returns the
/// backup's path.
fn three_runs_and_a_backup(vast: &FakeVast, f: &Fleet) -> std::path::PathBuf {
    f.cmd(&["init"]).ok();
    f.cmd(&["run"]).ok();
    let backup = f.path().join("backup.db");
    f.cmd(&["backup", backup.to_str().unwrap()]).ok();
    // Two more runs after the backup, each launching one: runs 2 and 3.
    for target in [200, 300] {
        config(vast, f, target);
        // The timer spaces real runs 5 minutes apart: age the ledger so vast.ai's create
        // spacing (honoured across processes, from the ledger) does not wait 4.5 s.
        f.db()
            .execute(
                "UPDATE actions SET created_at = created_at - 300000,
                                    finished_at = finished_at - 300000",
                [],
            )
            .unwrap();
        f.cmd(&["run"]).ok();
    }
    assert_eq!(vast.count(Route::Create), 3);
    assert_eq!(f.count("SELECT max(id) FROM runs"), 3);
    backup
}

/// The backup put in place of the database as docs/operations.md says (the old files moved
/// away; `run.lock` stays unless `keep_lock` is false: a new host given the backup alone).
fn restore(f: &Fleet, backup: &std::path::Path, keep_lock: bool) {
    let dir = f.doorbell().parent().unwrap().to_path_buf();
    for side in ["fleetagent.db", "fleetagent.db-wal", "fleetagent.db-shm"] {
        let _ = std::fs::remove_file(dir.join(side));
    }
    if !keep_lock {
        std::fs::remove_file(dir.join("run.lock")).unwrap();
    }
    std::fs::copy(backup, dir.join("fleetagent.db")).unwrap();
    assert_eq!(f.count("SELECT max(id) FROM runs"), 1);
}

fn labels(vast: &FakeVast) -> Vec<String> {
    vast.requests_to(Route::Create)
        .iter()
        .map(|r| r.json()["label"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_restored_database_gives_no_run_id_again_though_the_fleet_is_gone() {
    let (vast, f) = rig(9, 100);
    let backup = three_runs_and_a_backup(&vast, &f);
    // vast.ai reclaimed the fleet: no listed label tells of runs 2 and 3.
    for id in vast.instance_ids() {
        vast.remove_instance(id);
    }
    restore(&f, &backup, true);
    // inspect names the id the next run gets, past the lock's note (it said 2).
    assert_eq!(f.inspect()["next_run_id"], 4);
    let reset = f.cmd(&["reset-session"]).ok();
    assert!(
        reset.stdout.contains("run ids go on: the next run is 4"),
        "{}",
        reset.stdout
    );
    // What the operator decided after the backup is not in it, and the restore step says so
    // (a walkthrough: a pause in force lifted by the restore, unsaid).
    assert!(
        reset.stdout.contains("this database is older than the runs this state dir gave (restored from a backup): a pause, and the operator's stops and holds made after the backup, are not in it"),
        "{}",
        reset.stdout
    );
    config(&vast, &f, 100);
    let out = f.cmd(&["run"]).ok();
    assert!(
        out.stderr.contains("run.lock says run 3 was given, and this database's next run would be 2: the database is older than this state dir's runs (restored from a backup, or it lost its last writes); run ids go on from 4"),
        "{}",
        out.stderr
    );
    assert_eq!(f.count("SELECT max(id) FROM runs"), 4);
    let labels = labels(&vast);
    assert_eq!(labels.len(), 4, "{labels:?}");
    assert!(labels[3].contains("-r4-"), "{labels:?}");
}

#[test]
fn a_restored_database_without_its_lock_goes_past_the_listed_labels() {
    let (vast, f) = rig(9, 100);
    let backup = three_runs_and_a_backup(&vast, &f);
    restore(&f, &backup, false);

    // The first pass after it is run 2 again, and it launches one more: the listing carries
    // run 3's label, so the ids go on past it, and no label is given twice. Run 3 rented
    // after the backup's last listing, as a copy running on would have: both are named.
    config(&vast, &f, 400);
    let out = f.cmd(&["run"]).ok();
    assert!(
        out.stderr
            .contains("and this pass is run 2: another copy of this state dir is running further on (copied to another host and not stopped there), or this database was restored without its run.lock; run ids go on from 4"),
        "{}",
        out.stderr
    );
    assert_eq!(vast.count(Route::Create), 4);
    let labels = labels(&vast);
    let mut unique = labels.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 4, "a label was given twice: {labels:?}");
    assert!(labels[3].contains("-r2-"), "{labels:?}");
    config(&vast, &f, 500);
    f.cmd(&["run"]).ok();
    assert_eq!(f.count("SELECT max(id) FROM runs"), 4);
    assert!(
        vast.requests_to(Route::Create)[4].json()["label"]
            .as_str()
            .unwrap()
            .contains("-r4-"),
        "run 4 launches under its own id"
    );
}

#[test]
fn a_database_that_lost_its_last_writes_gives_no_run_id_again() {
    let (vast, f) = rig(9, 100);
    f.cmd(&["init"]).ok();
    f.cmd(&["run"]).ok();
    // Run 2 is killed right after its create, and its writes, still in the WAL, are lost
    // with it (a WAL deleted by hand, a disk that lost its last writes).
    config(&vast, &f, 200);
    let killed = f
        .command(&["run"])
        .env("FLEETAGENT_TEST_CRASH_AT", "launch-after-create")
        .output()
        .unwrap();
    assert!(!killed.status.success());
    let dir = f.doorbell().parent().unwrap().to_path_buf();
    std::fs::remove_file(dir.join("fleetagent.db-wal")).unwrap();
    let _ = std::fs::remove_file(dir.join("fleetagent.db-shm"));
    assert_eq!(f.count("SELECT max(id) FROM runs"), 1);
    let out = f.cmd(&["run"]).ok();
    assert!(
        out.stderr.contains("run.lock says run 2 was given"),
        "{}",
        out.stderr
    );
    assert_eq!(f.count("SELECT max(id) FROM runs"), 3);
    // What run 2 rented is adopted, not rented again.
    assert_eq!(vast.count(Route::Create), 2, "{:?}", labels(&vast));
}

/// An install A that ran one pass (WORKERS DEAD: one launch) and B, a copy of its state
/// dir as `cp -a` would make it (the database and run.lock), both on one fake vast.ai.
fn copied() -> (FakeVast, Fleet, Fleet) {
    let vast = FakeVast::start_real_time();
    vast.add_offers(6, "RTX 4090", 0.40, 0.99);
    let demand =
        json!({"pending": 9, "running": 0, "completed_1h": 0, "completed_15m": 0, "workers": []});
    let a = Fleet::with_config("").env("VAST_API_KEY", &vast.api_key());
    let b = Fleet::with_config("").env("VAST_API_KEY", &vast.api_key());
    for f in [&a, &b] {
        std::fs::write(f.path().join("demand.json"), demand.to_string()).unwrap();
        config(&vast, f, 100);
    }
    a.cmd(&["init"]).ok();
    a.cmd(&["run"]).ok();
    std::fs::create_dir_all(&b.state).unwrap();
    for name in ["fleetagent.db", "run.lock"] {
        std::fs::copy(a.state.join(name), b.state.join(name)).unwrap();
    }
    (vast, a, b)
}

/// A state dir copied to another host that keeps running (a move whose old host was not
/// stopped): both copies give the same run ids under one install id. The copy that adopts an
/// instance of a run it gave itself, under a label it never launched, says so at error, and
/// `doctor` names it.
#[test]
fn a_copy_of_the_state_dir_running_beside_it_is_named() {
    let (vast, a, b) = copied();
    let clean = b.cmd(&["doctor"]);
    assert!(
        !clean.stdout.contains("another copy of this state dir"),
        "{}",
        clean.stdout
    );
    // A's run 2 launches one more; B's run 2 (its own count) finds it.
    for f in [&a, &b] {
        config(&vast, f, 200);
    }
    a.cmd(&["run"]).ok();
    let out = b.cmd(&["run"]).ok();
    let said = "were launched by runs this database gave but not by this database";
    assert!(
        out.stderr
            .lines()
            .any(|l| l.contains(said) && l.contains("run 2)")),
        "{}",
        out.stderr
    );
    let doctor = b.cmd(&["doctor"]).code(1);
    assert!(
        doctor.stdout.contains(said)
            && doctor
                .stdout
                .contains("another copy of this state dir is running"),
        "{}",
        doctor.stdout
    );
    // A, the original, finds nothing of the kind yet: B rented nothing.
    assert!(!a.cmd(&["doctor"]).stdout.contains(said));
    // A destroys what it rented (copies stop each other's surplus): B's doctor still names
    // the copy for the day (a walkthrough saw it go green within minutes, both running).
    let id = vast.instance_ids().into_iter().max().unwrap();
    a.cmd(&["instances", "stop", &id.to_string(), "--force"])
        .ok();
    b.cmd(&["run"]).ok();
    let doctor = b.cmd(&["doctor"]).code(1);
    assert!(doctor.stdout.contains(said), "{}", doctor.stdout);
}

/// A copy that has run further than this one (the lost walkthrough: the old host left
/// running after a move, three passes ahead, rented under its run 4 while this copy was at its
/// run 3): the label's run is past this pass's, which read as a restore ("the database is
/// older than the fleet"), doctor green. Rented after this database's last listing, it is
/// another copy running on: said at error.
#[test]
fn a_copy_running_further_on_is_not_taken_for_a_restore() {
    let (vast, a, b) = copied();
    b.cmd(&["run"]).ok();
    a.cmd(&["run"]).ok();
    a.cmd(&["run"]).ok();
    config(&vast, &a, 200);
    a.cmd(&["run"]).ok();
    assert_eq!(vast.count(Route::Create), 2, "{:?}", labels(&vast));
    let out = b.cmd(&["run"]).ok();
    assert!(
        out.stderr.contains("of run 4, rented ")
            && out.stderr.contains(
                "and this pass is run 3: another copy of this state dir is running further on"
            ),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("the database is older than the fleet"));
}

#[test]
fn a_run_lock_note_no_run_could_have_given_is_ignored() {
    let f = Fleet::new();
    f.cmd(&["run"]).ok();
    let lock = f.doorbell().parent().unwrap().join("run.lock");
    std::fs::write(&lock, "last-run 9223372036854775807\n").unwrap();
    let out = f.cmd(&["run"]).ok();
    assert!(
        out.stderr
            .contains("not a run id this state dir gave; ignored"),
        "{}",
        out.stderr
    );
    assert_eq!(f.count("SELECT max(id) FROM runs"), 2);
    assert_eq!(
        std::fs::read_to_string(&lock).unwrap(),
        "last-run 9223372036854775807\n",
        "the note is left for the operator, not rewritten lower"
    );
    let reset = f.cmd(&["reset-session"]).ok();
    assert!(
        reset.stdout.contains("run ids go on: the next run is 3"),
        "{}",
        reset.stdout
    );
}

/// A label in our shape naming a run no pass could have given (by hand, another tool) does not
/// move the run ids: past it, they would be spent (a panic, then every command refused).
#[test]
fn a_listed_label_of_an_impossible_run_leaves_the_ids_alone() {
    let (vast, f) = rig(0, 100);
    f.cmd(&["init"]).ok();
    let id = f.inspect()["install_id"].as_str().unwrap().to_string();
    vast.add_instance(&format!("fleetagent-{id}-r9223372036854775807-ffffffff"));
    let out = f.cmd(&["run"]).ok();
    assert!(
        out.stderr
            .contains("far past this pass (run 1): no run of this install gave it"),
        "{}",
        out.stderr
    );
    f.cmd(&["run"]).ok();
    assert_eq!(f.count("SELECT max(id) FROM runs"), 2);
}

/// Not a copy: a launch whose create vast.ai listed only after the intent's grace (settled
/// failed, "never appeared"), then adopted. Its label is in the ledger, settled without an
/// instance: ours, late.
#[test]
fn an_instance_listed_after_its_intent_was_settled_is_not_a_copys() {
    let (vast, f) = rig(9, 100);
    f.cmd(&["init"]).ok();
    vast.fail_next(Route::Create, 1, FakeReply::text(504, "Gateway Time-out"));
    f.cmd(&["run"]);
    let label = labels(&vast)[0].clone();
    assert!(vast.instance_ids().is_empty());
    // Past the grace: the intent is settled failed ("never appeared"); the pass rents again.
    f.db()
        .execute(
            "UPDATE actions SET created_at = created_at - 660000, finished_at = finished_at - 660000",
            [],
        )
        .unwrap();
    f.cmd(&["run"]).ok();
    assert_eq!(
        f.count("SELECT COUNT(*) FROM actions WHERE label = (SELECT label FROM actions ORDER BY id LIMIT 1) AND outcome = 'failed'"),
        1
    );
    // Then vast.ai lists it after all.
    vast.add_instance(&label);
    let out = f.cmd(&["run"]).ok();
    let said = "were launched by runs this database gave but not by this database";
    assert_eq!(
        f.count(&format!(
            "SELECT COUNT(*) FROM instances WHERE adopted = 1 AND label = '{label}'"
        )),
        1,
        "not adopted"
    );
    assert!(!out.stderr.contains(said), "{}", out.stderr);
    assert!(!f.cmd(&["doctor"]).stdout.contains(said));
}

/// The state dir lost, and the recovery docs/operations.md gives: a fresh `init --install-id`
/// under the old id. The first pass adopts the fleet its lost database launched (runs 1-3);
/// that is not another copy running (a walkthrough saw `doctor` say so for a day): an
/// instance rented before this database was made is none of its runs'.
#[test]
fn init_under_the_old_install_id_adopts_the_fleet_without_calling_it_a_copy() {
    let (vast, f) = rig(9, 100);
    three_runs_and_a_backup(&vast, &f);
    let id = f.inspect()["install_id"].as_str().unwrap().to_string();
    for name in [
        "fleetagent.db",
        "fleetagent.db-wal",
        "fleetagent.db-shm",
        "run.lock",
    ] {
        let _ = std::fs::remove_file(f.state.join(name));
    }
    f.cmd(&["init", "--install-id", &id]).ok();
    config(&vast, &f, 300);
    let out = f.cmd(&["run"]).ok();
    let said = "were launched by runs this database gave but not by this database";
    assert!(!out.stderr.contains(said), "{}", out.stderr);
    assert_eq!(
        vast.count(Route::Create),
        3,
        "the fleet was adopted, not rented again"
    );
    let fleet = f.inspect()["fleet"].as_array().unwrap().len();
    assert_eq!(fleet, 3);
    f.cmd(&["run"]).ok();
    assert!(!f.cmd(&["doctor"]).stdout.contains(said));
}

/// Two creates answered with one instance id (a fuzz walkthrough: the pass failed on the
/// table's unique id after both were sent): the first is that instance, the second is left
/// open for the next listing to settle by its label, and the pass ends ok.
#[test]
fn two_creates_answered_with_one_instance_leave_the_second_open() {
    let (vast, f) = rig(9, 200);
    f.cmd(&["init"]).ok();
    let same = json!({"success": true, "new_contract": 9_100_001});
    vast.fail_next(Route::Create, 2, FakeReply::json(200, same));
    let out = f.cmd(&["run"]).ok();
    assert_eq!(vast.count(Route::Create), 2, "{}", out.stderr);
    assert!(
        out.stderr.contains(
            "vast.ai answered the create with instance 9100001, which fleetagent's table holds as"
        ),
        "{}",
        out.stderr
    );
    assert_eq!(
        f.count("SELECT COUNT(*) FROM actions WHERE kind = 'launch' AND outcome = 'intent'"),
        1
    );
    assert_eq!(
        f.count("SELECT COUNT(*) FROM instances WHERE vast_id = 9100001"),
        1
    );
}

/// A create answered with the id of an instance the pass listed as not ours (a walkthrough:
/// an unlabelled one was adopted, counted against our caps, and `instances stop --all`
/// destroyed it): left open, never adopted; the next listing settles the launch by its
/// label, and the panic button never touches the other instance.
#[test]
fn a_create_answered_with_an_instance_not_ours_leaves_it_alone() {
    let (vast, f) = rig(9, 200);
    f.cmd(&["init"]).ok();
    let theirs = vast.add_instance("jupyter-notebook");
    vast.set_instance_field(theirs, "label", serde_json::Value::Null);
    let answer = json!({"success": true, "new_contract": theirs});
    vast.fail_next(Route::Create, 1, FakeReply::json(200, answer));
    let out = f.cmd(&["run"]).ok();
    assert!(
        out.stderr.contains(&format!(
            "vast.ai answered the create with instance {theirs}, which this pass's listing shows as not ours (no label of ours); left open"
        )),
        "{}",
        out.stderr
    );
    assert_eq!(
        f.count(&format!(
            "SELECT COUNT(*) FROM instances WHERE vast_id = {theirs}"
        )),
        0
    );
    f.cmd(&["instances", "stop", "--all", "--reason", "panic button"]);
    assert!(
        vast.instance(theirs).is_some(),
        "the panic button destroyed an instance that was never ours"
    );
}
