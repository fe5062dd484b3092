//! What the hosts share and what each keeps to itself (docs/ha.md, "The shared state" and
//! "clocks skewed"), found by the HA re-test of 2026-12-06: an operator's stop on its way to
//! vast.ai holds the next leader too, and a host's clock against vast.ai's is its own.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use super::agent_e2e::{dead_fleet, write_demand};
use super::ha_hosts::{host, pair, Pair};
use crate::common::fake_vast::{FakeVast, Route};
use crate::common::fleet::Run;
use crate::common::pg;
use crate::suite::hardening::clock::VastAt;

/// An operator's stop killed once vast.ai destroyed the instance, before it was recorded
/// (a Ctrl-C, a host lost), then the lease moves: the next leader is held as the host that
/// typed it would have been. Its mark was on that host alone, and the next leader rented a
/// replacement at once under WORKERS DEAD.
#[test]
fn a_killed_operator_stop_holds_the_next_leader_too() {
    let Pair {
        db: _db,
        vast,
        _demand,
        a,
        b,
    } = pair();
    let out = a.cmd(&["run"]).ok();
    let rented = vast.count(Route::Create);
    assert!(rented >= 1, "A rented nothing: {}", out.stderr);
    let id = vast.instance_ids()[0].to_string();

    let mut cmd = a.command(&["instances", "stop", &id, "--force", "--reason", "drill"]);
    cmd.env("FLEETAGENT_TEST_CRASH_AT", "stop-after-call");
    let out = Run::from(cmd.output().unwrap());
    assert!(out.stderr.contains("test crash injected"), "{}", out.stderr);
    assert_eq!(vast.count(Route::Destroy), 1, "vast.ai destroyed it");
    a.cmd(&["ha", "release"]).ok();

    // B leads; the fleet is short again (WORKERS DEAD): the hold keeps the rules' hands off.
    b.cmd(&["trigger", "-p", "1", "-r", "still dead"]).ok();
    let out = b.cmd(&["run"]).ok();
    assert_eq!(
        vast.count(Route::Create),
        rented,
        "B rented a replacement for the instance the operator just stopped: {}",
        out.stderr
    );
    assert!(out.stderr.contains("operator"), "{}", out.stderr);
}

/// How long the shared pause has left, in minutes, as `f` reads it.
fn pause_left_mins(f: &crate::common::fleet::Fleet) -> i64 {
    let until = f.count("SELECT paused_until FROM agent_state");
    (until - chrono::Utc::now().timestamp_millis()) / 60_000
}

/// B's clock two hours behind vast.ai's (it measures so while it leads), then A's, right,
/// leads and pauses for 10 minutes: A's first pass must not read B's measurement as its own
/// and "repair" a step it never made (the pause moved two hours later). Then B leads again
/// with its clock set right: it must not date A's rows later either.
#[test]
fn a_slow_hosts_clock_is_its_own() {
    const TWO_HOURS: i64 = 7_200_000;
    let db = pg::fresh_db();
    let clock = Arc::new(VastAt(AtomicI64::new(TWO_HOURS)));
    let vast = FakeVast::start(clock.clone());
    vast.add_offers(4, "RTX 4090", 0.40, 0.99);
    let demand = tempfile::tempdir().unwrap();
    write_demand(demand.path(), dead_fleet());
    let a = host("host-a", &db, &vast, demand.path());
    let b = host("host-b", &db, &vast, demand.path());

    b.cmd(&["trigger", "-p", "1", "-r", "look"]).ok();
    let out = b.cmd(&["run"]).ok();
    assert!(
        out.stderr.contains("2h00m behind vast.ai's"),
        "{}",
        out.stderr
    );
    b.cmd(&["ha", "release"]).ok();

    clock.0.store(0, Ordering::SeqCst);
    a.cmd(&["pause", "--for", "10m", "--reason", "maintenance"])
        .ok();
    a.cmd(&["trigger", "-p", "1", "-r", "look"]).ok();
    let out = a.cmd(&["run"]).ok();
    assert!(!out.stderr.contains("stepped forward"), "{}", out.stderr);
    assert!(!out.stderr.contains("behind vast.ai's"), "{}", out.stderr);
    let skew = a.count("SELECT COALESCE(vast_clock_skew_ms, 0) FROM agent_state");
    assert!(skew.abs() < 60_000, "A's own clock: {skew}");
    assert!(
        (8..=10).contains(&pause_left_mins(&a)),
        "{}",
        pause_left_mins(&a)
    );
    let doctor = a.cmd(&["doctor"]);
    assert!(
        !doctor.stdout.contains("behind vast.ai's"),
        "{}",
        doctor.stdout
    );
    a.cmd(&["ha", "release"]).ok();

    // B again, its clock set right (vast.ai agrees with it now): it says so, and moves none
    // of A's rows (they were right), only what it wrote since it took the lease.
    b.cmd(&["trigger", "-p", "1", "-r", "look"]).ok();
    let out = b.cmd(&["run"]).ok();
    assert!(
        !out.stderr.contains("stepped forward") || out.stderr.contains(": 0 row(s)"),
        "{}",
        out.stderr
    );
    assert!(
        (8..=10).contains(&pause_left_mins(&b)),
        "{}",
        pause_left_mins(&b)
    );
}

