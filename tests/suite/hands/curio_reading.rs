//! How the Curio reading is used, with the real binary: the `command` demand source (a file
//! the test rewrites between passes) and the fake vast.ai. Orphans and stale rows launch
//! nothing and are shown; ProofShare disabled launches nothing and says so; a silent worker
//! is flagged and destroyed; two instances behind one Curio machine are reported; `inspect
//! --json` carries the reading; learned rates are kept, shown and rank the offers.

use serde_json::{json, Value};

use crate::common::fake_vast::{FakeVast, FAKE_API_KEY};
use crate::common::fleet::{Fleet, FAST_CONFIG};

/// Launch-ready, no target (no seed instance), two GPUs none of them pinned (20/h each).
const POLICY: &str = r#"
[vast.offers]
gpu_names = ["RTX 4090", "RTX 3090"]
[policy]
target_proofs_per_hour = 0
proofs_per_hour_per_instance = 20
max_dph_total = 10.0
max_instances = 8
silent_worker_mins = 20
"#;

struct Rig {
    f: Fleet,
    fake: FakeVast,
}

impl Rig {
    fn new() -> Rig {
        let fake = FakeVast::start_real_time();
        let f = Fleet::new().env("VAST_API_KEY", FAKE_API_KEY);
        let file = f.path().join("demand.json");
        std::fs::write(
            &file,
            r#"{"pending":0,"running":0,"completed_1h":0,"completed_15m":0}"#,
        )
        .unwrap();
        f.write_config(&format!(
            "{FAST_CONFIG}\n[vast]\nbase_url = \"{}\"\nimage = \"ghcr.io/example/curio-psprove:latest\"\n\
             [demand]\nsource = \"command\"\ncommand = \"cat {}\"\n{POLICY}",
            fake.url(),
            file.display()
        ));
        Rig { f, fake }
    }

    fn demand(&self, d: Value) {
        std::fs::write(self.f.path().join("demand.json"), d.to_string()).unwrap();
    }

    /// One pass of the rules (an event, then `run`).
    fn pass(&self) {
        self.f.cmd(&["trigger", "-p", "1", "-r", "look"]).ok();
        self.f.cmd(&["run"]).ok();
    }

    fn launches(&self) -> i64 {
        self.f
            .count("SELECT COUNT(*) FROM actions WHERE kind = 'launch'")
    }

