//! The leader killed (kill -9: an abort) or stopped (SIGSTOP past its lease) at every fault
//! point a rules pass reaches (`faults::POINTS` and `faults::HA_POINTS`), with the host staying
//! down: the other host leads, no label is created twice, the event waiting for the leader is
//! claimed by exactly one finished pass, every intent whose instance vast.ai lists is settled,
//! and a stopped leader, resumed, writes no shared row and sends at most one create.
//!
//! Time is scaled as in ha_hosts.rs (lease 5 s); where a dead host's lease must lapse, the
//! test moves its expiry to the database's `now()` (time passing, without the wait): the
//! takeover's own timing is shown by ha_hosts.rs with a real lapse.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use fleetagent::faults::{HA_POINTS, POINTS};

use super::agent_e2e::{dead_fleet, write_demand};
use super::ha_hosts::{host, labels_created, pair, spawn_watching, Pair};
use crate::common::fake_vast::FakeVast;
use crate::common::fleet::{Fleet, Run};
use crate::common::pg::{self, TestDb};

/// The points a leader's rules pass on dead workers reaches; the rest need another path
/// (`trigger-after-insert`: the trigger command; `fallback-before-rules`: an unusable model;
/// `stop-after-call`, `tool-before-result`, `tool-after-result`: a stop or a model's tools).
const REACHED: &[&str] = &[
    "run-after-lock",
    "run-after-claim",
    "run-after-observe",
    "launch-after-intent",
    "launch-after-create",
    "rules-before-note",
    "run-before-finish",
    "run-end-check",
    "run-after-last-look",
    "ha-before-push",
    "ha-after-push",
];

/// Two hosts (ha_hosts.rs), A leading, B's event waiting in the shared inbox.
type World = Pair;

/// A leads (its poll took the lease), B's event waits in the shared inbox.
fn world() -> World {
    world_with(|_| {})
}

/// [`world`] on a database `setup` prepared before any host reaches it (`init` does not).
fn world_with(setup: impl FnOnce(&mut TestDb)) -> World {
    let mut w = pair();
    setup(&mut w.db);
    w.a.cmd(&["poll"]).ok();
    w.a.cmd(&["wakes", "add", "--in", "1s", "--reason", "wake from a"])
        .ok();
    w.b.cmd(&["trigger", "-p", "1", "-r", "from b"]).ok();
    let out = w.b.cmd(&["run"]).ok();
    assert!(out.stdout.contains("follower: host-a"), "{}", out.stdout);
    w
}

/// A's host stays down: its lease lapses (moved to now, when it has not yet), B's poll takes
/// it, B runs twice.
fn b_takes_over(w: &mut World) {
    w.db.exec(
        "UPDATE fleetagent.lease SET expires_at = now() WHERE holder = 'host-a' AND expires_at > now()",
    );
    w.b.cmd(&["poll"]).ok();
    assert_eq!(
        w.db.query_i64(
            "SELECT epoch FROM fleetagent.lease WHERE holder = 'host-b' AND expires_at > now()"
        ),
        2,
        "B does not lead at epoch 2"
    );
    w.b.cmd(&["run"]).ok();
    w.b.cmd(&["run"]).ok();
}

