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

/// The state of Curio's ProofShare request loop (`proofshare_meta.request_task_id`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RequestLoop {
    /// A `bg:PShareRequest` task exists and a machine owns it.
    Ok,
    /// `request_task_id` points at a task no live machine owns (no owner, an owner whose
    /// heartbeat stopped, or a task gone): no new work is being asked for.
    Stalled,
    /// No request task (`request_task_id` is NULL).
    None,
}

impl RequestLoop {
    pub fn as_str(self) -> &'static str {
        match self {
            RequestLoop::Ok => "ok",
            RequestLoop::Stalled => "stalled",
            RequestLoop::None => "none",
        }
    }
}

/// The recent successful completions of one Curio machine
/// (`harmony_task_history.completed_by_host_and_port`) inside [`HISTORY_WINDOW_SECS`]:
/// what learned rates and silent workers are computed from.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct WorkerHistory {
    pub host_and_port: String,
    /// Successful completions inside the window.
    pub proofs: u32,
    /// Seconds since the first and the last of them ended (database clock).
    pub first_end_secs_ago: u64,
    pub last_end_secs_ago: u64,
    /// Seconds spent proving them (the sum of `work_end - work_start`), when read: the rate
    /// learned from it leaves out the idle time between proofs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub busy_secs: Option<u64>,
    /// Successful completions of the last hour, when read (every `harmonydb` reading; an
    /// `http` or `command` document may leave it out): which of the cluster's completions
    /// are ours (`fleet::rates::completions_1h`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_1h: Option<u32>,
}

impl WorkerHistory {
    /// Completions of the last hour: read, else settled by the ages when all of the window's
    /// proofs ended within the hour, or none did; else unknown.
    pub fn hour_count(&self) -> Option<u32> {
        const HOUR: u64 = 3600;
        if let Some(n) = self.completed_1h {
            return Some(n);
        }
        if self.last_end_secs_ago >= HOUR {
            Some(0)
        } else if self.first_end_secs_ago < HOUR {
            Some(self.proofs)
        } else {
            None
        }
    }
}

/// The window of [`Demand::history`].
pub const HISTORY_WINDOW_SECS: u64 = 6 * 3600;

/// A reading of PSProve demand. Field names are the JSON document of the `http` and
/// `command` probes (docs/demand.md). Every field after `ps_computing` is optional in that
/// document (absent = not read), so an older source still works.
///
/// ProofShare work (DESIGN.md "Reading Curio") is a PSProve task with a
/// `proofshare_queue` row that is not `compute_done`, plus waiting rows while ProofShare is
/// enabled and younger than `demand.waiting_max_age_mins`: [`Demand::queued_work`].
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Demand {
    /// PSProve tasks nobody has claimed (orphans included: see `orphan_tasks`).
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
    /// Live machines whose task list lacks the task (`harmonydb` only): a cluster's other
    /// nodes, or an instance of ours whose image runs Curio without PSProve
    /// (`fleet::identity::taskless_ours`). At most 500.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taskless: Vec<Worker>,
    /// ProofShare queue rows without a task yet that count as work (ProofShare enabled, and
    /// younger than `demand.waiting_max_age_mins`) / rows with a task, not `compute_done`
    /// (None when not read).
    #[serde(default)]
    pub ps_waiting: Option<u32>,
    #[serde(default)]
    pub ps_computing: Option<u32>,
    /// Curio's own backlog, the figure its request loop compares with the 5 / 8 water marks:
    /// queue rows not `compute_done` whose task is missing or unowned (None: not read).
    #[serde(default)]
    pub backlog: Option<u32>,
    /// PSProve tasks that are not done (pending, or held by a stale owner) with no
    /// `proofshare_queue` row pointing at them: they can only fail "no task found". Shown,
    /// never work. Counted only where the queue table was read.
    #[serde(default)]
    pub orphan_tasks: u32,
    /// Age of the oldest orphan task (since `posted_time`).
    #[serde(default)]
    pub orphan_oldest_secs: Option<u64>,
    /// Waiting queue rows that are not work (older than `demand.waiting_max_age_mins`, or
    /// ProofShare disabled), and the age of the oldest (since `obtained_at`).
    #[serde(default)]
    pub stale_waiting: u32,
    #[serde(default)]
    pub stale_oldest_secs: Option<u64>,
    /// `proofshare_meta.enabled` (None: not read, or no such table).
    #[serde(default)]
    pub proofshare_enabled: Option<bool>,
    /// The request loop's state (None: not read).
    #[serde(default)]
    pub request_loop: Option<RequestLoop>,
    /// `proofshare_meta.pprice`: our ask price per proof, attoFIL as decimal text, kept as
    /// text (None: not read).
    #[serde(default)]
    pub ask_price_attofil: Option<String>,
    /// Paid proofs in the last hour (`proofshare_provider_payments`), and proofs of work
    /// (`proofshare_queue.was_pow`, unpaid) obtained in the last hour (None: not read).
    #[serde(default)]
    pub paid_1h: Option<u32>,
    #[serde(default)]
    pub pow_1h: Option<u32>,
    /// Recent completions per Curio machine (see [`WorkerHistory`]).
    #[serde(default)]
    pub history: Vec<WorkerHistory>,
    /// Parts of the reading that could not be read, one line each naming what and why (a
    /// missing grant on an optional table): that part is None, the rest stands.
    #[serde(default)]
    pub notes: Vec<String>,
}

impl Demand {
    /// Of the last hour's completions, the share Curio recorded a payment for (`paid_1h`
    /// over `completed_1h`, at most 1); None when `paid_1h` is not read or nothing completed.
    pub fn paid_share(&self) -> Option<f64> {
        let paid = self.paid_1h?;
        (self.completed_1h > 0).then(|| (f64::from(paid) / f64::from(self.completed_1h)).min(1.0))
    }

    /// A worker of this machine name is in the reading, cordoned or (false) live.
    pub fn has_worker(&self, machine_name: &str, cordoned: bool) -> bool {
        self.workers
            .iter()
            .any(|w| w.machine_name == machine_name && w.cordoned == cordoned)
    }

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

    /// ProofShare is known to be switched off: no work will come, nothing is launched for it.
    pub fn proofshare_disabled(&self) -> bool {
        self.proofshare_enabled == Some(false)
    }

    /// Work that waits for a worker: unclaimed or stale-owned PSProve tasks that are not
    /// orphans, plus the waiting queue rows that count. 0 while ProofShare is disabled.
    pub fn queued_work(&self) -> u32 {
        if self.proofshare_disabled() {
            return 0;
        }
        (self.pending.saturating_add(self.running_stale))
            .saturating_sub(self.orphan_tasks)
            .saturating_add(self.ps_waiting.unwrap_or(0))
    }

    /// The backlog signal of the rules: Curio's own figure where read, else the pending
    /// tasks that are not orphans.
    pub fn backlog_signal(&self) -> u32 {
        if self.proofshare_disabled() {
            return 0;
        }
        self.backlog
            .unwrap_or_else(|| self.pending.saturating_sub(self.orphan_tasks))
    }

    /// Work is queued and no live worker can take it (the incident's 59p/0r). Orphan tasks
    /// and stale rows are not work; with ProofShare disabled nothing is.
    pub fn workers_dead(&self) -> bool {
        self.queued_work() > 0 && self.live_workers() == 0
    }
}

/// One reading of demand. An `Err` means "unknown", never zero: the caller holds the fleet.
/// Error messages are one line and never contain a password.
pub trait DemandProbe: Send + Sync {
    fn probe(&self) -> anyhow::Result<Demand>;
}
