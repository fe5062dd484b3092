//! The mind end to end: the real binary against a strict fake OpenAI-compatible server.
//! Retries and fallback, bad tool calls fed back, skipped quiet passes, no-action runs out of
//! later prompts, operator messages answered.

use serde_json::Value;

use crate::common::fake_llm::{FakeLlm, Reply};
use crate::common::fleet::Fleet;

/// A fast config pointing the LLM at the fake.
pub fn llm_config(base_url: &str, extra: &str) -> String {
    format!(
        r#"
[run]
deadline_secs = 120
[debounce]
p0_secs = 0
p1_secs = 1
p2_secs = 1
max_wait_secs = 5
[llm]
base_url = "{base_url}"
model = "gpt-4.1-mini"
timeout_secs = 2
{extra}
"#
    )
}

fn fleet_with(llm: &FakeLlm, extra: &str) -> Fleet {
    let extra = if extra.contains("retry_budget_secs") {
        extra.to_string()
    } else {
        format!("retry_budget_secs = 8\n{extra}")
    };
    let f = Fleet::with_config(&llm_config(&llm.base_url(), &extra))
        .env("FLEETAGENT_LLM_API_KEY", "sk-test-mind-0123456789");
    f.cmd(&["init"]).ok();
    f
}

fn last_run(f: &Fleet) -> Value {
    f.inspect()["runs"][0].clone()
}

