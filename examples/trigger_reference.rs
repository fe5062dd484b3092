//! The calibration point of `scripts/bench trigger`: the smallest program that does what
//! `trigger` must (open SQLite in WAL mode, commit one event row, append one line to a
//! doorbell file), with nothing else linked in. It shows how much of `trigger`'s time is
//! SQLite and the process itself, and how much is fleetagent.
//!
//!   trigger_reference DB DOORBELL REASON

// A standalone program, not fleetagent: it reads the system clock as any such program would.
#![allow(clippy::disallowed_methods)]

use std::io::Write;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, db, doorbell, reason] = args.as_slice() else {
        return Err("usage: trigger_reference DB DOORBELL REASON".into());
    };
    let conn = rusqlite::Connection::open(db)?;
    // As fleetagent's store: no checkpoint at close (its fsyncs would dominate).
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
        true,
    )?;
    conn.busy_timeout(std::time::Duration::from_secs(30))?;
    conn.query_row("PRAGMA journal_mode = WAL", [], |_| Ok(()))?;
    conn.execute_batch(
        "PRAGMA synchronous = NORMAL;
         CREATE TABLE IF NOT EXISTS events (id INTEGER PRIMARY KEY AUTOINCREMENT,
             priority INTEGER NOT NULL, reason TEXT NOT NULL, created_at INTEGER NOT NULL);",
    )?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis() as i64;
    conn.execute(
        "INSERT INTO events (priority, reason, created_at) VALUES (1, ?1, ?2)",
        rusqlite::params![reason, now],
    )?;
    let mut bell = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(doorbell)?;
    writeln!(bell, "{now} P1 {reason}")?;
    Ok(())
}
