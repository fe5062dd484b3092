//! The reads of the simulation report (`sim`): counts over the runs, events, wakes, the action
//! ledger and the LLM calls of a finished simulation, grouped by table. Read only.

use std::collections::BTreeMap;

use anyhow::Result;
use rusqlite::{params, Connection, OptionalExtension};

use crate::clock::Millis;
use crate::store::tally;

/// A pass, as the report reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunSpan {
    pub id: i64,
    pub status: String,
    pub started_at: Millis,
    pub finished_at: Option<Millis>,
    pub emergency: bool,
}

/// Counts over the runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunCounts {
    /// By verdict; a run without one under its status (`running`, `failed`).
    pub by_verdict: BTreeMap<String, u64>,
    /// Passes that finished, by who decided (`none` when nobody did).
    pub ok_by_decider: BTreeMap<String, u64>,
    pub skipped: u64,
    /// Runs whose LLM turn failed.
    pub llm_failed: u64,
    /// Runs decided by the fallback rules.
    pub fallback: u64,
    /// Wakes claimed by the passes that finished.
    pub wakes_claimed_by_ok: u64,
    /// When the last pass that finished started.
    pub last_ok_start: Option<Millis>,
}

/// The first pass whose model turn failed (the run's `llm_error`): its run, when it started,
/// and why.
pub fn first_llm_failure(conn: &Connection) -> Result<Option<(i64, Millis, String)>> {
    let mut stmt = conn.prepare(
        "SELECT id, started_at, llm_error FROM runs WHERE llm_error IS NOT NULL ORDER BY id LIMIT 1",
    )?;
    let mut rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
    Ok(rows.next().transpose()?)
}

/// Totals over the LLM calls (0 when there were none).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LlmTotals {
    pub calls: u64,
    pub prompt_tokens_max: i64,
    pub prompt_tokens_total: i64,
}

/// The events' history, by the pass that claimed each: what the report adds to
/// [`events::counts`](crate::store::events::counts) (waiting, deferred, failed: the counts
/// `inspect`, `doctor` and the metrics read).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventHistory {
    pub inserted: u64,
    pub by_kind: BTreeMap<String, u64>,
    /// Claimed by a pass that finished.
    pub claimed_by_ok: u64,
    /// Claimed by a pass that failed or is still running.
    pub claimed_by_not_ok: u64,
}

/// The wakes' history: what the report adds to [`wakes::counts`](crate::store::wakes::counts)
/// (pending, overdue, failed).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WakeHistory {
    pub created: u64,
    pub processed: u64,
    pub cancelled: u64,
    /// Processed by no run, or by one that did not finish.
    pub processed_by_not_ok: u64,
}

/// Counts over the action ledger. Stops count `stop` and `destroy` alike.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LedgerCounts {
    pub launches_ok: u64,
    pub launches_failed: u64,
    pub launch_intents: u64,
    /// Refused launches by their `error` code.
    pub launch_refusals: BTreeMap<String, u64>,
    pub stops_ok: u64,
    pub stops_failed: u64,
    pub stop_refusals: BTreeMap<String, u64>,
    /// Stops and destroys (whatever their outcome) by the fallback rules.
    pub fallback_stops: u64,
}

fn count(conn: &Connection, sql: &str) -> Result<u64> {
    Ok(conn.query_row(sql, [], |r| r.get::<_, i64>(0))? as u64)
}

