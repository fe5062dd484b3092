//! Counts over the tables that grow with the install's age (`runs`, `llm_calls`, `actions`),
//! kept between processes (`sql/0012_tally.sql`) for the metrics file, which every pass and
//! every `poll` writes: on a year-old database counting them whole read about 66 MB of pages
//! a minute. A tally counts the rows up to the last id whose rows are all final (no pass still
//! running, no launch still open) once, and each later read only the rows after it; the rows
//! after that id that are final already are counted fresh each time, never stored. A table
//! replaced since it was counted (a restore, a host taking the lead over a mirrored database)
//! no longer shows row `upto` as it was, and the tally is counted afresh.

use std::collections::BTreeMap;

use anyhow::Result;
use rusqlite::{params, Connection, OptionalExtension};

/// What one tally counts. The SQL texts take `?1` and `?2` as an id range `(?1, ?2]`.
pub struct Source {
    pub name: &'static str,
    /// The highest id whose rows are all final (0 when none is).
    pub upto: &'static str,
    /// A time of row `?1` (NULL when there is no such row): the check that it is the row
    /// that was counted.
    pub check: &'static str,
    /// `(key, n)` over the final rows with ids in `(?1, ?2]`.
    pub count: &'static str,
}

/// Passes that finished, by verdict (`failed` for a failed pass); `runs_total`.
pub const RUNS_BY_VERDICT: Source = Source {
    name: "runs_by_verdict",
    upto: RUNS_UPTO,
    check: "SELECT started_at FROM runs WHERE id = ?1",
    count: "SELECT CASE WHEN status = 'failed' THEN 'failed' ELSE COALESCE(verdict, 'none') END,
                   COUNT(*)
              FROM runs WHERE id > ?1 AND id <= ?2 AND status <> 'running' GROUP BY 1",
};

/// Passes that finished ok, by who decided them; `runs_decided_total`.
pub const RUNS_BY_DECIDER: Source = Source {
    name: "runs_by_decider",
    upto: RUNS_UPTO,
    check: "SELECT started_at FROM runs WHERE id = ?1",
    count: "SELECT decided_by, COUNT(*) FROM runs
             WHERE id > ?1 AND id <= ?2 AND status = 'ok' AND decided_by IS NOT NULL GROUP BY 1",
};

/// Model requests (`calls`) and the sum of their estimates (`estimated`).
pub const LLM_CALLS: Source = Source {
    name: "llm_calls",
    upto: "SELECT COALESCE(MAX(id), 0) FROM llm_calls",
    check: "SELECT at FROM llm_calls WHERE id = ?1",
    count: "SELECT 'calls', COUNT(*) FROM llm_calls WHERE id > ?1 AND id <= ?2
            UNION ALL
            SELECT 'estimated', COALESCE(SUM(prompt_tokens_est), 0) FROM llm_calls
             WHERE id > ?1 AND id <= ?2",
};

/// Refused actions by `kind code` (`code` empty when none was kept).
pub const REFUSALS: Source = Source {
    name: "refusals",
    upto: "SELECT COALESCE((SELECT MIN(id) FROM actions WHERE outcome = 'intent') - 1,
                           (SELECT MAX(id) FROM actions), 0)",
    check: "SELECT created_at FROM actions WHERE id = ?1",
    count: "SELECT kind || ' ' || COALESCE(code, ''), COUNT(*) FROM actions
             WHERE id > ?1 AND id <= ?2 AND outcome = 'refused' GROUP BY 1",
};

const RUNS_UPTO: &str = "SELECT COALESCE((SELECT MIN(id) FROM runs WHERE status = 'running') - 1,
                                         (SELECT MAX(id) FROM runs), 0)";

