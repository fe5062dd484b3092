//! Crash injection: for every persistence point a case reaches (faults::POINTS), the real
//! binary dies there (abort, as SIGKILL or power loss would, or a panic that unwinds), is
//! started again, and the state must hold: no duplicate or untracked paid instance, no event
//! or wake lost, no wake served twice by passes that finished, valid prompts within budget,
//! the lock free.

use std::sync::Arc;

use fleetagent::faults::POINTS;
use serde_json::{json, Value};

use super::{assert_integrity, dead_fleet, Rig};
use crate::common::fake_llm::Reply;
use crate::common::fake_vast::Route;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Case {
    /// The model launches, stops an exited instance of ours and schedules a wake; the
    /// process aborts at the point. The operator's `trigger` rings.
    LlmAbort,
    /// The same, but the process panics at the point (unwinding: drops run, the lock goes).
    LlmPanic,
    /// The LLM refuses every request (HTTP 401): the fallback rules launch in the
    /// emergency. The operator's `message` rings.
    FallbackAbort,
}

impl Case {
    fn switch(self) -> &'static str {
        match self {
            Case::LlmPanic => "FLEETAGENT_TEST_PANIC_AT",
            _ => "FLEETAGENT_TEST_CRASH_AT",
        }
    }

    fn said(self, point: &str) -> String {
        match self {
            Case::LlmPanic => format!("test panic injected at {point}"),
            _ => format!("test crash injected at {point}"),
        }
    }

    fn ringer(self) -> Vec<&'static str> {
        match self {
            Case::FallbackAbort => vec!["message", "workers are dead, get capacity back"],
            _ => vec!["trigger", "-p", "1", "-r", "workers died"],
        }
    }

    /// The points a run of this case passes (plus `trigger-after-insert` in the ringer).
    fn reaches(self, point: &str) -> bool {
        match self {
            Case::FallbackAbort => !matches!(
                point,
                "stop-after-call" | "tool-before-result" | "tool-after-result"
            ),
            _ => !matches!(point, "fallback-before-rules" | "rules-before-note"),
        }
    }
}

