//! One function per fuzz target: feed arbitrary bytes to a parser of outside input. Any panic
//! is a bug. Shared by the cargo-fuzz binaries (fuzz_targets/) and the stable harness of the
//! normal suite (tests/suite/hardening/fuzz.rs).
// Each binary uses one of these.
#![allow(dead_code)]

use std::time::Duration;

use serde_json::Value;

/// The names of the targets, in the order scripts/fuzz runs them.
pub const TARGETS: &[&str] = &[
    "config",
    "llm_response",
    "vast_response",
    "demand_json",
    "scenario",
];

pub fn run(target: &str, data: &[u8]) {
    match target {
        "config" => config(data),
        "llm_response" => llm_response(data),
        "vast_response" => vast_response(data),
        "demand_json" => demand_json(data),
        "scenario" => scenario(data),
        other => panic!("unknown fuzz target {other}"),
    }
}

/// `config::parse`: any TOML text; errors must name a line, never panic.
pub fn config(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Err(e) = fleetagent::config::parse(&text) {
        assert!(!e.is_empty());
    }
}

/// The body of a 2xx chat completion from any OpenAI-compatible server.
pub fn llm_response(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(answer) = fleetagent::llm::http::parse_completion(&text, 1_767_225_600_000) {
        let mut ids = std::collections::HashSet::new();
        for call in &answer.tool_calls {
            assert!(!call.id.is_empty(), "an empty call id");
            assert!(ids.insert(call.id.clone()), "a repeated call id");
        }
        // What is stored, and so sent again, is always a JSON object.
        use fleetagent::prompt::answer as store;
        let read = store::read(
            &answer,
            &[],
            1,
            &["launch_instance", "list_instances"],
            1024,
        );
        assert!(
            !read.cut || read.calls.is_empty(),
            "a cut answer's calls run"
        );
        // The turn is stored as it came, cut at most; what is said about it is a note apart.
        assert!(
            answer
                .content
                .as_deref()
                .unwrap_or_default()
                .starts_with(&read.content),
            "the stored turn is not the answer's own text"
        );
        assert!(
            !read.malformed || read.note.is_some(),
            "a malformed answer without a note"
        );
        for call in store::stored_calls(&read.calls) {
            let v: Value = serde_json::from_str(&call.arguments).expect("stored arguments parse");
            assert!(v.is_object(), "stored arguments are an object");
        }
    }
}

/// vast.ai answers: offers and instance rows anywhere in a JSON document, 429 texts and
/// Retry-After values, logs.
pub fn vast_response(data: &[u8]) {
    use fleetagent::vast::http::{
        last_lines, parse_instance, parse_offer, threshold_secs, wait_after_429,
    };
    let text = String::from_utf8_lossy(data);
    if let Ok(v) = serde_json::from_str::<Value>(&text) {
        visit(&v, &mut |row| {
            if let Some(o) = parse_offer(row) {
                assert!(o.dph_total.is_finite() && o.dph_total >= 0.0);
            }
            let _ = parse_instance(row, Some(1));
            let _ = parse_instance(row, None);
        });
    }
    let _ = threshold_secs(&text);
    let header = text.lines().next();
    for create in [false, true] {
        let wait = wait_after_429(header, &text, create, Duration::from_millis(500));
        assert!(wait <= Duration::from_secs(2 * 86_400), "{wait:?}");
    }
    let n = data.first().copied().unwrap_or(0) as u32;
    let _ = last_lines(&text, n);
}

/// The demand document of the `http` and `command` probes.
pub fn demand_json(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(d) = fleetagent::demand::json::parse_demand_json(&text) {
        // The figures every pass derives from a reading: at the bounds the document allows
        // (32 bits) they saturate (a walkthrough's 4294967295 pending panicked `run`).
        let _ = (d.workers_dead(), d.live_workers(), d.idle_workers());
        let _ = (d.queued_work(), d.backlog_signal());
    }
}

/// A `sim` scenario file (TOML, with a `[config]` table checked by the config's parser).
pub fn scenario(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(s) = fleetagent::sim::scenario::parse(&text) {
        for hour in [0.0, 0.5, 1.0, 12.0, s.hours] {
            let rate = s.market.rate_at(hour);
            assert!(rate.is_finite() && rate >= 0.0, "rate {rate} at {hour}");
        }
        // What parses is bounded: the work of its hours, and a scenario built from it.
        let arrivals = s.expected_arrivals(s.hours);
        assert!(
            arrivals <= fleetagent::sim::scenario::MAX_ARRIVALS,
            "{arrivals}"
        );
        assert_eq!(s.check_work(s.hours), Ok(()));
        assert_eq!(s.check(), Ok(()));
    }
}

/// Every object in a JSON value, depth first (bounded: serde_json nests at most 128 deep).
fn visit(v: &Value, f: &mut dyn FnMut(&Value)) {
    match v {
        Value::Object(map) => {
            f(v);
            for x in map.values() {
                visit(x, f);
            }
        }
        Value::Array(items) => {
            for x in items {
                visit(x, f);
            }
        }
        _ => {}
    }
}
