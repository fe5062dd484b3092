//! Two installs on one vast.ai account (DESIGN.md "Operations", install identity): two state
//! dirs with the same `label_prefix` against one fake vast.ai, each launching in its own
//! passes. Neither lists, counts, adopts, stops nor destroys the other's instances (the fake's
//! request log and each `inspect --json` fleet say so), and each records the other's
//! instances for `doctor`.

use serde_json::{json, Value};

use crate::common::config::rules_config;
use crate::common::fake_vast::{FakeVast, Route};
use crate::common::fleet::Fleet;

/// The rules alone, one instance at most (a second launch would be refused `instance_cap`
/// if the other install's instance were counted), WORKERS DEAD from the demand file.
fn install(vast: &FakeVast) -> Fleet {
    let f = Fleet::with_config("").env("VAST_API_KEY", &vast.api_key());
    let own = "[policy]\ntarget_proofs_per_hour = 50\nproofs_per_hour_per_instance = 100\nmax_dph_total = 1.0\nmax_instances = 1";
    f.write_config(&rules_config(
        &vast.url(),
        &f.path().join("demand.json"),
        &[own],
    ));
    std::fs::write(
        f.path().join("demand.json"),
        json!({"pending": 9, "running": 0, "completed_1h": 0, "completed_15m": 0, "workers": []})
            .to_string(),
    )
    .unwrap();
    f.cmd(&["init"]).ok();
    f
}

