//! The demand boundary: the [`DemandProbe`] trait and what a probe reports about Curio's
//! PSProve work. Probes: `harmonydb` (SQL), `http` (a JSON document), `command` (a program
//! printing that JSON). A probe never turns a failure into zeros: it returns an error and
//! the pass holds the fleet.

use serde::{Deserialize, Serialize};

pub mod command;
pub mod harmonydb;
pub mod http;
pub mod json;

pub use command::CommandProbe;
pub use harmonydb::HarmonyDbProbe;
pub use http::HttpProbe;
pub use json::parse_demand_json;

/// One live Curio machine that can run PSProve (cordoned ones included, with the flag set).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Worker {
    pub machine_name: String,
    pub host_and_port: String,
    /// PSProve tasks this machine owns right now.
    pub running: u32,
    pub cordoned: bool,
}

/// A reading of PSProve demand. Field names are the JSON document of the `http` and
/// `command` probes (docs/demand.md).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Demand {
    /// PSProve tasks nobody has claimed.
    pub pending: u32,
    /// PSProve tasks claimed by a machine that still sends heartbeats.
    pub running: u32,
    /// PSProve tasks claimed by a machine whose heartbeat stopped (they come back as pending).
    #[serde(default)]
    pub running_stale: u32,
    /// Successful PSProve completions in the last hour and the last 15 minutes.
    pub completed_1h: u32,
    pub completed_15m: u32,
    /// Live machines with PSProve enabled. Cordoned ones are listed with `cordoned: true`
    /// and do not count as live workers.
    #[serde(default)]
    pub workers: Vec<Worker>,
    /// ProofShare queue rows without a task yet / with a task (None when not read).
    #[serde(default)]
    pub ps_waiting: Option<u32>,
    #[serde(default)]
    pub ps_computing: Option<u32>,
}

impl Demand {
    pub fn live_workers(&self) -> u32 {
        self.workers.iter().filter(|w| !w.cordoned).count() as u32
    }

    /// Live workers with no PSProve task.
    pub fn idle_workers(&self) -> u32 {
        self.workers
            .iter()
            .filter(|w| !w.cordoned && w.running == 0)
            .count() as u32
    }

    /// Work is queued and no live worker can take it (the incident's 59p/0r).
    pub fn workers_dead(&self) -> bool {
        let queued = self.pending + self.running_stale + self.ps_waiting.unwrap_or(0);
        queued > 0 && self.live_workers() == 0
    }
}

/// One reading of demand. An `Err` means "unknown", never zero: the caller holds the fleet.
/// Error messages are one line and never contain a password.
pub trait DemandProbe: Send + Sync {
    fn probe(&self) -> anyhow::Result<Demand>;
}