/// The counts of `src` over every final row, the stored tally brought up to date (written
/// back when it moved).
pub fn counts(conn: &Connection, src: &Source) -> Result<BTreeMap<String, i64>> {
    let upto: i64 = conn.prepare_cached(src.upto)?.query_row([], |r| r.get(0))?;
    let check = |id: i64| -> Result<Option<i64>> {
        Ok(conn
            .prepare_cached(src.check)?
            .query_row([id], |r| r.get(0))
            .optional()?
            .flatten())
    };
    let mark: Option<(i64, Option<i64>)> = conn
        .prepare_cached("SELECT upto, check_at FROM tally_marks WHERE name = ?1")?
        .query_row([src.name], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let (from, mut out) = match mark {
        Some((m, at)) if m <= upto && (m == 0 || check(m)? == at) => (m, stored(conn, src)?),
        _ => (0, BTreeMap::new()),
    };
    if from != upto || mark.is_none() {
        add(conn, src, from, upto, &mut out)?;
        let tx = conn.unchecked_transaction()?;
        tx.prepare_cached("DELETE FROM tally WHERE name = ?1")?
            .execute([src.name])?;
        for (k, n) in &out {
            tx.prepare_cached("INSERT INTO tally (name, key, n) VALUES (?1, ?2, ?3)")?
                .execute(params![src.name, k, n])?;
        }
        tx.prepare_cached(
            "INSERT INTO tally_marks (name, upto, check_at) VALUES (?1, ?2, ?3)
             ON CONFLICT (name) DO UPDATE SET upto = ?2, check_at = ?3",
        )?
        .execute(params![src.name, upto, check(upto)?])?;
        tx.commit()?;
    }
    // Final rows after `upto` (a pass still running before them, a launch still open).
    add(conn, src, upto, i64::MAX, &mut out)?;
    Ok(out)
}

fn stored(conn: &Connection, src: &Source) -> Result<BTreeMap<String, i64>> {
    let mut stmt = conn.prepare_cached("SELECT key, n FROM tally WHERE name = ?1")?;
    let rows = stmt
        .query_map([src.name], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<BTreeMap<String, i64>>>()?;
    Ok(rows)
}

fn add(
    conn: &Connection,
    src: &Source,
    from: i64,
    to: i64,
    out: &mut BTreeMap<String, i64>,
) -> Result<()> {
    let mut stmt = conn.prepare_cached(src.count)?;
    let rows = stmt.query_map(params![from, to], |r| {
        Ok((r.get::<_, Option<String>>(0)?, r.get::<_, i64>(1)?))
    })?;
    for row in rows {
        let (k, n) = row?;
        *out.entry(k.unwrap_or_default()).or_default() += n;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_store;

    fn run(conn: &Connection, status: &str, verdict: Option<&str>, at: i64) -> i64 {
        conn.execute(
            "INSERT INTO runs (session_id, pid, pass, started_by, status, verdict, started_at)
             VALUES (1, 1, 1, 'tick', ?1, ?2, ?3)",
            params![status, verdict, at],
        )
        .unwrap();
        conn.last_insert_rowid()
    }

    fn full(conn: &Connection) -> BTreeMap<String, i64> {
        let mut out = BTreeMap::new();
        add(conn, &RUNS_BY_VERDICT, 0, i64::MAX, &mut out).unwrap();
        out
    }

    /// The tally agrees with a count of the whole table at every step: rows added, a pass
    /// still running before finished ones, that pass finishing, and the table replaced
    /// under it (the same ids, other rows).
    #[test]
    fn a_tally_counts_each_final_row_once_and_recounts_a_replaced_table() {
        let (_dir, s) = test_store(0);
        let c = &s.conn;
        let check = |what: &str| {
            assert_eq!(counts(c, &RUNS_BY_VERDICT).unwrap(), full(c), "{what}");
        };
        check("empty");
        run(c, "ok", Some("no-action"), 10);
        run(c, "failed", None, 20);
        check("two");
        let open = run(c, "running", None, 30);
        run(c, "ok", Some("action"), 40);
        check("a pass running before a finished one");
        let (upto, _): (i64, Option<i64>) = c
            .query_row(
                "SELECT upto, check_at FROM tally_marks WHERE name = 'runs_by_verdict'",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!(upto, open - 1, "stored only up to the running pass");
        c.execute(
            "UPDATE runs SET status = 'ok', verdict = 'action' WHERE id = ?1",
            [open],
        )
        .unwrap();
        check("the running pass finished");
        assert_eq!(counts(c, &RUNS_BY_VERDICT).unwrap()["action"], 2);
        // Replaced: the counted rows now say other things (a restore).
        c.execute("DELETE FROM runs", []).unwrap();
        for at in [11, 21, 31, 41] {
            run(c, "ok", Some("no-action"), at);
        }
        c.execute("UPDATE runs SET id = id - 4", []).unwrap();
        check("replaced");
        assert_eq!(counts(c, &RUNS_BY_VERDICT).unwrap()["no-action"], 4);
    }
}
