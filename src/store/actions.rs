//! The action ledger: every launch, stop and destroy fleetagent tried, with its outcome.
//! The rate limiter counts from here (a one-shot process remembers nothing else).

use anyhow::Result;
use rusqlite::{params, Connection};
use serde::Serialize;

use crate::clock::Millis;

pub use super::operator_stops::*;

crate::text_enum! {
    /// Why an instance of ours was flagged (`fleet::Flag`), as decisions read it: the
    /// `actions.flag` column of a stop or destroy of a flagged instance. `Flag::why` adds the
    /// figure (`loading 45m`, `silent 25m`, `stopped 25h`).
    pub enum FlagKind, "actions.flag" {
        /// A bid vast.ai paused.
        Outbid = "outbid",
        /// Stopped longer than `vast.stopped_max_hours`.
        Stopped = "stopped",
        Exited = "exited",
        Offline = "offline",
        /// Paused by vast.ai with its memory kept: the GPU bills, nothing runs (fleetagent never
        /// freezes one).
        Frozen = "frozen",
        /// No recent heartbeat from the host, and no live worker matched to it.
        Unknown = "unknown",
        /// Loading past `policy.stuck_loading_mins`.
        Loading = "loading",
        /// A worker that heartbeats and proves nothing while work waits.
        Silent = "silent",
        /// Never had a Curio worker: exited before one started, or running without one past
        /// a boot and a worker's start (`fleet::boot`).
        Unbooted = "unbooted",
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Action {
    pub id: i64,
    pub run_id: Option<i64>,
    pub kind: String,
    pub outcome: String,
    pub actor: String,
    pub instance_id: Option<i64>,
    pub label: Option<String>,
    pub offer_id: Option<i64>,
    pub dph: Option<f64>,
    pub emergency: bool,
    pub reason: Option<String>,
    pub detail: Option<String>,
    pub created_at: Millis,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct NewAction<'a> {
    pub run_id: Option<i64>,
    pub kind: &'a str,
    pub outcome: &'a str,
    pub actor: &'a str,
    pub instance_id: Option<i64>,
    pub label: Option<&'a str>,
    pub offer_id: Option<i64>,
    pub dph: Option<f64>,
    pub emergency: bool,
    pub tool_call_id: Option<&'a str>,
    pub reason: Option<&'a str>,
    pub detail: Option<&'a str>,
    /// Why it did not go through, where a decision tells it apart: the guardrail's code of a
    /// refusal (`rate_limited`, `unprofitable`, ...), or `vast_rate_limited`, `offer_taken`
    /// and `offer_refused` (`policy::launch::create_failure_code`).
    pub code: Option<&'a str>,
    /// A stop or destroy of a flagged instance: why it was flagged.
    pub flag: Option<FlagKind>,
}

/// The ledger's code of a call that failed on vast.ai's rate limit, its retries spent.
pub const VAST_RATE_LIMITED: &str = "vast_rate_limited";

/// The ledger's code of a launch whose offer vast.ai said was taken (`no_such_ask`), after
/// the retries on other offers a launch without `offer_id` makes: a launch that searches
/// afresh may find another.
pub const OFFER_TAKEN: &str = "offer_taken";

/// The ledger's code of a launch vast.ai refused for its offer (a 4xx that is not the
/// account's: a host in maintenance): another offer may go (`policy::launch::create_failure_code`).
pub const OFFER_REFUSED: &str = "offer_refused";

pub fn insert(conn: &Connection, a: &NewAction<'_>, now: Millis) -> Result<i64> {
    conn.execute(
        "INSERT INTO actions (run_id, kind, outcome, actor, instance_id, label, offer_id, dph,
                              emergency, tool_call_id, reason, detail, created_at, code, flag)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
        params![
            a.run_id,
            a.kind,
            a.outcome,
            a.actor,
            a.instance_id,
            a.label,
            a.offer_id,
            a.dph,
            a.emergency,
            a.tool_call_id,
            a.reason,
            a.detail,
            now,
            a.code,
            a.flag
        ],
    )?;
    Ok(conn.last_insert_rowid())
}

/// Settle an intent: its outcome, the instance it made, a detail, a code ([`NewAction::code`]).
pub fn settle(
    conn: &Connection,
    id: i64,
    outcome: &str,
    instance_id: Option<i64>,
    detail: Option<&str>,
    code: Option<&str>,
    now: Millis,
) -> Result<()> {
    conn.execute(
        "UPDATE actions SET outcome = ?2, instance_id = COALESCE(?3, instance_id),
                detail = COALESCE(?4, detail), code = COALESCE(?5, code), finished_at = ?6
          WHERE id = ?1",
        params![id, outcome, instance_id, detail, code, now],
    )?;
    Ok(())
}

const COLS: &str = "id, run_id, kind, outcome, actor, instance_id, label, offer_id, dph, emergency,
    reason, detail, created_at";

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Action> {
    Ok(Action {
        id: r.get(0)?,
        run_id: r.get(1)?,
        kind: r.get(2)?,
        outcome: r.get(3)?,
        actor: r.get(4)?,
        instance_id: r.get(5)?,
        label: r.get(6)?,
        offer_id: r.get(7)?,
        dph: r.get(8)?,
        emergency: r.get(9)?,
        reason: r.get(10)?,
        detail: r.get(11)?,
        created_at: r.get(12)?,
    })
}

/// What the ledger holds of launches under one label, and of the run its label names: for
/// telling an instance a copy of this database rented (`fleet::copies`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelLaunches {
    /// The run the label names finished ok in this database.
    pub run_finished_ok: bool,
    /// Launches under the label, whatever their outcome.
    pub total: i64,
    /// The instances those launches went through as (settled with one).
    pub instances: Vec<i64>,
}

