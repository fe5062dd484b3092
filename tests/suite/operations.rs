//! Running it like production (issue 22, items 1, 9 and 10): `doctor` names what makes the agent
//! blind or handless right after the run that saw it, by stable check names (documented in
//! docs/operations.md); the Prometheus rules and the Grafana dashboard of docs/monitoring/ fit a
//! real run's textfile (`promtool check rules`, `promtool test rules` with series written from
//! it); `backup` copies a live database.

use std::collections::BTreeSet;
use std::process::Command;

use serde_json::{json, Value};

use crate::common::config::rules_config;
use crate::common::fake_vast::FakeVast;
use crate::common::fleet::Fleet;
use fleetagent::store::runs::{self, ActionCounts, Outcome, StartedBy, Verdict};
use fleetagent::store::{ops, OpenMode, Store};

const MIN: i64 = 60_000;

pub(crate) fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// A fleet of the rules alone wired to the fake vast.ai; `demand` and `policy` are the lines of
/// those tables (`DIR` in `demand` is the fleet's temp dir), `extra` more tables.
pub(crate) fn rig(vast: &FakeVast, key: &str, demand: &str, policy: &str, extra: &str) -> Fleet {
    let f = Fleet::with_config("").env("VAST_API_KEY", key);
    let demand = demand.replace("DIR", &f.path().display().to_string());
    let own = format!(
        "[run]\ndeadline_secs = 60\n[demand]\n{demand}\n[policy]\nproofs_per_hour_per_instance = 50\n{policy}"
    );
    let unused = f.path().join("unused.json");
    f.write_config(&rules_config(&vast.url(), &unused, &[&own, extra]));
    f.cmd(&["init"]).ok();
    f
}

fn doctor_json(f: &Fleet) -> (Value, i32) {
    let out = f.cmd(&["doctor", "--json"]);
    (out.json(), out.code)
}

fn check<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name}: {v}"))
}

/// A check that fails: its detail contains `want`, its `since` is RFC 3339 UTC when given.
#[track_caller]
fn failing(v: &Value, name: &str, want: &str) -> String {
    let c = check(v, name);
    assert_eq!(c["ok"], false, "{name}: {c}");
    let detail = c["detail"].as_str().unwrap_or_default().to_string();
    assert!(detail.contains(want), "{name}: {c}");
    assert!(c["fix"].is_string(), "{name} has no fix: {c}");
    if let Some(since) = c["since"].as_str() {
        assert!(
            since.ends_with('Z') && chrono::DateTime::parse_from_rfc3339(since).is_ok(),
            "{name}: {c}"
        );
    }
    detail
}