    fn last_observation(&self) -> String {
        self.f.inspect()["last_observation"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }
}

#[test]
fn orphan_tasks_and_stale_rows_launch_nothing_and_are_shown() {
    let r = Rig::new();
    r.fake.add_offer("RTX 4090", 0.4, 0.99);
    r.demand(
        json!({"pending": 3, "running": 0, "completed_1h": 0, "completed_15m": 0,
        "ps_waiting": 0, "ps_computing": 0, "backlog": 0,
        "orphan_tasks": 3, "orphan_oldest_secs": 93_600,
        "stale_waiting": 2, "stale_oldest_secs": 200_000,
        "proofshare_enabled": true, "request_loop": "ok"}),
    );
    r.pass();
    assert_eq!(r.launches(), 0, "{}", r.last_observation());
    assert!(r.fake.instance_ids().is_empty());
    let history = r.f.cmd(&["history"]).ok().stdout;
    assert!(
        history.contains("Not work, no emergency: 3 orphan PSProve task(s) with no queue row (oldest 1d02h), 2 stale waiting row(s) (oldest 2d07h)"),
        "{history}"
    );
    assert!(!history.contains("WORKERS DEAD"), "{history}");
    let d = r.f.inspect()["demand"].clone();
    assert_eq!(
        (d["orphan_tasks"].as_u64(), d["backlog"].as_u64()),
        (Some(3), Some(0))
    );
    let text = r.f.cmd(&["inspect"]).ok().stdout;
    assert!(text.contains("orphans 3"), "{text}");
}

#[test]
fn proofshare_disabled_launches_nothing_and_says_so() {
    let r = Rig::new();
    r.fake.add_offer("RTX 4090", 0.4, 0.99);
    // Work that would be WORKERS DEAD, and a target that would seed an instance.
    r.f.write_config(
        &std::fs::read_to_string(&r.f.config)
            .unwrap()
            .replace("target_proofs_per_hour = 0", "target_proofs_per_hour = 100"),
    );
    r.demand(
        json!({"pending": 5, "running": 0, "completed_1h": 0, "completed_15m": 0,
        "ps_waiting": 4, "stale_waiting": 4, "stale_oldest_secs": 400_000,
        "proofshare_enabled": false, "request_loop": "none",
        "notes": ["curio.harmony_machines.unschedulable does not exist (a Curio before its migration 20250111-machine-maintenance)"]}),
    );
    r.pass();
    r.pass();
    assert_eq!(r.launches(), 0, "{}", r.last_observation());
    let obs = r.last_observation();
    assert!(
        obs.contains("ProofShare disabled: no work will come"),
        "{obs}"
    );
    assert!(!obs.contains("WORKERS DEAD"), "{obs}");
    let v = r.f.inspect();
    assert_eq!(v["demand"]["proofshare_enabled"], false);
    assert_eq!(v["demand"]["request_loop"], "none");
    // What the reading could not read is in inspect too, not only in the observation.
    let note = "curio.harmony_machines.unschedulable does not exist";
    assert!(
        v["demand_notes"][0]
            .as_str()
            .unwrap_or_default()
            .starts_with(note),
        "{v:#}"
    );
    let text = r.f.cmd(&["inspect"]).ok().stdout;
    assert!(text.contains(&format!("  note: {note}")), "{text}");
    assert!(
        text.contains("proofshare DISABLED (no work will come)"),
        "{text}"
    );
}

#[test]
fn doctor_names_proofshare_disabled_while_ours_bill_a_stalled_loop_and_missing_grants() {
    let r = Rig::new();
    r.fake.add_instance("fleetagent-d1");
    r.demand(
        json!({"pending": 0, "running": 0, "completed_1h": 0, "completed_15m": 0,
        "proofshare_enabled": false, "request_loop": "stalled",
        "notes": ["no SELECT on curio.proofshare_provider_payments: paid_1h unknown"]}),
    );
    r.pass();
    let out = r.f.cmd(&["doctor"]).code(1).stdout;
    assert!(
        out.contains("Curio: ProofShare is disabled") && out.contains("1 instance(s) of ours bill"),
        "{out}"
    );
    assert!(out.contains("request loop is stalled"), "{out}");
    assert!(
        out.contains("no SELECT on curio.proofshare_provider_payments"),
        "{out}"
    );
}

#[test]
fn a_silent_worker_is_flagged_and_destroyed() {
    let r = Rig::new();
    let id = r.fake.add_instance("fleetagent-s1");
    let live = |running: u32| {
        json!({"pending": 4, "running": running, "completed_1h": 0, "completed_15m": 0,
            "backlog": 4, "proofshare_enabled": true, "request_loop": "ok",
            "workers": [{"machine_name": "fleetagent-s1", "host_and_port": "172.17.0.2:12300",
                         "running": running, "cordoned": false}]})
    };
    r.demand(live(0));
    r.pass();
    assert_eq!(r.fake.instance_ids(), vec![id], "young: kept");
    // As 30 minutes of passes would leave it: registered, work waiting all along.
    let db = r.f.db();
    db.execute_batch(
        "UPDATE instances SET state_since = state_since - 1800000, created_at = created_at - 1800000;
         UPDATE agent_state SET work_waiting_since = work_waiting_since - 1800000;",
    )
    .unwrap();
    drop(db);
    r.pass();
    assert!(r.fake.instance_ids().is_empty(), "{}", r.last_observation());
    let (reason, detail, flag): (String, String, Option<String>) = r
        .f
        .db()
        .query_row(
            "SELECT reason, detail, flag FROM actions WHERE kind IN ('stop', 'destroy') AND instance_id = ?1",
            [id as i64],
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
        )
        .unwrap();
    assert!(reason.contains("is silent 30m"), "{reason}");
    assert!(detail.starts_with("flagged (silent 30m)"), "{detail}");
    // The breaker counts it by its typed column.
    assert_eq!(flag.as_deref(), Some("silent"));
}

/// Three silent workers destroyed within 6 hours: the next one is not destroyed (a cause that
/// is not the host would make every replacement silent too), and `doctor` says why.
#[test]
fn after_three_silent_destroys_in_six_hours_the_next_silent_worker_is_kept_and_doctor_says_why() {
    let r = Rig::new();
    let id = r.fake.add_instance("fleetagent-s2");
    r.demand(
        json!({"pending": 4, "running": 0, "completed_1h": 0, "completed_15m": 0,
        "backlog": 4, "proofshare_enabled": true, "request_loop": "ok",
        "workers": [{"machine_name": "fleetagent-s2", "host_and_port": "172.17.0.3:12300",
                     "running": 0, "cordoned": false}]}),
    );
    r.pass();
    let db = r.f.db();
    db.execute_batch(
        "UPDATE instances SET state_since = state_since - 1800000, created_at = created_at - 1800000;
         UPDATE agent_state SET work_waiting_since = work_waiting_since - 1800000;",
    )
    .unwrap();
    // The clock of the passes: the last run's start.
    let now: i64 = db
        .query_row("SELECT max(started_at) FROM runs", [], |row| row.get(0))
        .unwrap();
    for (i, ago_mins) in [(1, 30_i64), (2, 90), (3, 200)] {
        db.execute(
            "INSERT INTO actions (kind, outcome, actor, instance_id, label, reason, detail, created_at,
                                  flag)
             VALUES ('destroy', 'ok', 'rules', ?1, ?2, 'rules: flagged', ?3, ?4, 'silent')",
            rusqlite::params![
                9_000 + i,
                format!("fleetagent-old{i}"),
                format!("flagged (silent {}m): earned nothing", 20 + i),
                now - ago_mins * 60_000
            ],
        )
        .unwrap();
    }
    drop(db);
    r.pass();
    assert_eq!(r.fake.instance_ids(), vec![id], "{}", r.last_observation());
    let doc = r.f.cmd(&["doctor"]).code(1).stdout;
    assert!(
        doc.contains("3 silent workers (heartbeat and no proof while work waited, or the worker gone from a running container) were destroyed in the last 6 h"),
        "{doc}"
    );
}

