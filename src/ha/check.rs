//! `scripts/ha-check`: the lease's guarantees checked against an operator's own database
//! (a YugabyteDB cluster before going live), on a scratch database: three hosts creating the
//! schema at once, three hosts racing for the lease (one leader per epoch, epochs without
//! gaps, a fenced "baton" never taken by an older epoch), and a fenced write of an old epoch
//! after a takeover (never committed), under READ COMMITTED and REPEATABLE READ. It refuses a
//! database whose schema `fleetagent` is in use, and drops the schema when done.

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::db::SharedDb;
use super::{lease, schema, Fenced, Retry, Role};
use crate::clock::{Clock, SystemClock};

const LONG: Duration = Duration::from_secs(60);
const SHORT: Duration = Duration::from_millis(500);
const MARGIN: Duration = Duration::from_secs(5);
const ROUNDS: usize = 30;

/// Many quick tries: three hosts on one row conflict often under REPEATABLE READ.
const FAST: Retry = Retry {
    attempts: 40,
    first_backoff: Duration::from_millis(2),
    max_backoff: Duration::from_millis(50),
};

fn connect(url: &str, repeatable: bool) -> Result<SharedDb> {
    let mut db =
        SharedDb::connect(url, Duration::from_secs(20), Arc::new(SystemClock))?.with_retry(FAST);
    if repeatable {
        db.retrying("setting REPEATABLE READ", |c| {
            c.batch_execute(
                "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL REPEATABLE READ",
            )
        })?;
    }
    Ok(db)
}

/// Runs every check; one line per check on `out`. `Err` names the first violation.
pub fn run(url: &str, out: &mut dyn FnMut(String)) -> Result<()> {
    let mut db = connect(url, false)?;
    let in_use: i64 = db.retrying("looking for a schema in use", |c| {
        let exists: bool = c
            .query_one("SELECT to_regclass('fleetagent.lease') IS NOT NULL", &[])?
            .try_get(0)?;
        if !exists {
            return Ok(0);
        }
        c.query_one("SELECT COUNT(*) FROM fleetagent.lease", &[])?
            .try_get(0)
    })?;
    if in_use > 0 {
        bail!(
            "{}: its schema fleetagent holds a lease: it is in use. Give ha-check a scratch \
             database (CREATE DATABASE fleetagent_check) on the same cluster",
            db.shown()
        );
    }
    let result = (|| -> Result<()> {
        for repeatable in [false, true] {
            let level = if repeatable {
                "REPEATABLE READ"
            } else {
                "READ COMMITTED"
            };
            drop_schema(&mut db)?;
            let t = Instant::now();
            migrate_at_once(url, repeatable)?;
            out(format!(
                "{level}: three hosts created the schema at once: one schema, every table ({} ms)",
                t.elapsed().as_millis()
            ));
            let t = Instant::now();
            let leads = race(url, repeatable)?;
            out(format!(
                "{level}: three hosts raced {ROUNDS} times each: {leads} epochs, one leader each, no gap, the baton never taken back ({} ms)",
                t.elapsed().as_millis()
            ));
            let t = Instant::now();
            old_epoch_write(url, repeatable)?;
            out(format!(
                "{level}: a fenced write of the old epoch after a takeover did not commit ({} ms)",
                t.elapsed().as_millis()
            ));
        }
        Ok(())
    })();
    drop_schema(&mut db)?;
    result
}

fn drop_schema(db: &mut SharedDb) -> Result<()> {
    db.retrying("dropping the check's schema", |c| {
        c.batch_execute("DROP SCHEMA IF EXISTS fleetagent CASCADE")
    })
}

fn migrate_at_once(url: &str, repeatable: bool) -> Result<()> {
    let start = Arc::new(Barrier::new(3));
    let hosts: Vec<_> = (0..3)
        .map(|_| {
            let (url, start) = (url.to_string(), Arc::clone(&start));
            std::thread::spawn(move || -> Result<()> {
                let mut db = connect(&url, repeatable)?;
                start.wait();
                schema::migrate(&mut db)
            })
        })
        .collect();
    for h in hosts {
        h.join()
            .map_err(|_| anyhow::anyhow!("a migrating host panicked"))??;
    }
    let mut db = connect(url, repeatable)?;
    let tables: i64 = db.retrying("counting the tables", |c| {
        c.query_one(
            "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = 'fleetagent'",
            &[],
        )?
        .try_get(0)
    })?;
    if tables != 5 {
        bail!("three hosts migrating at once left {tables} tables, not 5");
    }
    Ok(())
}

