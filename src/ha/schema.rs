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
        expires_at  timestamptz NOT NULL
    )",
    // Every host that ran, for `ha status` and doctor's config-hash check.
    "CREATE TABLE IF NOT EXISTS fleetagent.hosts (
        host_id     text PRIMARY KEY,
        last_seen   timestamptz NOT NULL,
        version     text NOT NULL,
        config_hash text NOT NULL
    )",
];

/// Creates what is missing of the schema; a no-op when it is all there.
pub fn migrate(db: &mut SharedDb) -> Result<()> {
    for statement in STATEMENTS {
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
