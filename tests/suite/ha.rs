//! The leader lease of issue 24 (src/ha, docs/ha.md) against the real PostgreSQL of
//! tests/common/pg.rs, a fresh database per test: take, join, renew, expire and take over;
//! release; the fence against a takeover (before and during a fenced write); three hosts
//! racing, under READ COMMITTED and REPEATABLE READ; three hosts creating the schema at
//! once; an injected 40001 retried. Time is scaled down: a lease that must lapse is renewed
//! for 300 ms and left to expire; every other lease lasts a minute.

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use fleetagent::clock::SystemClock;
use fleetagent::ha::{hosts, lease, schema, Fenced, Retry, Role, SharedDb};

use crate::common::pg::{self, TestDb};

const LONG: Duration = Duration::from_secs(60);
const SHORT: Duration = Duration::from_millis(300);
const MARGIN: Duration = Duration::from_secs(10);

/// Many quick tries: three threads on one row conflict often under REPEATABLE READ.
const FAST: Retry = Retry {
    attempts: 40,
    first_backoff: Duration::from_millis(1),
    max_backoff: Duration::from_millis(20),
};

fn connect(db: &TestDb) -> SharedDb {
    SharedDb::connect(&db.url(), Duration::from_secs(20), Arc::new(SystemClock))
        .unwrap()
        .with_retry(FAST)
}

fn shared(db: &TestDb) -> SharedDb {
    let mut s = connect(db);
    schema::migrate(&mut s).unwrap();
    s
}

/// Renews `host`'s lease for 300 ms and waits until it has lapsed (database time).
fn let_lapse(db: &mut SharedDb, host: &str, epoch: i64) {
    assert!(lease::renew(db, host, epoch, SHORT).unwrap().is_some());
    thread::sleep(SHORT + Duration::from_millis(100));
}

fn leader_epoch(role: Role) -> i64 {
    match role {
        Role::Leader { epoch, lease_left } => {
            assert!(
                lease_left <= LONG && !lease_left.is_zero(),
                "{lease_left:?}"
            );
            epoch
        }
        other => panic!("expected to lead, got {other:?}"),
    }
}

fn follower_of(role: Role) -> (String, i64) {
    match role {
        Role::Follower {
            holder,
            epoch,
            lease_left,
        } => {
            assert!(!lease_left.is_zero());
            (holder, epoch)
        }
        other => panic!("expected to follow, got {other:?}"),
    }
}

fn probe_table(db: &mut TestDb) {
    db.exec("CREATE TABLE public.ha_probe (host text NOT NULL, epoch bigint NOT NULL)");
}

fn insert_probe(s: &mut SharedDb, host: &str, epoch: i64) -> anyhow::Result<Fenced<u64>> {
    lease::fenced(s, host, epoch, MARGIN, "writing the probe", |tx| {
        tx.execute(
            "INSERT INTO public.ha_probe (host, epoch) VALUES ($1, $2)",
            &[&host, &epoch],
        )
    })
}

fn repeatable_read(db: &mut TestDb) {
    db.exec(&format!(
        "ALTER DATABASE {} SET default_transaction_isolation = 'repeatable read'",
        db.name
    ));
    let level: String = db
        .connect()
        .query_one("SHOW default_transaction_isolation", &[])
        .unwrap()
        .get(0);
    assert_eq!(level, "repeatable read");
}

