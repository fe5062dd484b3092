//! The boot breaker's reading of the ledger and the table (`fleet::boot`), one for a pass's
//! snapshot (`observe`) and for `doctor`.

use std::collections::BTreeMap;

use anyhow::Result;
use rusqlite::Connection;

use crate::clock::Millis;
use crate::fleet::boot::{in_a_row, newest_booted, BootFailure, STARTED_AGAIN_MS};
use crate::fleet::BOOT_WINDOW_MS;
use crate::store::actions;
use crate::store::instances::{self, InstanceRow};

/// The row of rentals that never booted a worker, and the spares fleetagent started again
/// (`Snapshot::started_again`). `listed`: rows a pass's reconciliation changed and has not
/// written yet (none for `doctor`).
pub struct Boots {
    pub row: Vec<BootFailure>,
    pub started_again: BTreeMap<i64, Millis>,
}

pub fn read(conn: &Connection, listed: &[InstanceRow], now: Millis) -> Result<Boots> {
    let since = now - BOOT_WINDOW_MS;
    let started_again = actions::started_again_since(conn, now - STARTED_AGAIN_MS)?;
    let booted = |rows: &[InstanceRow]| newest_booted(rows, &started_again);
    let booted_at = booted(listed).max(booted(&instances::with_worker_since(conn, since)?));
    Ok(Boots {
        row: in_a_row(actions::boot_failures_since(conn, since)?, booted_at),
        started_again,
    })
}
