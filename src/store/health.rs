//! What `doctor` reads of the database, each through an index or a bounded walk so that a
//! database of a million rows answers as fast as an empty one (`scripts/bench doctor`): the
//! failed runs of the last hour, the newest finished pass, a pass's first failed call, the
//! first failed probe after a good reading, and a structure check that reads only the edges
//! of each table. And the passes by who decided them, for the metrics file.

use anyhow::Result;
use rusqlite::{params, Connection, OptionalExtension};

use crate::clock::Millis;
use crate::store::runs::{self, Run};

/// The failed runs finished since a time: how many, the oldest's finish, and the newest.
#[derive(Debug, Clone, PartialEq)]
pub struct Failed {
    pub count: i64,
    pub first_at: Millis,
    pub last: Run,
}

/// Runs that finished `failed` (interrupted ones included: recovery marks them failed, but
/// not a pass the backup a database was restored from caught running) at or after `since`. A walk from the newest run back to the first one that finished before
/// `since`: runs finish in the order they start, but for an interrupted one, which the next
/// process marks failed when it starts, before any of its own passes finish. So it reads only
/// the window's runs, without an index every process would parse.
pub fn failed_since(conn: &Connection, since: Millis) -> Result<Option<Failed>> {
    let mut stmt =
        conn.prepare_cached("SELECT id, status, finished_at, error FROM runs ORDER BY id DESC")?;
    let mut rows = stmt.query([])?;
    let (mut count, mut first_at, mut last_id) = (0i64, None::<Millis>, None::<i64>);
    while let Some(r) = rows.next()? {
        let finished: Option<Millis> = r.get(2)?;
        let Some(finished) = finished else {
            continue; // running
        };
        if finished < since {
            break;
        }
        let status: String = r.get(1)?;
        // A pass a backup caught running, restored: its outcome is elsewhere, no failure.
        let error: Option<String> = r.get(3)?;
        if status == "failed" && !runs::caught_by_backup(error.as_deref()) {
            count += 1;
            first_at = Some(first_at.map_or(finished, |f: Millis| f.min(finished)));
            last_id = last_id.or(Some(r.get(0)?));
        }
    }
    let (Some(first_at), Some(id)) = (first_at, last_id) else {
        return Ok(None);
    };
    Ok(runs::get(conn, id)?.map(|last| Failed {
        count,
        first_at,
        last,
    }))
}

/// The latest pass that finished ok, if any: by run id, which only grows (passes never
/// overlap), not by time, which a clock stepped back left in the future (`doctor` then
/// judged an old pass, green while the newest refused every launch).
pub fn last_ok_pass(conn: &Connection) -> Result<Option<Run>> {
    let id: Option<i64> = conn
        .query_row(
            // `+status`: by the rowid, newest first, to the first ok (the `runs_ok` index
            // sorted every ok pass ever: 8 ms at a year of passes).
            "SELECT id FROM runs WHERE +status = 'ok' ORDER BY id DESC LIMIT 1",
            [],
            |r| r.get(0),
        )
        .optional()?;
    match id {
        Some(id) => runs::get(conn, id),
        None => Ok(None),
    }
}

/// The guardrail codes of run `run_id`'s refused launches, each once, and how many of its
/// launches went through (ok or a dry run) or may have (an open intent).
pub fn launch_refusals(conn: &Connection, run_id: i64) -> Result<(Vec<String>, i64)> {
    let mut stmt = conn.prepare_cached(
        "SELECT DISTINCT COALESCE(code, 'refused') FROM actions
          WHERE run_id = ?1 AND kind = 'launch' AND outcome = 'refused' ORDER BY 1",
    )?;
    let codes = stmt
        .query_map(params![run_id], |r| r.get(0))?
        .collect::<rusqlite::Result<Vec<String>>>()?;
    let through: i64 = conn.query_row(
        "SELECT COUNT(*) FROM actions WHERE run_id = ?1 AND kind = 'launch'
            AND outcome IN ('ok', 'dry_run', 'intent')",
        params![run_id],
        |r| r.get(0),
    )?;
    Ok((codes, through))
}

