//! The safety state of several hosts: the shared database is the truth, and the leader's
//! SQLite a write-through copy of it, so a pass runs the very same SQL with HA on as off.
//!
//! - **What is shared:** the rows of [`TABLES`] (sessions, the agent state, runs, events,
//!   wakes, the action ledger, instances, bad hosts, operators' stops in flight) but the
//!   columns each host keeps to itself ([`HOST_COLUMNS`]), each as its latest value in
//!   `fleetagent.rows` (table, key, the row as JSON, the sequence number and epoch of the
//!   push that wrote it). The run counter is shared with them: a leader's copy holds every
//!   run row, so SQLite's AUTOINCREMENT never gives a run id (and so a label) twice.
//! - **Capture:** on the leader's connection only, TEMP triggers record the key of every row
//!   a statement changes in `ha_changes` (in the same local transaction).
//! - **Push** ([`push`]), at each fenced step: under a local write lock, the changed rows'
//!   current values go to the shared database in one transaction that begins with the fence
//!   and takes the next sequence number; then the local marker (`ha_sync`) records it.
//! - **Pull** ([`sync_in`]), when a host starts to lead: when the shared state was last
//!   written by this copy (same holder, epoch and sequence number) the copy is current;
//!   otherwise it is replaced whole by the shared rows (and what this copy changed under an
//!   older epoch and never pushed is dropped, as an unfenced write must be). The first
//!   leader of an empty schema pushes its whole copy instead: that is how a single-host
//!   install moves to the shared database.
//! - **Inbox:** `trigger` and `message` write the local `outbox`; any host's `run` or `poll`
//!   forwards it ([`forward_outbox`]); the leader makes the inbox's rows local events
//!   ([`take_inbox`]), and its next push deletes them from the inbox in the same transaction
//!   that writes the events.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use rusqlite::types::ValueRef;
use rusqlite::{params, Connection, OptionalExtension, Transaction, TransactionBehavior};
use serde_json::{Map, Value};

use super::db::SharedDb;
use super::lease::{self, Fenced};
use crate::clock::Millis;

/// The shared tables and their keys.
pub const TABLES: &[(&str, &str)] = &[
    ("sessions", "id"),
    ("agent_state", "id"),
    ("runs", "id"),
    ("events", "id"),
    ("wakes", "id"),
    ("actions", "id"),
    ("instances", "label"),
    ("bad_hosts", "machine_id"),
    // An operator's stop on its way to vast.ai holds launches from when it was typed; a
    // killed stop's mark must hold the next leader too (the HA re-test: it rented a
    // replacement at once).
    ("operator_stops_in_flight", "id"),
    // A pass's stop on its way: the next leader settles what a killed one left.
    ("stops_in_flight", "id"),
    // What the fleet learned: each GPU's measured rate (a GPU the leader measured as
    // unprofitable was rented by the next leader a minute later), and the day's hours of
    // history (the profile was lost at every takeover: the HA walkthrough, 2026-12-07).
    ("measured_rates", "gpu_name"),
    ("day_hours", "start"),
];

/// Tables shared since a later build ([`TABLES`]): a shared state without a single row of
/// one (not even a deleted one's) was written by a build that kept it on each host, so a
/// pull keeps this copy's rows and the next push sends them ([`seed_new_tables`]) instead of
/// emptying it.
const SHARED_LATER: &[&str] = &["measured_rates", "day_hours"];

/// Columns of the shared tables that are this host's own, never shared: its clock against
/// vast.ai's and since when it is off (a slow host's measurement read by a right one made it
/// "repair" rows that were right, a pause two hours late: the HA re-test). A push leaves
/// them out; a pull keeps this copy's.
const HOST_COLUMNS: &[(&str, &str)] = &[
    ("agent_state", "vast_clock_skew_ms"),
    ("agent_state", "vast_clock_skew_since_ms"),
];

fn host_column(table: &str, column: &str) -> bool {
    HOST_COLUMNS.contains(&(table, column))
}

/// Rows per INSERT when pushing many (the first push of an install).
const CHUNK: usize = 500;

/// The lease a push is fenced by.
#[derive(Debug, Clone, PartialEq)]
pub struct Held {
    pub host: String,
    pub epoch: i64,
    pub margin: Duration,
    /// What a step may take after its fence (`vast.timeout_secs`: one vast.ai request): a
    /// fence answered later than `margin` less this after it was asked proves nothing.
    pub act: Duration,
}

