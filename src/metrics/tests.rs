//! The metrics file's tests: every family from real rows, and the file as written.

use super::*;
use crate::store::Store;

#[test]
fn empty_database_renders_every_family() {
    let s = Store::open_memory(0).unwrap();
    let text = collect(&s.conn, &crate::config::Config::default(), 1_000).unwrap();
    for name in [
        "fleetagent_runs_total{verdict=\"action\"} 0",
        "fleetagent_last_success_timestamp_seconds 0",
        "fleetagent_fleet_dollars_per_hour 0",
        "fleetagent_emergency 0",
        "# TYPE fleetagent_guardrail_refusals_total counter",
        "fleetagent_price_known 0",
        "# TYPE fleetagent_revenue_per_proof_dollars gauge",
    ] {
        assert!(text.contains(name), "{name} missing:\n{text}");
    }
    // Unknown figures have no sample, never a NaN.
    assert!(!text.contains("NaN"), "{text}");
    assert!(
        !text.contains("\nfleetagent_revenue_per_proof_dollars "),
        "{text}"
    );
    for unknown in [
        "\nfleetagent_profit_dollars_per_hour ",
        "\nfleetagent_fleet_cost_per_proof_dollars ",
        "\nfleetagent_proofs_completed_last_hour{",
    ] {
        assert!(!text.contains(unknown), "{text}");
    }
}

#[test]
fn a_known_price_gives_revenue_cost_and_profit_over_our_completions() {
    let s = Store::open_memory(0).unwrap();
    let mut c = crate::config::Config::default();
    c.price.proof_price_fil = Some(0.01);
    c.price.fil_usd = Some(4.0);
    let mut row = crate::fleet::fixtures::row("fleetagent-a", Some(1), crate::fleet::PROVING, 0.5);
    row.worker_address = Some("172.17.0.2:12300".into());
    instances::upsert(&s.conn, &row).unwrap();
    let pass = serde_json::json!({"demand": {
        "pending": 0, "running": 1, "completed_1h": 30, "completed_15m": 8,
        "history": [
            {"host_and_port": "172.17.0.2:12300", "proofs": 20, "first_end_secs_ago": 3000,
             "last_end_secs_ago": 30, "completed_1h": 20},
            {"host_and_port": "10.0.0.1:12300", "proofs": 10, "first_end_secs_ago": 3000,
             "last_end_secs_ago": 30, "completed_1h": 10}]}});
    s.conn
        .execute(
            "UPDATE agent_state SET last_demand = ?1",
            [pass.to_string()],
        )
        .unwrap();
    let text = collect(&s.conn, &c, 1_000).unwrap();
    for want in [
        "fleetagent_price_known 1",
        "fleetagent_revenue_per_proof_dollars 0.04",
        "fleetagent_proofs_completed_last_hour{whose=\"ours\"} 20",
        "fleetagent_proofs_completed_last_hour{whose=\"others\"} 10",
        "fleetagent_fleet_cost_per_proof_dollars 0.025",
        "fleetagent_revenue_dollars_per_hour 0.8",
        "fleetagent_profit_dollars_per_hour 0.3",
    ] {
        assert!(text.contains(want), "{want} missing:\n{text}");
    }
}

/// WORKERS DEAD, then a pass blind to demand (the probe failed): the queue and the
/// emergency are the last good reading's, not zeros that clear the alert; before any
/// reading the queue has no sample.
#[test]
fn a_blind_pass_keeps_the_last_good_queue_and_workers_dead() {
    let s = Store::open_memory(0).unwrap();
    let c = crate::config::Config::default();
    let text = collect(&s.conn, &c, 1_000).unwrap();
    assert!(!text.contains("\nfleetagent_queue_proofs{"), "{text}");
    let dead = serde_json::json!({"pending": 59, "running": 0, "completed_1h": 0,
                                  "completed_15m": 0, "workers": []});
    crate::store::curio::set_last_reading(&s.conn, &dead.to_string(), 500).unwrap();
    s.conn
        .execute(
            "UPDATE agent_state SET last_demand = ?1",
            [serde_json::json!({"demand": null}).to_string()],
        )
        .unwrap();
    let text = collect(&s.conn, &c, 1_000).unwrap();
    for want in [
        "fleetagent_queue_proofs{state=\"pending\"} 59",
        "fleetagent_queue_proofs{state=\"running\"} 0",
        "fleetagent_emergency 1",
        "fleetagent_demand_known 0",
    ] {
        assert!(text.contains(want), "{want} missing:\n{text}");
    }
}

