use std::path::Path;

use super::agent::{overruled, uncalibrated, SHORT_CALLS};
use super::*;
use crate::lock::Holder;
use crate::store::ops::{self, ForeignInstance, Pause};
use crate::store::runs::{self, ActionCounts, Outcome, StartedBy, Verdict};
use crate::store::test_store;

const NOW: Millis = 1_800_000_000_000;
const MIN: Millis = 60_000;

fn env() -> crate::env::Env {
    crate::env::Env::from_pairs(
        [
            ("VAST_API_KEY", "k"),
            ("FLEETAGENT_LLM_API_KEY", "k"),
            ("FLEETAGENT_HARMONYDB_URL", "postgres://curio@db/c"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string())),
    )
}

fn run_checks(dir: &Path, config: &Config) -> Vec<Check> {
    checks(&Inputs {
        config_path: Path::new("/etc/fleetagent/config.toml"),
        config_found: true,
        config,
        env: &env(),
        state_dir: dir,
        now: NOW,
        units: None,
    })
    .0
}

fn check<'a>(all: &'a [Check], name: &str) -> &'a Check {
    all.iter().find(|c| c.name == name).unwrap()
}

#[test]
fn a_model_overruled_on_most_passes_is_reported_with_the_figure() {
    assert_eq!(overruled(0, 100), None);
    assert_eq!(overruled(5, 10), None, "half is not most");
    assert_eq!(overruled(2, 2), None, "too few passes to judge");
    let line = overruled(14, 20).unwrap().line();
    assert!(
        line.starts_with(
            "the floor overruled the model on 14 of its 20 passes in the last day (70%)"
        ),
        "{line}"
    );
    assert!(line.contains("; fix: check llm.model"), "{line}");
}

#[test]
fn a_tokenizer_ratio_is_a_problem_only_where_the_calibration_does_not_cover_it() {
    let model = "qwen2.5-coder-0.5b";
    // Our estimate over-counts, or the calibrated budget and its margin absorb the ratio.
    assert_eq!(uncalibrated(model, 0.9, 10, None), None);
    assert_eq!(uncalibrated(model, 1.04, 10, None), None, "the 5 % margin");
    assert_eq!(uncalibrated(model, 1.166, 10, Some(1.19)), None);
    assert_eq!(uncalibrated(model, 1.24, 10, Some(1.19)), None);
    // Beyond it: one line with the figure and the model.
    let line = uncalibrated(model, 1.166, 12, None).unwrap().line();
    assert!(
        line.starts_with(
            "the model's tokenizer counts up to 1.166x our estimate (qwen2.5-coder-0.5b, over the last 12 calls that reported usage) and the budget is not calibrated for llm.model \"qwen2.5-coder-0.5b\""
        ),
        "{line}"
    );
    let line = uncalibrated(model, 1.5, 50, Some(1.19)).unwrap().line();
    assert!(line.contains("calibrated for 1.190x only"), "{line}");
    assert!(!line.contains('\n'));
}

#[test]
fn a_read_only_or_full_file_system_is_named_with_its_fix() {
    let dir = Path::new("/var/lib/fleetagent");
    assert!(space_ok(dir));
    let ro = host::space_problems(dir, true, 1 << 40, Some(1 << 20));
    assert_eq!(ro.len(), 1);
    assert!(
        ro[0].detail.contains("read-only file system") && ro[0].line().contains("remount,rw"),
        "{ro:?}"
    );
    let full = host::space_problems(dir, false, 10 << 20, Some(10));
    assert_eq!(full.len(), 2, "{full:?}");
    assert!(
        full[0].detail.contains("10 MiB free (below 100 MiB)"),
        "{full:?}"
    );
    assert!(full[1].detail.contains("10 free inodes"), "{full:?}");
    // A file system that does not count inodes (btrfs: 0 of 0) is not "out of inodes".
    assert!(host::space_problems(dir, false, MIN_FREE_BYTES, None).is_empty());
}

fn space_ok(dir: &Path) -> bool {
    host::space_problems(dir, false, 1 << 40, Some(1 << 20)).is_empty()
}

