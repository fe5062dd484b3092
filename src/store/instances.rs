//! Our instances as fleetagent knows them, keyed by label.

use anyhow::Result;
use rusqlite::{params, Connection};
use serde::Serialize;

use crate::clock::Millis;

crate::text_enum! {
    /// The lifecycle state of one of our instances (`instances.state`); `fleet::state` says
    /// how a listed instance gets one.
    pub enum State, "instances.state" {
        Launching = "launching",
        Loading = "loading",
        Booted = "booted",
        Registered = "registered",
        Proving = "proving",
        Dead = "dead",
        Stopped = "stopped",
        /// A bid of ours that vast.ai paused without our asking (outbid): it may resume at
        /// any moment, so it counts against the caps at its full price.
        Outbid = "outbid",
        Gone = "gone",
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InstanceRow {
    pub label: String,
    pub vast_id: Option<i64>,
    pub state: State,
    pub actual_status: Option<String>,
    pub status_msg: Option<String>,
    pub gpu_name: Option<String>,
    pub dph: Option<f64>,
    pub offer_id: Option<i64>,
    pub public_ip: Option<String>,
    pub machine_name: Option<String>,
    /// The `host_and_port` of the Curio worker last matched to it (kept while unmatched):
    /// two of ours with one address are behind one Curio machine (`fleet::identity`).
    pub worker_address: Option<String>,
    pub launched_run: Option<i64>,
    pub adopted: bool,
    pub created_at: Millis,
    pub state_since: Millis,
    pub last_seen_at: Option<Millis>,
    pub gone_at: Option<Millis>,
    /// The vast.ai host (`machine_id`) it runs on, when known.
    pub machine_id: Option<i64>,
    /// A bid (interruptible) instance.
    pub is_bid: bool,
    /// $/h its disk bills (vast.ai's `storage_total_cost`), also while stopped.
    pub storage_dph: Option<f64>,
    /// The spans it spent stopped or outbid before its present state (disk billed, not the
    /// GPU): kept by [`upsert`], whatever the caller passes; `fleet::money::spend_since`
    /// counts them.
    pub paused_spans: Vec<PausedSpan>,
}

/// A span spent stopped or outbid: from, to (Unix ms) and the disk's $/h meanwhile.
pub type PausedSpan = (Millis, Millis, f64);

/// vast.ai bills the disk of an instance in this state, not its GPU: stopped by us, or a bid
/// it paused (outbid).
pub fn is_paused(state: State) -> bool {
    matches!(state, State::Stopped | State::Outbid)
}

/// Spans older than this are dropped when a new one is kept: today's spend needs only today.
const PAUSED_SPANS_KEPT_MS: Millis = 2 * 86_400_000;

/// `new`'s paused spans as they follow from `old` (the row as stored): `old`'s, plus the
/// span `old` was in when it was paused and `new` is not, or is paused at another time (from
/// `old.state_since` to when `new` left it: its `gone_at`, else its `state_since`).
///
/// A running instance listed at a new price (a bid repriced, a host's change) keeps what it
/// billed before at the old one: its hours since its launch not already in a span become
/// spans at the old $/h, up to the listing that saw the new price (a walkthrough saw a rise
/// from $0.40 to $2.00 count ten earlier hours at $2.00, the daily cap then refusing WORKERS
/// DEAD's launch; a fall let a launch pass the cap). A row no listing has priced yet (a
/// launch's offer price) is not repriced so.
pub fn paused_spans_after(old: &InstanceRow, new: &InstanceRow) -> Vec<PausedSpan> {
    let mut spans = old.paused_spans.clone();
    let left = new.state != old.state || new.state_since != old.state_since;
    if is_paused(old.state) && left {
        let to = new.gone_at.unwrap_or(new.state_since).max(old.state_since);
        spans.push((old.state_since, to, old.storage_dph.unwrap_or(0.0)));
        spans.retain(|s| s.1 >= to - PAUSED_SPANS_KEPT_MS);
    }
    let repriced = match (old.dph, new.dph) {
        (Some(a), Some(b)) => (a - b).abs() > 1e-9,
        _ => false,
    };
    let paused_both = is_paused(old.state) && is_paused(new.state);
    if repriced && !paused_both && old.gone_at.is_none() {
        if let (Some(a), Some(seen)) = (old.dph, old.last_seen_at) {
            // Into or out of a pause, the new price counts from that change (the pause's own
            // span, closed above or open, covers its hours: a re-test resumed a bid at a
            // raised price and saw its hours before the outbid counted at it).
            let to = match is_paused(old.state) || is_paused(new.state) {
                true => new.state_since.max(old.created_at),
                false => new.last_seen_at.unwrap_or(seen).max(seen),
            };
            let from = old.created_at.max(to - PAUSED_SPANS_KEPT_MS);
            spans.sort_by_key(|s| s.0);
            let mut gaps = Vec::new();
            let mut at = from;
            for s in spans.iter().filter(|s| s.1 > from) {
                if s.0 > at {
                    gaps.push((at, s.0.min(to), a));
                }
                at = at.max(s.1);
            }
            if at < to {
                gaps.push((at, to, a));
            }
            spans.extend(gaps.into_iter().filter(|g| g.1 > g.0));
            spans.retain(|s| s.1 >= to - PAUSED_SPANS_KEPT_MS);
        }
    }
    spans
}

fn spans_from_sql(text: Option<String>) -> rusqlite::Result<Vec<PausedSpan>> {
    match text {
        None => Ok(Vec::new()),
        Some(t) => serde_json::from_str(&t).map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(
                20,
                rusqlite::types::Type::Text,
                format!("instances.paused_spans is not a list of [from, to, $/h]: {e}").into(),
            )
        }),
    }
}