#[test]
fn two_instances_behind_one_curio_machine_are_reported_by_doctor_and_inspect() {
    let r = Rig::new();
    r.fake.add_instance("fleetagent-a");
    r.fake.add_instance("fleetagent-b");
    let worker = |name: &str| {
        json!({"pending": 0, "running": 0, "completed_1h": 0, "completed_15m": 0,
            "workers": [{"machine_name": name, "host_and_port": "172.17.0.2:12300",
                         "running": 0, "cordoned": false}]})
    };
    r.demand(worker("fleetagent-a"));
    r.pass();
    // b started later with the same private address: Curio's one machine row is b's now.
    r.demand(worker("fleetagent-b"));
    r.pass();
    let want = "instances \"fleetagent-a\" and \"fleetagent-b\" are behind one Curio machine at \"172.17.0.2:12300\"";
    let doc = r.f.cmd(&["doctor"]).code(1);
    let lines: Vec<&str> = doc
        .stdout
        .lines()
        .chain(doc.stderr.lines())
        .filter(|l| l.contains(want))
        .collect();
    assert_eq!(lines.len(), 1, "{}\n{}", doc.stdout, doc.stderr);
    assert!(lines[0].contains("docs/worker-image.md"), "{}", lines[0]);
    let v = r.f.inspect();
    let ids = v["worker_identity"].as_array().unwrap();
    assert!(
        ids.iter().any(|l| l.as_str().unwrap().starts_with(want)),
        "{ids:?}"
    );
    let text = r.f.cmd(&["inspect"]).ok().stdout;
    assert!(text.contains(&format!("identity    {want}")), "{text}");
}