/// Nothing doubled, nothing lost, nothing left open, in the shared state as B holds it.
fn check(w: &mut World, what: &str) {
    let labels = labels_created(&w.vast);
    let unique: BTreeSet<&String> = labels.iter().collect();
    assert_eq!(
        unique.len(),
        labels.len(),
        "{what}: a label created twice: {labels:?}"
    );
    let claimed_ok = w.b.count(
        "SELECT COUNT(*) FROM events e JOIN runs r ON r.id = e.claimed_by
         WHERE e.reason = 'from b' AND r.status = 'ok'",
    );
    let failed =
        w.b.count("SELECT COUNT(*) FROM events WHERE reason = 'from b' AND failed_at IS NOT NULL");
    let copies =
        w.b.count("SELECT COUNT(*) FROM events WHERE reason = 'from b'");
    assert_eq!(
        (copies, claimed_ok + failed),
        (1, 1),
        "{what}: B's event is not claimed by exactly one finished pass"
    );
    assert_eq!(
        w.db.query_i64("SELECT COUNT(*) FROM fleetagent.inbox"),
        0,
        "{what}: the inbox still holds events"
    );
    let wake = w.b.count(
        "SELECT COUNT(*) FROM wakes w LEFT JOIN runs r ON r.id = w.processed_by
         WHERE w.reason = 'wake from a' AND (r.status = 'ok' OR w.status = 'failed')",
    );
    assert_eq!(
        wake, 1,
        "{what}: A's wake was not served by one finished pass"
    );
    let open: Vec<String> = {
        let conn = w.b.db();
        let mut st = conn
            .prepare("SELECT label FROM actions WHERE kind = 'launch' AND outcome = 'intent'")
            .unwrap();
        st.query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    for label in &open {
        assert!(
            !labels.contains(label),
            "{what}: the intent for {label} is still open though vast.ai lists it"
        );
    }
}

fn run_points(points: Vec<&'static str>, one: fn(&'static str) -> Option<String>) -> Vec<String> {
    let todo = Arc::new(Mutex::new(points));
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let todo = Arc::clone(&todo);
            thread::spawn(move || {
                let mut reached = Vec::new();
                loop {
                    let next = todo.lock().unwrap().pop();
                    let Some(p) = next else { break };
                    if let Some(r) = one(p) {
                        reached.push(r);
                    }
                }
                reached
            })
        })
        .collect();
    workers
        .into_iter()
        .flat_map(|w| w.join().expect("a fault case failed (see its panic above)"))
        .collect()
}

/// The points of `REACHED`, each checked to be a real fault point.
fn all_points() -> Vec<&'static str> {
    for p in REACHED {
        assert!(
            POINTS.contains(p) || HA_POINTS.contains(p),
            "{p} is no fault point"
        );
    }
    REACHED.to_vec()
}

/// One kill: None when the pass never reached the point.
fn kill_at(point: &'static str) -> Option<String> {
    let mut w = world();
    let mut cmd = w.a.command(&["run"]);
    cmd.env("FLEETAGENT_TEST_CRASH_AT", point);
    let out = Run::from(cmd.output().unwrap());
    if out.code == 0 {
        return None;
    }
    assert!(
        out.stderr.contains("test crash injected"),
        "{point}: {}",
        out.stderr
    );
    // The host stays down. The lease it leaves must lapse within its TTL of the kill (B then
    // leads at its next poll: ha_hosts.rs shows a real lapse and takeover); the database says
    // how long it has left, so the test need not wait it out at every point.
    let left = w.db.query_i64(
        "SELECT COALESCE(MAX(EXTRACT(EPOCH FROM expires_at - now()) * 1000), 0)::bigint
         FROM fleetagent.lease WHERE holder = 'host-a'",
    ) as f64
        / 1000.0;
    let ttl = super::ha_hosts::TTL_SECS as f64;
    assert!(
        left <= ttl,
        "kill -9 at {point}: A's lease still had {left:.1} s, past its TTL of {ttl} s"
    );
    b_takes_over(&mut w);
    check(&mut w, &format!("kill -9 at {point}"));
    Some(format!("{point} (lease left {left:.1} s)"))
}

#[test]
fn a_leader_killed_at_every_fault_point_is_replaced_with_nothing_doubled_or_lost() {
    let reached = run_points(all_points(), kill_at);
    for p in REACHED {
        assert!(
            reached.iter().any(|r| r.starts_with(&format!("{p} "))),
            "{p} was never reached: {reached:?}"
        );
    }
    println!(
        "kill -9: {} points reached and recovered: {reached:?}",
        reached.len()
    );
}

