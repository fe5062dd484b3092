//! The whole agent end to end: the real binary, a strict fake OpenAI server and the fake
//! vast.ai on 127.0.0.1, demand from a `command` probe. The incident replayed through the
//! model, a crash between create and record, the LLM down with and without fallback, and
//! 150 consecutive runs with large tool outputs that never exceed the budget.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde_json::{json, Value};

use crate::common::fake_llm::{self, FakeLlm, Reply};
use crate::common::fake_vast::{FakeVast, Route};
use crate::common::fleet::Fleet;

pub(crate) const LLM_KEY: &str = "sk-test-e2e-7f3a9c";

pub(crate) fn write_demand(dir: &Path, v: Value) {
    std::fs::write(dir.join("demand.json"), v.to_string()).unwrap();
}

pub(crate) fn dead_fleet() -> Value {
    json!({"pending": 59, "running": 0, "running_stale": 0, "completed_1h": 0, "completed_15m": 0, "workers": []})
}

pub(crate) fn busy_fleet() -> Value {
    json!({"pending": 59, "running": 1, "completed_1h": 20, "completed_15m": 5,
           "workers": [{"machine_name": "other-box", "host_and_port": "10.0.0.9:12300", "running": 1, "cordoned": false}]})
}

/// A fleet wired to the fakes; `policy` and `llm` are extra TOML lines for those tables.
pub(crate) fn rig(llm: &FakeLlm, vast: &FakeVast, policy: &str, llm_extra: &str) -> Fleet {
    let tmp_config = |dir: &Path| {
        format!(
            r#"
[run]
deadline_secs = 120
[debounce]
p0_secs = 0
p1_secs = 0
p2_secs = 0
max_wait_secs = 2
[llm]
base_url = "{llm_url}"
model = "gpt-4.1-mini"
timeout_secs = 3
retry_budget_secs = 4
{llm_extra}
[vast]
base_url = "{vast_url}"
image = "ghcr.io/example/curio-psprove:latest"
[vast.offers]
gpu_names = ["RTX 4090"]
[demand]
source = "command"
command = "cat {demand}"
[policy]
target_proofs_per_hour = 500
proofs_per_hour_per_instance = 50
{policy}
"#,
            llm_url = llm.base_url(),
            vast_url = vast.url(),
            demand = dir.join("demand.json").display(),
        )
    };
    let f = Fleet::with_config("")
        .env("FLEETAGENT_LLM_API_KEY", LLM_KEY)
        .env("VAST_API_KEY", &vast.api_key());
    f.write_config(&tmp_config(f.path()));
    f.cmd(&["init"]).ok();
    f
}

/// Make one instance all the rules want for [`dead_fleet`] (59 queued, target 50 p/h at 100 p/h
/// an instance), so a test of one launch is not joined by the floor's (docs/guardrails.md).
pub(crate) fn one_instance_is_enough(f: &Fleet) {
    let cfg = std::fs::read_to_string(&f.config)
        .unwrap()
        .replace(
            "target_proofs_per_hour = 500",
            "target_proofs_per_hour = 50",
        )
        .replace(
            "proofs_per_hour_per_instance = 50",
            "proofs_per_hour_per_instance = 100",
        );
    f.write_config(&cfg);
}

pub(crate) const CAPS: &str = "max_dph_total = 10.0\nmax_instances = 20";
/// CAPS with one launch a pass, emergency or not: for tests that need a launch, not several
/// (each more create waits vast.ai's 4.5 s spacing in real time).
pub(crate) const ONE_LAUNCH: &str =
    "max_dph_total = 10.0\nmax_instances = 20\nlaunch_window_max = 1\nemergency_launch_max = 1";

/// Three launches already in the window, as the incident had them.
fn three_recent_launches(f: &Fleet, vast: &FakeVast) {
    let now = chrono::Utc::now().timestamp_millis();
    for i in 0..3 {
        let label = format!("fleetagent-early-{i}");
        let id = vast.add_instance(&label);
        vast.set_actual_status(id, Some("loading"));
        f.db()
            .execute(
                "INSERT INTO actions (kind, outcome, actor, label, instance_id, created_at)
                 VALUES ('launch', 'ok', 'llm', ?1, ?2, ?3)",
                rusqlite::params![label, id as i64, now - (10 - 4 * i) * 60_000],
            )
            .unwrap();
    }
}

