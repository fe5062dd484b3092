//! The Prometheus rules and the Grafana dashboard of docs/monitoring/ against a real run's
//! textfile (issue 22, item 9): `promtool check rules`, and `promtool test rules` over series
//! written from the files of real runs, aged, and over synthetic days of counters.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

use super::operations::{now_ms, rig};
use crate::common::fake_vast::FakeVast;
use crate::common::fleet::Fleet;
use fleetagent::store::{ops, OpenMode, Store};

pub(crate) fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// Fails the test, saying what to install, when promtool is missing.
pub(crate) fn require_promtool() {
    if let Err(e) = Command::new("promtool").arg("--version").output() {
        panic!(
            "promtool cannot be run ({e}): install the prometheus package (apt-get install prometheus; scripts/test does)"
        );
    }
}

pub(crate) fn promtool(args: &[&str]) {
    let out = Command::new("promtool").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "promtool {args:?}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `promtool test rules` over `test` written to `file`; a failure shows the test file too.
fn test_rules(file: &Path, test: &str) {
    std::fs::write(file, test).unwrap();
    let out = Command::new("promtool")
        .args(["test", "rules"])
        .arg(file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "promtool test rules:\n{}{}\n--- the test file ---\n{test}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The samples of a textfile: (series as written, value).
pub(crate) fn samples(text: &str) -> Vec<(String, f64)> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').unwrap();
            (series.to_string(), value.parse().unwrap())
        })
        .collect()
}

pub(crate) fn metric_name(series: &str) -> &str {
    series.split('{').next().unwrap()
}

/// promtool's input series from a textfile as node_exporter would serve it unchanged for
/// `minutes` (no run since): labels `instance` and `job` added, and the times it holds
/// (`*_timestamp_seconds`) made relative to when it was written, which is promtool's time 0.
pub(crate) fn input_series(text: &str, instance: &str, minutes: u32) -> String {
    let all = samples(text);
    let written = all
        .iter()
        .find(|(s, _)| s == "fleetagent_metrics_timestamp_seconds")
        .map(|(_, v)| *v)
        .expect("the textfile says when it was written");
    let mut out = String::new();
    for (series, value) in all {
        // 0 is "never", not a time.
        let value = if metric_name(&series).ends_with("_timestamp_seconds") && value != 0.0 {
            value - written
        } else {
            value
        };
        let extra = format!("instance=\"{instance}\",job=\"node\"");
        let series = match series.strip_suffix('}') {
            Some(s) => format!("{s},{extra}}}"),
            None => format!("{series}{{{extra}}}"),
        };
        out.push_str(&format!(
            "      - series: '{}'\n        values: '{value}+0x{minutes}'\n",
            series.replace('\'', "''")
        ));
    }
    out
}

/// A `promql_expr_test` that the firing alerts at `minutes` are exactly `want` (alert, instance).
fn firing_at(minutes: u32, want: &[(&str, &str)]) -> String {
    firing_of(minutes, "", want)
}

/// [`firing_at`] among the alerts that `matchers` (more ALERTS label matchers, each with a
/// leading comma) select.
pub(crate) fn firing_of(minutes: u32, matchers: &str, want: &[(&str, &str)]) -> String {
    let matchers = matchers.replace('\'', "''");
    let mut out = format!(
        "      - expr: 'count by (alertname, instance) (ALERTS{{alertstate=\"firing\"{matchers}}})'\n        eval_time: {minutes}m\n        exp_samples:\n"
    );
    for (alert, instance) in want {
        // absent() fires without an instance.
        let instance = if instance.is_empty() {
            String::new()
        } else {
            format!(", instance=\"{instance}\"")
        };
        out.push_str(&format!(
            "          - labels: '{{alertname=\"{alert}\"{instance}}}'\n            value: 1\n"
        ));
    }
    if want.is_empty() {
        out = out.replace("        exp_samples:\n", "        exp_samples: []\n");
    }
    out
}

