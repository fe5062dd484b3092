//! What operations read and write on the `agent_state` row: the install's identity, the
//! hand-brake (`pause` / `resume`), vast.ai's health as the last listing left it, other
//! installs' instances seen under our label prefix, and the metrics file's last failure.

use anyhow::{bail, Context, Result};
use rusqlite::{params, Connection};
use serde::{Deserialize, Serialize};

use crate::clock::Millis;

/// The install id of every database `sim` writes: fixed, so that labels (and so every report)
/// never depend on chance, and shorter than a real install's [`INSTALL_ID_LEN`] letters, so
/// that a report can tell a simulation's database from an install's.
pub const SIM_INSTALL_ID: &str = "sim";

/// Whether `id` is the simulator's ([`SIM_INSTALL_ID`]).
pub fn is_sim(id: &str) -> bool {
    id == SIM_INSTALL_ID
}

/// Letters of a new install id. Lowercase letters only: a label's run part is `r<digits>`,
/// which an id can never look like.
const INSTALL_ID_LEN: i64 = 6;

/// Give the install its id if it has none. A new database (`new_database`) draws it at
/// random (SQLite's `random()`, seeded from the OS). A database made before install ids
/// derives it from its own creation time (the first session's start, in ms): a copy of that
/// database (a backup from before the upgrade, restored) gets the same id again, and so keeps
/// the instances launched under it since. Never change the derivation: an id must come out
/// the same from every build.
pub fn ensure_install_id(conn: &Connection, new_database: bool) -> Result<()> {
    let set: Option<String> =
        conn.query_row("SELECT install_id FROM agent_state WHERE id = 1", [], |r| {
            r.get(0)
        })?;
    if set.is_some() {
        return Ok(());
    }
    let created: Option<i64> = if new_database { None } else { born_at(conn)? };
    match created {
        Some(at) => set_install_id(conn, &derived_install_id(at)),
        None => {
            conn.execute(
                "UPDATE agent_state SET install_id = (
                     WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < ?1)
                     SELECT group_concat(substr('abcdefghijklmnopqrstuvwxyz', 1 + abs(random() % 26), 1), '')
                       FROM c)
                  WHERE id = 1 AND install_id IS NULL",
                params![INSTALL_ID_LEN],
            )?;
            Ok(())
        }
    }
}

/// The install id of a database made before install ids, created at `created_ms`:
/// [`INSTALL_ID_LEN`] letters from the FNV-1a hash of its creation time.
fn derived_install_id(created_ms: i64) -> String {
    let mut h = crate::text::fnv1a(format!("fleetagent install created {created_ms}").as_bytes());
    (0..INSTALL_ID_LEN)
        .map(|_| {
            let letter = (b'a' + (h % 26) as u8) as char;
            h /= 26;
            letter
        })
        .collect()
}

/// When this database was made: its first session's start (None for a database without one).
pub fn born_at(conn: &Connection) -> Result<Option<Millis>> {
    use rusqlite::OptionalExtension;
    Ok(conn
        .query_row(
            "SELECT started_at FROM sessions ORDER BY id LIMIT 1",
            [],
            |r| r.get(0),
        )
        .optional()?)
}

/// This install's id (a short lowercase word).
pub fn install_id(conn: &Connection) -> Result<String> {
    let id: Option<String> =
        conn.query_row("SELECT install_id FROM agent_state WHERE id = 1", [], |r| {
            r.get(0)
        })?;
    match id {
        Some(id) if is_install_id(&id) => Ok(id),
        Some(id) => bail!(
            "agent_state.install_id is {:?}, not a lowercase word of 1-16 letters",
            crate::text::clip(&id, 40)
        ),
        None => {
            bail!("agent_state.install_id is unset (the database was not opened by Store::open)")
        }
    }
}

/// Set the install id (the simulator fixes it so that its reports do not depend on chance).
pub fn set_install_id(conn: &Connection, id: &str) -> Result<()> {
    if !is_install_id(id) {
        bail!("install id {id:?} is not a lowercase word of 1-16 letters");
    }
    conn.execute(
        "UPDATE agent_state SET install_id = ?1 WHERE id = 1",
        params![id],
    )?;
    Ok(())
}

