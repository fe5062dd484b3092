//! The `hosts` table: every host that talked to the shared database, when (database time),
//! its version and the hash of its config (a failover must not change the caps).

use anyhow::Result;

use super::db::SharedDb;

/// One host as the shared database last saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct HostSeen {
    pub host_id: String,
    /// Seconds since its last contact, in database time.
    pub seen_secs_ago: f64,
    /// Its last contact (milliseconds since the epoch, database time).
    pub last_seen_ms: i64,
    pub version: String,
    pub config_hash: String,
    /// Where it last ran from (`hostname:state dir`; None: a version before places).
    pub place: Option<String>,
}

/// Another place that ran under the same host id: its `hostname:state dir` and how long ago
/// (database time).
#[derive(Debug, Clone, PartialEq)]
pub struct Twin {
    pub place: String,
    pub secs_ago: f64,
}

/// Two places under one host id within this long are two hosts, both leading: every pass of
/// either runs within a few timer periods.
pub const TWIN_WINDOW_SECS: f64 = 900.0;

/// Records that `host_id` is alive now at `place` (`hostname:state dir`), with its version
/// and config hash. Returns the other place that ran under the same id within
/// [`TWIN_WINDOW_SECS`], if one did: two hosts under one id both take the lease as theirs.
/// The row is written either way, so the other host finds this one too.
pub fn record(
    db: &mut SharedDb,
    host_id: &str,
    version: &str,
    config_hash: &str,
    place: &str,
) -> Result<Option<Twin>> {
    let before: Option<(Option<String>, f64)> = db.retrying("recording this host", |client| {
        client
            .query_opt(
                "WITH before AS (
                     SELECT place, EXTRACT(EPOCH FROM now() - last_seen)::float8 AS ago
                     FROM fleetagent.hosts WHERE host_id = $1)
                 INSERT INTO fleetagent.hosts (host_id, last_seen, version, config_hash, place)
                 VALUES ($1, now(), $2, $3, $4)
                 ON CONFLICT (host_id) DO UPDATE
                 SET last_seen = now(), version = EXCLUDED.version,
                     config_hash = EXCLUDED.config_hash, place = EXCLUDED.place
                 RETURNING (SELECT place FROM before), (SELECT ago FROM before)",
                &[&host_id, &version, &config_hash, &place],
            )?
            .map(|r| {
                Ok((
                    r.try_get(0)?,
                    r.try_get::<_, Option<f64>>(1)?.unwrap_or(f64::MAX),
                ))
            })
            .transpose()
    })?;
    Ok(match before {
        Some((Some(other), ago)) if other != place && ago < TWIN_WINDOW_SECS => Some(Twin {
            place: other,
            secs_ago: ago.max(0.0),
        }),
        _ => None,
    })
}

/// This host's place: `hostname:state dir` (the state dir as given when it cannot be
/// resolved).
pub fn place_of(state_dir: &std::path::Path) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into());
    let dir = std::fs::canonicalize(state_dir).unwrap_or_else(|_| state_dir.to_path_buf());
    format!("{host}:{}", dir.display())
}

/// Every host seen, by id.
pub fn list(db: &mut SharedDb) -> Result<Vec<HostSeen>> {
    db.retrying("reading the hosts", |client| {
        client
            .query(
                "SELECT host_id, EXTRACT(EPOCH FROM now() - last_seen)::float8, version,
                        config_hash, (EXTRACT(EPOCH FROM last_seen) * 1000)::bigint, place
                 FROM fleetagent.hosts ORDER BY host_id",
                &[],
            )?
            .iter()
            .map(|r| {
                Ok(HostSeen {
                    host_id: r.try_get(0)?,
                    seen_secs_ago: r.try_get(1)?,
                    version: r.try_get(2)?,
                    config_hash: r.try_get(3)?,
                    last_seen_ms: r.try_get(4)?,
                    place: r.try_get(5)?,
                })
            })
            .collect()
    })
}