/// `sql` yields (key, count) rows; a NULL key counts as `none`.
fn grouped(conn: &Connection, sql: &str) -> Result<BTreeMap<String, u64>> {
    let mut stmt = conn.prepare(sql)?;
    let rows = stmt
        .query_map([], |r| {
            Ok((r.get::<_, Option<String>>(0)?, r.get::<_, i64>(1)?))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let mut m = BTreeMap::new();
    for (k, n) in rows {
        *m.entry(k.unwrap_or_else(|| "none".into())).or_insert(0) += n as u64;
    }
    Ok(m)
}

/// Refusals of these kinds (an SQL list: `'stop', 'destroy'`) by their guardrail's code
/// (`actions.code`; `other` when it has none).
fn refusals(conn: &Connection, kinds: &str) -> Result<BTreeMap<String, u64>> {
    grouped(
        conn,
        &format!(
            "SELECT COALESCE(code, 'other'), COUNT(*) FROM actions
              WHERE kind IN ({kinds}) AND outcome = 'refused' GROUP BY 1"
        ),
    )
}

/// Every run, by start time.
pub fn runs(conn: &Connection) -> Result<Vec<RunSpan>> {
    let mut stmt = conn.prepare(
        "SELECT id, status, started_at, finished_at, emergency FROM runs ORDER BY started_at, id",
    )?;
    let rows = stmt
        .query_map([], |r| {
            Ok(RunSpan {
                id: r.get(0)?,
                status: r.get(1)?,
                started_at: r.get(2)?,
                finished_at: r.get(3)?,
                emergency: r.get(4)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// The metrics' tally by decider ([`tally::RUNS_BY_DECIDER`]), and `none` for the passes
/// nobody decided.
fn ok_by_decider(conn: &Connection) -> Result<BTreeMap<String, u64>> {
    let mut m: BTreeMap<String, u64> = tally::counts(conn, &tally::RUNS_BY_DECIDER)?
        .into_iter()
        .map(|(k, n)| (k, n as u64))
        .collect();
    let none = count(
        conn,
        "SELECT COUNT(*) FROM runs WHERE status = 'ok' AND decided_by IS NULL",
    )?;
    if none > 0 {
        m.insert("none".into(), none);
    }
    Ok(m)
}

pub fn run_counts(conn: &Connection) -> Result<RunCounts> {
    Ok(RunCounts {
        by_verdict: grouped(
            conn,
            "SELECT COALESCE(verdict, status), COUNT(*) FROM runs GROUP BY 1",
        )?,
        ok_by_decider: ok_by_decider(conn)?,
        skipped: count(conn, "SELECT COUNT(*) FROM runs WHERE verdict = 'skipped'")?,
        llm_failed: count(
            conn,
            "SELECT COUNT(*) FROM runs WHERE llm_error IS NOT NULL",
        )?,
        fallback: count(
            conn,
            "SELECT COUNT(*) FROM runs WHERE decided_by = 'fallback-rules'",
        )?,
        wakes_claimed_by_ok: count(
            conn,
            "SELECT COALESCE(SUM(wakes_claimed), 0) FROM runs WHERE status = 'ok'",
        )?,
        last_ok_start: conn.query_row(
            "SELECT MAX(started_at) FROM runs WHERE status = 'ok'",
            [],
            |r| r.get(0),
        )?,
    })
}

/// The calls and their tokens are the metrics' tally ([`tally::LLM_CALLS`]); the largest
/// prompt is the report's own.
pub fn llm_totals(conn: &Connection) -> Result<LlmTotals> {
    let totals = tally::counts(conn, &tally::LLM_CALLS)?;
    let total = |k: &str| totals.get(k).copied().unwrap_or(0);
    let max: Option<i64> =
        conn.query_row("SELECT MAX(prompt_tokens_est) FROM llm_calls", [], |r| {
            r.get(0)
        })?;
    Ok(LlmTotals {
        calls: total("calls") as u64,
        prompt_tokens_max: max.unwrap_or(0),
        prompt_tokens_total: total("estimated"),
    })
}

pub fn event_history(conn: &Connection) -> Result<EventHistory> {
    let claimed_by_ok = count(
        conn,
        "SELECT COUNT(*) FROM events e JOIN runs r ON r.id = e.claimed_by WHERE r.status = 'ok'",
    )?;
    let claimed_by_not_ok = count(
        conn,
        "SELECT COUNT(*) FROM events e JOIN runs r ON r.id = e.claimed_by WHERE r.status <> 'ok'",
    )?;
    Ok(EventHistory {
        inserted: count(conn, "SELECT COUNT(*) FROM events")?,
        by_kind: grouped(conn, "SELECT kind, COUNT(*) FROM events GROUP BY kind")?,
        claimed_by_ok,
        claimed_by_not_ok,
    })
}

/// When the pass that claimed `event_id` started, if it finished (None: unclaimed, or
/// claimed by a pass that failed or still runs).
pub fn claimed_by_ok_run_at(conn: &Connection, event_id: i64) -> Result<Option<Millis>> {
    Ok(conn
        .query_row(
            "SELECT r.started_at FROM events e JOIN runs r ON r.id = e.claimed_by
              WHERE e.id = ?1 AND r.status = 'ok'",
            params![event_id],
            |r| r.get(0),
        )
        .optional()?)
}

pub fn wake_history(conn: &Connection) -> Result<WakeHistory> {
    let processed = count(
        conn,
        "SELECT COUNT(*) FROM wakes WHERE status = 'processed'",
    )?;
    let processed_by_not_ok = count(
        conn,
        "SELECT COUNT(*) FROM wakes w LEFT JOIN runs r ON r.id = w.processed_by
          WHERE w.status = 'processed' AND (r.id IS NULL OR r.status <> 'ok')",
    )?;
    Ok(WakeHistory {
        created: count(conn, "SELECT COUNT(*) FROM wakes")?,
        processed,
        cancelled: count(
            conn,
            "SELECT COUNT(*) FROM wakes WHERE status = 'cancelled'",
        )?,
        processed_by_not_ok,
    })
}

/// Launches that went out or may have (`ok` and `intent`): when, and whether under the
/// emergency allowance; by time.
pub fn launch_times(conn: &Connection) -> Result<Vec<(Millis, bool)>> {
    let mut stmt = conn.prepare(
        "SELECT created_at, emergency FROM actions WHERE kind = 'launch' AND outcome IN ('ok', 'intent')
         ORDER BY created_at, id",
    )?;
    let rows = stmt
        .query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, bool>(1)?)))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

pub fn ledger_counts(conn: &Connection) -> Result<LedgerCounts> {
    Ok(LedgerCounts {
        launches_ok: count(
            conn,
            "SELECT COUNT(*) FROM actions WHERE kind = 'launch' AND outcome = 'ok'",
        )?,
        launches_failed: count(
            conn,
            "SELECT COUNT(*) FROM actions WHERE kind = 'launch' AND outcome = 'failed'",
        )?,
        launch_intents: count(
            conn,
            "SELECT COUNT(*) FROM actions WHERE kind = 'launch' AND outcome = 'intent'",
        )?,
        launch_refusals: refusals(conn, "'launch'")?,
        stops_ok: count(
            conn,
            "SELECT COUNT(*) FROM actions WHERE kind IN ('stop', 'destroy') AND outcome = 'ok'",
        )?,
        stops_failed: count(
            conn,
            "SELECT COUNT(*) FROM actions WHERE kind IN ('stop', 'destroy') AND outcome = 'failed'",
        )?,
        stop_refusals: refusals(conn, "'stop', 'destroy'")?,
        fallback_stops: count(
            conn,
            "SELECT COUNT(*) FROM actions WHERE actor = 'fallback-rules' AND kind IN ('stop', 'destroy')",
        )?,
    })
}

/// Launch rows (any outcome) of one run.
pub fn launches_in_run(conn: &Connection, run_id: i64) -> Result<u64> {
    Ok(conn.query_row(
        "SELECT COUNT(*) FROM actions WHERE kind = 'launch' AND run_id = ?1",
        params![run_id],
        |r| r.get::<_, i64>(0),
    )? as u64)
}

/// Launches of one run that reached vast.ai: the create was accepted (`ok`).
pub fn launches_ok_in_run(conn: &Connection, run_id: i64) -> Result<u64> {
    Ok(conn.query_row(
        "SELECT COUNT(*) FROM actions WHERE kind = 'launch' AND outcome = 'ok' AND run_id = ?1",
        params![run_id],
        |r| r.get::<_, i64>(0),
    )? as u64)
}

/// What the model sent, read from the conversation. Only the model's tool loop stores tool
/// results (the rules' and the floor's calls leave a note instead), so each one is a call the
/// model made.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelMessages {
    /// Tool calls the tool loop ran (one result each).
    pub tool_calls: u64,
    /// Of those, the ones the registry answered `invalid_args` or `unknown_tool`.
    pub invalid_calls: u64,
    /// The text of every answer of the model that has any and made no tool call, in order: a
    /// call written in such a text ran nothing (beside calls made through `tool_calls`, the
    /// text is narration; they ran).
    pub answer_texts: Vec<String>,
}

pub fn model_messages(conn: &Connection) -> Result<ModelMessages> {
    let tool_calls = count(
        conn,
        "SELECT COUNT(*) FROM messages WHERE role = 'tool' AND kind = 'tool_result'",
    )?;
    let invalid_calls = count(
        conn,
        "SELECT COUNT(*) FROM messages WHERE role = 'tool' AND kind = 'tool_result'
           AND error_code IN ('invalid_args', 'unknown_tool')",
    )?;
    let mut stmt = conn.prepare(
        "SELECT content FROM messages WHERE role = 'assistant' AND kind = 'answer'
           AND content <> '' ORDER BY id",
    )?;
    let answer_texts = stmt
        .query_map([], |r| r.get::<_, String>(0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(ModelMessages {
        tool_calls,
        invalid_calls,
        answer_texts,
    })
}

/// The floor's actions (any outcome) by the rule that asked: its call ids are
/// `floor-<kind>_<run>_<n>` (`run::act::floor`); `other` for an id of another shape.
pub fn floor_actions_by_kind(conn: &Connection) -> Result<BTreeMap<String, u64>> {
    let mut stmt = conn.prepare("SELECT tool_call_id FROM actions WHERE actor = 'floor'")?;
    let ids = stmt
        .query_map([], |r| r.get::<_, Option<String>>(0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let mut m = BTreeMap::new();
    for id in ids {
        let kind = id
            .as_deref()
            .and_then(|i| i.strip_prefix("floor-"))
            .and_then(|i| i.split_once('_'))
            .map(|(k, _)| k)
            .filter(|k| !k.is_empty())
            .unwrap_or("other");
        *m.entry(kind.to_string()).or_insert(0) += 1;
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{events, wakes, OpenMode, Store};

    /// A real database in a temporary state dir, with the runs below.
    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path(), OpenMode::Create, 0).unwrap();
        // id, status, verdict, decided_by, started, finished, emergency, wakes_claimed, llm_error
        let runs = [
            (
                1,
                "ok",
                Some("action"),
                Some("rules"),
                1_000,
                Some(2_000),
                false,
                1,
                None,
            ),
            (
                2,
                "ok",
                Some("skipped"),
                Some("fallback-rules"),
                3_000,
                Some(4_000),
                true,
                2,
                Some("503"),
            ),
            (3, "failed", None, None, 2_500, Some(2_600), false, 0, None),
            (4, "running", None, None, 5_000, None, false, 0, None),
            (
                5,
                "ok",
                Some("no-action"),
                None,
                6_000,
                Some(6_100),
                false,
                0,
                None,
            ),
        ];
        for (id, status, verdict, decided, started, finished, emergency, wakes, llm_error) in runs {
            s.conn
                .execute(
                    "INSERT INTO runs (id, session_id, pid, pass, started_by, status, verdict,
                       decided_by, started_at, finished_at, emergency, wakes_claimed, llm_error)
                     VALUES (?1, 1, 0, 1, 'tick', ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                    params![
                        id, status, verdict, decided, started, finished, emergency, wakes,
                        llm_error
                    ],
                )
                .unwrap();
        }
        (dir, s)
    }

    fn event(
        s: &Store,
        kind: &str,
        claimed_by: Option<i64>,
        not_before: Option<i64>,
        failed_at: Option<i64>,
    ) -> i64 {
        s.conn
            .execute(
                "INSERT INTO events (priority, kind, reason, created_at, claimed_by, not_before, failed_at)
                 VALUES (1, ?1, 'r', 0, ?2, ?3, ?4)",
                params![kind, claimed_by, not_before, failed_at],
            )
            .unwrap();
        s.conn.last_insert_rowid()
    }

    fn wake(s: &Store, status: &str, due_at: i64, processed_by: Option<i64>) {
        s.conn
            .execute(
                "INSERT INTO wakes (due_at, reason, created_at, created_by, status, processed_by)
                 VALUES (?1, 'r', 0, 'agent', ?2, ?3)",
                params![due_at, status, processed_by],
            )
            .unwrap();
    }

    /// `what`: kind, outcome and actor, as in "launch ok rules".
    fn action(
        s: &Store,
        run: Option<i64>,
        what: &str,
        emergency: bool,
        at: i64,
        detail: Option<&str>,
    ) {
        let w: Vec<&str> = what.split(' ').collect();
        // A refusal's code beside its JSON answer, as the tools write them.
        let code = detail
            .and_then(|d| serde_json::from_str::<serde_json::Value>(d).ok())
            .and_then(|v| v["error"].as_str().map(String::from));
        s.conn
            .execute(
                "INSERT INTO actions (run_id, kind, outcome, actor, emergency, detail, created_at,
                                      code)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                params![run, w[0], w[1], w[2], emergency, detail, at, code],
            )
            .unwrap();
    }

    fn map(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn runs_come_by_start_time() {
        let (_dir, s) = store();
        let runs = runs(&s.conn).unwrap();
        let ids: Vec<i64> = runs.iter().map(|r| r.id).collect();
        assert_eq!(ids, [1, 3, 2, 4, 5]);
        assert_eq!(
            runs[2],
            RunSpan {
                id: 2,
                status: "ok".into(),
                started_at: 3_000,
                finished_at: Some(4_000),
                emergency: true,
            }
        );
        assert_eq!(runs[3].finished_at, None);
    }

    #[test]
    fn run_counts_group_verdicts_and_deciders() {
        let (_dir, s) = store();
        assert_eq!(
            run_counts(&s.conn).unwrap(),
            RunCounts {
                by_verdict: map(&[
                    ("action", 1),
                    ("skipped", 1),
                    ("failed", 1),
                    ("running", 1),
                    ("no-action", 1)
                ]),
                ok_by_decider: map(&[("rules", 1), ("fallback-rules", 1), ("none", 1)]),
                skipped: 1,
                llm_failed: 1,
                fallback: 1,
                wakes_claimed_by_ok: 3,
                last_ok_start: Some(6_000),
            }
        );
        let dir = tempfile::tempdir().unwrap();
        let empty = Store::open(dir.path(), OpenMode::Create, 0).unwrap();
        assert_eq!(run_counts(&empty.conn).unwrap(), RunCounts::default());
    }

    #[test]
    fn llm_totals_are_zero_without_calls() {
        let (_dir, s) = store();
        assert_eq!(llm_totals(&s.conn).unwrap(), LlmTotals::default());
        for (run, tokens) in [(1, 1_200), (2, 3_400)] {
            s.conn
                .execute(
                    "INSERT INTO llm_calls (run_id, at, round, messages, prompt_tokens_est,
                       latency_ms, attempts, outcome) VALUES (?1, 0, 1, 3, ?2, 10, 1, 'ok')",
                    params![run, tokens],
                )
                .unwrap();
        }
        assert_eq!(
            llm_totals(&s.conn).unwrap(),
            LlmTotals {
                calls: 2,
                prompt_tokens_max: 3_400,
                prompt_tokens_total: 4_600,
            }
        );
    }

    #[test]
    fn event_history_tells_claimed_by_a_finished_pass_from_the_rest() {
        let (_dir, s) = store();
        event(&s, "trigger", Some(1), None, None);
        event(&s, "trigger", Some(3), None, None);
        event(&s, "reset", None, None, Some(100));
        event(&s, "message", None, None, None);
        event(&s, "poll", None, Some(9_000), None);
        assert_eq!(
            event_history(&s.conn).unwrap(),
            EventHistory {
                inserted: 5,
                by_kind: map(&[("trigger", 2), ("reset", 1), ("message", 1), ("poll", 1)]),
                claimed_by_ok: 1,
                claimed_by_not_ok: 1,
            }
        );
        // The waiting and failed ones are the store's counts, as inspect reads them.
        let now = events::counts(&s.conn, 8_000).unwrap();
        assert_eq!((now.unconsumed, now.deferred, now.failed), (2, 1, 1));
        assert_eq!(events::counts(&s.conn, 9_000).unwrap().deferred, 0);
    }

    #[test]
    fn an_event_is_answered_when_a_finished_pass_claimed_it() {
        let (_dir, s) = store();
        let by_ok = event(&s, "reset", Some(2), None, None);
        let by_failed = event(&s, "reset", Some(3), None, None);
        let waiting = event(&s, "reset", None, None, None);
        assert_eq!(claimed_by_ok_run_at(&s.conn, by_ok).unwrap(), Some(3_000));
        assert_eq!(claimed_by_ok_run_at(&s.conn, by_failed).unwrap(), None);
        assert_eq!(claimed_by_ok_run_at(&s.conn, waiting).unwrap(), None);
        assert_eq!(claimed_by_ok_run_at(&s.conn, 999).unwrap(), None);
    }

    #[test]
    fn wake_history_finds_the_ones_processed_badly() {
        let (_dir, s) = store();
        wake(&s, "processed", 500, Some(1));
        wake(&s, "processed", 600, Some(3));
        wake(&s, "processed", 700, None);
        wake(&s, "cancelled", 800, None);
        wake(&s, "pending", 900, None);
        wake(&s, "pending", 7_000, None);
        assert_eq!(
            wake_history(&s.conn).unwrap(),
            WakeHistory {
                created: 6,
                processed: 3,
                cancelled: 1,
                processed_by_not_ok: 2,
            }
        );
        assert_eq!(wakes::counts(&s.conn, 6_000).unwrap().overdue, 1);
        assert_eq!(wakes::counts(&s.conn, 899).unwrap().overdue, 0);
    }

    #[test]
    fn launch_times_are_the_ok_and_intended_launches_by_time() {
        let (_dir, s) = store();
        action(&s, Some(2), "launch ok rules", true, 3_100, None);
        action(&s, Some(1), "launch ok rules", false, 1_100, None);
        action(&s, Some(1), "launch intent rules", false, 1_100, None);
        action(&s, Some(1), "launch failed rules", false, 1_200, None);
        action(&s, Some(1), "stop ok rules", false, 1_300, None);
        assert_eq!(
            launch_times(&s.conn).unwrap(),
            [(1_100, false), (1_100, false), (3_100, true)]
        );
    }

    #[test]
    fn ledger_counts_count_outcomes_and_refusal_codes() {
        let (_dir, s) = store();
        action(&s, Some(1), "launch ok rules", false, 1, None);
        action(&s, Some(1), "launch ok rules", false, 2, None);
        action(&s, Some(1), "launch failed rules", false, 3, None);
        action(&s, Some(1), "launch intent rules", false, 4, None);
        let budget = r#"{"error":"budget","message":"over the cap"}"#;
        action(&s, Some(1), "launch refused rules", false, 5, Some(budget));
        action(&s, Some(1), "launch refused rules", false, 6, Some(budget));
        action(
            &s,
            Some(1),
            "launch refused rules",
            false,
            7,
            Some("not json"),
        );
        action(&s, Some(2), "stop ok fallback-rules", false, 8, None);
        action(&s, Some(2), "destroy ok rules", false, 9, None);
        action(
            &s,
            Some(2),
            "destroy failed fallback-rules",
            false,
            10,
            None,
        );
        action(
            &s,
            Some(2),
            "stop refused llm",
            false,
            11,
            Some(r#"{"error":"not_ours"}"#),
        );
        action(&s, Some(2), "destroy refused llm", false, 12, None);
        assert_eq!(
            ledger_counts(&s.conn).unwrap(),
            LedgerCounts {
                launches_ok: 2,
                launches_failed: 1,
                launch_intents: 1,
                launch_refusals: map(&[("budget", 2), ("other", 1)]),
                stops_ok: 2,
                stops_failed: 1,
                stop_refusals: map(&[("not_ours", 1), ("other", 1)]),
                fallback_stops: 2,
            }
        );
    }

    #[test]
    fn launches_in_run_count_every_outcome_of_that_run() {
        let (_dir, s) = store();
        action(&s, Some(2), "launch ok rules", true, 1, None);
        action(&s, Some(2), "launch refused rules", true, 2, None);
        action(&s, Some(2), "stop ok rules", true, 3, None);
        action(&s, Some(1), "launch ok rules", false, 4, None);
        assert_eq!(launches_in_run(&s.conn, 2).unwrap(), 2);
        assert_eq!(launches_in_run(&s.conn, 5).unwrap(), 0);
    }

    #[test]
    fn launches_ok_in_run_count_only_the_accepted_creates() {
        let (_dir, s) = store();
        action(&s, Some(2), "launch ok rules", true, 1, None);
        action(&s, Some(2), "launch refused rules", true, 2, None);
        action(&s, Some(2), "launch failed rules", true, 3, None);
        action(&s, Some(2), "launch ok floor", true, 4, None);
        action(&s, Some(1), "launch ok rules", false, 5, None);
        assert_eq!(launches_ok_in_run(&s.conn, 2).unwrap(), 2);
        assert_eq!(launches_ok_in_run(&s.conn, 5).unwrap(), 0);
    }

    fn message(s: &Store, role: &str, kind: &str, content: &str) {
        // A tool result's error code beside its JSON, as the tool loop writes them.
        let code = serde_json::from_str::<serde_json::Value>(content)
            .ok()
            .and_then(|v| v["error"].as_str().map(String::from))
            .filter(|_| role == "tool");
        s.conn
            .execute(
                "INSERT INTO messages (session_id, run_id, role, kind, content, tokens, created_at,
                                       error_code)
                 VALUES (1, 1, ?1, ?2, ?3, 1, 0, ?4)",
                params![role, kind, content, code],
            )
            .unwrap();
    }

    #[test]
    fn model_messages_count_calls_invalid_ones_and_keep_answer_texts() {
        let (_dir, s) = store();
        assert_eq!(model_messages(&s.conn).unwrap(), ModelMessages::default());
        message(&s, "user", "observation", "WORKERS DEAD");
        message(&s, "assistant", "tool_call", "");
        message(&s, "tool", "tool_result", r#"{"ok":true}"#);
        message(
            &s,
            "tool",
            "tool_result",
            r#"{"error":"invalid_args","message":"x"}"#,
        );
        message(&s, "tool", "tool_result", r#"{"error":"unknown_tool"}"#);
        message(&s, "tool", "tool_result", r#"{"error":"rate_limited"}"#);
        message(&s, "tool", "tool_result", "not json");
        message(&s, "assistant", "answer", "functions.launch_instance:");
        message(&s, "assistant", "tool_call", "launching");
        message(&s, "user", "floor", "Floor (the rules ...)");
        assert_eq!(
            model_messages(&s.conn).unwrap(),
            ModelMessages {
                tool_calls: 5,
                invalid_calls: 2,
                answer_texts: vec!["functions.launch_instance:".into()],
            }
        );
    }

    #[test]
    fn floor_actions_are_counted_by_the_rule_their_call_id_names() {
        let (_dir, s) = store();
        assert!(floor_actions_by_kind(&s.conn).unwrap().is_empty());
        for (actor, id) in [
            ("floor", Some("floor-emergency_2_1")),
            ("floor", Some("floor-emergency_2_2")),
            ("floor", Some("floor-flagged_5_1")),
            ("floor", Some("odd")),
            ("floor", None),
            ("rules", Some("rules_1_1")),
            ("llm", Some("floor-emergency_9_9")),
        ] {
            s.conn
                .execute(
                    "INSERT INTO actions (run_id, kind, outcome, actor, tool_call_id, created_at)
                     VALUES (1, 'launch', 'ok', ?1, ?2, 0)",
                    params![actor, id],
                )
                .unwrap();
        }
        assert_eq!(
            floor_actions_by_kind(&s.conn).unwrap(),
            map(&[("emergency", 2), ("flagged", 1), ("other", 2)])
        );
    }
}
