//! Events: durable "something happened" rows, claimed by exactly one pass.
//!
//! Ready = unclaimed, not failed, `not_before` passed. A pass claims every ready event in
//! the transaction that creates its run; a failed or interrupted pass hands them back.

use anyhow::Result;
use rusqlite::{params, Connection, OptionalExtension};
use serde::Serialize;

use crate::clock::Millis;

/// After this many handed-back attempts an event is marked failed (kept, shown, never dropped).
pub const MAX_ATTEMPTS: i64 = 5;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    pub id: i64,
    pub priority: u8,
    pub kind: String,
    pub reason: String,
    pub body: Option<String>,
    pub created_at: Millis,
    pub attempts: i64,
}

/// Unclaimed, not failed, due: read through the partial index `events_waiting` (named in each
/// query: SQLite otherwise takes `events_claimed` for `claimed_by IS NULL` and walks every
/// failed event, 12 ms a query per 200,000 of them).
const READY: &str =
    "claimed_by IS NULL AND failed_at IS NULL AND (not_before IS NULL OR not_before <= ?1)";

pub fn insert(
    conn: &Connection,
    priority: u8,
    kind: &str,
    reason: &str,
    body: Option<&str>,
    now: Millis,
) -> Result<i64> {
    insert_with(
        conn,
        "INSERT INTO events (priority, kind, reason, body, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
        (priority, kind, reason, body, now),
    )
}

/// With `[ha] enabled`: an event for the leader, kept in this host's outbox until a `run` or
/// `poll` here forwards it to the shared inbox. The outbox's id.
pub fn insert_outbox(
    conn: &Connection,
    priority: u8,
    kind: &str,
    reason: &str,
    body: Option<&str>,
    now: Millis,
) -> Result<i64> {
    insert_with(
        conn,
        "INSERT INTO outbox (priority, kind, reason, body, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
        (priority, kind, reason, body, now),
    )
}

/// Without `[ha]`: the outbox rows nobody forwarded become events of this database, in one
/// transaction (each marked forwarded now). They were written while `[ha]` was on, or by a
/// `trigger` or `message` that could not read the config (`cmd::open_for_event`); the
/// re-test saw both wait for ever. How many.
pub fn take_outbox(conn: &Connection, now: Millis) -> Result<usize> {
    // Read first: a run without an outbox row (nearly every one) takes no write lock.
    let waiting: bool = conn
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM outbox WHERE forwarded_at IS NULL)")?
        .query_row([], |r| r.get(0))?;
    if !waiting {
        return Ok(0);
    }
    let tx = rusqlite::Transaction::new_unchecked(conn, rusqlite::TransactionBehavior::Immediate)?;
    let n = tx.execute(
        "INSERT INTO events (priority, kind, reason, body, created_at)
         SELECT priority, kind, reason, body, created_at FROM outbox
         WHERE forwarded_at IS NULL ORDER BY id",
        [],
    )?;
    tx.execute(
        "UPDATE outbox SET forwarded_at = ?1 WHERE forwarded_at IS NULL",
        [now],
    )?;
    tx.commit()?;
    Ok(n)
}

/// One event row by `sql` (the events table or the outbox, the same columns): its id.
fn insert_with(
    conn: &Connection,
    sql: &str,
    (priority, kind, reason, body, now): (u8, &str, &str, Option<&str>, Millis),
) -> Result<i64> {
    conn.prepare_cached(sql)?
        .execute(params![priority, kind, reason, body, now])?;
    Ok(conn.last_insert_rowid())
}

/// Whether the operator spoke (a `resume` or a `message` event) at or after `since` and not
/// after `until` (one dated later was written by a clock that has stepped back since: a
/// message sent on a fast clock read as newer than a stop typed after it, and ended its hold).
/// By time, through the partial index `events_spoke` (sql/0016): an event taken late from an
/// outbox or the shared inbox keeps the time it was rung under a newer id, and a walk by id
/// that stopped at the first older row missed the message behind it (the re-tests: the hold
/// the message had ended came back).
pub fn operator_spoke_since(conn: &Connection, since: Millis, until: Millis) -> Result<bool> {
    Ok(conn
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM events INDEXED BY events_spoke
                            WHERE kind IN ('resume', 'message')
                              AND created_at >= ?1 AND created_at <= ?2)",
        )?
        .query_row(params![since, until], |r| r.get(0))?)
}

/// An event a pass discovered itself (a lifecycle change): inserted already claimed by it.
pub fn insert_claimed(
    conn: &Connection,
    run_id: i64,
    priority: u8,
    kind: &str,
    reason: &str,
    now: Millis,
) -> Result<i64> {
    conn.execute(
        "INSERT INTO events (priority, kind, reason, created_at, claimed_by, claimed_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?4)",
        params![priority, kind, reason, now, run_id],
    )?;
    Ok(conn.last_insert_rowid())
}

