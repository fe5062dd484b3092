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
