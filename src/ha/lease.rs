//! The leader lease: one row `fleet` in `fleetagent.lease`, its holder, its epoch (the
//! fencing token: it rises on every change of holder) and its expiry, all in database time.
//! Each operation is one statement, or one short transaction, retried on 40001/40P01.
//!
//! Why it holds under READ COMMITTED and REPEATABLE READ alike: every change is a single
//! `INSERT ... ON CONFLICT DO UPDATE ... WHERE` or `UPDATE ... WHERE` on the one row, so two
//! hosts serialise on its row lock. Under READ COMMITTED the second re-reads the row the
//! first committed and re-checks its WHERE (so it sees the new holder and epoch); under
//! REPEATABLE READ it fails with 40001 instead, and its retry is a new statement with a new
//! snapshot that sees the same thing. The fence reads the row `FOR SHARE`, which conflicts
//! with those updates: a fenced write commits before a takeover or not at all.

use std::time::Duration;

use anyhow::{bail, Result};
use postgres::Transaction;

use super::db::SharedDb;

/// What [`acquire_or_join`] found.
#[derive(Debug, Clone, PartialEq)]
pub enum Role {
    /// We hold the lease at `epoch` for `lease_left` more (database time).
    Leader { epoch: i64, lease_left: Duration },
    /// `holder` holds a live lease at `epoch` for `lease_left` more.
    Follower {
        holder: String,
        epoch: i64,
        lease_left: Duration,
    },
    /// We released the lease at `epoch` (`ha release`): for one lease period after, we leave
    /// it to another host (`hold_left` more), so a planned handover hands over.
    Released { epoch: i64, hold_left: Duration },
}

