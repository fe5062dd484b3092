//! Several hosts over one shared database (issue 24, docs/ha.md), with the real binary: two
//! or three state dirs (hosts), one real PostgreSQL (tests/common/pg.rs), one fake vast.ai
//! they all rent from, Curio's demand from a file, the rules deciding. Time is scaled: a
//! lease of 5 s, a fence margin of 2 s, vast.ai calls bounded at 1 s.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::agent_e2e::{dead_fleet, write_demand};
use crate::common::fake_vast::{FakeVast, Route};
use crate::common::fleet::{Fleet, Run};
use crate::common::pg::{self, TestDb};

pub(crate) const TTL_SECS: u64 = 5;

/// One host: its own config (naming it) and state dir; the demand file of `demand_dir`.
pub(crate) fn host(name: &str, db: &TestDb, vast: &FakeVast, demand_dir: &Path) -> Fleet {
    let config = format!(
        r#"
[run]
deadline_secs = 60
[debounce]
p0_secs = 0
p1_secs = 0
p2_secs = 0
max_wait_secs = 1
[llm]
provider = "rules"
[vast]
base_url = "{vast_url}"
image = "ghcr.io/example/curio-psprove:latest"
timeout_secs = 1
[vast.offers]
gpu_names = ["RTX 4090"]
[demand]
source = "command"
command = "cat {demand}"
[policy]
target_proofs_per_hour = 50
proofs_per_hour_per_instance = 50
max_dph_total = 10.0
max_instances = 20
[ha]
enabled = true
host_id = "{name}"
lease_ttl_secs = {TTL_SECS}
fence_margin_secs = 2
"#,
        vast_url = vast.url(),
        demand = demand_dir.join("demand.json").display(),
    );
    let f = Fleet::with_config("")
        .env("VAST_API_KEY", &vast.api_key())
        .env("FLEETAGENT_HA_DB_URL", &db.url());
    let prom = f.path().join("fleetagent.prom");
    f.write_config(&format!(
        "{config}[metrics]\ntextfile = \"{}\"\n",
        prom.display()
    ));
    f.cmd(&["init"]).ok();
    f
}

