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
/// operator's command is over long before (its listing, its call and the listing that
/// confirms it, each up to 3 exchanges of `vast.timeout_secs`, at most 120 s: a re-test saw
/// a command record at +332 s, after a 5-minute settle had recorded it once already).
pub const MARK_SETTLE_MS: Millis = 30 * 60_000;

/// An operator's stop that vast.ai carried out, recorded by a pass from its mark: the
/// command ended before it could record it (killed, or its host cut from the shared
/// database under `[ha]`, its record left in that host's own copy: a walkthrough's new
/// leader showed only an earlier refusal). A mark typed before `before` is settled when its
/// instance ended within [`MARK_SETTLE_MS`] of the typing (gone: the operator's `destroy`;
/// stopped, under `vast.stop_mode = "stop"`: the operator's `stop`, which keeps its disk from
/// `vast.stopped_max_hours`), and nobody's stop or destroy of it is recorded since. An
/// instance that ended later ended for another reason (a stop pressed away with Ctrl-C
/// before its call, the host lost hours later: a re-test): not the operator's. The row is
/// the operator's, of no run, dated when typed (the hold counts from then, as from the mark);
/// its mark goes. Returns the instances so settled with the kind recorded.
pub fn settle_lost(
    conn: &Connection,
    before: Millis,
    now: Millis,
) -> Result<Vec<(i64, &'static str)>> {
    let lost: Vec<(i64, Millis, i64, String, bool)> = conn
        .prepare_cached(
            "SELECT m.id, m.typed_at, m.instance_id, i.label, i.gone_at IS NOT NULL
               FROM operator_stops_in_flight m JOIN instances i ON i.vast_id = m.instance_id
              WHERE m.typed_at < ?1
                AND (i.gone_at BETWEEN m.typed_at AND m.typed_at + ?2
                     OR (i.gone_at IS NULL AND i.state = 'stopped'
                         AND i.state_since BETWEEN m.typed_at AND m.typed_at + ?2))
                AND NOT EXISTS (SELECT 1 FROM actions a
                                 WHERE a.instance_id = m.instance_id
                                   AND a.kind IN ('stop', 'destroy') AND a.outcome = 'ok'
                                   AND a.created_at >= m.typed_at)",
        )?
        .query_map(params![before, MARK_SETTLE_MS], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })?
        .collect::<rusqlite::Result<_>>()?;
    let mut settled: Vec<(i64, &'static str)> = Vec::new();
    for (mark, typed_at, instance, label, gone) in lost {
        // Two marks of one instance (a stop typed twice): one record (a re-test saw two).
        if settled.iter().any(|(i, _)| *i == instance) {
            operator_stop_landed(conn, mark)?;
            continue;
        }
        let kind = if gone { "destroy" } else { "stop" };
        let detail = format!(
            "recorded {} from the operator's stop typed at {}: the instance is {}, and the command ended before it recorded vast.ai's answer (killed, or cut from the shared database)",
            crate::clock::rfc3339(now),
            crate::clock::rfc3339(typed_at),
            if gone { "gone" } else { "stopped" }
        );
        conn.prepare_cached(
            "INSERT INTO actions (kind, outcome, actor, instance_id, label, reason, detail,
                                  created_at, finished_at)
             VALUES (?1, 'ok', 'operator', ?2, ?3, 'instances stop', ?4, ?5, ?6)",
        )?
        .execute(params![kind, instance, label, detail, typed_at, now])?;
        operator_stop_landed(conn, mark)?;
        settled.push((instance, kind));
    }
    Ok(settled)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_store;

    const NOW: Millis = 1_800_000_000_000;
    const MIN: Millis = 60_000;

    /// Marks whose instance ended soon after the typing, nothing recorded since: the
    /// operator's destroy (gone) or stop (stopped), once. Left: one whose instance lives, one
    /// whose end someone recorded, one that ended hours after the typing, one too young.
    #[test]
    fn a_stop_whose_record_was_lost_is_recorded_from_its_mark() {
        let (_dir, s) = test_store(NOW);
        let c = &s.conn;
        let typed = NOW - 3 * 60 * MIN;
        for (label, id, state, since, gone) in [
            ("a", 1, "gone", typed + MIN, Some(typed + MIN)),
            ("b", 2, "proving", typed - MIN, None),
            ("c", 3, "gone", typed + MIN, Some(typed + MIN)),
            ("d", 4, "gone", NOW - MIN, Some(NOW - MIN)),
            ("e", 5, "gone", typed + 120 * MIN, Some(typed + 120 * MIN)),
            ("f", 6, "stopped", typed + 2 * MIN, None),
        ] {
            c.execute(
                "INSERT INTO instances (label, vast_id, state, created_at, state_since, gone_at)
                 VALUES (?1, ?2, ?3, 0, ?4, ?5)",
                params![label, id, state, since, gone],
            )
            .unwrap();
        }
        // The refusal before the forced stop, and the floor's destroy of c.
        c.execute(
            "INSERT INTO actions (kind, outcome, actor, instance_id, label, created_at)
             VALUES ('destroy', 'refused', 'operator', 1, 'a', ?1),
                    ('destroy', 'ok', 'floor', 3, 'c', ?2)",
            params![typed - 30 * MIN, typed + MIN],
        )
        .unwrap();
        for id in [1, 1, 2, 3, 5, 6] {
            operator_stop_typed(c, typed, id, 0).unwrap();
        }
        operator_stop_typed(c, NOW - 2 * MIN, 4, 0).unwrap();
        let before = NOW - MARK_SETTLE_MS;
        assert_eq!(
            settle_lost(c, before, NOW).unwrap(),
            vec![(1, "destroy"), (6, "stop")]
        );
        let rows: Vec<(String, i64, Option<i64>)> = c
            .prepare("SELECT kind, created_at, run_id FROM actions WHERE outcome = 'ok' AND actor = 'operator' ORDER BY instance_id")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(
            rows,
            vec![
                ("destroy".into(), typed, None),
                ("stop".into(), typed, None)
            ],
            "dated when typed, of no pass"
        );
        assert_eq!(operator_stopped(c).unwrap(), vec![6], "its disk is kept");
        assert!(settle_lost(c, before, NOW).unwrap().is_empty(), "once");
        let marks: i64 = c
            .query_row("SELECT COUNT(*) FROM operator_stops_in_flight", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(marks, 4, "b, c, d and e keep theirs");
    }
}