fn tool_results(req: &Value) -> Vec<Value> {
    req["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| serde_json::from_str(m["content"].as_str().unwrap()).unwrap())
        .collect()
}

#[test]
fn incident_replay_through_the_model() {
    let llm = FakeLlm::start();
    let vast = FakeVast::start_real_time();
    vast.add_offers(10, "RTX 4090", 0.40, 0.99);
    vast.vast_rate_limits();
    let f = rig(&llm, &vast, CAPS, "");
    write_demand(f.path(), dead_fleet());
    three_recent_launches(&f, &vast);
    let launch = (
        "launch_instance",
        r#"{"reason": "59 queued and every worker is dead"}"#,
    );
    llm.push(Reply::tool_calls(&[launch, launch, launch, launch]));
    llm.push(Reply::text(
        "Launched three replacements; the fourth was refused.",
    ));
    f.cmd(&["trigger", "-p", "1", "-r", "workers died"]).ok();
    let out = f.cmd(&["run"]).ok();
    assert!(out.stdout.contains("-> action"), "{}", out.stdout);

    let creates = vast.requests_to(Route::Create);
    assert_eq!(creates.len(), 3, "exactly three creates reach vast.ai");
    assert!(creates.iter().all(|r| r.status == 200));
    for pair in creates.windows(2) {
        assert!(
            pair[1].at_ms - pair[0].at_ms >= 4_500,
            "creates spaced as vast.ai requires: {} ms",
            pair[1].at_ms - pair[0].at_ms
        );
    }
    // The model saw three successes and one refusal in DESIGN.md's shape.
    let reqs = llm.requests();
    let results = tool_results(&reqs[1]);
    assert_eq!(results.len(), 4);
    assert!(
        results[..3].iter().all(|r| r.get("error").is_none()),
        "{results:?}"
    );
    assert_eq!(results[3]["error"], "rate_limited");
    assert!(results[3]["retry_after_secs"].as_u64().unwrap() > 0);
    // The observation told it plainly.
    let first_prompt = reqs[0]["messages"].to_string();
    assert!(first_prompt.contains("WORKERS DEAD"), "{first_prompt}");
    assert!(
        first_prompt.contains("emergency bypass ON"),
        "{first_prompt}"
    );
    let run = &f.inspect()["runs"][0];
    assert_eq!(run["verdict"], "action");
    assert_eq!(llm.rejected_count(), 0, "{:?}", llm.rejections());
}

/// vast.ai spaces creates per key, not per process: a launch by the next `run` seconds after
/// the previous one's is spaced from the ledger, and never meets the 429 and its penalty.
#[test]
fn creates_of_consecutive_runs_are_spaced_without_a_429() {
    let llm = FakeLlm::start();
    let vast = FakeVast::start_real_time();
    vast.add_offers(10, "RTX 4090", 0.40, 0.99);
    vast.vast_rate_limits();
    let f = rig(&llm, &vast, CAPS, "quiet_interval_mins = 0");
    one_instance_is_enough(&f);
    write_demand(f.path(), dead_fleet());
    let launch = ("launch_instance", r#"{"reason": "every worker is dead"}"#);
    for n in 0..2 {
        llm.push(Reply::tool_calls(&[launch]));
        llm.push(Reply::text("Launched one."));
        f.cmd(&["trigger", "-p", "1", "-r", &format!("check {n}")])
            .ok();
        let out = f.cmd(&["run"]).ok();
        assert!(out.stdout.contains("-> action"), "run {n}: {}", out.stdout);
    }
    let creates = vast.requests_to(Route::Create);
    let statuses: Vec<u16> = creates.iter().map(|r| r.status).collect();
    assert_eq!(statuses, vec![200, 200], "no 429 between the two processes");
    assert!(
        creates[1].at_ms - creates[0].at_ms >= 4_500,
        "creates {} ms apart",
        creates[1].at_ms - creates[0].at_ms
    );
}

#[test]
fn same_request_without_the_emergency_is_refused_with_retry_after() {
    let llm = FakeLlm::start();
    let vast = FakeVast::start_real_time();
    vast.add_offers(10, "RTX 4090", 0.40, 0.99);
    let f = rig(&llm, &vast, CAPS, "");
    write_demand(f.path(), busy_fleet());
    three_recent_launches(&f, &vast);
    let launch = ("launch_instance", r#"{"reason": "backlog"}"#);
    llm.push(Reply::tool_calls(&[launch, launch, launch, launch]));
    llm.push(Reply::text("Rate limited; will check later."));
    f.cmd(&["trigger", "-p", "1", "-r", "backlog"]).ok();
    let out = f.cmd(&["run"]).ok();
    assert_eq!(vast.count(Route::Create), 0);
    let results = tool_results(&llm.requests()[1]);
    assert_eq!(results.len(), 4);
    for r in &results {
        assert_eq!(r["error"], "rate_limited", "{r}");
        assert_eq!(r["limit"], "3 launches per 15 min");
        assert!(r["retry_after_secs"].as_u64().unwrap() > 0);
    }
    // Asked for and all refused: never a plain no-action, in the line and the runs table.
    assert!(
        out.stdout
            .contains("-> action-refused: refused 4 launches (rate_limited)"),
        "{}",
        out.stdout
    );
    let run = &f.inspect()["runs"][0];
    assert_eq!(run["verdict"], "action-refused");
    assert_eq!(run["actions_refused"], 4);
}

#[test]
fn sigkill_between_create_and_record_is_adopted_not_duplicated() {
    let llm = FakeLlm::start();
    let vast = FakeVast::start_real_time();
    vast.add_offers(5, "RTX 4090", 0.40, 0.99);
    let f = rig(&llm, &vast, CAPS, "");
    one_instance_is_enough(&f);
    write_demand(f.path(), dead_fleet());
    llm.push(Reply::tool_call(
        "launch_instance",
        r#"{"reason": "dead fleet"}"#,
    ));
    f.cmd(&["trigger", "-p", "1", "-r", "workers died"]).ok();
    let crashed = f
        .command(&["run"])
        .env("FLEETAGENT_TEST_CRASH_AT", "launch-after-create")
        .output()
        .unwrap();
    assert!(!crashed.status.success());
    assert_eq!(vast.count(Route::Create), 1);
    let intent: (String, Option<i64>) = f
        .db()
        .query_row(
            "SELECT outcome, instance_id FROM actions WHERE kind = 'launch'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(
        intent,
        ("intent".to_string(), None),
        "the create was not recorded"
    );

    // The next pass: the model sees the launch in flight and asks nothing.
    llm.set_default(Reply::text("The replacement is booting."));
    f.cmd(&["run"]).ok();
    assert_eq!(vast.count(Route::Create), 1, "no second paid instance");
    let id = vast.instance_ids()[0] as i64;
    let (outcome, instance): (String, Option<i64>) = f
        .db()
        .query_row(
            "SELECT outcome, instance_id FROM actions WHERE kind = 'launch'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((outcome.as_str(), instance), ("ok", Some(id)), "adopted");
    assert_eq!(
        f.count(&format!(
            "SELECT COUNT(*) FROM instances WHERE vast_id = {id}"
        )),
        1
    );
    assert_eq!(
        f.inspect()["runs"][1]["status"],
        "failed",
        "the crashed pass"
    );
    assert_eq!(llm.rejected_count(), 0, "{:?}", llm.rejections());
}

#[test]
fn llm_down_with_fallback_rules_still_launches_in_an_emergency() {
    let llm = FakeLlm::start();
    llm.set_default(Reply::server_error(503));
    let vast = FakeVast::start_real_time();
    vast.add_offers(10, "RTX 4090", 0.40, 0.99);
    // One launch is all this test needs: each more would wait vast.ai's 4.5 s create spacing.
    let f = rig(&llm, &vast, ONE_LAUNCH, "");
    write_demand(f.path(), dead_fleet());
    f.cmd(&["trigger", "-p", "1", "-r", "workers died"]).ok();
    f.cmd(&["run"]).ok();
    assert_eq!(vast.count(Route::Create), 1, "the rules launched");
    let run = &f.inspect()["runs"][0];
    assert_eq!(run["decided_by"], "fallback-rules");
    assert_eq!(run["verdict"], "action");
    assert_eq!(f.inspect()["unconsumed_events"], 0);
    // Launch only: never a stop or destroy.
    assert_eq!(vast.count(Route::Destroy) + vast.count(Route::Manage), 0);
}

#[test]
fn llm_down_without_fallback_fails_and_keeps_the_events() {
    let llm = FakeLlm::start();
    llm.set_default(Reply::server_error(503));
    let vast = FakeVast::start_real_time();
    vast.add_offers(10, "RTX 4090", 0.40, 0.99);
    let f = rig(&llm, &vast, CAPS, "fallback = \"none\"");
    write_demand(f.path(), dead_fleet());
    f.cmd(&["trigger", "-p", "1", "-r", "workers died"]).ok();
    let out = f.cmd(&["run"]).code(1);
    assert_eq!(out.stderr.trim().lines().count(), 1, "{}", out.stderr);
    assert_eq!(vast.count(Route::Create), 0);
    let v = f.inspect();
    assert_eq!(v["unconsumed_events"], 1);
    assert_eq!(v["runs"][0]["status"], "failed");
    // What was asked, and why the model was unusable, stay on the failed run.
    assert!(
        v["runs"][0]["llm_calls"].as_i64().unwrap() >= 1,
        "{}",
        v["runs"][0]
    );
    assert!(
        v["runs"][0]["llm_error"]
            .as_str()
            .is_some_and(|e| e.contains("503")),
        "{}",
        v["runs"][0]
    );
}

/// 150 consecutive runs. Every third asks for offers (20 of them), lists the fleet and
/// launches (an action run with large tool outputs that accumulate in history); the others
/// answer without acting (no-action runs that must never reappear). Run 75 is killed between
/// a tool call and its result. Every request must pass the strict fake (zero 400s) and fit
/// the budget by the fake's own provider-like count. (It was 300 runs, the suite's slowest
/// test at 74 s on two cores, most of it each process loading the tokenizer; the history is
/// compacted from the third action run on, request 5 of 199, so the second half repeated
/// the first.)
#[test]
fn a_hundred_and_fifty_runs_never_break_the_sequence_or_the_budget() {
    const RUNS: usize = 150;
    let llm = FakeLlm::start();
    let vast = FakeVast::start_real_time();
    vast.add_offers(200, "RTX 4090", 0.40, 0.99);
    let budget = 6_000u64;
    let policy = "max_dph_total = 1000.0\nmax_instances = 1000\nlaunch_window_max = 1000\nemergency_launch_max = 1000";
    let f = rig(
        &llm,
        &vast,
        policy,
        &format!("context_budget_tokens = {budget}\nquiet_interval_mins = 0"),
    );
    write_demand(f.path(), busy_fleet());
    let turn = Arc::new(AtomicUsize::new(0));
    {
        let turn = Arc::clone(&turn);
        llm.set_default(Reply::dynamic(move |body: &Value| {
            let msgs = body["messages"].as_array().unwrap();
            if msgs.last().is_some_and(|m| m["role"] == "tool") {
                return Reply::text("Done: launched one more.");
            }
            if turn.fetch_add(1, Ordering::SeqCst) % 3 == 0 {
                Reply::tool_calls(&[
                    ("search_offers", r#"{"limit": 20}"#),
                    ("list_instances", "{}"),
                    ("launch_instance", r#"{"reason": "backlog persists"}"#),
                ])
            } else {
                Reply::text("Nothing to do.")
            }
        }));
    }
    let mut no_action_markers: Vec<String> = Vec::new();
    let db = f.db();
    for i in 0..RUNS {
        // An event as `trigger` records it (the doorbell is not needed: `run` is started here).
        let marker = format!("routine-marker-{i}");
        db.execute(
            "INSERT INTO events (priority, kind, reason, created_at) VALUES (2, 'trigger', ?1, 0)",
            [&marker],
        )
        .unwrap();
        // The timer spaces real runs 5 minutes apart; these follow each other at once. Age
        // the ledger so vast.ai's create spacing (which the client honours across processes,
        // from the ledger) does not make this test wait 4.5 s per launch.
        db.execute(
            "UPDATE actions SET created_at = created_at - 300000,
                                finished_at = finished_at - 300000",
            [],
        )
        .unwrap();
        let crash = i == RUNS / 2;
        let mut c = f.command(&["run"]);
        if crash {
            c.env("FLEETAGENT_TEST_CRASH_AT", "tool-before-result");
        }
        let out = c.output().unwrap();
        assert_eq!(
            out.status.success(),
            !crash,
            "run {i}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // The account keeps at most one page of instances (vast.ai lists 25 a page, one page
        // a second): the fleet this test grows is not what it is about, and every page more
        // would cost each later run a second of the client's page spacing.
        let ids = vast.instance_ids();
        for id in &ids[..ids.len().saturating_sub(20)] {
            vast.remove_instance(*id);
        }
        let verdict: Option<String> = db
            .query_row(
                "SELECT verdict FROM runs ORDER BY id DESC LIMIT 1",
                [],
                |r| r.get(0),
            )
            .unwrap();
        if verdict.as_deref() == Some("no-action") {
            no_action_markers.push(marker);
        }
    }
    assert_eq!(llm.rejected_count(), 0, "{:?}", llm.rejections());
    let reqs = llm.requests();
    // 300 first requests, a second one for each of the 100 action runs but the killed one.
    let verdicts: Vec<(String, i64)> = {
        let mut st = db
            .prepare("SELECT COALESCE(verdict, status), COUNT(*) FROM runs GROUP BY 1")
            .unwrap();
        let v = st
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        v
    };
    let refusals: Vec<(String, i64)> = {
        let mut st = db
            .prepare(
                "SELECT outcome || ' ' || COALESCE(detail, ''), COUNT(*) FROM actions GROUP BY 1",
            )
            .unwrap();
        let v = st
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        v
    };
    assert_eq!(
        reqs.len(),
        RUNS + RUNS / 3 - 1,
        "{} requests; runs {verdicts:?}; actions {refusals:?}",
        reqs.len()
    );
    let mut max_seen = 0;
    for (k, req) in reqs.iter().enumerate() {
        fake_llm::validate(req).unwrap_or_else(|e| panic!("request {k}: {e:?}"));
        let tokens = fake_llm::provider_prompt_tokens(req);
        max_seen = max_seen.max(tokens);
        // The prompt and the longest answer it allows fit the budget together.
        let output = req["max_tokens"]
            .as_u64()
            .expect("max_tokens on every request");
        assert_eq!(output, 1024, "request {k}: llm.max_output_tokens");
        assert!(
            tokens + output <= budget,
            "request {k}: {tokens} prompt tokens + {output} output > {budget}"
        );
    }
    // Our own estimate of every request stayed under the budget less its margin and output.
    let max_est: i64 = f.count("SELECT MAX(prompt_tokens_est) FROM llm_calls");
    assert!(max_est as u64 <= budget - budget / 20 - 1024, "{max_est}");
    // No no-action run's observation ever came back in a later prompt.
    let all: String = reqs.iter().map(|r| r.to_string()).collect();
    for m in &no_action_markers {
        let hits = all.matches(&format!("\\\"{m}\\\"")).count();
        assert!(hits <= 1, "{m} reappeared in a later prompt ({hits} times)");
    }
    // Compaction did its job: old tool outputs shrank to placeholders.
    assert!(
        all.contains("[compacted]"),
        "no compaction over {RUNS} runs"
    );
    // And early: the killed run and most of the others meet a full, compacted history.
    let first_compacted = reqs
        .iter()
        .position(|r| r.to_string().contains("[compacted]"))
        .unwrap();
    assert!(
        first_compacted < reqs.len() / 4,
        "first compacted request {first_compacted} of {}",
        reqs.len()
    );
    // The request right after the killed run carried a synthesized result or left the
    // broken turn out; either way it was valid (checked above) and the run after it acted.
    let failed: i64 = f.count("SELECT COUNT(*) FROM runs WHERE status = 'failed'");
    assert_eq!(failed, 1);
    // The model decided every pass that finished: the budget never forced the fallback.
    assert_eq!(
        f.count("SELECT COUNT(*) FROM runs WHERE status = 'ok' AND decided_by = 'llm'"),
        RUNS as i64 - 1
    );
    println!(
        "{RUNS} runs: {} requests (the first compacted: {first_compacted}), largest {max_seen} provider tokens (budget {budget}), estimate max {max_est}",
        reqs.len()
    );
}

/// A chat completion whose one tool call has the given id (some servers restart ids every
/// turn: `call_0`, `launch_instance:0`).
fn call_with_id(id: &str, name: &str, arguments: &str) -> Reply {
    calls_with_ids(&[(id, name, arguments)])
}

#[test]
fn a_server_that_reuses_tool_call_ids_still_gets_each_launch() {
    let llm = FakeLlm::start();
    let vast = FakeVast::start_real_time();
    vast.add_offers(10, "RTX 4090", 0.40, 0.99);
    let f = rig(&llm, &vast, CAPS, "");
    write_demand(f.path(), busy_fleet());
    llm.push(call_with_id(
        "call_0",
        "launch_instance",
        r#"{"reason":"first"}"#,
    ));
    llm.push(call_with_id(
        "call_0",
        "launch_instance",
        r#"{"reason":"second"}"#,
    ));
    llm.push(Reply::text("launched two"));
    f.cmd(&["trigger", "-p", "1", "-r", "backlog"]).ok();
    f.cmd(&["run"]).ok();
    // Two calls, two creates: the second is not taken for a repeat of the first.
    assert_eq!(vast.count(Route::Create), 2);
    let last = llm.requests().pop().unwrap();
    let results = tool_results(&last);
    assert_eq!(results.len(), 2, "{results:?}");
    for r in &results {
        assert_eq!(r["ok"], true, "{r}");
        assert!(r.get("already").is_none(), "{r}");
    }
    // And the prompt never holds two calls with one id.
    let mut ids: Vec<&str> = last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["tool_calls"].as_array().into_iter().flatten())
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    let n = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), n, "{ids:?}");
    assert_eq!(llm.rejected_count(), 0, "{:?}", llm.rejections());
}

/// A chat completion with these calls (id, name, arguments) as sent.
fn calls_with_ids(calls: &[(&str, &str, &str)]) -> Reply {
    let calls: Vec<Value> = calls
        .iter()
        .map(|(id, name, arguments)| {
            json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}})
        })
        .collect();
    Reply::Json(json!({
        "id": "chatcmpl-loop", "object": "chat.completion", "model": "gpt-4.1-mini",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": null, "tool_calls": calls}}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}
    }))
}

/// A small model's loop (the LLM walkthrough): 16 searches in one answer sent 16 searches to
/// vast.ai, which counts them against a daily quota (80 a pass over four rounds), and went on
/// after vast.ai said the quota was spent, so the floor's WORKERS DEAD launch found none
/// left; and one call the server sent twice rented two instances. Now a pass sends at most
/// three, a search without filters reuses the pass's, none goes out after the quota answer
/// (the floor's launch included), and a copy of a call (same id, name, arguments) is one call.
#[test]
fn a_search_loop_spends_three_searches_and_a_call_sent_twice_rents_once() {
    let llm = FakeLlm::start();
    let vast = FakeVast::start_real_time();
    vast.add_offers(10, "RTX 4090", 0.40, 0.99);
    let f = rig(&llm, &vast, CAPS, "");
    write_demand(f.path(), busy_fleet());
    let mut calls: Vec<(String, &str, &str)> = Vec::new();
    for i in 0..8 {
        calls.push((format!("s{i}"), "search_offers", "{}"));
        calls.push((
            format!("g{i}"),
            "search_offers",
            r#"{"gpu_name": "RTX 4090", "limit": 3}"#,
        ));
    }
    let launch = r#"{"reason": "backlog"}"#;
    calls.push(("l0".into(), "launch_instance", launch));
    calls.push(("l0".into(), "launch_instance", launch));
    let calls: Vec<(&str, &str, &str)> =
        calls.iter().map(|(i, n, a)| (i.as_str(), *n, *a)).collect();
    llm.push(calls_with_ids(&calls));
    llm.push(Reply::text("searched and launched one"));
    f.cmd(&["trigger", "-p", "1", "-r", "backlog"]).ok();
    f.cmd(&["run"]).ok();
    assert_eq!(vast.count(Route::Offers), 3);
    assert_eq!(vast.count(Route::Create), 1);
    let results = tool_results(&llm.requests()[1]);
    assert_eq!(results.len(), 17);
    for r in &results[..16] {
        assert_eq!(r["matching"], 10, "{r}");
    }
    assert_eq!(results[16]["ok"], true, "{}", results[16]);

    // The quota spent: one search a pass, the model's and the floor's launch refused.
    vast.set_search_limit(0, "1754086400");
    write_demand(f.path(), dead_fleet());
    let calls: Vec<(String, &str, &str)> = (0..6)
        .map(|i| (format!("q{i}"), "search_offers", "{}"))
        .collect();
    let calls: Vec<(&str, &str, &str)> =
        calls.iter().map(|(i, n, a)| (i.as_str(), *n, *a)).collect();
    llm.push(calls_with_ids(&calls));
    llm.push(Reply::text("the quota is spent"));
    f.cmd(&["trigger", "-p", "1", "-r", "workers died"]).ok();
    f.cmd(&["run"]).ok();
    assert_eq!(vast.count(Route::Offers), 4);
    // The prompt holds the first pass's results too (an action pass): this pass's are last.
    let results = tool_results(&llm.requests()[3]);
    assert_eq!(results.len(), 17 + 6);
    for r in &results[17..] {
        assert_eq!(r["search_quota_exhausted"], true, "{r}");
    }
    assert_eq!(llm.rejected_count(), 0, "{:?}", llm.rejections());
}

#[test]
fn a_slow_model_cannot_push_the_pass_past_its_deadline() {
    let llm = FakeLlm::start();
    // Every answer takes 2.5 s and asks for another tool round: 20 rounds would take 50 s,
    // past the 15 s deadline and its 30 s grace, where the watchdog kills the process.
    llm.set_default(Reply::delayed(
        std::time::Duration::from_millis(2500),
        Reply::tool_call("list_instances", "{}"),
    ));
    let vast = FakeVast::start_real_time();
    let f = rig(&llm, &vast, CAPS, "max_tool_rounds = 20");
    let config = std::fs::read_to_string(&f.config)
        .unwrap()
        .replace("deadline_secs = 120", "deadline_secs = 15");
    f.write_config(&config);
    write_demand(f.path(), busy_fleet());
    f.cmd(&["trigger", "-p", "1", "-r", "look"]).ok();
    f.cmd(&["run"]).ok();
    let run = &f.inspect()["runs"][0];
    assert_eq!(run["status"], "ok", "{run}");
    let took = chrono::DateTime::parse_from_rfc3339(run["finished_at"].as_str().unwrap()).unwrap()
        - chrono::DateTime::parse_from_rfc3339(run["started_at"].as_str().unwrap()).unwrap();
    assert!(took.num_seconds() < 15, "the pass took {took}");
    let asked = llm.request_count();
    assert!((1..20).contains(&asked), "{asked} model turns");
}

/// An answer of more launches than the deadline leaves time for (creates are spaced 4.5 s
/// apart): the calls past the deadline's reserve are not run, the model hears why, and the
/// pass ends in time (it ran past the deadline and was killed mid-pass, a launch left open).
#[test]
fn calls_the_deadline_leaves_no_time_for_are_not_run_and_the_pass_ends() {
    let llm = FakeLlm::start();
    let vast = FakeVast::start_real_time();
    vast.add_offers(10, "RTX 4090", 0.40, 0.99);
    let f = rig(
        &llm,
        &vast,
        &format!("{CAPS}\nlaunch_window_max = 10\nemergency_launch_max = 10"),
        "",
    );
    let cfg = std::fs::read_to_string(&f.config)
        .unwrap()
        .replace("deadline_secs = 120", "deadline_secs = 10");
    f.write_config(&cfg);
    write_demand(f.path(), busy_fleet());
    let launch = ("launch_instance", r#"{"reason": "backlog"}"#);
    llm.push(Reply::tool_calls(&[launch, launch, launch, launch]));
    llm.push(Reply::text("Launched."));
    f.cmd(&["trigger", "-p", "1", "-r", "backlog"]).ok();
    let out = f.cmd(&["run"]).ok();
    assert!(
        out.stderr.contains(
            "tool call(s) of the model not run: the pass's deadline (run.deadline_secs = 10)"
        ),
        "{}",
        out.stderr
    );
    let creates = vast.count(Route::Create);
    assert!((1..4).contains(&creates), "{creates} creates");
    let late = f.count(
        "SELECT COUNT(*) FROM messages WHERE kind = 'tool_result' AND content LIKE '%not run: the pass''s deadline is%'",
    );
    assert_eq!(late as usize + creates, 4);
    let run = &f.inspect()["runs"][0];
    assert_eq!(run["status"], "ok", "{run}");
}