/// A `--user` install's units answer from the user manager, whose journal and timers the
/// system's `journalctl -u` and `systemctl list-timers` do not show: the fixes say `--user`.
#[test]
fn fixes_name_the_user_manager_for_a_user_install() {
    let (dir, _s) = test_store(NOW);
    let config = Config::default();
    let fix_of_last_success = |manager: &str| {
        let units =
            serde_json::json!({"fleetagent.timer": {"manager": manager, "load_state": "loaded"}});
        let all = checks(&Inputs {
            config_path: Path::new("/etc/fleetagent/config.toml"),
            config_found: true,
            config: &config,
            env: &env(),
            state_dir: dir.path(),
            now: NOW,
            units: Some(&units),
        })
        .0;
        check(&all, "last_success").problems[0].fix.clone().unwrap()
    };
    let user = fix_of_last_success("user");
    assert!(
        user.contains("`journalctl --user-unit fleetagent`"),
        "{user}"
    );
    let system = fix_of_last_success("system");
    assert!(system.contains("`journalctl -u fleetagent`"), "{system}");
    assert_eq!(for_the_user_manager(&system), user);
    assert_eq!(
        for_the_user_manager("check the timer (`systemctl list-timers fleetagent.timer`)"),
        "check the timer (`systemctl --user list-timers fleetagent.timer`)"
    );
}

/// Every check by name, once, in `CHECKS` order; a healthy, fresh database fails only the
/// checks that must (no run yet), and the JSON carries each check's fields.
#[test]
fn every_check_is_reported_by_name_and_a_broken_database_skips_the_rest() {
    let mut unique = CHECKS.to_vec();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), CHECKS.len(), "a check name is repeated");

    let (dir, _s) = test_store(NOW);
    let config = Config::default();
    let all = run_checks(dir.path(), &config);
    let names: Vec<&str> = all.iter().map(|c| c.name).collect();
    assert_eq!(names, CHECKS);
    let failing: Vec<&str> = all.iter().filter(|c| !c.ok()).map(|c| c.name).collect();
    // Config::default() has no caps and no image (config) and no price, no run has happened
    // yet (last_success); every secret is set; the rest pass.
    assert_eq!(failing, ["config", "last_success", "price"], "{all:#?}");
    let v = json(&all);
    assert_eq!(v["ok"], false);
    let last = &v["checks"][6];
    assert_eq!(last["name"], "last_success");
    assert_eq!(
        (last["ok"].as_bool(), last["since"].is_null()),
        (Some(false), true)
    );
    assert_eq!(last["detail"], "no successful run yet");
    assert!(last["fix"].as_str().unwrap().contains("fleetagent.timer"));
    let vast = &v["checks"][10];
    assert_eq!(
        vast,
        &serde_json::json!({"name": "vast", "ok": true, "since": null, "detail": null, "fix": null})
    );

    // No database: the database check says so, the checks that read it are "not checked".
    let empty = tempfile::tempdir().unwrap();
    let all = run_checks(empty.path(), &config);
    let db = check(&all, "database");
    assert!(
        db.problems[0].line().contains(&format!(
            "fix: run `fleetagent --config /etc/fleetagent/config.toml --state-dir {} init`",
            empty.path().display()
        )),
        "{db:?}"
    );
    let runs = check(&all, "runs");
    assert!(!runs.ok());
    assert_eq!(
        runs.json()["detail"],
        "not checked: the database cannot be read (see the database check)"
    );
    assert!(
        check(&all, "units").ok(),
        "no service manager: nothing to say"
    );
}

fn finished(s: &crate::store::Store, verdict: Verdict, counts: ActionCounts, at: Millis) -> i64 {
    let id = runs::create(&s.conn, 1, 1, 1, StartedBy::Tick, at - MIN).unwrap();
    let o = Outcome {
        verdict,
        actions: counts,
        ..Outcome::new(false)
    };
    runs::finish_ok(&s.conn, id, &o, at).unwrap();
    id
}

#[test]
fn a_create_forbidden_names_the_keys_write_permission() {
    let (_dir, s) = test_store(NOW);
    let counts = ActionCounts {
        ok: 0,
        refused: 0,
        failed: 1,
    };
    let run = finished(&s, Verdict::ActionFailed, counts, NOW - 5 * MIN);
    let forbidden = crate::store::actions::NewAction {
        run_id: Some(run),
        kind: "launch",
        outcome: "failed",
        actor: "rules",
        detail: Some("vast.ai HTTP 403 not_authorized: key lacks permission"),
        ..Default::default()
    };
    crate::store::actions::insert(&s.conn, &forbidden, NOW - 5 * MIN).unwrap();
    let line = agent::actions(&s.conn, NOW)[0].line();
    assert!(
        line.contains("fix: vast.ai forbids the key that (HTTP 403)"),
        "{line}"
    );
}