#[test]
fn ha_lease_is_taken_joined_renewed_and_taken_over_after_expiry() {
    let db = pg::fresh_db();
    let (mut a, mut b) = (shared(&db), shared(&db));

    assert_eq!(
        leader_epoch(lease::acquire_or_join(&mut a, "host-a", LONG).unwrap()),
        1
    );
    let (holder, epoch) = follower_of(lease::acquire_or_join(&mut b, "host-b", LONG).unwrap());
    assert_eq!((holder.as_str(), epoch), ("host-a", 1));
    // Renewing, by either operation, keeps the epoch.
    assert!(lease::renew(&mut a, "host-a", 1, LONG).unwrap().is_some());
    assert_eq!(
        leader_epoch(lease::acquire_or_join(&mut a, "host-a", LONG).unwrap()),
        1
    );
    // Only the holder at its epoch renews.
    assert_eq!(lease::renew(&mut b, "host-b", 1, LONG).unwrap(), None);
    assert_eq!(lease::renew(&mut a, "host-a", 2, LONG).unwrap(), None);
    // The fence wants the margin left: 10 s of a minute passes, two minutes do not.
    let mut conn = db.connect();
    let mut tx = conn.transaction().unwrap();
    assert!(lease::fence(&mut tx, "host-a", 1, MARGIN).unwrap());
    assert!(!lease::fence(&mut tx, "host-a", 1, 2 * LONG).unwrap());
    assert!(!lease::fence(&mut tx, "host-b", 1, MARGIN).unwrap());
    tx.rollback().unwrap();

    let_lapse(&mut a, "host-a", 1);
    assert_eq!(
        leader_epoch(lease::acquire_or_join(&mut b, "host-b", LONG).unwrap()),
        2
    );
    assert_eq!(lease::renew(&mut a, "host-a", 1, LONG).unwrap(), None);
    let mut tx = conn.transaction().unwrap();
    assert!(!lease::fence(&mut tx, "host-a", 1, Duration::ZERO).unwrap());
    assert!(lease::fence(&mut tx, "host-b", 2, MARGIN).unwrap());
    tx.rollback().unwrap();
    let (holder, epoch) = follower_of(lease::acquire_or_join(&mut a, "host-a", LONG).unwrap());
    assert_eq!((holder.as_str(), epoch), ("host-b", 2));
}

#[test]
fn ha_release_hands_over_with_the_epoch_raised() {
    let db = pg::fresh_db();
    let (mut a, mut b) = (shared(&db), shared(&db));
    assert_eq!(
        leader_epoch(lease::acquire_or_join(&mut a, "host-a", LONG).unwrap()),
        1
    );
    assert!(
        !lease::release(&mut b, "host-b", 1).unwrap(),
        "not b's to release"
    );
    assert!(
        !lease::release(&mut a, "host-a", 2).unwrap(),
        "not a's epoch"
    );
    assert!(lease::release(&mut a, "host-a", 1).unwrap());
    assert!(
        !lease::release(&mut a, "host-a", 1).unwrap(),
        "already released"
    );
    assert_eq!(
        leader_epoch(lease::acquire_or_join(&mut b, "host-b", LONG).unwrap()),
        2
    );
    assert_eq!(lease::renew(&mut a, "host-a", 1, LONG).unwrap(), None);
    // The releasing host leaves it to another for one lease period: a handover hands over.
    assert!(lease::release(&mut b, "host-b", 2).unwrap());
    match lease::acquire_or_join(&mut b, "host-b", LONG).unwrap() {
        Role::Released { epoch, hold_left } => {
            assert_eq!(epoch, 2);
            assert!(hold_left <= LONG && hold_left > LONG / 2, "{hold_left:?}");
        }
        other => panic!("the releasing host took its lease back: {other:?}"),
    }
    assert_eq!(
        leader_epoch(lease::acquire_or_join(&mut a, "host-a", LONG).unwrap()),
        3
    );
    // Past the hold-off it may lead again (a new epoch): a lease released 300 ms long.
    assert!(lease::renew(&mut a, "host-a", 3, SHORT).unwrap().is_some());
    assert!(lease::release(&mut a, "host-a", 3).unwrap());
    thread::sleep(SHORT + Duration::from_millis(100));
    assert_eq!(
        leader_epoch(
            lease::acquire_or_join(&mut a, "host-a", SHORT).unwrap_or_else(|e| panic!("{e}"))
        ),
        4
    );
}