/// Two real runs against the fakes write two textfiles: A has WORKERS DEAD with nothing to
/// launch (max_instances = 0), B is blind (the probe fails, the key is refused), paused and
/// over its daily spend. The rules check; promtool runs them over series made from those
/// files and finds exactly the alerts each state calls for, and the time-based ones as the
/// files age; a synthetic day of counters fires the floor and failure alerts. Every metric the
/// rules and the dashboard name is a sample in those textfiles.
#[test]
fn the_alert_rules_and_the_dashboard_fit_a_real_runs_textfile() {
    require_promtool();
    let rules = repo("docs/monitoring/fleetagent.rules.yml");
    promtool(&["check", "rules", rules.to_str().unwrap()]);

    let vast = FakeVast::start_real_time();
    let textfile = |f: &Fleet| f.path().join("fleetagent.prom");
    let common = "[price]\nproof_price_fil = 0.01\nfil_usd = 4.0";
    let policy = "target_proofs_per_hour = 100\nmax_instances = 0\nmax_dph_total = 5.0\ndaily_spend_max = 0.001";
    let with_metrics = |f: &Fleet| {
        let cfg = std::fs::read_to_string(&f.config).unwrap();
        f.write_config(&format!(
            "{cfg}\n[metrics]\ntextfile = \"{}\"\n",
            textfile(f).display()
        ));
    };
    // A: WORKERS DEAD, nothing may launch.
    let demand = "source = \"command\"\ncommand = \"cat DIR/demand.json\"";
    let a = rig(&vast, &vast.api_key(), demand, policy, common);
    with_metrics(&a);
    std::fs::write(
        a.path().join("demand.json"),
        json!({"pending": 59, "running": 0, "completed_1h": 0, "completed_15m": 0, "workers": []})
            .to_string(),
    )
    .unwrap();
    a.cmd(&["run"]).ok();
    // B: blind, paused, an instance of ours billing $100/h since midnight (UTC).
    let b = rig(
        &vast,
        "a-revoked-key",
        "source = \"command\"\ncommand = \"false\"",
        policy,
        common,
    );
    with_metrics(&b);
    {
        let now = now_ms();
        let s = Store::open(&b.state, OpenMode::Existing, now).unwrap();
        ops::set_pause(
            &s.conn,
            &ops::Pause {
                since: now,
                until: None,
                reason: "maintenance".into(),
            },
        )
        .unwrap();
        let midnight = now - now.rem_euclid(86_400_000);
        s.conn
            .execute(
                "INSERT INTO instances (label, vast_id, state, gpu_name, dph, created_at, state_since)
                 VALUES ('fleetagent-b-1', 7001, 'proving', 'RTX 4090', 100.0, ?1, ?1)",
                [midnight],
            )
            .unwrap();
    }
    b.cmd(&["run"]).code(1); // the listing failed: the run says so and exits 1
    let (text_a, text_b) = (
        std::fs::read_to_string(textfile(&a)).unwrap(),
        std::fs::read_to_string(textfile(&b)).unwrap(),
    );
    // C: healthy, one instance of ours proving (a label of before install ids: ours to every
    // install), with our completions in Curio's history, so the figures that exist only
    // while we prove (our cost per proof) are written too.
    let label = "fleetagent-r1-0badc0de";
    vast.add_instance(label);
    let c = rig(&vast, &vast.api_key(), demand, policy, common);
    with_metrics(&c);
    std::fs::write(
        c.path().join("demand.json"),
        json!({"pending": 0, "running": 1, "completed_1h": 10, "completed_15m": 3,
               "workers": [{"machine_name": label, "host_and_port": "10.0.0.5:12300",
                            "running": 1, "cordoned": false}],
               "history": [{"host_and_port": "10.0.0.5:12300", "proofs": 30,
                            "first_end_secs_ago": 10000, "last_end_secs_ago": 60,
                            "busy_secs": 9000, "completed_1h": 10}]})
        .to_string(),
    )
    .unwrap();
    c.cmd(&["run"]).ok();
    let text_c = std::fs::read_to_string(textfile(&c)).unwrap();
    assert!(
        text_c.contains("fleetagent_fleet_cost_per_proof_dollars"),
        "{text_c}"
    );

    // Every metric the rules and the dashboard name is a sample of a real textfile.
    let dashboard_text =
        std::fs::read_to_string(repo("docs/monitoring/grafana-dashboard.json")).unwrap();
    let dashboard: Value = serde_json::from_str(&dashboard_text).expect("the dashboard is JSON");
    assert!(dashboard["panels"].as_array().unwrap().len() >= 10);
    let have: BTreeSet<String> = samples(&text_a)
        .into_iter()
        .chain(samples(&text_b))
        .chain(samples(&text_c))
        .map(|(s, _)| metric_name(&s).to_string())
        .collect();
    let rules_text = std::fs::read_to_string(&rules).unwrap();
    let mut named = BTreeSet::new();
    for text in [&rules_text, &dashboard_text] {
        let mut rest = text.as_str();
        while let Some(at) = rest.find("fleetagent_") {
            let name: String = rest[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            rest = &rest[at + name.len()..];
            named.insert(name);
        }
    }
    assert!(named.len() >= 20, "{named:?}");
    // The HA families need a shared database: ha_hosts.rs checks them against the textfiles
    // of a real leader and follower.
    let missing: Vec<&String> = named
        .difference(&have)
        .filter(|n| !n.starts_with("fleetagent_ha_"))
        .collect();
    assert!(
        missing.is_empty(),
        "named but not in a real textfile: {missing:?}"
    );

    // The rules over those files, aging, and over a synthetic day of counters.
    // 300 steps of 5 minutes; a counter that steps up at 285 (1425m) has risen within the
    // last 30 minutes at 1440m (a day).
    let day = |floor: &str, llm: &str, fallback: &str, action_failed: &str, failed: &str| {
        [
            ("runs_decided_total", "decided_by=\"floor\"", floor),
            ("runs_decided_total", "decided_by=\"llm\"", llm),
            ("runs_decided_total", "decided_by=\"fallback-rules\"", fallback),
            ("runs_total", "verdict=\"action-failed\"", action_failed),
            ("runs_total", "verdict=\"failed\"", failed),
        ]
        .iter()
        .map(|(name, label, values)| {
            format!(
                "      - series: 'fleetagent_{name}{{{label},instance=\"c\",job=\"node\"}}'\n        values: '{values}'\n"
            )
        })
        .collect::<String>()
    };
    let profit = |values: &str| {
        format!(
            "      - series: 'fleetagent_profit_dollars_per_hour{{instance=\"c\",job=\"node\"}}'\n        values: '{values}'\n"
        )
    };
    // Rules evaluated every 5 minutes (the default timer period, and about what a scrape of a
    // file rewritten every pass can tell): a day evaluated every minute costs seconds.
    let test = format!(
        "rule_files:\n  - {rules}\nevaluation_interval: 5m\ntests:\n\
         \x20 - interval: 1m\n    input_series:\n{a}{b}{o}{p}{n}    promql_expr_test:\n{t12}{t20}{t30}\
         \x20 - interval: 5m\n    input_series:\n{day}    promql_expr_test:\n{d1}\
         \x20 - interval: 5m\n    input_series:\n{quiet}    promql_expr_test:\n{d2}",
        rules = rules.display(),
        a = input_series(&text_a, "a", 40),
        b = input_series(&text_b, "b", 40),
        // A healthy textfile of a build before fleetagent_timer_period_seconds, left as it
        // was by an upgrade whose first pass failed on the config: no pass for 15 minutes
        // (3 default periods) is still an alert.
        o = input_series(
            &text_c
                .lines()
                .filter(|l| !l.contains("fleetagent_timer_period_seconds"))
                .map(|l| format!("{l}\n"))
                .collect::<String>(),
            "o",
            40
        ),
        // A healthy file of a pass that no longer knows the price (its FIL/USD gone stale).
        p = input_series(
            &text_c.replace("fleetagent_price_known 1", "fleetagent_price_known 0"),
            "p",
            40
        ),
        // A new install's file (c's, no pass yet: `poll` writes it before the timer's first
        // pass): FleetagentNoPassYet after 20 minutes, never FleetagentNoSuccessfulRun.
        n = input_series(
            &text_c
                .lines()
                .map(|l| match l.starts_with("fleetagent_last_success_timestamp_seconds ") {
                    true => "fleetagent_last_success_timestamp_seconds 0\n".to_string(),
                    false => format!("{l}\n"),
                })
                .collect::<String>(),
            "n",
            40
        ),
        // o, p and n (c's file): an hour of its fleet passes daily_spend_max = 0.001, so a
        // launch would be refused, though today's spend alone is under 90 % of it.
        t12 = firing_at(
            12,
            &[
                ("FleetagentDemandUnknown", "b"),
                ("FleetagentPaused", "b"),
                ("FleetagentPriceUnknown", "p"),
                ("FleetagentSpendNearDailyMax", "b"),
                ("FleetagentSpendNearDailyMax", "o"),
                ("FleetagentSpendNearDailyMax", "p"),
                ("FleetagentVastFailing", "b"),
                ("FleetagentWorkersDeadNothingBooting", "a"),
                ("FleetagentSpendNearDailyMax", "n"),
            ]
        ),
        t20 = firing_at(
            20,
            &[
                ("FleetagentDemandUnknown", "b"),
                ("FleetagentNoSuccessfulRun", "a"),
                ("FleetagentNoSuccessfulRun", "b"),
                ("FleetagentNoSuccessfulRun", "o"),
                ("FleetagentNoSuccessfulRun", "p"),
                ("FleetagentPaused", "b"),
                ("FleetagentPriceUnknown", "p"),
                ("FleetagentSpendNearDailyMax", "b"),
                ("FleetagentSpendNearDailyMax", "o"),
                ("FleetagentSpendNearDailyMax", "p"),
                ("FleetagentVastFailing", "b"),
                ("FleetagentWorkersDeadNothingBooting", "a"),
                ("FleetagentNoPassYet", "n"),
                ("FleetagentSpendNearDailyMax", "n"),
            ]
        ),
        t30 = firing_at(
            30,
            &[
                ("FleetagentDemandUnknown", "a"),
                ("FleetagentDemandUnknown", "b"),
                ("FleetagentDemandUnknown", "p"),
                ("FleetagentNoSuccessfulRun", "a"),
                ("FleetagentNoSuccessfulRun", "b"),
                ("FleetagentNoSuccessfulRun", "o"),
                ("FleetagentNoSuccessfulRun", "p"),
                ("FleetagentPaused", "b"),
                ("FleetagentPriceUnknown", "p"),
                ("FleetagentSpendNearDailyMax", "b"),
                ("FleetagentSpendNearDailyMax", "o"),
                ("FleetagentSpendNearDailyMax", "p"),
                ("FleetagentVastFailing", "b"),
                ("FleetagentWorkersDeadNothingBooting", "a"),
                ("FleetagentDemandUnknown", "n"),
                ("FleetagentNoPassYet", "n"),
                ("FleetagentSpendNearDailyMax", "n"),
            ]
        ),
        // The model unusable on one pass 15 minutes before the end, the rules deciding it;
        // the fleet losing money all day, one pass without a profit sample (its probe
        // failed) 40 minutes before the end (the quiet day earns). Host "gone": its file was
        // collected until 190 minutes before the end (one of several hosts, its textfile
        // lost). Host "u": a price, a fleet that bills, no profit (no completions per
        // machine) all day.
        day = day("0+1x300", "0x300", "0x284 1x20", "0x284 1x20", "0x284 1x20")
            + &profit("-1.5x279 _ -1.5x19")
            + "      - series: 'fleetagent_metrics_timestamp_seconds{instance=\"gone\",job=\"node\"}'\n        values: '1x250 _x49'\n"
            + "      - series: 'fleetagent_price_known{instance=\"u\",job=\"node\"}'\n        values: '1x300'\n"
            + "      - series: 'fleetagent_fleet_dollars_per_hour{instance=\"u\",job=\"node\"}'\n        values: '1.2x300'\n"
            // Host "k": its clock an hour ahead of vast.ai's all day.
            + "      - series: 'fleetagent_clock_skew_seconds{instance=\"k\",job=\"node\"}'\n        values: '3600x300'\n"
            // Host "v": as "u", its demand probe failing all day: no profit is read then,
            // and only FleetagentDemandUnknown says why (a soak saw both, the second wrong).
            + "      - series: 'fleetagent_price_known{instance=\"v\",job=\"node\"}'\n        values: '1x300'\n"
            + "      - series: 'fleetagent_fleet_dollars_per_hour{instance=\"v\",job=\"node\"}'\n        values: '1.2x300'\n"
            + "      - series: 'fleetagent_demand_known{instance=\"v\",job=\"node\"}'\n        values: '0x300'\n"
            // Host "w": as "u", its probe failing one pass an hour: still said (a re-test
            // saw a rule that restarted its hour at each failure never fire).
            + "      - series: 'fleetagent_price_known{instance=\"w\",job=\"node\"}'\n        values: '1x300'\n"
            + "      - series: 'fleetagent_fleet_dollars_per_hour{instance=\"w\",job=\"node\"}'\n        values: '1.2x300'\n"
            + &format!(
                "      - series: 'fleetagent_demand_known{{instance=\"w\",job=\"node\"}}'\n        values: '{}'\n",
                "1x10 0 ".repeat(25).trim_end()
            ),
        d1 = firing_at(
            1440,
            &[
                ("FleetagentActionsFailing", "c"),
                ("FleetagentClockSkew", "k"),
                ("FleetagentDemandUnknown", "v"),
                ("FleetagentFloorOverrulesModel", "c"),
                ("FleetagentLosingMoney", "c"),
                ("FleetagentMetricsMissing", ""),
                ("FleetagentMetricsMissing", "gone"),
                ("FleetagentModelFailing", "c"),
                ("FleetagentProfitUnknown", "u"),
                ("FleetagentProfitUnknown", "w"),
                ("FleetagentRunsFailing", "c"),
            ]
        ),
        quiet = day("0x300", "0+1x300", "0x300", "0x300", "0x300") + &profit("0.5x300"),
        d2 = firing_at(1440, &[("FleetagentMetricsMissing", "")]),
    );
    test_rules(&a.path().join("fleetagent.rules.test.yml"), &test);
}

/// One of two hosts behind one Prometheus powered off for 3 days (the away walkthrough):
/// FleetagentMetricsMissing named it from 15 minutes in, then resolved 6 hours in with the
/// host still off (its window forgot the host). It stays named until the host is back.
#[test]
fn a_host_off_for_days_stays_named_by_metrics_missing() {
    require_promtool();
    let dir = tempfile::tempdir().unwrap();
    let rules = repo("docs/monitoring/fleetagent.rules.yml");
    // 75 hours at 5 minutes a sample; host "b" writes for its first hour, is off for 72
    // hours, and writes again for the last 2.
    let only = ", alertname=\"FleetagentMetricsMissing\"";
    let named = [("FleetagentMetricsMissing", "b")];
    let test = format!(
        "rule_files:\n  - {rules}\nevaluation_interval: 5m\ntests:\n\
         \x20 - interval: 5m\n    input_series:\n\
         \x20     - series: 'fleetagent_metrics_timestamp_seconds{{instance=\"a\",job=\"node\"}}'\n\
         \x20       values: '0+300x900'\n\
         \x20     - series: 'fleetagent_metrics_timestamp_seconds{{instance=\"b\",job=\"node\"}}'\n\
         \x20       values: '0+300x11 _x864 0+300x24'\n\
         \x20   promql_expr_test:\n{}{}{}",
        firing_of(90, only, &named),
        firing_of(72 * 60, only, &named),
        firing_of(4380 + 30, only, &[]),
        rules = rules.display(),
    );
    test_rules(&dir.path().join("away.test.yml"), &test);
}