/// A lowercase ASCII word of 1-16 letters.
pub fn is_install_id(s: &str) -> bool {
    (1..=16).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_lowercase())
}

/// The hand-brake as recorded: set by `pause`, cleared by `resume`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pause {
    pub since: Millis,
    /// None: until `resume`.
    pub until: Option<Millis>,
    pub reason: String,
}

impl Pause {
    /// In force at `now`: open-ended, or not yet over.
    pub fn in_force(&self, now: Millis) -> bool {
        self.until.is_none_or(|u| now < u)
    }
}

/// The recorded pause, in force or expired (None when never paused or resumed).
pub fn pause_record(conn: &Connection) -> Result<Option<Pause>> {
    let row: (Option<Millis>, Option<Millis>, Option<String>) = conn.query_row(
        "SELECT paused_at, paused_until, paused_reason FROM agent_state WHERE id = 1",
        [],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )?;
    Ok(match row {
        (Some(since), until, reason) => Some(Pause {
            since,
            until,
            reason: reason.unwrap_or_default(),
        }),
        _ => None,
    })
}

/// The pause in force at `now`, if any.
pub fn paused(conn: &Connection, now: Millis) -> Result<Option<Pause>> {
    let Some(pause) = pause_record(conn)? else {
        return Ok(None);
    };
    // A clock run ahead of vast.ai's does not end a pause typed before early
    // (`clock_step::Ahead`).
    let ahead = crate::store::clock_step::ahead(conn)?;
    let held_by_vast = ahead.is_some_and(|a| pause.since < a.since && pause.in_force(now - a.ms));
    Ok((pause.in_force(now) || held_by_vast).then_some(pause))
}

pub fn set_pause(conn: &Connection, p: &Pause) -> Result<()> {
    conn.execute(
        "UPDATE agent_state SET paused_at = ?1, paused_until = ?2, paused_reason = ?3 WHERE id = 1",
        params![p.since, p.until, p.reason],
    )?;
    Ok(())
}

/// End the pause; returns the one that was recorded (in force or expired).
pub fn clear_pause(conn: &Connection) -> Result<Option<Pause>> {
    let was = pause_record(conn)?;
    conn.execute(
        "UPDATE agent_state SET paused_at = NULL, paused_until = NULL, paused_reason = NULL WHERE id = 1",
        [],
    )?;
    Ok(was)
}

/// vast.ai's health as the last listing left it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct VastHealth {
    /// When a listing last succeeded.
    pub ok_at: Option<Millis>,
    /// The last listing's failure; None once a listing succeeded after it.
    pub error: Option<String>,
    /// When the failures began: the first failed listing since the last success.
    pub error_at: Option<Millis>,
    /// This host's clock less vast.ai's, as the last listing that worked measured it (None:
    /// not measured: no `Date` in its answer).
    pub clock_skew_ms: Option<Millis>,
}

impl VastHealth {
    /// The last listing succeeded (false before any).
    pub fn ok(&self) -> bool {
        self.ok_at.is_some() && self.error.is_none()
    }
}

pub fn vast_health(conn: &Connection) -> Result<VastHealth> {
    Ok(conn.query_row(
        "SELECT vast_ok_at, vast_error, vast_error_at, vast_clock_skew_ms
           FROM agent_state WHERE id = 1",
        [],
        |r| {
            Ok(VastHealth {
                ok_at: r.get(0)?,
                error: r.get(1)?,
                error_at: r.get(2)?,
                clock_skew_ms: r.get(3)?,
            })
        },
    )?)
}

/// Record this host's clock against vast.ai's as a listing that worked measured it (None:
/// unmeasured; `clock_step::store_skew` writes only measurements).
pub fn record_clock_skew(conn: &Connection, skew_ms: Option<Millis>) -> Result<()> {
    conn.prepare_cached("UPDATE agent_state SET vast_clock_skew_ms = ?1 WHERE id = 1")?
        .execute(params![skew_ms])?;
    Ok(())
}

