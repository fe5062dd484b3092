//! doctor's `config` check on a fleet over a cap the config lowered: what the next pass
//! stops, and what no pass stops.

use super::*;

/// A cap lowered below the fleet the last pass left: the `config` check says the next pass
/// stops the surplus, with the figures, before it does; within the caps, nothing.
#[test]
fn a_fleet_over_a_lowered_cap_is_named_before_the_next_pass_stops_it() {
    use crate::fleet::fixtures::row;
    use crate::fleet::{PROVING, STOPPED};
    let (dir, s) = test_store(NOW);
    for i in 1..=3 {
        crate::store::instances::upsert(&s.conn, &row(&format!("fa-{i}"), Some(i), PROVING, 0.4))
            .unwrap();
    }
    // A stopped disk is not a stop's to take away.
    crate::store::instances::upsert(&s.conn, &row("fa-9", Some(9), STOPPED, 0.4)).unwrap();
    let mut config = Config::default();
    config.policy.max_instances = Some(3);
    let config_problems = |config: &Config| {
        check(&run_checks(dir.path(), config), "config")
            .problems
            .iter()
            .map(|p| p.detail.clone())
            .filter(|d| d.contains("over_cap"))
            .collect::<Vec<_>>()
    };
    assert!(config_problems(&config).is_empty());
    config.policy.max_instances = Some(2);
    config.policy.max_dph_total = Some(1.0);
    let said = config_problems(&config);
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(
        said[0].starts_with("the fleet of ours is over max_instances (3, cap 2) and max_dph_total ($1.20/h, cap $1.00/h): the next pass stops the surplus"),
        "{}",
        said[0]
    );
    // All three prove: a pass stops none of them (only `--force` does), and it says so
    // rather than that the next pass does it (a walkthrough).
    assert!(
        said[0].contains("but all 3 are proving, and a pass never stops one that proves"),
        "{}",
        said[0]
    );
    // The last pass's probe failed: the fleet is held, and no pass stops anything until it
    // answers (a walkthrough read "the next pass stops the surplus" while each refused it).
    s.conn
        .execute(
            r#"UPDATE agent_state SET last_demand = '{"error":"probe_failed: connection refused"}'"#,
            [],
        )
        .unwrap();
    let held = config_problems(&config);
    assert_eq!(held.len(), 1, "{held:?}");
    assert!(
        held[0].contains(
            "and the last pass's demand probe failed: the fleet is held (see the demand check): no pass stops the surplus"
        ),
        "{}",
        held[0]
    );
    // The operator's pause holds it too, and is named first.
    let pause = crate::store::ops::Pause {
        since: NOW - 60_000,
        until: None,
        reason: "changing the caps".into(),
    };
    crate::store::ops::set_pause(&s.conn, &pause).unwrap();
    let paused = config_problems(&config);
    assert!(
        paused[0].contains("and the operator's pause holds the fleet (see the pause check): no pass stops the surplus"),
        "{}",
        paused[0]
    );
}

/// A cap lowered to 0 under the cluster's last live worker while proofs wait: the stop
/// guardrail keeps it, over a cap too, and the `config` check names it and its `--force`
/// rather than say that the next pass stops it (a walkthrough saw each pass refuse it).
#[test]
fn the_last_live_worker_over_a_cap_is_named_with_its_force() {
    use crate::fleet::fixtures::row;
    let (dir, s) = test_store(NOW);
    let mut last = row("fa-1", Some(41), crate::fleet::REGISTERED, 0.4);
    last.machine_name = Some("w41".into());
    crate::store::instances::upsert(&s.conn, &last).unwrap();
    let reading = crate::demand::Demand {
        pending: 10,
        workers: vec![crate::demand::Worker {
            machine_name: "w41".into(),
            host_and_port: "10.0.0.41:12300".into(),
            running: 0,
            cordoned: false,
        }],
        ..Default::default()
    };
    crate::store::curio::set_last_reading(&s.conn, &serde_json::to_string(&reading).unwrap(), NOW)
        .unwrap();
    let mut config = Config::default();
    config.policy.max_instances = Some(0);
    let said: Vec<String> = check(&run_checks(dir.path(), &config), "config")
        .problems
        .iter()
        .map(|p| p.detail.clone())
        .filter(|d| d.contains("over_cap"))
        .collect();
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(
        said[0].contains("instance 41 is the cluster's last live worker while 10 proofs wait, which no pass stops (only `fleetagent instances stop 41 --force` does)"),
        "{}",
        said[0]
    );
}
