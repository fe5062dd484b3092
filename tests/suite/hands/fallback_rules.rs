//! The fallback through the same tool registry: the incident with the LLM down (the floor's
//! plan, as under a model that did nothing), and streaks that persist across passes.

use fleetagent::demand::{Demand, Worker};
use fleetagent::policy::floor;
use fleetagent::policy::rules::{self, Mode};
use fleetagent::run::observe;
use fleetagent::store::session;
use fleetagent::tools::{self, Actor, ToolCtx};

use super::{code, dead_demand, Rig, StaticDemand, BASE, MIN};

#[test]
fn fallback_rules_handle_the_incident_with_the_llm_down() {
    let mut rig = Rig::new(BASE, StaticDemand::new(dead_demand(59)));
    rig.fake.add_offers(10, "RTX 4090", 0.40, 0.99);
    rig.fake.vast_rate_limits();
    for (i, ago) in [10, 5, 1].iter().enumerate() {
        rig.earlier_launch(&format!("fleetagent-r0-early{i}"), ago * MIN);
    }
    let mut snap = rig.pass();
    let low = observe::low_demand_streak(&rig.store.conn, &snap).unwrap();
    let now = snap.now;
    let plan = floor::plan(
        &snap,
        &rig.config,
        low,
        &floor::Memory::default(),
        &floor::ModelDid::default(),
        now,
    );
    let calls = plan.calls;
    assert_eq!(calls.len(), 3);
    for (i, c) in calls.iter().enumerate() {
        let mut ctx = ToolCtx {
            store: &mut rig.store,
            ctx: fleetagent::services::Ctx {
                config: &rig.config,
                env: &rig.env,
                clock: rig.clock.as_ref(),
                services: &rig.services,
            },
            snapshot: &mut snap,
            run_id: rig.run_id,
            actor: Actor::Fallback,
            call_id: format!("rules-{i}"),
        };
        let r = tools::registry()
            .call(&mut ctx, c.tool, &c.arguments.to_string())
            .unwrap();
        assert_eq!(code(&r), None, "{:?}", r.content);
    }
    assert_eq!(rig.creates_ok(), 3);
    assert_eq!(
        rig.count("SELECT COUNT(*) FROM actions WHERE actor='fallback-rules' AND outcome='ok'"),
        3
    );
}

#[test]
fn rules_streaks_persist_across_passes() {
    let probe = StaticDemand::new(Demand {
        pending: 7,
        running: 1,
        completed_1h: 20,
        workers: vec![Worker {
            machine_name: "fleetagent-a".into(),
            host_and_port: "10.0.0.1:12300".into(),
            running: 1,
            cordoned: false,
        }],
        ..Default::default()
    });
    let mut rig = Rig::new(BASE, probe.clone());
    rig.fake.add_instance("fleetagent-a");
    let snap = rig.pass();
    assert_eq!(snap.streaks.backlog_passes, 1, "observe advanced it");
    // Calling the update again in the same run does not advance it twice.
    for _ in 0..3 {
        assert_eq!(
            observe::low_demand_streak(&rig.store.conn, &snap).unwrap(),
            0
        );
    }
    assert_eq!(session::streaks(&rig.store.conn).unwrap().0, snap.streaks);
    assert!(rules::decide(&snap, &rig.config, 0, Mode::Full).is_empty());
    // The fleet does 20 of its 50 p/h: a backlog on a fleet with room over the hour may be
    // the arrivals' noise, so it must last rules::BACKLOG_WEAK_PASSES passes (a saturated
    // fleet's after 2); the streak carries from pass to pass.
    for n in 2..rules::BACKLOG_WEAK_PASSES {
        let snap = rig.pass();
        assert_eq!(snap.streaks.backlog_passes, n);
        let low = observe::low_demand_streak(&rig.store.conn, &snap).unwrap();
        let calls = rules::decide(&snap, &rig.config, low, Mode::Full);
        assert!(calls.is_empty(), "pass {n}: {calls:?}");
    }
    let snap = rig.pass();
    assert_eq!(snap.streaks.backlog_passes, rules::BACKLOG_WEAK_PASSES);
    let low = observe::low_demand_streak(&rig.store.conn, &snap).unwrap();
    let calls = rules::decide(&snap, &rig.config, low, Mode::Full);
    // Toward the target one at a time, one more for each BACKLOG_STEP_PASSES the backlog has
    // lasted: the size of the deficit is unknown (a saturated fleet would get half as much
    // again at once).
    let step = 1 + rules::BACKLOG_WEAK_PASSES / rules::BACKLOG_STEP_PASSES;
    assert_eq!(
        calls.len() as u32,
        step,
        "one at a time, stepped: {calls:?}"
    );
    assert_eq!(session::streaks(&rig.store.conn).unwrap().0, snap.streaks);
}
