//! Runs: one row per pass. The AUTOINCREMENT id is the run id.

use anyhow::Result;
use rusqlite::{params, Connection};
use serde::Serialize;

use crate::clock::Millis;
use crate::text_enum;

text_enum! {
    /// Where a run is: `running` until it finishes `ok` or `failed`.
    pub enum Status, "runs.status" { Running = "running", Ok = "ok", Failed = "failed" }
}

text_enum! {
    /// What a finished pass did: a mutating call succeeded (`action`), none was asked for
    /// (`no-action`), the model was not asked because nothing was new (`skipped`), or calls
    /// were asked for and none changed the fleet: at least one failed at vast.ai
    /// (`action-failed`), or every one was refused by a guardrail (`action-refused`).
    pub enum Verdict, "runs.verdict" {
        Action = "action",
        NoAction = "no-action",
        Skipped = "skipped",
        ActionFailed = "action-failed",
        ActionRefused = "action-refused",
    }
}

text_enum! {
    /// Who decided a pass: the model, the rules (`provider = "rules"`), the rules because the
    /// model was unusable, or the floor overruling the model's answer.
    pub enum DecidedBy, "runs.decided_by" {
        Llm = "llm",
        Rules = "rules",
        FallbackRules = "fallback-rules",
        Floor = "floor",
    }
}

text_enum! {
    /// Why a pass ran: events (or the doorbell) were waiting, or the timer ticked.
    pub enum StartedBy, "runs.started_by" { Events = "events", Tick = "tick" }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Run {
    pub id: i64,
    pub session_id: i64,
    pub pid: i64,
    pub pass: i64,
    pub started_by: StartedBy,
    pub status: Status,
    pub verdict: Option<Verdict>,
    pub decided_by: Option<DecidedBy>,
    pub started_at: Millis,
    pub finished_at: Option<Millis>,
    pub events_claimed: i64,
    pub wakes_claimed: i64,
    pub llm_calls: i64,
    pub prompt_tokens_est: Option<i64>,
    pub prompt_tokens_reported: Option<i64>,
    pub completion_tokens: Option<i64>,
    pub llm_error: Option<String>,
    pub error: Option<String>,
    pub emergency: bool,
    /// What the pass's asked-for launches and stops came to.
    pub actions: ActionCounts,
}

/// A pass's asked-for launches and stops by what became of them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ActionCounts {
    /// Went through (a dry run's answer included).
    pub ok: i64,
    /// Refused by a guardrail (budget, rate limit, unprofitable, protected, ...).
    pub refused: i64,
    /// Failed at vast.ai (an HTTP error, a timeout, a refused key).
    pub failed: i64,
}

const COLS: &str = "id, session_id, pid, pass, started_by, status, verdict, decided_by, started_at,
    finished_at, events_claimed, wakes_claimed, llm_calls, prompt_tokens_est,
    prompt_tokens_reported, completion_tokens, llm_error, error, emergency, actions_ok,
    actions_refused, actions_failed";

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Run> {
    Ok(Run {
        id: r.get(0)?,
        session_id: r.get(1)?,
        pid: r.get(2)?,
        pass: r.get(3)?,
        started_by: r.get(4)?,
        status: r.get(5)?,
        verdict: r.get(6)?,
        decided_by: r.get(7)?,
        started_at: r.get(8)?,
        finished_at: r.get(9)?,
        events_claimed: r.get(10)?,
        wakes_claimed: r.get(11)?,
        llm_calls: r.get(12)?,
        prompt_tokens_est: r.get(13)?,
        prompt_tokens_reported: r.get(14)?,
        completion_tokens: r.get(15)?,
        llm_error: r.get(16)?,
        error: r.get(17)?,
        emergency: r.get(18)?,
        actions: ActionCounts {
            ok: r.get(19)?,
            refused: r.get(20)?,
            failed: r.get(21)?,
        },
    })
}

/// Make the next run id at least `last + 1`. Runs are AUTOINCREMENT: `sqlite_sequence` holds
/// the highest id ever given, in a row made by the first run (made here when no run was given
/// yet: a backup taken before the first run). A database older than what it ran (a restore
/// from a backup) would give ids again that labels on vast.ai already carry.
pub fn continue_past(conn: &Connection, last: i64) -> Result<()> {
    conn.execute(
        "UPDATE sqlite_sequence SET seq = ?1 WHERE name = 'runs' AND seq < ?1",
        params![last],
    )?;
    conn.execute(
        "INSERT INTO sqlite_sequence (name, seq) SELECT 'runs', ?1
         WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'runs')",
        params![last],
    )?;
    Ok(())
}