/// HarmonyDB unreachable, the vast.ai key refused and the textfile's dir missing: one `run`,
/// and `doctor` names each (exit 1), by name in `--json` with every other check. Then rows a
/// later pass would leave (a pass whose launches all failed, a failed run, a pause while
/// WORKERS DEAD, another install's instances) are named too; a healthy run clears what it
/// fixed; and `backup` copies the database.
#[test]
fn doctor_names_what_makes_the_agent_blind_or_handless_right_after_the_run_that_saw_it() {
    let vast = FakeVast::start_real_time();
    let prom_dir = tempfile::tempdir().unwrap();
    let prom = prom_dir.path().join("textfile/fleetagent.prom");
    let f = rig(
        &vast,
        "a-revoked-key",
        "source = \"harmonydb\"",
        "max_instances = 4\nmax_dph_total = 2.0",
        &format!("[metrics]\ntextfile = \"{}\"", prom.display()),
    )
    .env(
        "FLEETAGENT_HARMONYDB_URL",
        "postgres://curio:secret@127.0.0.1:9/curio",
    );
    f.cmd(&["run"]).code(1); // the listing failed: the run says so and exits 1

    let out = f.cmd(&["doctor"]).code(1);
    for want in [
        "the demand probe (demand.source = \"harmonydb\") failed in the last pass",
        "vast.ai refuses the API key since ",
        "the metrics textfile ",
    ] {
        let lines: Vec<&str> = out.stdout.lines().filter(|l| l.contains(want)).collect();
        assert_eq!(lines.len(), 1, "{want}: {}", out.stdout);
        assert!(lines[0].contains("; fix: "), "{}", lines[0]);
    }
    assert!(!out.stdout.contains("secret"), "{}", out.stdout);

    let (v, code) = doctor_json(&f);
    assert_eq!((code, &v["ok"]), (1, &json!(false)));
    let names: Vec<&str> = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        fleetagent::doctor::CHECKS,
        "every check, by name, in order"
    );
    for c in v["checks"].as_array().unwrap() {
        let keys: BTreeSet<&str> = c.as_object().unwrap().keys().map(|k| k.as_str()).collect();
        assert_eq!(
            keys,
            BTreeSet::from(["name", "ok", "since", "detail", "fix"]),
            "{c}"
        );
    }
    failing(&v, "demand", "harmonydb");
    failing(&v, "vast", "no listing has worked yet");
    failing(&v, "metrics", "does not exist");
    let vast_since = check(&v, "vast")["since"].as_str().unwrap().to_string();
    for name in ["actions", "pause", "foreign_installs", "database", "disk"] {
        assert_eq!(check(&v, name)["ok"], true, "{name}: {v}");
    }

    // What later passes leave, written through the store as they would write it.
    let now = now_ms();
    {
        let s = Store::open(&f.state, OpenMode::Existing, now).unwrap();
        let id = runs::create(&s.conn, 1, 1, 1, StartedBy::Events, now - 2 * MIN).unwrap();
        let o = Outcome {
            verdict: Verdict::ActionFailed,
            actions: ActionCounts {
                ok: 0,
                refused: 0,
                failed: 2,
            },
            ..Outcome::new(true)
        };
        runs::finish_ok(&s.conn, id, &o, now).unwrap();
        let failed = runs::create(&s.conn, 1, 1, 2, StartedBy::Tick, now - MIN).unwrap();
        runs::finish_failed(&s.conn, failed, "the LLM is unusable", now).unwrap();
        ops::set_pause(
            &s.conn,
            &ops::Pause {
                since: now - 3 * MIN,
                until: None,
                reason: "swapping the image".into(),
            },
        )
        .unwrap();
        let dead = json!({"pending": 59, "running": 0, "completed_1h": 0, "completed_15m": 0, "workers": []});
        fleetagent::store::curio::set_last_reading(&s.conn, &dead.to_string(), now).unwrap();
        ops::set_foreign_installs(
            &s.conn,
            &[ops::ForeignInstance {
                install_id: "qwerty".into(),
                label: "fleetagent-qwerty-r4-0badf00d".into(),
                vast_id: 4242,
            }],
            now,
        )
        .unwrap();
    }
    let (v, _) = doctor_json(&f);
    failing(
        &v,
        "actions",
        "changed nothing: its 2 launch(es) or stop(s) failed at vast.ai",
    );
    failing(&v, "runs", "failed 0s ago: the LLM is unusable");
    failing(
        &v,
        "pause",
        "PAUSED WHILE WORKERS DEAD: the fleet is unattended",
    );
    failing(&v, "foreign_installs", "another install (qwerty");
    // The fix names the other way a label reads as another install's: a prefix that is
    // ours followed by a word.
    let fix = check(&v, "foreign_installs")["fix"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        fix.contains(r#"labels of an install whose prefix is "fleetagent-qwerty" read here as install "qwerty""#),
        "{fix}"
    );

    // Fixed: a demand source that answers, the right key, the textfile's dir, no pause. The
    // next run clears what it saw fixed; the problems of the past stay until they pass.
    let cfg = std::fs::read_to_string(&f.config).unwrap().replace(
        "source = \"harmonydb\"",
        &format!(
            "source = \"command\"\ncommand = \"cat {}\"",
            f.path().join("demand.json").display()
        ),
    );
    f.write_config(&cfg);
    std::fs::write(
        f.path().join("demand.json"),
        json!({"pending": 0, "running": 0, "completed_1h": 0, "completed_15m": 0, "workers": []})
            .to_string(),
    )
    .unwrap();
    std::fs::create_dir_all(prom.parent().unwrap()).unwrap();
    {
        let s = Store::open(&f.state, OpenMode::Existing, now).unwrap();
        ops::clear_pause(&s.conn).unwrap();
    }
    let run = f
        .command(&["run"])
        .env("VAST_API_KEY", vast.api_key())
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let (v, _) = doctor_json(&f);
    for name in ["demand", "vast", "metrics", "pause", "actions"] {
        assert_eq!(check(&v, name)["ok"], true, "{name}: {v}");
    }
    assert!(prom.exists());
    failing(&v, "runs", "1 run(s) failed in the last hour");

    // `poll` (every minute, without a pass) records a listing that starts failing, too, and
    // fails (exit 1) as the run does.
    f.cmd(&["poll"]).code(1);
    let (v, _) = doctor_json(&f);
    let detail = failing(&v, "vast", "vast.ai refuses the API key since ");
    assert!(
        detail.contains("the last listing that worked was "),
        "{detail}"
    );
    assert!(check(&v, "vast")["since"].as_str().unwrap() >= vast_since.as_str());

    // A backup of the live database: what it wrote, 0660, never over a file.
    let copy = f.path().join("fleetagent-backup.db");
    let out = f.cmd(&["backup", copy.to_str().unwrap()]).ok();
    let runs_now = f.count("SELECT COUNT(*) FROM runs");
    assert!(
        out.stdout
            .starts_with(&format!("backup {}: ", copy.display()))
            && out.stdout.contains("PRAGMA quick_check: ok")
            && out.stdout.contains(&format!("rows: runs {runs_now}, ")),
        "{}",
        out.stdout
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&copy).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o660);
    let again = f.cmd(&["backup", copy.to_str().unwrap()]).code(1);
    assert!(again.stderr.contains("exists"), "{}", again.stderr);
    // Never under a name the state dir's runs overwrite or delete (the lock was reported
    // "checked", then overwritten by the next run).
    for name in ["run.lock", "trigger", "fleetagent.db-journal"] {
        let into = f.state.join(name);
        let existed = into.exists();
        let out = f.cmd(&["backup", into.to_str().unwrap()]).code(1);
        assert!(
            out.stderr
                .contains("is a file fleetagent keeps in its state dir"),
            "{name}: {}",
            out.stderr
        );
        assert_eq!(into.exists(), existed, "{name}");
    }
}