#[test]
fn a_pass_whose_calls_all_failed_and_failed_runs_of_the_last_hour_are_problems() {
    let (_dir, s) = test_store(NOW);
    assert!(agent::actions(&s.conn, NOW).is_empty(), "no pass yet");
    // A pass whose launches all failed at vast.ai, with its ledger rows.
    let run = finished(
        &s,
        Verdict::ActionFailed,
        ActionCounts {
            ok: 0,
            refused: 1,
            failed: 2,
        },
        NOW - 5 * MIN,
    );
    for (outcome, detail) in [
        ("refused", "budget"),
        ("failed", "vast.ai HTTP 500 server_error: boom"),
    ] {
        crate::store::actions::insert(
            &s.conn,
            &crate::store::actions::NewAction {
                run_id: Some(run),
                kind: "launch",
                outcome,
                actor: "rules",
                detail: Some(detail),
                ..Default::default()
            },
            NOW - 5 * MIN,
        )
        .unwrap();
    }
    let p = agent::actions(&s.conn, NOW);
    assert_eq!(p.len(), 1, "{p:?}");
    let line = p[0].line();
    assert!(
        line.starts_with(&format!("the last pass (run {run}, 5m ago) changed nothing: its 2 launch(es) or stop(s) failed at vast.ai, 1 refused by a guardrail; the first, a launch: vast.ai HTTP 500 server_error: boom")),
        "{line}"
    );
    assert!(line.contains(&format!("history --run {run}")), "{line}");
    assert_eq!(p[0].since, Some(NOW - 5 * MIN));
    // A create of that pass that may have gone through (its intent still open) is said; once
    // a later pass finds its label and settles it ok, the pass did change the fleet.
    let intent = crate::store::actions::insert(
        &s.conn,
        &crate::store::actions::NewAction {
            run_id: Some(run),
            kind: "launch",
            outcome: "intent",
            actor: "rules",
            label: Some("fleetagent-r1-0a0b0c0d"),
            ..Default::default()
        },
        NOW - 5 * MIN,
    )
    .unwrap();
    let p = agent::actions(&s.conn, NOW);
    assert!(
        p[0].line()
            .contains("1 of them may have gone through unanswered"),
        "{p:?}"
    );
    s.conn
        .execute("UPDATE actions SET outcome = 'ok' WHERE id = ?1", [intent])
        .unwrap();
    assert!(agent::actions(&s.conn, NOW).is_empty(), "settled ok later");
    s.conn
        .execute(
            "UPDATE actions SET outcome = 'intent' WHERE id = ?1",
            [intent],
        )
        .unwrap();
    // Refused by guardrails only is the guardrails working, not a problem; a later pass that
    // did something clears it.
    finished(
        &s,
        Verdict::ActionRefused,
        ActionCounts::default(),
        NOW - 4 * MIN,
    );
    assert!(agent::actions(&s.conn, NOW).is_empty());

    // Runs: two failures in the last hour (the latest run ok), one long before.
    assert!(agent::runs(&s.conn, Holder::Free, NOW).is_empty());
    for (at, err) in [
        (NOW - 3 * 60 * MIN, "old"),
        (NOW - 50 * MIN, "a"),
        (NOW - 3 * MIN, "b"),
    ] {
        let id = runs::create(&s.conn, 1, 1, 1, StartedBy::Tick, at - MIN).unwrap();
        runs::finish_failed(&s.conn, id, err, at).unwrap();
    }
    finished(&s, Verdict::NoAction, ActionCounts::default(), NOW - MIN);
    let p = agent::runs(&s.conn, Holder::Free, NOW);
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(
        p[0].detail
            .starts_with("2 run(s) failed in the last hour; the last, run ")
            && p[0].detail.ends_with("failed 3m ago: b"),
        "{p:?}"
    );
    assert_eq!(p[0].since, Some(NOW - 50 * MIN));
    // The latest run failed: said however old, with the hour's count.
    let id = runs::create(&s.conn, 1, 1, 1, StartedBy::Tick, NOW - MIN).unwrap();
    runs::finish_failed(&s.conn, id, "interrupted: the process ended", NOW).unwrap();
    let p = agent::runs(&s.conn, Holder::Free, NOW);
    assert!(
        p[0].detail.starts_with(&format!(
            "the last run {id} failed 0s ago: interrupted: the process ended (3 runs failed in the last hour)"
        )),
        "{p:?}"
    );
    // A pass left running with nobody holding the lock: interrupted.
    let stuck = runs::create(&s.conn, 1, 1, 1, StartedBy::Tick, NOW - 2 * MIN).unwrap();
    let p = agent::runs(&s.conn, Holder::Free, NOW);
    assert!(
        p[1].detail
            .starts_with(&format!("run(s) {stuck} interrupted")),
        "{p:?}"
    );
    assert_eq!(
        agent::runs(&s.conn, Holder::Held(Some(7)), NOW).len(),
        1,
        "a live run holds the lock"
    );
    assert_eq!(
        agent::runs(&s.conn, Holder::Unknown, NOW).len(),
        1,
        "who holds the lock is unknown: no run is called interrupted"
    );
}