/// A host whose clock is off the shared database's is named by every host's `doctor`, with
/// what it does to the shared rows (a right host's doctor blamed a slow leader's "failing"
/// passes instead: the HA re-test). Each host measures its own at each contact.
#[test]
fn a_host_whose_clock_is_off_is_named_by_every_doctor() {
    let Pair {
        mut db,
        vast: _vast,
        _demand,
        a,
        b,
    } = pair();
    a.cmd(&["run"]).ok();
    b.cmd(&["poll"]).ok();
    let measured = db.query_i64(
        "SELECT COUNT(*) FROM fleetagent.hosts WHERE clock_ahead_ms BETWEEN -60000 AND 60000",
    );
    assert_eq!(measured, 2, "both hosts measured, both right");
    let ha_check = |f: &crate::common::fleet::Fleet| -> String {
        let out = f.cmd(&["doctor", "--json"]);
        let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
        v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "ha")
            .unwrap()
            .to_string()
    };
    assert!(!ha_check(&a).contains("clock"), "{}", ha_check(&a));
    // host-b's clock two hours behind at its last contact.
    db.exec("UPDATE fleetagent.hosts SET clock_ahead_ms = -7200000 WHERE host_id = 'host-b'");
    for (f, this) in [(&a, ""), (&b, " (this host)")] {
        let check = ha_check(f);
        assert!(
            check.contains(&format!(
                "ha: host-b{this}'s clock is 2h00m behind the shared database's"
            )) && check.contains("set host-b's clock right"),
            "{check}"
        );
    }
}

/// The panic button on the leader outlasts the lease (slow destroys, no poll renewing it):
/// the lease keeper runs while it does, and every instance of ours goes. Without it the
/// fence failed after a few destroys, 6 of 9 were left billing and no host led (a
/// walkthrough on two hosts).
#[test]
fn the_panic_button_holds_the_lease_for_as_long_as_it_destroys() {
    let Pair {
        db: _db,
        vast,
        _demand,
        a,
        b: _b,
    } = pair();
    a.cmd(&["run"]).ok();
    let iid = a.inspect()["install_id"].as_str().unwrap().to_string();
    vast.add_instance(&format!("fleetagent-{iid}-r1-0a0b0c0d"));
    let ours = vast.instance_ids().len();
    assert!(ours >= 2, "{ours}");
    // vast.ai's destroys are spaced 3 s apart (ratelimit::DESTROY_SPACING): they take past
    // the lease (5 s) less its fence margin (2 s).
    let out = a.cmd(&["instances", "stop", "--all", "--reason", "drill"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout
            .contains(&format!("destroyed {ours} of {ours} instance(s) of ours")),
        "{}",
        out.stdout
    );
    assert_eq!(vast.count(Route::Destroy), ours);
}

/// The panic button on a follower is refused naming the leader, and says when it works here
/// should the leader be down: "run it there" is impossible then. A `poll` that cannot reach
/// the shared database rewrites the textfile saying so: the leader's file still read
/// `fleetagent_ha_database_ok 1` and `fleetagent_ha_leader 1` until its next run. (Both from
/// a walkthrough on two hosts.)
#[test]
fn a_followers_panic_button_and_a_poll_without_the_database_say_what_holds() {
    let Pair {
        db: _db,
        vast,
        _demand,
        a,
        b,
    } = pair();
    a.cmd(&["run"]).ok();
    let out = b.cmd(&["instances", "stop", "--all", "--reason", "drill"]);
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains("and this host (host-b) is a follower: host-a leads (epoch 1); run it there, or `fleetagent ha release` there first; if host-a is down, its lease lapses in "),
        "{}",
        out.stderr
    );
    assert_eq!(vast.count(Route::Destroy), 0);

    let sample = |name: &str| {
        let text = std::fs::read_to_string(a.path().join("fleetagent.prom")).unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")).map(str::to_string))
    };
    assert_eq!(sample("fleetagent_ha_leader").as_deref(), Some("1"));
    let mut poll = a.command(&["poll"]);
    poll.env(
        "FLEETAGENT_HA_DB_URL",
        "postgresql://fleet@127.0.0.1:1/gone?sslmode=disable",
    );
    let out = Run::from(poll.output().unwrap());
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert_eq!(sample("fleetagent_ha_database_ok").as_deref(), Some("0"));
    assert_eq!(sample("fleetagent_ha_leader").as_deref(), Some("0"));
}