/// A model that acts like a sensible one: it launches only while the state block shows no
/// instance of ours but the exited one and nothing in flight, destroys the exited instance
/// while it is listed (flagged instances have a line of their own, `- <id> dead ...`), and
/// asks for a look in 30 minutes; after tool results it answers.
fn sensible_model(old_id: u64) -> Reply {
    Reply::dynamic(move |body: &Value| {
        let msgs = body["messages"].as_array().unwrap();
        if msgs.last().is_some_and(|m| m["role"] == "tool") {
            return Reply::text("Done for this pass.");
        }
        // The state block, wherever the prompt puts it (rebuilt for every request).
        let state = msgs
            .iter()
            .rev()
            .filter_map(|m| m["content"].as_str())
            .find(|c| c.contains("Our instances"))
            .unwrap_or_default();
        let old_listed = state.contains(&format!("\n- {old_id} "));
        let listed: usize = state
            .split_once("Our instances (")
            .and_then(|(_, rest)| rest.split(',').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        let stop_args =
            json!({"instance_id": old_id, "reason": "exited, earns nothing"}).to_string();
        let mut calls: Vec<(String, String)> = Vec::new();
        if listed <= usize::from(old_listed) && !state.contains("Launches in flight") {
            calls.push((
                "launch_instance".into(),
                r#"{"reason": "59 queued, every worker dead"}"#.into(),
            ));
        }
        if old_listed {
            calls.push(("stop_instance".into(), stop_args));
        }
        calls.push((
            "schedule_next_check".into(),
            r#"{"minutes": 30, "reason": "see the replacement prove"}"#.into(),
        ));
        Reply::ToolCalls(calls)
    })
}

fn rig_for(case: Case) -> (Rig, u64) {
    let extra = match case {
        Case::FallbackAbort => "fallback = \"rules\"",
        _ => "",
    };
    // One launch per window, emergency or not: a second create could only be a duplicate.
    let rig = Rig::new(
        "max_dph_total = 10.0\nmax_instances = 4\nlaunch_window_max = 1\nemergency_launch_max = 1",
        extra,
    );
    rig.demand(dead_fleet());
    rig.vast.add_offers(5, "RTX 4090", 0.40, 0.99);
    let old = rig.vast.add_instance("fleetagent-old");
    rig.vast.set_actual_status(old, Some("exited"));
    match case {
        Case::FallbackAbort => rig.llm.set_default(Reply::openai_error(
            401,
            "Incorrect API key provided.",
            "invalid_request_error",
            Some("invalid_api_key"),
        )),
        _ => rig.llm.set_default(sensible_model(old)),
    }
    (rig, old)
}

/// One point of one case: crash there, restart, check. Returns a line for the report.
fn crash_and_recover(case: Case, point: &str) -> String {
    let what = format!("{case:?} at {point}");
    let (rig, _old) = rig_for(case);
    let f = &rig.f;
    f.cmd(&["wakes", "add", "--in", "0s", "--reason", "due now"])
        .ok();
    let ringer = case.ringer();
    let crashed = if point == "trigger-after-insert" {
        f.command(&ringer)
            .env(case.switch(), point)
            .output()
            .unwrap()
    } else {
        f.cmd(&ringer).ok();
        f.command(&["run"])
            .env(case.switch(), point)
            .output()
            .unwrap()
    };
    let stderr = String::from_utf8_lossy(&crashed.stderr);
    assert!(
        !crashed.status.success(),
        "{what}: the process was not stopped"
    );
    assert!(
        stderr.contains(&case.said(point)),
        "{what}: the point was not reached:\n{stderr}"
    );

    // Straight after the crash: a consistent database and a free lock.
    assert_integrity(f, &what);
    assert_eq!(f.inspect()["lock_held"], false, "{what}: the lock is held");
    let requests_before = rig.llm.request_count();

    // Restart as systemd would: the timer runs it, the path unit again while the doorbell is
    // there (a few times at most).
    for attempt in 0.. {
        let out = f.cmd(&["run"]);
        assert_eq!(out.code, 0, "{what}: restart {attempt}: {}", out.stderr);
        let v = f.inspect();
        if v["doorbell"]["exists"] == false && v["unconsumed_events"] == 0 {
            break;
        }
        assert!(attempt < 3, "{what}: work still waiting after 4 runs: {v}");
    }

    // The lock is free, nothing is left running, the crashed pass is failed, not lost.
    let v = f.inspect();
    assert_eq!(v["lock_held"], false, "{what}");
    assert_eq!(
        f.count("SELECT COUNT(*) FROM runs WHERE status = 'running'"),
        0,
        "{what}"
    );
    let crashed_in_pass = !matches!(
        point,
        "trigger-after-insert" | "run-after-lock" | "run-end-check" | "run-after-last-look"
    );
    if crashed_in_pass {
        assert_eq!(
            f.count(
                "SELECT COUNT(*) FROM runs WHERE status = 'failed' AND error LIKE 'interrupted%'"
            ),
            1,
            "{what}: the crashed pass is recorded as interrupted"
        );
    } else {
        assert_eq!(
            f.count("SELECT COUNT(*) FROM runs WHERE status = 'failed'"),
            0,
            "{what}"
        );
    }

    // No event lost, none failed: every one served by a pass that finished (at least once).
    assert_eq!(
        f.count("SELECT COUNT(*) FROM events WHERE kind IN ('trigger', 'message')"),
        1,
        "{what}: the operator's event"
    );
    assert_eq!(
        f.count(
            "SELECT COUNT(*) FROM events WHERE failed_at IS NOT NULL OR claimed_by IS NULL
             OR claimed_by NOT IN (SELECT id FROM runs WHERE status = 'ok')"
        ),
        0,
        "{what}: an event was not served by a finished pass"
    );
    // The wake: processed by a finished pass, and seen by exactly one finished pass.
    assert_eq!(
        f.count(
            "SELECT COUNT(*) FROM wakes WHERE reason = 'due now' AND status = 'processed'
             AND processed_by IN (SELECT id FROM runs WHERE status = 'ok')"
        ),
        1,
        "{what}: the due wake"
    );
    assert_eq!(
        f.count(
            "SELECT COUNT(*) FROM messages m JOIN runs r ON r.id = m.run_id
             WHERE r.status = 'ok' AND m.kind = 'observation' AND m.content LIKE '%Wake #1 due%'"
        ),
        1,
        "{what}: the wake reached exactly one finished pass"
    );
    assert_eq!(
        f.count("SELECT COALESCE(SUM(wakes_claimed), 0) FROM runs WHERE status = 'ok'"),
        1,
        "{what}: wakes claimed by finished passes"
    );

    // Money: every paid instance tracked, no label created twice, and one replacement at
    // most (none when the crash came between the intent and the create: the intent is still
    // in flight and holds its slot until a listing settles it).
    let creates = rig.assert_fleet_tracked(&what);
    let expected = usize::from(point != "launch-after-intent");
    assert_eq!(creates, expected, "{what}: creates");
    // The exited instance is destroyed once by the model, also when the crash came between
    // the destroy and its record. The fallback (the floor) destroys it once it has been left
    // policy.floor_flagged_passes (2) passes: the restart's pass when the crashed one had
    // counted it already, else later; never twice.
    let destroys = rig.vast.count(Route::Destroy);
    if case == Case::FallbackAbort {
        assert!(destroys <= 1, "{what}: destroys {destroys}");
        let by_fallback = f.count(
            "SELECT COUNT(*) FROM actions WHERE actor = 'fallback-rules' AND outcome = 'ok'
                AND kind = 'destroy' AND reason LIKE '%left for 2 passes%'",
        );
        assert_eq!(
            by_fallback as usize, destroys,
            "{what}: the fallback's destroys"
        );
    } else {
        assert_eq!(destroys, 1, "{what}: destroys");
    }
    if destroys == 1 {
        assert_eq!(
            f.count("SELECT COUNT(*) FROM instances WHERE label = 'fleetagent-old' AND gone_at IS NOT NULL"),
            1,
            "{what}: the destroyed instance is known to be gone"
        );
        // Recorded once, by its pass or, when the crash came between the destroy and its
        // row, from the mark the pass left (a walkthrough saw no record at all).
        assert_eq!(
            f.count(
                "SELECT COUNT(*) FROM actions WHERE kind = 'destroy' AND outcome = 'ok'
                    AND label = 'fleetagent-old' AND run_id IS NOT NULL"
            ),
            1,
            "{what}: the destroy's record"
        );
    }
    assert_eq!(
        f.count("SELECT COUNT(*) FROM stops_in_flight"),
        0,
        "{what}: a stop left in flight"
    );

    // Prompts: valid for the strict fake and within budget, also the first after the crash.
    rig.assert_prompts_valid(&what);
    if case != Case::FallbackAbort {
        assert!(
            rig.llm.request_count() > requests_before,
            "{what}: the model was asked again after the restart"
        );
    }
    assert_integrity(f, &what);
    format!("{what}: ok ({creates} create(s))")
}

/// Every (case, point) pair that a run or the ringer reaches. Each pair is one process killed
/// and restarted against fresh fakes.
#[test]
fn a_crash_at_every_persistence_point_loses_nothing_and_never_pays_twice() {
    let cases = [Case::LlmAbort, Case::LlmPanic, Case::FallbackAbort];
    let pairs: Vec<(Case, &str)> = cases
        .iter()
        .flat_map(|c| {
            POINTS
                .iter()
                .filter(|p| c.reaches(p))
                .map(move |p| (*c, *p))
        })
        .collect();
    // Every point is reached by some case.
    for p in POINTS {
        assert!(
            pairs.iter().any(|(_, q)| q == p),
            "point {p} is reached by no case"
        );
    }
    // Two at a time (the machine's cores); each pair has its own fakes and state dir.
    let pairs = Arc::new(std::sync::Mutex::new(pairs.clone()));
    let total = pairs.lock().unwrap().len();
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let pairs = Arc::clone(&pairs);
            std::thread::spawn(move || {
                let mut lines = Vec::new();
                loop {
                    let next = pairs.lock().unwrap().pop();
                    let Some((case, point)) = next else { break };
                    lines.push(crash_and_recover(case, point));
                }
                lines
            })
        })
        .collect();
    let mut done = 0;
    for w in workers {
        let lines = w.join().expect("a crash case failed (see its panic above)");
        done += lines.len();
        for l in lines {
            println!("{l}");
        }
    }
    assert_eq!(done, total);
    println!(
        "crash injection: {} points x {} cases, {total} reachable pairs: {total} crash-and-restart runs, all recovered",
        POINTS.len(),
        cases.len()
    );
}