impl LabelLaunches {
    /// One of them went through as this instance.
    pub fn as_instance(&self, vast_id: Option<i64>) -> bool {
        vast_id.is_some_and(|id| self.instances.contains(&id))
    }

    /// One of them went through as another instance.
    pub fn as_other_instance(&self, vast_id: Option<i64>) -> bool {
        self.instances.iter().any(|&i| Some(i) != vast_id)
    }
}

/// [`LabelLaunches`] of `label`, whose label names run `run`; `current`: the pass asking,
/// which counts as finished ok (it has not finished yet, and it is this database's own).
pub fn launches_of_label(
    conn: &Connection,
    run: i64,
    label: &str,
    current: Option<i64>,
) -> Result<LabelLaunches> {
    let run_finished_ok: bool = conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM runs WHERE id = ?1 AND (status = 'ok' OR id IS ?2))",
        params![run, current],
        |r| r.get(0),
    )?;
    let mut stmt = conn
        .prepare_cached("SELECT instance_id FROM actions WHERE kind = 'launch' AND label = ?1")?;
    let rows = stmt
        .query_map(params![label], |r| r.get::<_, Option<i64>>(0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(LabelLaunches {
        run_finished_ok,
        total: rows.len() as i64,
        instances: rows.into_iter().flatten().collect(),
    })
}

/// When our latest create request may have reached vast.ai: the latest launch that got as
/// far as the API call (settled, or an intent a crash left open), by the time it settled.
/// The next create is spaced after it, across processes.
pub fn last_create_at(conn: &Connection) -> Result<Option<Millis>> {
    Ok(conn.query_row(
        // The newest creates by `actions_kind_time`, not every launch ever made (5 ms a pass
        // per 50,000 launches): a create answers within `vast.timeout_secs` and its retries,
        // so the last one to finish is among the last few asked.
        "SELECT MAX(COALESCE(finished_at, created_at)) FROM (
            SELECT finished_at, created_at FROM actions
             WHERE kind = 'launch' AND outcome IN ('ok', 'failed', 'intent')
             ORDER BY created_at DESC LIMIT 50)",
        [],
        |r| r.get(0),
    )?)
}