pub fn create(
    conn: &Connection,
    session_id: i64,
    pid: u32,
    pass: u32,
    started_by: StartedBy,
    now: Millis,
) -> Result<i64> {
    conn.execute(
        "INSERT INTO runs (session_id, pid, pass, started_by, status, started_at)
         VALUES (?1, ?2, ?3, ?4, 'running', ?5)",
        params![session_id, pid, pass, started_by, now],
    )?;
    Ok(conn.last_insert_rowid())
}

pub fn set_claimed(conn: &Connection, run_id: i64, events: usize, wakes: usize) -> Result<()> {
    conn.execute(
        "UPDATE runs SET events_claimed = ?2, wakes_claimed = ?3 WHERE id = ?1",
        params![run_id, events as i64, wakes as i64],
    )?;
    Ok(())
}

/// What a finished pass records about itself.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub verdict: Verdict,
    pub decided_by: Option<DecidedBy>,
    pub llm_calls: i64,
    pub prompt_tokens_est: Option<i64>,
    pub prompt_tokens_reported: Option<i64>,
    pub completion_tokens: Option<i64>,
    pub llm_error: Option<String>,
    pub emergency: bool,
    pub actions: ActionCounts,
}

impl Outcome {
    /// A pass that has decided nothing yet (its verdict until a call changes the fleet).
    pub fn new(emergency: bool) -> Outcome {
        Outcome {
            verdict: Verdict::NoAction,
            decided_by: None,
            llm_calls: 0,
            prompt_tokens_est: None,
            prompt_tokens_reported: None,
            completion_tokens: None,
            llm_error: None,
            emergency,
            actions: ActionCounts::default(),
        }
    }
}

pub fn finish_ok(conn: &Connection, run_id: i64, o: &Outcome, now: Millis) -> Result<()> {
    conn.execute(
        "UPDATE runs SET status = 'ok', verdict = ?2, decided_by = ?3, llm_calls = ?4,
                prompt_tokens_est = ?5, prompt_tokens_reported = ?6, completion_tokens = ?7,
                llm_error = ?8, emergency = ?9, finished_at = ?10, actions_ok = ?11,
                actions_refused = ?12, actions_failed = ?13
         WHERE id = ?1",
        params![
            run_id,
            o.verdict,
            o.decided_by,
            o.llm_calls,
            o.prompt_tokens_est,
            o.prompt_tokens_reported,
            o.completion_tokens,
            o.llm_error,
            o.emergency,
            now,
            o.actions.ok,
            o.actions.refused,
            o.actions.failed
        ],
    )?;
    Ok(())
}

/// The model's share of a pass that is about to fail (`llm.fallback = "none"`): what was
/// asked and why it was unusable stay on the run row beside the failure.
pub fn record_llm(conn: &Connection, run_id: i64, o: &Outcome) -> Result<()> {
    conn.execute(
        "UPDATE runs SET llm_calls = ?2, prompt_tokens_est = ?3, prompt_tokens_reported = ?4,
                completion_tokens = ?5, llm_error = ?6
         WHERE id = ?1",
        params![
            run_id,
            o.llm_calls,
            o.prompt_tokens_est,
            o.prompt_tokens_reported,
            o.completion_tokens,
            o.llm_error
        ],
    )?;
    Ok(())
}

/// The floor's clocks as the pass left them (`policy::floor::Clocks` as JSON; None when no
/// clock runs).
pub fn set_floor_clocks(conn: &Connection, run_id: i64, clocks: Option<&str>) -> Result<()> {
    conn.execute(
        "UPDATE runs SET floor_clocks = ?2 WHERE id = ?1",
        params![run_id, clocks],
    )?;
    Ok(())
}

