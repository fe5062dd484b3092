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
    /// A second place under the same id and seconds since it ran (database time).
    pub twin: Option<(String, f64)>,
    /// Seconds since it last listed vast.ai with success as a follower (database time; None:
    /// never recorded).
    pub vast_ok_secs_ago: Option<f64>,
    /// Its last failed listing as a follower, when newer than its last one that worked: the
    /// error and seconds since (database time).
    pub vast_failing: Option<(String, f64)>,
    /// How far its clock was ahead of the database's at its last contact (ms; negative:
    /// behind; None: a version before this was recorded, or an unplaced twin).
    pub clock_ahead_ms: Option<i64>,
    /// Its config's keys and a hash of each value (`ha::node::config_keys`; None: a build
    /// before this was recorded).
    pub config_keys: Option<String>,
    /// Its last reading of demand (and FIL/USD) as a follower failed: why, and how long ago
    /// (seconds, database time).
    pub probe_failing: Option<(String, f64)>,
}

/// Of a host id's two places (the one that holds it, `held`, and the second, `twin`, each
/// with seconds since it ran), those other than `here` that ran within [`TWIN_WINDOW_SECS`].
pub fn other_places(
    held: Option<(&str, f64)>,
    twin: Option<&(String, f64)>,
    here: &str,
) -> Vec<(String, f64)> {
    held.map(|(p, ago)| (p.to_string(), ago))
        .into_iter()
        .chain(twin.cloned())
        .filter(|(p, ago)| p != here && *ago < TWIN_WINDOW_SECS)
        .collect()
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
/// and config hash, and returns the other place that runs under the same id, if one has
/// within [`TWIN_WINDOW_SECS`]: two hosts under one id both take the lease as theirs.
///
/// The row keeps two places: the one that holds the id (`place`, `last_seen`) and a second
/// (`twin_place`, `twin_seen`). A second place never takes the first's slot while the first
/// runs, so both keep finding each other for as long as both run (neither acts); when one
/// stops, the other acts again once the stopped one's time is older than the window.
///
/// `host_now`, when given, is this host's clock (ms) as the statement goes: the row keeps
/// how far it is from the database's (`clock_ahead_ms`, the one-way trip included).
pub fn record(
    db: &mut SharedDb,
    host_id: &str,
    version: &str,
    (config_hash, config_keys): (&str, &str),
    place: &str,
    host_now: Option<&dyn Fn() -> i64>,
) -> Result<Option<Twin>> {
    db.retrying("recording this host", |client| {
        let mut tx = client.transaction()?;
        tx.execute(
            "INSERT INTO fleetagent.hosts (host_id, last_seen, version, config_hash, place, shares)
             VALUES ($1, now(), $2, $3, $4, $2) ON CONFLICT (host_id) DO NOTHING",
            &[&host_id, &version, &config_hash, &place],
        )?;
        let row = tx.query_one(
            "SELECT place, EXTRACT(EPOCH FROM now() - last_seen)::float8,
                    twin_place, EXTRACT(EPOCH FROM now() - twin_seen)::float8
             FROM fleetagent.hosts WHERE host_id = $1 FOR UPDATE",
            &[&host_id],
        )?;
        let (held_by, held_ago): (Option<String>, f64) = (row.try_get(0)?, row.try_get(1)?);
        let (second, second_ago): (Option<String>, Option<f64>) =
            (row.try_get(2)?, row.try_get(3)?);
        let live = |ago: f64| ago < TWIN_WINDOW_SECS;
        let twin = if held_by.as_deref().is_none_or(|p| p == place) || !live(held_ago) {
            // This place holds the id (or takes it from a place silent past the window).
            let twin = match (second, second_ago) {
                (Some(p), Some(ago)) if p != place && live(ago) => Some(Twin {
                    place: p,
                    secs_ago: ago.max(0.0),
                }),
                _ => None,
            };
            let clock: Option<i64> = host_now.map(|f| f());
            tx.execute(
                "UPDATE fleetagent.hosts
                 SET last_seen = now(), version = $2, config_hash = $3, place = $4,
                     twin_place = CASE WHEN $5 THEN twin_place END,
                     twin_seen = CASE WHEN $5 THEN twin_seen END,
                     clock_ahead_ms = $6::bigint
                         - (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint,
                     config_keys = $7, shares = $2
                 WHERE host_id = $1",
                &[
                    &host_id,
                    &version,
                    &config_hash,
                    &place,
                    &twin.is_some(),
                    &clock,
                    &config_keys,
                ],
            )?;
            twin
        } else {
            // Another place holds the id and runs: this one is its twin.
            tx.execute(
                "UPDATE fleetagent.hosts SET twin_place = $2, twin_seen = now()
                 WHERE host_id = $1",
                &[&host_id, &place],
            )?;
            Some(Twin {
                place: held_by.unwrap_or_default(),
                secs_ago: held_ago.max(0.0),
            })
        };
        tx.commit()?;
        Ok(twin)
    })
}

/// This host's place: `hostname:state dir` (the state dir as given when it cannot be
/// resolved).
pub fn place_of(state_dir: &std::path::Path) -> String {
    let dir = std::fs::canonicalize(state_dir).unwrap_or_else(|_| state_dir.to_path_buf());
    format!("{}:{}", super::node::hostname(), dir.display())
}

/// Every host seen, by id.
pub fn list(db: &mut SharedDb) -> Result<Vec<HostSeen>> {
    db.retrying("reading the hosts", |client| {
        client
            .query(
                "SELECT host_id, EXTRACT(EPOCH FROM now() - last_seen)::float8, version,
                        config_hash, (EXTRACT(EPOCH FROM last_seen) * 1000)::bigint, place,
                        twin_place, EXTRACT(EPOCH FROM now() - twin_seen)::float8,
                        EXTRACT(EPOCH FROM now() - vast_ok_at)::float8, clock_ahead_ms,
                        CASE WHEN vast_error_at > COALESCE(vast_ok_at, '-infinity')
                             THEN vast_error END,
                        EXTRACT(EPOCH FROM now() - vast_error_at)::float8, config_keys,
                        probe_error, EXTRACT(EPOCH FROM now() - probe_at)::float8
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
                    twin: r
                        .try_get::<_, Option<String>>(6)?
                        .zip(r.try_get::<_, Option<f64>>(7)?),
                    vast_ok_secs_ago: r.try_get(8)?,
                    clock_ahead_ms: r.try_get(9)?,
                    vast_failing: r
                        .try_get::<_, Option<String>>(10)?
                        .zip(r.try_get::<_, Option<f64>>(11)?),
                    config_keys: r.try_get(12)?,
                    probe_failing: r
                        .try_get::<_, Option<String>>(13)?
                        .zip(r.try_get::<_, Option<f64>>(14)?),
                })
            })
            .collect()
    })
}

