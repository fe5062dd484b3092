//! The demand JSON document that the `http` and `command` probes read (docs/demand.md):
//! strict on the fields it knows, silent about fields it does not (forward compatible).
//! It never guesses a missing count: a missing or bad field is an error that names it.

use anyhow::{anyhow, bail, Result};
use serde_json::{Map, Value};

use super::{Demand, RequestLoop, Worker, WorkerHistory};

/// How much of a bad document or value an error quotes.
const EXCERPT_CHARS: usize = 80;

/// Parses the demand document. Required: `pending`, `running`, `completed_1h`,
/// `completed_15m` (non-negative integers). Optional (absent or `null`): `running_stale`
/// (0), `workers` (none), `ps_waiting`, `ps_computing` (not read). Unknown fields are
/// ignored so that a newer source still works with an older fleetagent.
pub fn parse_demand_json(text: &str) -> Result<Demand> {
    let text = text.trim();
    if text.is_empty() {
        bail!("demand JSON: the document is empty");
    }
    let value: Value = crate::json::parse(text).map_err(|e| {
        anyhow!(
            "demand JSON: not valid JSON ({e}); it starts with `{}`",
            excerpt(text)
        )
    })?;
    let Value::Object(doc) = value else {
        bail!(
            "demand JSON: expected an object, got {}: `{}`",
            kind(&value),
            excerpt(text)
        );
    };
    Ok(Demand {
        pending: required_count(&doc, "pending", "pending")?,
        running: required_count(&doc, "running", "running")?,
        running_stale: optional_count(&doc, "running_stale", "running_stale")?.unwrap_or(0),
        completed_1h: required_count(&doc, "completed_1h", "completed_1h")?,
        completed_15m: required_count(&doc, "completed_15m", "completed_15m")?,
        workers: workers(&doc)?,
        taskless: Vec::new(),
        ps_waiting: optional_count(&doc, "ps_waiting", "ps_waiting")?,
        ps_computing: optional_count(&doc, "ps_computing", "ps_computing")?,
        backlog: optional_count(&doc, "backlog", "backlog")?,
        orphan_tasks: optional_count(&doc, "orphan_tasks", "orphan_tasks")?.unwrap_or(0),
        orphan_oldest_secs: optional_secs(&doc, "orphan_oldest_secs")?,
        stale_waiting: optional_count(&doc, "stale_waiting", "stale_waiting")?.unwrap_or(0),
        stale_oldest_secs: optional_secs(&doc, "stale_oldest_secs")?,
        proofshare_enabled: optional_bool(&doc, "proofshare_enabled", "proofshare_enabled")?,
        request_loop: request_loop(&doc)?,
        ask_price_attofil: ask_price(&doc)?,
        paid_1h: optional_count(&doc, "paid_1h", "paid_1h")?,
        pow_1h: optional_count(&doc, "pow_1h", "pow_1h")?,
        history: history(&doc)?,
        notes: notes(&doc)?,
    })
}

fn optional_secs(obj: &Map<String, Value>, key: &str) -> Result<Option<u64>> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_u64() {
            Some(n) => Ok(Some(n)),
            None => bail!(
                "demand JSON: `{key}` must be a non-negative integer (seconds), got {}",
                render(v)
            ),
        },
    }
}

fn optional_bool(obj: &Map<String, Value>, key: &str, path: &str) -> Result<Option<bool>> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(other) => bail!(
            "demand JSON: `{path}` must be true or false, got {}",
            render(other)
        ),
    }
}

fn request_loop(doc: &Map<String, Value>) -> Result<Option<RequestLoop>> {
    match doc.get("request_loop") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => match s.as_str() {
            "ok" => Ok(Some(RequestLoop::Ok)),
            "stalled" => Ok(Some(RequestLoop::Stalled)),
            "none" => Ok(Some(RequestLoop::None)),
            _ => bail!(
                "demand JSON: `request_loop` must be \"ok\", \"stalled\" or \"none\", got {}",
                render(&Value::String(s.clone()))
            ),
        },
        Some(other) => bail!(
            "demand JSON: `request_loop` must be a string, got {}",
            render(other)
        ),
    }
}

/// attoFIL as decimal text: digits only (a number is refused: it would lose precision).
fn ask_price(doc: &Map<String, Value>) -> Result<Option<String>> {
    match doc.get("ask_price_attofil") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
            Ok(Some(s.clone()))
        }
        Some(other) => bail!(
            "demand JSON: `ask_price_attofil` must be attoFIL as a string of digits, got {}",
            render(other)
        ),
    }
}