/// docs/operations.md's table of checks names exactly the checks `doctor` has.
#[test]
fn every_doctor_check_is_documented() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operations.md"))
        .unwrap();
    let (_, table) = doc
        .split_once("<!-- doctor-checks -->")
        .expect("docs/operations.md marks its table of doctor checks");
    let documented: Vec<&str> = table
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .filter_map(|l| l.split('|').nth(1))
        .map(|c| c.trim().trim_matches('`'))
        .filter(|c| !c.is_empty() && *c != "check" && !c.starts_with('-'))
        .collect();
    assert_eq!(documented, fleetagent::doctor::CHECKS);
}

// --- monitoring ----------------------------------------------------------------------------

/// Must-show 1, the third case end to end: vast.ai answers the listing but fails every
/// create. The pass is `action-failed` (never a plain `no-action`), its line says so, and
/// `doctor` right after exits 1 naming the failed launch; the next good pass clears it.
#[test]
fn a_pass_whose_launches_all_failed_is_named_by_its_line_inspect_and_doctor() {
    use crate::common::fake_vast::{FakeReply, Route};
    let vast = FakeVast::start_real_time();
    vast.add_offers(5, "RTX 4090", 0.40, 0.99);
    let f = rig(
        &vast,
        &vast.api_key(),
        "source = \"command\"\ncommand = \"cat DIR/demand.json\"",
        "max_instances = 4\nmax_dph_total = 2.0\nlaunch_window_max = 1\nemergency_launch_max = 1",
        "",
    );
    let dead =
        json!({"pending": 59, "running": 0, "completed_1h": 0, "completed_15m": 0, "workers": []});
    std::fs::write(f.path().join("demand.json"), dead.to_string()).unwrap();
    vast.fail_next(
        Route::Create,
        10,
        FakeReply::json(500, json!({"error": "internal error"})),
    );
    let out = f.cmd(&["run"]).ok();
    assert!(
        out.stdout.contains("-> action-failed") && out.stdout.contains("failed 1 launch"),
        "{}",
        out.stdout
    );
    let run = &f.inspect()["runs"][0];
    assert_eq!(run["verdict"], "action-failed", "{run}");
    assert_eq!(run["actions_failed"], 1, "{run}");
    let doc = f.cmd(&["doctor"]).code(1);
    assert!(
        doc.stdout
            .contains("changed nothing: its 1 launch(es) or stop(s) failed at vast.ai")
            && doc.stdout.contains("fleetagent history --run"),
        "{}",
        doc.stdout
    );
    let (json, code) = doctor_json(&f);
    assert_eq!(code, 1);
    let check = json["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "actions")
        .cloned()
        .unwrap();
    assert_eq!(check["ok"], false, "{check}");
    assert!(check["since"].is_string(), "{check}");
}

/// `[ha] enabled = true` with no shared database's URL: `inspect` still reports (the role
/// unknown, the error naming what to set) instead of refusing, since that is when an
/// operator needs it.
#[test]
fn inspect_reports_an_ha_setup_without_its_database_url() {
    let f = Fleet::with_config("");
    f.cmd(&["init"]).ok();
    // With [ha] off, `ha status` answers (`--json` is inspect's `ha`: null); `release` has
    // nothing to release.
    assert_eq!(
        f.cmd(&["ha", "status", "--json"]).ok().stdout.trim(),
        "null"
    );
    assert_eq!(f.inspect()["ha"], Value::Null);
    let out = f.cmd(&["ha", "status"]).ok();
    assert!(out.stdout.contains("several hosts are off"), "{out:?}");
    f.cmd(&["ha", "release"]).code(1);
    f.write_config("[ha]\nenabled = true\nhost_id = \"mgmt-a\"\n");
    let ha = f.inspect()["ha"].clone();
    assert_eq!(ha["role"], "unknown", "{ha}");
    assert_eq!(ha["host_id"], "mgmt-a", "{ha}");
    let error = ha["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("[ha] enabled = true needs the shared database's URL"),
        "{ha}"
    );
    let text = f.cmd(&["inspect"]).ok().stdout;
    assert!(text.contains("unknown"), "{text}");
}

/// A config error under `doctor --json`: exit 2 and the error line as for every config error,
/// and JSON on stdout for the monitor that reads it (the config check failing, the rest not
/// checked), not an empty stdout.
#[test]
fn doctor_json_on_a_config_error_still_prints_json() {
    let f = Fleet::with_config("");
    f.cmd(&["init"]).ok();
    f.write_config("[policy]\nmax_instances = \"four\"\n");
    let out = f.cmd(&["doctor", "--json"]);
    assert_eq!(out.code, 2, "{}\n{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("max_instances"), "{}", out.stderr);
    let v: Value = serde_json::from_str(&out.stdout).expect("JSON on stdout");
    assert_eq!(v["ok"], false);
    let config = check(&v, "config");
    assert_eq!(config["ok"], false, "{config}");
    assert!(
        config["detail"]
            .as_str()
            .is_some_and(|d| d.contains("max_instances")),
        "{config}"
    );
    assert!(
        check(&v, "last_success")["detail"]
            .as_str()
            .is_some_and(|d| d.starts_with("not checked")),
        "{v}"
    );
}

/// Two builds of one version are told apart: `--version`, `inspect` and `inspect --json` name
/// the commit the binary was built from (here, the checkout's HEAD when the suite was built).
#[test]
fn the_version_names_the_commit_it_was_built_from() {
    let head = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".to_string());
    let f = Fleet::new();
    let out = f.cmd(&["--version"]).ok();
    assert_eq!(
        out.stdout.trim(),
        format!("fleetagent {} (commit {head})", env!("CARGO_PKG_VERSION"))
    );
    let v = f.inspect();
    assert_eq!(
        (v["version"].as_str(), v["commit"].as_str()),
        (Some(env!("CARGO_PKG_VERSION")), Some(head.as_str()))
    );
    let text = f.cmd(&["inspect"]).ok().stdout;
    assert!(
        text.starts_with(&format!(
            "fleetagent {} (commit {head}) at ",
            env!("CARGO_PKG_VERSION")
        )),
        "{text}"
    );
}

/// A database file its owner and group may not write (a restore with the wrong mode, a
/// chmod by hand): every run fails "attempt to write a readonly database", so `doctor`'s
/// `database` check names the file and the chmod, judged by the mode (doctor often runs as
/// root, who could write it anyway).
#[test]
fn doctor_names_a_database_file_the_service_cannot_write() {
    use std::os::unix::fs::PermissionsExt;
    let f = Fleet::new();
    f.cmd(&["run"]).ok();
    let (v, _) = doctor_json(&f);
    assert_eq!(check(&v, "database")["ok"], true, "{v}");
    let db = f.state.join("fleetagent.db");
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o440)).unwrap();
    let (v, code) = doctor_json(&f);
    assert_eq!(code, 1);
    let detail = failing(&v, "database", "cannot be written by its owner and group");
    assert!(detail.contains("fleetagent.db (mode 0440)"), "{detail}");
    let fix = check(&v, "database")["fix"].as_str().unwrap().to_string();
    assert!(fix.starts_with("chmod 0660 "), "{fix}");

    // Writable, but owned by neither the dir's owner nor its group (`init` as root before
    // the dir went to the service user): the service cannot open it.
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o660)).unwrap();
    std::os::unix::fs::chown(&db, Some(4242), Some(4242)).unwrap();
    let (v, code) = doctor_json(&f);
    assert_eq!(code, 1);
    let detail = failing(&v, "database", "owned by neither the state dir's owner");
    assert!(detail.contains("fleetagent.db (4242:4242)"), "{detail}");
    assert!(!detail.contains("run.lock"), "{detail}");
}