/// A `trigger` killed between its commit and its ring (or a pass between deleting the
/// doorbell and its commit) leaves a ready event with no doorbell: the minute's `poll` rings
/// for it, so the operator's message does not wait for the timer (a walkthrough).
#[test]
fn a_ready_event_without_a_doorbell_is_rung_by_the_next_poll() {
    let f = crate::common::fleet::Fleet::new();
    f.cmd(&["init"]).ok();
    f.cmd(&["message", "are you there?"]).ok();
    std::fs::remove_file(f.doorbell()).unwrap();
    let out = f.cmd(&["poll"]);
    assert!(f.doorbell().exists(), "{}", out.stderr);
    assert!(
        out.stderr.contains(
            "1 event(s) waiting with no doorbell (a ringer or a pass was killed before its ring or its claim); doorbell rung"
        ),
        "{}",
        out.stderr
    );
    // Rung once: the next poll finds the doorbell there.
    let again = f.cmd(&["poll"]);
    assert!(
        !again.stderr.contains("waiting with no doorbell"),
        "{}",
        again.stderr
    );
    // An event older than a poll or two is the timer's: a `run` that exits before its claim
    // deleted its doorbell on purpose, and a ring each minute would start it each minute.
    std::fs::remove_file(f.doorbell()).unwrap();
    f.db()
        .execute("UPDATE events SET created_at = created_at - 120000", [])
        .unwrap();
    let old = f.cmd(&["poll"]);
    assert!(!f.doorbell().exists(), "{}", old.stderr);
}
