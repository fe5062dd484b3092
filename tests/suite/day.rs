//! Learning the day end to end (issue 25, item 3): the real binary (`fleetagent run`, the
//! rules deciding) against the fake vast.ai, demand from a `command` probe, and two days of
//! samples written where passes would have written them. Where the history shows a rise
//! ahead and the last hours came out as it foretold, the pass rents ahead of it, saying so;
//! with `policy.learn_day = false`, or a present that does not agree with the history, it
//! does not. `inspect` (JSON, text and plot) shows the profile and whether it is believed.

use serde_json::{json, Value};

use super::agent_e2e::write_demand;
use crate::common::config::rules_config;
use crate::common::fake_vast::{FakeVast, Route};
use crate::common::fleet::{clean_env, Fleet, BIN};

const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 24 * HOUR_MS;

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

fn hour_of(at: i64) -> i64 {
    at.rem_euclid(DAY_MS) / HOUR_MS
}

fn rig(vast: &FakeVast, policy: &str) -> Fleet {
    let f = Fleet::with_config("").env("VAST_API_KEY", &vast.api_key());
    let own = format!(
        "[run]\ndeadline_secs = 120\n[policy]\nproofs_per_hour_per_instance = 50\ntarget_proofs_per_hour = 400\nmax_instances = 10\nmax_dph_total = 10.0\n{policy}"
    );
    let text = rules_config(&vast.url(), &f.path().join("demand.json"), &[&own]);
    f.write_config(&text);
    f.cmd(&["init"]).ok();
    f
}

/// Ten RTX 4090 offers, the `policy` lines over the rig's, [`quiet`] demand and two days of
/// [`history`] with today's last hours at `today`.
fn quiet_fleet(policy: &str, today: u32) -> (FakeVast, Fleet) {
    let vast = FakeVast::start_real_time();
    vast.add_offers(10, "RTX 4090", 0.40, 0.99);
    let f = rig(&vast, policy);
    write_demand(f.path(), quiet());
    history(&f, today);
    (vast, f)
}

/// Someone else's busy worker, nothing queued, 100 proofs/h done: no rule of the present
/// asks for anything (no backlog, a live worker, nothing of ours).
fn quiet() -> Value {
    json!({"pending": 0, "running": 1, "completed_1h": 100, "completed_15m": 25,
           "workers": [{"machine_name": "other-box", "host_and_port": "10.0.0.9:12300",
                        "running": 1, "cordoned": false}]})
}

/// Two days of samples every 5 minutes up to now: 300 proofs/h at the hour of now and the
/// next on the days before, 100 at every other hour; today's last hours at `today` (100 is
/// what the history foretold).
fn history(f: &Fleet, today: u32) {
    let now = now_ms();
    let rise = [hour_of(now), hour_of(now + HOUR_MS)];
    let db = f.db();
    let mut at = now - 2 * DAY_MS;
    while at < now {
        // The hour the sample's 15-minute window falls in.
        let mid = at - 450_000;
        let rate = if rise.contains(&hour_of(mid)) && now - mid > HOUR_MS {
            300
        } else if now - mid < 3 * HOUR_MS + HOUR_MS {
            today
        } else {
            100
        };
        sample(&db, at, rate);
        at += 300_000;
    }
}

/// A pass's sample at `at`: `rate` proofs/h done, nothing queued, nothing of ours.
fn sample(db: &rusqlite::Connection, at: i64, rate: u32) {
    db.execute(
        "INSERT INTO samples (at, demand_ok, pending, completed_15m, completed_1h,
             ours_billing, ours_booting, ours_proving, capacity_pph, target_pph, fleet_dph)
         VALUES (?1, 1, 0, ?2, ?3, 0, 0, 0, 0, 400, 0)",
        rusqlite::params![at, rate / 4, rate],
    )
    .unwrap();
}