#[test]
fn inspect_json_demand_has_designs_fields_and_is_null_before_any_reading() {
    let r = Rig::new();
    r.f.cmd(&["init"]).ok();
    assert_eq!(r.f.inspect()["demand"], Value::Null);
    r.demand(json!({"pending": 6, "running": 2, "running_stale": 1, "completed_1h": 9,
        "completed_15m": 2, "backlog": 5, "orphan_tasks": 1, "paid_1h": 7, "pow_1h": 1,
        "proofshare_enabled": true, "request_loop": "stalled",
        "ask_price_attofil": "5000000000000000",
        "workers": [{"machine_name": "m1", "host_and_port": "10.0.0.1:12300", "running": 2, "cordoned": false},
                    {"machine_name": "m2", "host_and_port": "10.0.0.2:12300", "running": 0, "cordoned": true}]}));
    r.pass();
    let d = r.f.inspect()["demand"].clone();
    let mut keys: Vec<&str> = d.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort();
    let mut want = vec![
        "backlog",
        "pending",
        "running",
        "running_stale",
        "live_workers",
        "orphan_tasks",
        "completed_1h",
        "paid_1h",
        "proofshare_enabled",
        "request_loop",
        "ask_price_attofil",
        "measured_rates",
        "read_at",
        "error",
    ];
    want.sort();
    assert_eq!(keys, want);
    assert_eq!(d["backlog"], 5);
    assert_eq!(d["pending"], 6);
    assert_eq!(d["running"], 2);
    assert_eq!(d["running_stale"], 1);
    assert_eq!(d["live_workers"], 1);
    assert_eq!(d["orphan_tasks"], 1);
    assert_eq!(d["completed_1h"], 9);
    assert_eq!(d["paid_1h"], 7);
    assert_eq!(d["proofshare_enabled"], true);
    assert_eq!(d["request_loop"], "stalled");
    assert_eq!(d["ask_price_attofil"], "5000000000000000");
    assert_eq!(d["measured_rates"], json!({}));
    assert_eq!(d["error"], Value::Null);
    let read_at = d["read_at"].as_str().unwrap().to_string();
    assert!(read_at.ends_with('Z') && read_at.contains('T'), "{read_at}");
    let obs = r.last_observation();
    assert!(
        obs.contains("request loop STALLED")
            && obs.contains("(0.005 FIL)")
            && obs.contains("paid 7 of 9 completed in the last hour, 1 proof of work"),
        "{obs}"
    );
    // A failed probe: the last reading stays, with the error of the last attempt.
    std::fs::write(r.f.path().join("demand.json"), "not json").unwrap();
    r.pass();
    let d = r.f.inspect()["demand"].clone();
    assert_eq!(d["pending"], 6);
    assert_eq!(d["read_at"], read_at.as_str());
    assert!(
        d["error"].as_str().unwrap().contains("not valid JSON"),
        "{d}"
    );
}