#[test]
fn vast_failing_since_its_first_failure_and_a_refused_key_are_told_apart() {
    let (_dir, s) = test_store(NOW);
    assert!(outside::vast(&s.conn, NOW, false).is_empty());
    ops::record_listing(&s.conn, Ok(()), NOW - 60 * MIN).unwrap();
    ops::record_listing(&s.conn, Err("vast.ai unreachable: timeout"), NOW - 20 * MIN).unwrap();
    ops::record_listing(&s.conn, Err("vast.ai unreachable: refused"), NOW - 5 * MIN).unwrap();
    let p = outside::vast(&s.conn, NOW, false);
    assert!(
        p[0].detail.starts_with("the vast.ai listing has failed since 20m ago: vast.ai unreachable: refused; the last listing that worked was 1h00m ago"),
        "{p:?}"
    );
    assert_eq!(p[0].since, Some(NOW - 20 * MIN));
    ops::record_listing(
        &s.conn,
        Err("vast.ai refused the API key: HTTP 401 on GET /instances/: invalid key"),
        NOW,
    )
    .unwrap();
    let line = outside::vast(&s.conn, NOW, false)[0].line();
    assert!(
        line.starts_with("vast.ai refuses the API key since 20m ago"),
        "{line}"
    );
    assert!(
        line.contains("fix: set a valid key in VAST_API_KEY"),
        "{line}"
    );
    assert!(
        outside::vast(&s.conn, NOW, true).is_empty(),
        "no key at all is the secrets check's"
    );
    // The passes had no key and this shell has one: the units', not the network's.
    ops::record_listing(
        &s.conn,
        Err("not_configured: no vast.ai API key: set VAST_API_KEY"),
        NOW,
    )
    .unwrap();
    let line = outside::vast(&s.conn, NOW, false)[0].line();
    assert!(
        line.starts_with("the agent's passes have no vast.ai API key since 20m ago"),
        "{line}"
    );
    assert!(line.contains("fix: give the units the key"), "{line}");
    ops::record_listing(
        &s.conn,
        Err("vast.ai HTTP 403 not_authorized: API key lacks permission"),
        NOW,
    )
    .unwrap();
    let line = outside::vast(&s.conn, NOW, false)[0].line();
    assert!(
        line.starts_with("vast.ai forbids this key the listing since 20m ago (HTTP 403)"),
        "{line}"
    );
}

