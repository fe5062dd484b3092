//! A crash or a lost answer between the create and its record: the instance is adopted by its
//! label, never rented twice; one made by a failed create is destroyed at once.

use std::collections::BTreeMap;
use std::time::Duration;

use fleetagent::fleet::{self};
use fleetagent::store::actions::{self, NewAction};
use fleetagent::tools::{self, Actor, ToolCtx};
use fleetagent::vast::CreateRequest;
use serde_json::json;

use super::{code, dead_demand, Rig, StaticDemand, BASE};
use crate::common::fake_vast::{FakeReply, Route};

#[test]
fn a_create_not_recorded_is_adopted_never_duplicated() {
    let mut rig = Rig::new(BASE, StaticDemand::new(dead_demand(10)));
    let offers = rig.fake.add_offers(3, "RTX 4090", 0.40, 0.99);
    let _ = rig.pass();
    // What launch_instance commits before its create call...
    let label = {
        let install = fleetagent::store::ops::install_id(&rig.store.conn).unwrap();
        tools::launch::launch_label("fleetagent", &install, rig.run_id, "call_crash")
    };
    let now = rig.now();
    actions::insert(
        &rig.store.conn,
        &NewAction {
            run_id: Some(rig.run_id),
            kind: "launch",
            outcome: "intent",
            actor: "llm",
            label: Some(&label),
            offer_id: Some(offers[0] as i64),
            dph: Some(0.4),
            tool_call_id: Some("call_crash"),
            ..Default::default()
        },
        now,
    )
    .unwrap();
    // ...then the create went through and the process died before recording it.
    let id = rig
        .services
        .vast
        .as_ref()
        .unwrap()
        .create_instance(&CreateRequest {
            offer_id: offers[0],
            image: "img".into(),
            disk_gb: 40.0,
            label: label.clone(),
            env: BTreeMap::new(),
            onstart: None,
            bid_price: None,
            image_login: None,
        })
        .unwrap();
    rig.clock.advance(Duration::from_secs(60));

    let snap = rig.pass();
    let row = snap.find(id as i64).expect("adopted into this pass's view");
    assert_eq!(row.label, label);
    assert_eq!(row.state, "loading");
    assert!(
        !row.adopted,
        "it was our own launch, settled from its intent"
    );
    assert!(actions::open_intents(&rig.store.conn).unwrap().is_empty());
    let settled: (String, Option<i64>) = rig
        .store
        .conn
        .query_row(
            "SELECT outcome, instance_id FROM actions WHERE label = ?1",
            [&label],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(settled, ("ok".to_string(), Some(id as i64)));
    assert_eq!(
        rig.count(&format!(
            "SELECT COUNT(*) FROM events WHERE kind='lifecycle' AND claimed_by={} AND reason LIKE '%open launch intent%'",
            rig.run_id
        )),
        1
    );
    // The same tool call again cannot rent a second instance.
    let crash_run = rig.run_id - 1;
    let mut snap = snap;
    let mut ctx = ToolCtx {
        store: &mut rig.store,
        ctx: fleetagent::services::Ctx {
            config: &rig.config,
            env: &rig.env,
            clock: rig.clock.as_ref(),
            services: &rig.services,
        },
        snapshot: &mut snap,
        run_id: crash_run,
        actor: Actor::Llm,
        call_id: "call_crash".into(),
    };
    let r = tools::registry()
        .call(&mut ctx, "launch_instance", r#"{"reason": "again"}"#)
        .unwrap();
    assert_eq!(r.content["already"], "ok", "{:?}", r.content);
    assert_eq!(rig.fake.count(Route::Create), 1);
    assert_eq!(rig.fake.instance_ids(), vec![id]);
}

#[test]
fn a_lost_create_answer_stays_an_open_intent_until_the_listing_answers() {
    let mut rig = Rig::new(BASE, StaticDemand::new(dead_demand(10)));
    rig.fake.add_offers(3, "RTX 4090", 0.40, 0.99);
    let mut snap = rig.pass();
    rig.fake
        .lose_next_answer(Route::Create, 1, FakeReply::text(502, "Bad Gateway"));
    let r = rig.call(&mut snap, "launch_instance", json!({"reason": "dead"}));
    assert_eq!(code(&r), Some("vast_error"));
    assert_eq!(r.content["may_have_created"], true);
    // Not retried blindly, and it counts against the window and the money meanwhile.
    assert_eq!(rig.fake.count(Route::Create), 1);
    assert_eq!(snap.window_launches.len(), 1);
    assert!((snap.fleet_dph() - 0.4).abs() < 1e-9);
    assert_eq!(actions::open_intents(&rig.store.conn).unwrap().len(), 1);

    let snap = rig.pass();
    assert!(actions::open_intents(&rig.store.conn).unwrap().is_empty());
    let id = rig.fake.instance_ids()[0] as i64;
    assert_eq!(
        snap.find(id).unwrap().label,
        r.content["label"].as_str().unwrap()
    );
    assert_eq!(snap.instances.len(), 1);

    // An intent whose create never happened is settled failed after the grace period.
    rig.fake
        .fail_next(Route::Create, 1, FakeReply::text(504, "Gateway Time-out"));
    let mut snap = rig.pass();
    let r = rig.call(&mut snap, "launch_instance", json!({"reason": "dead"}));
    assert_eq!(r.content["may_have_created"], true);
    rig.clock
        .advance(Duration::from_millis(fleet::INTENT_GRACE_MS as u64));
    let snap = rig.pass();
    assert!(actions::open_intents(&rig.store.conn).unwrap().is_empty());
    assert_eq!(snap.instances.len(), 1);
    assert!(
        snap.changes.iter().any(|c| c.contains("never appeared")),
        "{:?}",
        snap.changes
    );
}

#[test]
fn a_failed_create_that_made_an_instance_anyway_is_destroyed_at_once() {
    let mut rig = Rig::new(BASE, StaticDemand::new(dead_demand(10)));
    rig.fake.add_offers(3, "RTX 4090", 0.40, 0.99);
    // vast.ai's trap: success false, and the (stopped) instance it made anyway.
    let made = rig.fake.add_instance("made-by-a-failed-create");
    rig.fake.fail_next(
        Route::Create,
        1,
        FakeReply::json(
            200,
            json!({"success": false, "error": "insufficient_bid",
                   "msg": "bid is below the current minimum", "new_contract": made}),
        ),
    );
    let mut snap = rig.pass();
    let r = rig.call(&mut snap, "launch_instance", json!({"reason": "dead"}));
    assert_eq!(code(&r), Some("vast_error"), "{}", r.content);
    assert_eq!(r.content["destroyed"], made);
    assert!(!rig.fake.instance_ids().contains(&made), "destroyed");
    // Settled failed: nothing open, nothing in the table, the window not spent by it.
    assert!(actions::open_intents(&rig.store.conn).unwrap().is_empty());
    let snap = rig.pass();
    assert!(snap.instances.is_empty(), "{:?}", snap.instances);
    assert!(snap.window_launches.is_empty());
}