impl Held {
    /// The lease confirmed by a fence asked at `asked` may still be counted on: the margin it
    /// guaranteed, less one vast.ai request, has not passed on this host's monotonic clock.
    /// A reply held up on the way (a TCP-terminating hop that lost it for a while) confirms a
    /// lease another host may have taken since.
    pub fn fresh(&self, asked: std::time::Instant) -> bool {
        asked.elapsed() + self.act < self.margin
    }

    /// Why a fence asked at `asked` no longer counts (None: it does).
    pub fn stale(&self, asked: std::time::Instant, step: &str) -> Option<anyhow::Error> {
        (!self.fresh(asked)).then(|| {
            anyhow!(
                "{step}: the lease of this host ({}) at epoch {} was confirmed by an answer asked {}s ago, more than ha.fence_margin_secs ({}s) less vast.timeout_secs ({}s) allows: another host may lead by now; stopping before anything else is written or sent",
                self.host,
                self.epoch,
                asked.elapsed().as_secs(),
                self.margin.as_secs(),
                self.act.as_secs()
            )
        })
    }
}

/// The shared tables' DDL (run by `schema::migrate`).
pub const STATEMENTS: &[&str] = &[
    // One row `fleet`: the last push's sequence number, and who pushed it.
    "CREATE TABLE IF NOT EXISTS fleetagent.sync (
        name   text PRIMARY KEY CHECK (name = 'fleet'),
        seq    bigint NOT NULL,
        epoch  bigint NOT NULL,
        holder text NOT NULL
    )",
    // The shared tables' rows: the latest value of each (NULL: deleted).
    "CREATE TABLE IF NOT EXISTS fleetagent.rows (
        tbl   text NOT NULL,
        pk    text NOT NULL,
        data  text,
        seq   bigint NOT NULL,
        epoch bigint NOT NULL,
        PRIMARY KEY (tbl, pk)
    )",
    // Events from any host, waiting for the leader.
    "CREATE TABLE IF NOT EXISTS fleetagent.inbox (
        id          bigserial PRIMARY KEY,
        origin_host text NOT NULL,
        origin_id   bigint NOT NULL,
        priority    int NOT NULL,
        kind        text NOT NULL,
        reason      text NOT NULL,
        body        text,
        created_at  bigint NOT NULL,
        UNIQUE (origin_host, origin_id, created_at)
    )",
];

/// Starts recording, on this connection, the keys of the shared tables' changed rows (those
/// of [`SHARED_LATER`] only with `later`).
pub fn capture(conn: &Connection, later: bool) -> Result<()> {
    for (t, k) in TABLES
        .iter()
        .filter(|(t, _)| later || !SHARED_LATER.contains(t))
    {
        conn.execute_batch(&format!(
            "CREATE TEMP TRIGGER IF NOT EXISTS ha_{t}_i AFTER INSERT ON main.{t} BEGIN
                 INSERT INTO ha_changes (tbl, pk) VALUES ('{t}', CAST(NEW.{k} AS TEXT));
             END;
             CREATE TEMP TRIGGER IF NOT EXISTS ha_{t}_u AFTER UPDATE ON main.{t} BEGIN
                 INSERT INTO ha_changes (tbl, pk) VALUES ('{t}', CAST(NEW.{k} AS TEXT));
                 INSERT INTO ha_changes (tbl, pk)
                     SELECT '{t}', CAST(OLD.{k} AS TEXT) WHERE OLD.{k} IS NOT NEW.{k};
             END;
             CREATE TEMP TRIGGER IF NOT EXISTS ha_{t}_d AFTER DELETE ON main.{t} BEGIN
                 INSERT INTO ha_changes (tbl, pk) VALUES ('{t}', CAST(OLD.{k} AS TEXT));
             END;"
        ))
        .with_context(|| format!("recording changes to {t}"))?;
    }
    Ok(())
}

fn key_of(table: &str) -> Result<&'static str> {
    TABLES
        .iter()
        .find(|(t, _)| *t == table)
        .map(|(_, k)| *k)
        .ok_or_else(|| anyhow!("{table} is not a shared table"))
}