#[test]
fn the_demand_probe_failing_names_its_source_and_since_when() {
    let (_dir, s) = test_store(NOW);
    let mut config = Config::default();
    let state = |last_demand: Option<&str>| crate::store::session::AgentState {
        last_demand: last_demand.map(String::from),
        ..crate::store::session::state(&s.conn).unwrap()
    };
    assert!(outside::demand(&s.conn, &state(None), &config, NOW, false).is_empty());
    crate::store::curio::set_last_reading(&s.conn, "{}", NOW - 30 * MIN).unwrap();
    for (at, ok) in [
        (NOW - 30 * MIN, 1),
        (NOW - 25 * MIN, 0),
        (NOW - 20 * MIN, 0),
    ] {
        s.conn
            .execute(
                "INSERT INTO samples (at, demand_ok, ours_billing, ours_booting, ours_proving,
                                      capacity_pph, target_pph, fleet_dph)
                 VALUES (?1, ?2, 0, 0, 0, 0, 0, 0)",
                rusqlite::params![at, ok],
            )
            .unwrap();
    }
    let failed = r#"{"demand": null, "error": "harmonydb: connection refused"}"#;
    let p = outside::demand(&s.conn, &state(Some(failed)), &config, NOW, false);
    assert!(
        p[0].detail.starts_with("the demand probe (demand.source = \"harmonydb\") failed in the last pass: harmonydb: connection refused; the last good reading is 30m old"),
        "{p:?}"
    );
    assert_eq!(p[0].since, Some(NOW - 25 * MIN), "the first failed pass");
    assert!(p[0].line().contains("FLEETAGENT_HARMONYDB_URL"));
    // A good last pass with a reading older than 3 timer periods (passes stopped).
    let good = r#"{"demand": {}, "error": null}"#;
    let p = outside::demand(&s.conn, &state(Some(good)), &config, NOW, false);
    assert!(
        p[0].detail
            .starts_with("no demand reading (demand.source = \"harmonydb\") for 30m"),
        "{p:?}"
    );
    config.run.timer_period_secs = 900;
    assert!(outside::demand(&s.conn, &state(Some(good)), &config, NOW, false).is_empty());
    // A harmonydb source without a URL is the secrets check's.
    let unset = r#"{"demand": null, "error": "not_configured: no HarmonyDB URL"}"#;
    assert!(outside::demand(&s.conn, &state(Some(unset)), &config, NOW, true).is_empty());
    assert_eq!(
        outside::demand(&s.conn, &state(Some(unset)), &config, NOW, false).len(),
        1
    );
}

#[test]
fn a_pause_is_loud_when_workers_are_dead_and_other_installs_are_named() {
    let (_dir, s) = test_store(NOW);
    assert!(outside::pause(&s.conn, NOW).is_empty());
    let p = Pause {
        since: NOW - 10 * MIN,
        until: Some(NOW + 50 * MIN),
        reason: "disk swap".into(),
    };
    ops::set_pause(&s.conn, &p).unwrap();
    let line = outside::pause(&s.conn, NOW)[0].line();
    assert_eq!(
        line,
        "paused since 10m ago, for 50m more: \"disk swap\": nothing is launched or stopped but by hand; fix: `fleetagent resume` when the work is done"
    );
    let dead = serde_json::json!({"pending": 5, "running": 0, "completed_1h": 0, "completed_15m": 0, "workers": []});
    crate::store::curio::set_last_reading(&s.conn, &dead.to_string(), NOW).unwrap();
    let loud = outside::pause(&s.conn, NOW);
    assert!(
        loud[0]
            .detail
            .starts_with("PAUSED WHILE WORKERS DEAD: the fleet is unattended"),
        "{loud:?}"
    );
    assert_eq!(loud[0].since, Some(NOW - 10 * MIN));
    assert!(
        outside::pause(&s.conn, NOW + 50 * MIN).is_empty(),
        "over at its end"
    );

    let config = Config::default();
    assert!(outside::foreign_installs(&s.conn, &config, NOW).is_empty());
    let other = |id: &str, vast_id| ForeignInstance {
        install_id: id.into(),
        label: format!("fleetagent-{id}-r3-0a0b0c0d"),
        vast_id,
    };
    ops::set_foreign_installs(&s.conn, &[other("qwerty", 7), other("zzz", 8)], NOW - MIN).unwrap();
    let p = outside::foreign_installs(&s.conn, &config, NOW);
    let ours = ops::install_id(&s.conn).unwrap();
    assert!(
        p[0].detail.starts_with(&format!(
            "2 instance(s) under vast.label_prefix \"fleetagent\" belong to another install (qwerty, zzz; this one is {ours}) (seen 1m ago): \"fleetagent-qwerty-r3-0a0b0c0d\" (instance 7)"
        )),
        "{p:?}"
    );
    // One of ours under the prefix used before (a restored backup after a prefix change):
    // named on its own, with the way to end it (a walkthrough saw it bill unnamed).
    let mut mine = other(&ours, 9);
    mine.label = format!("team-a-{ours}-r4-0a0b0c0d");
    ops::set_foreign_installs(&s.conn, &[other("qwerty", 7), mine], NOW - MIN).unwrap();
    let p = outside::foreign_installs(&s.conn, &config, NOW);
    assert_eq!(p.len(), 2, "{p:?}");
    assert!(
        p[0].detail.starts_with(&format!(
            "1 instance(s) carry this install's id ({ours}) under another prefix than vast.label_prefix \"fleetagent\": \"team-a-{ours}-r4-0a0b0c0d\" (instance 9)"
        )) && p[0].fix.as_deref().unwrap().starts_with("set vast.label_prefix back to \"team-a\""),
        "{p:?}"
    );
    assert!(p[1]
        .detail
        .starts_with("1 instance(s) under vast.label_prefix"));
}