fn messages_text(req: &Value) -> String {
    req["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap_or("").to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn transient_failures_are_retried_then_answered() {
    let llm = FakeLlm::start();
    let f = fleet_with(&llm, "");
    let pairs = [
        (Reply::rate_limited(1), Reply::server_error(500)),
        (Reply::html(), Reply::truncated_json()),
        (
            Reply::error_in_body("upstream overloaded"),
            Reply::EmptyChoices,
        ),
    ];
    for (i, (a, b)) in pairs.into_iter().enumerate() {
        llm.push(a);
        llm.push(b);
        llm.push(Reply::text(&format!("All quiet {i}; nothing to do.")));
        f.cmd(&["trigger", "-p", "0", "-r", "check"]).ok();
        let out = f.cmd(&["run"]).ok();
        assert!(out.stdout.contains("no-action"), "{}", out.stdout);
        assert_eq!(llm.request_count(), 3 * (i + 1));
        let run = last_run(&f);
        assert_eq!(run["decided_by"], "llm", "{run}");
        assert_eq!(run["llm_calls"], 1);
        let answer = f.cmd(&["history"]).ok().stdout;
        assert!(answer.contains(&format!("All quiet {i}")), "{answer}");
    }
    assert_eq!(llm.rejected_count(), 0, "{:?}", llm.rejections());
    let attempts: Vec<i64> = {
        let db = f.db();
        let mut st = db
            .prepare("SELECT attempts FROM llm_calls ORDER BY id")
            .unwrap();
        let v = st
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        v
    };
    assert_eq!(attempts, vec![3, 3, 3]);
}

#[test]
fn a_timeout_is_retried() {
    let llm = FakeLlm::start();
    let f = fleet_with(&llm, "");
    llm.push(Reply::delayed(
        std::time::Duration::from_secs(4),
        Reply::text("late"),
    ));
    llm.push(Reply::text("on time"));
    f.cmd(&["trigger", "-p", "0", "-r", "x"]).ok();
    f.cmd(&["run"]).ok();
    assert_eq!(last_run(&f)["decided_by"], "llm");
    assert!(f.cmd(&["history"]).ok().stdout.contains("on time"));
}

#[test]
fn llm_down_falls_back_to_rules_and_doctor_says_so() {
    let llm = FakeLlm::start();
    let f = fleet_with(&llm, "retry_budget_secs = 3");
    llm.set_default(Reply::server_error(503));
    f.cmd(&["trigger", "-p", "0", "-r", "x"]).ok();
    f.cmd(&["wakes", "add", "--in", "0s", "--reason", "w"]).ok();
    let out = f.cmd(&["run"]).ok();
    assert!(out.stdout.contains("no-action"), "{}", out.stdout);
    let run = last_run(&f);
    assert_eq!(run["status"], "ok");
    assert_eq!(run["decided_by"], "fallback-rules");
    assert!(run["llm_error"].as_str().unwrap().contains("503"), "{run}");
    let v = f.inspect();
    assert_eq!(v["unconsumed_events"], 0, "the pass consumed its events");
    assert_eq!(v["pending_wakes"], 0);
    let doc = f.cmd(&["doctor"]).code(1);
    assert!(doc.stdout.contains("the LLM failed"), "{}", doc.stdout);
    let hist = f.cmd(&["history"]).ok().stdout;
    assert!(hist.contains("Rules (the LLM was unusable"), "{hist}");
}

#[test]
fn llm_down_without_fallback_fails_clearly_and_loses_nothing() {
    let llm = FakeLlm::start();
    let f = fleet_with(&llm, "retry_budget_secs = 3\nfallback = \"none\"");
    llm.set_default(Reply::server_error(502));
    f.cmd(&["trigger", "-p", "0", "-r", "x"]).ok();
    f.cmd(&["wakes", "add", "--in", "0s", "--reason", "w"]).ok();
    let out = f.cmd(&["run"]).code(1);
    assert_eq!(out.stderr.trim().lines().count(), 1, "{}", out.stderr);
    assert!(out.stderr.contains("fallback = \"none\""), "{}", out.stderr);
    let v = f.inspect();
    assert_eq!(v["unconsumed_events"], 1);
    assert_eq!(v["deferred_events"], 1);
    assert_eq!(v["pending_wakes"], 1);
    assert_eq!(v["runs"][0]["status"], "failed");
}

#[test]
fn a_rejected_request_is_not_retried() {
    let llm = FakeLlm::start();
    let f = fleet_with(&llm, "fallback = \"none\"");
    llm.push(Reply::openai_error(
        400,
        "Invalid value for 'model'",
        "invalid_request_error",
        None,
    ));
    f.cmd(&["trigger", "-p", "0", "-r", "x"]).ok();
    let out = f.cmd(&["run"]).code(1);
    assert!(
        out.stderr.contains("Invalid value for 'model'"),
        "{}",
        out.stderr
    );
    assert_eq!(llm.request_count(), 1);
}

#[test]
fn bad_tool_calls_are_fed_back_as_errors() {
    let llm = FakeLlm::start();
    let f = fleet_with(&llm, "");
    llm.push(Reply::tool_calls(&[
        ("schedule_next_check", "{not json"),
        ("teleport_instance", "{}"),
        ("schedule_next_check", r#"{"minutes": 0, "reason": "x"}"#),
        (
            "schedule_next_check",
            r#"{"minutes": "ten", "reason": "x"}"#,
        ),
        (
            "schedule_next_check",
            r#"{"minutes": 10, "reason": "x", "extra": 1}"#,
        ),
        (
            "schedule_next_check",
            r#"{"minutes": 10, "reason": "check loading"}"#,
        ),
    ]));
    llm.push(Reply::text("Scheduled a check."));
    f.cmd(&["trigger", "-p", "0", "-r", "x"]).ok();
    let out = f.cmd(&["run"]).ok();
    // The operator hears of it: what the model asked for and was not done, named.
    assert!(
        out.stderr
            .contains("the model's answers were unusable in part")
            && out.stderr.contains("5 invalid call(s)")
            && out.stderr.contains("teleport_instance (unknown_tool)"),
        "{}",
        out.stderr
    );
    let reqs = llm.requests();
    assert_eq!(reqs.len(), 2);
    let tool_msgs: Vec<&Value> = reqs[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .collect();
    assert_eq!(tool_msgs.len(), 6);
    let contents: Vec<Value> = tool_msgs
        .iter()
        .map(|m| serde_json::from_str(m["content"].as_str().unwrap()).unwrap())
        .collect();
    assert_eq!(contents[0]["error"], "invalid_args");
    assert_eq!(contents[1]["error"], "unknown_tool");
    assert_eq!(contents[2]["error"], "invalid_args");
    assert_eq!(contents[3]["error"], "invalid_args");
    assert_eq!(contents[4]["error"], "invalid_args");
    assert_eq!(contents[5]["ok"], true);
    assert_eq!(llm.rejected_count(), 0, "{:?}", llm.rejections());
    assert_eq!(f.inspect()["pending_wakes"], 1);
    // A schedule is not a fleet change.
    assert_eq!(last_run(&f)["verdict"], "no-action");
}

#[test]
fn quiet_passes_are_skipped_until_something_happens() {
    let llm = FakeLlm::start();
    let f = fleet_with(&llm, "");
    f.cmd(&["run"]).ok();
    assert_eq!(llm.request_count(), 1, "the first pass asks the model");
    for _ in 0..3 {
        f.cmd(&["run"]).ok();
    }
    assert_eq!(llm.request_count(), 1, "nothing new: no calls");
    let v = f.inspect();
    for i in 0..3 {
        assert_eq!(v["runs"][i]["verdict"], "skipped", "{}", v["runs"][i]);
        assert_eq!(v["runs"][i]["llm_calls"], 0);
    }
    f.cmd(&["trigger", "-p", "2", "-r", "something changed"])
        .ok();
    f.cmd(&["run"]).ok();
    assert_eq!(llm.request_count(), 2, "an event ends the skip");
    f.cmd(&["run"]).ok();
    assert_eq!(llm.request_count(), 2);
    f.cmd(&["wakes", "add", "--in", "0s", "--reason", "look again"])
        .ok();
    f.cmd(&["run"]).ok();
    assert_eq!(llm.request_count(), 3, "a due wake ends the skip");
}

/// An operator message that a fallback pass took (the model down, 401) is heard by the model
/// at the first pass it answers again, nothing else new (a soak: 28 minutes late, the passes
/// between skipped as quiet).
#[test]
fn a_message_the_fallback_took_reaches_the_model_once_it_answers() {
    let llm = FakeLlm::start();
    let f = fleet_with(&llm, "");
    f.cmd(&["run"]).ok();
    assert_eq!(llm.request_count(), 1);
    llm.set_default(Reply::openai_error(
        401,
        "bad key",
        "invalid_request_error",
        None,
    ));
    f.cmd(&["message", "unheard-marker: drain the fleet tonight"])
        .ok();
    f.cmd(&["run"]).ok();
    assert_eq!(
        last_run(&f)["decided_by"],
        "fallback-rules",
        "{}",
        last_run(&f)
    );
    llm.set_default(Reply::text("Heard."));
    let before = llm.request_count();
    f.cmd(&["run"]).ok();
    assert_eq!(llm.request_count(), before + 1, "{}", last_run(&f));
    let reqs = llm.requests();
    assert!(
        messages_text(reqs.last().unwrap()).contains("unheard-marker"),
        "the model was not told"
    );
    f.cmd(&["run"]).ok();
    assert_eq!(llm.request_count(), before + 1, "heard once: quiet again");
}

#[test]
fn no_action_runs_stay_out_of_later_prompts_but_operator_exchanges_stay() {
    let llm = FakeLlm::start();
    let f = fleet_with(&llm, "");
    f.cmd(&["trigger", "-p", "0", "-r", "first-marker-event"])
        .ok();
    f.cmd(&["run"]).ok();
    f.cmd(&["message", "operator-question-marker: how is it going?"])
        .ok();
    llm.push(Reply::text("operator-answer-marker: all fine."));
    f.cmd(&["run"]).ok();
    f.cmd(&["trigger", "-p", "0", "-r", "third-marker-event"])
        .ok();
    f.cmd(&["run"]).ok();
    let reqs = llm.requests();
    assert_eq!(reqs.len(), 3);
    let third = messages_text(&reqs[2]);
    assert!(
        !third.contains("first-marker-event"),
        "a no-action run leaked: {third}"
    );
    assert!(third.contains("operator-question-marker"), "{third}");
    assert!(third.contains("operator-answer-marker"), "{third}");
    assert!(third.contains("third-marker-event"));
    let ops = &f.inspect()["operator_messages"];
    assert!(ops[0]["message"]
        .as_str()
        .unwrap()
        .contains("operator-question-marker"));
    assert!(ops[0]["answer"]
        .as_str()
        .unwrap()
        .contains("operator-answer-marker"));
    // The system prompt leads every request; the pinned state follows the history, right
    // before this pass's observation (the system prompt, the tools and the history stay a
    // prefix a server's prompt cache can reuse); the two go as one user message (chat
    // templates that want user and assistant to alternate refuse two in a row).
    let msgs = reqs[2]["messages"].as_array().unwrap();
    let text = |i: usize| msgs[i]["content"].as_str().unwrap_or("");
    assert_eq!(msgs[0]["role"], "system");
    assert!(!text(0).contains("## Current state"));
    let state = (0..msgs.len())
        .find(|&i| text(i).starts_with("## Current state"))
        .expect("a state block");
    let answer = (0..msgs.len())
        .find(|&i| text(i).contains("operator-answer-marker"))
        .unwrap();
    assert_eq!(msgs[state]["role"], "user");
    assert!(answer < state && state == msgs.len() - 1, "{msgs:?}");
    assert!(text(state).contains("third-marker-event"));
    for pair in msgs.windows(2) {
        assert!(
            !(pair[0]["role"] == "user" && pair[1]["role"] == "user"),
            "two user messages in a row: {msgs:?}"
        );
    }
}

#[test]
fn reported_and_estimated_tokens_are_stored_side_by_side() {
    let llm = FakeLlm::start();
    let f = fleet_with(&llm, "");
    f.cmd(&["trigger", "-p", "0", "-r", "x"]).ok();
    f.cmd(&["run"]).ok();
    let (est, rep): (i64, i64) = f
        .db()
        .query_row(
            "SELECT prompt_tokens_est, prompt_tokens_reported FROM llm_calls",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert!(rep > 0);
    assert!(
        est as f64 >= rep as f64 * 0.98,
        "estimate {est} under-counts {rep}"
    );
    let run = last_run(&f);
    assert_eq!(run["prompt_tokens_est"], est);
    assert_eq!(run["prompt_tokens_reported"], rep);
    let ratio = f.inspect()["llm"]["reported_to_estimate_ratio"]
        .as_f64()
        .unwrap();
    assert!(ratio > 0.5 && ratio <= 1.02, "{ratio}");
}

#[test]
fn a_budget_too_small_for_the_minimal_prompt_fails_clearly() {
    let llm = FakeLlm::start();
    let f = fleet_with(&llm, "context_budget_tokens = 2000\nfallback = \"none\"");
    let long = "please read this carefully ".repeat(290);
    f.cmd(&["message", &long]).ok();
    let out = f.cmd(&["run"]).code(1);
    assert!(
        out.stderr.contains("minimal prompt needs"),
        "{}",
        out.stderr
    );
    assert_eq!(llm.request_count(), 0, "never sends an over-budget request");
}

/// A model that answers only on its second attempt (a 503 first): the pass is the model's,
/// and the journal says it was slow or failing, the step before the fallback decides (it
/// left no trace but `llm_calls.attempts`).
#[test]
fn an_answer_after_a_retry_is_said_at_warning() {
    let llm = FakeLlm::start();
    let f = fleet_with(&llm, "quiet_interval_mins = 0");
    llm.push(Reply::status(503, r#"{"error":{"message":"overloaded"}}"#));
    llm.push(Reply::text("All is well."));
    f.cmd(&["message", "status?"]).ok();
    let out = f.cmd(&["run"]).ok();
    assert!(
        out.stderr.contains("the LLM answered on attempt 2 after "),
        "{}",
        out.stderr
    );
    assert_eq!(f.inspect()["runs"][0]["decided_by"], "llm");
}

/// Answers that ran nothing though the server answered (the LLM walkthrough): an empty one
/// was stored nowhere (no journal line, the operator's message "no answer yet" for ever), and
/// with every answer cut at llm.max_output_tokens `doctor` stayed green. Now an empty answer
/// is said at warning and noted, and three such answers in a row make the llm check red
/// until a usable one.
#[test]
fn answers_that_ran_nothing_are_said_and_make_doctor_red() {
    let llm = FakeLlm::start();
    let f = fleet_with(&llm, "");
    // An empty answer that closes a pass whose calls ran is the model's "done" (the re-test:
    // it was said to have run nothing, and a note told the model to act).
    llm.push(Reply::tool_call(
        "schedule_next_check",
        r#"{"minutes": 10, "reason": "look again"}"#,
    ));
    llm.push(Reply::text(""));
    f.cmd(&["trigger", "-p", "0", "-r", "first"]).ok();
    let out = f.cmd(&["run"]).ok();
    assert!(!out.stderr.contains("answer was empty"), "{}", out.stderr);
    assert_eq!(
        f.count("SELECT COUNT(*) FROM llm_calls WHERE unusable IS NOT NULL"),
        0
    );
    f.cmd(&["message", "are you there?"]).ok();
    llm.push(Reply::text(""));
    let out = f.cmd(&["run"]).ok();
    assert!(
        out.stderr
            .contains("the model's answer was empty (no text, no tool call)"),
        "{}",
        out.stderr
    );
    assert_eq!(
        f.inspect()["operator_messages"][0]["answer"],
        "(the model answered nothing)"
    );
    let cut = Reply::Json(serde_json::json!({
        "id": "chatcmpl-cut", "object": "chat.completion", "model": "gpt-4.1-mini",
        "choices": [{"index": 0, "finish_reason": "length", "message": {
            "role": "assistant", "content": "I will launch an instance because the queue"}}]
    }));
    for _ in 0..2 {
        llm.push(cut.clone());
        f.cmd(&["trigger", "-p", "0", "-r", "again"]).ok();
        f.cmd(&["run"]).ok();
    }
    let llm_check = |f: &Fleet| -> Value {
        let v: Value = serde_json::from_str(&f.cmd(&["doctor", "--json"]).stdout).unwrap();
        v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "llm")
            .unwrap()
            .clone()
    };
    let check = llm_check(&f);
    assert_eq!(check["ok"], false, "{check}");
    assert!(
        check["detail"]
            .as_str()
            .unwrap()
            .contains("last 3 answers ran nothing (2 cut at llm.max_output_tokens, 1 empty)"),
        "{check}"
    );
    llm.push(Reply::text("All steady, nothing to do."));
    f.cmd(&["trigger", "-p", "0", "-r", "once more"]).ok();
    f.cmd(&["run"]).ok();
    let check = llm_check(&f);
    assert_eq!(check["ok"], true, "{check}");
}