/// How many launches of run `run_id` failed at vast.ai, and the first one's detail; None
/// when none did (index `actions_run`).
pub fn failed_launches(conn: &Connection, run_id: i64) -> Result<Option<(i64, String)>> {
    let (n, first): (i64, Option<String>) = conn.query_row(
        "SELECT COUNT(*), (SELECT COALESCE(detail, '') FROM actions
                            WHERE run_id = ?1 AND kind = 'launch' AND outcome = 'failed'
                            ORDER BY id LIMIT 1)
           FROM actions WHERE run_id = ?1 AND kind = 'launch' AND outcome = 'failed'",
        params![run_id],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    Ok((n > 0).then(|| (n, first.unwrap_or_default())))
}

/// The detail of the first call of run `run_id` that failed at vast.ai (index `actions_run`).
pub fn first_failed_action(conn: &Connection, run_id: i64) -> Result<Option<(String, String)>> {
    Ok(conn
        .query_row(
            "SELECT kind, COALESCE(detail, '') FROM actions
              WHERE run_id = ?1 AND outcome = 'failed' ORDER BY id LIMIT 1",
            params![run_id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?)
}

/// A pass's ledger rows now: how many went through (a create that may have gone through is
/// settled `ok` by a later pass that finds its label) and how many are still open intents.
pub fn run_outcomes_now(conn: &Connection, run_id: i64) -> Result<(i64, i64)> {
    Ok(conn.query_row(
        "SELECT COALESCE(SUM(outcome = 'ok'), 0), COALESCE(SUM(outcome = 'intent'), 0)
           FROM actions WHERE run_id = ?1",
        params![run_id],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?)
}

/// When the first pass after `after` found the demand unknown (index `samples_at`; the
/// walk stops at the first such sample).
pub fn first_failed_probe_after(conn: &Connection, after: Millis) -> Result<Option<Millis>> {
    Ok(conn
        .query_row(
            "SELECT at FROM samples WHERE at > ?1 AND demand_ok = 0 ORDER BY at LIMIT 1",
            params![after],
            |r| r.get(0),
        )
        .optional()?)
}

/// A structure check whose cost does not grow with the database: the schema, then the
/// first and the last row of every table (the root page and both edges of its b-tree).
/// A damaged page on that path fails here with SQLite's own error (`DatabaseCorrupt`); a
/// page deep inside a large table is found only by a reader that reaches it, and by
/// `PRAGMA quick_check`, which `fleetagent backup` runs on its copy.
pub fn edge_check(conn: &Connection) -> Result<()> {
    let tables: Vec<String> = {
        let mut st = conn.prepare("SELECT name FROM sqlite_master WHERE type = 'table'")?;
        let rows = st
            .query_map([], |r| r.get(0))?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        rows
    };
    // Every table this build's schema has, where the version says it is this build's: a
    // table dropped by hand reads as SQLite's bare "no such table" in every command.
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if version == crate::store::SCHEMA_VERSION {
        let fresh = crate::store::Store::open_memory(0)?;
        let mut st = fresh
            .conn
            .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")?;
        let expected = st
            .query_map([], |r| r.get::<_, String>(0))?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        let missing: Vec<&String> = expected.iter().filter(|t| !tables.contains(t)).collect();
        if !missing.is_empty() {
            anyhow::bail!(
                "table(s) {} missing, though the schema version ({version}) has them: the database was changed by hand or damaged",
                missing.iter().map(|t| t.as_str()).collect::<Vec<_>>().join(", ")
            );
        }
        // And every column of them (a column dropped by hand failed only the queries that
        // read it).
        let columns = |conn: &Connection, t: &str| -> Result<Vec<String>> {
            let mut st = conn.prepare("SELECT name FROM pragma_table_info(?1)")?;
            let names = st
                .query_map([t], |r| r.get(0))?
                .collect::<rusqlite::Result<Vec<String>>>()?;
            Ok(names)
        };
        for t in &expected {
            let have = columns(conn, t)?;
            let gone: Vec<String> = columns(&fresh.conn, t)?
                .into_iter()
                .filter(|c| !have.contains(c))
                .collect();
            if !gone.is_empty() {
                anyhow::bail!(
                    "table {t} lacks column(s) {}, though the schema version ({version}) has them: the database was changed by hand or damaged",
                    gone.join(", ")
                );
            }
        }
    }
    for t in tables {
        let quoted = format!("\"{}\"", t.replace('"', "\"\""));
        for order in ["ASC", "DESC"] {
            let sql = format!("SELECT * FROM {quoted} ORDER BY rowid {order} LIMIT 1");
            let mut st = conn.prepare(&sql)?;
            let mut rows = st.query([])?;
            if let Some(row) = rows.next()? {
                // Read every column: an overflow page is on the path too.
                for i in 0..row.as_ref().column_count() {
                    let _ = row.get_ref(i)?;
                }
            }
        }
    }
    Ok(())
}

/// An operator's stop or destroy that failed (see [`operator_stops_failed`]).
#[derive(Debug, Clone, PartialEq)]
pub struct FailedStop {
    pub vast_id: i64,
    pub label: String,
    pub kind: String,
    pub detail: String,
    pub at: Millis,
}

/// The operator's stops and destroys that failed and were not followed by one that went
/// through, for instances of ours still listed (not gone, not stopped): each instance's
/// latest such failure, newest first. Nothing sends
/// them again: a pass is paused after the panic button, and the rules know nothing of the
/// operator's order.
pub fn operator_stops_failed(conn: &Connection) -> Result<Vec<FailedStop>> {
    let mut stmt = conn.prepare(
        "SELECT a.instance_id, i.label, a.kind, COALESCE(a.detail, ''), a.created_at
           FROM actions a JOIN instances i ON i.vast_id = a.instance_id
          WHERE a.actor = 'operator' AND a.kind IN ('stop', 'destroy') AND a.outcome = 'failed'
            AND i.state NOT IN ('gone', 'stopped')
            AND NOT EXISTS (SELECT 1 FROM actions b
                             WHERE b.instance_id = a.instance_id AND b.id > a.id
                               AND b.kind IN ('stop', 'destroy') AND b.outcome = 'ok')
            AND a.id = (SELECT MAX(c.id) FROM actions c
                         WHERE c.instance_id = a.instance_id AND c.actor = 'operator'
                           AND c.kind IN ('stop', 'destroy'))
          ORDER BY a.id DESC",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok(FailedStop {
            vast_id: r.get(0)?,
            label: r.get(1)?,
            kind: r.get(2)?,
            detail: r.get(3)?,
            at: r.get(4)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::runs::{ActionCounts, Outcome, StartedBy, Verdict};
    use crate::store::test_store;

    /// A table dropped by hand is named by the structure check, and the bare "no such table"
    /// an ordinary query then meets reads as a damaged database (with the recovery hint).
    #[test]
    fn a_dropped_table_is_a_damaged_database() {
        let (_dir, s) = test_store(0);
        edge_check(&s.conn).unwrap();
        s.conn.execute_batch("DROP TABLE wakes").unwrap();
        let err = edge_check(&s.conn).unwrap_err().to_string();
        assert!(
            err.starts_with("table(s) wakes missing, though the schema version"),
            "{err}"
        );
        let query = s
            .conn
            .query_row("SELECT COUNT(*) FROM wakes", [], |r| r.get::<_, i64>(0))
            .map_err(anyhow::Error::from)
            .unwrap_err();
        assert!(crate::error::is_damaged_database(&query), "{query:#}");
        let (_dir, s) = test_store(0);
        s.conn
            .execute_batch("ALTER TABLE runs DROP COLUMN decided_by")
            .unwrap();
        let err = edge_check(&s.conn).unwrap_err().to_string();
        assert!(
            err.starts_with("table runs lacks column(s) decided_by"),
            "{err}"
        );
    }

    #[test]
    fn failed_runs_of_the_last_hour_and_the_last_ok_pass() {
        let (_dir, s) = test_store(0);
        assert_eq!(failed_since(&s.conn, 0).unwrap(), None);
        assert_eq!(last_ok_pass(&s.conn).unwrap(), None);
        let mut ids = Vec::new();
        for (at, ok) in [(100, false), (200, true), (300, false), (400, false)] {
            let id = runs::create(&s.conn, 1, 1, 1, StartedBy::Tick, at).unwrap();
            if ok {
                let o = Outcome {
                    verdict: Verdict::ActionFailed,
                    actions: ActionCounts {
                        failed: 2,
                        ..ActionCounts::default()
                    },
                    ..Outcome::new(false)
                };
                runs::finish_ok(&s.conn, id, &o, at + 10).unwrap();
            } else {
                runs::finish_failed(&s.conn, id, &format!("boom {at}"), at + 10).unwrap();
            }
            ids.push(id);
        }
        let f = failed_since(&s.conn, 250).unwrap().unwrap();
        assert_eq!((f.count, f.first_at, f.last.id), (2, 310, ids[3]));
        assert_eq!(f.last.error.as_deref(), Some("boom 400"));
        assert_eq!(failed_since(&s.conn, 500).unwrap(), None);
        let last = last_ok_pass(&s.conn).unwrap().unwrap();
        assert_eq!(
            (last.id, last.verdict, last.actions.failed),
            (ids[1], Some(Verdict::ActionFailed), 2)
        );
        // A pass interrupted long ago is marked failed by the next process when it starts:
        // finished within the window although it started before the passes that follow it
        // in the walk. Then one more, running.
        let interrupted = runs::create(&s.conn, 1, 1, 1, StartedBy::Tick, 1_000).unwrap();
        let next = runs::create(&s.conn, 1, 2, 1, StartedBy::Tick, 9_000).unwrap();
        runs::finish_failed(&s.conn, interrupted, "interrupted", 9_000).unwrap();
        runs::finish_ok(&s.conn, next, &Outcome::new(false), 9_050).unwrap();
        runs::create(&s.conn, 1, 3, 1, StartedBy::Tick, 9_100).unwrap();
        let f = failed_since(&s.conn, 8_000).unwrap().unwrap();
        assert_eq!((f.count, f.first_at, f.last.id), (1, 9_000, interrupted));
        let last = last_ok_pass(&s.conn).unwrap().unwrap();
        assert_eq!(last.id, next);
    }

    #[test]
    fn a_passs_first_failed_call_and_the_first_failed_probe() {
        let (_dir, s) = test_store(0);
        let run = runs::create(&s.conn, 1, 1, 1, StartedBy::Tick, 0).unwrap();
        for (outcome, detail) in [
            ("refused", "budget"),
            ("failed", "HTTP 500"),
            ("failed", "x"),
        ] {
            crate::store::actions::insert(
                &s.conn,
                &crate::store::actions::NewAction {
                    run_id: Some(run),
                    kind: "launch",
                    outcome,
                    actor: "rules",
                    detail: Some(detail),
                    ..Default::default()
                },
                5,
            )
            .unwrap();
        }
        assert_eq!(
            first_failed_action(&s.conn, run).unwrap(),
            Some(("launch".into(), "HTTP 500".into()))
        );
        assert_eq!(first_failed_action(&s.conn, run + 1).unwrap(), None);
        for (at, ok) in [(10, 1), (20, 0), (30, 0), (40, 1)] {
            s.conn
                .execute(
                    "INSERT INTO samples (at, demand_ok, ours_billing, ours_booting, ours_proving,
                                          capacity_pph, target_pph, fleet_dph)
                     VALUES (?1, ?2, 0, 0, 0, 0, 0, 0)",
                    params![at, ok],
                )
                .unwrap();
        }
        assert_eq!(first_failed_probe_after(&s.conn, 10).unwrap(), Some(20));
        assert_eq!(first_failed_probe_after(&s.conn, 30).unwrap(), None);
    }

    #[test]
    fn the_edge_check_passes_a_sound_database_and_fails_a_smashed_root_page() {
        let (dir, s) = test_store(0);
        for i in 0..200 {
            runs::create(&s.conn, 1, 1, 1, StartedBy::Tick, i).unwrap();
        }
        edge_check(&s.conn).unwrap();
        s.conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .unwrap();
        let root: i64 = s
            .conn
            .query_row(
                "SELECT rootpage FROM sqlite_master WHERE name = 'runs'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        let page: i64 = s
            .conn
            .query_row("PRAGMA page_size", [], |r| r.get(0))
            .unwrap();
        drop(s);
        crate::store::damage_page(dir.path(), root, page);
        let conn = Connection::open(dir.path().join(crate::store::DB_FILE)).unwrap();
        let err = edge_check(&conn).unwrap_err();
        assert!(
            crate::error::is_damaged_database(&err),
            "{err:#}: not named a damaged database"
        );
    }
}