/// Three hosts: acquire, take the baton with a fenced write, check it, release; `ROUNDS`
/// times each. The number of epochs led.
fn race(url: &str, repeatable: bool) -> Result<usize> {
    let mut db = connect(url, repeatable)?;
    db.retrying("making the baton", |c| {
        c.batch_execute(
            "CREATE TABLE IF NOT EXISTS fleetagent.check_baton (id int PRIMARY KEY, holder text, epoch bigint);
             INSERT INTO fleetagent.check_baton VALUES (1, '', 0) ON CONFLICT DO NOTHING",
        )
    })?;
    let start = Arc::new(Barrier::new(3));
    let hosts: Vec<_> = (0..3)
        .map(|i| {
            let (url, start) = (url.to_string(), Arc::clone(&start));
            std::thread::spawn(move || -> Result<Vec<i64>> {
                let host = format!("check-{i}");
                let mut db = connect(&url, repeatable)?;
                start.wait();
                let mut led = Vec::new();
                for _ in 0..ROUNDS {
                    if let Role::Leader { epoch, .. } =
                        lease::acquire_or_join(&mut db, &host, LONG)?
                    {
                        led.push(epoch);
                        let took = lease::fenced(&mut db, &host, epoch, MARGIN, "baton", |tx| {
                            tx.execute(
                                "UPDATE fleetagent.check_baton SET holder = $1, epoch = $2
                                 WHERE id = 1 AND epoch < $2",
                                &[&host, &epoch],
                            )
                        })?;
                        if took != Fenced::Committed(1) {
                            bail!("{host} at epoch {epoch} could not take the baton: {took:?}");
                        }
                        lease::release(&mut db, &host, epoch)?;
                    }
                }
                Ok(led)
            })
        })
        .collect();
    let mut epochs = Vec::new();
    for h in hosts {
        epochs.extend(
            h.join()
                .map_err(|_| anyhow::anyhow!("a racing host panicked"))??,
        );
    }
    epochs.sort_unstable();
    let n = epochs.len();
    if epochs.iter().enumerate().any(|(k, e)| *e != k as i64 + 1) {
        bail!("the epochs led were not 1..{n} once each: {epochs:?}");
    }
    let baton: i64 = db.retrying("reading the baton", |c| {
        c.query_one("SELECT epoch FROM fleetagent.check_baton", &[])?
            .try_get(0)
    })?;
    if baton != n as i64 {
        bail!("the baton is at epoch {baton}, the last epoch led was {n}");
    }
    Ok(n)
}

/// A leads with a short lease and lets it lapse; B takes over; A's fenced write must not
/// commit.
fn old_epoch_write(url: &str, repeatable: bool) -> Result<()> {
    let mut a = connect(url, repeatable)?;
    let mut b = connect(url, repeatable)?;
    // The races above released the lease: the hold-off is the releasing host's only.
    let Role::Leader { epoch, .. } = lease::acquire_or_join(&mut a, "check-a", SHORT)? else {
        bail!("check-a could not take a free lease");
    };
    SystemClock.sleep(SHORT + Duration::from_millis(200));
    let Role::Leader { epoch: next, .. } = lease::acquire_or_join(&mut b, "check-b", LONG)? else {
        bail!("check-b could not take a lapsed lease");
    };
    if next != epoch + 1 {
        bail!("the takeover's epoch is {next}, not {}", epoch + 1);
    }
    let wrote = lease::fenced(
        &mut a,
        "check-a",
        epoch,
        Duration::ZERO,
        "old write",
        |tx| {
            tx.execute(
                "UPDATE fleetagent.check_baton SET holder = 'stale' WHERE id = 1",
                &[],
            )
        },
    )
    .context("the old epoch's fenced write")?;
    if wrote != Fenced::Lost {
        bail!("a fenced write of epoch {epoch} committed after epoch {next} took over");
    }
    lease::release(&mut b, "check-b", next)?;
    Ok(())
}
