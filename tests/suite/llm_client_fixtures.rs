//! Response shapes real servers sent (tests/fixtures/llm/, where each came from in its
//! README) through the parser, the HTTP client and a whole `run` pass of the agent against
//! the strict fake, which here also plays llama-server and answers 500 to any history with
//! tool-call arguments that are not JSON. Then: a stored invalid argument never reaches a
//! later request (also one stored by an older version), a parse-error 500 is not retried,
//! `max_tokens` is in every request, an answer cut at the limit runs none of its calls, and
//! what is said about an answer (malformed, cut, invalid arguments) comes in a message of
//! its own, never inside the model's turn.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use fleetagent::clock::ManualClock;
use fleetagent::llm::http::parse_completion;
use fleetagent::llm::{ChatMessage, ChatRequest, HttpLlmClient, LlmClient, LlmError, Role};
use serde_json::{json, Value};

use super::agent_e2e::{busy_fleet, rig, write_demand};
use crate::common::fake_llm::{FakeLlm, Reply};
use crate::common::fake_vast::{FakeVast, Route};
use crate::common::fleet::Fleet;

const MAX_OUTPUT: u64 = 777;
const CAPS: &str = "max_dph_total = 10.0\nmax_instances = 20";
const MALFORMED: &str = "It wrote a tool call as text, so nothing ran.";
const CUT: &str = "It was cut at max_output_tokens (777) and is incomplete";

/// What one fixture must do.
struct Case {
    file: &'static str,
    /// Parsed: the tool calls' names, the text, finish_reason (2xx only).
    calls: &'static [&'static str],
    content: Option<&'static str>,
    finish: Option<&'static str>,
    /// The pass: who decided, the verdict (None: whatever the fallback rules did), creates
    /// that reached vast.ai, tool results `invalid_args`, what the note after the answer
    /// says, requests the pass sent (the model's turns, retries included: at least this many).
    decided_by: &'static str,
    verdict: Option<&'static str>,
    creates: usize,
    invalid: usize,
    note: Option<&'static str>,
    requests: usize,
    /// The client's error must say this, and the run's when the model was unusable.
    llm_error: Option<&'static str>,
}

const fn ok(file: &'static str) -> Case {
    Case {
        file,
        calls: &[],
        content: None,
        finish: None,
        decided_by: "llm",
        verdict: Some("no-action"),
        creates: 0,
        invalid: 0,
        note: None,
        requests: 1,
        llm_error: None,
    }
}

const fn failed(file: &'static str, requests: usize, llm_error: &'static str) -> Case {
    Case {
        decided_by: "fallback-rules",
        verdict: None,
        requests,
        llm_error: Some(llm_error),
        ..ok(file)
    }
}