/// The install a host speaks for is the shared state's: a follower that never led holds its
/// own `init`'s id, which the first lease it takes replaces (a walkthrough saw one HA install
/// shown as one per host in `inspect`, `doctor` and `fleetagent_install_info`). And a rolling
/// upgrade left half done is named: hosts on different builds.
#[test]
fn every_host_names_the_shared_install_and_a_host_left_on_another_build() {
    let Pair {
        mut db,
        vast: _vast,
        _demand,
        a,
        b,
    } = pair();
    a.cmd(&["trigger", "-p", "1", "-r", "look"]).ok();
    a.cmd(&["run"]).ok();
    b.cmd(&["poll"]).ok();
    let shared = a.inspect()["install_id"].as_str().unwrap().to_string();
    let own: String = b
        .db()
        .query_row("SELECT install_id FROM agent_state", [], |r| r.get(0))
        .unwrap();
    assert_ne!(own, shared, "B never led: its copy holds its own init's id");
    assert_eq!(b.inspect()["install_id"], shared.as_str());
    let doc = b.cmd(&["doctor", "--json"]);
    assert_eq!(doc.json()["install_id"], shared.as_str(), "{}", doc.stdout);
    // Its textfile says the shared id, and is not taken for another install's (a re-test
    // saw every follower's doctor red so).
    let metrics = doc.json()["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "metrics")
        .unwrap()
        .clone();
    assert_eq!(metrics["ok"], true, "{metrics}");
    let prom = std::fs::read_to_string(b.path().join("fleetagent.prom")).unwrap();
    assert!(
        prom.contains(&format!(
            "fleetagent_install_info{{install_id=\"{shared}\"}} 1"
        )),
        "{prom}"
    );

    db.exec("UPDATE fleetagent.hosts SET version = '0.1.0+d63589a' WHERE host_id = 'host-b'");
    let doc = a.cmd(&["doctor", "--json"]).json();
    let ha = doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "ha")
        .unwrap()
        .to_string();
    assert!(
        ha.contains("ha: the hosts run different builds (") && ha.contains("host-b 0.1.0+d63589a"),
        "{ha}"
    );
}

/// A single-host install with a fleet enabled after a fresh host led (the shared state is
/// another install's): it refuses to lead, and names itself as its own install, never as the
/// shared one (a re-test saw `inspect` then list its own instances as another install's,
/// "billing, never stopped here").
#[test]
fn a_host_holding_another_installs_state_names_its_own_install() {
    let Pair {
        db: _db,
        vast: _vast,
        _demand,
        a,
        b,
    } = pair();
    let ha = |f: &crate::common::fleet::Fleet, on: bool| {
        let cfg = std::fs::read_to_string(&f.config).unwrap();
        let (from, to) = if on {
            ("enabled = false", "enabled = true")
        } else {
            ("enabled = true", "enabled = false")
        };
        f.write_config(&cfg.replace(from, to));
    };
    ha(&a, false);
    a.cmd(&["run"]).ok();
    let own = a.inspect()["install_id"].as_str().unwrap().to_string();
    b.cmd(&["run"]).ok();
    b.cmd(&["ha", "release"]).ok();
    let shared = b.inspect()["install_id"].as_str().unwrap().to_string();
    assert_ne!(own, shared);
    ha(&a, true);
    a.cmd(&["run"]).code(1);
    assert_eq!(a.inspect()["install_id"], own.as_str());
    assert_eq!(
        a.cmd(&["doctor", "--json"]).json()["install_id"],
        own.as_str()
    );
}