#[test]
fn the_metrics_check_reads_the_recorded_failure_and_the_dirs_access() {
    let (dir, s) = test_store(NOW);
    let mut config = Config::default();
    assert!(
        host::metrics(&s.conn, &config, NOW, None, "fleetagent units install").is_empty(),
        "no textfile"
    );
    config.metrics.textfile = Some(dir.path().join("fleetagent.prom"));
    assert!(host::metrics(&s.conn, &config, NOW, None, "fleetagent units install").is_empty());
    config.metrics.textfile = Some(dir.path().join("gone/fleetagent.prom"));
    let p = host::metrics(&s.conn, &config, NOW, None, "fleetagent units install");
    assert!(
        p[0].detail
            .ends_with("gone does not exist: the next run cannot write it"),
        "{p:?}"
    );
    ops::set_metrics_error(
        &s.conn,
        Some("cannot create .fleetagent.prom.1.tmp"),
        NOW - 7 * MIN,
    )
    .unwrap();
    let p = host::metrics(&s.conn, &config, NOW, None, "fleetagent units install");
    assert_eq!(p.len(), 1, "one problem: {p:?}");
    assert!(
        p[0].detail
            .contains("could not be written (failing since 7m ago): cannot create")
            && p[0].detail.contains("does not exist"),
        "{p:?}"
    );
    assert!(p[0].line().contains("units install"));
    // The dir is there and writable, its file system full: free space, not units install.
    config.metrics.textfile = Some(dir.path().join("fleetagent.prom"));
    let full = "cannot write .fleetagent.prom.1.tmp: No space left on device (os error 28)";
    ops::set_metrics_error(&s.conn, Some(full), NOW - 7 * MIN).unwrap();
    let line = host::metrics(&s.conn, &config, NOW, None, "fleetagent units install")[0].line();
    assert!(
        line.contains("fix: free space on the file system of"),
        "{line}"
    );
}

/// `call` recorded at `at` in a run of its own (round 1 of 2 messages, 900 ms): the run's id.
fn call_at(s: &crate::store::Store, at: Millis, call: crate::store::llm_calls::Call<'_>) -> i64 {
    let run = runs::create(&s.conn, 1, 1, 1, StartedBy::Tick, at).unwrap();
    crate::store::llm_calls::insert(
        &s.conn,
        &crate::store::llm_calls::Call {
            run_id: run,
            at,
            round: 1,
            messages: 2,
            latency_ms: 900,
            ..call
        },
    )
    .unwrap();
    run
}

