//! The operator's stops in the ledger: those that went through (the hold, the hosts left
//! out of offers), and those on their way to vast.ai (`operator_stops_in_flight`).

use anyhow::Result;
use rusqlite::{params, Connection};

use crate::clock::Millis;

/// Our instances whose last start, stop or destroy that went through is the operator's stop
/// (`instances stop ID` with `vast.stop_mode = "stop"`): kept stopped on purpose, never
/// destroyed as stopped too long (a warm spare's disk is the operator's to end). The same
/// stop sent again because vast.ai did not do it (`run::undone`, actor `fleetagent`) is
/// still the operator's.
pub fn operator_stopped(conn: &Connection) -> Result<Vec<i64>> {
    let mut st = conn.prepare_cached(
        "SELECT DISTINCT a.instance_id FROM actions a
          WHERE a.kind = 'stop' AND a.outcome = 'ok' AND a.actor = 'operator'
            AND a.instance_id IS NOT NULL
            AND NOT EXISTS (SELECT 1 FROM actions b
                             WHERE b.instance_id = a.instance_id AND b.id > a.id
                               AND b.kind IN ('start', 'stop', 'destroy') AND b.outcome = 'ok'
                               AND NOT (b.kind = 'stop' AND b.actor = 'fleetagent'))",
    )?;
    let ids = st
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<Vec<i64>>>()?;
    Ok(ids)
}

/// The hosts (`machine_id`) of the instances the operator stopped or destroyed since
/// `since`, by id.
pub fn operator_hosts_since(conn: &Connection, since: Millis) -> Result<Vec<i64>> {
    let mut st = conn.prepare_cached(
        "SELECT DISTINCT i.machine_id FROM actions a JOIN instances i ON i.label = a.label
          WHERE a.actor = 'operator' AND a.kind IN ('stop', 'destroy') AND a.outcome = 'ok'
            AND a.created_at >= ?1 AND i.machine_id IS NOT NULL
          ORDER BY i.machine_id",
    )?;
    let ids = st
        .query_map(params![since], |r| r.get(0))?
        .collect::<rusqlite::Result<Vec<i64>>>()?;
    Ok(ids)
}

/// An operator's stop or destroy that went through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorStop {
    pub at: Millis,
    pub instance_id: Option<i64>,
    pub label: Option<String>,
}

/// The operator's latest stop or destroy of one of ours that went through since `since`,
/// for the operator hold (`fleet::OperatorHold`).
pub fn last_operator_stop_since(conn: &Connection, since: Millis) -> Result<Option<OperatorStop>> {
    use rusqlite::OptionalExtension;
    Ok(conn
        .query_row(
            "SELECT created_at, instance_id, label FROM actions
              WHERE kind IN ('stop', 'destroy') AND created_at >= ?1
                AND actor = 'operator' AND outcome = 'ok' AND label IS NOT NULL
              ORDER BY created_at DESC, id DESC LIMIT 1",
            params![since],
            |r| {
                Ok(OperatorStop {
                    at: r.get(0)?,
                    instance_id: r.get(1)?,
                    label: r.get(2)?,
                })
            },
        )
        .optional()?)
}

/// The newest operator's stop typed and not yet recorded (`instances stop ID` adds its row
/// before its listing and deletes it once its stop is recorded or refused), typed since
/// `since`.
pub fn operator_stop_in_flight(conn: &Connection, since: Millis) -> Result<Option<OperatorStop>> {
    use rusqlite::OptionalExtension;
    Ok(conn
        .prepare_cached(
            "SELECT typed_at, instance_id FROM operator_stops_in_flight
              WHERE typed_at >= ?1 ORDER BY typed_at DESC, id DESC LIMIT 1",
        )?
        .query_row(params![since], |r| {
            Ok(OperatorStop {
                at: r.get(0)?,
                instance_id: r.get(1)?,
                label: None,
            })
        })
        .optional()?)
}

/// Mark an operator's stop in flight; its row id, for [`operator_stop_landed`]. Rows older
/// than `forget_before` (killed commands' past any hold) are dropped on the way.
pub fn operator_stop_typed(
    conn: &Connection,
    typed_at: Millis,
    instance_id: i64,
    forget_before: Millis,
) -> Result<i64> {
    conn.prepare_cached("DELETE FROM operator_stops_in_flight WHERE typed_at < ?1")?
        .execute(params![forget_before])?;
    conn.prepare_cached(
        "INSERT INTO operator_stops_in_flight (typed_at, instance_id) VALUES (?1, ?2)",
    )?
    .execute(params![typed_at, instance_id])?;
    Ok(conn.last_insert_rowid())
}

/// The stop marked `row` is recorded or refused: its mark goes (the others' stay).
pub fn operator_stop_landed(conn: &Connection, row: i64) -> Result<()> {
    conn.prepare_cached("DELETE FROM operator_stops_in_flight WHERE id = ?1")?
        .execute(params![row])?;
    Ok(())
}