/// What the fleet learned goes with the lease: a GPU's measured rate (the next leader rented
/// a GPU the last one had measured as unprofitable) and the day's hours (the profile was lost
/// at every takeover: the HA walkthrough, 2026-12-07). A shared state written by a build that
/// kept them on each host (no row of them at all) neither empties the new leader's copy nor
/// stays without them: the leader's next push sends its own.
#[test]
fn measured_rates_and_the_days_hours_go_with_the_lease() {
    let Pair {
        mut db,
        vast: _vast,
        _demand,
        a,
        b,
    } = pair();
    a.cmd(&["run"]).ok();
    let hour = 3_600_000i64;
    let h0 = (chrono::Utc::now().timestamp_millis() / hour - 30) * hour;
    let learn = |f: &crate::common::fleet::Fleet, gpu: &str, hours: i64| {
        let conn = f.db();
        conn.execute(
            "INSERT OR REPLACE INTO measured_rates (gpu_name, proofs_per_hour, proofs, span_secs, updated_at)
             VALUES (?1, 10, 5, 1800, ?2)",
            rusqlite::params![gpu, chrono::Utc::now().timestamp_millis()],
        )
        .unwrap();
        for i in 0..hours {
            conn.execute(
                "INSERT OR IGNORE INTO day_hours (start, pph, samples, saturated) VALUES (?1, 120, 12, 0)",
                [h0 + i * hour],
            )
            .unwrap();
        }
    };
    // Written by a's pass before this build shared them: not in the shared state.
    learn(&a, "RTX 4090", 24);
    let shared = |db: &mut pg::TestDb, t: &str| {
        db.query_i64(&format!(
            "SELECT COUNT(*) FROM fleetagent.rows WHERE tbl = '{t}' AND data IS NOT NULL"
        ))
    };
    assert_eq!(shared(&mut db, "day_hours"), 0);
    a.cmd(&["run"]).ok();
    assert_eq!(
        shared(&mut db, "measured_rates"),
        1,
        "a's next push seeds them"
    );
    assert_eq!(shared(&mut db, "day_hours"), 24);
    a.cmd(&["ha", "release"]).ok();
    b.cmd(&["run"]).ok();
    assert_eq!(
        b.count("SELECT COUNT(*) FROM measured_rates WHERE gpu_name = 'RTX 4090' AND proofs_per_hour = 10"),
        1,
        "the next leader reads the rate a measured"
    );
    assert_eq!(b.count("SELECT COUNT(*) FROM day_hours"), 24);

    // A shared state without a row of them (an older build led last): the leader's own stay,
    // and its next push shares them.
    db.exec("DELETE FROM fleetagent.rows WHERE tbl IN ('measured_rates', 'day_hours')");
    db.exec("UPDATE fleetagent.sync SET holder = 'host-old', seq = seq + 1");
    learn(&a, "RTX 3090", 30);
    b.cmd(&["ha", "release"]).ok();
    let out = a.cmd(&["run"]).ok();
    assert!(
        out.stderr.contains("leadership moved"),
        "a pulled: {}",
        out.stderr
    );
    assert_eq!(a.count("SELECT COUNT(*) FROM measured_rates"), 2, "kept");
    assert_eq!(a.count("SELECT COUNT(*) FROM day_hours"), 30);
    assert_eq!(shared(&mut db, "measured_rates"), 2, "and shared");
    assert_eq!(shared(&mut db, "day_hours"), 30);
    // A host on an older build runs (it writes `version`, never `shares`): it could not copy
    // them and would hold the lease failing every pass, so the leader takes them out of the
    // shared state and each host keeps its own; once it is gone, they are shared again.
    db.exec(
        "INSERT INTO fleetagent.hosts (host_id, last_seen, version, config_hash) \
         VALUES ('host-old', now(), 'fleetagent 0.0.9', 'x')",
    );
    let out = a.cmd(&["run"]).ok();
    assert!(
        out.stderr.contains("a host on an older build runs"),
        "{}",
        out.stderr
    );
    assert_eq!(shared(&mut db, "measured_rates"), 0);
    assert_eq!(
        a.count("SELECT COUNT(*) FROM measured_rates"),
        2,
        "kept here"
    );
    db.exec("DELETE FROM fleetagent.hosts WHERE host_id = 'host-old'");
    a.cmd(&["run"]).ok();
    assert_eq!(shared(&mut db, "measured_rates"), 2, "shared again");
    // One that registers after the leader's run, then the leader hands the lease over: the
    // release takes them out first (the old host may lead next).
    db.exec(
        "INSERT INTO fleetagent.hosts (host_id, last_seen, version, config_hash) \
         VALUES ('host-old', now(), 'fleetagent 0.0.9', 'x')",
    );
    a.cmd(&["ha", "release"]).ok();
    assert_eq!(shared(&mut db, "measured_rates"), 0);
    db.exec("DELETE FROM fleetagent.hosts WHERE host_id = 'host-old'");
    // B leads next: its own rates (it kept them while they were out) are shared.
    let out = b.cmd(&["run"]).ok();
    assert_eq!(shared(&mut db, "measured_rates"), 1, "{}", out.stderr);
    // A follows: its inspect says its lines are its copy, and where the fleet is seen now.
    let text = |f: &crate::common::fleet::Fleet| f.cmd(&["inspect"]).ok().stdout;
    assert!(
        text(&a).contains("NOT LEADING the lines below are this host's copy as of when it last led (or its init), not the fleet now (pause, holds, instances, spend, price): `fleetagent inspect` on host-b shows them now"),
        "{}",
        text(&a)
    );
    assert!(!text(&b).contains("NOT LEADING"));
    // The database unreadable: the role is unknown, and no host calls its lines stale.
    let blind = b
        .command(&["inspect"])
        .env(
            "FLEETAGENT_HA_DB_URL",
            "postgresql://probe@127.0.0.1:1/none",
        )
        .output()
        .unwrap();
    let blind = crate::common::fleet::Run::from(blind).ok().stdout;
    assert!(
        blind.contains(" is unknown: ") && !blind.contains("NOT LEADING"),
        "{blind}"
    );
}

