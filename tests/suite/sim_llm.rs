//! `sim --llm` against the fake OpenAI server (issue 15, "What must be shown"): a model that
//! always answers "No action needed" is carried by the floor (the incident passes its own
//! checks, a day of steady demand is served), and every floor action is in the report and the
//! history; a model that acts as the rules would leaves the floor nothing to do over the
//! built-in scenarios, and its launches are not doubled. Each model call takes a fixed
//! `--llm-latency` of simulated time, so the runs are deterministic and fast.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use fleetagent::clock::ManualClock;
use fleetagent::config::Config;
use fleetagent::demand::Demand;
use fleetagent::policy::rules::{self, Mode};
use fleetagent::services::Services;
use fleetagent::sim::{self, scenario};
use fleetagent::store::{session, OpenMode, Store};
use rusqlite::Connection;
use serde_json::Value;

use crate::common::fake_llm::{FakeLlm, Reply};
use crate::common::fleet::{clean_env, BIN};

/// Seconds of simulated time per model call.
const LATENCY: &str = "3";

/// The simulator's base config with `[llm]` pointing at the fake (`extra`: more `[llm]` keys).
pub(super) fn config_text(llm: &FakeLlm, extra: &str) -> String {
    sim::BASE_CONFIG.replace(
        "provider = \"rules\"",
        &format!(
            "base_url = \"{}\"\nmodel = \"fake-model\"\ntimeout_secs = 10\nretry_budget_secs = 10\n{extra}",
            llm.base_url()
        ),
    )
}

pub(super) struct SimRun {
    pub(super) report: Value,
    pub(super) state: PathBuf,
    _dir: tempfile::TempDir,
}

/// `fleetagent --config C --state-dir S sim --llm --llm-latency 3 --json ARGS`.
pub(super) fn sim_llm(
    config: &str,
    state: Option<(tempfile::TempDir, PathBuf)>,
    args: &[&str],
) -> SimRun {
    let (dir, state) = state.unwrap_or_else(|| {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        (dir, state)
    });
    let path = dir.path().join("config.toml");
    std::fs::write(&path, config).unwrap();
    let mut c = Command::new(BIN);
    clean_env(&mut c);
    let out = c
        .arg("--config")
        .arg(&path)
        .arg("--state-dir")
        .arg(&state)
        .args(["sim", "--llm", "--llm-latency", LATENCY, "--json"])
        .args(args)
        .env("FLEETAGENT_LLM_API_KEY", "sk-sim")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}) for {args:?}: {stderr}"));
    assert_eq!(
        out.status.success(),
        report["passed"].as_bool().unwrap(),
        "{stderr}"
    );
    SimRun {
        report,
        state,
        _dir: dir,
    }
}

