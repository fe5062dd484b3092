//! Every launch rate limit of the incident fix lives in this room, so a newcomer finds them
//! in one place:
//!
//! - vast.ai's own per-endpoint spacing ([`spacing`]): creates one call per 4.5 s per key,
//!   the 12 s penalty when that is broken, and the wait a 429 implies. The vast.ai HTTP
//!   client keeps them; the rules are here.
//! - the cross-process create spacing: vast.ai spaces creates per key, not per process, so
//!   the last create a previous process sent ([`previous_create_at`], read from the action
//!   ledger) is fed to the vast.ai client's `previous_create` before the first pass.
//! - the launch window ([`window`]): successful launches in the last
//!   `launch_window_minutes` <= `launch_window_max`, and the emergency allowance while
//!   WORKERS DEAD (`emergency_launch_max` in the same window).
//!
//! An adapter: it uses only the base modules (clock, config, error, faults) and the store,
//! never `vast` (the client depends on this room, not the other way) nor anything above.

pub mod spacing;
pub mod window;

use rusqlite::Connection;

use crate::clock::Millis;

/// When our latest create request may have reached vast.ai, from the action ledger (see
/// [`crate::store::actions::last_create_at`]); `None` when no launch got that far. The run
/// loop hands it to the vast.ai client (`VastClient::previous_create`) so that the next
/// create is spaced after one a previous process sent.
pub fn previous_create_at(conn: &Connection) -> anyhow::Result<Option<Millis>> {
    use anyhow::Context;
    crate::store::actions::last_create_at(conn)
        .context("reading the last create time from the action ledger")
}