fn history(doc: &Map<String, Value>) -> Result<Vec<WorkerHistory>> {
    let list = match doc.get("history") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(list)) => list,
        Some(other) => bail!("demand JSON: `history` must be a list, got {}", kind(other)),
    };
    list.iter()
        .enumerate()
        .map(|(i, item)| {
            let Value::Object(h) = item else {
                bail!(
                    "demand JSON: `history[{i}]` must be an object, got {}",
                    kind(item)
                );
            };
            let path = |field: &str| format!("history[{i}].{field}");
            let secs = |field: &str| -> Result<u64> {
                h.get(field).and_then(Value::as_u64).ok_or_else(|| {
                    anyhow!(
                        "demand JSON: `{}` must be a non-negative integer (seconds)",
                        path(field)
                    )
                })
            };
            Ok(WorkerHistory {
                host_and_port: required_string(h, "host_and_port", &path("host_and_port"))?,
                proofs: required_count(h, "proofs", &path("proofs"))?,
                first_end_secs_ago: secs("first_end_secs_ago")?,
                last_end_secs_ago: secs("last_end_secs_ago")?,
                busy_secs: match h.get("busy_secs") {
                    None | Some(Value::Null) => None,
                    Some(_) => Some(secs("busy_secs")?),
                },
                completed_1h: optional_count(h, "completed_1h", &path("completed_1h"))?,
            })
        })
        .collect()
}

fn notes(doc: &Map<String, Value>) -> Result<Vec<String>> {
    match doc.get("notes") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(list)) => list
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::String(s) => Ok(s.clone()),
                other => bail!(
                    "demand JSON: `notes[{i}]` must be a string, got {}",
                    kind(other)
                ),
            })
            .collect(),
        Some(other) => bail!("demand JSON: `notes` must be a list, got {}", kind(other)),
    }
}

fn workers(doc: &Map<String, Value>) -> Result<Vec<Worker>> {
    let list = match doc.get("workers") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(list)) => list,
        Some(other) => bail!("demand JSON: `workers` must be a list, got {}", kind(other)),
    };
    list.iter()
        .enumerate()
        .map(|(i, item)| {
            let Value::Object(w) = item else {
                bail!(
                    "demand JSON: `workers[{i}]` must be an object, got {}",
                    kind(item)
                );
            };
            let path = |field: &str| format!("workers[{i}].{field}");
            Ok(Worker {
                machine_name: required_string(w, "machine_name", &path("machine_name"))?,
                host_and_port: required_string(w, "host_and_port", &path("host_and_port"))?,
                running: required_count(w, "running", &path("running"))?,
                cordoned: match w.get("cordoned") {
                    None | Some(Value::Null) => false,
                    Some(Value::Bool(b)) => *b,
                    Some(other) => bail!(
                        "demand JSON: `{}` must be true or false, got {}",
                        path("cordoned"),
                        render(other)
                    ),
                },
            })
        })
        .collect()
}

fn required_count(obj: &Map<String, Value>, key: &str, path: &str) -> Result<u32> {
    optional_count(obj, key, path)?
        .ok_or_else(|| anyhow!("demand JSON: required field `{path}` is missing"))
}

fn optional_count(obj: &Map<String, Value>, key: &str, path: &str) -> Result<Option<u32>> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_u64().and_then(|n| u32::try_from(n).ok()) {
            Some(n) => Ok(Some(n)),
            None => bail!(
                "demand JSON: `{path}` must be a non-negative integer, got {}",
                render(v)
            ),
        },
    }
}