/// One stop: None when the pass never reached the point.
fn stop_at(point: &'static str) -> Option<String> {
    let mut w = world();
    let mut cmd = w.a.command(&["run"]);
    cmd.env("FLEETAGENT_TEST_PAUSE_AT", format!("{point}:2500"));
    let (mut child, rx, reader) = spawn_watching(cmd);
    if rx.recv_timeout(Duration::from_secs(30)).is_err() {
        let _ = child.wait();
        return None;
    }
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
    b_takes_over(&mut w);
    let seq = w.db.query_i64("SELECT seq FROM fleetagent.sync");
    let creates = labels_created(&w.vast).len();
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).unwrap();
    let status = child.wait().unwrap();
    let stderr = reader.join().unwrap();
    let what = format!("SIGSTOP at {point}");
    if status.code() == Some(0) {
        // Stopped before it asked for the lease: resumed, it finds B leading.
        assert!(
            stderr.contains("follower: host-b leads"),
            "{what}: {stderr}"
        );
    } else {
        assert!(
            // The keeper, its watch, or the first fenced step, whichever runs first; or,
            // on a loaded machine, a fence whose answer came too late to vouch (Held::stale).
            stderr.contains("is no longer this host's")
                || stderr.contains("has under ha.fence_margin_secs")
                || stderr.contains("another host may lead by now; stopping before anything else is written or sent"),
            "{what}: {stderr}"
        );
    }
    assert_eq!(
        w.db.query_i64(&format!(
            "SELECT COUNT(*) FROM fleetagent.rows WHERE epoch = 1 AND seq > {seq}"
        )),
        0,
        "{what}: a row of the old epoch committed after the takeover"
    );
    let escaped = labels_created(&w.vast).len() - creates;
    assert!(escaped <= 1, "{what}: {escaped} creates escaped");
    // What escaped is adopted by the next pass.
    w.b.cmd(&["run"]).ok();
    check(&mut w, &what);
    Some(point.to_string())
}

#[test]
fn a_leader_stopped_past_its_lease_at_every_fault_point_writes_nothing_when_it_resumes() {
    let reached = run_points(all_points(), stop_at);
    for p in REACHED {
        assert!(
            reached.iter().any(|r| r == p),
            "{p} was never reached: {reached:?}"
        );
    }
    println!(
        "SIGSTOP: {} points reached, fenced out: {reached:?}",
        reached.len()
    );
}

/// Every 20th shared write (the 7th, the 27th, ...) fails with SQLSTATE 40001 (as YugabyteDB
/// reports a conflict): a trigger on each table of the schema, created after the schema. By
/// count, not by chance: with `random() < 0.05` a case now and then drew no injection at all
/// (a suite run in review did, at about 120 writes), and the test failed.
fn inject_40001(db: &mut TestDb) {
    let mut shared = fleetagent::ha::SharedDb::connect(
        &db.url(),
        Duration::from_secs(20),
        Arc::new(fleetagent::clock::SystemClock),
    )
    .unwrap();
    fleetagent::ha::schema::migrate(&mut shared).unwrap();
    // Sequences count the writes and the injections: nextval survives the rollback it causes.
    db.exec("CREATE SEQUENCE fleetagent.writes");
    db.exec("CREATE SEQUENCE fleetagent.conflicts");
    db.exec(
        "CREATE FUNCTION fleetagent.conflict() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           IF nextval('fleetagent.writes') % 20 = 7 THEN
             PERFORM nextval('fleetagent.conflicts');
             RAISE EXCEPTION 'injected conflict' USING ERRCODE = '40001';
           END IF;
           RETURN COALESCE(NEW, OLD);
         END $$;",
    );
    // The test's own statements (moving a lease's expiry) go through: triggers do not fire
    // for this session.
    db.exec("SET session_replication_role = replica");
    for t in ["lease", "hosts", "sync", "rows", "inbox"] {
        db.exec(&format!(
            "CREATE TRIGGER conflict BEFORE INSERT OR UPDATE OR DELETE ON fleetagent.{t}
             FOR EACH ROW EXECUTE FUNCTION fleetagent.conflict()"
        ));
    }
}

fn repeatable_read(db: &mut TestDb) {
    let name = db.name.clone();
    db.exec(&format!(
        "ALTER DATABASE {name} SET default_transaction_isolation TO 'repeatable read'"
    ));
}