/// The row as a JSON object of its columns, or None when it is gone.
fn row_json(conn: &Connection, table: &str, pk: &str) -> Result<Option<String>> {
    let key = key_of(table)?;
    let mut st = conn.prepare_cached(&format!("SELECT * FROM {table} WHERE {key} = ?1"))?;
    let names: Vec<String> = st.column_names().map(|s| s.to_string()).collect();
    let mut rows = st.query([pk])?;
    let Some(row) = rows.next()? else {
        return Ok(None);
    };
    let mut obj = Map::new();
    for (i, name) in names.iter().enumerate() {
        if host_column(table, name) {
            continue;
        }
        let v = match row.get_ref(i)? {
            ValueRef::Null => Value::Null,
            ValueRef::Integer(n) => Value::from(n),
            ValueRef::Real(x) => serde_json::Number::from_f64(x)
                .map(Value::Number)
                .unwrap_or(Value::Null),
            ValueRef::Text(t) => Value::String(String::from_utf8_lossy(t).into_owned()),
            ValueRef::Blob(_) => bail!("{table} {pk}: column {name} holds a blob"),
        };
        obj.insert(name.clone(), v);
    }
    Ok(Some(Value::Object(obj).to_string()))
}

/// Inserts a row given as a JSON object into `table`, whose columns are `known`.
fn insert_json(conn: &Connection, table: &str, known: &[String], data: &str) -> Result<()> {
    let obj: Map<String, Value> = serde_json::from_str(data)
        .with_context(|| format!("a shared {table} row is not a JSON object"))?;
    if let Some(extra) = obj.keys().find(|c| !known.contains(*c)) {
        bail!(
            "a shared {table} row has column {extra}, which this version's database lacks: \
             another host runs a newer fleetagent; upgrade this one"
        );
    }
    let cols: Vec<&String> = obj.keys().collect();
    let marks: Vec<String> = (1..=cols.len()).map(|i| format!("?{i}")).collect();
    let sql = format!(
        "INSERT INTO {table} ({}) VALUES ({})",
        cols.iter()
            .map(|c| c.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        marks.join(", ")
    );
    let values: Vec<rusqlite::types::Value> = obj
        .values()
        .map(|v| match v {
            Value::Null => rusqlite::types::Value::Null,
            Value::Bool(b) => rusqlite::types::Value::Integer(*b as i64),
            Value::Number(n) => match n.as_i64() {
                Some(i) => rusqlite::types::Value::Integer(i),
                None => rusqlite::types::Value::Real(n.as_f64().unwrap_or(0.0)),
            },
            Value::String(s) => rusqlite::types::Value::Text(s.clone()),
            other => rusqlite::types::Value::Text(other.to_string()),
        })
        .collect();
    conn.prepare_cached(&sql)?
        .execute(rusqlite::params_from_iter(values))
        .with_context(|| format!("copying a shared {table} row"))?;
    Ok(())
}

fn columns(conn: &Connection, table: &str) -> Result<Vec<String>> {
    let mut st = conn.prepare_cached(&format!("SELECT name FROM pragma_table_info('{table}')"))?;
    let names = st
        .query_map([], |r| r.get::<_, String>(0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(names)
}

/// Where this copy stands: (holder, epoch, seq) of its last push or pull.
pub fn local_mark(conn: &Connection) -> Result<Option<(String, i64, i64)>> {
    Ok(conn
        .query_row(
            "SELECT holder, epoch, seq FROM ha_sync WHERE id = 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()?)
}

/// This copy now matches the shared state as `holder` left it at `epoch` and push `seq`: the
/// changes up to `changes_through` (all of them when None) and the inbox rows taken are in
/// it, and the mark says so.
fn mark_synced(
    conn: &Connection,
    changes_through: Option<i64>,
    holder: &str,
    epoch: i64,
    seq: i64,
) -> Result<()> {
    conn.execute(
        "DELETE FROM ha_changes WHERE id <= ?1",
        [changes_through.unwrap_or(i64::MAX)],
    )?;
    conn.execute("DELETE FROM ha_inbox_taken", [])?;
    conn.execute(
        "INSERT INTO ha_sync (id, holder, epoch, seq) VALUES (1, ?1, ?2, ?3)
         ON CONFLICT (id) DO UPDATE SET holder = ?1, epoch = ?2, seq = ?3",
        params![holder, epoch, seq],
    )?;
    Ok(())
}

/// The shared database's mark: (holder, epoch, seq) of the last push, None on a new schema.
pub fn shared_mark(db: &mut SharedDb) -> Result<Option<(String, i64, i64)>> {
    db.retrying("reading the shared state's mark", |c| {
        c.query_opt(
            "SELECT holder, epoch, seq FROM fleetagent.sync WHERE name = 'fleet'",
            &[],
        )?
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)))
        .transpose()
    })
}

type Row = (String, String, Option<String>);

/// Writes `rows` and deletes the `taken` inbox rows in the caller's fenced transaction, as
/// push number `seq`.
fn write_rows(
    tx: &mut postgres::Transaction<'_>,
    rows: &[Row],
    taken: &[i64],
    seq: i64,
    epoch: i64,
) -> Result<(), postgres::Error> {
    for chunk in rows.chunks(CHUNK) {
        let tbl: Vec<&str> = chunk.iter().map(|r| r.0.as_str()).collect();
        let pk: Vec<&str> = chunk.iter().map(|r| r.1.as_str()).collect();
        let data: Vec<Option<&str>> = chunk.iter().map(|r| r.2.as_deref()).collect();
        tx.execute(
            "INSERT INTO fleetagent.rows (tbl, pk, data, seq, epoch)
             SELECT t, p, d, $4, $5 FROM unnest($1::text[], $2::text[], $3::text[]) AS x(t, p, d)
             ON CONFLICT (tbl, pk) DO UPDATE
             SET data = EXCLUDED.data, seq = EXCLUDED.seq, epoch = EXCLUDED.epoch",
            &[&tbl, &pk, &data, &seq, &epoch],
        )?;
    }
    if !taken.is_empty() {
        tx.execute("DELETE FROM fleetagent.inbox WHERE id = ANY($1)", &[&taken])?;
    }
    Ok(())
}

fn lost(step: &str, held: &Held) -> anyhow::Error {
    anyhow!(
        "{step}: the lease is no longer this host's ({}) at epoch {} with at least \
         fence_margin_secs ({}s) of it left (another host took it, or it ran that low between \
         renewals); stopping before anything else is written or sent (the next leader takes over)",
        held.host,
        held.epoch,
        held.margin.as_secs()
    )
}

/// A fenced step: the rows this copy changed since its last push, and the inbox rows it
/// made events, committed to the shared database while the lease is ours with the margin
/// left; the fence runs even when nothing changed. Holds the local write lock throughout,
/// so another process of this host (a `poll` beside a `run`) pushes before or after, never
/// an older value after a newer one.
/// Returns when the fence that vouched was asked (this host's monotonic clock): an answer
/// later than [`Held::fresh`] allows vouches for nothing and is an error.
pub fn push(
    conn: &Connection,
    db: &mut SharedDb,
    held: &Held,
    step: &str,
) -> Result<std::time::Instant> {
    let asked = std::time::Instant::now();
    push_rows(conn, db, held, step)?;
    match held.stale(asked, step) {
        Some(e) => Err(e),
        None => Ok(asked),
    }
}

fn push_rows(conn: &Connection, db: &mut SharedDb, held: &Held, step: &str) -> Result<()> {
    let tx = Transaction::new_unchecked(conn, TransactionBehavior::Immediate)?;
    let (max_id, keys) = pending(&tx)?;
    let mut rows: Vec<Row> = Vec::with_capacity(keys.len());
    for (table, pk) in keys {
        let data = row_json(&tx, &table, &pk)?;
        rows.push((table, pk, data));
    }
    let taken = taken(&tx)?;
    crate::faults::point("ha-before-push")?;
    if rows.is_empty() && taken.is_empty() {
        // Nothing rides on the fence: one statement (a pre-send check, mostly).
        return match lease::still_held(db, &held.host, held.epoch, held.margin)? {
            true => Ok(()),
            false => Err(lost(step, held)),
        };
    }
    let what = format!("{step}: pushing {} changed row(s)", rows.len());
    let done = lease::fenced(db, &held.host, held.epoch, held.margin, &what, |ptx| {
        let seq: i64 = ptx
            .query_one(
                "UPDATE fleetagent.sync SET seq = seq + 1, epoch = $1, holder = $2
                 WHERE name = 'fleet' RETURNING seq",
                &[&held.epoch, &held.host],
            )?
            .try_get(0)?;
        write_rows(ptx, &rows, &taken, seq, held.epoch)?;
        Ok(seq)
    })?;
    match done {
        Fenced::Lost => Err(lost(step, held)),
        Fenced::Committed(seq) => {
            crate::faults::point("ha-after-push")?;
            mark_synced(&tx, Some(max_id), &held.host, held.epoch, seq)?;
            tx.commit()?;
            Ok(())
        }
    }
}

/// The inbox rows this copy made events since its last push.
fn taken(conn: &Connection) -> Result<Vec<i64>> {
    Ok(conn
        .prepare_cached("SELECT inbox_id FROM ha_inbox_taken")?
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?)
}

/// The distinct (table, key) pairs changed since the last push, and the last change's id.
fn pending(conn: &Connection) -> Result<(i64, Vec<(String, String)>)> {
    let max_id: i64 = conn.query_row("SELECT COALESCE(MAX(id), 0) FROM ha_changes", [], |r| {
        r.get(0)
    })?;
    let keys = conn
        .prepare_cached("SELECT DISTINCT tbl, pk FROM ha_changes WHERE id <= ?1")?
        .query_map([max_id], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<Vec<(String, String)>>>()?;
    Ok((max_id, keys))
}

/// How this leader's copy was made current.
#[derive(Debug, Clone, PartialEq)]
pub enum Synced {
    /// The schema had no state: this copy became the shared state (`rows` rows pushed).
    Initialized { rows: usize },
    /// The shared state was last written by this copy: nothing to copy.
    Current,
    /// Replaced by the shared state (`rows` rows), last written by `holder` at `epoch`.
    Pulled {
        rows: usize,
        holder: String,
        epoch: i64,
    },
}

/// At the start of a leader's process: makes this copy the shared state's (see the module
/// doc). Runs before the capture is installed on `conn`.
pub fn sync_in(
    conn: &mut Connection,
    db: &mut SharedDb,
    held: &Held,
    now: Millis,
) -> Result<Synced> {
    let local = local_mark(conn)?;
    let pending_changes: i64 =
        conn.query_row("SELECT COUNT(*) FROM ha_changes", [], |r| r.get(0))?;
    match shared_mark(db)? {
        None => initialize(conn, db, held),
        Some(shared) if Some(&shared) == local.as_ref() => {
            if shared.1 == held.epoch || pending_changes == 0 {
                Ok(Synced::Current)
            } else {
                pull_all(conn, db, now)
            }
        }
        Some(_) => pull_all(conn, db, now),
    }
}

/// A copy that was never part of the shared state (no sync mark) and holds an install's own
/// state (runs, live instances) under another install id than the shared state's: leading
/// would replace it by the shared state, and its instances would be another install's, never
/// counted nor stopped (a single-host install enabled after a fresh host had led first). The
/// error says what to do; nothing was changed.
pub fn refuse_foreign_state(conn: &Connection, db: &mut SharedDb) -> Result<()> {
    if local_mark(conn)?.is_some() {
        return Ok(());
    }
    match foreign_state(conn, shared_install_id(db)?.as_deref())? {
        Some(line) => {
            bail!("ha: {line}; nothing was changed and the lease is released. {FOREIGN_STATE_FIX}")
        }
        None => Ok(()),
    }
}

/// What to do about [`foreign_state`].
pub const FOREIGN_STATE_FIX: &str = "To move this install to HA, stop the units on every host, drop the shared schema (DROP SCHEMA fleetagent CASCADE) and enable HA on this host first; to add this host to the shared install, give it a fresh state dir (`fleetagent init`) once its instances are stopped or handed over (docs/ha.md, \"Setting it up\")";

/// The agent state the leader last pushed, as its JSON row (None: none pushed yet).
pub fn shared_agent_state(db: &mut SharedDb) -> Result<Option<serde_json::Value>> {
    let data: Option<String> = db.retrying("reading the shared agent state", |c| {
        Ok(c.query_opt(
            "SELECT data FROM fleetagent.rows WHERE tbl = 'agent_state' AND data IS NOT NULL LIMIT 1",
            &[],
        )?
        .map(|r| r.get(0)))
    })?;
    Ok(data.and_then(|d| serde_json::from_str(&d).ok()))
}

/// The install id of the shared state's agent state (None: none pushed yet).
pub fn shared_install_id(db: &mut SharedDb) -> Result<Option<String>> {
    Ok(shared_agent_state(db)?.and_then(|v| v["install_id"].as_str().map(str::to_string)))
}

/// The install id this host speaks for, given the shared state's (`shared`, when read): the
/// shared one unless this copy holds another install's own state ([`foreign_state`]: named
/// as that install, never as the shared one), else its own.
pub fn install_shown(conn: &Connection, shared: Option<&str>) -> Result<String> {
    match shared {
        Some(id) if foreign_state(conn, Some(id))?.is_none() => Ok(id.to_string()),
        _ => crate::store::ops::install_id(conn),
    }
}

/// The line for a copy never synced (`doctor` asks too) that holds its own install's state
/// under another id than `shared`'s; None when leading would lose nothing.
pub fn foreign_state(conn: &Connection, shared: Option<&str>) -> Result<Option<String>> {
    let Some(shared) = shared else {
        return Ok(None);
    };
    if local_mark(conn)?.is_some() {
        return Ok(None);
    }
    let (runs, live): (i64, i64) = conn.query_row(
        "SELECT (SELECT COUNT(*) FROM runs),
                (SELECT COUNT(*) FROM instances WHERE gone_at IS NULL)",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let ours = crate::store::ops::install_id(conn)?;
    if (runs == 0 && live == 0) || ours == shared {
        return Ok(None);
    }
    Ok(Some(format!(
        "this host's database is install {ours} ({runs} run(s), {live} live instance(s)) and was never part of the shared state, which is install {shared}'s: leading would replace this host's state by it, and its instances would be another install's, never counted nor stopped"
    )))
}

/// The first leader of an empty schema: every row of this copy is pushed.
fn initialize(conn: &mut Connection, db: &mut SharedDb, held: &Held) -> Result<Synced> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let mut rows: Vec<Row> = Vec::new();
    for (table, key) in TABLES {
        let keys: Vec<String> = tx
            .prepare(&format!(
                "SELECT CAST({key} AS TEXT) FROM {table} ORDER BY rowid"
            ))?
            .query_map([], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        for pk in keys {
            let data = row_json(&tx, table, &pk)?;
            rows.push((table.to_string(), pk, data));
        }
    }
    let what = format!(
        "moving this host's state ({} rows) to the shared database",
        rows.len()
    );
    let done = lease::fenced(db, &held.host, held.epoch, held.margin, &what, |ptx| {
        let made = ptx.execute(
            "INSERT INTO fleetagent.sync (name, seq, epoch, holder) VALUES ('fleet', 1, $1, $2)
             ON CONFLICT (name) DO NOTHING",
            &[&held.epoch, &held.host],
        )?;
        if made == 1 {
            write_rows(ptx, &rows, &[], 1, held.epoch)?;
        }
        Ok(made == 1)
    })?;
    match done {
        Fenced::Lost => Err(lost("moving the state to the shared database", held)),
        Fenced::Committed(false) => bail!(
            "ha database {}: another host wrote the shared state while this one held the lease",
            db.shown()
        ),
        Fenced::Committed(true) => {
            mark_synced(&tx, None, &held.host, held.epoch, 1)?;
            tx.commit()?;
            Ok(Synced::Initialized { rows: rows.len() })
        }
    }
}

/// Replaces this copy's shared tables by the shared rows, read in one snapshot. Foreign keys
/// are off meanwhile: this host's conversation may name runs the shared state lacks (a pass
/// whose push never committed).
fn pull_all(conn: &mut Connection, db: &mut SharedDb, now: Millis) -> Result<Synced> {
    let ((holder, epoch, seq), rows) = db.retrying("reading the shared state", |c| {
        let mut tx = c
            .build_transaction()
            .isolation_level(postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()?;
        let mark = tx.query_one(
            "SELECT holder, epoch, seq FROM fleetagent.sync WHERE name = 'fleet'",
            &[],
        )?;
        let mark: (String, i64, i64) = (mark.try_get(0)?, mark.try_get(1)?, mark.try_get(2)?);
        let rows = tx
            .query(
                "SELECT tbl, data FROM fleetagent.rows WHERE data IS NOT NULL ORDER BY seq, tbl, pk",
                &[],
            )?
            .iter()
            .map(|r| Ok((r.try_get::<_, String>(0)?, r.try_get::<_, String>(1)?)))
            .collect::<Result<Vec<_>, postgres::Error>>()?;
        let present = tables_present(&mut tx)?;
        tx.commit()?;
        Ok((mark, (rows, present)))
    })?;
    let (rows, present) = rows;
    conn.pragma_update(None, "foreign_keys", false)?;
    let result = (|| -> Result<()> {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let skew: Option<Millis> = tx
            .query_row(
                "SELECT vast_clock_skew_ms FROM agent_state WHERE id = 1",
                [],
                |r| r.get(0),
            )
            .optional()?
            .flatten();
        // Each shared table's columns, read once.
        let mut columns_of: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for (table, _) in TABLES {
            if SHARED_LATER.contains(table) && !present.iter().any(|t| t == table) {
                continue;
            }
            tx.execute(&format!("DELETE FROM {table}"), [])?;
            columns_of.insert(table, columns(&tx, table)?);
        }
        for (table, data) in &rows {
            let (t, known) = columns_of.get_key_value(table.as_str()).ok_or_else(|| {
                anyhow!("the shared state has rows of an unknown table {table}: another host runs a newer fleetagent; upgrade this one")
            })?;
            insert_json(&tx, t, known, data)?;
        }
        // This host's clock stays its own (an older host pushed it with the rest). Its off
        // hours begin again here: the rows before are other hosts', written on their clocks,
        // which a repair must not move (store::clock_step); what this host writes from now
        // on is on its own clock, off as last measured (a slow host that took the lease back
        // by typing a pause lost it to the next listing's new start: the re-test).
        // The commands that take the lease date what they write after it (`pause`, `resume`,
        // `wakes add` read their clock once the store is open).
        let off = skew.is_some_and(|s| s.abs() > crate::store::clock_step::CLOCK_SKEW_MAX_MS);
        tx.execute(
            "UPDATE agent_state SET vast_clock_skew_ms = ?1, vast_clock_skew_since_ms = ?2
              WHERE id = 1",
            params![skew, off.then_some(now)],
        )?;
        mark_synced(&tx, None, &holder, epoch, seq)?;
        tx.commit()?;
        Ok(())
    })();
    conn.pragma_update(None, "foreign_keys", true)?;
    result.context("copying the shared state into this host's database")?;
    Ok(Synced::Pulled {
        rows: rows.len(),
        holder,
        epoch,
    })
}

/// The shared tables with at least one row in the shared state, a deleted one's included.
fn tables_present(c: &mut impl postgres::GenericClient) -> Result<Vec<String>, postgres::Error> {
    let later: Vec<&str> = SHARED_LATER.to_vec();
    c.query(
        "SELECT t FROM unnest($1::text[]) AS x(t)
          WHERE EXISTS (SELECT 1 FROM fleetagent.rows WHERE tbl = t)",
        &[&later],
    )?
    .iter()
    .map(|r| r.try_get(0))
    .collect()
}

/// On a leader whose copy is current or was just pulled: the rows of each table shared since
/// a later build ([`SHARED_LATER`]) that the shared state has none of are marked changed, so
/// the next push sends them (the first leader on the build that shares it seeds it). How many.
pub fn seed_new_tables(conn: &Connection, db: &mut SharedDb) -> Result<usize> {
    let present = db.retrying("reading which tables the shared state holds", |c| {
        tables_present(c)
    })?;
    let mut marked = 0;
    for table in SHARED_LATER
        .iter()
        .filter(|t| !present.iter().any(|p| p == *t))
    {
        let key = key_of(table)?;
        marked += conn.execute(
            &format!(
                "INSERT INTO ha_changes (tbl, pk) SELECT '{table}', CAST({key} AS TEXT) FROM {table}"
            ),
            [],
        )?;
    }
    Ok(marked)
}

/// While a host on an older build runs (it cannot copy them, and would hold the lease with
/// every pass failing: the HA re-test), the rows of [`SHARED_LATER`] are taken out of the
/// shared state and each host keeps its own; they are shared again once every host runs a
/// build that does ([`seed_new_tables`]). One statement, fenced by the lease `host` holds at
/// `epoch`: at a leader's start, and before it hands the lease over (`ha release`, a blind
/// leader's poll: an older host that registered since may lead next). How many rows went.
pub fn withdraw_new_tables(db: &mut SharedDb, host: &str, epoch: i64) -> Result<u64> {
    let later: Vec<&str> = SHARED_LATER.to_vec();
    db.retrying(
        "taking the measured rates and the day's hours out of the shared state",
        |c| {
            c.execute(
                "DELETE FROM fleetagent.rows WHERE tbl = ANY($1) AND EXISTS (
                     SELECT 1 FROM fleetagent.lease
                      WHERE holder = $2 AND epoch = $3 AND expires_at > now())",
                &[&later, &host, &epoch],
            )
        },
    )
}

/// This host's outbox sent to the shared inbox (any host, no fence: an event is safe to
/// forward twice, the inbox keeps one). How many were sent.
pub fn forward_outbox(
    conn: &Connection,
    db: &mut SharedDb,
    host: &str,
    now: Millis,
) -> Result<usize> {
    type Out = (i64, i64, String, String, Option<String>, i64);
    let rows: Vec<Out> = conn
        .prepare_cached(
            "SELECT id, priority, kind, reason, body, created_at FROM outbox
             WHERE forwarded_at IS NULL ORDER BY id LIMIT 1000",
        )?
        .query_map([], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
            ))
        })?
        .collect::<rusqlite::Result<_>>()?;
    let Some(last) = rows.last().map(|r| r.0) else {
        return Ok(0);
    };
    let ids: Vec<i64> = rows.iter().map(|r| r.0).collect();
    let prio: Vec<i32> = rows.iter().map(|r| r.1 as i32).collect();
    let kind: Vec<&str> = rows.iter().map(|r| r.2.as_str()).collect();
    let reason: Vec<&str> = rows.iter().map(|r| r.3.as_str()).collect();
    let body: Vec<Option<&str>> = rows.iter().map(|r| r.4.as_deref()).collect();
    let at: Vec<i64> = rows.iter().map(|r| r.5).collect();
    db.retrying("forwarding this host's events to the shared inbox", |c| {
        c.execute(
            "INSERT INTO fleetagent.inbox
                (origin_host, origin_id, priority, kind, reason, body, created_at)
             SELECT $1, i, p, k, r, b, a
             FROM unnest($2::bigint[], $3::int[], $4::text[], $5::text[], $6::text[], $7::bigint[])
                  AS x(i, p, k, r, b, a)
             ON CONFLICT (origin_host, origin_id, created_at) DO NOTHING",
            &[&host, &ids, &prio, &kind, &reason, &body, &at],
        )
    })?;
    conn.execute(
        "UPDATE outbox SET forwarded_at = ?1 WHERE id <= ?2 AND forwarded_at IS NULL",
        params![now, last],
    )?;
    Ok(rows.len())
}

/// How many inbox rows wait for the leader (those this copy already made events aside).
pub fn inbox_waiting(conn: &Connection, db: &mut SharedDb) -> Result<usize> {
    let taken = taken(conn)?;
    let n: i64 = db.retrying("reading the shared inbox", |c| {
        c.query_one(
            "SELECT COUNT(*) FROM fleetagent.inbox WHERE NOT (id = ANY($1))",
            &[&taken],
        )?
        .try_get(0)
    })?;
    Ok(n as usize)
}

/// On the leader: the inbox's rows made local events (and remembered as taken, so the next
/// push deletes them from the inbox with the events written). How many.
pub fn take_inbox(conn: &Connection, db: &mut SharedDb) -> Result<usize> {
    type In = (i64, i32, String, String, Option<String>, i64);
    let rows: Vec<In> = db.retrying("reading the shared inbox", |c| {
        c.query(
            "SELECT id, priority, kind, reason, body, created_at FROM fleetagent.inbox
             ORDER BY id LIMIT 1000",
            &[],
        )?
        .iter()
        .map(|r| {
            Ok((
                r.try_get(0)?,
                r.try_get(1)?,
                r.try_get(2)?,
                r.try_get(3)?,
                r.try_get(4)?,
                r.try_get(5)?,
            ))
        })
        .collect()
    })?;
    if rows.is_empty() {
        return Ok(0);
    }
    let tx = Transaction::new_unchecked(conn, TransactionBehavior::Immediate)?;
    let mut made = 0;
    for (id, priority, kind, reason, body, at) in rows {
        let fresh = tx.execute(
            "INSERT OR IGNORE INTO ha_inbox_taken (inbox_id) VALUES (?1)",
            [id],
        )?;
        if fresh == 1 {
            let priority = u8::try_from(priority.clamp(0, 2)).unwrap_or(2);
            crate::store::events::insert(&tx, priority, &kind, &reason, body.as_deref(), at)?;
            made += 1;
        }
    }
    tx.commit()?;
    Ok(made)
}