/// The most urgent priority among ready events (0 is the most urgent), if any.
///
/// `debounce_wait` asks this every 250 ms while a burst lands, with up to a burst's events
/// waiting: cached, and a walk of `events_waiting` in priority order that stops at the first
/// ready row (the planner, left alone, looks every waiting event up through `events_claimed`;
/// that and the parse were a quarter of a trigger storm's simulated week: 20.3 s, now 15.5).
pub fn ready_top_priority(conn: &Connection, now: Millis) -> Result<Option<u8>> {
    Ok(conn
        .prepare_cached(&format!(
            "SELECT priority FROM events INDEXED BY events_waiting WHERE {READY}
             ORDER BY priority LIMIT 1"
        ))?
        .query_row(params![now], |r| r.get::<_, u8>(0))
        .optional()?)
}

/// When the newest ready event was recorded (None: none is ready).
pub fn newest_ready_at(conn: &Connection, now: Millis) -> Result<Option<Millis>> {
    Ok(conn
        .prepare_cached(&format!(
            "SELECT MAX(created_at) FROM events INDEXED BY events_waiting WHERE {READY}"
        ))?
        .query_row(params![now], |r| r.get(0))?)
}

pub fn count_ready(conn: &Connection, now: Millis) -> Result<i64> {
    Ok(conn
        .prepare_cached(&format!(
            "SELECT COUNT(*) FROM events INDEXED BY events_waiting WHERE {READY}"
        ))?
        .query_row(params![now], |r| r.get(0))?)
}

/// Claim every ready event for `run_id`; returns them, oldest first.
pub fn claim_ready(conn: &Connection, run_id: i64, now: Millis) -> Result<Vec<Event>> {
    conn.execute(
        &format!("UPDATE events INDEXED BY events_waiting SET claimed_by = ?2, claimed_at = ?1 WHERE {READY}"),
        params![now, run_id],
    )?;
    claimed_by(conn, run_id)
}