/// The value of an unlabelled sample in the host's metrics textfile.
fn metric(f: &Fleet, name: &str) -> Option<f64> {
    let text = std::fs::read_to_string(f.path().join("fleetagent.prom")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
}

fn doctor_ha(f: &Fleet) -> Value {
    let out = f.cmd(&["doctor", "--json"]);
    let all: Value = serde_json::from_str(&out.stdout).unwrap();
    all["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "ha")
        .cloned()
        .expect("doctor has no ha check")
}

pub(crate) fn labels_created(vast: &FakeVast) -> Vec<String> {
    vast.requests_to(Route::Create)
        .iter()
        .filter(|r| r.status == 200)
        .filter_map(|r| r.json()["label"].as_str().map(String::from))
        .collect()
}

pub(crate) fn ha(f: &Fleet) -> Value {
    f.inspect()["ha"].clone()
}

pub(crate) fn wait_for_expiry(db: &mut TestDb) {
    let deadline = Instant::now() + Duration::from_secs(TTL_SECS + 10);
    while db.query_i64("SELECT COUNT(*) FROM fleetagent.lease WHERE expires_at > now()") > 0 {
        assert!(Instant::now() < deadline, "the lease never expired");
        thread::sleep(Duration::from_millis(200));
    }
}

/// Two hosts on a fresh shared database, renting from one fake vast.ai with offers, Curio's
/// workers dead.
pub(crate) struct Pair {
    pub db: TestDb,
    pub vast: FakeVast,
    pub _demand: tempfile::TempDir,
    pub a: Fleet,
    pub b: Fleet,
}

pub(crate) fn pair() -> Pair {
    let db = pg::fresh_db();
    let vast = FakeVast::start_real_time();
    vast.add_offers(10, "RTX 4090", 0.40, 0.99);
    let demand = tempfile::tempdir().unwrap();
    write_demand(demand.path(), dead_fleet());
    let a = host("host-a", &db, &vast, demand.path());
    let b = host("host-b", &db, &vast, demand.path());
    Pair {
        db,
        vast,
        _demand: demand,
        a,
        b,
    }
}

/// `cmd` started with its stderr read on a thread: the child, a channel that hears of the
/// first `test pause at` line (src/faults.rs), and the thread, which returns the whole stderr.
pub(crate) fn spawn_watching(
    mut cmd: Command,
) -> (
    std::process::Child,
    std::sync::mpsc::Receiver<()>,
    thread::JoinHandle<String>,
) {
    use std::io::{BufRead, BufReader};
    let mut child = cmd
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains("test pause at") {
                let _ = tx.send(());
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    (child, rx, reader)
}

pub(crate) fn last_run_id(f: &Fleet) -> i64 {
    f.count("SELECT COALESCE(MAX(id), 0) FROM runs")
}

#[test]
fn one_host_acts_a_followers_trigger_reaches_it_and_the_next_leader_carries_on() {
    let Pair {
        mut db,
        vast,
        _demand,
        a,
        b,
    } = pair();

    // A leads (epoch 1) and the rules launch for dead workers.
    let out = a.cmd(&["run"]).ok();
    assert!(out.stdout.contains("run 1"), "{}", out.stdout);
    let first = labels_created(&vast);
    assert!(!first.is_empty(), "A launched nothing: {}", out.stderr);
    assert_eq!(ha(&a)["role"], "leader");
    assert_eq!(ha(&a)["epoch"], 1);
    assert_eq!(metric(&a, "fleetagent_ha_leader"), Some(1.0));
    assert_eq!(metric(&a, "fleetagent_ha_epoch"), Some(1.0));
    assert!(metric(&a, "fleetagent_ha_lease_seconds_left").unwrap() > 0.0);
    // Its ledger is in the shared database.
    let shared_launches = db.query_i64(
        "SELECT COUNT(*) FROM fleetagent.rows WHERE tbl = 'actions' AND data LIKE '%\"kind\":\"launch\"%'",
    );
    assert_eq!(shared_launches as usize, first.len());

    // B is a follower: exit 0, a line naming A, no vast.ai call, no pass.
    let before = vast.requests().len();
    let out = b.cmd(&["run"]).ok();
    assert!(
        out.stdout.contains("follower: host-a leads (epoch 1"),
        "{}",
        out.stdout
    );
    assert_eq!(vast.requests().len(), before, "a follower called vast.ai");
    assert_eq!(last_run_id(&b), 0, "a follower ran a pass");
    assert_eq!(ha(&b)["role"], "follower");
    assert_eq!(ha(&b)["holder"], "host-a");
    assert_eq!(metric(&b, "fleetagent_ha_leader"), Some(0.0));
    assert_eq!(doctor_ha(&b)["ok"], true, "{}", doctor_ha(&b));
    // B's list says whose the fleet is: it never led, so A's instances carry another id than
    // B's own copy (they read as another install's).
    let listed = b.cmd(&["instances", "list"]).ok();
    assert!(
        listed
            .stdout
            .starts_with("this host (host-b) follows (host-a leads)")
            && listed.stdout.contains("the shared fleet is install"),
        "{}",
        listed.stdout
    );
    // A leader whose passes stop succeeding keeps the lease (its poll renews it): the
    // follower's doctor says so once the last success is older than three timer periods.
    let shared_state = "UPDATE fleetagent.rows SET data = (data::jsonb || '{\"last_success_at\": 1000}'::jsonb)::text WHERE tbl = 'agent_state'";
    let saved = db.query_i64(
        "SELECT (data::jsonb->>'last_success_at')::bigint FROM fleetagent.rows WHERE tbl = 'agent_state'",
    );
    db.exec(shared_state);
    let check = doctor_ha(&b);
    assert_eq!(check["ok"], false, "{check}");
    assert!(
        check["detail"]
            .as_str()
            .unwrap()
            .contains("host-a leads (epoch 1), and its last successful pass was"),
        "{check}"
    );
    // No success at all (null), the lease held for an hour: the same, counted from the lease.
    db.exec(&shared_state.replace("1000", "null"));
    db.exec("UPDATE fleetagent.lease SET acquired_at = now() - interval '1 hour'");
    let check = doctor_ha(&b);
    assert!(
        check["detail"]
            .as_str()
            .unwrap()
            .contains("host-a leads (epoch 1), and no pass has succeeded since it took the lease"),
        "{check}"
    );
    db.exec("UPDATE fleetagent.lease SET acquired_at = now()");
    db.exec(&shared_state.replace("1000", &saved.to_string()));
    // Its passes succeed, but without vast.ai's listing for an hour (recorded ok, so its last
    // success moves): the same, named.
    let blind = "UPDATE fleetagent.rows SET data = (data::jsonb || '{\"vast_error\": \"vast.ai unreachable: timeout\", \"vast_error_at\": 1000}'::jsonb)::text WHERE tbl = 'agent_state'";
    db.exec(blind);
    let check = doctor_ha(&b);
    assert!(
        check["detail"]
            .as_str()
            .unwrap()
            .contains("host-a leads (epoch 1), and its vast.ai listing has failed for")
            && check["detail"]
                .as_str()
                .unwrap()
                .contains("vast.ai unreachable: timeout"),
        "{check}"
    );
    db.exec("UPDATE fleetagent.rows SET data = (data::jsonb || '{\"vast_error\": null, \"vast_error_at\": null}'::jsonb)::text WHERE tbl = 'agent_state'");
    assert_eq!(doctor_ha(&b)["ok"], true, "{}", doctor_ha(&b));

    // A trigger on B: B's outbox, forwarded by B's next run, rung by A's poll, claimed by A.
    let out = b
        .cmd(&["trigger", "-p", "1", "-r", "raised on host b"])
        .ok();
    // Named as what it is: a row of B's outbox (it read "event 1", an id B's events lack).
    assert!(
        out.stdout.starts_with(
            "outbox row 1 (P1) recorded (the next run or poll here forwards it to the leading host)"
        ),
        "{}",
        out.stdout
    );
    assert_eq!(
        b.count("SELECT COUNT(*) FROM outbox WHERE forwarded_at IS NULL"),
        1
    );
    b.cmd(&["run"]).ok();
    assert_eq!(db.query_i64("SELECT COUNT(*) FROM fleetagent.inbox"), 1);
    a.cmd(&["poll"]).ok();
    assert!(a.doorbell().exists(), "A's poll did not ring for the inbox");
    a.cmd(&["run"]).ok();
    let claimed = a.count(
        "SELECT COUNT(*) FROM events WHERE reason = 'raised on host b' AND claimed_by IS NOT NULL",
    );
    assert_eq!(claimed, 1, "A did not claim B's event exactly once");
    assert_eq!(db.query_i64("SELECT COUNT(*) FROM fleetagent.inbox"), 0);
    let a_last = last_run_id(&a);

    // A dies (runs no more). When its lease lapses, B leads at epoch 2 with A's state: run
    // ids go on, A's instances are B's to keep (no second create for their labels).
    wait_for_expiry(&mut db);
    let out = b.cmd(&["run"]).ok();
    assert_eq!(ha(&b)["role"], "leader", "{}", out.stderr);
    assert_eq!(ha(&b)["epoch"], 2);
    let b_first = b.count("SELECT MIN(id) FROM runs WHERE id > 0 AND session_id = (SELECT session_id FROM agent_state)");
    assert!(
        b_first > a_last,
        "B's run {b_first} does not follow A's {a_last}"
    );
    assert_eq!(
        b.count("SELECT COUNT(*) FROM events WHERE reason = 'raised on host b'"),
        1,
        "B's copy lacks the event A claimed"
    );
    let labels = labels_created(&vast);
    let unique: BTreeSet<&String> = labels.iter().collect();
    assert_eq!(
        unique.len(),
        labels.len(),
        "a label was created twice: {labels:?}"
    );
    let session_reason: String = b
        .db()
        .query_row(
            "SELECT reason FROM sessions WHERE id = (SELECT session_id FROM agent_state)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(
        session_reason.contains("leadership moved from host-a (epoch 1) to host-b (epoch 2)"),
        "{session_reason}"
    );

    // A comes back: a follower now.
    let out = a.cmd(&["run"]).ok();
    assert!(
        out.stdout.contains("follower: host-b leads (epoch 2"),
        "{}",
        out.stdout
    );
    // `ha status --json` on both: the same holder, both hosts seen.
    let status = a.cmd(&["ha", "status", "--json"]).ok().json();
    assert_eq!(status["holder"], "host-b");
    assert_eq!(status["hosts"].as_array().unwrap().len(), 2);
    // A follower may not change shared state; the leader may.
    let out = a.cmd(&["pause", "--reason", "maintenance"]).code(1);
    assert!(
        out.stderr.contains("host-b leads (epoch 2)"),
        "{}",
        out.stderr
    );
    // A host whose caps differ: doctor says so on every host.
    let cfg = std::fs::read_to_string(&a.config).unwrap();
    a.write_config(&cfg.replace("max_instances = 20", "max_instances = 19"));
    a.cmd(&["run"]).ok();
    let check = doctor_ha(&b);
    assert_eq!(check["ok"], false, "{check}");
    let detail = check["detail"].to_string();
    assert!(
        detail.contains(") in policy.max_instances: a failover"),
        "{check}"
    );
    // A host not heard from for a day is retired: its config no longer counts.
    db.exec("UPDATE fleetagent.hosts SET last_seen = now() - interval '2 days' WHERE host_id = 'host-a'");
    let check = doctor_ha(&b);
    assert!(
        !check["detail"]
            .as_str()
            .unwrap_or("")
            .contains("configs differ"),
        "{check}"
    );
}

/// A leader stopped (SIGSTOP) after it recorded a launch intent, past its lease: another
/// host takes over; resumed, it sends nothing and writes nothing shared, and exits at its
/// first fenced step.
#[test]
fn a_stalled_leader_is_fenced_out_when_it_resumes() {
    let Pair {
        mut db,
        vast,
        _demand,
        a,
        b,
    } = pair();

    let mut cmd: Command = a.command(&["run"]);
    cmd.env("FLEETAGENT_TEST_PAUSE_AT", "launch-after-intent:1500");
    let child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    // Stop it in its pause, once its intent is recorded.
    let deadline = Instant::now() + Duration::from_secs(30);
    while a.state.join("fleetagent.db").exists()
        && a.count("SELECT COUNT(*) FROM actions WHERE outcome = 'intent'") == 0
    {
        assert!(Instant::now() < deadline, "A never recorded an intent");
        thread::sleep(Duration::from_millis(50));
    }
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
    let seq_before: i64 = db.query_i64("SELECT seq FROM fleetagent.sync");
    wait_for_expiry(&mut db);
    let out = b.cmd(&["run"]).ok();
    assert_eq!(ha(&b)["epoch"], 2, "{}", out.stderr);
    let creates_after_takeover = vast.count(Route::Create);
    let seq_takeover: i64 = db.query_i64("SELECT seq FROM fleetagent.sync");
    assert!(seq_takeover > seq_before);

    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).unwrap();
    let out = Run::from(child.wait_with_output().unwrap());
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(
        // The keeper (renewing), its watch (the last renewal too old) or the first fenced
        // step, whichever runs first.
        out.stderr.contains("is no longer this host's")
            || out.stderr.contains("has under ha.fence_margin_secs"),
        "{}",
        out.stderr
    );
    assert_eq!(
        vast.count(Route::Create),
        creates_after_takeover,
        "the fenced-out leader sent a create"
    );
    assert_eq!(
        db.query_i64(&format!(
            "SELECT COUNT(*) FROM fleetagent.rows WHERE epoch = 1 AND seq > {seq_before}"
        )),
        0,
        "a row of the old epoch committed after the takeover"
    );
}

fn set_ha(f: &Fleet, enabled: bool) {
    let cfg = std::fs::read_to_string(&f.config).unwrap();
    let (from, to) = if enabled {
        ("enabled = false", "enabled = true")
    } else {
        ("enabled = true", "enabled = false")
    };
    f.write_config(&cfg.replace(from, to));
}

/// The wrong order: a fresh host leads first (the shared state is its new install's), then a
/// single-host install with a fleet is enabled. Leading would replace its copy and give its
/// instances away (never counted nor stopped); it refuses, releases the lease, keeps its state.
#[test]
fn a_single_host_install_enabled_after_a_fresh_host_led_keeps_its_state() {
    let Pair {
        mut db,
        vast,
        _demand,
        a,
        b,
    } = pair();
    set_ha(&a, false);
    a.cmd(&["run"]).ok();
    let runs_before = a.count("SELECT COUNT(*) FROM runs");
    assert!(
        !labels_created(&vast).is_empty(),
        "the single host launched nothing"
    );
    // B, fresh, leads first, then hands over.
    b.cmd(&["run"]).ok();
    b.cmd(&["ha", "release"]).ok();
    set_ha(&a, true);
    let out = a.cmd(&["run"]).code(1);
    assert!(
        out.stderr
            .contains("and was never part of the shared state, which is install")
            && out
                .stderr
                .contains("nothing was changed and the lease is released"),
        "{}",
        out.stderr
    );
    assert_eq!(a.count("SELECT COUNT(*) FROM runs"), runs_before);
    assert_eq!(
        db.query_i64(
            "SELECT COUNT(*) FROM fleetagent.lease WHERE holder = 'host-a' AND expires_at > now()"
        ),
        0,
        "A kept the lease"
    );
    let check = doctor_ha(&a);
    assert_eq!(check["ok"], false, "{check}");
    assert!(
        check["detail"]
            .as_str()
            .is_some_and(|d| d.contains("every run here refuses to lead")),
        "{check}"
    );
    let listed = a.cmd(&["instances", "list"]).ok();
    assert!(
        listed
            .stdout
            .starts_with("this host (host-a) does not lead: this host's database is install"),
        "{}",
        listed.stdout
    );
}

/// A single-host install with a fleet, a waiting event and a pending wake switches to HA: its
/// first lead moves all of it to the shared database. `ha release` hands over (the releasing
/// host holds off), the next leader carries the same state on, and switching it back to one
/// host goes on from its copy.
#[test]
fn a_single_host_install_moves_to_the_shared_database_and_a_release_hands_over() {
    let Pair {
        mut db,
        vast,
        _demand,
        a,
        b,
    } = pair();
    set_ha(&a, false);
    a.cmd(&["run"]).ok();
    let launched = labels_created(&vast);
    assert!(!launched.is_empty(), "the single host launched nothing");
    a.cmd(&["trigger", "-p", "2", "-r", "waiting on one host"])
        .ok();
    a.cmd(&["wakes", "add", "--in", "1h", "--reason", "look again"])
        .ok();
    assert_eq!(
        db.query_i64(
            "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = 'fleetagent'"
        ),
        0,
        "a single host touched the shared database"
    );

    set_ha(&a, true);
    a.cmd(&["poll"]).ok();
    for (table, what) in [
        ("events", "waiting on one host"),
        ("wakes", "look again"),
        ("actions", &launched[0]),
        ("instances", &launched[0]),
    ] {
        let n = db.query_i64(&format!(
            "SELECT COUNT(*) FROM fleetagent.rows WHERE tbl = '{table}' AND data LIKE '%{what}%'"
        ));
        assert_eq!(n, 1, "{table} '{what}' did not move to the shared database");
    }

    // A planned handover: A releases, A's own poll leaves it, B's takes it.
    a.cmd(&["ha", "release"]).ok();
    let out = a.cmd(&["run"]).ok();
    assert!(
        out.stdout.contains("released the lease (epoch 1)"),
        "{}",
        out.stdout
    );
    b.cmd(&["poll"]).ok();
    assert_eq!(ha(&b)["role"], "leader");
    assert_eq!(ha(&b)["epoch"], 2);
    b.cmd(&["run"]).ok();
    assert_eq!(
        b.count("SELECT COUNT(*) FROM events WHERE reason = 'waiting on one host' AND claimed_by IS NOT NULL"),
        1
    );
    assert_eq!(
        b.count("SELECT COUNT(*) FROM wakes WHERE status = 'pending'"),
        1
    );
    assert_eq!(
        labels_created(&vast),
        launched,
        "the new leader launched again"
    );

    // And back to one host: B goes on from its copy.
    let before = last_run_id(&b);
    set_ha(&b, false);
    b.cmd(&["trigger", "-p", "1", "-r", "one host again"]).ok();
    b.cmd(&["run"]).ok();
    assert!(last_run_id(&b) > before);
    assert_eq!(
        b.count("SELECT COUNT(*) FROM outbox"),
        0,
        "HA off still used the outbox"
    );
    assert_eq!(b.inspect()["ha"], Value::Null);
}

/// Two hosts under one `ha.host_id` (a copied config, or the default from a machine-id that
/// cloned machines share) would both take the lease as theirs and both launch: the
/// walkthrough saw two creates for one shortfall. The second place is named and neither acts;
/// doctor says so; a twin's own first pass launches nothing.
#[test]
fn two_hosts_under_one_host_id_are_named_and_neither_acts() {
    let p = pair();
    p.a.cmd(&["run"]).ok();
    let made = labels_created(&p.vast).len();
    assert!(made > 0, "the leader answers WORKERS DEAD");
    let twin = host("host-a", &p.db, &p.vast, p._demand.path());
    let out = twin.cmd(&["run"]).code(1);
    assert!(
        out.stderr
            .contains("host id host-a is also used by another host")
            && out.stderr.contains(&p.a.path().display().to_string()),
        "{}",
        out.stderr
    );
    let out = p.a.cmd(&["run"]).code(1);
    assert!(
        out.stderr
            .contains("host id host-a is also used by another host"),
        "{}",
        out.stderr
    );
    // Running again, either one, does not get through (the walkthrough's double launch).
    twin.cmd(&["run"]).code(1);
    p.a.cmd(&["run"]).code(1);
    twin.cmd(&["run"]).code(1);
    assert_eq!(
        labels_created(&p.vast).len(),
        made,
        "no create after the twin came"
    );
    for host in [&twin, &p.a] {
        let check = doctor_ha(host);
        assert_eq!(check["ok"], false, "doctor on both twins: {check}");
    }
    let check = doctor_ha(&twin);
    assert!(
        check["detail"]
            .as_str()
            .is_some_and(|d| d.contains("is also used by another host")),
        "{check}"
    );
    let shown = p.a.cmd(&["ha", "status"]).ok().stdout;
    assert!(shown.contains(", at "), "{shown}");
    assert!(shown.contains("  also at "), "{shown}");
}

/// A follower's textfile holds its role and the file's time, no figure of the fleet, the
/// runs or the demand (its copy is stale: the walkthrough saw every follower fire the
/// leader's alerts and a dashboard count the fleet twice). The HA alerts over a leader's and
/// a follower's real files: none while the leader's file is fresh, FleetagentHaNoLeader once
/// it has not been rewritten for 3 timer periods, and nothing ever for the follower.
#[test]
fn a_followers_textfile_holds_its_role_only_and_the_ha_alerts_fit() {
    use super::alerts::{
        firing_of, input_series, metric_name, promtool, repo, require_promtool, samples,
    };
    require_promtool();
    let p = pair();
    p.a.cmd(&["run"]).ok();
    // Under systemd (stdout and stderr both the journal) the follower's line comes once.
    let b_run = super::journal::in_journal(&p.b, &["run"]);
    assert_eq!(b_run.code, 0, "{}", b_run.stderr);
    assert!(
        b_run.stdout.contains("follower: host-a leads"),
        "{}",
        b_run.stdout
    );
    assert!(!b_run.stderr.contains("follower:"), "{}", b_run.stderr);
    let read = |f: &Fleet| std::fs::read_to_string(f.path().join("fleetagent.prom")).unwrap();
    let (text_a, text_b) = (read(&p.a), read(&p.b));
    assert_eq!(metric(&p.a, "fleetagent_ha_leader"), Some(1.0));
    assert!(text_a.contains("\nfleetagent_last_success_timestamp_seconds "));
    assert_eq!(metric(&p.b, "fleetagent_ha_leader"), Some(0.0));
    assert_eq!(metric(&p.b, "fleetagent_ha_database_ok"), Some(1.0));
    let names_b: BTreeSet<String> = samples(&text_b)
        .iter()
        .map(|(s, _)| metric_name(s).to_string())
        .collect();
    let expected: BTreeSet<String> = [
        "fleetagent_install_info",
        "fleetagent_timer_period_seconds",
        "fleetagent_metrics_timestamp_seconds",
        "fleetagent_ha_leader",
        "fleetagent_ha_database_ok",
        "fleetagent_ha_epoch",
        "fleetagent_ha_lease_seconds_left",
    ]
    .map(String::from)
    .into();
    assert_eq!(names_b, expected, "{text_b}");
    // doctor on the follower: the passes' checks are the leader's, and it is green (the
    // walkthrough saw "no successful run yet" on every follower).
    let out = p.b.cmd(&["doctor", "--json"]);
    let doctor: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(out.code, 0, "{doctor}");
    let last = doctor["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "last_success")
        .unwrap();
    assert_eq!(last["ok"], true, "{last}");
    assert!(
        last["detail"]
            .as_str()
            .is_some_and(|d| d.contains("host-a leads (epoch 1)")),
        "{last}"
    );

    // Every HA family the rules and the dashboard name is in these files.
    let rules = repo("docs/monitoring/fleetagent.rules.yml");
    let named: String = std::fs::read_to_string(&rules).unwrap()
        + &std::fs::read_to_string(repo("docs/monitoring/grafana-dashboard.json")).unwrap();
    let have: BTreeSet<String> = samples(&text_a)
        .iter()
        .chain(samples(&text_b).iter())
        .map(|(s, _)| metric_name(s).to_string())
        .collect();
    for word in named.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
        if word.starts_with("fleetagent_ha_") {
            assert!(have.contains(word), "{word} is in no real textfile");
        }
    }

    let dir = tempfile::tempdir().unwrap();
    let test = format!(
        "rule_files:\n  - {rules}\nevaluation_interval: 5m\ntests:\n\
         \x20 - interval: 1m\n    input_series:\n{a}{b}    promql_expr_test:\n{b12}{b40}{h12}{h40}",
        rules = rules.display(),
        a = input_series(&text_a, "a", 40),
        b = input_series(&text_b, "b", 40),
        b12 = firing_of(12, ",instance=\"b\"", &[]),
        b40 = firing_of(40, ",instance=\"b\"", &[]),
        h12 = firing_of(12, ",alertname=~\"FleetagentHa.*\"", &[]),
        h40 = firing_of(
            40,
            ",alertname=~\"FleetagentHa.*\"",
            &[("FleetagentHaNoLeader", "")]
        ),
    );
    let file = dir.path().join("ha_test.yml");
    std::fs::write(&file, test).unwrap();
    promtool(&["test", "rules", file.to_str().unwrap()]);

    // A leader that releases the lease, or finds at its poll that it no longer leads, writes
    // a follower's file at once: its leader's file stayed until its next run (two leaders on
    // a dashboard, for good once its units were stopped).
    p.a.cmd(&["ha", "release"]).ok();
    assert_eq!(metric(&p.a, "fleetagent_ha_leader"), Some(0.0));
    assert!(!read(&p.a).contains("fleetagent_last_success_timestamp_seconds"));
    p.b.cmd(&["poll"]).ok();
    p.b.cmd(&["run"]).ok();
    assert_eq!(metric(&p.b, "fleetagent_ha_leader"), Some(1.0));
    std::fs::write(p.a.path().join("fleetagent.prom"), &text_a).unwrap();
    p.a.cmd(&["poll"]).ok();
    assert_eq!(metric(&p.a, "fleetagent_ha_leader"), Some(0.0));
}

/// A database role that can read the shared tables but not write them (the walkthrough's
/// `GRANT SELECT`): `ha status` and doctor name the writes it lacks, where before they passed
/// while every run failed.
#[test]
fn a_role_that_cannot_write_the_shared_tables_is_named() {
    let mut p = pair();
    p.a.cmd(&["run"]).ok(); // the schema, created by the owner
    let role = format!("ro_{}", p.db.name);
    p.db.exec(&format!(
        "CREATE ROLE {role} LOGIN PASSWORD 'pw';
         GRANT USAGE ON SCHEMA fleetagent TO {role};
         GRANT SELECT ON ALL TABLES IN SCHEMA fleetagent TO {role};"
    ));
    let url = format!(
        "postgresql://{role}:pw@127.0.0.1:{}/{}?sslmode=disable",
        p.db.port, p.db.name
    );
    let reader = host("host-r", &p.db, &p.vast, p._demand.path()).env("FLEETAGENT_HA_DB_URL", &url);
    let out = reader.cmd(&["ha", "status"]).code(1);
    assert!(
        out.stderr.contains("cannot write the shared tables")
            && out.stderr.contains("fleetagent.hosts INSERT"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("pw@"), "{}", out.stderr);
    let check = doctor_ha(&reader);
    assert_eq!(check["ok"], false, "{check}");
    assert!(
        check["detail"]
            .as_str()
            .is_some_and(|d| d.contains("cannot write the shared tables")),
        "{check}"
    );
    p.db.exec(&format!("DROP OWNED BY {role}; DROP ROLE {role};"));
}

/// A leader blind to vast.ai (here its key is refused; a firewall or a lost route do the
/// same) goes on passing without the listing, and no other host acts while it leads. Once its
/// listing has failed for 3 timer periods while it led, and a follower listed vast.ai since,
/// the leader's poll hands the lease over, and the next host to poll leads and acts. Not while
/// no other host reached vast.ai since: vast.ai down for every host keeps the lease where it
/// is (the re-test saw it go round three hosts, each releasing at its first poll: the failures
/// its copy of the shared state carried counted as its own, and a listing from before the
/// outage counted as a host that could act).
#[test]
fn a_leader_blind_to_vast_ai_hands_the_lease_to_a_host_that_reaches_it() {
    let Pair {
        mut db,
        vast,
        _demand,
        a,
        b,
    } = pair();
    // Timer periods of 10 s: 3 of them blind is 30 s.
    for f in [&a, &b] {
        let c = std::fs::read_to_string(&f.config).unwrap();
        f.write_config(&c.replace(
            "deadline_secs = 60",
            "deadline_secs = 60\ntimer_period_secs = 10",
        ));
    }
    let a = a.env("VAST_API_KEY", "refused-on-this-host");
    let blind_since = |f: &Fleet, secs: i64| {
        f.db()
            .execute(
                "UPDATE agent_state SET vast_error_at = CAST(strftime('%s','now') AS INTEGER) * 1000 - ?1",
                [secs * 1000],
            )
            .unwrap();
    };
    let led_since = |db: &mut TestDb, secs: i64| {
        db.exec(&format!(
            "UPDATE fleetagent.lease SET acquired_at = now() - interval '{secs} seconds'"
        ));
    };
    let hands_over = |out: &Run| out.stderr.contains("hands the lease over");
    a.cmd(&["poll"]).code(1);
    assert_eq!(ha(&a)["role"], "leader");
    // Blind for an hour by its record, but it has led for seconds: not yet.
    blind_since(&a, 3600);
    assert!(!hands_over(&a.cmd(&["poll"]).code(1)));
    // Led for an hour too, but nobody else reached vast.ai: the lease stays.
    led_since(&mut db, 3600);
    let out = a.cmd(&["poll"]).code(1);
    assert!(!hands_over(&out), "{}", out.stderr);
    assert_eq!(ha(&a)["role"], "leader", "no other host can act");
    // B follows, reads that the leader's listing fails, and lists: it works.
    b.cmd(&["poll"]).ok();
    assert_eq!(
        db.query_i64(
            "SELECT COUNT(*) FROM fleetagent.hosts WHERE host_id = 'host-b' AND vast_ok_at IS NOT NULL"
        ),
        1
    );
    assert!(labels_created(&vast).is_empty(), "a follower acted");
    let out = a.cmd(&["poll"]).code(1);
    assert!(
        out.stderr.contains("ha: this host (host-a) hands the lease over (epoch 1): its vast.ai listing has failed for 1h")
            && out.stderr.contains("while host-b listed vast.ai"),
        "{}",
        out.stderr
    );
    b.cmd(&["poll"]).ok();
    assert_eq!(ha(&b)["role"], "leader");
    assert_eq!(ha(&b)["epoch"], 2);
    b.cmd(&["trigger", "-p", "1", "-r", "workers dead"]).ok();
    b.cmd(&["run"]).ok();
    assert!(!labels_created(&vast).is_empty(), "the new leader acted");
    // A follows now, its key still refused: it lists vast.ai once a timer period (it made
    // no call as a follower: green until it led), and every host's doctor names it.
    vast.clear_requests();
    a.cmd(&["poll"]).ok();
    a.cmd(&["poll"]).ok();
    assert_eq!(vast.count(Route::ListV1), 1, "once a timer period");
    for (f, who) in [(&a, "host-a (this host)"), (&b, "host-a")] {
        let out = f.cmd(&["doctor"]).code(1).stdout;
        assert!(out.contains(&format!("ha: {who} cannot list")), "{out}");
    }
    // Now vast.ai refuses every host: B is blind too, and A cannot list either.
    vast.set_api_key(Some("a-key-nobody-has"));
    b.cmd(&["poll"]).code(1);
    a.cmd(&["poll"]).ok();
    blind_since(&b, 40);
    let a_listed = |db: &mut TestDb, secs: i64| {
        db.exec(&format!(
            "UPDATE fleetagent.hosts SET vast_ok_at = now() - interval '{secs} seconds' WHERE host_id = 'host-a'"
        ));
    };
    // B has led for seconds: its blindness counts from its lease, not its record's 40 s.
    a_listed(&mut db, 20);
    assert!(!hands_over(&b.cmd(&["poll"]).code(1)));
    led_since(&mut db, 3600);
    // A listing of A's from before B went blind (100 s ago) says nothing of now.
    a_listed(&mut db, 100);
    let out = b.cmd(&["poll"]).code(1);
    assert!(!hands_over(&out), "{}", out.stderr);
    assert_eq!(
        ha(&b)["role"],
        "leader",
        "the lease stays when nobody reaches vast.ai"
    );
    // One since (20 s ago) does.
    a_listed(&mut db, 20);
    assert!(hands_over(&b.cmd(&["poll"]).code(1)));
}
