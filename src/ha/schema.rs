//! The shared schema `fleetagent`: created idempotently, one statement at a time, so that
//! three hosts can run it at once on PostgreSQL and on YugabyteDB (where DDL is not
//! transactional). Two hosts creating the same object at once make one of them fail with a
//! duplicate error (or, in PostgreSQL, a unique violation on the catalog); that host runs
//! the statement again and finds the object there. No advisory lock: on YugabyteDB it may be
//! an error or a silent no-op (reference/ha.md, section 3).

use anyhow::Result;
use postgres::error::SqlState;

use super::db::{is_transient, SharedDb};

/// The statements, in order. Each is safe to run again.
pub const STATEMENTS: &[&str] = &[
    "CREATE SCHEMA IF NOT EXISTS fleetagent",
    // One row, `fleet`. The epoch rises on every change of holder: the fencing token.
    // Times are the database's.
    "CREATE TABLE IF NOT EXISTS fleetagent.lease (
        name        text PRIMARY KEY CHECK (name = 'fleet'),
        holder      text NOT NULL,
        epoch       bigint NOT NULL CHECK (epoch > 0),
        acquired_at timestamptz NOT NULL,
        renewed_at  timestamptz NOT NULL,
        expires_at  timestamptz NOT NULL,
        released    boolean NOT NULL DEFAULT false
    )",
    // A lease row made before `ha release` held its host off.
    "ALTER TABLE fleetagent.lease ADD COLUMN IF NOT EXISTS released boolean NOT NULL DEFAULT false",
    // Every host that ran, for `ha status` and doctor's config-hash check.
    "CREATE TABLE IF NOT EXISTS fleetagent.hosts (
        host_id     text PRIMARY KEY,
        last_seen   timestamptz NOT NULL,
        version     text NOT NULL,
        config_hash text NOT NULL
    )",
    // Where each host id last ran from (hostname and state dir): two hosts under one id.
    "ALTER TABLE fleetagent.hosts ADD COLUMN IF NOT EXISTS place text",
    // A second place seen under the same host id, and when it last ran: both refuse to act
    // while both run.
    "ALTER TABLE fleetagent.hosts ADD COLUMN IF NOT EXISTS twin_place text",
    "ALTER TABLE fleetagent.hosts ADD COLUMN IF NOT EXISTS twin_seen timestamptz",
    // When a follower last listed vast.ai with success, asked while the leader's listing
    // failed (`ha::handover`): the leader hands the lease only to a host that can act.
    "ALTER TABLE fleetagent.hosts ADD COLUMN IF NOT EXISTS vast_ok_at timestamptz",
    // Each host's clock against the database's at its last contact: the rows a host writes
    // carry its clock, which the others read (doctor names a host far off).
    "ALTER TABLE fleetagent.hosts ADD COLUMN IF NOT EXISTS clock_ahead_ms bigint",
    // A follower's last vast.ai listing that failed, and when (it lists once a timer period):
    // a host that would lead blind is named by every doctor before it leads.
    "ALTER TABLE fleetagent.hosts ADD COLUMN IF NOT EXISTS vast_error text",
    "ALTER TABLE fleetagent.hosts ADD COLUMN IF NOT EXISTS vast_error_at timestamptz",
    // Each key of its config with a hash of its value: doctor names the keys that differ.
    "ALTER TABLE fleetagent.hosts ADD COLUMN IF NOT EXISTS config_keys text",
    // A follower's last reading of demand (and of FIL/USD, when fetched) once a timer period:
    // its failure (NULL: both read) and when. A host that would lead without demand holds
    // the fleet, and every doctor names it before it leads.
    "ALTER TABLE fleetagent.hosts ADD COLUMN IF NOT EXISTS probe_error text",
    "ALTER TABLE fleetagent.hosts ADD COLUMN IF NOT EXISTS probe_at timestamptz",
    // The version of a build that shares the measured rates and the day's hours, written
    // beside `version`: where they differ an older build runs, which cannot copy them.
    "ALTER TABLE fleetagent.hosts ADD COLUMN IF NOT EXISTS shares text",
];

/// The tables the statements create, for the one-query check that they all exist.
const TABLES: &[&str] = &["lease", "hosts", "sync", "rows", "inbox"];

/// Columns added to a table after it first shipped (`ADD COLUMN IF NOT EXISTS` above): a
/// schema an older build made lacks them, and the one-query check must see that.
const ADDED_COLUMNS: &[(&str, &str)] = &[
    ("lease", "released"),
    ("hosts", "place"),
    ("hosts", "twin_place"),
    ("hosts", "twin_seen"),
    ("hosts", "vast_ok_at"),
    ("hosts", "clock_ahead_ms"),
    ("hosts", "vast_error"),
    ("hosts", "vast_error_at"),
    ("hosts", "config_keys"),
    ("hosts", "probe_error"),
    ("hosts", "probe_at"),
    ("hosts", "shares"),
];

/// Creates what is missing of the schema; when it is all there, one query and nothing else
/// (every `run` and `poll` of every host calls this).
pub fn migrate(db: &mut SharedDb) -> Result<()> {
    let names: Vec<String> = TABLES.iter().map(|t| format!("fleetagent.{t}")).collect();
    let (tables, columns): (Vec<&str>, Vec<&str>) = ADDED_COLUMNS.iter().copied().unzip();
    let present: i64 = db.retrying("checking the schema", |client| {
        client
            .query_one(
                "SELECT (SELECT COUNT(*) FROM unnest($1::text[]) AS t(name)
                         WHERE to_regclass(t.name) IS NOT NULL)
                      + (SELECT COUNT(*) FROM information_schema.columns c
                         JOIN unnest($2::text[], $3::text[]) AS a(tbl, col)
                           ON c.table_name = a.tbl AND c.column_name = a.col
                         WHERE c.table_schema = 'fleetagent')",
                &[&names, &tables, &columns],
            )?
            .try_get(0)
    })?;
    if present == (TABLES.len() + ADDED_COLUMNS.len()) as i64 {
        return Ok(());
    }
    for statement in STATEMENTS.iter().chain(super::mirror::STATEMENTS) {
        let first_line = statement.lines().next().unwrap_or(statement);
        db.retrying_on(
            &format!("creating the schema ({first_line})"),
            lost_a_creation_race,
            |client| client.batch_execute(statement),
        )?;
    }
    Ok(())
}

/// Another session created the same object between our check and our insert into the
/// catalog, or a conflict to retry anyway.
fn lost_a_creation_race(code: &SqlState) -> bool {
    is_transient(code)
        || *code == SqlState::DUPLICATE_SCHEMA
        || *code == SqlState::DUPLICATE_TABLE
        || *code == SqlState::DUPLICATE_OBJECT
        || *code == SqlState::UNIQUE_VIOLATION
}