fn labels(fleet: &Value) -> Vec<(i64, String)> {
    fleet
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["vast_id"].as_i64().unwrap_or(0),
                i["label"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn two_installs_on_one_account_never_touch_each_others_instances() {
    let vast = FakeVast::start_real_time();
    vast.add_offers(4, "RTX 4090", 0.40, 0.99);
    let a = install(&vast);
    let b = install(&vast);
    let (ia, ib) = (
        a.inspect()["install_id"].as_str().unwrap().to_string(),
        b.inspect()["install_id"].as_str().unwrap().to_string(),
    );
    assert_ne!(ia, ib);

    // Each launches in its own pass; B's pass sees A's instance and neither adopts nor counts
    // it (with max_instances = 1 a counted one would refuse B's launch).
    a.cmd(&["run"]).ok();
    // B's poll already sees A's instance for what it is (doctor reads this).
    b.cmd(&["poll"]).ok();
    assert_eq!(
        b.count("SELECT json_array_length(foreign_installs) FROM agent_state"),
        1
    );
    // B's first pass says loud that its new database sits beside another install's fleet
    // (a second install, or this one's under a lost state dir), and goes on.
    let first = b.cmd(&["run"]).ok();
    assert!(
        first.stderr.contains(&format!(
            "this database is new (run 1), and vast.ai lists 1 instance(s) under vast.label_prefix \"fleetagent\" of install {ia}"
        )),
        "{}",
        first.stderr
    );
    a.cmd(&["run"]).ok();
    assert_eq!(vast.count(Route::Create), 2, "one launch each");
    let creates = vast.requests_to(Route::Create);
    let label_of = |i: usize| creates[i].json()["label"].as_str().unwrap().to_string();
    assert!(
        label_of(0).starts_with(&format!("fleetagent-{ia}-r1-")),
        "{}",
        label_of(0)
    );
    assert!(
        label_of(1).starts_with(&format!("fleetagent-{ib}-r1-")),
        "{}",
        label_of(1)
    );

    let (va, vb) = (a.inspect(), b.inspect());
    let (fa, fb) = (labels(&va["fleet"]), labels(&vb["fleet"]));
    assert_eq!(fa.len(), 1, "{fa:?}");
    assert_eq!(fb.len(), 1, "{fb:?}");
    assert!(fa[0].1.contains(&ia) && fb[0].1.contains(&ib));
    let (id_a, id_b) = (fa[0].0, fb[0].0);
    assert_eq!(
        va["other_installs"],
        json!([{"install_id": ib, "label": fb[0].1, "vast_id": id_b}])
    );
    assert_eq!(
        vb["other_installs"],
        json!([{"install_id": ia, "label": fa[0].1, "vast_id": id_a}])
    );
    assert!(va["other_installs_at"].is_string());
    // The money counts only our own: one instance at $0.40/h each.
    assert_eq!(
        (va["fleet_dph"].as_f64(), vb["fleet_dph"].as_f64()),
        (Some(0.4), Some(0.4))
    );

    // `doctor` names the other install in both (its foreign_installs check).
    for (f, other, label) in [(&a, &ib, &fb[0].1), (&b, &ia, &fa[0].1)] {
        let doc = f.cmd(&["doctor", "--json"]).code(1).json();
        let check = doc["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "foreign_installs")
            .cloned()
            .unwrap();
        assert_eq!(check["ok"], false, "{check}");
        let detail = check["detail"].as_str().unwrap();
        assert!(
            detail.contains(other.as_str()) && detail.contains(label.as_str()),
            "{detail}"
        );
    }

    // `instances list` shows the other's apart.
    let list = a.cmd(&["instances", "list", "--json"]).ok().json();
    let ids: Vec<i64> = list["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, vec![id_a]);
    assert_eq!(list["other_installs"][0]["id"], id_b);
    assert_eq!(list["other_installs"][0]["install_id"], ib.as_str());
    assert_eq!(list["not_ours"], 0);

    // The operator cannot stop the other's, even forced: one line naming the other install.
    let r = a
        .cmd(&["instances", "stop", &id_b.to_string(), "--force"])
        .code(1);
    let line = r.stderr.trim();
    assert_eq!(line.lines().count(), 1, "{line}");
    assert!(
        line.starts_with("fleetagent: refused (protected): instance ")
            && line.contains(&format!("install {ib}")),
        "{line}"
    );

    // B's panic button destroys B's only.
    let out = b
        .cmd(&["instances", "stop", "--all", "--reason", "B is done"])
        .ok();
    assert!(
        out.stdout
            .contains("destroyed 1 of 1 instance(s) of ours (1 of other installs left alone)"),
        "{}",
        out.stdout
    );
    a.cmd(&["run"]).ok();
    let destroyed: Vec<String> = vast
        .requests_to(Route::Destroy)
        .iter()
        .map(|r| r.path.clone())
        .collect();
    assert_eq!(destroyed, vec![format!("/api/v0/instances/{id_b}/")]);
    assert_eq!(vast.instance_ids(), vec![id_a as u64]);
    assert_eq!(vast.count(Route::Create), 2, "A relaunched nothing for B's");
    let va = a.inspect();
    assert_eq!(labels(&va["fleet"]), fa);
    assert_eq!(
        va["other_installs"],
        json!([]),
        "B's is gone from the listing"
    );
    // Nothing of the other install ever entered either table or ledger (but A's refusal).
    for (f, other) in [(&a, id_b), (&b, id_a)] {
        let n = f.count(&format!(
            "SELECT COUNT(*) FROM actions WHERE instance_id = {other} AND outcome <> 'refused'"
        )) + f.count(&format!(
            "SELECT COUNT(*) FROM instances WHERE vast_id = {other}"
        ));
        assert_eq!(n, 0);
    }
}

/// A new install whose first pass could not list vast.ai (no key yet, vast.ai down) beside
/// another install's fleet under its prefix (the lost walkthrough: a state dir lost, 6
/// instances of the old install): the loud line was said on run 1 only, so never, and runs 2
/// and 3 rented beside the old fleet without a word. It is said on each pass while this
/// database has no instance of its own, and doctor's fix names the recovery.
#[test]
fn a_new_install_beside_another_fleet_is_told_on_its_first_pass_that_lists() {
    let vast = FakeVast::start_real_time();
    vast.add_offers(4, "RTX 4090", 0.40, 0.99);
    let a = install(&vast);
    a.cmd(&["run"]).ok();
    let b = install(&vast);
    // B's run 1 without a key: nothing listed, nothing said.
    let first = b
        .command(&["run"])
        .env_remove("VAST_API_KEY")
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&first.stderr).contains("this database is new"));
    let second = b.cmd(&["run"]).ok();
    assert!(
        second
            .stderr
            .contains("this database is new (run 2, no instance of its own yet), and vast.ai lists 1 instance(s)"),
        "{}",
        second.stderr
    );
    let doctor = b.cmd(&["doctor"]).code(1);
    assert!(
        doctor
            .stdout
            .contains("take them back with `fleetagent init --install-id ID` on an empty one"),
        "{}",
        doctor.stdout
    );
}

/// Two installs, each with its own label prefix as doctor advises, on one account and one
/// Curio cluster (the lost walkthrough): each sized to the whole demand, 5 rentals each for
/// one WORKERS DEAD, and nothing said it. The other's instances are not ours, but Curio's
/// workers carry their labels: each pass says so, and the model is told.
#[test]
fn another_fleet_proving_for_this_cluster_is_named() {
    let vast = FakeVast::start_real_time();
    vast.add_offers(2, "RTX 4090", 0.40, 0.99);
    let f = install(&vast);
    let theirs = "stage-qwerty-r4-0a1b2c3d";
    vast.add_instance(theirs);
    std::fs::write(
        f.path().join("demand.json"),
        json!({"pending": 2, "running": 1, "completed_1h": 40, "completed_15m": 10,
               "workers": [{"machine_name": theirs, "host_and_port": "10.1.1.1:12300",
                            "running": 1, "cordoned": false}]})
        .to_string(),
    )
    .unwrap();
    let out = f.cmd(&["run"]).ok();
    assert!(
        out.stderr.contains(&format!(
            "another fleet on this vast.ai account proves for this Curio cluster: 1 instance(s) not ours whose labels its workers carry (\"{theirs}\" (instance "
        )),
        "{}",
        out.stderr
    );
    let observation = f.last_observation();
    assert!(
        observation.contains("Another fleet: another fleet on this vast.ai account"),
        "{observation}"
    );
    // Not ours: never counted nor stopped.
    assert_eq!(vast.count(Route::Destroy), 0);
}