fn write_fenced_with_the_old_epoch_after_a_takeover(repeatable: bool) {
    let mut db = pg::fresh_db();
    if repeatable {
        repeatable_read(&mut db);
    }
    probe_table(&mut db);
    let (mut a, mut b) = (shared(&db), shared(&db));
    assert_eq!(
        leader_epoch(lease::acquire_or_join(&mut a, "host-a", LONG).unwrap()),
        1
    );
    assert_eq!(
        insert_probe(&mut a, "host-a", 1).unwrap(),
        Fenced::Committed(1)
    );
    let_lapse(&mut a, "host-a", 1);
    assert_eq!(
        leader_epoch(lease::acquire_or_join(&mut b, "host-b", LONG).unwrap()),
        2
    );

    assert_eq!(insert_probe(&mut a, "host-a", 1).unwrap(), Fenced::Lost);
    assert_eq!(
        insert_probe(&mut b, "host-b", 2).unwrap(),
        Fenced::Committed(1)
    );
    // A's write of epoch 1 after the takeover is absent; its earlier one and b's are there.
    assert_eq!(
        db.query_i64("SELECT count(*) FROM public.ha_probe WHERE host = 'host-a'"),
        1
    );
    assert_eq!(
        db.query_i64("SELECT count(*) FROM public.ha_probe WHERE host = 'host-b'"),
        1
    );
}

#[test]
fn ha_write_fenced_with_the_old_epoch_after_a_takeover_does_not_commit() {
    write_fenced_with_the_old_epoch_after_a_takeover(false);
}

#[test]
fn ha_write_fenced_with_the_old_epoch_after_a_takeover_does_not_commit_repeatable_read() {
    write_fenced_with_the_old_epoch_after_a_takeover(true);
}

/// A fenced write still open when its lease lapses: the takeover waits on the fence's row
/// lock, so the write commits before the new epoch exists, and the new leader sees it.
#[test]
fn ha_takeover_waits_for_a_fenced_write_in_flight() {
    let mut db = pg::fresh_db();
    probe_table(&mut db);
    let (mut a, b) = (shared(&db), shared(&db));
    assert_eq!(
        leader_epoch(lease::acquire_or_join(&mut a, "host-a", LONG).unwrap()),
        1
    );
    assert!(lease::renew(&mut a, "host-a", 1, SHORT).unwrap().is_some());

    let (go, wait_for_go) = mpsc::channel::<()>();
    let taker = thread::spawn(move || {
        let mut b = b;
        wait_for_go.recv().unwrap();
        let role = lease::acquire_or_join(&mut b, "host-b", LONG).unwrap();
        let seen: i64 = {
            let rows = lease::fenced(&mut b, "host-b", 2, MARGIN, "reading", |tx| {
                tx.query_one("SELECT count(*) FROM public.ha_probe", &[])
                    .map(|r| r.get::<_, i64>(0))
            })
            .unwrap();
            match rows {
                Fenced::Committed(n) => n,
                Fenced::Lost => panic!("b lost a lease it just took"),
            }
        };
        (role, seen)
    });
    let mut watcher = db.connect();
    let written = lease::fenced(&mut a, "host-a", 1, Duration::ZERO, "writing", |tx| {
        let n = tx.execute(
            "INSERT INTO public.ha_probe (host, epoch) VALUES ('host-a', 1)",
            &[],
        )?;
        // The lease lapses while this transaction holds the fence.
        thread::sleep(SHORT + Duration::from_millis(100));
        go.send(()).unwrap();
        // Until b's takeover is seen waiting on a lock.
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let waiting: i64 = watcher
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity
                     WHERE datname = current_database() AND wait_event_type = 'Lock'",
                    &[],
                )?
                .get(0);
            if waiting > 0 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "b's takeover never waited on a's fence"
            );
            thread::sleep(Duration::from_millis(10));
        }
        Ok(n)
    })
    .unwrap();
    assert_eq!(written, Fenced::Committed(1));
    let (role, seen) = taker.join().unwrap();
    assert_eq!(leader_epoch(role), 2);
    assert_eq!(seen, 1, "the new leader sees the write of the old epoch");
    assert_eq!(insert_probe(&mut a, "host-a", 1).unwrap(), Fenced::Lost);
}

