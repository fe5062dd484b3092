//! Seeded interleavings on three hosts (`scripts/race --ha` runs 200; the suite runs 2): each
//! round a few triggers and runs on random hosts, then the leader's run is interrupted at a
//! random fault point by kill -9 (SIGKILL), a stop (SIGSTOP past its lease, then SIGCONT) or a
//! partition from the database (its proxy blackholes, then heals), and another random host
//! takes over. Checked after every round: the shared pushes' epochs never go back (every
//! epoch's fenced writes lie in one interval, the intervals disjoint and in epoch order), run
//! ids increase with their start, no label is created twice, and at the end every trigger is
//! one event claimed by a finished pass.

use std::time::Duration;

use super::agent_e2e::{dead_fleet, write_demand};
use super::ha_hosts::{host, labels_created, spawn_watching};
use crate::common::fake_vast::FakeVast;
use crate::common::fleet::Fleet;
use crate::common::pg::{self, TestDb};
use crate::common::proxy::{Mode, Proxy};
use crate::common::rng::Rng;

const DEFAULT_SEED: u64 = 2412;
const DEFAULT_ROUNDS: u64 = 2;
const POINTS: &[&str] = &[
    "run-after-claim",
    "run-after-observe",
    "launch-after-intent",
    "launch-after-create",
    "run-before-finish",
    "ha-before-push",
    "ha-after-push",
];

fn env(name: &str) -> Option<u64> {
    std::env::var(name).ok()?.parse().ok()
}

struct Cluster {
    db: TestDb,
    vast: FakeVast,
    _demand: tempfile::TempDir,
    hosts: Vec<Fleet>,
    proxies: Vec<Proxy>,
}

fn cluster() -> Cluster {
    let mut db = pg::fresh_db();
    let vast = FakeVast::start_real_time();
    vast.add_offers(30, "RTX 4090", 0.40, 0.99);
    let demand = tempfile::tempdir().unwrap();
    write_demand(demand.path(), dead_fleet());
    let mut hosts = Vec::new();
    let mut proxies = Vec::new();
    for name in ["host-a", "host-b", "host-c"] {
        let proxy = Proxy::start(db.port);
        let url = db.url().replace(
            &format!("127.0.0.1:{}/", db.port),
            &format!("127.0.0.1:{}/", proxy.port),
        );
        hosts.push(host(name, &db, &vast, demand.path()).env("FLEETAGENT_HA_DB_URL", &url));
        proxies.push(proxy);
    }
    // Every push recorded with its epoch and the database's time: the fenced intervals.
    hosts[0].cmd(&["ha", "status"]).ok();
    db.exec(
        "CREATE TABLE fleetagent.audit (seq bigint, epoch bigint, holder text, at timestamptz);
         CREATE FUNCTION fleetagent.audit() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           INSERT INTO fleetagent.audit VALUES (NEW.seq, NEW.epoch, NEW.holder, clock_timestamp());
           RETURN NEW;
         END $$;
         CREATE TRIGGER audit AFTER INSERT OR UPDATE ON fleetagent.sync
         FOR EACH ROW EXECUTE FUNCTION fleetagent.audit();",
    );
    Cluster {
        db,
        vast,
        _demand: demand,
        hosts,
        proxies,
    }
}

fn leader(db: &mut TestDb) -> Option<usize> {
    let l = db.query_i64(
        "SELECT COALESCE((SELECT CASE holder WHEN 'host-a' THEN 0 WHEN 'host-b' THEN 1 ELSE 2 END
         FROM fleetagent.lease WHERE expires_at > now()), -1)::bigint",
    );
    usize::try_from(l).ok()
}

/// The leader's run, interrupted at `point` by `how`; another host `next` takes over.
fn interrupt(c: &mut Cluster, l: usize, next: usize, point: &str, how: u64) -> String {
    let mut cmd = c.hosts[l].command(&["run"]);
    cmd.env("FLEETAGENT_TEST_PAUSE_AT", format!("{point}:1500"));
    let (mut child, rx, reader) = spawn_watching(cmd);
    if rx.recv_timeout(Duration::from_secs(30)).is_err() {
        let _ = child.wait();
        let _ = reader.join();
        return format!("{point} not reached");
    }
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let what = match how {
        0 => {
            nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).unwrap();
            "kill -9"
        }
        1 => {
            nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
            "stop"
        }
        _ => {
            c.proxies[l].set(Mode::Blackhole);
            "partition"
        }
    };
    // Its lease lapses (time passing, moved to now), and `next` takes over with a pass.
    c.db.exec("UPDATE fleetagent.lease SET expires_at = now()");
    c.hosts[next].cmd(&["poll"]).ok();
    c.hosts[next].cmd(&["run"]);
    match how {
        1 => nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).unwrap(),
        2 => c.proxies[l].set(Mode::Pass),
        _ => {}
    }
    let _ = child.wait();
    let _ = reader.join();
    format!("{what} at {point}")
}

