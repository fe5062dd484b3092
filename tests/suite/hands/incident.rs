//! The incident replay: 59 proofs queued, workers dead, three launches already in the window.
//! The emergency lets three more through, spaced as vast.ai requires; without it all four
//! are refused with a retry time.

use fleetagent::prompt::action_needed::action_needed_line;
use fleetagent::tools::ToolResult;
use serde_json::json;

use super::{busy_demand, code, harmony, pending_tasks, Rig, StaticDemand, BASE, MIN};
use crate::common::fake_vast::Route;
use crate::common::pg::{self};

#[test]
fn incident_replay_three_of_four_launches_reach_vast_spaced() {
    let mut db = pg::fresh_db();
    pending_tasks(&mut db, 59);
    let mut rig = Rig::new(BASE, harmony(&db));
    rig.fake.add_offers(10, "RTX 4090", 0.40, 0.99);
    rig.fake.vast_rate_limits();
    for (i, ago) in [10, 5, 1].iter().enumerate() {
        rig.earlier_launch(&format!("fleetagent-r0-early{i}"), ago * MIN);
    }
    let mut snap = rig.pass();
    assert!(snap.workers_dead(), "{:?}", snap.demand);
    let line = snap.observation_line(&rig.config);
    assert!(
        line.starts_with("Demand: WORKERS DEAD. Queue: PSProve 59p/0r."),
        "{line}"
    );
    assert!(
        line.ends_with("Launch window: 3/3 used, emergency bypass ON."),
        "{line}"
    );
    // The model is told the number the rules would launch: what the emergency lets through.
    let needed = action_needed_line(&snap, &rig.config);
    assert_eq!(
        needed.as_deref(),
        Some("Action needed: call launch_instance 3 times now (WORKERS DEAD: 59 proofs queued, no live worker takes them)."),
    );

    let results: Vec<ToolResult> = (0..4)
        .map(|_| {
            rig.call(
                &mut snap,
                "launch_instance",
                json!({"reason": "59 queued, workers dead"}),
            )
        })
        .collect();
    let codes: Vec<Option<&str>> = results.iter().map(code).collect();
    assert_eq!(
        codes,
        vec![None, None, None, Some("rate_limited")],
        "{results:?}"
    );
    let refusal = &results[3].content;
    assert_eq!(
        refusal["limit"],
        "6 launches per 15 min (emergency total while WORKERS DEAD)"
    );
    // The oldest of the six (10 minutes old) leaves the window first; the clock moved by
    // the create spacing meanwhile.
    let retry = refusal["retry_after_secs"].as_u64().unwrap();
    assert!((270..=300).contains(&retry), "{retry}");

    // Exactly three creates reached vast.ai, none refused by its 4.5 s limit.
    let creates = rig.fake.requests_to(Route::Create);
    assert_eq!(
        creates.iter().map(|r| r.status).collect::<Vec<_>>(),
        vec![200, 200, 200]
    );
    for pair in creates.windows(2) {
        assert!(
            pair[1].at_ms - pair[0].at_ms >= 4_500,
            "creates spaced as vast.ai requires"
        );
    }
    assert_eq!(rig.fake.instance_ids().len(), 6);
    // One search served all launches of the pass.
    assert_eq!(rig.fake.count(Route::Offers), 1);
    // Each launch passed its label to the worker.
    for r in &results[..3] {
        let id = r.content["instance_id"].as_u64().unwrap();
        let env = rig.fake.instance_env(id).unwrap();
        assert_eq!(
            env["FLEETAGENT_LABEL"],
            r.content["label"].as_str().unwrap()
        );
    }
    assert_eq!(
        rig.count(
            "SELECT COUNT(*) FROM actions WHERE kind='launch' AND outcome='ok' AND emergency=1"
        ),
        3
    );
    assert_eq!(
        rig.count("SELECT COUNT(*) FROM actions WHERE kind='launch' AND outcome='refused'"),
        1
    );
}

#[test]
fn incident_without_the_emergency_refuses_all_four_with_retry_after() {
    let mut rig = Rig::new(BASE, StaticDemand::new(busy_demand()));
    rig.fake.add_offers(10, "RTX 4090", 0.40, 0.99);
    for (i, ago) in [10, 5, 1].iter().enumerate() {
        rig.earlier_launch(&format!("fleetagent-r0-early{i}"), ago * MIN);
    }
    let mut snap = rig.pass();
    assert!(!snap.workers_dead());
    for _ in 0..4 {
        let r = rig.call(&mut snap, "launch_instance", json!({"reason": "more"}));
        assert_eq!(
            r.content,
            json!({"error": "rate_limited", "limit": "3 launches per 15 min", "retry_after_secs": 300})
        );
    }
    assert_eq!(rig.fake.count(Route::Create), 0);
    assert_eq!(
        rig.fake.count(Route::Offers),
        0,
        "refused before any search"
    );
}