/// This follower's vast.ai listing now (database time): with success (`error` None) it could
/// act where a leader blind to vast.ai cannot (`ha::handover`); failed, every doctor names
/// it (it would lead blind).
pub fn record_vast(db: &mut SharedDb, host_id: &str, error: Option<&str>) -> Result<()> {
    db.retrying(
        "recording this host's vast.ai listing",
        |client| match error {
            None => client.execute(
                "UPDATE fleetagent.hosts SET vast_ok_at = now() WHERE host_id = $1",
                &[&host_id],
            ),
            Some(e) => client.execute(
                "UPDATE fleetagent.hosts SET vast_error = $2, vast_error_at = now()
                 WHERE host_id = $1",
                &[&host_id, &e],
            ),
        },
    )?;
    Ok(())
}

/// Whether this follower's last listing (worked or failed) is `period_secs` old or more, or
/// it never listed: a follower lists vast.ai once a timer period.
pub fn vast_listing_due(db: &mut SharedDb, host_id: &str, period_secs: f64) -> Result<bool> {
    due(
        db,
        host_id,
        period_secs,
        "GREATEST(vast_ok_at, vast_error_at)",
        "reading when this host last listed vast.ai",
    )
}

/// Whether `last` (an expression of the host's row: when it last did something) is
/// `period_secs` old or more, or NULL (never).
fn due(db: &mut SharedDb, host_id: &str, period_secs: f64, last: &str, what: &str) -> Result<bool> {
    let sql = format!(
        "SELECT COALESCE(now() - {last} >= make_interval(secs => $2), true)
         FROM fleetagent.hosts WHERE host_id = $1"
    );
    db.retrying(what, |client| {
        let due: Option<bool> = client
            .query_opt(&sql, &[&host_id, &period_secs])?
            .map(|r| r.try_get(0))
            .transpose()?;
        Ok(due.unwrap_or(true))
    })
}

/// This follower's reading of demand (and FIL/USD) now (database time): `error` None when
/// it read them; failed, every doctor names it (it would lead holding the fleet).
pub fn record_probes(db: &mut SharedDb, host_id: &str, error: Option<&str>) -> Result<()> {
    db.retrying("recording this host's demand reading", |client| {
        client.execute(
            "UPDATE fleetagent.hosts SET probe_error = $2, probe_at = now() WHERE host_id = $1",
            &[&host_id, &error],
        )
    })?;
    Ok(())
}

/// Whether this follower's last reading of demand is `period_secs` old or more, or it never
/// read: a follower reads demand once a timer period.
pub fn probes_due(db: &mut SharedDb, host_id: &str, period_secs: f64) -> Result<bool> {
    due(
        db,
        host_id,
        period_secs,
        "probe_at",
        "reading when this host last read demand",
    )
}

/// Whether every host seen within a day runs a build that shares the tables shared since a
/// later build (`ha::mirror::SHARED_LATER`): each such build writes its version into
/// `hosts.shares` beside `version`; an older one writes `version` alone, so the two differ
/// (or `shares` is NULL) while it runs, and a host taken back to an older build is seen at
/// its first contact.
pub fn all_share_later_tables(db: &mut SharedDb) -> Result<bool> {
    db.retrying("reading which builds the hosts run", |client| {
        let older: i64 = client
            .query_one(
                "SELECT COUNT(*) FROM fleetagent.hosts
                  WHERE last_seen > now() - interval '1 day' AND shares IS DISTINCT FROM version",
                &[],
            )?
            .try_get(0)?;
        Ok(older == 0)
    })
}