/// The whole path (follower forward, leader claim and launches, takeover, the new leader's
/// passes) under REPEATABLE READ, and with injected 40001s under both levels.
#[test]
fn every_shared_statement_holds_under_both_isolation_levels_and_injected_conflicts() {
    type Setup = fn(&mut TestDb);
    let cases: [(&str, Setup); 3] = [
        ("repeatable read", repeatable_read),
        ("read committed, 1 in 20 writes 40001", inject_40001),
        ("repeatable read, 1 in 20 writes 40001", |db| {
            repeatable_read(db);
            inject_40001(db);
        }),
    ];
    let threads: Vec<_> = cases
        .into_iter()
        .map(|(what, setup)| {
            thread::spawn(move || {
                let mut w = world_with(setup);
                let out = w.a.cmd(&["run"]).ok();
                assert!(out.stdout.contains("-> action"), "{what}: {}", out.stdout);
                b_takes_over(&mut w);
                check(&mut w, what);
                if what.contains("40001") {
                    let injected = w.db.query_i64(
                        "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM fleetagent.conflicts",
                    );
                    assert!(injected > 0, "{what}: no conflict was injected");
                    return format!("{what}: ok, {injected} conflicts injected and retried");
                }
                format!("{what}: ok")
            })
        })
        .collect();
    for t in threads {
        println!("{}", t.join().expect("an isolation case failed"));
    }
}

/// Two hosts over one database, A's link to it through a proxy the test can cut, WORKERS DEAD;
/// A leads and its `run` is held at its launch (its intent recorded, no create sent).
struct Cut {
    db: TestDb,
    proxy: crate::common::proxy::Proxy,
    a_vast: FakeVast,
    b_vast: FakeVast,
    _demand: tempfile::TempDir,
    b: Fleet,
    child: std::process::Child,
    reader: thread::JoinHandle<String>,
}

fn a_at_its_launch_behind_a_proxy() -> Cut {
    let db = pg::fresh_db();
    let proxy = crate::common::proxy::Proxy::start(db.port);
    let a_vast = FakeVast::start_real_time();
    a_vast.add_offers(10, "RTX 4090", 0.40, 0.99);
    let b_vast = FakeVast::start_real_time();
    b_vast.add_offers(10, "RTX 4090", 0.40, 0.99);
    let demand = tempfile::tempdir().unwrap();
    write_demand(demand.path(), dead_fleet());
    let through_proxy = db.url().replace(
        &format!("127.0.0.1:{}/", db.port),
        &format!("127.0.0.1:{}/", proxy.port),
    );
    let a = host("host-a", &db, &a_vast, demand.path()).env("FLEETAGENT_HA_DB_URL", &through_proxy);
    let b = host("host-b", &db, &b_vast, demand.path());
    a.cmd(&["poll"]).ok();
    let mut cmd = a.command(&["run"]);
    cmd.env("FLEETAGENT_TEST_PAUSE_AT", "launch-after-intent:1000");
    let (child, rx, reader) = spawn_watching(cmd);
    rx.recv_timeout(Duration::from_secs(30))
        .expect("A never reached its launch");
    Cut {
        db,
        proxy,
        a_vast,
        b_vast,
        _demand: demand,
        b,
        child,
        reader,
    }
}

/// B polls every 200 ms until it leads (at most 20 s from `since`).
fn poll_until_b_leads(b: &Fleet, db: &mut TestDb, since: std::time::Instant) {
    loop {
        b.cmd(&["poll"]).ok();
        let leads = db.query_i64(
            "SELECT COUNT(*) FROM fleetagent.lease WHERE holder = 'host-b' AND expires_at > now()",
        );
        if leads == 1 {
            return;
        }
        assert!(
            since.elapsed() < Duration::from_secs(20),
            "B never took over"
        );
        thread::sleep(Duration::from_millis(200));
    }
}