pub fn claimed_by(conn: &Connection, run_id: i64) -> Result<Vec<Event>> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, priority, kind, reason, body, created_at, attempts
         FROM events WHERE claimed_by = ?1 ORDER BY id",
    )?;
    let rows = stmt
        .query_map(params![run_id], |r| {
            Ok(Event {
                id: r.get(0)?,
                priority: r.get(1)?,
                kind: r.get(2)?,
                reason: r.get(3)?,
                body: r.get(4)?,
                created_at: r.get(5)?,
                attempts: r.get(6)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HandBack {
    pub returned: usize,
    pub failed: usize,
}

/// Give a pass's claimed events back (attempts + 1, waiting until `not_before`); those that
/// reach [`MAX_ATTEMPTS`] are marked failed instead.
pub fn hand_back(
    conn: &Connection,
    run_id: i64,
    not_before: Option<Millis>,
    error: &str,
    now: Millis,
) -> Result<HandBack> {
    let failed = conn.execute(
        "UPDATE events SET claimed_by = NULL, claimed_at = NULL, attempts = attempts + 1,
                failed_at = ?2, last_error = ?3
         WHERE claimed_by = ?1 AND attempts + 1 >= ?4",
        params![run_id, now, error, MAX_ATTEMPTS],
    )?;
    let returned = conn.execute(
        "UPDATE events SET claimed_by = NULL, claimed_at = NULL, attempts = attempts + 1,
                not_before = ?2, last_error = ?3
         WHERE claimed_by = ?1",
        params![run_id, not_before, error],
    )?;
    Ok(HandBack { returned, failed })
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct EventCounts {
    /// Not claimed by any pass and not failed (ready or deferred).
    pub unconsumed: i64,
    /// Of those, waiting for `not_before`.
    pub deferred: i64,
    pub failed: i64,
}

pub fn counts(conn: &Connection, now: Millis) -> Result<EventCounts> {
    let (unconsumed, deferred): (i64, i64) = conn.query_row(
        "SELECT COUNT(*), COALESCE(SUM(not_before IS NOT NULL AND not_before > ?1), 0)
         FROM events INDEXED BY events_waiting WHERE claimed_by IS NULL AND failed_at IS NULL",
        params![now],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let failed = conn.query_row(
        "SELECT COUNT(*) FROM events WHERE failed_at IS NOT NULL",
        [],
        |r| r.get(0),
    )?;
    Ok(EventCounts {
        unconsumed,
        deferred,
        failed,
    })
}

/// Events failed at or after `since`: how many, and when the newest failed.
pub fn failed_since(conn: &Connection, since: Millis) -> Result<(i64, Option<Millis>)> {
    Ok(conn
        .prepare_cached(
            "SELECT COUNT(*), MAX(failed_at) FROM events INDEXED BY events_failed
              WHERE failed_at >= ?1",
        )?
        .query_row(params![since], |r| Ok((r.get(0)?, r.get(1)?)))?)
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WaitingEvent {
    pub id: i64,
    pub priority: u8,
    pub kind: String,
    pub reason: String,
    pub created_at: Millis,
    pub attempts: i64,
    pub not_before: Option<Millis>,
    pub failed_at: Option<Millis>,
    pub last_error: Option<String>,
}

/// Unconsumed events (oldest first) or failed ones (newest first), at most `limit`.
pub fn list_waiting(conn: &Connection, failed: bool, limit: i64) -> Result<Vec<WaitingEvent>> {
    let sql = if failed {
        "SELECT id, priority, kind, reason, created_at, attempts, not_before, failed_at, last_error
         FROM events WHERE failed_at IS NOT NULL ORDER BY failed_at DESC, id DESC LIMIT ?1"
    } else {
        "SELECT id, priority, kind, reason, created_at, attempts, not_before, failed_at, last_error
         FROM events INDEXED BY events_waiting
        WHERE claimed_by IS NULL AND failed_at IS NULL ORDER BY id LIMIT ?1"
    };
    let mut stmt = conn.prepare(sql)?;
    let rows = stmt
        .query_map(params![limit], |r| {
            Ok(WaitingEvent {
                id: r.get(0)?,
                priority: r.get(1)?,
                kind: r.get(2)?,
                reason: r.get(3)?,
                created_at: r.get(4)?,
                attempts: r.get(5)?,
                not_before: r.get(6)?,
                failed_at: r.get(7)?,
                last_error: r.get(8)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_store;

    /// A message dated ahead of the clock (sent before a step back) is no word after a stop
    /// typed since; one dated between the stop and now is; the walk goes past the former.
    #[test]
    fn a_word_dated_ahead_of_the_clock_is_not_one_after_the_stop() {
        let (_dir, store) = test_store(0);
        let c = &store.conn;
        let (stop, now) = (10_000_000, 10_060_000);
        insert(c, 0, "message", "go on", None, now + 3_600_000).unwrap();
        insert(
            c,
            1,
            "operator",
            "operator destroyed instance 7",
            None,
            stop + 5_000,
        )
        .unwrap();
        let spoke = |until| operator_spoke_since(c, stop, until).unwrap();
        assert!(!spoke(now + 60_000));
        assert!(spoke(now + 3_600_000), "dated within: it counts");
        insert(c, 0, "resume", "resume", None, now).unwrap();
        assert!(spoke(now + 60_000));
    }

    /// A row taken from an outbox after the operator's message, dated when it was rung
    /// (before the stop), does not end the walk before the message.
    #[test]
    fn an_event_taken_late_with_its_old_time_does_not_hide_a_message() {
        let (_dir, store) = test_store(1_000);
        let c = &store.conn;
        let (stop, now) = (10_000_000, 10_060_000);
        insert(c, 0, "message", "go on", None, stop + 30_000).unwrap();
        for _ in 0..70 {
            insert_outbox(
                c,
                1,
                "trigger",
                "rung, the config broken",
                None,
                stop - 60_000,
            )
            .unwrap();
        }
        assert_eq!(take_outbox(c, now).unwrap(), 70);
        assert!(operator_spoke_since(c, stop, now).unwrap());
        assert_eq!(take_outbox(c, now).unwrap(), 0, "taken once");
    }

    #[test]
    fn the_top_priority_and_the_count_see_only_ready_events() {
        let (_dir, store) = test_store(1_000);
        let c = &store.conn;
        assert_eq!(ready_top_priority(c, 1_000).unwrap(), None);
        assert_eq!(count_ready(c, 1_000).unwrap(), 0);
        // A P0 handed back until 5 000, a failed P0, a claimed P1 and two ready P2s.
        let later = insert(c, 0, "trigger", "retry", None, 1_000).unwrap();
        let failed = insert(c, 0, "trigger", "failed", None, 1_000).unwrap();
        let run =
            crate::store::runs::create(c, 1, 1, 1, crate::store::runs::StartedBy::Tick, 1_000)
                .unwrap();
        insert_claimed(c, run, 1, "lifecycle", "claimed", 1_000).unwrap();
        insert(c, 2, "trigger", "a", None, 1_000).unwrap();
        insert(c, 2, "trigger", "b", None, 1_000).unwrap();
        c.execute(
            "UPDATE events SET not_before = 5000 WHERE id = ?1",
            params![later],
        )
        .unwrap();
        c.execute(
            "UPDATE events SET failed_at = 1000 WHERE id = ?1",
            params![failed],
        )
        .unwrap();
        assert_eq!(ready_top_priority(c, 4_999).unwrap(), Some(2));
        assert_eq!(count_ready(c, 4_999).unwrap(), 2);
        assert_eq!(ready_top_priority(c, 5_000).unwrap(), Some(0));
        assert_eq!(count_ready(c, 5_000).unwrap(), 3);
    }
}
