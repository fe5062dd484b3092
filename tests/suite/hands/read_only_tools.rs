//! The read-only tools: compact answers, about our instances only.

use serde_json::json;

use super::{busy_demand, code, Rig, StaticDemand, BASE};
use crate::common::fake_vast::Route;

#[test]
fn read_only_tools_are_compact_and_ours_only() {
    let mut rig = Rig::new(BASE, StaticDemand::new(busy_demand()));
    rig.fake.add_offers(30, "RTX 4090", 0.40, 0.99);
    rig.fake.add_offers(5, "RTX 3090", 0.10, 0.99);
    let a = rig.fake.add_instance("fleetagent-a");
    rig.fake.set_log_text(a, &"proof done\n".repeat(500));
    let other = rig.fake.add_instance("someone-else");
    let mut snap = rig.pass();
    let r = rig.call(&mut snap, "search_offers", json!({"limit": 20}));
    let offers = r.content["offers"].as_array().unwrap();
    assert_eq!(offers.len(), 20);
    assert!(
        offers.iter().all(|o| o["gpu"] == "RTX 4090"),
        "only the configured GPUs"
    );
    let r = rig.call(&mut snap, "list_instances", json!({}));
    assert_eq!(r.content["count"], 1);
    assert_eq!(r.content["not_ours_on_account"], 1);
    assert_eq!(r.content["instances"][0]["state"], "booted");
    let r = rig.call(
        &mut snap,
        "instance_logs",
        json!({"instance_id": a, "tail_lines": 200}),
    );
    assert_eq!(r.content["lines"], 200);
    let r = rig.call(&mut snap, "instance_logs", json!({"instance_id": other}));
    assert_eq!(code(&r), Some("invalid_args"));
    assert_eq!(rig.fake.count(Route::RequestLogs), 1);
}