/// The leader cut from the database (a proxy that blackholes) while it holds a launch intent:
/// it sends no create (its own vast.ai sees none), B leads once the lease lapses, and after
/// the link heals the old leader's held statements find the new epoch: it writes nothing
/// shared and exits 1.
#[test]
fn a_leader_cut_from_the_database_sends_nothing_and_writes_nothing_after_healing() {
    use crate::common::proxy::Mode;
    use std::time::Instant;

    let Cut {
        mut db,
        proxy,
        a_vast,
        b_vast,
        _demand,
        b,
        mut child,
        reader,
    } = a_at_its_launch_behind_a_proxy();
    proxy.set(Mode::Blackhole);
    let cut = Instant::now();
    // The lease lapses within its TTL of A's last renewal.
    poll_until_b_leads(&b, &mut db, cut);
    let took_over = cut.elapsed();
    b.cmd(&["run"]).ok();
    let seq = db.query_i64("SELECT seq FROM fleetagent.sync");
    proxy.set(Mode::Pass);
    let status = child.wait().unwrap();
    let stderr = reader.join().unwrap();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert_eq!(
        a_vast.count(crate::common::fake_vast::Route::Create),
        0,
        "the cut-off leader sent a create: {stderr}"
    );
    assert!(
        !labels_created(&b_vast).is_empty(),
        "B did not launch for the dead workers"
    );
    assert_eq!(
        db.query_i64(&format!(
            "SELECT COUNT(*) FROM fleetagent.rows WHERE epoch = 1 AND seq > {seq}"
        )),
        0,
        "a row of the old epoch committed after healing"
    );
    assert!(
        took_over <= Duration::from_secs(super::ha_hosts::TTL_SECS + 3),
        "B took {took_over:?} to lead"
    );
    println!("cut at the launch: B led {took_over:?} after the cut; A exited 1 with no create");
}

/// End to end: the leader's fence before its create commits at the database, and every answer
/// to it is held on the way back (a hop that terminates TCP lost them for a while) until
/// another host has taken the lease: the old leader sends no create and exits 1. The HA
/// walkthrough over network namespaces saw a create sent 9 s after the takeover on such a
/// late "committed". Which of three things ends it varies with timing (the keeper's renewal
/// finding the lease gone, its watch finding the last renewal too old, or the push refusing
/// an answer older than its margin allows); `ha::ha_a_fence_answered_too_late_vouches_for_nothing`
/// checks the last one alone.
#[test]
fn a_fence_answered_after_a_takeover_sends_nothing() {
    use crate::common::proxy::Mode;
    use std::time::Instant;

    let Cut {
        mut db,
        proxy,
        a_vast,
        b_vast: _b_vast,
        _demand,
        b,
        mut child,
        reader,
    } = a_at_its_launch_behind_a_proxy();
    // Its fence goes up and commits; every answer to A is held from its COMMIT.
    proxy.set(Mode::HoldAfterCommit);
    poll_until_b_leads(&b, &mut db, Instant::now());
    // The answers come, late.
    proxy.set(Mode::Pass);
    let status = child.wait().unwrap();
    let stderr = reader.join().unwrap();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert_eq!(
        a_vast.count(crate::common::fake_vast::Route::Create),
        0,
        "the old leader sent a create on a late answer: {stderr}"
    );
}