/// A leader stalled inside its fenced transaction (stopped, or cut off mid-write, while it
/// holds the fence's share lock) does not block the takeover for ever: the server ends its
/// session after the connection's bound (2 s here), nothing of that transaction commits, and
/// another host takes the lapsed lease. (The walkthrough saw every takeover time out until
/// the stalled leader was resumed.)
#[test]
fn ha_a_leader_stalled_inside_a_fenced_write_is_cut_off_and_replaced() {
    let mut db = pg::fresh_db();
    probe_table(&mut db);
    let mut b = shared(&db);
    let a = SharedDb::connect(&db.url(), Duration::from_secs(2), Arc::new(SystemClock))
        .unwrap()
        .with_retry(FAST);
    let mut a = a;
    assert_eq!(
        leader_epoch(lease::acquire_or_join(&mut a, "host-a", LONG).unwrap()),
        1
    );
    assert!(lease::renew(&mut a, "host-a", 1, SHORT).unwrap().is_some());
    let (pid_tx, pid_rx) = mpsc::channel::<i32>();
    let stalled = thread::spawn(move || {
        lease::fenced(&mut a, "host-a", 1, Duration::ZERO, "writing", |tx| {
            tx.execute(
                "INSERT INTO public.ha_probe (host, epoch) VALUES ('host-a', 1)",
                &[],
            )?;
            let pid: i32 = tx.query_one("SELECT pg_backend_pid()", &[])?.get(0);
            pid_tx.send(pid).unwrap();
            // The stall: idle inside the transaction, the fence's lock held.
            thread::sleep(Duration::from_secs(6));
            tx.execute("SELECT 1", &[])
        })
    });
    let pid = pid_rx.recv().unwrap();
    let mut watcher = db.connect();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let alive: i64 = watcher
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = $1",
                &[&pid],
            )
            .unwrap()
            .get(0);
        if alive == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the stalled leader's session still holds its transaction"
        );
        thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        leader_epoch(lease::acquire_or_join(&mut b, "host-b", LONG).unwrap()),
        2
    );
    let written = stalled.join().unwrap();
    assert!(written.is_err(), "{written:?}");
    assert_eq!(
        db.query_i64("SELECT count(*) FROM public.ha_probe"),
        0,
        "nothing of the stalled transaction committed"
    );
}

/// What one racing host saw.
#[derive(Default)]
struct Seen {
    led: Vec<i64>,
    /// Every epoch seen, leading or following, in order.
    epochs: Vec<i64>,
    followed: Vec<(i64, String)>,
    problems: Vec<String>,
}

fn race_one(mut s: SharedDb, host: String, start: Arc<Barrier>) -> Seen {
    let mut seen = Seen::default();
    start.wait();
    for _ in 0..50 {
        match lease::acquire_or_join(&mut s, &host, LONG).unwrap() {
            Role::Leader { epoch, .. } => {
                seen.led.push(epoch);
                seen.epochs.push(epoch);
                // Take the baton; never from an epoch as new as ours or newer.
                let took = lease::fenced(&mut s, &host, epoch, MARGIN, "baton", |tx| {
                    tx.execute(
                        "UPDATE public.ha_baton SET holder = $1, epoch = $2
                         WHERE id = 1 AND epoch < $2",
                        &[&host, &epoch],
                    )
                })
                .unwrap();
                if took != Fenced::Committed(1) {
                    seen.problems
                        .push(format!("{host} at epoch {epoch} took the baton: {took:?}"));
                }
                // Nobody else acted since.
                let still = lease::fenced(&mut s, &host, epoch, MARGIN, "baton", |tx| {
                    let row = tx.query_one(
                        "SELECT holder, epoch FROM public.ha_baton WHERE id = 1",
                        &[],
                    )?;
                    Ok((row.get::<_, String>(0), row.get::<_, i64>(1)))
                })
                .unwrap();
                if still != Fenced::Committed((host.clone(), epoch)) {
                    seen.problems.push(format!(
                        "{host} at epoch {epoch} found the baton: {still:?}"
                    ));
                }
                if !lease::release(&mut s, &host, epoch).unwrap() {
                    seen.problems
                        .push(format!("{host} could not release epoch {epoch}"));
                }
            }
            Role::Released { epoch, .. } => seen.epochs.push(epoch),
            Role::Follower { holder, epoch, .. } => {
                if holder == host {
                    seen.problems
                        .push(format!("{host} follows itself at epoch {epoch}"));
                }
                seen.epochs.push(epoch);
                seen.followed.push((epoch, holder));
            }
        }
    }
    seen
}