/// A follower whose demand probe fails (its own credential, route or command) is named by
/// every host's doctor before it leads: it read demand as a pass would once a timer period
/// (the HA walkthrough: every doctor was green, then it led holding the fleet). Read again
/// with success, the line goes.
#[test]
fn a_follower_that_cannot_read_demand_is_named_before_it_leads() {
    let Pair {
        mut db,
        vast: _vast,
        _demand,
        a,
        b,
    } = pair();
    a.cmd(&["run"]).ok();
    let config = std::fs::read_to_string(&b.config).unwrap();
    let broken = config.replace("command = \"cat ", "command = \"cat /nonexistent/");
    assert_ne!(broken, config);
    b.write_config(&broken);
    b.cmd(&["poll"]).ok();
    let said = "ha: host-b cannot read what a pass reads";
    for (f, who) in [(&a, "host-b"), (&b, "host-b (this host)")] {
        let out = f.cmd(&["doctor"]).code(1).stdout;
        assert!(
            out.contains(&format!("ha: {who} cannot read what a pass reads"))
                && out.contains("demand: "),
            "{out}"
        );
    }
    // Once a timer period: a second poll reads nothing.
    let at = |db: &mut pg::TestDb| {
        db.query_i64("SELECT (EXTRACT(EPOCH FROM probe_at) * 1000)::bigint FROM fleetagent.hosts WHERE host_id = 'host-b'")
    };
    let first = at(&mut db);
    b.cmd(&["poll"]).ok();
    assert_eq!(at(&mut db), first, "read again within the timer period");
    // Mended, and a timer period later: read, and the line goes.
    b.write_config(&config);
    db.exec(
        "UPDATE fleetagent.hosts SET probe_at = now() - interval '1 hour' WHERE host_id = 'host-b'",
    );
    b.cmd(&["poll"]).ok();
    assert!(!a.cmd(&["doctor"]).stdout.contains(said));
}