const CASES: &[Case] = &[
    Case {
        calls: &["launch_instance", "list_instances"],
        finish: Some("tool_calls"),
        verdict: Some("action"),
        creates: 1,
        requests: 2,
        ..ok("llama-cpp-python.200.tool-calls.json")
    },
    Case {
        calls: &["launch_instance", "launch_instance"],
        finish: Some("tool_calls"),
        verdict: Some("action"),
        creates: 1,
        invalid: 1,
        requests: 2,
        ..ok("llama-cpp-python.200.tool-call-truncated.json")
    },
    // A call written as text: asked again in the pass (the fake then says "no action").
    Case {
        content: Some("functions.launch_instance:"),
        finish: Some("stop"),
        note: Some(MALFORMED),
        requests: 2,
        ..ok("llama-cpp-python.200.functions-as-text.json")
    },
    // Its quotes HTML-escaped (`&#34;`): read as quotes, the launch goes through.
    Case {
        calls: &["launch_instance"],
        finish: Some("tool_calls"),
        verdict: Some("action"),
        creates: 1,
        requests: 2,
        ..ok("llama-cpp-python.200.html-escaped-arguments.json")
    },
    Case {
        calls: &["list_instances"],
        finish: Some("tool_calls"),
        requests: 2,
        ..ok("llama-cpp-python.200.spaced-empty-arguments.json")
    },
    failed(
        "llama-cpp-python.400.context-length-exceeded.json",
        1,
        "maximum context length is 3072 tokens",
    ),
    // Says nothing: transient, retried within retry_budget_secs (in the pass the retry gets
    // the fake's default answer, "no action needed"; from the client alone it gives up).
    Case {
        requests: 2,
        llm_error: Some("HTTP 500"),
        ..ok("llama-cpp-python.500.empty-message.json")
    },
    Case {
        calls: &["launch_instance"],
        finish: Some("tool_calls"),
        verdict: Some("action"),
        creates: 1,
        requests: 2,
        ..ok("llama-server.200.tool-call.json")
    },
    Case {
        content: Some(r#"{"name": "launch_instance", "arguments""#),
        finish: Some("stop"),
        note: Some(MALFORMED),
        requests: 2,
        ..ok("llama-server.200.call-in-content.json")
    },
    Case {
        content: Some(r#"{"name": "launch_instance", "arguments""#),
        finish: Some("length"),
        note: Some(MALFORMED),
        requests: 2,
        ..ok("llama-server.200.call-in-content-cut-at-length.json")
    },
    Case {
        calls: &["launch_instance", "launch_instance"],
        finish: Some("length"),
        note: Some(
            "It was cut at max_output_tokens (777) and is incomplete; none of its tool calls ran (launch_instance, launch_instance).",
        ),
        ..ok("llama-server.200.tool-calls-cut-at-length.json")
    },
    Case {
        calls: &["list_instances", "launch_instance"],
        finish: Some("tool_calls"),
        // Blank arguments run as `{}`: the listing works, the launch lacks its reason.
        invalid: 1,
        requests: 2,
        ..ok("llama-server.200.empty-arguments.json")
    },
    Case {
        content: Some("No action needed."),
        finish: Some("stop"),
        ..ok("llama-server.200.plain-text.json")
    },
    failed(
        "llama-server.400.exceed-context-size.json",
        1,
        "exceeds the available context size",
    ),
    failed(
        "llama-server.500.parse-arguments.json",
        1,
        "Failed to parse tool call arguments as JSON",
    ),
];

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/llm")
}

/// The HTTP status from the file name, `<server>.<status>.<shape>.json`.
fn status_of(file: &str) -> u16 {
    file.split('.').nth(1).and_then(|s| s.parse().ok()).unwrap()
}

fn body_of(file: &str) -> String {
    std::fs::read_to_string(dir().join(file)).unwrap()
}

fn reply_of(file: &str) -> Reply {
    let body = body_of(file);
    match status_of(file) {
        200 => Reply::Json(serde_json::from_str(&body).unwrap()),
        status => Reply::status(status, &body),
    }
}

/// Arguments of every call in a fixture that are not a JSON object: none of them may ever
/// be sent back as they are.
fn invalid_arguments(file: &str) -> Vec<String> {
    let v: Value = serde_json::from_str(&body_of(file)).unwrap();
    v["choices"][0]["message"]["tool_calls"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["function"]["arguments"].as_str())
        .filter(|a| !serde_json::from_str::<Value>(a).is_ok_and(|v| v.is_object()))
        // Read as the registry reads them (quotes HTML-escaped, an object encoded twice):
        // they ran, and are replayed as the object read.
        .filter(|a| !fleetagent::prompt::answer::lenient_object(a).is_ok_and(|v| v.is_object()))
        .map(str::to_string)
        .collect()
}

/// Every assistant call of every request carries a JSON object, none of `bad` verbatim, and
/// every request carries the output cap.
#[track_caller]
fn assert_replayable(requests: &[Value], bad: &[String], what: &str) {
    for (i, req) in requests.iter().enumerate() {
        assert_eq!(req["max_tokens"], MAX_OUTPUT, "{what}: request {i}");
        let text = req.to_string();
        for b in bad {
            let verbatim = format!("\"arguments\":{}", json!(b));
            assert!(
                !text.contains(&verbatim),
                "{what}: request {i} replays {b:?}"
            );
        }
        let calls = req["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|m| m["tool_calls"].as_array())
            .flatten();
        for c in calls {
            let args = c["function"]["arguments"].as_str().unwrap();
            assert!(
                serde_json::from_str::<Value>(args).is_ok_and(|v| v.is_object()),
                "{what}: request {i} sends arguments {args:?}"
            );
        }
    }
}

#[test]
fn every_fixture_is_in_the_table() {
    let mut files: Vec<String> = std::fs::read_dir(dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|f| f.ends_with(".json"))
        .collect();
    files.sort();
    let mut table: Vec<String> = CASES.iter().map(|c| c.file.to_string()).collect();
    table.sort();
    assert_eq!(files, table);
    let readme = std::fs::read_to_string(dir().join("README.md")).unwrap();
    for f in &files {
        assert!(
            readme.contains(&format!("`{f}`")),
            "README.md says nothing of {f}"
        );
    }
}

#[test]
fn every_fixture_through_the_parser_and_the_client() {
    for case in CASES {
        let body = body_of(case.file);
        let status = status_of(case.file);
        let parsed = parse_completion(&body, 1_767_225_600_000);
        if status != 200 {
            assert!(parsed.is_err(), "{}: an error body is no answer", case.file);
        } else {
            let answer = parsed.unwrap_or_else(|e| panic!("{}: {e}", case.file));
            let names: Vec<&str> = answer.tool_calls.iter().map(|c| c.name.as_str()).collect();
            assert_eq!(names, case.calls, "{}", case.file);
            match case.content {
                Some(prefix) => assert!(
                    answer.content.as_deref().unwrap_or("").starts_with(prefix),
                    "{}: {:?}",
                    case.file,
                    answer.content
                ),
                None => assert_eq!(answer.content, None, "{}", case.file),
            }
            assert_eq!(
                answer.finish_reason.as_deref(),
                case.finish,
                "{}",
                case.file
            );
            assert_eq!(answer.cut_at_limit(), case.finish == Some("length"));
            assert!(answer.usage.unwrap().prompt_tokens > 2_900, "{}", case.file);
            let ids: std::collections::HashSet<&str> =
                answer.tool_calls.iter().map(|c| c.id.as_str()).collect();
            assert_eq!(ids.len(), answer.tool_calls.len(), "{}", case.file);
        }

        // The same body from a server, on a ManualClock (backoff never sleeps).
        let fake = FakeLlm::start();
        fake.set_default(reply_of(case.file));
        let client = HttpLlmClient::new(
            &fake.base_url(),
            Some("sk-test".into()),
            Arc::new(ManualClock::new(0)),
            Duration::from_secs(5),
            Duration::from_secs(20),
        );
        let req = ChatRequest {
            model: "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf".into(),
            messages: vec![ChatMessage {
                role: Role::User,
                content: "Queue: 59 pending.".into(),
                tool_calls: vec![],
                tool_call_id: None,
            }],
            tools: vec![],
            max_tokens: Some(MAX_OUTPUT),
            budget: None,
        };
        let got = client.chat(&req);
        match (status, case.llm_error) {
            (200, _) => assert_eq!(got.unwrap().attempts, 1, "{}", case.file),
            (500, Some("HTTP 500")) => match got {
                Err(LlmError::GaveUp { attempts, .. }) => assert!(attempts > 1),
                other => panic!(
                    "{}: a 500 that says nothing is retried: {other:?}",
                    case.file
                ),
            },
            (_, Some(m)) => {
                match got {
                    Err(LlmError::Rejected { status: s, message }) => {
                        assert_eq!(s, status, "{}", case.file);
                        assert!(message.contains(m), "{}: {message}", case.file);
                    }
                    other => panic!("{}: final, got {other:?}", case.file),
                }
                assert_eq!(fake.request_count(), 1, "{}: never retried", case.file);
            }
            (_, None) => unreachable!("{}: an error status needs llm_error", case.file),
        }
        assert_eq!(fake.requests()[0]["max_tokens"], MAX_OUTPUT);
    }
}

fn fixture_rig(llm: &FakeLlm, vast: &FakeVast) -> Fleet {
    llm.parse_arguments_like_llama_server();
    let f = rig(
        llm,
        vast,
        CAPS,
        &format!("max_output_tokens = {MAX_OUTPUT}\nquiet_interval_mins = 0"),
    );
    write_demand(f.path(), busy_fleet());
    f
}

fn pass(f: &Fleet, reason: &str) -> String {
    f.cmd(&["trigger", "-p", "1", "-r", reason]).ok();
    let out = f.command(&["-v", "run"]).output().unwrap();
    assert!(
        out.status.success(),
        "{reason}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn history(f: &Fleet) -> Vec<Value> {
    f.cmd(&["history", "--json", "--limit", "200"])
        .json()
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn every_fixture_through_a_whole_pass() {
    for case in CASES {
        let what = case.file;
        let llm = FakeLlm::start();
        let vast = FakeVast::start_real_time();
        vast.add_offers(10, "RTX 4090", 0.40, 0.99);
        let f = fixture_rig(&llm, &vast);
        llm.push(reply_of(case.file));
        let log = pass(&f, what);

        let requests = llm.requests();
        if case.requests == 1 {
            assert_eq!(requests.len(), 1, "{what}");
        } else {
            assert!(
                requests.len() >= case.requests,
                "{what}: {}",
                requests.len()
            );
        }
        let run = &f.inspect()["runs"][0];
        assert_eq!(run["decided_by"], case.decided_by, "{what}: {run}");
        if let Some(v) = case.verdict {
            assert_eq!(run["verdict"], v, "{what}: {run}");
        }
        match case.llm_error.filter(|_| case.decided_by != "llm") {
            Some(m) => assert!(
                run["llm_error"].as_str().unwrap_or("").contains(m),
                "{what}: {run}"
            ),
            None => assert!(run["llm_error"].is_null(), "{what}: {run}"),
        }
        if case.decided_by == "llm" {
            assert_eq!(vast.count(Route::Create), case.creates, "{what}");
        }

        let rows = history(&f);
        let results: Vec<Value> = rows
            .iter()
            .filter(|m| m["role"] == "tool")
            .map(|m| serde_json::from_str(m["content"].as_str().unwrap()).unwrap())
            .collect();
        let invalid = results
            .iter()
            .filter(|r| r["error"] == "invalid_args")
            .count();
        assert_eq!(invalid, case.invalid, "{what}: {results:?}");
        let answers: Vec<&Value> = rows.iter().filter(|m| m["role"] == "assistant").collect();
        let notes: Vec<&str> = rows
            .iter()
            .filter(|m| m["kind"] == "note")
            .map(|m| m["content"].as_str().unwrap())
            .collect();
        for a in &answers {
            let text = a["content"].as_str().unwrap_or("");
            assert!(
                !text.contains("Note on"),
                "{what}: a note in the turn: {text}"
            );
        }
        if let Some(note) = case.note {
            assert_eq!(notes.len(), 1, "{what}: {notes:?}");
            assert!(notes[0].contains(note), "{what}: {}", notes[0]);
            assert!(
                answers.iter().all(|a| a["tool_calls"].is_null()),
                "{what}: nothing to run"
            );
            // The answer's own text is stored as it came (a cut call has none).
            if let Some(prefix) = case.content {
                let text = answers[0]["content"].as_str().unwrap();
                assert!(text.starts_with(prefix), "{what}: {text}");
                let note_row = rows.iter().position(|m| m["kind"] == "note").unwrap();
                let answer_row = rows.iter().position(|m| m["role"] == "assistant").unwrap();
                assert_eq!(
                    note_row,
                    answer_row + 1,
                    "{what}: the note follows the answer"
                );
            } else {
                assert!(answers.is_empty(), "{what}: {answers:?}");
            }
            assert!(log.contains("1 malformed answer(s)"), "{what}: {log}");
        } else {
            assert!(notes.is_empty(), "{what}: {notes:?}");
        }
        if case.finish == Some("length") {
            assert!(notes[0].contains(CUT), "{what}");
        }
        if case.invalid > 0 {
            let line = format!("{} invalid call(s)", case.invalid);
            assert!(log.contains(&line), "{what}: {log}");
        }
        // The stored call shows `{}`, keeps what the model sent under `sent` for `history`,
        // and its result says so.
        let bad = invalid_arguments(case.file);
        if case.decided_by == "llm" && case.note.is_none() {
            let stored: Vec<&Value> = answers
                .iter()
                .filter_map(|m| m["tool_calls"].as_array())
                .flatten()
                .collect();
            for b in bad.iter().filter(|b| !b.trim().is_empty()) {
                let kept = stored
                    .iter()
                    .any(|c| c["sent"] == b.as_str() && c["arguments"] == "{}");
                assert!(kept, "{what}: {b:?} not kept in {stored:?}");
                assert!(
                    results.iter().any(|r| r["note"]
                        .as_str()
                        .is_some_and(|n| n.ends_with("the call above shows them as {}"))),
                    "{what}: {results:?}"
                );
            }
        }

        // The next pass replays an action pass's calls; nothing invalid may go out.
        pass(&f, "next");
        let requests = llm.requests();
        assert_replayable(&requests, &bad, what);
        assert_eq!(llm.rejected_count(), 0, "{what}: {:?}", llm.rejections());
    }
}

/// The model launches once and sends a second call with truncated arguments; llama-server
/// refuses any history holding them. Neither the pass's next turn nor the next passes send
/// them, and one stored by an older version (verbatim in the database) is fixed on the way out.
#[test]
fn a_stored_invalid_argument_never_reaches_a_later_request() {
    let llm = FakeLlm::start();
    let vast = FakeVast::start_real_time();
    vast.add_offers(10, "RTX 4090", 0.40, 0.99);
    let f = fixture_rig(&llm, &vast);
    let truncated = r#"{"reason": "a second worker for the backl"#;
    llm.push(Reply::tool_calls(&[
        ("launch_instance", r#"{"reason": "59 proofs queued"}"#),
        ("launch_instance", truncated),
    ]));
    llm.push(Reply::text("Launched one; the second call was invalid."));
    pass(&f, "backlog");
    assert_eq!(f.inspect()["runs"][0]["verdict"], "action");
    pass(&f, "again");
    assert_eq!(llm.rejected_count(), 0, "{:?}", llm.rejections());
    let bad = vec![truncated.to_string()];
    assert_replayable(&llm.requests(), &bad, "after two passes");
    // The later pass did replay the action pass's calls: the bad one as `{}`, its result
    // saying so; nothing about it inside the model's turn.
    let last = llm.requests().last().unwrap().clone();
    let messages = last["messages"].as_array().unwrap();
    let (at, call) = messages
        .iter()
        .enumerate()
        .flat_map(|(i, m)| {
            m["tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
                .map(move |c| (i, c))
        })
        .find(|(_, c)| c["function"]["arguments"] == "{}")
        .expect("the bad call replayed as {}");
    let result = messages[at + 1..]
        .iter()
        .find(|m| m["tool_call_id"] == call["id"])
        .unwrap();
    assert!(
        result["content"]
            .as_str()
            .unwrap()
            .contains("the call above shows them as {}"),
        "{result}"
    );
    assert!(!last.to_string().contains("invalid_arguments"), "{last}");
    // `history` shows what the model sent.
    let text = f.cmd(&["history"]).ok().stdout;
    assert!(
        text.contains(r#"launch_instance({"reason": "a second worker for the backl) [shown to the model as {}]"#),
        "{text}"
    );

    // Rows older versions stored: verbatim, and in the placeholder they replayed (which small
    // models copied); both go out as `{}`.
    let db = f.db();
    let (id, calls): (i64, String) = db
        .query_row(
            "SELECT id, tool_calls FROM messages WHERE tool_calls LIKE '%\"sent\"%'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    let mut calls: Value = serde_json::from_str(&calls).unwrap();
    calls[1]["arguments"] = json!(truncated);
    calls[1].as_object_mut().unwrap().remove("sent");
    let mut placeholder = calls[1].clone();
    placeholder["id"] = json!("call_legacy_placeholder");
    placeholder["arguments"] = json!(json!({ "invalid_arguments": truncated }).to_string());
    calls.as_array_mut().unwrap().push(placeholder);
    db.execute(
        "UPDATE messages SET tool_calls = ?1 WHERE id = ?2",
        rusqlite::params![calls.to_string(), id],
    )
    .unwrap();
    let before = llm.request_count();
    pass(&f, "legacy row");
    assert!(llm.request_count() > before);
    assert_eq!(llm.rejected_count(), 0, "{:?}", llm.rejections());
    assert_replayable(&llm.requests(), &bad, "with a legacy row");
    let last = llm.requests().last().unwrap().to_string();
    assert!(!last.contains("invalid_arguments"), "{last}");
}

/// llama-server's 500 for unparseable arguments is final: one request, then the fallback.
#[test]
fn a_parse_error_500_is_not_retried() {
    let llm = FakeLlm::start();
    let vast = FakeVast::start_real_time();
    vast.add_offers(10, "RTX 4090", 0.40, 0.99);
    let f = fixture_rig(&llm, &vast);
    llm.set_default(reply_of("llama-server.500.parse-arguments.json"));
    pass(&f, "parse error");
    assert_eq!(llm.request_count(), 1, "not retried");
    let run = &f.inspect()["runs"][0];
    assert_eq!(run["decided_by"], "fallback-rules");
    assert!(run["llm_error"]
        .as_str()
        .unwrap()
        .contains("HTTP 500): Failed to parse tool call arguments"));
    // Any other 500 is still retried.
    let llm = FakeLlm::start();
    let f = fixture_rig(&llm, &vast);
    llm.push(Reply::server_error(500));
    llm.push(Reply::text("No action needed."));
    pass(&f, "transient");
    assert_eq!(llm.request_count(), 2);
    assert_eq!(f.inspect()["runs"][0]["decided_by"], "llm");
}

/// A valid-looking launch in an answer cut at max_tokens is not run: the cut may have taken
/// the offer id or a second call the model meant; the floor and the next pass decide.
#[test]
fn a_length_answers_calls_are_not_run() {
    let llm = FakeLlm::start();
    let vast = FakeVast::start_real_time();
    vast.add_offers(10, "RTX 4090", 0.40, 0.99);
    let f = fixture_rig(&llm, &vast);
    let mut cut: Value = serde_json::from_str(&body_of("llama-server.200.tool-call.json")).unwrap();
    cut["choices"][0]["finish_reason"] = json!("length");
    llm.push(Reply::Json(cut));
    pass(&f, "cut");
    assert_eq!(vast.count(Route::Create), 0);
    assert_eq!(
        llm.request_count(),
        1,
        "a cut answer ends the model's turns"
    );
    let db = f.db();
    assert_eq!(
        f.count("SELECT COUNT(*) FROM actions WHERE actor = 'llm'"),
        0
    );
    assert_eq!(
        f.count("SELECT COUNT(*) FROM messages WHERE role = 'assistant'"),
        0,
        "the cut answer had nothing but its calls"
    );
    let note: String = db
        .query_row(
            "SELECT content FROM messages WHERE kind = 'note'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(
        note,
        "Note on your last answer (nothing of it is kept here): It was cut at max_output_tokens (777) and is incomplete; none of its tool calls ran (launch_instance). Keep answers short: call the tools, with no text around the calls."
    );
    assert_eq!(f.inspect()["runs"][0]["verdict"], "no-action");
}

/// What is said about the model's answers reaches it in messages of their own, never inside
/// its turn: a call with truncated arguments is replayed as `{}` with its result saying so,
/// and the real model's first answer of the incident (a call written as JSON text with a `//`
/// comment, tests/fixtures/llm/) is replayed exactly as it came, followed by a user message
/// with the note. It answers an operator message, so the exchange is in the next pass's prompt.
#[test]
fn a_malformed_answers_note_arrives_in_a_message_of_its_own() {
    let llm = FakeLlm::start();
    let vast = FakeVast::start_real_time();
    vast.add_offers(10, "RTX 4090", 0.40, 0.99);
    let f = fixture_rig(&llm, &vast);
    let fixture = std::fs::read_to_string(dir().join("qwen2.5-coder-0.5b-incident.txt")).unwrap();
    let first = fixture.split("--- call ").nth(1).unwrap();
    let as_text = first.split_once('\n').unwrap().1.trim_end();
    assert!(as_text.contains("// No offer id provided"), "{as_text}");
    let truncated = r#"{"reason": "59 proofs queued and every wor"#;
    llm.push(Reply::tool_call("launch_instance", truncated));
    llm.push(Reply::text(as_text));
    f.cmd(&["message", "Why is nothing launching?"]).ok();
    let out = f.command(&["run"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    pass(&f, "next");
    let requests = llm.requests();
    assert_eq!(
        requests.len(),
        4,
        "two turns, the call written as text asked again, then the next pass's"
    );
    assert_eq!(llm.rejected_count(), 0, "{:?}", llm.rejections());

    // Pass 1, turn 2: the bad call as `{}`, its result saying so.
    let turn2 = requests[1]["messages"].as_array().unwrap();
    let n = turn2.len();
    assert_eq!(turn2[n - 2]["role"], "assistant");
    assert_eq!(turn2[n - 2]["tool_calls"][0]["function"]["arguments"], "{}");
    assert_eq!(turn2[n - 1]["role"], "tool");
    let result: Value = serde_json::from_str(turn2[n - 1]["content"].as_str().unwrap()).unwrap();
    assert_eq!(result["error"], "invalid_args");
    assert_eq!(
        result["note"],
        "your arguments were not a JSON object of this tool's parameters (42 characters); the call above shows them as {}"
    );

    // Pass 1, turn 3 (asked again in the same pass): the answer as it came, then the note
    // in a user message; the next pass's prompt holds them the same way.
    let next = requests[2]["messages"].as_array().unwrap();
    let at = next
        .iter()
        .position(|m| m["role"] == "assistant" && m["content"] == as_text)
        .expect("the answer replayed exactly as it came");
    assert_eq!(next[at + 1]["role"], "user");
    let note = next[at + 1]["content"].as_str().unwrap();
    assert!(
        note.starts_with(
            "Note on your answer above: It wrote a tool call as text, so nothing ran."
        ),
        "{note}"
    );
    // Nothing said about an answer is ever inside one, in any request.
    for (i, req) in requests.iter().enumerate() {
        for m in req["messages"].as_array().unwrap() {
            if m["role"] == "assistant" {
                let text = m.to_string();
                for said in [
                    "Note on",
                    "[malformed",
                    "[cut at",
                    "invalid_arguments",
                    "not a JSON object",
                ] {
                    assert!(!text.contains(said), "request {i}: {said:?} in {text}");
                }
            }
        }
    }
    assert_eq!(
        f.count("SELECT COUNT(*) FROM messages WHERE kind = 'note' AND role = 'user'"),
        1
    );
    // `inspect` counts the answer written as text by the sim report's rule.
    let llm_view = &f.inspect()["llm"];
    assert_eq!(llm_view["malformed_answers"], 1, "{llm_view}");
    assert!(
        llm_view["recent_answers"].as_i64().unwrap() >= 2,
        "{llm_view}"
    );
}