fn three_hosts_race(repeatable: bool) {
    let mut db = pg::fresh_db();
    if repeatable {
        repeatable_read(&mut db);
    }
    db.exec(
        "CREATE TABLE public.ha_baton (id int PRIMARY KEY, holder text NOT NULL, epoch bigint NOT NULL);
         INSERT INTO public.ha_baton VALUES (1, '', 0);",
    );
    let start = Arc::new(Barrier::new(3));
    let racers: Vec<_> = ["host-a", "host-b", "host-c"]
        .into_iter()
        .map(|host| {
            let s = shared(&db);
            let start = start.clone();
            thread::spawn(move || race_one(s, host.to_string(), start))
        })
        .collect();
    let mut leader_of: BTreeMap<i64, String> = BTreeMap::new();
    let mut problems = Vec::new();
    let mut followed = Vec::new();
    for (racer, host) in racers.into_iter().zip(["host-a", "host-b", "host-c"]) {
        let seen = racer.join().unwrap();
        problems.extend(seen.problems);
        if !seen.led.windows(2).all(|w| w[0] < w[1]) {
            problems.push(format!("{host} led at epochs not rising: {:?}", seen.led));
        }
        if !seen.epochs.windows(2).all(|w| w[0] <= w[1]) {
            problems.push(format!("{host} saw epochs go back: {:?}", seen.epochs));
        }
        for epoch in seen.led {
            if let Some(other) = leader_of.insert(epoch, host.to_string()) {
                problems.push(format!("epoch {epoch} led by {other} and {host}"));
            }
        }
        followed.extend(seen.followed);
    }
    for (epoch, holder) in followed {
        if leader_of.get(&epoch) != Some(&holder) {
            problems.push(format!(
                "a follower saw {holder} at epoch {epoch}, led by {:?}",
                leader_of.get(&epoch)
            ));
        }
    }
    let epochs: Vec<i64> = leader_of.keys().copied().collect();
    let last = *epochs.last().expect("somebody led");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // One leader per epoch, and no epoch skipped: every raise was one host's acquisition.
    assert_eq!(epochs, (1..=last).collect::<Vec<_>>());
    // The first leader released epoch 1, so its next try saw a later epoch.
    assert!(last >= 2, "the lead never moved: {last}");
    assert_eq!(
        db.query_i64("SELECT epoch FROM public.ha_baton WHERE id = 1"),
        last
    );
}

#[test]
fn ha_three_hosts_racing_have_one_leader_per_epoch() {
    three_hosts_race(false);
}

#[test]
fn ha_three_hosts_racing_have_one_leader_per_epoch_repeatable_read() {
    three_hosts_race(true);
}

fn three_hosts_create_the_schema_at_once(repeatable: bool) {
    let mut db = pg::fresh_db();
    if repeatable {
        repeatable_read(&mut db);
    }
    for round in 0..5 {
        let start = Arc::new(Barrier::new(3));
        let migrators: Vec<_> = (0..3)
            .map(|_| {
                let mut s = connect(&db);
                let start = start.clone();
                thread::spawn(move || {
                    start.wait();
                    schema::migrate(&mut s)
                })
            })
            .collect();
        for m in migrators {
            if let Err(e) = m.join().unwrap() {
                panic!("round {round}: {e}");
            }
        }
        assert_eq!(
            db.query_i64("SELECT count(*) FROM pg_namespace WHERE nspname = 'fleetagent'"),
            1
        );
        assert_eq!(
            db.query_i64(
                "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'fleetagent'"
            ),
            5,
            "every table once (lease, hosts, sync, rows, inbox)"
        );
        // And once more on what is there: a no-op.
        schema::migrate(&mut connect(&db)).unwrap();
        db.exec("DROP SCHEMA fleetagent CASCADE");
    }
}

#[test]
fn ha_three_hosts_create_the_schema_at_once() {
    three_hosts_create_the_schema_at_once(false);
}

#[test]
fn ha_three_hosts_create_the_schema_at_once_repeatable_read() {
    three_hosts_create_the_schema_at_once(true);
}