/// The floor's clocks of the passes that finished and kept some (run id, start, JSON), oldest
/// first.
pub fn floor_clocks(conn: &Connection) -> Result<Vec<(i64, Millis, String)>> {
    let mut stmt = conn.prepare(
        "SELECT id, started_at, floor_clocks FROM runs
          WHERE status = 'ok' AND floor_clocks IS NOT NULL ORDER BY id",
    )?;
    let rows = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// What a backup writes, in its copy only, on a pass it caught running (`error` is NULL while a
/// pass runs): restored, the copy's recovery knows that pass is no crash (its outcome is in
/// the database the backup was taken from), and says so ([`CAUGHT_BY_BACKUP_FAILED`]).
pub const CAUGHT_BY_BACKUP: &str = "caught running by `fleetagent backup`";

/// The error recovery gives such a pass; `doctor` counts it as no failure.
pub const CAUGHT_BY_BACKUP_FAILED: &str = "not finished in this copy: the backup this database was restored from was taken while the pass ran (its outcome is in the database the backup was copied from; the listing settles its launches)";

/// Mark the passes running in a backup's copy ([`CAUGHT_BY_BACKUP`]); how many.
pub fn mark_caught_by_backup(conn: &Connection, at: Millis) -> Result<usize> {
    Ok(conn.execute(
        "UPDATE runs SET error = ?1 WHERE status = 'running'",
        params![format!(
            "{CAUGHT_BY_BACKUP} at {}",
            crate::clock::rfc3339(at)
        )],
    )?)
}

/// Whether a run's error says a backup caught it running, as recovery or the backup wrote it.
pub fn caught_by_backup(error: Option<&str>) -> bool {
    error.is_some_and(|e| e.starts_with(CAUGHT_BY_BACKUP) || e.starts_with(CAUGHT_BY_BACKUP_FAILED))
}

pub fn finish_failed(conn: &Connection, run_id: i64, error: &str, now: Millis) -> Result<()> {
    conn.execute(
        "UPDATE runs SET status = 'failed', verdict = NULL, error = ?2, finished_at = ?3 WHERE id = ?1",
        params![run_id, error, now],
    )?;
    Ok(())
}

/// Ids of passes still marked running (only an interrupted process leaves them).
pub fn running(conn: &Connection) -> Result<Vec<Run>> {
    let mut stmt = conn.prepare(&format!(
        "SELECT {COLS} FROM runs WHERE status = 'running' ORDER BY id"
    ))?;
    let rows = stmt
        .query_map([], row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

pub fn recent(conn: &Connection, limit: i64) -> Result<Vec<Run>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLS} FROM runs ORDER BY id DESC LIMIT ?1"
    ))?;
    let rows = stmt
        .query_map(params![limit], row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// The `limit` newest runs, and beside them, newest first, the older ones started at `since`
/// or later that an alert counts (`action-failed`, failed, decided by the fallback): the
/// alert rules send the operator to `inspect` for them over 30 minutes and an hour, and a busy
/// stretch pushed one past the newest 20 while the alert still fired (a re-test). A bounded
/// walk of the newest runs (ids grow with time), never the whole table.
pub fn recent_and_alerted(conn: &Connection, limit: i64, since: Millis) -> Result<Vec<Run>> {
    const WALK: i64 = 2_000;
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLS} FROM runs ORDER BY id DESC LIMIT ?1"
    ))?;
    let mut out = Vec::new();
    let mut rows = stmt.query(params![WALK.max(limit)])?;
    let mut n = 0;
    while let Some(r) = rows.next()? {
        let run = row(r)?;
        n += 1;
        if n > limit && run.started_at < since {
            break;
        }
        let alerted = run.status == Status::Failed
            || run.verdict == Some(Verdict::ActionFailed)
            || run.decided_by == Some(DecidedBy::FallbackRules);
        if n <= limit || alerted {
            out.push(run);
        }
    }
    Ok(out)
}

pub fn get(conn: &Connection, id: i64) -> Result<Option<Run>> {
    let mut stmt = conn.prepare_cached(&format!("SELECT {COLS} FROM runs WHERE id = ?1"))?;
    let mut rows = stmt.query_map(params![id], row)?;
    Ok(rows.next().transpose()?)
}

/// Mark a finished run for later prompts when it belongs there: an action run, a run with
/// an operator message, or a failed run whose model had started calling tools.
pub fn mark_in_prompt(conn: &Connection, run_id: i64) -> Result<()> {
    conn.execute(
        "UPDATE runs SET in_prompt = 1 WHERE id = ?1 AND (
             verdict = 'action'
             OR EXISTS (SELECT 1 FROM messages WHERE run_id = ?1 AND kind = 'operator')
             OR (status = 'failed' AND EXISTS (SELECT 1 FROM messages WHERE run_id = ?1 AND kind = 'tool_call')))",
        params![run_id],
    )?;
    Ok(())
}

/// Finished passes counted by verdict, a failed pass as "failed" (a key of `None`: a pass
/// that finished ok without a verdict).
/// Passes decided by the model, and by the floor overruling it, finished since `since`
/// (index `runs_ok`: `doctor` reads it on a database of any size).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Decided {
    pub llm: i64,
    pub floor: i64,
}

pub fn decided_since(conn: &Connection, since: Millis) -> Result<Decided> {
    Ok(conn.query_row(
        "SELECT COALESCE(SUM(decided_by = 'llm'), 0), COALESCE(SUM(decided_by = 'floor'), 0)
         FROM runs WHERE finished_at >= ?1 AND status = 'ok'",
        params![since],
        |r| {
            Ok(Decided {
                llm: r.get(0)?,
                floor: r.get(1)?,
            })
        },
    )?)
}

/// The session a run belongs to (None: no such run).
pub fn session_of(conn: &Connection, run_id: i64) -> Result<Option<i64>> {
    use rusqlite::OptionalExtension;
    Ok(conn
        .prepare_cached("SELECT session_id FROM runs WHERE id = ?1")?
        .query_row([run_id], |r| r.get(0))
        .optional()?)
}

