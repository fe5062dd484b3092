//! A pass's stops and destroys on their way to vast.ai (sql/0018_stops_in_flight.sql): marked
//! before the call, the mark deleted in the transaction that writes the ledger's row. What a
//! killed pass left is settled by the next one ([`settle`]).

use anyhow::Result;
use rusqlite::{params, Connection};

use crate::clock::Millis;

/// A stop or destroy about to be sent.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Mark<'a> {
    pub run_id: Option<i64>,
    pub actor: &'a str,
    pub kind: &'a str,
    pub instance_id: i64,
    pub label: Option<&'a str>,
    pub dph: Option<f64>,
    pub tool_call_id: Option<&'a str>,
    pub reason: Option<&'a str>,
    pub flag: Option<&'a str>,
    /// Going out now (else [`sent`] says so once it does).
    pub sent: bool,
}

/// Mark `m` in flight, sent at `at`; its row id, for [`landed`].
pub fn sending(conn: &Connection, m: &Mark<'_>, at: Millis) -> Result<i64> {
    conn.prepare_cached(
        "INSERT INTO stops_in_flight (sent_at, run_id, actor, kind, instance_id, label, dph,
                                      tool_call_id, reason, flag, sent)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
    )?
    .execute(params![
        at,
        m.run_id,
        m.actor,
        m.kind,
        m.instance_id,
        m.label,
        m.dph,
        m.tool_call_id,
        m.reason,
        m.flag,
        m.sent
    ])?;
    Ok(conn.last_insert_rowid())
}

/// The call marked `row` goes out now (a destroy, its spacing over): only a mark so sent is
/// ever recorded as carried out (a re-test killed a pass while its destroy waited, and the
/// instance ended for another reason: recorded as that pass's destroy).
pub fn sent(conn: &Connection, row: i64) -> Result<()> {
    conn.prepare_cached("UPDATE stops_in_flight SET sent = 1 WHERE id = ?1")?
        .execute(params![row])?;
    Ok(())
}

/// The call marked `row` was answered and its answer recorded (or it failed): the mark goes.
pub fn landed(conn: &Connection, row: i64) -> Result<()> {
    conn.prepare_cached("DELETE FROM stops_in_flight WHERE id = ?1")?
        .execute(params![row])?;
    Ok(())
}

