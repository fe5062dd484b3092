//! `ha status` and `inspect`'s `ha` object: the lease and the hosts as the shared database
//! shows them. Reading never fails: an unreachable database is role `unknown` with its error.

use anyhow::Result;
use serde::Serialize;

use super::db::SharedDb;
use super::node::Settings;
use crate::clock::rfc3339;

/// DESIGN.md's fields, in `inspect --json`'s `ha` and `ha status --json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Status {
    pub host_id: String,
    /// `leader`, `follower`, or `unknown` (the shared database unreachable).
    pub role: String,
    pub holder: Option<String>,
    pub epoch: Option<i64>,
    /// Seconds the lease has left, in database time; negative: it expired that long ago.
    pub lease_left_secs: Option<f64>,
    pub hosts: Vec<HostStatus>,
    pub error: Option<String>,
    /// The writes this host's database role lacks on the shared tables (`fleetagent.hosts
    /// INSERT`, ...): every `run` here would fail. Judged by doctor; not among DESIGN.md's
    /// JSON fields.
    #[serde(skip)]
    pub cannot_write: Vec<String>,
    /// The shared agent state's last successful pass (Unix ms, the leader's clock): how a
    /// follower's `doctor` sees a leader that holds the lease but whose passes fail. Not
    /// among DESIGN.md's JSON fields.
    #[serde(skip)]
    pub last_success_at: Option<i64>,
    /// The shared agent state's vast.ai listing failure and since when (Unix ms, the
    /// leader's clock; None while its last listing worked): a leader that holds the lease but
    /// cannot see the fleet. Not among DESIGN.md's JSON fields.
    #[serde(skip)]
    pub vast_error: Option<(String, i64)>,
    /// The shared state's install id (None: nothing pushed yet); not among DESIGN.md's JSON
    /// fields.
    #[serde(skip)]
    pub install_id: Option<String>,
    /// Seconds since the holder took the lease (database time); not among DESIGN.md's JSON
    /// fields.
    #[serde(skip)]
    pub held_secs: Option<f64>,
}

/// One host as the shared database last heard from it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HostStatus {
    pub host_id: String,
    /// RFC 3339, database time.
    pub last_seen: String,
    pub version: String,
    pub config_hash: String,
    /// Where it last ran from (`hostname:state dir`): shown by `ha status`, judged by doctor;
    /// not among DESIGN.md's JSON fields.
    #[serde(skip)]
    pub place: Option<String>,
    /// Seconds since its last contact, database time.
    #[serde(skip)]
    pub seen_secs_ago: f64,
    /// A second place under the same id, and seconds since it ran (`hosts::record`).
    #[serde(skip)]
    pub twin: Option<(String, f64)>,
    /// How far its clock was ahead of the database's at its last contact (ms).
    #[serde(skip)]
    pub clock_ahead_ms: Option<i64>,
    /// Its last listing of vast.ai as a follower failed (newer than its last one that
    /// worked): the error and seconds since (`hosts::record_vast`).
    #[serde(skip)]
    pub vast_failing: Option<(String, f64)>,
    /// Its config's keys with a hash of each value (`ha::node::config_keys`).
    #[serde(skip)]
    pub config_keys: Option<String>,
    /// Its last reading of demand (and FIL/USD) as a follower failed: why, and seconds ago.
    /// Judged by doctor; not among DESIGN.md's JSON fields.
    #[serde(skip)]
    pub probe_failing: Option<(String, f64)>,
}

impl HostStatus {
    /// The places other than `here` that ran under this id within the twin window.
    pub fn other_places(&self, here: &str) -> Vec<(String, f64)> {
        let held = self.place.as_deref().map(|p| (p, self.seen_secs_ago));
        super::hosts::other_places(held, self.twin.as_ref(), here)
    }
}

/// The lease row: holder, epoch, seconds left (negative: expired), seconds since its holder
/// took it.
pub fn lease_row(db: &mut SharedDb) -> Result<Option<(String, i64, f64, f64)>> {
    db.retrying("reading the lease", |c| {
        c.query_opt(
            "SELECT holder, epoch, EXTRACT(EPOCH FROM expires_at - now())::float8,
                    EXTRACT(EPOCH FROM now() - acquired_at)::float8
             FROM fleetagent.lease WHERE name = 'fleet'",
            &[],
        )?
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?, r.try_get(3)?)))
        .transpose()
    })
}