/// Record a listing's result: `Ok(())` clears the error, `Err(msg)` records the newest
/// message beside when the failures began: `error_at` is the first failure since the last
/// success (so "failing since" means something), and `ok_at` stays the last success.
pub fn record_listing(conn: &Connection, result: Result<(), &str>, now: Millis) -> Result<()> {
    if result.is_ok() {
        // The end of a failure is said as its start was (a drill: only `doctor` went green).
        let h = vast_health(conn)?;
        if let (Some(error), Some(since)) = (h.error.as_deref(), h.error_at) {
            log::info!(
                target: crate::journal::NOTICE,
                "vast.ai's listing works again, after failing for {} (since {}; the last failure: {})",
                crate::clock::human_duration(now - since),
                crate::clock::rfc3339(since),
                crate::text::clip(error, 200)
            );
        }
    }
    match result {
        Ok(()) => conn.execute(
            "UPDATE agent_state SET vast_ok_at = ?1, vast_error = NULL, vast_error_at = NULL WHERE id = 1",
            params![now],
        )?,
        Err(e) => conn.execute(
            "UPDATE agent_state SET vast_error = ?1, vast_error_at = COALESCE(vast_error_at, ?2)
              WHERE id = 1",
            params![crate::text::clip(e, 500), now],
        )?,
    };
    Ok(())
}

/// Whether recording `result` changes what `doctor` and the metrics say: a failure where
/// none was recorded, or a success after a failure (or before any listing). `poll`, every
/// minute, records only then, so a poll that sees nothing new writes nothing; a pass records
/// every listing.
pub fn listing_changes(h: &VastHealth, result: Result<(), &str>) -> bool {
    match result {
        Ok(()) => !h.ok(),
        Err(_) => h.error.is_none(),
    }
}

/// An instance under our label prefix that carries another install's id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForeignInstance {
    pub install_id: String,
    pub label: String,
    pub vast_id: i64,
}

