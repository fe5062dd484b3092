//! Interim rules policy: no calls until the real one lands.

use serde_json::Value;

use crate::config::Config;
use crate::fleet::Snapshot;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Full,
    LaunchOnly,
}

pub struct PlannedCall {
    pub tool: &'static str,
    pub arguments: Value,
    pub why: String,
}

pub fn update_low_demand(_conn: &rusqlite::Connection, _s: &Snapshot) -> anyhow::Result<u32> {
    Ok(0)
}

pub fn decide(_s: &Snapshot, _c: &Config, _low: u32, _mode: Mode) -> Vec<PlannedCall> {
    Vec::new()
}