pub const COLS: &str = "label, vast_id, state, actual_status, status_msg, gpu_name, dph, offer_id,
    public_ip, machine_name, launched_run, adopted, created_at, state_since, last_seen_at, gone_at,
    worker_address, machine_id, is_bid, storage_dph, paused_spans";

pub fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<InstanceRow> {
    Ok(InstanceRow {
        label: r.get(0)?,
        vast_id: r.get(1)?,
        state: r.get(2)?,
        actual_status: r.get(3)?,
        status_msg: r.get(4)?,
        gpu_name: r.get(5)?,
        dph: r.get(6)?,
        offer_id: r.get(7)?,
        public_ip: r.get(8)?,
        machine_name: r.get(9)?,
        launched_run: r.get(10)?,
        adopted: r.get(11)?,
        created_at: r.get(12)?,
        state_since: r.get(13)?,
        last_seen_at: r.get(14)?,
        gone_at: r.get(15)?,
        worker_address: r.get(16)?,
        machine_id: r.get(17)?,
        is_bid: r.get(18)?,
        storage_dph: r.get(19)?,
        paused_spans: spans_from_sql(r.get(20)?)?,
    })
}

/// Instances not yet gone, oldest first.
pub fn live(conn: &Connection) -> Result<Vec<InstanceRow>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLS} FROM instances WHERE gone_at IS NULL ORDER BY created_at, label"
    ))?;
    let rows = stmt
        .query_map([], row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// Live instances fleetagent adopted (found in the listing, not launched by a recorded
/// intent) rented since `since`: label, vast.ai id, when rented.
pub fn adopted_live(
    conn: &Connection,
    since: Millis,
    with_gone: bool,
) -> Result<Vec<(String, Option<i64>, Millis)>> {
    let mut stmt = conn.prepare_cached(
        "SELECT label, vast_id, created_at FROM instances
          WHERE adopted = 1 AND (gone_at IS NULL OR ?2) AND created_at >= ?1
          ORDER BY created_at, label",
    )?;
    let rows = stmt
        .query_map(params![since, with_gone], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// Whether this database has never held an instance row (none rented, adopted or launching).
pub fn none_ever(conn: &Connection) -> Result<bool> {
    Ok(!conn
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM instances)")?
        .query_row([], |r| r.get::<_, bool>(0))?)
}

/// Instances that were alive at some point after `since` (for daily spend).
pub fn alive_since(conn: &Connection, since: Millis) -> Result<Vec<InstanceRow>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLS} FROM instances WHERE gone_at IS NULL OR gone_at > ?1 ORDER BY created_at"
    ))?;
    let rows = stmt
        .query_map(params![since], row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// Instances with a Curio worker (its address kept) alive at some point after `since`: the
/// boots the boot breaker's row starts again after (`fleet::boot::newest_booted`).
pub fn with_worker_since(conn: &Connection, since: Millis) -> Result<Vec<InstanceRow>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLS} FROM instances
          WHERE worker_address IS NOT NULL AND (gone_at IS NULL OR gone_at > ?1)"
    ))?;
    let rows = stmt
        .query_map(params![since], row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// Write `i` by its label. Its paused spans are the stored row's, plus the one that ended
/// now ([`paused_spans_after`]): every writer through here (a pass, a tool, an operator's
/// stop) keeps them, whatever spans it passes. An HA host's copy pulled from the shared
/// database (`ha::mirror`) brings the column as the leader wrote it.
pub fn upsert(conn: &Connection, i: &InstanceRow) -> Result<()> {
    let spans = match by_label(conn, &i.label)? {
        Some(old) => paused_spans_after(&old, i),
        None => Vec::new(),
    };
    let spans = (!spans.is_empty())
        .then(|| serde_json::to_string(&spans))
        .transpose()?;
    // Cached, as `by_label`: reconciliation writes and looks up every instance each pass
    // (parsing the two again took about a sixth of a churning fleet's pass in the simulator).
    conn.prepare_cached(&format!(
            "INSERT INTO instances ({COLS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21)
             ON CONFLICT(label) DO UPDATE SET vast_id = excluded.vast_id, state = excluded.state,
                actual_status = excluded.actual_status, status_msg = excluded.status_msg,
                gpu_name = excluded.gpu_name, dph = excluded.dph, offer_id = excluded.offer_id,
                public_ip = excluded.public_ip, machine_name = excluded.machine_name,
                state_since = excluded.state_since, last_seen_at = excluded.last_seen_at,
                gone_at = excluded.gone_at, worker_address = excluded.worker_address,
                machine_id = excluded.machine_id,
                is_bid = excluded.is_bid, storage_dph = excluded.storage_dph,
                paused_spans = excluded.paused_spans"
    ))?
    .execute(params![
            i.label,
            i.vast_id,
            i.state,
            i.actual_status,
            i.status_msg,
            i.gpu_name,
            i.dph,
            i.offer_id,
            i.public_ip,
            i.machine_name,
            i.launched_run,
            i.adopted,
            i.created_at,
            i.state_since,
            i.last_seen_at,
            i.gone_at,
            i.worker_address,
            i.machine_id,
            i.is_bid,
        i.storage_dph,
        spans
    ])?;
    Ok(())
}

/// One instance by its vast.ai id, gone or not.
pub fn by_vast_id(conn: &Connection, vast_id: i64) -> Result<Option<InstanceRow>> {
    use rusqlite::OptionalExtension;
    Ok(conn
        .prepare_cached(&format!("SELECT {COLS} FROM instances WHERE vast_id = ?1"))?
        .query_row(params![vast_id], row)
        .optional()?)
}

/// One instance by its label, gone or not.
pub fn by_label(conn: &Connection, label: &str) -> Result<Option<InstanceRow>> {
    use rusqlite::OptionalExtension;
    Ok(conn
        .prepare_cached(&format!("SELECT {COLS} FROM instances WHERE label = ?1"))?
        .query_row(params![label], row)
        .optional()?)
}

/// Forget a row that never became an instance (a launch vast.ai clearly refused).
pub fn delete(conn: &Connection, label: &str) -> Result<()> {
    conn.execute("DELETE FROM instances WHERE label = ?1", params![label])?;
    Ok(())
}

/// Instances not yet gone, counted by state.
pub fn count_by_state(conn: &Connection) -> Result<Vec<(String, i64)>> {
    let mut stmt =
        conn.prepare("SELECT state, COUNT(*) FROM instances WHERE gone_at IS NULL GROUP BY state")?;
    let rows = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// Launches whose create may not have happened (a 5xx or a timeout left the intent open, no
/// vast.ai id yet) and that a good listing at least a minute after the create did not show
/// (`listed_ok_at`: the last good listing): counted against the caps until the intent is
/// settled, but no longer on their way (`policy::rules::facts`, `UNSEEN_LAUNCH_MS`).
pub fn unconfirmed_launches(conn: &Connection, listed_ok_at: Option<Millis>) -> Result<i64> {
    let Some(ok_at) = listed_ok_at else {
        return Ok(0);
    };
    Ok(conn.query_row(
        "SELECT COUNT(*) FROM instances
          WHERE gone_at IS NULL AND state = 'launching' AND vast_id IS NULL
            AND created_at <= ?1",
        params![ok_at - UNSEEN_LAUNCH_MS],
        |r| r.get(0),
    )?)
}

/// How long after its create a launch may be missing from a good listing before it is no
/// longer counted as on its way: vast.ai lists a create at once.
pub const UNSEEN_LAUNCH_MS: Millis = 60_000;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_store;

    fn instance(label: &str, state: State, dph: f64, gone_at: Option<Millis>) -> InstanceRow {
        InstanceRow {
            label: label.into(),
            vast_id: None,
            state,
            actual_status: None,
            status_msg: None,
            gpu_name: None,
            dph: Some(dph),
            offer_id: None,
            public_ip: None,
            machine_name: None,
            worker_address: None,
            launched_run: None,
            adopted: false,
            created_at: 0,
            state_since: 0,
            last_seen_at: None,
            gone_at,
            machine_id: None,
            is_bid: false,
            storage_dph: None,
            paused_spans: Vec::new(),
        }
    }

    #[test]
    fn live_instances_counted_by_state() {
        let (_dir, s) = test_store(0);
        assert!(count_by_state(&s.conn).unwrap().is_empty());
        for i in [
            instance("a", State::Proving, 0.5, None),
            instance("b", State::Proving, 0.25, None),
            instance("c", State::Stopped, 4.0, None),
            instance("d", State::Gone, 8.0, Some(1)),
            instance("e", State::Booted, 0.125, None),
        ] {
            upsert(&s.conn, &i).unwrap();
        }
        assert_eq!(
            count_by_state(&s.conn).unwrap(),
            vec![
                ("booted".into(), 1),
                ("proving".into(), 2),
                ("stopped".into(), 1),
            ]
        );
    }
}