/// Whether the newest pass (by id) that finished ok saw an emergency; `None` before any.
pub fn last_ok_emergency(conn: &Connection) -> Result<Option<bool>> {
    use rusqlite::OptionalExtension;
    Ok(conn
        .query_row(
            "SELECT emergency FROM runs WHERE +status = 'ok' ORDER BY id DESC LIMIT 1",
            [],
            |r| r.get(0),
        )
        .optional()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_store;

    fn finished(conn: &Connection, verdict: &str, emergency: bool) -> i64 {
        let id = create(conn, 1, 1, 1, crate::store::runs::StartedBy::Tick, 0).unwrap();
        let o = Outcome {
            verdict: Verdict::parse(verdict).unwrap(),
            ..Outcome::new(emergency)
        };
        finish_ok(conn, id, &o, 1).unwrap();
        id
    }

    #[test]
    fn verdicts_are_counted_with_failures_apart_and_running_left_out() {
        let (_dir, s) = test_store(0);
        let tally =
            || crate::store::tally::counts(&s.conn, &crate::store::tally::RUNS_BY_VERDICT).unwrap();
        assert!(tally().is_empty());
        finished(&s.conn, "action", false);
        finished(&s.conn, "action", false);
        finished(&s.conn, "no-action", false);
        let failed = create(&s.conn, 1, 1, 1, crate::store::runs::StartedBy::Tick, 0).unwrap();
        finish_failed(&s.conn, failed, "boom", 2).unwrap();
        create(&s.conn, 1, 1, 1, crate::store::runs::StartedBy::Tick, 0).unwrap();
        let got: Vec<(String, i64)> = tally().into_iter().collect();
        assert_eq!(
            got,
            vec![
                ("action".into(), 2),
                ("failed".into(), 1),
                ("no-action".into(), 1),
            ]
        );
    }

    /// The newest runs, and the older ones of the alert's window that it counts (a busy
    /// stretch pushed an `action-failed` run past the newest 20 while the alert fired).
    #[test]
    fn the_newest_runs_and_the_alerted_ones_before_them() {
        let (_dir, s) = test_store(0);
        let at = |id: i64, t: Millis| {
            s.conn
                .execute(
                    "UPDATE runs SET started_at = ?2 WHERE id = ?1",
                    params![id, t],
                )
                .unwrap();
        };
        let old_failed = finished(&s.conn, "action-failed", false);
        at(old_failed, 500);
        let failed = finished(&s.conn, "action-failed", false);
        at(failed, 1_000);
        let fine = finished(&s.conn, "no-action", false);
        at(fine, 1_000);
        for _ in 0..25 {
            let id = finished(&s.conn, "no-action", false);
            at(id, 2_000);
        }
        let ids = |since: Millis| -> Vec<i64> {
            recent_and_alerted(&s.conn, 20, since)
                .unwrap()
                .iter()
                .map(|r| r.id)
                .collect()
        };
        let got = ids(900);
        assert_eq!(got.len(), 21, "{got:?}");
        assert_eq!(
            got.last(),
            Some(&failed),
            "older than the window: {old_failed}, and {fine} is fine"
        );
        assert_eq!(ids(1_500).len(), 20);
    }

    #[test]
    fn emergency_of_the_newest_ok_pass() {
        let (_dir, s) = test_store(0);
        assert_eq!(last_ok_emergency(&s.conn).unwrap(), None);
        finished(&s.conn, "action", true);
        assert_eq!(last_ok_emergency(&s.conn).unwrap(), Some(true));
        finished(&s.conn, "no-action", false);
        let failed = create(&s.conn, 1, 1, 1, crate::store::runs::StartedBy::Tick, 0).unwrap();
        finish_failed(&s.conn, failed, "boom", 2).unwrap();
        assert_eq!(last_ok_emergency(&s.conn).unwrap(), Some(false));
    }

    #[test]
    fn passes_decided_by_the_model_and_by_the_floor_are_counted_since() {
        let (_dir, s) = test_store(0);
        for (decided, at) in [
            ("llm", 10),
            ("floor", 20),
            ("floor", 30),
            ("rules", 40),
            ("llm", 1),
        ] {
            let id = create(&s.conn, 1, 1, 1, crate::store::runs::StartedBy::Tick, at).unwrap();
            let o = Outcome {
                verdict: Verdict::Action,
                decided_by: DecidedBy::parse(decided),
                ..Outcome::new(false)
            };
            finish_ok(&s.conn, id, &o, at + 1).unwrap();
        }
        assert_eq!(
            decided_since(&s.conn, 5).unwrap(),
            Decided { llm: 1, floor: 2 }
        );
        assert_eq!(decided_since(&s.conn, 100).unwrap(), Decided::default());
    }
}
