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
];

/// The tables the statements create, for the one-query check that they all exist.
const TABLES: &[&str] = &["lease", "hosts", "sync", "rows", "inbox"];

/// Creates what is missing of the schema; when it is all there, one query and nothing else
/// (every `run` and `poll` of every host calls this).
pub fn migrate(db: &mut SharedDb) -> Result<()> {
    let names: Vec<String> = TABLES.iter().map(|t| format!("fleetagent.{t}")).collect();
    let present: i64 = db.retrying("checking the schema", |client| {
        client
            .query_one(
                "SELECT (SELECT COUNT(*) FROM unnest($1::text[]) AS t(name)
                         WHERE to_regclass(t.name) IS NOT NULL)
                      + (SELECT COUNT(*) FROM information_schema.columns
                         WHERE table_schema = 'fleetagent' AND table_name = 'lease'
                           AND column_name = 'released')",
                &[&names],
            )?
            .try_get(0)
    })?;
    if present == TABLES.len() as i64 + 1 {
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