/// The outcome of a [`fenced`] write.
#[derive(Debug, Clone, PartialEq)]
pub enum Fenced<T> {
    /// The fence passed and the write committed with it.
    Committed(T),
    /// The lease is no longer ours at that epoch with the margin left: nothing was written.
    Lost,
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

fn left(secs: f64) -> Duration {
    Duration::try_from_secs_f64(secs.max(0.0)).unwrap_or(Duration::ZERO)
}

/// Takes the lease when there is none, or it expired (the epoch rises by one), renews it
/// when it is ours and live (same epoch), else reports the live holder.
///
/// One short transaction. When the upsert's condition fails, PostgreSQL still locks the row
/// (`ON CONFLICT DO UPDATE ... WHERE` locks every conflicting row), so the read of the holder
/// that follows sees the very version the condition was checked on, at the same `now()`:
/// a live lease held by another host.
pub fn acquire_or_join(db: &mut SharedDb, host: &str, ttl: Duration) -> Result<Role> {
    let found = db.retrying("acquiring the lease", |client| {
        let mut tx = client.transaction()?;
        let taken = tx
            .query_opt(
                "INSERT INTO fleetagent.lease AS l
                    (name, holder, epoch, acquired_at, renewed_at, expires_at)
                 VALUES ('fleet', $1, 1, now(), now(),
                         now() + $2::float8 * interval '1 second')
                 ON CONFLICT (name) DO UPDATE SET
                    epoch = CASE WHEN l.holder = $1 AND l.expires_at > now()
                                 THEN l.epoch ELSE l.epoch + 1 END,
                    acquired_at = CASE WHEN l.holder = $1 AND l.expires_at > now()
                                       THEN l.acquired_at ELSE now() END,
                    holder = $1,
                    renewed_at = now(),
                    expires_at = now() + $2::float8 * interval '1 second',
                    released = false
                 WHERE (l.holder = $1 AND l.expires_at > now())
                    OR (l.expires_at <= now()
                        AND NOT (l.holder = $1 AND l.released
                                 AND now() < l.expires_at + $2::float8 * interval '1 second'))
                 RETURNING l.holder, l.epoch, EXTRACT(EPOCH FROM l.expires_at - now())::float8,
                           false",
                &[&host, &secs(ttl)],
            )?
            .map(|row| {
                Ok((
                    true,
                    row.try_get(0)?,
                    row.try_get(1)?,
                    row.try_get(2)?,
                    row.try_get(3)?,
                ))
            })
            .transpose()?;
        let found = match taken {
            Some(found) => Some(found),
            None => tx
                .query_opt(
                    "SELECT holder, epoch, EXTRACT(EPOCH FROM expires_at - now())::float8, released
                     FROM fleetagent.lease WHERE name = 'fleet'",
                    &[],
                )?
                .map(|row| {
                    Ok((
                        false,
                        row.try_get(0)?,
                        row.try_get(1)?,
                        row.try_get(2)?,
                        row.try_get(3)?,
                    ))
                })
                .transpose()?,
        };
        tx.commit()?;
        Ok(found)
    })?;
    let found: Option<(bool, String, i64, f64, bool)> = found;
    match found {
        Some((true, _, epoch, lease_left, _)) => Ok(Role::Leader {
            epoch,
            lease_left: left(lease_left),
        }),
        Some((false, holder, epoch, lease_left, true)) if holder == host && lease_left <= 0.0 => {
            Ok(Role::Released {
                epoch,
                hold_left: left(secs(ttl) + lease_left),
            })
        }
        Some((false, holder, epoch, lease_left, _)) if holder != host && lease_left > 0.0 => {
            Ok(Role::Follower {
                holder,
                epoch,
                lease_left: left(lease_left),
            })
        }
        // Not what the locked row can show; a database that does not lock as PostgreSQL
        // does would end here rather than report a wrong holder.
        _ => bail!(
            "ha database {}: acquiring the lease: the lease row changed while this host \
             looked at it",
            db.shown()
        ),
    }
}

/// Extends our lease by `ttl` from now, only while `host` holds it at `epoch` and it has not
/// expired. `None`: it is lost (stop acting).
pub fn renew(db: &mut SharedDb, host: &str, epoch: i64, ttl: Duration) -> Result<Option<Duration>> {
    let lease_left = db.retrying("renewing the lease", |client| {
        client
            .query_opt(
                "UPDATE fleetagent.lease
                 SET renewed_at = now(), expires_at = now() + $3::float8 * interval '1 second'
                 WHERE name = 'fleet' AND holder = $1 AND epoch = $2 AND expires_at > now()
                 RETURNING EXTRACT(EPOCH FROM expires_at - now())::float8",
                &[&host, &epoch, &secs(ttl)],
            )?
            .map(|row| row.try_get::<_, f64>(0))
            .transpose()
    })?;
    Ok(lease_left.map(left))
}

/// A planned handover: expires our lease now, so the next other host to acquire takes it with
/// the epoch + 1 (we hold off for one lease period: [`Role::Released`]). `false`: it was not ours at `epoch`, or had already expired.
pub fn release(db: &mut SharedDb, host: &str, epoch: i64) -> Result<bool> {
    let changed = db.retrying("releasing the lease", |client| {
        client.execute(
            "UPDATE fleetagent.lease SET expires_at = now(), renewed_at = now(), released = true
             WHERE name = 'fleet' AND holder = $1 AND epoch = $2 AND expires_at > now()",
            &[&host, &epoch],
        )
    })?;
    Ok(changed == 1)
}

/// Inside the caller's transaction: whether `host` still holds the lease at `epoch` with at
/// least `margin` left, at this instant of database time (`clock_timestamp()`, not the
/// transaction's start). When it does, the row stays share-locked until the transaction
/// ends, so no takeover commits in between: the caller's writes commit only while the lease
/// is ours. `false`: roll back and stop acting. A 40001 here (REPEATABLE READ after a
/// concurrent takeover) aborts the whole transaction; [`fenced`] runs it again.
pub fn fence(
    tx: &mut Transaction<'_>,
    host: &str,
    epoch: i64,
    margin: Duration,
) -> Result<bool, postgres::Error> {
    let row = tx.query_opt(
        "SELECT 1 FROM fleetagent.lease
         WHERE name = 'fleet' AND holder = $1 AND epoch = $2
           AND expires_at > clock_timestamp() + $3::float8 * interval '1 second'
         FOR SHARE",
        &[&host, &epoch, &secs(margin)],
    )?;
    Ok(row.is_some())
}

/// The fence alone, when nothing rides on it (the check before a vast.ai request with nothing
/// to push): one statement, whether `host` holds the lease at `epoch` with `margin` left now.
pub fn still_held(db: &mut SharedDb, host: &str, epoch: i64, margin: Duration) -> Result<bool> {
    db.retrying("checking the lease", |client| {
        Ok(client
            .query_opt(
                "SELECT 1 FROM fleetagent.lease
                 WHERE name = 'fleet' AND holder = $1 AND epoch = $2
                   AND expires_at > clock_timestamp() + $3::float8 * interval '1 second'",
                &[&host, &epoch, &secs(margin)],
            )?
            .is_some())
    })
}

/// One transaction: the [`fence`] first, then `write`, then COMMIT; run again whole on
/// 40001/40P01. `write` must be safe to run again (it runs in a fresh transaction each time).
pub fn fenced<T>(
    db: &mut SharedDb,
    host: &str,
    epoch: i64,
    margin: Duration,
    what: &str,
    mut write: impl FnMut(&mut Transaction<'_>) -> Result<T, postgres::Error>,
) -> Result<Fenced<T>> {
    db.retrying(what, |client| {
        let mut tx = client.transaction()?;
        if !fence(&mut tx, host, epoch, margin)? {
            tx.rollback()?;
            return Ok(Fenced::Lost);
        }
        let value = write(&mut tx)?;
        tx.commit()?;
        Ok(Fenced::Committed(value))
    })
}