/// The marks a pass left (it ended between its call and its row: killed, or the process
/// failed), settled by the next pass once its listing worked and was reconciled (no pass of
/// this host runs beside it; under `[ha]` the mark was pushed with the fence before the call,
/// so the next leader has it). A mark whose instance ended since it was sent (gone, or stopped
/// for a `stop`) and whose end nobody recorded since is recorded as the pass's own stop or
/// destroy (its run, actor, reason and flag), dated when it was sent; any other mark (the
/// instance still up: the call never went out or did nothing) is dropped, and the next
/// decision sees the instance as it is. Returns the (instance, kind) recorded.
pub fn settle(conn: &Connection, now: Millis) -> Result<Vec<(i64, String)>> {
    type Left = (i64, Millis, String, i64, bool);
    let left: Vec<Left> = conn
        .prepare_cached(
            "SELECT m.id, m.sent_at, m.kind, m.instance_id,
                    EXISTS (SELECT 1 FROM instances i
                             WHERE i.vast_id = m.instance_id
                               AND (i.gone_at >= m.sent_at
                                    OR (m.kind = 'stop' AND i.gone_at IS NULL
                                        AND i.state = 'stopped' AND i.state_since >= m.sent_at)))
                    AND NOT EXISTS (SELECT 1 FROM actions a
                                     WHERE a.instance_id = m.instance_id
                                       AND a.kind IN ('stop', 'destroy') AND a.outcome = 'ok'
                                       AND a.created_at >= m.sent_at)
                    AND m.sent = 1
               FROM stops_in_flight m ORDER BY m.id",
        )?
        .query_map([], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })?
        .collect::<rusqlite::Result<_>>()?;
    let mut recorded: Vec<(i64, String)> = Vec::new();
    for (mark, sent_at, kind, instance, ended) in left {
        if ended && !recorded.iter().any(|(i, _)| *i == instance) {
            let detail = format!(
                "recorded {} from its mark: vast.ai carried out this {kind} sent at {}, and the pass ended before it recorded the answer",
                crate::clock::rfc3339(now),
                crate::clock::rfc3339(sent_at)
            );
            conn.prepare_cached(
                "INSERT INTO actions (run_id, kind, outcome, actor, instance_id, label, dph,
                                      tool_call_id, reason, detail, flag, created_at, finished_at)
                 SELECT run_id, kind, 'ok', actor, instance_id, label, dph, tool_call_id, reason,
                        ?2, flag, sent_at, ?3
                   FROM stops_in_flight WHERE id = ?1",
            )?
            .execute(params![mark, detail, now])?;
            recorded.push((instance, kind));
        }
        landed(conn, mark)?;
    }
    Ok(recorded)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_store;

    const NOW: Millis = 1_800_000_000_000;
    const MIN: Millis = 60_000;

    /// Left marks: the destroy whose instance went and the stop whose instance stopped are
    /// recorded as the pass's own, dated when sent; one whose instance is still up, one whose
    /// end is recorded, and one whose instance ended before it was sent are dropped.
    #[test]
    fn what_a_killed_pass_sent_is_recorded_from_its_mark() {
        let (_dir, s) = test_store(NOW);
        let c = &s.conn;
        let sent = NOW - 5 * MIN;
        for (label, id, state, since, gone) in [
            ("a", 1, "gone", NOW - MIN, Some(NOW - MIN)),
            ("b", 2, "stopped", sent + 1, None),
            ("c", 3, "proving", sent - MIN, None),
            ("d", 4, "gone", NOW - MIN, Some(NOW - MIN)),
            ("e", 5, "gone", sent - MIN, Some(sent - MIN)),
        ] {
            c.execute(
                "INSERT INTO instances (label, vast_id, state, created_at, state_since, gone_at)
                 VALUES (?1, ?2, ?3, 0, ?4, ?5)",
                params![label, id, state, since, gone],
            )
            .unwrap();
        }
        c.execute(
            "INSERT INTO runs (id, session_id, pid, pass, started_by, status, verdict, started_at)
             SELECT 7, MAX(id), 1, 1, 'tick', 'failed', NULL, ?1 FROM sessions",
            params![sent - MIN],
        )
        .unwrap();
        c.execute(
            "INSERT INTO actions (kind, outcome, actor, instance_id, label, created_at)
             VALUES ('destroy', 'ok', 'operator', 4, 'd', ?1)",
            params![sent + MIN],
        )
        .unwrap();
        for (id, kind) in [
            (1, "destroy"),
            (2, "stop"),
            (3, "destroy"),
            (4, "destroy"),
            (5, "destroy"),
        ] {
            let m = Mark {
                run_id: Some(7),
                actor: "floor",
                kind,
                instance_id: id,
                label: Some("x"),
                dph: Some(0.4),
                tool_call_id: Some("floor-1"),
                reason: Some("exited"),
                flag: Some("exited"),
                sent: true,
            };
            sending(c, &m, sent).unwrap();
        }
        // A destroy killed while it waited for its spacing, never sent: its instance went for
        // another reason, not recorded as this pass's.
        let waited = Mark {
            run_id: Some(7),
            actor: "floor",
            kind: "destroy",
            instance_id: 1,
            sent: false,
            ..Default::default()
        };
        sending(c, &waited, sent).unwrap();
        assert_eq!(
            settle(c, NOW).unwrap(),
            vec![(1, "destroy".to_string()), (2, "stop".to_string())]
        );
        type Row = (String, i64, Option<i64>, String, Option<String>);
        let rows: Vec<Row> = c
            .prepare(
                "SELECT kind, created_at, run_id, actor, flag FROM actions
                  WHERE actor = 'floor' ORDER BY instance_id",
            )
            .unwrap()
            .query_map([], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let row = |kind: &str| {
            (
                kind.to_string(),
                sent,
                Some(7),
                "floor".to_string(),
                Some("exited".to_string()),
            )
        };
        assert_eq!(rows, vec![row("destroy"), row("stop")]);
        let marks: i64 = c
            .query_row("SELECT COUNT(*) FROM stops_in_flight", [], |r| r.get(0))
            .unwrap();
        assert_eq!(marks, 0, "every mark is settled or dropped");
        assert!(settle(c, NOW).unwrap().is_empty());
    }
}
