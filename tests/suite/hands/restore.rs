//! A database restored from a backup is older than the fleet: the runs after the backup, and
//! the instances they launched, are not in it. Run ids must not be given again to labels
//! vast.ai already carries (a second instance would take the label and Curio machine name of
//! one already rented), and the first pass says what it found.

use serde_json::json;

use crate::common::config::rules_config;
use crate::common::fake_vast::{FakeVast, Route};
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

#[test]
fn a_restored_database_gives_no_run_id_or_label_again() {
    let vast = FakeVast::start_real_time();
    vast.add_offers(6, "RTX 4090", 0.40, 0.99);
    let f = Fleet::with_config("").env("VAST_API_KEY", &vast.api_key());
    std::fs::write(
        f.path().join("demand.json"),
        json!({"pending": 9, "running": 0, "completed_1h": 0, "completed_15m": 0, "workers": []})
            .to_string(),
    )
    .unwrap();
    config(&vast, &f, 100);
    f.cmd(&["init"]).ok();
    f.cmd(&["run"]).ok();
    let backup = f.path().join("backup.db");
    f.cmd(&["backup", backup.to_str().unwrap()]).ok();
    // Two more runs after the backup, each launching one: runs 2 and 3.
    for target in [200, 300] {
        config(&vast, &f, target);
        f.cmd(&["run"]).ok();
    }
    assert_eq!(vast.count(Route::Create), 3);
    assert_eq!(f.count("SELECT max(id) FROM runs"), 3);

    // The operator restores the backup as docs/operations.md says (the old files moved away).
    let dir = f.doorbell().parent().unwrap().to_path_buf();
    for side in ["fleetagent.db", "fleetagent.db-wal", "fleetagent.db-shm"] {
        let _ = std::fs::remove_file(dir.join(side));
    }
    std::fs::copy(&backup, dir.join("fleetagent.db")).unwrap();
    assert_eq!(f.count("SELECT max(id) FROM runs"), 1);

    // The first pass after it is run 2 again, and it launches one more: the listing carries
    // run 3's label, so the ids go on past it, and no label is given twice.
    config(&vast, &f, 400);
    let out = f.cmd(&["run"]).ok();
    assert!(
        out.stderr
            .contains("of run 3, and this pass is run 2: the database is older than the fleet (restored from a backup?); run ids go on from 4"),
        "{}",
        out.stderr
    );
    assert_eq!(vast.count(Route::Create), 4);
    let labels: Vec<String> = vast
        .requests_to(Route::Create)
        .iter()
        .map(|r| r.json()["label"].as_str().unwrap().to_string())
        .collect();
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