/// The other installs' ids among these instances, each once, sorted.
pub fn install_ids_of(list: &[ForeignInstance]) -> Vec<&str> {
    let mut ids: Vec<&str> = list.iter().map(|f| f.install_id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// What the last listing saw of other installs (empty when none), and when.
pub fn foreign_installs(conn: &Connection) -> Result<(Vec<ForeignInstance>, Option<Millis>)> {
    let (json, at): (Option<String>, Option<Millis>) = conn.query_row(
        "SELECT foreign_installs, foreign_installs_at FROM agent_state WHERE id = 1",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let list = match json {
        None => Vec::new(),
        Some(j) => serde_json::from_str(&j)
            .context("agent_state.foreign_installs is not a list of instances")?,
    };
    Ok((list, at))
}

pub fn set_foreign_installs(
    conn: &Connection,
    list: &[ForeignInstance],
    now: Millis,
) -> Result<()> {
    conn.execute(
        "UPDATE agent_state SET foreign_installs = ?1, foreign_installs_at = ?2 WHERE id = 1",
        params![serde_json::to_string(list)?, now],
    )?;
    Ok(())
}

/// The metrics textfile's last write failure and when the failures began (the first since
/// the last success; None after a success).
pub fn metrics_error(conn: &Connection) -> Result<Option<(String, Millis)>> {
    let row: (Option<String>, Option<Millis>) = conn.query_row(
        "SELECT metrics_error, metrics_error_at FROM agent_state WHERE id = 1",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    Ok(match row {
        (Some(e), Some(at)) => Some((e, at)),
        _ => None,
    })
}

/// Record a write's failure (`Some`: the newest message, the first failure's time kept) or
/// its success (`None`: both cleared).
pub fn set_metrics_error(conn: &Connection, error: Option<&str>, now: Millis) -> Result<()> {
    conn.execute(
        "UPDATE agent_state SET metrics_error = ?1,
                metrics_error_at = CASE WHEN ?1 IS NULL THEN NULL
                                        ELSE COALESCE(metrics_error_at, ?2) END
          WHERE id = 1",
        params![error.map(|e| crate::text::clip(e, 500)), now],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;

    #[test]
    fn every_database_gets_one_install_id_that_stays() {
        let s = Store::open_memory(1_000).unwrap();
        let id = install_id(&s.conn).unwrap();
        assert_eq!(id.len(), 6, "{id}");
        assert!(is_install_id(&id), "{id}");
        ensure_install_id(&s.conn, true).unwrap();
        assert_eq!(install_id(&s.conn).unwrap(), id, "never replaced");
        let other = Store::open_memory(1_000).unwrap();
        // 26^6 ids: two databases sharing one would be a 1 in 300 million chance.
        assert_ne!(install_id(&other.conn).unwrap(), id);
        assert!(
            set_install_id(&s.conn, "r12").is_err(),
            "a run part is not an id"
        );
        set_install_id(&s.conn, "sim").unwrap();
        assert_eq!(install_id(&s.conn).unwrap(), "sim");
    }

    #[test]
    fn a_pause_is_in_force_until_its_end_or_a_resume() {
        let s = Store::open_memory(1_000).unwrap();
        assert_eq!(paused(&s.conn, 1_000).unwrap(), None);
        let p = Pause {
            since: 1_000,
            until: Some(5_000),
            reason: "maintenance".into(),
        };
        set_pause(&s.conn, &p).unwrap();
        assert_eq!(paused(&s.conn, 4_999).unwrap(), Some(p.clone()));
        assert_eq!(paused(&s.conn, 5_000).unwrap(), None, "over at its end");
        assert_eq!(
            pause_record(&s.conn).unwrap(),
            Some(p.clone()),
            "kept for inspect"
        );
        let open = Pause { until: None, ..p };
        set_pause(&s.conn, &open).unwrap();
        assert!(paused(&s.conn, i64::MAX / 2).unwrap().is_some());
        assert_eq!(clear_pause(&s.conn).unwrap(), Some(open));
        assert_eq!(pause_record(&s.conn).unwrap(), None);
    }

    #[test]
    fn the_listing_health_keeps_the_last_success_beside_the_failure() {
        let s = Store::open_memory(1_000).unwrap();
        assert!(!vast_health(&s.conn).unwrap().ok(), "no listing yet");
        assert!(listing_changes(&vast_health(&s.conn).unwrap(), Ok(())));
        record_listing(&s.conn, Ok(()), 2_000).unwrap();
        assert!(vast_health(&s.conn).unwrap().ok());
        assert!(!listing_changes(&vast_health(&s.conn).unwrap(), Ok(())));
        assert!(listing_changes(&vast_health(&s.conn).unwrap(), Err("x")));
        record_listing(&s.conn, Err("HTTP 401: invalid key"), 3_000).unwrap();
        record_listing(&s.conn, Err("HTTP 401: key revoked"), 3_500).unwrap();
        let h = vast_health(&s.conn).unwrap();
        assert!(!h.ok());
        assert_eq!(h.ok_at, Some(2_000));
        assert_eq!(
            h.error.as_deref(),
            Some("HTTP 401: key revoked"),
            "the newest"
        );
        assert_eq!(h.error_at, Some(3_000), "failing since the first failure");
        assert!(!listing_changes(&h, Err("y")) && listing_changes(&h, Ok(())));
        record_listing(&s.conn, Ok(()), 4_000).unwrap();
        assert_eq!(vast_health(&s.conn).unwrap().error, None);
        record_listing(&s.conn, Err("timeout"), 5_000).unwrap();
        assert_eq!(
            vast_health(&s.conn).unwrap().error_at,
            Some(5_000),
            "a success starts the count again"
        );
    }

    #[test]
    fn foreign_installs_and_the_metrics_error_round_trip() {
        let s = Store::open_memory(1_000).unwrap();
        assert_eq!(foreign_installs(&s.conn).unwrap(), (Vec::new(), None));
        let list = vec![ForeignInstance {
            install_id: "qwerty".into(),
            label: "fleetagent-qwerty-r3-0a0b0c0d".into(),
            vast_id: 42,
        }];
        set_foreign_installs(&s.conn, &list, 2_000).unwrap();
        assert_eq!(foreign_installs(&s.conn).unwrap(), (list, Some(2_000)));
        assert_eq!(metrics_error(&s.conn).unwrap(), None);
        set_metrics_error(&s.conn, Some("permission denied"), 3_000).unwrap();
        set_metrics_error(&s.conn, Some("no such dir"), 3_500).unwrap();
        assert_eq!(
            metrics_error(&s.conn).unwrap(),
            Some(("no such dir".into(), 3_000))
        );
        set_metrics_error(&s.conn, None, 4_000).unwrap();
        assert_eq!(metrics_error(&s.conn).unwrap(), None);
    }
}