/// A trigger that fails the first `n` statements on `table` with SQLSTATE 40001, counting
/// them in a sequence (a sequence is not rolled back with the failed statement).
fn fail_first(db: &mut TestDb, table: &str, name: &str, n: u32) {
    db.exec(&format!(
        "CREATE SEQUENCE public.{name};
         CREATE TRIGGER {name} BEFORE INSERT OR UPDATE ON {table}
         FOR EACH STATEMENT EXECUTE FUNCTION public.ha_fail_first('public.{name}', '{n}');"
    ));
}

#[test]
fn ha_injected_serialization_failures_are_retried_up_to_the_bound() {
    let mut db = pg::fresh_db();
    probe_table(&mut db);
    let mut a = shared(&db);
    db.exec(
        "CREATE FUNCTION public.ha_fail_first() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           IF nextval(TG_ARGV[0]::regclass) <= TG_ARGV[1]::bigint THEN
             RAISE EXCEPTION 'injected conflict' USING ERRCODE = 'serialization_failure';
           END IF;
           RETURN NULL;
         END $$",
    );
    fail_first(&mut db, "fleetagent.lease", "lease_faults", 2);
    assert_eq!(
        leader_epoch(lease::acquire_or_join(&mut a, "host-a", LONG).unwrap()),
        1
    );
    assert!(db.query_i64("SELECT last_value FROM public.lease_faults") > 2);

    // A fenced write failing twice is run again whole, and commits once.
    fail_first(&mut db, "public.ha_probe", "probe_faults", 2);
    assert_eq!(
        insert_probe(&mut a, "host-a", 1).unwrap(),
        Fenced::Committed(1)
    );
    assert!(db.query_i64("SELECT last_value FROM public.probe_faults") > 2);
    assert_eq!(db.query_i64("SELECT count(*) FROM public.ha_probe"), 1);

    // Past the bound: one line naming what failed, without the password.
    db.exec("DROP TRIGGER lease_faults ON fleetagent.lease; DROP SEQUENCE public.lease_faults;");
    fail_first(&mut db, "fleetagent.lease", "lease_faults", 1000);
    let mut few = connect(&db).with_retry(Retry {
        attempts: 3,
        ..FAST
    });
    let err = lease::renew(&mut few, "host-a", 1, LONG)
        .unwrap_err()
        .to_string();
    assert!(!err.contains(pg::PASSWORD) && !err.contains('\n'), "{err}");
    assert!(err.starts_with("ha database postgresql://"), "{err}");
    assert!(
        err.contains("renewing the lease") && err.contains("SQLSTATE 40001"),
        "{err}"
    );
    assert!(err.contains("after 3 tries"), "{err}");
    assert_eq!(
        db.query_i64("SELECT last_value FROM public.lease_faults"),
        3
    );
}