/// Launches that count against the window: succeeded, or an intent whose create may have
/// gone through (a crash between create and record must not free a slot).
pub fn launches_since(conn: &Connection, since: Millis) -> Result<Vec<Action>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLS} FROM actions WHERE kind = 'launch' AND created_at > ?1
           AND outcome IN ('ok', 'intent') ORDER BY created_at"
    ))?;
    let rows = stmt
        .query_map(params![since], row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// Instances whose latest stop or start that went through is a stop of ours: stopped by
/// us (vast.ai pausing an outbid bid is not).
pub fn stopped_by_us(conn: &Connection) -> Result<std::collections::HashSet<i64>> {
    let mut stmt = conn.prepare_cached(
        "SELECT a.instance_id FROM actions a
          WHERE a.kind = 'stop' AND a.outcome = 'ok' AND a.instance_id IS NOT NULL
            AND NOT EXISTS (SELECT 1 FROM actions b
                             WHERE b.instance_id = a.instance_id AND b.kind = 'start'
                               AND b.outcome = 'ok' AND b.id > a.id)",
    )?;
    let rows = stmt
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<std::collections::HashSet<i64>>>()?;
    Ok(rows)
}

/// Per instance, the latest stop or destroy of ours that vast.ai acknowledged since `since`
/// (a stop followed by a start of ours leaves out): its kind and when. What a listing that
/// still shows the instance running is checked against (`fleet::reconcile`, "undone").
/// One read of the window's ends and starts in order (every pass reads it).
pub fn acknowledged_ends(
    conn: &Connection,
    since: Millis,
) -> Result<std::collections::HashMap<i64, (String, Millis)>> {
    // Found by the (kind, created_at) index and put in order here: `ORDER BY id` made SQLite
    // walk the whole ledger by id, every pass.
    let mut stmt = conn.prepare_cached(
        "SELECT id, instance_id, kind, coalesce(finished_at, created_at) FROM actions
          WHERE kind IN ('stop', 'destroy', 'start') AND created_at >= ?1
            AND outcome = 'ok' AND instance_id IS NOT NULL",
    )?;
    let mut rows = stmt
        .query_map(params![since], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, Millis>(3)?,
            ))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    rows.sort_unstable_by_key(|r| r.0);
    let mut latest = std::collections::HashMap::new();
    for (_, id, kind, at) in rows {
        if kind == "start" {
            latest.remove(&id);
        } else {
            latest.insert(id, (kind, at));
        }
    }
    Ok(latest)
}

