//! What is never read again, deleted after `run.retention_days` (a growth measurement: a year of
//! a steady fleet made a 116 MB database, 86 % of it the observations of passes that did
//! nothing; trigger storms made 1.1 GB of claimed events a year). Nothing a pass, `inspect`,
//! `doctor` or the metrics read goes:
//! - **messages**: the observations, notes and tool exchanges of runs that later prompts do
//!   not include (`runs.in_prompt = 0`, or a session before the current one), older than the
//!   retention (a model's answers in passes that did nothing among them); kept are operator
//!   messages (any age: the prompt carries unanswered ones, `history` shows them; the runs
//!   that answered them are in the prompt) and the newest message of each kind in the
//!   current session (the prompt reads it);
//! - **events**: claimed, not failed, older than the retention, but the operator's `resume`
//!   and `message` events (the operator hold ends at the first of them after a stop, and the
//!   hold may outlast the retention: a pruned `resume` brought the hold back) and any event a
//!   message row points at. Waiting and failed events stay (doctor and the counts read them).
//!
//! Runs, actions, instances and LLM calls stay: small, and counted by the tallies (a run row
//! gone would reset a Prometheus counter). Each call deletes at most [`BATCH`] rows of each
//! table, oldest first, and finds the old rows from the low end of the ids, so a pass that
//! finds nothing to delete reads a few rows.

use anyhow::Result;
use rusqlite::{params, Connection};

use crate::clock::Millis;

/// Rows of each table deleted by one call at most: a storm of 46,000 events a day is pruned
/// by a few runs, and no run holds the write lock for long.
pub const BATCH: i64 = 5_000;

/// What one call deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pruned {
    pub messages: usize,
    pub events: usize,
}