/// A launch whose create may not have happened (no vast.ai id) is `launching` until a
/// good listing a minute or more after its create does not show it; then it is
/// unconfirmed, not on its way (WORKERS DEAD with every create failing 5xx).
#[test]
fn a_launch_a_good_listing_did_not_show_is_unconfirmed_not_launching() {
    let s = Store::open_memory(0).unwrap();
    let now = 10 * DAY_MS;
    s.conn
        .execute(
            "INSERT INTO instances (label, state, dph, created_at, state_since)
             VALUES ('fleetagent-qwerty-r1-0badf00d', 'launching', 0.4, ?1, ?1)",
            [now - 90_000],
        )
        .unwrap();
    let c = crate::config::Config::default();
    let read = |listed: Millis| {
        crate::store::ops::record_listing(&s.conn, Ok(()), listed).unwrap();
        let text = collect(&s.conn, &c, now).unwrap();
        let of = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.trim().to_string())
        };
        (
            of("fleetagent_fleet_instances{state=\"launching\"}"),
            of("fleetagent_launches_unconfirmed"),
            of("fleetagent_fleet_dollars_per_hour"),
        )
    };
    let some = |a: &str, b: &str, c: &str| (Some(a.into()), Some(b.into()), Some(c.into()));
    // Listed 30 s after the create: too soon to tell.
    assert_eq!(read(now - 60_000), some("1", "0", "0.4"));
    // Listed 80 s after it, without it: unconfirmed; the caps still count its price.
    assert_eq!(read(now - 10_000), some("0", "1", "0.4"));
}

/// An instance vast.ai lists without a price counts at the most one may cost, as the
/// money caps count it, never $0 (every view read $0 while launches were refused).
#[test]
fn an_unpriced_instance_counts_at_the_most_one_may_cost() {
    let s = Store::open_memory(0).unwrap();
    let now = 10 * DAY_MS;
    s.conn
        .execute(
            "INSERT INTO instances (label, vast_id, state, created_at, state_since)
             VALUES ('fleetagent-spare', 7, 'booted', ?1, ?1)",
            [now - 60_000],
        )
        .unwrap();
    let mut c = crate::config::Config::default();
    c.vast.offers.max_dph_per_instance = Some(0.75);
    let text = collect(&s.conn, &c, now).unwrap();
    assert!(
        text.contains("\nfleetagent_fleet_dollars_per_hour 0.75\n"),
        "{text}"
    );
}