/// 1,000 triggers and messages from three hosts while leadership moves 10 times (a planned
/// release, then a random host's poll): every one becomes exactly one event, claimed by one
/// finished pass of whichever host led.
#[test]
fn a_thousand_triggers_over_three_hosts_and_ten_failovers_are_each_claimed_once() {
    use crate::common::rng::Rng;

    let mut db = pg::fresh_db();
    let vast = FakeVast::start_real_time();
    let demand = tempfile::tempdir().unwrap();
    // Nothing to do: passes stay cheap.
    write_demand(
        demand.path(),
        serde_json::json!({"pending": 0, "running": 0, "completed_1h": 0, "completed_15m": 0, "workers": []}),
    );
    let hosts: Arc<Vec<Fleet>> = Arc::new(
        ["host-a", "host-b", "host-c"]
            .iter()
            .map(|h| host(h, &db, &vast, demand.path()))
            .collect(),
    );
    hosts[0].cmd(&["poll"]).ok();
    const PER_HOST: usize = 334;
    let senders: Vec<_> = (0..3)
        .map(|h| {
            let hosts = Arc::clone(&hosts);
            thread::spawn(move || {
                for i in 0..PER_HOST {
                    let reason = format!("t-{h}-{i}");
                    let out = if i % 10 == 0 {
                        hosts[h].cmd(&["message", &reason])
                    } else {
                        hosts[h].cmd(&["trigger", "-p", "2", "-r", &reason])
                    };
                    assert_eq!(out.code, 0, "{reason}: {}", out.stderr);
                }
            })
        })
        .collect();
    let mut rng = Rng(24);
    let mut failovers = 0;
    let leader = |db: &mut TestDb| -> Option<usize> {
        let row = db.query_i64(
            "SELECT COALESCE((SELECT CASE holder WHEN 'host-a' THEN 0 WHEN 'host-b' THEN 1 ELSE 2 END
             FROM fleetagent.lease WHERE expires_at > now()), -1)::bigint",
        );
        usize::try_from(row).ok()
    };
    while senders.iter().any(|s| !s.is_finished()) || failovers < 10 {
        let h = rng.index(3);
        let out = hosts[h].cmd(&["run"]);
        assert_eq!(out.code, 0, "run on host {h}: {}", out.stderr);
        if rng.below(3) == 0 && failovers < 10 {
            if let Some(l) = leader(&mut db) {
                hosts[l].cmd(&["ha", "release"]).ok();
                let next = rng.index(3);
                hosts[next].cmd(&["poll"]).ok();
                failovers += 1;
            }
        }
        if let Some(l) = leader(&mut db) {
            hosts[l].cmd(&["poll"]).ok();
        }
    }
    for s in senders {
        s.join().expect("a sender failed");
    }
    // Drain: every host forwards, the leader takes the inbox until nothing waits.
    for _ in 0..10 {
        for h in hosts.iter() {
            h.cmd(&["run"]).ok();
        }
        let l = leader(&mut db).unwrap_or(0);
        hosts[l].cmd(&["poll"]).ok();
        hosts[l].cmd(&["run"]).ok();
        let waiting = db.query_i64("SELECT COUNT(*) FROM fleetagent.inbox");
        let ready = hosts[l]
            .count("SELECT COUNT(*) FROM events WHERE claimed_by IS NULL AND failed_at IS NULL");
        let unforwarded: i64 = hosts
            .iter()
            .map(|h| h.count("SELECT COUNT(*) FROM outbox WHERE forwarded_at IS NULL"))
            .sum();
        if waiting + ready + unforwarded == 0 {
            break;
        }
    }
    let l = leader(&mut db).expect("no leader at the end");
    let f = &hosts[l];
    // A trigger's reason is its text; a message's text is its body.
    let text = "COALESCE(body, reason)";
    let total = f.count(&format!(
        "SELECT COUNT(*) FROM events WHERE {text} LIKE 't-%'"
    ));
    let distinct = f.count(&format!(
        "SELECT COUNT(DISTINCT {text}) FROM events WHERE {text} LIKE 't-%'"
    ));
    let finished = f.count(&format!(
        "SELECT COUNT(*) FROM events e JOIN runs r ON r.id = e.claimed_by
         WHERE {text} LIKE 't-%' AND r.status = 'ok'"
    ));
    let messages =
        f.count("SELECT COUNT(*) FROM events WHERE kind = 'message' AND body LIKE 't-%'");
    let epochs = db.query_i64("SELECT epoch FROM fleetagent.lease");
    assert_eq!(failovers, 10);
    assert!(epochs >= 11, "only {epochs} epochs for 10 releases");
    assert_eq!(
        (total, distinct),
        (3 * PER_HOST as i64, 3 * PER_HOST as i64),
        "events lost or doubled"
    );
    assert_eq!(finished, total, "events not claimed by a finished pass");
    assert_eq!(messages, 3 * 34);
    println!("{total} triggers and messages over {failovers} failovers (epoch {epochs}): each claimed once by a finished pass");
}
