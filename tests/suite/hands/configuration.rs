//! Configuration states: dry run, unset keys and a missing vast.ai key send nothing; the
//! worker env resolves credentials without recording them.

use fleetagent::env::Env;
use fleetagent::fleet::{self};
use serde_json::json;

use super::{code, dead_demand, Rig, StaticDemand, BASE};
use crate::common::fake_vast::Route;

#[test]
fn dry_run_unset_keys_and_missing_key_send_nothing() {
    let mut rig = Rig::new(
        &format!("{BASE}dry_run = true\n"),
        StaticDemand::new(dead_demand(5)),
    );
    rig.fake.add_offers(3, "RTX 4090", 0.40, 0.99);
    let a = rig.fake.add_instance("fleetagent-a");
    let mut snap = rig.pass();
    rig.fake.clear_requests();
    let r = rig.call(&mut snap, "launch_instance", json!({"reason": "x"}));
    assert_eq!(code(&r), Some("dry_run"), "{:?}", r.content);
    let r = rig.call(
        &mut snap,
        "stop_instance",
        json!({"instance_id": a, "reason": "x"}),
    );
    assert_eq!(code(&r), Some("dry_run"), "{:?}", r.content);
    assert!(rig.fake.requests().is_empty());
    assert!(snap.observation_line(&rig.config).contains("DRY RUN"));

    let mut rig = Rig::new("", StaticDemand::new(dead_demand(5)));
    let mut snap = rig.pass();
    rig.fake.clear_requests();
    let r = rig.call(&mut snap, "launch_instance", json!({"reason": "x"}));
    assert_eq!(code(&r), Some("not_configured"));
    assert_eq!(r.content["key"], "vast.image");
    assert!(rig.fake.requests().is_empty());

    let mut rig = Rig::new(BASE, StaticDemand::new(dead_demand(5)));
    rig.services.vast = None;
    let mut snap = rig.pass();
    assert_eq!(snap.listing_error.as_deref(), Some(fleet::NO_VAST_KEY));
    let r = rig.call(&mut snap, "launch_instance", json!({"reason": "x"}));
    assert_eq!(code(&r), Some("not_configured"));
    assert!(r.content["message"]
        .as_str()
        .unwrap()
        .contains("VAST_API_KEY"));
}

#[test]
fn worker_env_resolves_credentials_without_recording_them() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("curio_db_password"), "s3cret-pw\n").unwrap();
    let text = format!(
        "{BASE}\n[vast.env]\nCURIO_LAYERS = \"psprove\"\nCURIO_DB_PASSWORD = {{ credential = \"curio_db_password\" }}\n"
    );
    let mut rig = Rig::new(&text, StaticDemand::new(dead_demand(5)));
    rig.env = Env::from_pairs([(
        "CREDENTIALS_DIRECTORY".to_string(),
        dir.path().display().to_string(),
    )]);
    rig.fake.add_offers(2, "RTX 4090", 0.40, 0.99);
    let mut snap = rig.pass();
    let r = rig.call(&mut snap, "launch_instance", json!({"reason": "x"}));
    let id = r.content["instance_id"].as_u64().expect("launched");
    let env = rig.fake.instance_env(id).unwrap();
    assert_eq!(env["CURIO_DB_PASSWORD"], "s3cret-pw");
    assert_eq!(env["CURIO_LAYERS"], "psprove");
    assert!(env["FLEETAGENT_LABEL"].starts_with(&rig.label_start()));
    let ledger: String = rig
        .store
        .conn
        .query_row(
            "SELECT group_concat(COALESCE(detail,'') || COALESCE(reason,'')) FROM actions",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(!ledger.contains("s3cret"));
    assert!(!r.content.to_string().contains("s3cret"));

    // A missing credential refuses the launch, naming the env key, before any create.
    std::fs::remove_file(dir.path().join("curio_db_password")).unwrap();
    let r = rig.call(&mut snap, "launch_instance", json!({"reason": "x"}));
    assert_eq!(code(&r), Some("not_configured"));
    assert_eq!(r.content["key"], "vast.env.CURIO_DB_PASSWORD");
    assert_eq!(rig.fake.count(Route::Create), 1);
}

#[test]
fn every_create_carries_cancel_unavail_and_the_label_as_curio_node_name() {
    // Unset in [vast.env]: the launch sets CURIO_NODE_NAME to the label, beside FLEETAGENT_LABEL.
    let mut rig = Rig::new(BASE, StaticDemand::new(dead_demand(5)));
    rig.fake.add_offers(2, "RTX 4090", 0.40, 0.99);
    let mut snap = rig.pass();
    let r = rig.call(&mut snap, "launch_instance", json!({"reason": "x"}));
    let id = r.content["instance_id"].as_u64().expect("launched");
    let env = rig.fake.instance_env(id).unwrap();
    assert!(env["FLEETAGENT_LABEL"].starts_with(&rig.label_start()));
    assert_eq!(env["CURIO_NODE_NAME"], env["FLEETAGENT_LABEL"]);
    let sent = &rig.fake.requests_to(Route::Create)[0];
    let body = sent.json();
    assert_eq!(body["cancel_unavail"], true);
    assert_eq!(body["env"]["CURIO_NODE_NAME"], body["label"]);

    // Set in [vast.env]: the operator's value is kept.
    let text = format!("{BASE}\n[vast.env]\nCURIO_NODE_NAME = \"psprove-pool\"\n");
    let mut rig = Rig::new(&text, StaticDemand::new(dead_demand(5)));
    rig.fake.add_offers(2, "RTX 4090", 0.40, 0.99);
    let mut snap = rig.pass();
    let r = rig.call(&mut snap, "launch_instance", json!({"reason": "x"}));
    let id = r.content["instance_id"].as_u64().expect("launched");
    let env = rig.fake.instance_env(id).unwrap();
    assert_eq!(env["CURIO_NODE_NAME"], "psprove-pool");
    assert!(env["FLEETAGENT_LABEL"].starts_with(&rig.label_start()));
    let body = rig.fake.requests_to(Route::Create)[0].json();
    assert_eq!(body["cancel_unavail"], true);
}