/// One model call as the tool loop records it: our estimate of the request and of its
/// tools, what the server counted, and (when the model called a tool) its tool call.
fn model_call(s: &crate::store::Store, at: Millis, est: u64, reported: i64, called: bool) {
    let run = call_at(
        s,
        at,
        crate::store::llm_calls::Call {
            estimate: est,
            tools_estimate: 736,
            usage: Some((reported, 40)),
            attempts: 1,
            ..Default::default()
        },
    );
    if called {
        crate::store::messages::insert(
            &s.conn,
            &crate::store::messages::NewMessage {
                session_id: 1,
                run_id: Some(run),
                role: "assistant",
                kind: "tool_call",
                content: "",
                tokens: 20,
                tool_calls: Some(r#"[{"id":"c1","name":"list_instances","arguments":"{}"}]"#),
                tool_call_id: None,
                tool_name: None,
                gist: None,
                gist_tokens: None,
                event_id: None,
                error_code: None,
            },
            at,
        )
        .unwrap();
    }
}

fn tools_check(dir: &Path, model: &str) -> Check {
    let mut config = Config::default();
    config.llm.model = model.into();
    check(&run_checks(dir, &config), "tools_in_prompt").clone()
}

/// What Qwen2.5-Coder-0.5B's server counted for fleetagent's real requests (our estimate,
/// its count without the tools, with them: docs/operations.md, "tools_in_prompt").
const QWEN: [(u64, i64, i64); 3] = [
    (2_819, 2_341, 3_269),
    (5_742, 5_674, 6_602),
    (5_618, 5_531, 6_459),
];

#[test]
fn a_server_that_counts_too_few_prompt_tokens_for_the_tools_is_named() {
    let qwen = "qwen2.5-coder-0.5b-instruct";
    let (dir, s) = test_store(NOW);
    assert!(tools_check(dir.path(), qwen).ok(), "no call yet");
    // With the tools: more than our estimate, every time.
    for (i, (est, _, with)) in QWEN.iter().enumerate() {
        model_call(&s, NOW - (10 - i as i64) * MIN, *est, *with, false);
    }
    assert!(tools_check(dir.path(), qwen).ok());
    // A template that drops them: fewer, three calls in a row, no tool called.
    for (i, (est, without, _)) in QWEN.iter().enumerate() {
        model_call(&s, NOW - (5 - i as i64) * MIN, *est, *without, false);
    }
    let c = tools_check(dir.path(), qwen);
    assert_eq!(c.problems.len(), 1, "{c:?}");
    let line = c.problems[0].line();
    assert!(
        line.starts_with("the LLM server counted 5531 prompt tokens for the last request (run 6), fewer than our estimate of the request (5618, of which the tools 736)"),
        "{line}"
    );
    assert!(
        line.contains("each of the 3 latest calls that reported usage counted short"),
        "{line}"
    );
    assert!(
        line.contains("; fix: serve the model with a chat template that renders tools"),
        "{line}"
    );
    assert_eq!(
        c.problems[0].since,
        Some(NOW - 5 * MIN),
        "the first of the streak"
    );
    // OpenAI's own models count below our estimate by design: only the tools alone count.
    assert!(tools_check(dir.path(), "gpt-4o-mini").ok());
    // A call whose server counted with the tools ends the streak.
    model_call(&s, NOW - MIN, 2_819, 3_269, false);
    assert!(tools_check(dir.path(), qwen).ok());
    // Fewer than the tools alone: certain, for any model; a count of 0 is no count.
    for i in 0..SHORT_CALLS as i64 {
        model_call(&s, NOW - 30_000 + i, 2_819, 0, false);
        model_call(&s, NOW - 20_000 + i, 2_819, 700, false);
    }
    let c = tools_check(dir.path(), "gpt-4o-mini");
    let line = c.problems[0].line();
    assert!(line.contains("700 prompt tokens for the last request (run 13), fewer than our estimate of its tools alone (736)"), "{line}");
    assert_eq!(c.problems[0].since, Some(NOW - 20_000));
    // A pass in which the model called a tool had its tools.
    model_call(&s, NOW - 1_000, 2_819, 700, true);
    assert!(tools_check(dir.path(), "gpt-4o-mini").ok());
    // The rules decide: no model, nothing to say.
    let mut rules = Config::default();
    rules.llm.provider = crate::config::Provider::Rules;
    assert!(check(&run_checks(dir.path(), &rules), "tools_in_prompt").ok());
}

/// The line "fewer than the tools alone" is certain because every request also carries the
/// system prompt, which alone outweighs the tools by our count.
#[test]
fn the_system_prompt_alone_outweighs_the_tools() {
    let tk = crate::tokens::Tokenizer::for_model("gpt-4o", None).unwrap();
    let tools = tk.count_tools(&crate::tools::registry().specs());
    let system = tk.count_text(crate::prompt::SYSTEM_PROMPT);
    assert!(
        system > tools,
        "system prompt {system} tokens, tools {tools}"
    );
}

/// A config file that was not found (the default path) is named in the `config` check:
/// an operator who put it elsewhere must not be told only to set keys they did set.
#[test]
fn a_missing_config_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config::default();
    let path = Path::new("/etc/fleetagent/config.toml");
    let all = checks(&Inputs {
        config_path: path,
        config_found: false,
        config: &config,
        env: &env(),
        state_dir: dir.path(),
        now: NOW,
        units: None,
    })
    .0;
    let lines: Vec<String> = check(&all, "config")
        .problems
        .iter()
        .map(Problem::line)
        .collect();
    assert!(
        lines[0].starts_with(
            "no config file at /etc/fleetagent/config.toml: every key has its default"
        ),
        "{lines:?}"
    );
    assert!(run_checks(dir.path(), &config).iter().all(|c| c
        .problems
        .iter()
        .all(|p| !p.detail.contains("no config file"))));
}