fn hosts(db: &mut SharedDb) -> Result<Vec<HostStatus>> {
    Ok(super::hosts::list(db)?
        .into_iter()
        .map(|h| HostStatus {
            host_id: h.host_id,
            last_seen: rfc3339(h.last_seen_ms),
            version: h.version,
            config_hash: h.config_hash,
            place: h.place,
            seen_secs_ago: h.seen_secs_ago,
            twin: h.twin,
            clock_ahead_ms: h.clock_ahead_ms,
            vast_failing: h.vast_failing,
            probe_failing: h.probe_failing,
            config_keys: h.config_keys,
        })
        .collect())
}

/// `[ha]` enabled but unusable before any database is reached (no URL, an unreadable
/// credential): the role is unknown and `error` says why, so `inspect` still reports.
pub fn unconfigured(config: &crate::config::Config, error: &anyhow::Error) -> Status {
    let host = config.ha.host_id.clone();
    Status {
        error: Some(crate::error::one_line(error)),
        ..unknown(host.unwrap_or_else(super::node::default_host_id))
    }
}

/// This host's status before the shared database has said anything: role unknown.
fn unknown(host_id: String) -> Status {
    Status {
        host_id,
        role: "unknown".into(),
        holder: None,
        epoch: None,
        lease_left_secs: None,
        hosts: Vec::new(),
        error: None,
        cannot_write: Vec::new(),
        last_success_at: None,
        vast_error: None,
        install_id: None,
        held_secs: None,
    }
}

/// The writes a host's role needs on the shared tables that it lacks, as `table PRIVILEGE`.
fn cannot_write(db: &mut SharedDb) -> Result<Vec<String>> {
    db.retrying("reading the role's privileges", |c| {
        Ok(c.query(
            "SELECT t || ' ' || p FROM (VALUES
                 ('lease', 'INSERT'), ('lease', 'UPDATE'),
                 ('hosts', 'INSERT'), ('hosts', 'UPDATE'),
                 ('sync', 'INSERT'), ('sync', 'UPDATE'),
                 ('rows', 'INSERT'), ('rows', 'UPDATE'),
                 ('inbox', 'INSERT'), ('inbox', 'DELETE')) AS need(t, p)
             WHERE NOT has_table_privilege('fleetagent.' || t, p)",
            &[],
        )?
        .iter()
        .map(|r| format!("fleetagent.{}", r.get::<_, String>(0)))
        .collect())
    })
}

/// What the shared database says now, from this host's point of view.
pub fn read(settings: &Settings) -> Status {
    let mut status = unknown(settings.host.clone());
    let result = (|| -> Result<()> {
        let mut db = settings.connect()?;
        super::schema::migrate(&mut db)?;
        if let Some((holder, epoch, left, held)) = lease_row(&mut db)? {
            status.role = if holder == settings.host && left > 0.0 {
                "leader".into()
            } else {
                "follower".into()
            };
            status.holder = Some(holder);
            status.epoch = Some(epoch);
            status.lease_left_secs = Some((left * 10.0).round() / 10.0);
            status.held_secs = Some(held);
        } else {
            status.role = "follower".into();
        }
        status.hosts = hosts(&mut db)?;
        status.cannot_write = cannot_write(&mut db)?;
        let shared = super::mirror::shared_agent_state(&mut db)?;
        status.last_success_at = shared.as_ref().and_then(|v| v["last_success_at"].as_i64());
        status.vast_error = shared.as_ref().and_then(|v| {
            Some((
                v["vast_error"].as_str()?.to_string(),
                v["vast_error_at"].as_i64()?,
            ))
        });
        status.install_id = shared
            .as_ref()
            .and_then(|v| v["install_id"].as_str().map(str::to_string));
        Ok(())
    })();
    if let Err(e) = result {
        status.role = "unknown".into();
        status.error = Some(crate::error::one_line(&e));
    }
    status
}

/// `ha release`: ends this host's lease now, so the next host to `poll` takes it (epoch + 1).
/// `Ok(None)`: this host did not hold a live lease; else the epoch released.
pub fn release(settings: &Settings) -> Result<Option<i64>> {
    let mut db = settings.connect()?;
    super::schema::migrate(&mut db)?;
    match lease_row(&mut db)? {
        Some((holder, epoch, left, _)) if holder == settings.host && left > 0.0 => {
            // A host on an older build that registered since this leader's last run may lead
            // next: it cannot copy what only newer builds share (the HA re-test: it held the
            // lease with every pass failing).
            if !super::hosts::all_share_later_tables(&mut db)? {
                super::mirror::withdraw_new_tables(&mut db, &settings.host, epoch)?;
            }
            Ok(super::lease::release(&mut db, &settings.host, epoch)?.then_some(epoch))
        }
        _ => Ok(None),
    }
}