#[test]
fn learned_rates_are_kept_shown_and_rank_the_offers() {
    let r = Rig::new();
    let dph_4090 = r.fake.add_offer("RTX 4090", 0.50, 0.99);
    let dph_3090 = r.fake.add_offer("RTX 3090", 0.40, 0.99);
    let g1 = r.fake.add_instance("fleetagent-g1");
    // 61 proofs in the hour: 60/h measured for its RTX 4090.
    r.demand(json!({"pending": 0, "running": 1, "completed_1h": 61, "completed_15m": 15,
        "workers": [{"machine_name": "fleetagent-g1", "host_and_port": "10.0.0.1:12300", "running": 1, "cordoned": false}],
        "history": [{"host_and_port": "10.0.0.1:12300", "proofs": 61, "first_end_secs_ago": 3630, "last_end_secs_ago": 30}]}));
    r.pass();
    let v = r.f.inspect();
    assert_eq!(v["demand"]["measured_rates"], json!({"RTX 4090": 60.0}));
    let rates = v["gpu_rates"].as_array().unwrap();
    let g4090 = rates.iter().find(|x| x["gpu_name"] == "RTX 4090").unwrap();
    assert_eq!(
        (
            &g4090["measured"],
            &g4090["configured"],
            &g4090["used"],
            &g4090["source"]
        ),
        (&json!(60.0), &json!(20.0), &json!(60.0), &json!("measured"))
    );
    let text = r.f.cmd(&["inspect"]).ok().stdout;
    assert!(
        text.contains("RTX 4090: measured 60 over 61 proofs configured 20 -> uses 60 (measured)"),
        "{text}"
    );
    // The instance exits and the workers are gone: WORKERS DEAD, with no history this
    // pass. The kept rate ranks the offers: $0.50/60 per proof beats $0.40/20.
    r.fake.set_actual_status(g1, Some("exited"));
    r.demand(json!({"pending": 5, "running": 0, "completed_1h": 0, "completed_15m": 0}));
    r.pass();
    assert!(r.fake.offer_rented(dph_4090), "{}", r.last_observation());
    assert!(!r.fake.offer_rented(dph_3090));
    assert_eq!(
        r.f.inspect()["demand"]["measured_rates"],
        json!({"RTX 4090": 60.0})
    );
    // Measured 7 hours ago and not since: it no longer counts (one slow host's rate kept for
    // ever refused every later rental of its GPU, and nothing ran to measure it again).
    r.f.db()
        .execute(
            "UPDATE measured_rates SET updated_at = updated_at - 7 * 3600 * 1000",
            [],
        )
        .unwrap();
    let v = r.f.inspect();
    let g4090 = v["gpu_rates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["gpu_name"] == "RTX 4090")
        .unwrap()
        .clone();
    assert_eq!(
        (&g4090["measured"], &g4090["used"], &g4090["source"]),
        (&json!(60.0), &json!(20.0), &json!("default"))
    );
    let text = r.f.cmd(&["inspect"]).ok().stdout;
    assert!(
        text.contains("RTX 4090: measured 60 over 61 proofs 7h00m ago (counts for 6h00m after it is measured) configured 20 -> uses 20 (default)"),
        "{text}"
    );
}

/// A drill: every host's image pull failed (vast.ai listed each instance loading with "pull
/// access denied"), and fleetagent rented, waited, destroyed and rented the next, 12 rentals
/// with none booting, `doctor` green and vast.ai's reason nowhere an operator reads. After
/// three rentals in a row that never booted a worker (the boot breaker), launches go one at
/// a time; the destroy's detail and `doctor` carry vast.ai's reason; the next rental that
/// has a worker ends it.
#[test]
fn rentals_that_never_boot_are_rented_one_at_a_time_and_named_in_vast_ais_words() {
    let r = Rig::new();
    r.fake.add_offers(4, "RTX 4090", 0.4, 0.99);
    let stuck = r.fake.add_instance("fleetagent-p1");
    r.fake.set_actual_status(stuck, Some("loading"));
    r.fake.set_status_msg(
        stuck,
        Some("pull access denied for ghcr.io/example/curio-psprove"),
    );
    // 60 queued, every worker dead: the rules want 3 instances (20 proofs/h each).
    r.demand(
        json!({"pending": 60, "running": 0, "completed_1h": 0, "completed_15m": 0,
        "backlog": 60, "proofshare_enabled": true, "request_loop": "ok", "workers": []}),
    );
    r.f.write_config(&std::fs::read_to_string(&r.f.config).unwrap().replace(
        "max_instances = 8",
        "max_instances = 8\nemergency_launch_max = 3\nlaunch_window_max = 3",
    ));
    // Hold the first pass's launches (the instance is young and loading): only adopt it.
    r.f.cmd(&["pause", "--reason", "adopt first"]).ok();
    r.pass();
    r.f.cmd(&["resume"]).ok();
    let db = r.f.db();
    db.execute(
        "UPDATE instances SET created_at = created_at - 2400000, state_since = state_since - 2400000
          WHERE label = 'fleetagent-p1'",
        [],
    )
    .unwrap();
    let now: i64 = db
        .query_row("SELECT max(started_at) FROM runs", [], |row| row.get(0))
        .unwrap();
    // Two rentals before it ended the same way.
    for (i, ago_mins) in [(1, 40_i64), (2, 90)] {
        db.execute(
            "INSERT INTO actions (kind, outcome, actor, instance_id, label, reason, detail, created_at,
                                  flag)
             VALUES ('destroy', 'ok', 'rules', ?1, ?2, 'rules: flagged', ?3, ?4, 'loading')",
            rusqlite::params![
                9_000 + i,
                format!("fleetagent-old{i}"),
                "flagged (loading 30m): earned nothing",
                now - ago_mins * 60_000
            ],
        )
        .unwrap();
    }
    drop(db);
    r.pass();
    // The third: destroyed with vast.ai's reason, then one rental, not three.
    let detail: String =
        r.f.db()
            .query_row(
                "SELECT detail FROM actions WHERE kind = 'destroy' AND label = 'fleetagent-p1'",
                [],
                |row| row.get(0),
            )
            .unwrap();
    assert_eq!(
        detail,
        "flagged (loading 40m): earned nothing (vast.ai: \"pull access denied for ghcr.io/example/curio-psprove\")"
    );
    let created = |r: &Rig| {
        r.f.count("SELECT COUNT(*) FROM actions WHERE kind = 'launch' AND outcome = 'ok'")
    };
    let held = |r: &Rig| {
        r.f.count("SELECT COUNT(*) FROM actions WHERE kind = 'launch' AND outcome = 'refused' AND code = 'boot_failures'")
    };
    assert_eq!(created(&r), 1, "{}", r.last_observation());
    assert_eq!(held(&r), 2);
    let doc = r.f.cmd(&["doctor"]).code(1).stdout;
    assert!(
        doc.contains("the last 3 rentals of ours never booted a Curio worker, the newest ")
            && doc.contains("pull access denied")
            && doc.contains("has a Curio worker"),
        "{doc}"
    );
    // The next pass waits for that one (WORKERS DEAD asks once: the refusal is on record).
    r.pass();
    assert_eq!(created(&r), 1);
    assert_eq!(held(&r), 3);
    // It boots and its worker registers: the row ends, doctor clears.
    let label: String =
        r.f.db()
            .query_row(
                "SELECT label FROM instances WHERE gone_at IS NULL AND label != 'fleetagent-p1'",
                [],
                |row| row.get(0),
            )
            .unwrap();
    r.demand(
        json!({"pending": 60, "running": 1, "completed_1h": 0, "completed_15m": 0,
        "backlog": 59, "proofshare_enabled": true, "request_loop": "ok",
        "workers": [{"machine_name": label, "host_and_port": "172.17.0.9:12300",
                     "running": 1, "cordoned": false}]}),
    );
    r.pass();
    let doc = r.f.cmd(&["doctor", "--json"]).json();
    let check = doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "boot_failures")
        .unwrap()
        .clone();
    assert_eq!(check["ok"], true, "{check}");
}