/// The fixes name what is missing, not a list of everything: a price with its FIL part set
/// asks for the FIL/USD source only; a config refused for its mode asks for the chmod.
#[test]
fn the_price_and_config_fixes_name_what_is_missing() {
    let fix = |toml: &str| {
        super::outside::price_fix(&crate::config::parse(toml).unwrap(), "no ask price")
    };
    assert!(fix("").starts_with("set price.proof_price_fil (or Curio's ask price"));
    assert!(fix("[price]\nproof_price_fil = 0.005").starts_with("set one of price.fil_usd,"));
    assert!(fix("[price]\nfil_usd = 4.0").starts_with("set price.proof_price_fil, or let Curio"));
    assert!(fix("[price]\nproof_price_fil = 0.005\nfil_usd = 4.0").starts_with("check the FIL/USD"));
    // Curio's ask is read and the FIL/USD command's value went stale: the command is named,
    // not the proof's price (the walkthrough's doctor pointed at proof_price_fil).
    let command = crate::config::parse("[price]\nfil_usd_command = \"/bin/false\"").unwrap();
    let stale = "FIL/USD is stale: fetched 1h10m ago (price.max_age_mins = 60); the last fetch failed: exit 1";
    assert!(super::outside::price_fix(&command, stale)
        .starts_with("the FIL/USD source is what fails: run price.fil_usd_command by hand"));
    // Not fetched yet, no failure recorded (a fresh install before its first pass): no
    // source is blamed.
    let fresh = super::outside::price_fix(&command, "FIL/USD not fetched yet");
    assert!(
        fresh.starts_with("no pass has fetched FIL/USD yet"),
        "{fresh}"
    );
    // Both missing: the proof's price is named first, as before.
    let both = "no ask price read from Curio and price.proof_price_fil is not set; the last fetch failed: exit 1";
    assert!(super::outside::price_fix(&command, both).starts_with("set price.proof_price_fil"));
    let config = |line: &str| super::config_fix(&anyhow::anyhow!("{line}"));
    assert!(
        config("config /x is world-writable (mode 666); refusing it").starts_with("run the chmod")
    );
    assert!(config("cannot read config /x: Is a directory").starts_with("name a readable config"));
    assert!(config("config /x: line 3 (llm.model): bad").starts_with("correct the config file"));
}

/// A lock holder that wrote no note (`flock(1)`, another program) is judged by how long it
/// has been running: past the deadline, no run can start, and doctor says so (it said
/// nothing). pid 1 has run longer than a second anywhere this runs.
#[test]
fn a_lock_held_by_another_program_past_the_deadline_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = crate::config::Config::default();
    config.run.deadline_secs = 1;
    let now = crate::clock::Clock::now_ms(&crate::clock::SystemClock);
    let started = crate::lock::process_started(1).expect("/proc/1/stat");
    assert!(started <= now && started > 0, "{started}");
    let found = super::agent::lock(dir.path(), Some(1), &config, now);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0]
            .detail
            .contains("not a fleetagent run (it wrote no note)"),
        "{}",
        found[0].detail
    );
    assert_eq!(found[0].since, Some(started));
    // Within the deadline: nothing.
    config.run.deadline_secs = 1_000_000_000;
    assert!(super::agent::lock(dir.path(), Some(1), &config, now).is_empty());
}

/// An instance of ours that bills with no price from vast.ai: the caps count it at the worst
/// case, and doctor's `vast` check names it (a re-test saw every figure read $0 and doctor
/// green).
#[test]
fn an_instance_billing_without_a_price_is_named() {
    use crate::fleet::fixtures::row;
    use crate::fleet::PROVING;
    let (dir, s) = test_store(NOW);
    crate::store::instances::upsert(&s.conn, &row("fa-1", Some(1), PROVING, 0.4)).unwrap();
    let mut config = Config::default();
    config.vast.offers.max_dph_per_instance = Some(0.9);
    let vast_problems = |dir: &Path, config: &Config| {
        check(&run_checks(dir, config), "vast")
            .problems
            .iter()
            .map(|p| p.detail.clone())
            .filter(|d| d.contains("no price"))
            .collect::<Vec<_>>()
    };
    assert!(vast_problems(dir.path(), &config).is_empty());
    let mut unpriced = row("fa-2", Some(2), PROVING, 0.4);
    unpriced.dph = None;
    crate::store::instances::upsert(&s.conn, &unpriced).unwrap();
    let said = vast_problems(dir.path(), &config);
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(
        said[0].contains("1 instance(s) of ours that bill: 2 (fa-2)")
            && said[0].contains("at $0.90/h"),
        "{}",
        said[0]
    );
}

mod caps;
mod failed;
mod identity;
mod keys;
mod llm;
mod refusals;