/// An operator's stop recorded by the call `call_id`: dated when it was typed, as its mark
/// in flight (`mark`) says (the hold and a `resume` or `message` after it count from then),
/// its answer kept as `finished_at`.
pub fn date_operator_stop(conn: &Connection, call_id: &str, mark: i64) -> Result<()> {
    conn.prepare_cached(
        "UPDATE actions SET finished_at = COALESCE(finished_at, created_at),
                            created_at = (SELECT typed_at FROM operator_stops_in_flight WHERE id = ?2)
          WHERE tool_call_id = ?1 AND actor = 'operator'
            AND created_at > (SELECT typed_at FROM operator_stops_in_flight WHERE id = ?2)",
    )?
    .execute(params![call_id, mark])?;
    Ok(())
}

/// How long a mark in flight may wait for its own command before a pass settles it: an
/// operator's command is over long before (its calls are bounded by `vast.timeout_secs`).
pub const MARK_SETTLE_MS: Millis = 5 * 60_000;

/// An operator's stop that vast.ai carried out, recorded by a pass from its mark: the
/// command's host lost the shared database (an HA partition) after vast.ai did it, and kept
/// the record in its own copy only; the shared ledger showed only an earlier refusal
/// (a walkthrough). Marks typed before `before` whose instance is gone, with no stop or
/// destroy of it recorded since by anyone, become the operator's `destroy`, `ok`, dated when
/// typed (the hold counts from then, as it did from the mark); their marks go. Returns the
/// instances so settled.
pub fn settle_lost(
    conn: &Connection,
    run_id: i64,
    before: Millis,
    now: Millis,
) -> Result<Vec<i64>> {
    let lost: Vec<(i64, Millis, i64, String)> = conn
        .prepare_cached(
            "SELECT m.id, m.typed_at, m.instance_id, i.label
               FROM operator_stops_in_flight m JOIN instances i ON i.vast_id = m.instance_id
              WHERE m.typed_at < ?1 AND i.gone_at IS NOT NULL
                AND NOT EXISTS (SELECT 1 FROM actions a
                                 WHERE a.instance_id = m.instance_id
                                   AND a.kind IN ('stop', 'destroy') AND a.outcome = 'ok'
                                   AND a.created_at >= m.typed_at)",
        )?
        .query_map(params![before], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })?
        .collect::<rusqlite::Result<_>>()?;
    let mut settled = Vec::new();
    for (mark, typed_at, instance, label) in lost {
        let detail = format!(
            "recorded by run {run_id} from the operator's stop typed at {}: the instance is gone, and the command's own record never reached this database (its host lost it before vast.ai's answer was written)",
            crate::clock::rfc3339(typed_at)
        );
        conn.prepare_cached(
            "INSERT INTO actions (run_id, kind, outcome, actor, instance_id, label, reason,
                                  detail, created_at, finished_at)
             VALUES (?1, 'destroy', 'ok', 'operator', ?2, ?3, 'instances stop', ?4, ?5, ?6)",
        )?
        .execute(params![run_id, instance, label, detail, typed_at, now])?;
        operator_stop_landed(conn, mark)?;
        settled.push(instance);
    }
    Ok(settled)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_store;

    const NOW: Millis = 1_800_000_000_000;
    const MIN: Millis = 60_000;

    /// A mark whose instance is gone, nothing recorded since: the operator's destroy, once.
    /// One whose instance still lives, one whose end someone recorded, one too young: left.
    #[test]
    fn a_stop_whose_record_was_lost_is_recorded_from_its_mark() {
        let (_dir, s) = test_store(NOW);
        let c = &s.conn;
        for (label, id, gone) in [
            ("a", 1, Some(NOW - 5 * MIN)),
            ("b", 2, None),
            ("c", 3, Some(NOW - 5 * MIN)),
            ("d", 4, Some(NOW - MIN)),
        ] {
            c.execute(
                "INSERT INTO instances (label, vast_id, state, created_at, state_since, gone_at)
                 VALUES (?1, ?2, 'gone', 0, 0, ?3)",
                params![label, id, gone],
            )
            .unwrap();
        }
        // The refusal before the forced stop, and the floor's destroy of c.
        c.execute(
            "INSERT INTO actions (kind, outcome, actor, instance_id, label, created_at)
             VALUES ('destroy', 'refused', 'operator', 1, 'a', ?1),
                    ('destroy', 'ok', 'floor', 3, 'c', ?2)",
            params![NOW - 30 * MIN, NOW - 15 * MIN],
        )
        .unwrap();
        for (id, at) in [
            (1, NOW - 20 * MIN),
            (2, NOW - 20 * MIN),
            (3, NOW - 20 * MIN),
            (4, NOW - 2 * MIN),
        ] {
            operator_stop_typed(c, at, id, 0).unwrap();
        }
        let before = NOW - MARK_SETTLE_MS;
        let run = |at| {
            crate::store::runs::create(c, 1, 1, 1, crate::store::runs::StartedBy::Tick, at).unwrap()
        };
        assert_eq!(settle_lost(c, run(NOW), before, NOW).unwrap(), vec![1]);
        let stop = last_operator_stop_since(c, 0).unwrap().unwrap();
        assert_eq!(
            (stop.at, stop.instance_id, stop.label.as_deref()),
            (NOW - 20 * MIN, Some(1), Some("a"))
        );
        assert!(
            settle_lost(c, run(NOW), before, NOW).unwrap().is_empty(),
            "once"
        );
        let marks: i64 = c
            .query_row("SELECT COUNT(*) FROM operator_stops_in_flight", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(marks, 3, "b, c and d keep theirs");
    }
}