/// Instances of ours that a listing saw billing more than `grace` after a stop or destroy
/// of ours that vast.ai acknowledged (since `since`, no start of ours after it). `doctor`'s
/// `vast` check. Any such end counts, not only the latest: the pass that finds one sends it again,
/// and that newer end is not yet contradicted by a listing.
pub fn undone_ends(conn: &Connection, since: Millis, grace: Millis) -> Result<Vec<UndoneEnd>> {
    let mut stmt = conn.prepare_cached(
        "SELECT i.vast_id, i.label, a.kind, min(coalesce(a.finished_at, a.created_at)),
                i.last_seen_at
           FROM actions a JOIN instances i ON i.vast_id = a.instance_id
          WHERE a.kind IN ('stop', 'destroy') AND a.outcome = 'ok' AND a.created_at >= ?1
            AND i.gone_at IS NULL AND i.last_seen_at > coalesce(a.finished_at, a.created_at) + ?2
            AND (a.kind = 'destroy' OR i.state NOT IN ('stopped', 'gone'))
            AND NOT EXISTS (SELECT 1 FROM actions b
                             WHERE b.instance_id = a.instance_id AND b.kind = 'start'
                               AND b.outcome = 'ok' AND b.id > a.id)
          GROUP BY i.vast_id
          ORDER BY i.vast_id",
    )?;
    let rows = stmt
        .query_map(params![since, grace], |r| {
            Ok(UndoneEnd {
                vast_id: r.get(0)?,
                label: r.get(1)?,
                kind: r.get(2)?,
                at: r.get(3)?,
                last_seen_at: r.get(4)?,
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}

/// Open launches whose create failed while vast.ai made an instance anyway and whose destroy
/// of it failed (`fleet::reconcile::ORPHAN_NOTE`): (their note, when launched). Each pass that
/// lists the instance destroys it again; `doctor` names them meanwhile.
pub fn open_orphans(conn: &Connection) -> Result<Vec<(String, Millis)>> {
    let mut stmt = conn.prepare_cached(
        "SELECT detail, created_at FROM actions
          WHERE kind = 'launch' AND outcome = 'intent' AND detail LIKE 'orphan instance %'
          ORDER BY id",
    )?;
    let rows = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}

/// One row of [`undone_ends`].
#[derive(Debug, Clone, PartialEq)]
pub struct UndoneEnd {
    pub vast_id: i64,
    pub label: String,
    /// `stop` or `destroy`.
    pub kind: String,
    /// When vast.ai first acknowledged it.
    pub at: Millis,
    pub last_seen_at: Millis,
}

/// The latest launch, stop or destroy since `since` that failed because vast.ai refused the
/// API key, when no call of ours went through after it: (kind, when). A key that may list but
/// not write (a scoped key without `instance_write`) leaves the listing, and so `doctor`'s
/// `vast` check, green.
pub fn key_refused_since(conn: &Connection, since: Millis) -> Result<Option<(String, Millis)>> {
    use rusqlite::OptionalExtension;
    Ok(conn
        .query_row(
            "SELECT a.kind, a.created_at FROM actions a
              WHERE a.kind IN ('launch', 'stop', 'destroy') AND a.outcome = 'failed'
                AND a.created_at >= ?1 AND a.detail LIKE '%vast.ai refused the API key%'
                AND NOT EXISTS (SELECT 1 FROM actions b
                                 WHERE b.kind IN ('launch', 'stop', 'destroy')
                                   AND b.outcome = 'ok' AND b.id > a.id)
              ORDER BY a.id DESC LIMIT 1",
            params![since],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?)
}

/// Flagged silent workers stopped or destroyed since `since`: the breaker of
/// `fleet::SILENT_DESTROYS_MAX`.
pub fn silent_destroys_since(conn: &Connection, since: Millis) -> Result<u32> {
    let n: i64 = conn.query_row(
        "SELECT count(*) FROM actions
          WHERE kind IN ('stop', 'destroy') AND outcome = 'ok' AND created_at >= ?1
            AND flag = ?2",
        params![since, FlagKind::Silent],
        |r| r.get(0),
    )?;
    Ok(u32::try_from(n).unwrap_or(u32::MAX))
}

/// One rental of the boot breaker's row (`fleet::boot`): when its stop or destroy went
/// through, and its detail (`flagged (<why>): earned nothing`, the why with vast.ai's status
/// message when it gave one).
#[derive(Debug, Clone, PartialEq)]
pub struct BootFailure {
    pub at: Millis,
    pub detail: String,
}

/// The rentals of ours stopped or destroyed since `since` as flagged before any Curio worker
/// of theirs ran (`loading`, `unbooted`), newest first, at most `fleet::BOOT_FAILURES_MAX`
/// more than the caller can drop (`fleet::boot::in_a_row` keeps those after the newest
/// rental that booted).
pub fn boot_failures_since(conn: &Connection, since: Millis) -> Result<Vec<BootFailure>> {
    let mut stmt = conn.prepare_cached(
        "SELECT created_at, COALESCE(detail, '') FROM actions
          WHERE kind IN ('stop', 'destroy') AND outcome = 'ok' AND created_at >= ?1
            AND flag IN (?2, ?3)
          ORDER BY id DESC LIMIT 50",
    )?;
    let rows = stmt.query_map(params![since, FlagKind::Loading, FlagKind::Unbooted], |r| {
        Ok(BootFailure {
            at: r.get(0)?,
            detail: r.get(1)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// Ours that fleetagent started again since `since` (a stopped spare, `stop_mode = "stop"`):
/// vast.ai id -> when, the latest (`fleet::boot::boot_began`).
pub fn started_again_since(
    conn: &Connection,
    since: Millis,
) -> Result<std::collections::BTreeMap<i64, Millis>> {
    let mut stmt = conn.prepare_cached(
        "SELECT instance_id, max(created_at) FROM actions
          WHERE kind = 'start' AND outcome = 'ok' AND created_at >= ?1
            AND instance_id IS NOT NULL
          GROUP BY instance_id",
    )?;
    let rows = stmt.query_map(params![since], |r| Ok((r.get(0)?, r.get(1)?)))?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// When the last launch since `since` was refused as `unprofitable` (no offer left the
/// margin), if one was.
pub fn unprofitable_refused_since(conn: &Connection, since: Millis) -> Result<Option<Millis>> {
    Ok(conn.query_row(
        "SELECT max(created_at) FROM actions
          WHERE kind = 'launch' AND outcome = 'refused' AND created_at >= ?1
            AND code = 'unprofitable'",
        params![since],
        |r| r.get(0),
    )?)
}

/// Launches of run `run_id` decided in code (the rules, the floor, the fallback; not the
/// model) that failed on vast.ai's rate limit, retries spent (`vast_rate_limited`).
pub fn own_launches_rate_limited(conn: &Connection, run_id: i64) -> Result<u32> {
    let n: i64 = conn.query_row(
        "SELECT COUNT(*) FROM actions
          WHERE run_id = ?1 AND kind = 'launch' AND outcome = 'failed' AND code = ?2
            AND actor IN ('rules', 'floor', 'fallback-rules')",
        params![run_id, VAST_RATE_LIMITED],
        |r| r.get(0),
    )?;
    Ok(u32::try_from(n).unwrap_or(0))
}

/// Of the latest pass since `since` whose launches were decided in code (the rules, the
/// floor, the fallback), the launches that failed on vast.ai's rate limit, retries spent
/// (`Snapshot::rate_limited_owed`).
pub fn rate_limited_owed(conn: &Connection, since: Millis) -> Result<u32> {
    let latest: Option<i64> = conn.query_row(
        "SELECT max(run_id) FROM actions
          WHERE kind = 'launch' AND actor IN ('rules', 'floor', 'fallback-rules')
            AND created_at >= ?1",
        params![since],
        |r| r.get(0),
    )?;
    latest.map_or(Ok(0), |run| own_launches_rate_limited(conn, run))
}

/// What one action of a run came to, as the floor reads the model's (`run::act`): its kind,
/// outcome and code ([`NewAction::code`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub kind: String,
    pub outcome: String,
    pub code: Option<String>,
    /// The instance a stop named (None for a launch).
    pub instance_id: Option<i64>,
}

/// The actions of run `run_id` by `actor`, in order.
pub fn outcomes_of_run(conn: &Connection, run_id: i64, actor: &str) -> Result<Vec<Outcome>> {
    let mut stmt = conn.prepare_cached(
        "SELECT kind, outcome, code, instance_id FROM actions WHERE run_id = ?1 AND actor = ?2 ORDER BY id",
    )?;
    let rows = stmt
        .query_map(params![run_id, actor], |r| {
            Ok(Outcome {
                kind: r.get(0)?,
                outcome: r.get(1)?,
                code: r.get(2)?,
                instance_id: r.get(3)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

pub fn recent(conn: &Connection, limit: i64) -> Result<Vec<Action>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLS} FROM actions ORDER BY id DESC LIMIT ?1"
    ))?;
    let rows = stmt
        .query_map(params![limit], row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// The floor's actions in the pass just before `run_id` (at most `limit`), so the next
/// observation can tell the model what the floor did.
pub fn floor_in_previous_pass(conn: &Connection, run_id: i64, limit: i64) -> Result<Vec<Action>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLS} FROM actions WHERE actor = 'floor'
           AND run_id = (SELECT MAX(id) FROM runs WHERE id < ?1) ORDER BY id LIMIT ?2"
    ))?;
    let rows = stmt
        .query_map(params![run_id, limit], row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

pub fn of_run(conn: &Connection, run_id: i64) -> Result<Vec<Action>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLS} FROM actions WHERE run_id = ?1 ORDER BY id"
    ))?;
    let rows = stmt
        .query_map(params![run_id], row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// One row by id.
pub fn get(conn: &Connection, id: i64) -> Result<Option<Action>> {
    use rusqlite::OptionalExtension;
    Ok(conn
        .query_row(
            &format!("SELECT {COLS} FROM actions WHERE id = ?1"),
            params![id],
            row,
        )
        .optional()?)
}

/// Launch intents not yet settled (a crash between intent and record leaves them).
pub fn open_intents(conn: &Connection) -> Result<Vec<Action>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLS} FROM actions INDEXED BY actions_open
          WHERE outcome = 'intent' AND kind = 'launch' ORDER BY id"
    ))?;
    let rows = stmt
        .query_map([], row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// The launch recorded under this label, if any (labels are unique among launches).
pub fn launch_by_label(conn: &Connection, label: &str) -> Result<Option<Action>> {
    use rusqlite::OptionalExtension;
    Ok(conn
        .query_row(
            &format!("SELECT {COLS} FROM actions WHERE kind = 'launch' AND label = ?1"),
            params![label],
            row,
        )
        .optional()?)
}

/// Replace an action's detail, leaving its outcome (an intent stays open).
pub fn note(conn: &Connection, id: i64, detail: &str) -> Result<()> {
    conn.execute(
        "UPDATE actions SET detail = ?2 WHERE id = ?1",
        params![id, detail],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_store;

    /// A row of run `run` (None: an operator's) at `at`.
    fn act(
        conn: &Connection,
        run: Option<i64>,
        (kind, outcome, actor): (&'static str, &'static str, &'static str),
        code: Option<&'static str>,
        instance_id: Option<i64>,
        at: Millis,
    ) {
        let a = NewAction {
            run_id: run,
            kind,
            outcome,
            actor,
            code,
            instance_id,
            ..Default::default()
        };
        insert(conn, &a, at).unwrap();
    }

    #[test]
    fn launches_the_429_refused_are_owed_from_the_latest_launching_pass_of_code() {
        let (_dir, s) = test_store(0);
        let c = &s.conn;
        let run = |at| {
            crate::store::runs::create(c, 1, 1, 1, crate::store::runs::StartedBy::Tick, at).unwrap()
        };
        let limited = Some("vast_rate_limited");
        let (r1, r2) = (run(10), run(20));
        act(
            c,
            Some(r1),
            ("launch", "failed", "rules"),
            limited,
            None,
            10,
        );
        act(
            c,
            Some(r1),
            ("launch", "failed", "rules"),
            limited,
            None,
            11,
        );
        act(c, Some(r1), ("launch", "ok", "rules"), None, Some(7), 12);
        // The model's own refusal is the model's to read, and its pass is not the rules'.
        act(c, Some(r2), ("launch", "failed", "llm"), limited, None, 20);
        assert_eq!(own_launches_rate_limited(c, r1).unwrap(), 2);
        assert_eq!(own_launches_rate_limited(c, r2).unwrap(), 0);
        assert_eq!(rate_limited_owed(c, 0).unwrap(), 2);
        assert_eq!(rate_limited_owed(c, 13).unwrap(), 0, "past the window");
        // The next launching pass of the floor got its launch through: nothing owed.
        let r3 = run(30);
        act(c, Some(r3), ("launch", "ok", "floor"), None, Some(8), 30);
        assert_eq!(rate_limited_owed(c, 0).unwrap(), 0);
    }

    #[test]
    fn an_instance_is_operator_stopped_while_the_operators_stop_is_its_last() {
        let (_dir, s) = test_store(0);
        let c = &s.conn;
        act(c, None, ("stop", "ok", "operator"), None, Some(5), 1);
        act(c, None, ("stop", "ok", "operator"), None, Some(6), 2);
        act(c, None, ("stop", "failed", "operator"), None, Some(7), 3);
        act(c, None, ("start", "ok", "rules"), None, Some(6), 4);
        act(c, None, ("stop", "ok", "rules"), None, Some(6), 5);
        assert_eq!(operator_stopped(c).unwrap(), vec![5]);
        // The same stop sent again because vast.ai did not do it (`run::undone`) is still the
        // operator's: the warm spare stays kept.
        act(c, None, ("stop", "ok", "fleetagent"), None, Some(5), 6);
        assert_eq!(operator_stopped(c).unwrap(), vec![5]);
    }

    fn refusals(conn: &Connection) -> Vec<(String, i64)> {
        crate::store::tally::counts(conn, &crate::store::tally::REFUSALS)
            .unwrap()
            .into_iter()
            .collect()
    }

    #[test]
    fn refusals_are_the_refused_rows_only() {
        let (_dir, s) = test_store(0);
        assert!(refusals(&s.conn).is_empty());
        for (kind, outcome, code) in [
            ("launch", "refused", Some("instance_cap")),
            ("launch", "ok", None),
            ("stop", "refused", None),
        ] {
            let a = NewAction {
                kind,
                outcome,
                actor: "llm",
                code,
                ..Default::default()
            };
            insert(&s.conn, &a, 5).unwrap();
        }
        assert_eq!(
            refusals(&s.conn),
            vec![("launch instance_cap".into(), 1), ("stop ".into(), 1)]
        );
    }

    /// sql/0007 fills the typed columns of rows written before it from their detail, and the
    /// decisions' queries read them.
    #[test]
    fn migration_7_gives_older_rows_their_code_and_flag() {
        let conn = Connection::open_in_memory().unwrap();
        for sql in &crate::store::MIGRATIONS[..6] {
            conn.execute_batch(sql).unwrap();
        }
        let rows = [
            (
                "launch",
                "refused",
                r#"{"error":"unprofitable","message":"m"}"#,
            ),
            (
                "launch",
                "refused",
                r#"{"error":"rate_limited","limit":"3 per 15 min"}"#,
            ),
            (
                "launch",
                "failed",
                "vast.ai rate limit: HTTP 429 after 3 tries",
            ),
            ("launch", "failed", "vast.ai unreachable: timed out"),
            (
                "launch",
                "refused",
                "offer 5 is not among the current offers",
            ),
            ("launch", "refused", r#"{"error":7}"#),
            (
                "destroy",
                "refused",
                r#"{"error":"protected","message":"proving"}"#,
            ),
            ("destroy", "ok", "flagged (silent 25m): earned nothing"),
            ("destroy", "ok", "flagged (exited): earned nothing"),
            ("stop", "ok", "flagged (loading 1h05m): earned nothing"),
            ("destroy", "ok", "flagged (stopped 25h): earned nothing"),
            ("destroy", "ok", "flagged: earned nothing"),
            ("destroy", "ok", "flagged (odd): earned nothing"),
            ("destroy", "ok", "ok"),
        ];
        for (i, (kind, outcome, detail)) in rows.iter().enumerate() {
            conn.execute(
                "INSERT INTO actions (kind, outcome, actor, detail, created_at)
                 VALUES (?1, ?2, 'rules', ?3, ?4)",
                params![kind, outcome, detail, 100 + i as i64],
            )
            .unwrap();
        }
        conn.execute_batch(crate::store::MIGRATIONS[6]).unwrap();
        let mut st = conn
            .prepare("SELECT code, flag FROM actions ORDER BY id")
            .unwrap();
        let got: Vec<(Option<String>, Option<String>)> = st
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        let code = |c: &str| (Some(c.to_string()), None);
        let flag = |f: &str| (None, Some(f.to_string()));
        let none = (None, None);
        assert_eq!(
            got,
            vec![
                code("unprofitable"),
                code("rate_limited"),
                code("vast_rate_limited"),
                none.clone(),
                none.clone(),
                none.clone(),
                code("protected"),
                flag("silent"),
                flag("exited"),
                flag("loading"),
                flag("stopped"),
                none.clone(),
                none.clone(),
                none,
            ]
        );
        // What the rules and the breaker read of them.
        assert_eq!(unprofitable_refused_since(&conn, 0).unwrap(), Some(100));
        assert_eq!(unprofitable_refused_since(&conn, 101).unwrap(), None);
        assert_eq!(silent_destroys_since(&conn, 0).unwrap(), 1);
        assert_eq!(silent_destroys_since(&conn, 108).unwrap(), 0);
    }

    /// New rows carry their code and flag as written; the floor reads them per run and actor.
    #[test]
    fn codes_and_flags_are_written_and_read_back() {
        let (_dir, s) = test_store(0);
        let run =
            crate::store::runs::create(&s.conn, 1, 1, 1, crate::store::runs::StartedBy::Tick, 1)
                .unwrap();
        let add = |kind, outcome, actor, code, flag| {
            let a = NewAction {
                run_id: Some(run),
                kind,
                outcome,
                actor,
                code,
                flag,
                ..Default::default()
            };
            insert(&s.conn, &a, 5).unwrap()
        };
        add("launch", "refused", "llm", Some("rate_limited"), None);
        let intent = add("launch", "intent", "llm", None, None);
        add("destroy", "ok", "floor", None, Some(FlagKind::Silent));
        settle(
            &s.conn,
            intent,
            "failed",
            None,
            Some("vast.ai rate limit: x"),
            Some("vast_rate_limited"),
            6,
        )
        .unwrap();
        let got: Vec<(String, Option<String>)> = outcomes_of_run(&s.conn, run, "llm")
            .unwrap()
            .into_iter()
            .map(|o| (o.outcome, o.code))
            .collect();
        assert_eq!(
            got,
            vec![
                ("refused".into(), Some("rate_limited".into())),
                ("failed".into(), Some("vast_rate_limited".into())),
            ]
        );
        assert_eq!(outcomes_of_run(&s.conn, run, "floor").unwrap().len(), 1);
        assert_eq!(silent_destroys_since(&s.conn, 0).unwrap(), 1);
        assert_eq!(refusals(&s.conn), vec![("launch rate_limited".into(), 1)]);
    }

    #[test]
    fn the_floor_of_the_previous_pass_only() {
        let (_dir, s) = test_store(0);
        let run = |n: i64| {
            crate::store::runs::create(&s.conn, 1, 1, 1, crate::store::runs::StartedBy::Tick, n)
                .unwrap()
        };
        let (r1, r2, r3) = (run(1), run(2), run(3));
        for (run_id, actor) in [(r1, "floor"), (r2, "llm"), (r2, "floor"), (r2, "floor")] {
            let a = NewAction {
                run_id: Some(run_id),
                kind: "launch",
                outcome: "ok",
                actor,
                ..Default::default()
            };
            insert(&s.conn, &a, 5).unwrap();
        }
        let got = floor_in_previous_pass(&s.conn, r3, 10).unwrap();
        assert_eq!(got.len(), 2);
        assert!(got
            .iter()
            .all(|a| a.actor == "floor" && a.run_id == Some(r2)));
        assert_eq!(floor_in_previous_pass(&s.conn, r3, 1).unwrap().len(), 1);
        // r2's previous pass (r1) had one; r1 has none before it.
        assert_eq!(floor_in_previous_pass(&s.conn, r2, 10).unwrap().len(), 1);
        assert!(floor_in_previous_pass(&s.conn, r1, 10).unwrap().is_empty());
    }
}