fn required_string(obj: &Map<String, Value>, key: &str, path: &str) -> Result<String> {
    match obj.get(key) {
        Some(Value::String(s)) => Ok(s.clone()),
        None | Some(Value::Null) => bail!("demand JSON: required field `{path}` is missing"),
        Some(other) => bail!(
            "demand JSON: `{path}` must be a string, got {}",
            render(other)
        ),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

fn render(v: &Value) -> String {
    excerpt(&v.to_string())
}

/// The first [`EXCERPT_CHARS`] characters on one line, `…` when cut.
pub(crate) fn excerpt(text: &str) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match flat.char_indices().nth(EXCERPT_CHARS) {
        Some((cut, _)) => format!("{}…", &flat[..cut]),
        None => flat,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: &str = r#"{
        "pending": 6, "running": 4, "running_stale": 1,
        "completed_1h": 120, "completed_15m": 31,
        "workers": [
            {"machine_name": "fleetagent-7-a", "host_and_port": "10.0.0.7:12300", "running": 2, "cordoned": false},
            {"machine_name": "fleetagent-7-b", "host_and_port": "10.0.0.8:12300", "running": 0}
        ],
        "ps_waiting": 2, "ps_computing": 4,
        "a_field_from_the_future": {"x": 1}
    }"#;

    #[test]
    fn full_document_parses_and_unknown_fields_are_ignored() {
        let d = parse_demand_json(FULL).unwrap();
        assert_eq!(
            d,
            Demand {
                pending: 6,
                running: 4,
                running_stale: 1,
                completed_1h: 120,
                completed_15m: 31,
                workers: vec![
                    Worker {
                        machine_name: "fleetagent-7-a".into(),
                        host_and_port: "10.0.0.7:12300".into(),
                        running: 2,
                        cordoned: false,
                    },
                    Worker {
                        machine_name: "fleetagent-7-b".into(),
                        host_and_port: "10.0.0.8:12300".into(),
                        running: 0,
                        cordoned: false,
                    },
                ],
                ps_waiting: Some(2),
                ps_computing: Some(4),
                ..Demand::default()
            }
        );
    }

    #[test]
    fn ground_truth_fields_parse_when_present() {
        let d = parse_demand_json(
            r#"{"pending": 3, "running": 0, "completed_1h": 0, "completed_15m": 0,
                "backlog": 2, "orphan_tasks": 1, "orphan_oldest_secs": 7200,
                "stale_waiting": 4, "stale_oldest_secs": 259200,
                "proofshare_enabled": false, "request_loop": "stalled",
                "ask_price_attofil": "5000000000000000", "paid_1h": 7, "pow_1h": 1,
                "history": [{"host_and_port": "1.2.3.4:12300", "proofs": 9,
                             "first_end_secs_ago": 3000, "last_end_secs_ago": 60},
                            {"host_and_port": "1.2.3.5:12300", "proofs": 12,
                             "first_end_secs_ago": 9000, "last_end_secs_ago": 60,
                             "completed_1h": 5}],
                "notes": ["no SELECT on curio.proofshare_provider_payments"]}"#,
        )
        .unwrap();
        assert_eq!(d.backlog, Some(2));
        assert_eq!((d.orphan_tasks, d.orphan_oldest_secs), (1, Some(7200)));
        assert_eq!((d.stale_waiting, d.stale_oldest_secs), (4, Some(259_200)));
        assert_eq!(d.proofshare_enabled, Some(false));
        assert_eq!(d.request_loop, Some(RequestLoop::Stalled));
        assert_eq!(d.ask_price_attofil.as_deref(), Some("5000000000000000"));
        assert_eq!((d.paid_1h, d.pow_1h), (Some(7), Some(1)));
        assert_eq!(d.history.len(), 2);
        assert_eq!(d.history[0].proofs, 9);
        // Without `completed_1h` the hour is settled by the ages (all 9 ended within it);
        // with it, it is read.
        assert_eq!(d.history[0].completed_1h, None);
        assert_eq!(d.history[0].hour_count(), Some(9));
        assert_eq!(d.history[1].hour_count(), Some(5));
        assert_eq!(d.notes.len(), 1);
        // Disabled: nothing is work, so no emergency however much is queued.
        assert_eq!(d.queued_work(), 0);
        assert!(!d.workers_dead());
    }

    #[test]
    fn ground_truth_fields_with_bad_values_name_the_field() {
        let base = r#""pending": 0, "running": 0, "completed_1h": 0, "completed_15m": 0"#;
        for (extra, field) in [
            (r#""request_loop": "spinning""#, "request_loop"),
            (r#""ask_price_attofil": 5000"#, "ask_price_attofil"),
            (r#""ask_price_attofil": "5e15""#, "ask_price_attofil"),
            (r#""proofshare_enabled": "yes""#, "proofshare_enabled"),
            (
                r#""history": [{"host_and_port": "h:1", "proofs": 1}]"#,
                "history[0]",
            ),
            (r#""notes": [1]"#, "notes[0]"),
            // Two figures for one field: neither is taken (serde_json would keep the last).
            (r#""pending": 59"#, "the key \"pending\" appears twice"),
            (
                r#""history": [{"host_and_port": "h:1", "proofs": 1, "first_end_secs_ago": 9,
                                "last_end_secs_ago": 9, "completed_1h": -1}]"#,
                "history[0].completed_1h",
            ),
        ] {
            let err = parse_demand_json(&format!("{{{base}, {extra}}}")).unwrap_err();
            assert!(err.to_string().contains(field), "{extra}: {err}");
        }
    }

    #[test]
    fn orphans_are_not_work_but_a_real_task_beside_them_is() {
        let mut d = Demand {
            pending: 1,
            orphan_tasks: 1,
            ps_waiting: Some(0),
            ..Demand::default()
        };
        assert!(!d.workers_dead(), "a lone orphan is no emergency");
        d.pending = 2;
        assert!(d.workers_dead(), "a real task beside an orphan is one");
    }

    #[test]
    fn minimal_document_takes_the_documented_defaults() {
        let d = parse_demand_json(
            r#"{"pending":0,"running":0,"completed_1h":0,"completed_15m":0,"ps_waiting":null}"#,
        )
        .unwrap();
        assert_eq!(d.running_stale, 0);
        assert!(d.workers.is_empty());
        assert_eq!((d.ps_waiting, d.ps_computing), (None, None));
    }

    #[test]
    fn the_serialized_demand_parses_back() {
        let d = parse_demand_json(FULL).unwrap();
        let again = parse_demand_json(&serde_json::to_string(&d).unwrap()).unwrap();
        assert_eq!(again, d);
    }

    fn err(text: &str) -> String {
        parse_demand_json(text).unwrap_err().to_string()
    }

    #[test]
    fn each_missing_required_field_is_named() {
        for field in ["pending", "running", "completed_1h", "completed_15m"] {
            let mut doc: Map<String, Value> = serde_json::from_str(
                r#"{"pending":1,"running":1,"completed_1h":1,"completed_15m":1}"#,
            )
            .unwrap();
            doc.remove(field);
            let e = err(&Value::Object(doc).to_string());
            assert_eq!(
                e,
                format!("demand JSON: required field `{field}` is missing")
            );
        }
    }

    #[test]
    fn bad_values_are_named_with_what_was_found() {
        let base = r#""running":0,"completed_1h":0,"completed_15m":0"#;
        assert_eq!(
            err(&format!(r#"{{"pending":-1,{base}}}"#)),
            "demand JSON: `pending` must be a non-negative integer, got -1"
        );
        assert_eq!(
            err(&format!(r#"{{"pending":2.5,{base}}}"#)),
            "demand JSON: `pending` must be a non-negative integer, got 2.5"
        );
        assert_eq!(
            err(&format!(r#"{{"pending":"7",{base}}}"#)),
            "demand JSON: `pending` must be a non-negative integer, got \"7\""
        );
        assert_eq!(
            err(&format!(r#"{{"pending":4294967296,{base}}}"#)),
            "demand JSON: `pending` must be a non-negative integer, got 4294967296"
        );
        assert_eq!(
            err(&format!(r#"{{"pending":0,"ps_waiting":true,{base}}}"#)),
            "demand JSON: `ps_waiting` must be a non-negative integer, got true"
        );
    }

    #[test]
    fn worker_fields_are_checked_with_their_index() {
        let doc = |workers: &str| {
            format!(
                r#"{{"pending":0,"running":0,"completed_1h":0,"completed_15m":0,"workers":{workers}}}"#
            )
        };
        assert_eq!(
            err(&doc(r#"{"machine_name":"a"}"#)),
            "demand JSON: `workers` must be a list, got an object"
        );
        assert_eq!(
            err(&doc(
                r#"[{"machine_name":"a","host_and_port":"h:1","running":0}, 3]"#
            )),
            "demand JSON: `workers[1]` must be an object, got a number"
        );
        assert_eq!(
            err(&doc(r#"[{"machine_name":"a","host_and_port":"h:1"}]"#)),
            "demand JSON: required field `workers[0].running` is missing"
        );
        assert_eq!(
            err(&doc(r#"[{"machine_name":"a","running":0}]"#)),
            "demand JSON: required field `workers[0].host_and_port` is missing"
        );
        assert_eq!(
            err(&doc(
                r#"[{"machine_name":5,"host_and_port":"h:1","running":0}]"#
            )),
            "demand JSON: `workers[0].machine_name` must be a string, got 5"
        );
        assert_eq!(
            err(&doc(
                r#"[{"machine_name":"a","host_and_port":"h:1","running":0,"cordoned":"yes"}]"#
            )),
            "demand JSON: `workers[0].cordoned` must be true or false, got \"yes\""
        );
    }

    #[test]
    fn garbage_is_quoted_briefly() {
        let e = err("<html>\n<body>502 Bad Gateway</body></html>");
        assert!(e.starts_with("demand JSON: not valid JSON ("), "{e}");
        assert!(
            e.ends_with("it starts with `<html> <body>502 Bad Gateway</body></html>`"),
            "{e}"
        );

        let long = format!("oops {}", "x".repeat(500));
        let e = err(&long);
        assert!(e.len() < 200, "{e}");
        assert!(e.ends_with("…`"), "{e}");

        assert_eq!(err("  \n"), "demand JSON: the document is empty");
        assert_eq!(
            err("[1, 2]"),
            "demand JSON: expected an object, got a list: `[1, 2]`"
        );
    }
}