#[test]
fn ha_hosts_are_recorded_with_version_and_config_hash() {
    let db = pg::fresh_db();
    let mut a = shared(&db);
    let here = "box-a:/var/lib/fleetagent";
    assert_eq!(
        hosts::record(
            &mut a,
            "host-b",
            "0.1.0",
            ("cafe", "{}"),
            "box-b:/var/lib/fleetagent",
            None
        )
        .unwrap(),
        None
    );
    // Its clock two hours behind: kept against the database's, for doctor.
    let slow = || chrono::Utc::now().timestamp_millis() - 7_200_000;
    hosts::record(
        &mut a,
        "host-b",
        "0.1.0",
        ("cafe", "{}"),
        "box-b:/var/lib/fleetagent",
        Some(&slow),
    )
    .unwrap();
    let b = hosts::list(&mut a).unwrap();
    let ahead = b[0].clock_ahead_ms.expect("measured");
    assert!((-7_210_000..-7_190_000).contains(&ahead), "{ahead}");
    assert_eq!(
        hosts::record(&mut a, "host-a", "0.1.0", ("beef", "{}"), here, None).unwrap(),
        None
    );
    assert_eq!(
        hosts::record(&mut a, "host-a", "0.2.0", ("f00d", "{}"), here, None).unwrap(),
        None,
        "the same place again is the same host"
    );
    // A second place under host-a's id (a copied config, a cloned machine-id): named, and
    // the row now names it, so host-a's next record finds its twin too.
    let twin = hosts::record(
        &mut a,
        "host-a",
        "0.2.0",
        ("f00d", "{}"),
        "box-d:/srv/fa",
        None,
    )
    .unwrap();
    assert_eq!(
        twin.as_ref().map(|t| t.place.as_str()),
        Some(here),
        "{twin:?}"
    );
    assert!(twin.is_some_and(|t| t.secs_ago < 60.0));
    let back = hosts::record(&mut a, "host-a", "0.2.0", ("f00d", "{}"), here, None).unwrap();
    assert_eq!(back.map(|t| t.place), Some("box-d:/srv/fa".to_string()));
    // The twin's next record finds the first place still: neither is let through by running
    // twice in a row (the walkthrough's double launch).
    let again = hosts::record(
        &mut a,
        "host-a",
        "0.2.0",
        ("f00d", "{}"),
        "box-d:/srv/fa",
        None,
    )
    .unwrap();
    assert_eq!(again.map(|t| t.place), Some(here.to_string()));
    let seen = hosts::list(&mut a).unwrap();
    assert_eq!(seen[0].place.as_deref(), Some(here));
    let held = seen[0].place.as_deref().map(|p| (p, seen[0].seen_secs_ago));
    assert!(hosts::other_places(held, seen[0].twin.as_ref(), here)
        .iter()
        .any(|(p, _)| p == "box-d:/srv/fa"));
    // The twin stops: once its last run is older than the window, the first acts again.
    let mut db = db;
    db.exec("UPDATE fleetagent.hosts SET twin_seen = now() - interval '20 minutes'");
    assert_eq!(
        hosts::record(&mut a, "host-a", "0.2.0", ("f00d", "{}"), here, None).unwrap(),
        None
    );
    // The first stops instead (a moved state dir): the second takes the id past the window.
    let late = hosts::record(
        &mut a,
        "host-a",
        "0.2.0",
        ("f00d", "{}"),
        "box-d:/srv/fa",
        None,
    )
    .unwrap();
    assert!(late.is_some(), "the first place ran just now");
    db.exec("UPDATE fleetagent.hosts SET last_seen = now() - interval '20 minutes'");
    assert_eq!(
        hosts::record(
            &mut a,
            "host-a",
            "0.2.0",
            ("f00d", "{}"),
            "box-d:/srv/fa",
            None
        )
        .unwrap(),
        None
    );
    let seen = hosts::list(&mut a).unwrap();
    assert_eq!(seen[0].place.as_deref(), Some("box-d:/srv/fa"));
    let short: Vec<(&str, &str, &str)> = seen
        .iter()
        .map(|h| {
            (
                h.host_id.as_str(),
                h.version.as_str(),
                h.config_hash.as_str(),
            )
        })
        .collect();
    assert_eq!(
        short,
        [("host-a", "0.2.0", "f00d"), ("host-b", "0.1.0", "cafe")]
    );
    assert!(seen.iter().all(|h| h.seen_secs_ago >= 0.0));
}

/// `scripts/ha-check`'s checks, against the suite's PostgreSQL: they pass, refuse a database in
/// use, and leave no schema behind.
#[test]
fn ha_check_passes_on_a_scratch_database_and_refuses_one_in_use() {
    let mut db = pg::fresh_db();
    let mut lines = Vec::new();
    fleetagent::ha::check::run(&db.url(), &mut |l| lines.push(l)).unwrap();
    assert_eq!(lines.len(), 6, "{lines:?}");
    assert!(lines
        .iter()
        .any(|l| l.contains("REPEATABLE READ: three hosts raced")));
    assert_eq!(
        db.query_i64("SELECT count(*) FROM pg_namespace WHERE nspname = 'fleetagent'"),
        0
    );
    let mut s = shared(&db);
    leader_epoch(lease::acquire_or_join(&mut s, "prod", LONG).unwrap());
    let err = fleetagent::ha::check::run(&db.url(), &mut |_| {})
        .unwrap_err()
        .to_string();
    assert!(err.contains("in use"), "{err}");
    assert!(!err.contains(pg::PASSWORD), "{err}");
}