/// Delete what is older than `days` days at `now` (nothing when `days` is 0); events only when
/// `events` is true (under `[ha]` they are shared rows, kept as the shared state has them).
pub fn prune(conn: &Connection, now: Millis, days: u64, events: bool) -> Result<Pruned> {
    if days == 0 {
        return Ok(Pruned::default());
    }
    let cut = now - (days as i64).saturating_mul(86_400_000);
    let tx = rusqlite::Transaction::new_unchecked(conn, rusqlite::TransactionBehavior::Immediate)?;
    // The first id at or after the cut bounds each scan: ids grow with time, so the rows
    // before it are the old ones (a clock stepped back blurs the edge by its step, no more).
    let messages = tx.execute(
        "DELETE FROM messages WHERE id IN (
           SELECT m.id FROM messages m
           WHERE m.id < COALESCE((SELECT id FROM messages WHERE created_at >= ?1 ORDER BY id LIMIT 1),
                                 (SELECT MAX(id) + 1 FROM messages))
             AND m.created_at < ?1
             AND m.kind <> 'operator'
             AND (m.session_id <> (SELECT session_id FROM agent_state WHERE id = 1)
                  OR NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = m.run_id AND r.in_prompt = 1))
             AND m.id NOT IN (SELECT MAX(id) FROM messages
                              WHERE session_id = (SELECT session_id FROM agent_state WHERE id = 1)
                              GROUP BY kind)
           ORDER BY m.id LIMIT ?2)",
        params![cut, BATCH],
    )?;
    let events = if events {
        tx.execute(
            "DELETE FROM events WHERE id IN (
               SELECT e.id FROM events e
               WHERE e.id < COALESCE((SELECT id FROM events WHERE created_at >= ?1 ORDER BY id LIMIT 1),
                                     (SELECT MAX(id) + 1 FROM events))
                 AND e.created_at < ?1
                 AND e.claimed_by IS NOT NULL AND e.failed_at IS NULL
                 AND e.kind NOT IN ('resume', 'message')
                 AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.event_id = e.id)
               ORDER BY e.id LIMIT ?2)",
            params![cut, BATCH],
        )?
    } else {
        0
    };
    tx.commit()?;
    Ok(Pruned { messages, events })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_store;

    const DAY: Millis = 86_400_000;

    /// Old rows no later prompt, `inspect` or `doctor` reads go; the rest stays, whatever
    /// its age: operator messages, answers and their events, runs in the prompt, the newest
    /// of each kind, waiting and failed events, anything younger than the retention.
    #[test]
    fn only_what_is_never_read_again_goes() {
        let now = 100 * DAY;
        let (_dir, store) = test_store(now);
        let c = &store.conn;
        let session: i64 = c
            .query_row("SELECT session_id FROM agent_state WHERE id = 1", [], |r| {
                r.get(0)
            })
            .unwrap();
        let run = |at: Millis, in_prompt: bool| -> i64 {
            c.execute(
                "INSERT INTO runs (session_id, pid, pass, started_by, status, started_at, in_prompt)
                 VALUES (?1, 1, 1, 'tick', 'ok', ?2, ?3)",
                params![session, at, in_prompt],
            )
            .unwrap();
            c.last_insert_rowid()
        };
        let message = |run: i64, kind: &str, at: Millis, event: Option<i64>| -> i64 {
            c.execute(
                "INSERT INTO messages (session_id, run_id, role, kind, content, tokens, event_id, created_at)
                 VALUES (?1, ?2, 'user', ?3, 'x', 1, ?4, ?5)",
                params![session, run, kind, event, at],
            )
            .unwrap();
            c.last_insert_rowid()
        };
        let event = |kind: &str, at: Millis, claimed: Option<i64>, failed: bool| -> i64 {
            c.execute(
                "INSERT INTO events (priority, kind, reason, created_at, claimed_by, failed_at)
                 VALUES (1, ?1, 'r', ?2, ?3, ?4)",
                params![kind, at, claimed, failed.then_some(at)],
            )
            .unwrap();
            c.last_insert_rowid()
        };
        let old = now - 40 * DAY;
        let quiet = run(old, false);
        let acted = run(old, true);
        let gone_obs = message(quiet, "observation", old, None);
        let gone_note = message(quiet, "note", old, None);
        let kept_acted = message(acted, "observation", old, None);
        let spoke = event("message", old, Some(quiet), false);
        let kept_operator = message(quiet, "operator", old, Some(spoke));
        let gone_answer = message(quiet, "answer", old - 1, None);
        let kept_answer = message(acted, "answer", old, None);
        let gone_event = event("trigger", old, Some(quiet), false);
        let kept_failed = event("trigger", old, Some(quiet), true);
        let kept_waiting = event("poll", old, None, false);
        // `resume` ends an operator hold that may be older than the retention.
        let kept_resume = event("resume", old, Some(quiet), false);
        let recent = run(now - DAY, false);
        let kept_recent = message(recent, "observation", now - DAY, None);
        let kept_newest_note = message(quiet, "note", old + 1, None);
        let kept_recent_event = event("trigger", now - DAY, Some(recent), false);
        message(recent, "observation", now - DAY / 2, None);

        let pruned = prune(c, now, 30, true).unwrap();
        assert_eq!(
            pruned,
            Pruned {
                messages: 3,
                events: 1
            }
        );
        let exists = |table: &str, id: i64| -> bool {
            c.query_row(
                &format!("SELECT COUNT(*) FROM {table} WHERE id = ?1"),
                [id],
                |r| r.get::<_, i64>(0),
            )
            .unwrap()
                == 1
        };
        for id in [gone_obs, gone_note, gone_answer] {
            assert!(!exists("messages", id), "{id}");
        }
        for id in [
            kept_acted,
            kept_operator,
            kept_answer,
            kept_recent,
            kept_newest_note,
        ] {
            assert!(exists("messages", id), "{id}");
        }
        assert!(!exists("events", gone_event));
        for id in [
            spoke,
            kept_failed,
            kept_waiting,
            kept_recent_event,
            kept_resume,
        ] {
            assert!(exists("events", id), "{id}");
        }
        // Again: nothing left to delete; 0 days keeps everything; events kept under [ha].
        assert_eq!(prune(c, now, 30, true).unwrap(), Pruned::default());
        // Once a new session begins, an old one's action runs are in no prompt.
        c.execute(
            "INSERT INTO sessions (started_at, reason) VALUES (?1, 'reset')",
            [now],
        )
        .unwrap();
        c.execute(
            "UPDATE agent_state SET session_id = last_insert_rowid() WHERE id = 1",
            [],
        )
        .unwrap();
        prune(c, now, 30, true).unwrap();
        assert!(!exists("messages", kept_acted));
        assert!(exists("messages", kept_operator) && !exists("messages", kept_answer));
        assert_eq!(
            prune(c, now + 100 * DAY, 0, true).unwrap(),
            Pruned::default()
        );
        let later = prune(c, now + 100 * DAY, 30, false).unwrap();
        assert_eq!(later.events, 0);
        assert!(later.messages > 0);
    }
}