#[test]
fn the_operations_figures_and_an_unset_cap_has_no_sample() {
    let s = Store::open_memory(0).unwrap();
    let now = 10 * DAY_MS + 6 * 3_600_000;
    let mut c = crate::config::Config::default();
    let text = collect(&s.conn, &c, now).unwrap();
    for want in [
        "fleetagent_runs_total{verdict=\"action-failed\"} 0",
        "fleetagent_runs_total{verdict=\"action-refused\"} 0",
        "fleetagent_runs_decided_total{decided_by=\"floor\"} 0",
        "fleetagent_fleet_instances{state=\"launching\"} 0",
        "fleetagent_timer_period_seconds 300",
        "fleetagent_paused 0",
        "fleetagent_vast_ok 0",
        "fleetagent_spend_today_dollars 0",
        "# TYPE fleetagent_daily_spend_max_dollars gauge",
    ] {
        assert!(text.contains(want), "{want} missing:\n{text}");
    }
    for absent in [
        "\nfleetagent_demand_age_seconds ",
        "\nfleetagent_daily_spend_max_dollars ",
        "\nfleetagent_max_instances ",
        "\nfleetagent_max_dph_total_dollars ",
    ] {
        assert!(!text.contains(absent), "{absent:?} has a sample:\n{text}");
    }

    // A pause in force, a listing that worked, a reading 90 s old, an instance billing
    // $2/h since 04:00 UTC (2 h before `now`), and every cap set.
    crate::store::ops::set_pause(
        &s.conn,
        &crate::store::ops::Pause {
            since: now - 1,
            until: None,
            reason: "x".into(),
        },
    )
    .unwrap();
    crate::store::ops::record_listing(&s.conn, Ok(()), now).unwrap();
    crate::store::curio::set_last_reading(&s.conn, "{}", now - 90_000).unwrap();
    let mut row = crate::fleet::fixtures::row("fleetagent-a", Some(1), crate::fleet::PROVING, 2.0);
    row.created_at = now - 2 * 3_600_000;
    instances::upsert(&s.conn, &row).unwrap();
    c.policy.daily_spend_max = Some(50.0);
    c.policy.max_instances = Some(4);
    c.policy.max_dph_total = Some(1.5);
    let text = collect(&s.conn, &c, now).unwrap();
    for want in [
        "fleetagent_paused 1",
        "fleetagent_vast_ok 1",
        "fleetagent_demand_age_seconds 90",
        "fleetagent_spend_today_dollars 4",
        "fleetagent_daily_spend_max_dollars 50",
        "fleetagent_max_instances 4",
        "fleetagent_max_dph_total_dollars 1.5",
        "fleetagent_fleet_instances{state=\"proving\"} 1",
    ] {
        assert!(text.contains(want), "{want} missing:\n{text}");
    }
}

#[test]
fn a_failed_write_is_recorded_for_doctor_and_a_success_clears_it() {
    let dir = tempfile::tempdir().unwrap();
    Store::open(dir.path(), crate::store::OpenMode::Create, 0).unwrap();
    let mut c = crate::config::Config::default();
    c.metrics.textfile = Some(dir.path().join("missing/fleetagent.prom"));
    after_run(&c, dir.path(), 5_000, None);
    let s = Store::open(dir.path(), crate::store::OpenMode::Existing, 0).unwrap();
    let (error, at) = crate::store::ops::metrics_error(&s.conn).unwrap().unwrap();
    assert!(error.contains("cannot create"), "{error}");
    assert_eq!(at, 5_000);
    std::fs::create_dir(dir.path().join("missing")).unwrap();
    after_run(&c, dir.path(), 6_000, None);
    assert_eq!(crate::store::ops::metrics_error(&s.conn).unwrap(), None);
    assert!(dir.path().join("missing/fleetagent.prom").exists());
}

#[test]
fn label_values_are_escaped() {
    assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    assert_eq!(number(2.0), "2");
    assert_eq!(number(0.25), "0.25");
    // A sum's float noise is not written (1.4700000000000002, 0.04999999999999999).
    assert_eq!(number(0.5 + 0.3 + 0.4 + 0.25 + 0.02), "1.47");
    assert_eq!(number(0.76 - 0.71), "0.05");
    assert_eq!(number(-1e-12), "0");
    assert_eq!(number(7200.841), "7200.841");
    assert_eq!(number(f64::NAN), "NaN");
}

#[test]
fn write_is_atomic_and_leaves_no_temp() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("fleetagent.prom");
    write_textfile(&p, "a 1\n").unwrap();
    write_textfile(&p, "a 2\n").unwrap();
    assert_eq!(std::fs::read_to_string(&p).unwrap(), "a 2\n");
    let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(names.len(), 1);
}
