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
}

/// Records that `host_id` is alive now, with its version and config hash.
pub fn record(db: &mut SharedDb, host_id: &str, version: &str, config_hash: &str) -> Result<()> {
    db.retrying("recording this host", |client| {
        client.execute(
            "INSERT INTO fleetagent.hosts (host_id, last_seen, version, config_hash)
             VALUES ($1, now(), $2, $3)
             ON CONFLICT (host_id) DO UPDATE
             SET last_seen = now(), version = EXCLUDED.version,
                 config_hash = EXCLUDED.config_hash",
            &[&host_id, &version, &config_hash],
        )
    })?;
    Ok(())
}

/// Every host seen, by id.
pub fn list(db: &mut SharedDb) -> Result<Vec<HostSeen>> {
    db.retrying("reading the hosts", |client| {
        client
            .query(
                "SELECT host_id, EXTRACT(EPOCH FROM now() - last_seen)::float8, version,
                        config_hash, (EXTRACT(EPOCH FROM last_seen) * 1000)::bigint
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
                })
            })
            .collect()
    })
}