pub(super) fn failed_checks(r: &Value) -> Vec<Value> {
    r["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["ok"] == false && c.get("not_applicable").is_none())
        .cloned()
        .collect()
}

fn floor_total(r: &Value) -> u64 {
    r["model"]["floor_actions"]["total"].as_u64().unwrap()
}

/// The floor's ledger rows by kind (from the call id) and the lines of its notes in the
/// history (`fleetagent history --all --json` on the sim's state dir).
fn floor_in_the_database_and_history(state: &Path) -> (Vec<(String, String)>, usize) {
    let db = Connection::open(state.join("fleetagent.db")).unwrap();
    let mut stmt = db
        .prepare("SELECT tool_call_id, kind FROM actions WHERE actor = 'floor' ORDER BY id")
        .unwrap();
    let rows: Vec<(String, String)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let mut c = Command::new(BIN);
    clean_env(&mut c);
    let out = c
        .arg("--state-dir")
        .arg(state)
        .args(["history", "--all", "--json", "-n", "100000"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let history: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let lines = history
        .iter()
        .filter(|m| m["kind"] == "floor")
        .map(|m| {
            let text = m["content"].as_str().unwrap();
            assert!(
                text.starts_with("Floor (the rules under your decision"),
                "{text}"
            );
            text.lines().filter(|l| l.starts_with("- ")).count()
        })
        .sum();
    (rows, lines)
}

/// Every floor action of the ledger is counted in the report under its kind, and is a line
/// of a floor note in the history.
fn every_floor_action_is_reported(run: &SimRun) {
    let (rows, lines) = floor_in_the_database_and_history(&run.state);
    let by_kind = &run.report["model"]["floor_actions"];
    assert_eq!(floor_total(&run.report), rows.len() as u64, "{by_kind}");
    for kind in ["emergency", "deficit", "seed", "flagged", "surplus"] {
        let n = rows
            .iter()
            .filter(|(id, _)| id.starts_with(&format!("floor-{kind}_")))
            .count();
        assert_eq!(
            by_kind[kind].as_u64().unwrap(),
            n as u64,
            "{kind}: {by_kind}"
        );
    }
    assert_eq!(by_kind["other"], 0, "{by_kind}");
    assert_eq!(lines, rows.len(), "history's floor notes: {rows:?}");
}

#[test]
fn sim_llm_a_model_that_never_acts_is_carried_by_the_floor_through_the_incident() {
    let llm = FakeLlm::start();
    llm.set_default(Reply::text("No action needed."));
    let run = sim_llm(&config_text(&llm, ""), None, &["--scenario", "incident"]);
    let r = &run.report;
    assert!(r["passed"].as_bool().unwrap(), "{:#?}", failed_checks(r));
    assert_eq!(llm.rejected_count(), 0, "{:?}", llm.rejections());
    let model = &r["model"];
    assert_eq!(model["name"], "fake-model");
    assert_eq!(model["calls"].as_u64().unwrap(), llm.request_count() as u64);
    assert_eq!(model["tool_calls"], 0);
    assert_eq!(model["malformed_answers"], 0);
    // The floor launched in the first WORKERS DEAD pass (past the spent window), and those
    // launches reached vast.ai; it destroyed the stuck instance.
    let inc = &r["incident"];
    assert!(
        inc["launches_in_first_dead_pass"].as_u64().unwrap() >= 1,
        "{inc}"
    );
    assert!(
        model["floor_actions"]["emergency"].as_u64().unwrap() >= 1,
        "{model}"
    );
    assert!(
        model["floor_actions"]["flagged"].as_u64().unwrap() >= 1,
        "{model}"
    );
    assert_eq!(r["stuck_instances"]["unhandled"], 0);
    assert!(r["proofs"]["served_share"].as_f64().unwrap() >= 0.75);
    assert!(model["floor_passes"].as_u64().unwrap() >= 2, "{model}");
    assert_eq!(
        r["runs"]["by_decider"]["floor"], model["floor_passes"],
        "{}",
        r["runs"]
    );
    // Beside it, the rules on the same world.
    assert_eq!(model["rules"]["passed"], true, "{model}");
    every_floor_action_is_reported(&run);
}

#[test]
fn sim_llm_a_model_that_never_acts_serves_a_steady_day() {
    let llm = FakeLlm::start();
    llm.set_default(Reply::text("No action needed."));
    let run = sim_llm(
        &config_text(&llm, ""),
        None,
        &["--scenario", "steady", "--hours", "24"],
    );
    let r = &run.report;
    let served = r["proofs"]["served_share"].as_f64().unwrap();
    assert!(served >= 0.9, "served {served}: {}", r["model"]);
    assert!(floor_total(r) >= 1, "{}", r["model"]);
    every_floor_action_is_reported(&run);
}

/// A demand probe that answers what the pass being decided read (`agent_state.last_demand`).
/// What the rules would call on the fleet and demand the sim's pass has just recorded: the
/// instance table after this pass's reconciliation, the demand it read, its streaks, window
/// and spend (`run::observe::view` over the sim's database with the reading the pass
/// recorded), at the time of its observation.
fn rules_plan(state: &Path, config: &Config) -> anyhow::Result<Vec<(String, String)>> {
    let store = Store::open(state, OpenMode::Existing, 0)?;
    let now: i64 = store.conn.query_row(
        "SELECT MAX(created_at) FROM messages WHERE kind = 'observation'",
        [],
        |r| r.get(0),
    )?;
    let recorded: Value =
        serde_json::from_str(&session::state(&store.conn)?.last_demand.unwrap_or_default())?;
    let demand: Option<Demand> = serde_json::from_value(recorded["demand"].clone())?;
    let error = recorded["error"].as_str().map(String::from);
    let clock = ManualClock::new(now);
    let mut snapshot = fleetagent::run::observe::view(
        &store,
        config,
        &Services::default(),
        &clock,
        demand,
        error,
    )?;
    // The pass listed vast.ai; the view reads the table the listing just reconciled.
    snapshot.listing_error = None;
    let low = snapshot.streaks.low_demand_passes;
    Ok(rules::decide(&snapshot, config, low, Mode::Full)
        .into_iter()
        .map(|c| (c.tool.to_string(), c.arguments.to_string()))
        .collect())
}

/// A model that answers each observation with the calls the rules would make, and says it
/// is done once their results are in. Errors of the test's own reading go to `errors`.
fn acts_like_the_rules(state: PathBuf, config: Config, errors: Arc<Mutex<Vec<String>>>) -> Reply {
    Reply::dynamic(move |body| {
        let last = body["messages"].as_array().and_then(|m| m.last());
        if last.is_none_or(|m| m["role"] != "user") {
            return Reply::text("Done.");
        }
        match rules_plan(&state, &config) {
            Ok(calls) if calls.is_empty() => Reply::text("No action needed."),
            Ok(calls) => Reply::ToolCalls(calls),
            Err(e) => {
                errors.lock().unwrap().push(format!("{e:#}"));
                Reply::text("No action needed.")
            }
        }
    })
}

/// The ledger of every pass where the floor acted (for a failure to show): run, actor, kind,
/// outcome, reason, detail.
fn ledger_of_floor_passes(state: &Path) -> Vec<String> {
    let db = Connection::open(state.join("fleetagent.db")).unwrap();
    let mut stmt = db
        .prepare(
            "SELECT run_id, actor, kind, outcome, COALESCE(reason, ''), COALESCE(detail, '')
               FROM actions WHERE run_id IN (SELECT run_id FROM actions WHERE actor = 'floor')
              ORDER BY id",
        )
        .unwrap();
    stmt.query_map([], |r| {
        Ok(format!(
            "run {}: {} {} {}: {} -> {}",
            r.get::<_, i64>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, String>(2)?,
            r.get::<_, String>(3)?,
            r.get::<_, String>(4)?,
            r.get::<_, String>(5)?
        ))
    })
    .unwrap()
    .map(Result::unwrap)
    .collect()
}

/// Horizons that hold each scenario's story, shorter than the rules-only tests' where the
/// story allows (each pass is a model call here).
const SHORT: &[(&str, f64)] = &[
    ("steady", 4.0),
    ("spike", 8.0),
    ("incident", 3.0),
    ("vast-429-storm", 4.0),
    ("llm-outage", 2.0),
    ("trigger-storm", 1.0),
    ("price-drop", 0.5),
    ("outbid", 2.2),
    ("dead-market", 1.0),
    ("day-cycle", 2.0),
];

#[test]
fn sim_llm_a_model_that_acts_like_the_rules_leaves_the_floor_nothing_to_do() {
    assert_eq!(SHORT.len(), scenario::BUILT_IN.len());
    for (name, hours) in SHORT {
        let llm = FakeLlm::start();
        let text = config_text(&llm, "quiet_interval_mins = 0");
        let mut config = fleetagent::config::parse(&text).unwrap();
        config.llm.provider = fleetagent::config::Provider::Openai;
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let errors = Arc::new(Mutex::new(Vec::new()));
        llm.set_default(acts_like_the_rules(state.clone(), config, errors.clone()));
        let hours = hours.to_string();
        let run = sim_llm(
            &text,
            Some((dir, state)),
            &["--scenario", name, "--hours", &hours],
        );
        let r = &run.report;
        assert!(
            errors.lock().unwrap().is_empty(),
            "{name}: {:?}",
            errors.lock()
        );
        assert_eq!(llm.rejected_count(), 0, "{name}: {:?}", llm.rejections());
        assert!(
            r["model"]["tool_calls"].as_u64().unwrap() >= 1,
            "{name}: {}",
            r["model"]
        );
        assert_eq!(r["model"]["invalid_calls"], 0, "{name}");
        assert_eq!(
            floor_total(r),
            0,
            "{name}: {}\n{:#?}",
            r["model"],
            ledger_of_floor_passes(&run.state)
        );
        assert_eq!(r["model"]["floor_passes"], 0, "{name}");
        every_floor_action_is_reported(&run);
        // The profit beside the rules', where a price is modelled (null, not 0, elsewhere).
        let beside = &r["model"]["rules"];
        if matches!(*name, "price-drop" | "day-cycle") {
            assert!(r["money"]["profit"].is_f64(), "{}", r["money"]);
            assert!(beside["profit"].is_f64(), "{beside}");
        } else {
            assert!(r["money"]["profit"].is_null() && beside["profit"].is_null());
        }
        if *name == "incident" {
            // The model launched in the first WORKERS DEAD pass, the moment the floor would
            // have: the floor added nothing, and no more launches reached vast.ai than the
            // rules make in the same pass.
            let db = Connection::open(run.state.join("fleetagent.db")).unwrap();
            let first: i64 = db
                .query_row("SELECT MIN(id) FROM runs WHERE emergency = 1", [], |r| {
                    r.get(0)
                })
                .unwrap();
            let by_model: i64 = db
                .query_row(
                    "SELECT COUNT(*) FROM actions WHERE run_id = ?1 AND kind = 'launch' AND actor = 'llm'",
                    [first],
                    |r| r.get(0),
                )
                .unwrap();
            assert!(by_model >= 1, "the model did not launch in run {first}");
            let made = r["incident"]["launches_in_first_dead_pass"]
                .as_u64()
                .unwrap();
            assert!(made >= 1 && made as i64 <= by_model, "{}", r["incident"]);
            let rules_only = sim::run(&sim::Options {
                hours: Some(3.0),
                ..sim::Options::new(scenario::load("incident").unwrap(), 1)
            })
            .unwrap()
            .report;
            assert_eq!(
                made, rules_only.incident.launches_in_first_dead_pass,
                "{}",
                r["incident"]
            );
        }
    }
}

#[test]
fn sim_llm_each_model_call_takes_the_fixed_latency_in_simulated_time() {
    let llm = FakeLlm::start();
    llm.set_default(Reply::text("No action needed."));
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let path = dir.path().join("config.toml");
    std::fs::write(&path, config_text(&llm, "quiet_interval_mins = 0")).unwrap();
    let mut c = Command::new(BIN);
    clean_env(&mut c);
    let out = c
        .arg("--config")
        .arg(&path)
        .arg("--state-dir")
        .arg(&state)
        .args(["sim", "--llm", "--llm-latency", "100", "--json"])
        .args(["--scenario", "steady", "--hours", "0.5"])
        .env("FLEETAGENT_LLM_API_KEY", "sk-sim")
        .output()
        .unwrap();
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(r["llm"]["calls"].as_u64().unwrap() >= 3, "{}", r["llm"]);
    // A pass lasts at least as long as its model calls took: 100 s each.
    let db = Connection::open(state.join("fleetagent.db")).unwrap();
    let mut stmt = db
        .prepare("SELECT id, finished_at - started_at, llm_calls FROM runs WHERE llm_calls > 0")
        .unwrap();
    let runs: Vec<(i64, i64, i64)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert!(!runs.is_empty());
    for (id, took, calls) in runs {
        assert!(
            took >= calls * 100_000,
            "run {id}: {took} ms for {calls} call(s)"
        );
    }
}

#[test]
fn sim_llm_latency_needs_llm_and_a_sane_value() {
    for (args, wanted) in [
        (&["--llm-latency", "5"][..], "--llm-latency needs --llm"),
        (
            &["--llm", "--llm-latency=-1"][..],
            "--llm-latency must be between 0 and 3600 seconds, got -1",
        ),
        (
            &["--llm", "--llm-latency", "nan"][..],
            "--llm-latency must be between 0 and 3600 seconds, got NaN",
        ),
        (&["--llm", "--llm-latency", "3601"][..], "got 3601"),
    ] {
        let mut c = Command::new(BIN);
        clean_env(&mut c);
        let out = c
            .args(["sim", "--scenario", "incident", "--hours", "1"])
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.contains(wanted), "wanted {wanted:?} in {err}");
        assert!(out.stdout.is_empty());
    }
}

/// Where a request's per-pass part starts: the pinned state block, the one message opening
/// with its heading. Before it, the system prompt and the history; from it, this pass's.
fn per_pass_from(request: &Value) -> usize {
    let messages = request["messages"].as_array().unwrap();
    let at: Vec<usize> = messages
        .iter()
        .enumerate()
        .filter(|(_, m)| {
            m["content"]
                .as_str()
                .is_some_and(|c| c.starts_with(fleetagent::prompt::context::STATE_HEADING))
        })
        .map(|(i, _)| i)
        .collect();
    assert_eq!(at.len(), 1, "one state block: {at:?}");
    assert_eq!(messages[at[0]]["role"], "user");
    at[0]
}

/// Issue 23, must-show 2: across the passes of a `sim --llm` run (the model acts as the
/// rules would, so action passes add runs to the history), every request after the first
/// shares with the one before, byte for byte: the system prompt, the tools, and every
/// message of the earlier request's history (its messages before the state block) that the
/// later request still has; a later round of the same pass extends the earlier round's
/// request whole. The server's prompt cache then reuses all of it, and the report says how
/// much it reused.
#[test]
fn sim_llm_every_request_keeps_the_system_prompt_tools_and_history_of_the_one_before() {
    let llm = FakeLlm::start();
    let text = config_text(&llm, "quiet_interval_mins = 0");
    let mut config = fleetagent::config::parse(&text).unwrap();
    config.llm.provider = fleetagent::config::Provider::Openai;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let errors = Arc::new(Mutex::new(Vec::new()));
    llm.set_default(acts_like_the_rules(state.clone(), config, errors.clone()));
    let run = sim_llm(
        &text,
        Some((dir, state)),
        &["--scenario", "incident", "--hours", "3"],
    );
    assert!(errors.lock().unwrap().is_empty(), "{:?}", errors.lock());
    assert_eq!(llm.rejected_count(), 0, "{:?}", llm.rejections());
    let requests = llm.requests();
    // Each request is one row of llm_calls, in order: which session, pass and round sent it.
    let db = Connection::open(run.state.join("fleetagent.db")).unwrap();
    let mut stmt = db
        .prepare(
            "SELECT c.run_id, c.round, r.session_id FROM llm_calls c JOIN runs r ON r.id = c.run_id
              ORDER BY c.id",
        )
        .unwrap();
    let calls: Vec<(i64, i64, i64)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(calls.len(), requests.len());
    let (mut extended, mut grown, mut with_history, mut resets) = (0, 0, 0, 0);
    for (k, pair) in requests.windows(2).enumerate() {
        let (a, b) = (&pair[0], &pair[1]);
        let (ma, mb) = (
            a["messages"].as_array().unwrap(),
            b["messages"].as_array().unwrap(),
        );
        assert_eq!(a["tools"], b["tools"], "request {}", k + 1);
        assert_eq!(mb[0]["role"], "system");
        let shared = ma.iter().zip(mb).take_while(|(x, y)| x == y).count();
        assert!(shared >= 1, "request {}: the system prompt changed", k + 1);
        let (pa, pb) = (per_pass_from(a), per_pass_from(b));
        if calls[k].0 == calls[k + 1].0 {
            // A later round of the same pass: the earlier request, then its answer and results.
            assert_eq!(calls[k + 1].1, calls[k].1 + 1);
            assert!(
                shared == ma.len() && mb.len() > ma.len(),
                "request {}",
                k + 1
            );
            assert_eq!(pb, pa);
            extended += 1;
            continue;
        }
        if calls[k].2 != calls[k + 1].2 {
            // `reset-session` (the incident resets twice): a new conversation, no history.
            assert_eq!(pb, 1, "request {}", k + 1);
            resets += 1;
            continue;
        }
        let history_b = &mb[1..pb];
        for (i, m) in ma[1..pa].iter().enumerate() {
            if history_b.contains(m) {
                assert!(
                    1 + i < shared,
                    "request {}: history message {} of the one before is kept but not where it was",
                    k + 1,
                    1 + i
                );
            }
        }
        // Nothing of the history left out in this short run: all of it is shared.
        assert!(shared >= pa, "request {}: {shared} < {pa}", k + 1);
        grown += usize::from(pb > pa);
        with_history += usize::from(pb > 1);
    }
    // Not vacuous: passes of several rounds, a history that grew, and most requests with one.
    assert!(extended >= 3 && grown >= 3, "{extended} {grown}");
    assert!(resets >= 1);
    assert!(
        with_history * 2 >= requests.len(),
        "{with_history} of {}",
        requests.len()
    );
    // The fake reports what a prefix cache reuses (whole leading messages alike, in its
    // own count); the report shows the share. Here about 70 %: per pass the state block
    // (1,100-1,500 tokens on this fleet) and the observation are new, the system prompt
    // (1,080), the tools and the history (up to 3,300) are reused. With the state block in
    // the system message, as before, it was 0.
    let model = &run.report["model"];
    let after_first = model["cache_share_after_first"].as_f64().unwrap();
    assert!(after_first >= 0.6, "{model}");
    assert!(
        model["cache_share"].as_f64().unwrap() <= after_first,
        "{model}"
    );
}
