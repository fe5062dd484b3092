//! The node_exporter textfile: a real `run` on a database the simulator filled writes it
//! atomically, and it parses as Prometheus text format with the values the database holds.

use std::process::Command;

use prometheus_parse::{LineInfo, Scrape, Value};

use crate::common::fleet::{clean_env, Fleet, BIN, FAST_CONFIG};

fn value(scrape: &Scrape, name: &str, label: Option<(&str, &str)>) -> Option<f64> {
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == name)
        .find(|s| label.is_none_or(|(k, v)| s.labels.get(k) == Some(v)))
        .map(|s| match s.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => v,
            _ => f64::NAN,
        })
}

#[test]
fn run_writes_a_textfile_that_parses_with_the_databases_numbers() {
    let f = Fleet::with_config(FAST_CONFIG);
    let prom = f.path().join("textfile").join("fleetagent.prom");
    std::fs::create_dir_all(prom.parent().unwrap()).unwrap();
    f.write_config(&format!(
        "{FAST_CONFIG}\n[metrics]\ntextfile = \"{}\"\n",
        prom.display()
    ));
    // An hour of the incident fills the database (runs, refusals, instances, demand).
    let mut sim = Command::new(BIN);
    clean_env(&mut sim);
    let out = sim
        .arg("--state-dir")
        .arg(&f.state)
        .args(["sim", "--scenario", "incident", "--hours", "1", "--json"])
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert!(!prom.exists(), "sim never writes the operator's textfile");
    // Made an install's database (a run refuses a simulation's): its rows stay.
    f.db()
        .execute_batch(
            "DELETE FROM sim_config; UPDATE agent_state SET install_id = 'metric' WHERE id = 1;",
        )
        .unwrap();
    f.cmd(&["run"]).ok();
    let text = std::fs::read_to_string(&prom).unwrap();
    let leftovers: Vec<_> = std::fs::read_dir(prom.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(leftovers.len(), 1, "temp files left: {leftovers:?}");

    // Every line is a comment or a sample the parser understands.
    let mut sample_lines = 0;
    for line in text.lines() {
        match LineInfo::parse(line) {
            LineInfo::Ignored => panic!("unparseable line: {line:?}"),
            LineInfo::Sample { .. } => sample_lines += 1,
            _ => {}
        }
    }
    let scrape = Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).unwrap();
    assert_eq!(scrape.samples.len(), sample_lines, "{text}");
    assert!(sample_lines >= 15, "{text}");

    // The numbers are the database's.
    let runs = f.count("SELECT COUNT(*) FROM runs WHERE status <> 'running'") as f64;
    let by_verdict: f64 = [
        "action",
        "no-action",
        "skipped",
        "action-failed",
        "action-refused",
        "failed",
    ]
    .iter()
    .map(|v| value(&scrape, "fleetagent_runs_total", Some(("verdict", v))).unwrap())
    .sum();
    assert_eq!(by_verdict, runs);
    assert!(runs > 12.0);
    let refused = report["launches"]["refused"]["rate_limited"]
        .as_f64()
        .unwrap_or(0.0);
    assert!(
        refused >= 1.0,
        "the incident's spent window refuses launches"
    );
    assert_eq!(
        value(
            &scrape,
            "fleetagent_guardrail_refusals_total",
            Some(("guardrail", "rate_limited"))
        ),
        Some(refused)
    );
    let dph: f64 = f
        .db()
        .query_row(
            "SELECT COALESCE(SUM(dph), 0) FROM instances WHERE gone_at IS NULL AND state NOT IN ('stopped', 'gone')",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(dph > 0.0);
    let got = value(&scrape, "fleetagent_fleet_dollars_per_hour", None).unwrap();
    assert!((got - dph).abs() < 1e-9, "{got} vs {dph}");
    let last_ok: i64 = f
        .db()
        .query_row("SELECT last_success_at FROM agent_state", [], |r| r.get(0))
        .unwrap();
    assert_eq!(
        value(&scrape, "fleetagent_last_success_timestamp_seconds", None),
        Some(last_ok as f64 / 1000.0)
    );
    // The simulated passes listed vast.ai; this run has no key: the listing is failing, not
    // the simulation's last success.
    assert_eq!(
        value(&scrape, "fleetagent_vast_ok", None),
        Some(0.0),
        "{text}"
    );
    for name in [
        "fleetagent_prompt_tokens_last",
        "fleetagent_emergency",
        "fleetagent_queue_proofs",
        "fleetagent_fleet_instances",
    ] {
        assert!(
            value(&scrape, name, None).is_some(),
            "{name} missing:\n{text}"
        );
    }
    // Readable by node_exporter (another user) whatever the umask: the units' UMask=0007
    // made it 0640.
    let mut under_umask = Command::new("sh");
    under_umask
        .arg("-c")
        .arg(r#"umask 0007; exec "$0" --config "$1" --state-dir "$2" run"#)
        .arg(BIN)
        .arg(&f.config)
        .arg(&f.state);
    clean_env(&mut under_umask);
    assert!(under_umask.status().unwrap().success());
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&prom).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o644, "the textfile's mode");

    // An operator's pause and resume rewrite it at once, not at the next pass.
    let paused = || {
        let text = std::fs::read_to_string(&prom).unwrap();
        let scrape = Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).unwrap();
        value(&scrape, "fleetagent_paused", None)
    };
    assert_eq!(paused(), Some(0.0));
    f.cmd(&["pause", "--reason", "maintenance"]).ok();
    assert_eq!(paused(), Some(1.0));
    f.cmd(&["resume"]).ok();
    assert_eq!(paused(), Some(0.0));
}

/// `poll` rewrites the textfile too: vast.ai's health as this minute's listing left it, not
/// as the last run did (the file said `vast_ok 1` while `doctor` said vast.ai fails).
#[test]
fn poll_rewrites_the_textfile_with_vast_ais_health() {
    let vast = crate::common::fake_vast::FakeVast::start_real_time();
    let f = Fleet::with_config(FAST_CONFIG).env("VAST_API_KEY", &vast.api_key());
    let prom = f.path().join("fleetagent.prom");
    f.write_config(&format!(
        "{FAST_CONFIG}\n[vast]\nbase_url = \"{}\"\n[metrics]\ntextfile = \"{}\"\n",
        vast.url(),
        prom.display()
    ));
    f.cmd(&["init"]).ok();
    let vast_ok = || {
        let text = std::fs::read_to_string(&prom).unwrap();
        let scrape = Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).unwrap();
        value(&scrape, "fleetagent_vast_ok", None)
    };
    f.cmd(&["poll"]).ok();
    assert_eq!(vast_ok(), Some(1.0));
    vast.set_api_key(Some("another-key"));
    f.cmd(&["poll"]).code(1);
    assert_eq!(vast_ok(), Some(0.0));
}