/// `policy.daily_spend_max` reached (today's spend and an hour of the fleet pass it): every
/// launch is refused until 00:00 UTC, so `doctor`'s `config` check says it while it lasts.
#[test]
fn doctor_says_when_the_daily_spend_cap_refuses_every_launch() {
    let f = Fleet::with_config(&format!(
        "{}\n[policy]\ndaily_spend_max = 50.0\n",
        crate::common::fleet::FAST_CONFIG
    ));
    f.cmd(&["init"]).ok();
    let (v, _) = doctor_json(&f);
    assert!(
        !check(&v, "config")["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("daily_spend_max is reached"),
        "{v}"
    );
    let now = chrono::Utc::now().timestamp_millis();
    let midnight = now - now.rem_euclid(86_400_000);
    f.db()
        .execute(
            "INSERT INTO instances (label, vast_id, state, gpu_name, dph, created_at, state_since)
             VALUES ('fleetagent-r1-0badc0de', 7001, 'proving', 'RTX 4090', 100.0, ?1, ?1)",
            [midnight],
        )
        .unwrap();
    let (v, code) = doctor_json(&f);
    assert_eq!(code, 1);
    let detail = failing(&v, "config", "policy.daily_spend_max is reached: $");
    assert!(
        detail.contains("passes $50.00, so every launch is refused until 00:00 UTC"),
        "{detail}"
    );
    // inspect says the same figure beside the cap (the soak's auditor found it only in the
    // last observation's text).
    let v = f.inspect();
    let spent = v["spend_today"].as_f64().unwrap();
    let hours = (now - midnight) as f64 / 3_600_000.0;
    assert!(
        (spent - 100.0 * hours).abs() < 1.0,
        "{spent} after {hours} h"
    );
    assert_eq!(v["daily_spend_max"], 50.0);
    let text = f.cmd(&["inspect"]).ok().stdout;
    // (At $100/h the figure moves a cent every 0.36 s: the text's is not compared.)
    let line = text
        .lines()
        .find(|l| l.starts_with("spend       $"))
        .unwrap();
    assert!(
        line.contains(" today (UTC) of policy.daily_spend_max $50.00; the fleet bills $100.00/h"),
        "{line}"
    );
}