fn launch_reasons(f: &Fleet) -> Vec<String> {
    let db = f.db();
    let mut stmt = db
        .prepare("SELECT COALESCE(reason, '') FROM actions WHERE kind = 'launch' ORDER BY id")
        .unwrap();
    stmt.query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

#[test]
fn the_rules_rent_ahead_of_a_rise_the_days_history_shows_and_inspect_explains_it() {
    let (vast, f) = quiet_fleet("", 100);

    // Before the pass: inspect shows the profile, believed, and what it expects next.
    let day = &f.inspect()["day"];
    assert_eq!(day["trusted"], true, "{day}");
    assert_eq!(day["hours"].as_array().unwrap().len(), 24, "{day}");
    assert_eq!(day["next_hour_pph"], 300.0, "{day}");
    assert!(day["history_hours"].as_f64().unwrap() > 47.0, "{day}");
    assert!(
        day["why"]
            .as_str()
            .unwrap()
            .starts_with("the last 3 hours came within"),
        "{day}"
    );
    let text = f.cmd(&["inspect"]).ok().stdout;
    assert!(
        text.contains("\nday         believed: the last 3 hours"),
        "{text}"
    );
    assert!(text.contains("next hour 300/h"), "{text}");

    // The pass rents ahead: 300 p/h expected within a boot, nothing of ours, 50 p/h each:
    // as many as the launch window allows (3), each saying why.
    f.cmd(&["trigger", "-p", "1", "-r", "check"]).ok();
    f.cmd(&["run"]).ok();
    let reasons = launch_reasons(&f);
    assert_eq!(vast.count(Route::Create), 3, "{reasons:?}");
    assert_eq!(reasons.len(), 3, "{reasons:?}");
    for r in &reasons {
        assert!(
            r.starts_with("rules: the day's history expects 300 p/h from "),
            "{r}"
        );
    }

    // The plot draws the profile, believed.
    let svg = f.path().join("day.svg");
    f.cmd(&["inspect", "--plot", svg.to_str().unwrap(), "--hours", "48"])
        .ok();
    let drawn = std::fs::read_to_string(&svg).unwrap();
    assert!(
        drawn.contains(">day profile (believed)<"),
        "no profile line drawn"
    );
}

#[test]
fn without_learning_or_with_a_present_that_disagrees_the_rules_react_alone() {
    // learn_day off: the same history, no launch, and inspect's day is null.
    let (vast, f) = quiet_fleet("learn_day = false", 100);
    assert_eq!(f.inspect()["day"], Value::Null);
    f.cmd(&["trigger", "-p", "1", "-r", "check"]).ok();
    f.cmd(&["run"]).ok();
    assert_eq!(vast.count(Route::Create), 0, "{:?}", launch_reasons(&f));

    // Learning on, but the last three hours read 200 where the history foretold 100: the
    // forecast counts for nothing.
    let (vast, f) = quiet_fleet("", 200);
    let day = &f.inspect()["day"];
    assert_eq!(day["trusted"], false, "{day}");
    assert!(
        day["why"]
            .as_str()
            .unwrap()
            .starts_with("the forecast was off by"),
        "{day}"
    );
    f.cmd(&["trigger", "-p", "1", "-r", "check"]).ok();
    f.cmd(&["run"]).ok();
    assert_eq!(vast.count(Route::Create), 0, "{:?}", launch_reasons(&f));

    // A fresh install: no history, not believed, saying so.
    let day = &Fleet::new().inspect()["day"];
    assert_eq!(day["trusted"], false, "{day}");
    assert!(
        day["why"]
            .as_str()
            .unwrap()
            .starts_with("history short: 0 of 24"),
        "{day}"
    );
}

/// A simulation's database (`sim --state-dir`) is read as of its last pass, not the wall
/// clock, months later: its day profile is learned, its plot has its samples, and the text
/// says so. Two days of a flat 100 proofs/h are written before the simulated hour's end.
#[test]
fn inspect_reads_a_simulations_database_as_of_its_last_pass() {
    let f = Fleet::with_config("");
    // The simulator's own base config (no --config): its checks pass.
    let mut sim = std::process::Command::new(BIN);
    clean_env(&mut sim);
    let out = sim
        .arg("--state-dir")
        .arg(f.path().join("state"))
        .args(["sim", "--scenario", "incident", "--hours", "1"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let end: i64 = f.count("SELECT last_run_finished_at FROM agent_state WHERE id = 1");
    let db = f.db();
    let mut at = end - 2 * DAY_MS;
    while at < end - HOUR_MS {
        sample(&db, at, 100);
        at += 300_000;
    }
    // The hours the passes cached are learned again from the samples.
    db.execute("DELETE FROM day_hours", []).unwrap();
    drop(db);

    let v = f.inspect();
    let at_end = chrono::DateTime::from_timestamp_millis(end).unwrap();
    assert_eq!(
        v["now"],
        at_end.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        "{}",
        v["now"]
    );
    assert!(
        end < now_ms() - DAY_MS,
        "the simulated clock is not months back"
    );
    let day = &v["day"];
    assert!(day["history_hours"].as_f64().unwrap() > 40.0, "{day}");
    assert_eq!(day["hours"].as_array().unwrap().len(), 24, "{day}");
    let text = f.cmd(&["inspect"]).ok().stdout;
    assert!(
        text.lines()
            .next()
            .unwrap()
            .ends_with("(a simulation's database: read as of its last pass)"),
        "{text}"
    );
    // It judges the config the simulation ran with, kept in its database: the simulator's
    // base sets every launch key, which this host's (empty) config leaves unset.
    let config_line = |text: &str| {
        text.lines()
            .find(|l| l.starts_with("config "))
            .unwrap_or_default()
            .to_string()
    };
    assert!(
        config_line(&text).contains("the simulation's own: scenario incident, seed 1 (kept in "),
        "{text}"
    );
    assert_eq!(v["sim"]["config"], "simulation", "{}", v["sim"]);
    assert_eq!(v["sim"]["scenario"], "incident", "{}", v["sim"]);
    assert_eq!(v["launch_keys_missing"], serde_json::json!([]), "{v}");
    // doctor judges installs: on a simulation's database it says what the database is, red.
    let out = f.cmd(&["doctor", "--json"]);
    assert_eq!(out.code, 1, "{}", out.stdout);
    let doctor = out.json();
    let database = doctor["checks"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == "database"))
        .unwrap_or_else(|| panic!("no database check: {doctor}"));
    assert_eq!(database["ok"], false, "{database}");
    let detail = database["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("a simulation's database (scenario incident, seed 1"),
        "{database}"
    );
    // A kept config this version cannot read: this host's is judged, and the line says why.
    f.db()
        .execute(
            "UPDATE sim_config SET config = '[policy]\nno_such_key = 1\n'",
            [],
        )
        .unwrap();
    let v = f.inspect();
    assert_eq!(v["sim"]["config"], "host", "{}", v["sim"]);
    let why = v["sim"]["config_error"].as_str().unwrap_or_default();
    assert!(why.contains("no_such_key"), "{why}");
    assert!(
        v["launch_keys_missing"]
            .as_array()
            .is_some_and(|k| k.iter().any(|k| k == "vast.image")),
        "{v}"
    );
    let text = f.cmd(&["inspect"]).ok().stdout;
    assert!(
        config_line(&text).contains("this host's, not the one the simulation ran with")
            && config_line(&text).contains("no_such_key"),
        "{text}"
    );
    // What acts or records refuses it: its instances are the simulator's, its install id
    // every simulation's (a real pass would count them as the fleet).
    let refused = |f: &Fleet, args: &[&str], which: &str| {
        f.refused(args, &format!(
            "is a simulation's database{which}, written by `fleetagent sim --state-dir`, not an install's: refusing to act on it"
        ));
    };
    let runs = f.count("SELECT COUNT(*) FROM runs");
    for args in [
        &["run"][..],
        &["trigger", "-p", "1", "-r", "x"],
        &["init"],
        &["pause", "--reason", "x"],
    ] {
        refused(&f, args, " (scenario incident, seed 1)");
    }
    assert_eq!(f.count("SELECT COUNT(*) FROM runs"), runs, "a run went on");
    // Its instances are the simulator's: listed from its table, vast.ai not asked.
    let listed = f.cmd(&["instances", "list", "--json"]).ok();
    assert_eq!(listed.json()["offline"], true, "{}", listed.stdout);
    assert!(
        listed.stderr.contains("a simulation's database"),
        "{}",
        listed.stderr
    );
    // A simulation's database from before the config was kept: this host's, said so, and
    // still refused by its install id.
    f.db().execute("DELETE FROM sim_config", []).unwrap();
    let text = f.cmd(&["inspect"]).ok().stdout;
    assert!(config_line(&text).contains("kept no config"), "{text}");
    refused(&f, &["run"], "");
    let svg = f.path().join("sim.svg");
    let plotted = f
        .cmd(&["inspect", "--plot", svg.to_str().unwrap(), "--hours", "48"])
        .ok();
    assert!(!plotted.stderr.contains("no samples"), "{}", plotted.stderr);

    // An install's database is read at the wall clock: the same samples are history long
    // gone, and the profile has none of them.
    f.db()
        .execute(
            "UPDATE agent_state SET install_id = 'abcdef' WHERE id = 1",
            [],
        )
        .unwrap();
    let v = f.inspect();
    assert_ne!(v["now"], at_end.format("%Y-%m-%dT%H:%M:%SZ").to_string());
    assert_eq!(v["day"]["history_hours"], 0.0, "{}", v["day"]);
    assert!(!f
        .cmd(&["inspect"])
        .ok()
        .stdout
        .contains("simulation's database"));
}