/// A drill: an instance vast.ai runs whose Curio worker never appeared billed on, counted as
/// capacity. Past a boot and a worker's start (`stuck_loading_mins` + `silent_worker_mins`
/// from its launch) it is flagged `unbooted` and destroyed.
#[test]
fn an_instance_running_without_ever_a_worker_is_destroyed() {
    let r = Rig::new();
    let id = r.fake.add_instance("fleetagent-nw");
    r.demand(
        json!({"pending": 0, "running": 0, "completed_1h": 0, "completed_15m": 0,
        "proofshare_enabled": true, "request_loop": "ok", "workers": []}),
    );
    r.pass();
    assert_eq!(r.fake.instance_ids(), vec![id]);
    r.f.db()
        .execute(
            "UPDATE instances SET created_at = created_at - 3300000, state_since = state_since - 3300000",
            [],
        )
        .unwrap();
    r.pass();
    assert!(r.fake.instance_ids().is_empty(), "{}", r.last_observation());
    let (detail, flag): (String, String) =
        r.f.db()
            .query_row(
                "SELECT detail, flag FROM actions WHERE kind = 'destroy'",
                [],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .unwrap();
    assert_eq!(flag, "unbooted");
    assert!(
        detail.starts_with("flagged (unbooted 5")
            && detail.contains("vast.ai runs it and no Curio worker appeared"),
        "{detail}"
    );
}

/// A re-test: an instance the operator stopped in vast.ai's console and started again there
/// (no `start` of ours) was destroyed in the first pass that saw it loading, as `loading
/// 2h00m`, timed from its rental. Its boot is timed from when it left the pause.
#[test]
fn an_instance_started_again_by_hand_is_timed_from_its_start() {
    let r = Rig::new();
    let id = r.fake.add_instance("fleetagent-hand");
    r.demand(
        json!({"pending": 0, "running": 0, "completed_1h": 0, "completed_15m": 0,
        "proofshare_enabled": true, "request_loop": "ok", "workers": []}),
    );
    r.fake.set_actual_status(id, Some("stopped"));
    r.pass();
    r.f.db()
        .execute(
            "UPDATE instances SET created_at = created_at - 7200000, state_since = state_since - 3600000",
            [],
        )
        .unwrap();
    r.fake.set_actual_status(id, Some("loading"));
    r.pass();
    assert_eq!(r.fake.instance_ids(), vec![id], "{}", r.last_observation());
    assert_eq!(
        r.f.count("SELECT COUNT(*) FROM actions WHERE kind = 'destroy'"),
        0
    );
}