/// The invariants, after a round.
fn check(c: &mut Cluster, what: &str) {
    let backwards = c.db.query_i64(
        "SELECT COUNT(*) FROM (SELECT epoch, lag(epoch) OVER (ORDER BY seq) AS before
         FROM fleetagent.audit) x WHERE epoch < before",
    );
    assert_eq!(
        backwards, 0,
        "{what}: a push of an older epoch after a newer one"
    );
    let overlapping = c.db.query_i64(
        "SELECT COUNT(*) FROM (SELECT epoch, min(at) AS a, max(at) AS b FROM fleetagent.audit
         GROUP BY epoch) x JOIN (SELECT epoch, min(at) AS a, max(at) AS b FROM fleetagent.audit
         GROUP BY epoch) y ON x.epoch < y.epoch AND x.b > y.a",
    );
    assert_eq!(
        overlapping, 0,
        "{what}: two epochs' fenced intervals overlap"
    );
    let labels = labels_created(&c.vast);
    let mut unique = labels.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), labels.len(), "{what}: a label created twice");
    if let Some(l) = leader(&mut c.db) {
        let disorder = c.hosts[l].count(
            "SELECT COUNT(*) FROM runs a JOIN runs b ON a.id < b.id AND a.started_at > b.started_at + 1000",
        );
        assert_eq!(disorder, 0, "{what}: run ids do not follow their start");
    }
}

#[test]
fn random_three_host_interleavings_keep_epochs_apart_and_lose_nothing() {
    let seed = env("FLEETAGENT_HA_RACE_SEED").unwrap_or(DEFAULT_SEED);
    let rounds = env("FLEETAGENT_HA_RACE_ROUNDS").unwrap_or(DEFAULT_ROUNDS);
    let t0 = std::time::Instant::now();
    let mut c = cluster();
    println!("cluster {:?}", t0.elapsed());
    let mut rng = Rng(seed);
    let mut sent = 0;
    c.hosts[0].cmd(&["poll"]).ok();
    for round in 0..rounds {
        for _ in 0..3 {
            let h = rng.index(3);
            c.hosts[h]
                .cmd(&["trigger", "-p", "1", "-r", &format!("race-{sent}")])
                .ok();
            sent += 1;
            let h = rng.index(3);
            c.hosts[h].cmd(&["run"]);
        }
        let l = match leader(&mut c.db) {
            Some(l) => l,
            None => {
                c.hosts[0].cmd(&["poll"]).ok();
                0
            }
        };
        let next = (l + 1 + rng.index(2)) % 3;
        let point = POINTS[rng.index(POINTS.len())];
        let what = interrupt(&mut c, l, next, point, rng.below(3));
        println!(
            "interleaving {seed}+{round}: {what}, host {l} -> host {next} ({:?})",
            t0.elapsed()
        );
        check(&mut c, &format!("seed {seed} round {round} ({what})"));
    }
    // Drain: everyone forwards, the leader passes until nothing waits.
    for _ in 0..3 {
        for h in &c.hosts {
            h.cmd(&["run"]);
        }
        let l = leader(&mut c.db).unwrap_or(0);
        c.hosts[l].cmd(&["poll"]);
        c.hosts[l].cmd(&["run"]);
    }
    println!("drained {:?}", t0.elapsed());
    let l = leader(&mut c.db).expect("no leader at the end");
    let f = &c.hosts[l];
    let events = f.count("SELECT COUNT(*) FROM events WHERE reason LIKE 'race-%'");
    let distinct = f.count("SELECT COUNT(DISTINCT reason) FROM events WHERE reason LIKE 'race-%'");
    let done = f.count(
        "SELECT COUNT(*) FROM events e LEFT JOIN runs r ON r.id = e.claimed_by
         WHERE e.reason LIKE 'race-%' AND (r.status = 'ok' OR e.failed_at IS NOT NULL)",
    );
    assert_eq!(
        (events, distinct, done),
        (sent, sent, sent),
        "seed {seed}: triggers lost, doubled or unfinished"
    );
    check(&mut c, &format!("seed {seed}, the end"));
    println!(
        "race --ha: seed {seed}, {rounds} rounds, {sent} triggers: epochs apart, nothing lost"
    );
}