/// A shared schema an older build made (without the hosts' place columns) is brought up to
/// date by the next host's first command: the one-query check sees the missing columns
/// (the walkthrough saw every command fail "column place does not exist" after an upgrade).
#[test]
fn ha_a_schema_from_an_older_build_gains_the_new_columns() {
    let mut db = pg::fresh_db();
    let mut a = shared(&db);
    db.exec(
        "ALTER TABLE fleetagent.hosts DROP COLUMN place, DROP COLUMN twin_place,
                                      DROP COLUMN twin_seen, DROP COLUMN clock_ahead_ms",
    );
    schema::migrate(&mut a).unwrap();
    let now = || chrono::Utc::now().timestamp_millis();
    assert_eq!(
        hosts::record(
            &mut a,
            "host-a",
            "0.2.0",
            ("f00d", "{}"),
            "box-a:/var/lib/fleetagent",
            Some(&now)
        )
        .unwrap(),
        None
    );
    assert_eq!(
        db.query_i64(
            "SELECT count(*) FROM information_schema.columns
             WHERE table_schema = 'fleetagent' AND table_name = 'hosts'
               AND column_name IN ('place', 'twin_place', 'twin_seen', 'clock_ahead_ms')"
        ),
        4
    );
}

/// A fenced push whose commit went through while its answer was held on the way back (a hop
/// that terminates TCP lost it for a while): the database said the lease was ours, but the
/// answer came later than `ha.fence_margin_secs` less one vast.ai request after it was
/// asked, so it vouches for nothing: the push fails as a lost lease does, and the caller
/// sends nothing. (The HA walkthrough over network namespaces saw a create sent 9 s after
/// another host took the lease, on such an answer.)
#[test]
fn ha_a_fence_answered_too_late_vouches_for_nothing() {
    use crate::common::proxy::{Mode, Proxy};
    use fleetagent::ha::mirror::{self, Held};

    let mut db = pg::fresh_db();
    let proxy = Proxy::start(db.port);
    let via = db.url().replace(
        &format!("127.0.0.1:{}/", db.port),
        &format!("127.0.0.1:{}/", proxy.port),
    );
    let mut a = SharedDb::connect(&via, Duration::from_secs(20), Arc::new(SystemClock))
        .unwrap()
        .with_retry(FAST);
    schema::migrate(&mut a).unwrap();
    assert_eq!(
        leader_epoch(lease::acquire_or_join(&mut a, "host-a", LONG).unwrap()),
        1
    );
    // The sync row a leader's first start writes (`mirror::sync_in`).
    db.exec(
        "INSERT INTO fleetagent.sync (name, seq, epoch, holder) VALUES ('fleet', 0, 1, 'host-a')",
    );
    let store = fleetagent::store::Store::open_memory(0).unwrap();
    mirror::capture(&store.conn, true).unwrap();
    let held = Held {
        host: "host-a".into(),
        epoch: 1,
        margin: Duration::from_secs(2),
        act: Duration::from_secs(1),
    };
    let insert = |reason: &str| {
        store
            .conn
            .execute(
                "INSERT INTO events (priority, kind, reason, created_at) VALUES (1, 'trigger', ?1, 0)",
                [reason],
            )
            .unwrap();
    };
    // Answered at once: it vouches.
    insert("first");
    mirror::push(&store.conn, &mut a, &held, "a prompt step").unwrap();
    // Committed, answered 2.5 s later.
    insert("second");
    proxy.set(Mode::HoldAfterCommit);
    let release = thread::spawn({
        let proxy_mode = proxy.handle();
        move || {
            thread::sleep(Duration::from_millis(2_500));
            proxy_mode.set(Mode::Pass);
        }
    });
    let late = mirror::push(&store.conn, &mut a, &held, "launch intent");
    release.join().unwrap();
    let e = fleetagent::error::one_line(&late.expect_err("a late answer vouched for the lease"));
    assert!(
        e.starts_with("launch intent: the lease of this host (host-a) at epoch 1 was confirmed by an answer asked 2s ago"),
        "{e}"
    );
}
