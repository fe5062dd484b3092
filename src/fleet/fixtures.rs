//! Rows, listings and workers shared by the fleet room's unit tests.

use std::collections::{HashMap, HashSet};

use crate::clock::Millis;
use crate::config::Config;
use crate::demand::{Demand, Worker};
use crate::store::actions::Action;
use crate::store::instances::{InstanceRow, State};
use crate::vast::Instance;

use super::ReconcileInput;

pub const NOW: Millis = 1_800_000_000_000;
pub const MIN: Millis = 60_000;

pub fn config() -> Config {
    let mut c = Config::default();
    c.vast.image = Some("img".into());
    c.policy.max_dph_total = Some(10.0);
    c.policy.max_instances = Some(20);
    c.policy.target_proofs_per_hour = 500.0;
    c.policy.proofs_per_hour_per_instance = 50.0;
    c
}

pub fn row(label: &str, id: Option<i64>, state: State, dph: f64) -> InstanceRow {
    InstanceRow {
        label: label.into(),
        vast_id: id,
        state,
        actual_status: None,
        status_msg: None,
        gpu_name: Some("RTX 4090".into()),
        dph: Some(dph),
        offer_id: None,
        public_ip: None,
        machine_name: None,
        worker_address: None,
        launched_run: None,
        adopted: false,
        created_at: NOW - 5 * MIN,
        state_since: NOW - 5 * MIN,
        last_seen_at: None,
        gone_at: None,
        machine_id: None,
        is_bid: false,
        storage_dph: None,
        paused_spans: Vec::new(),
    }
}

pub fn inst(id: u64, label: &str, status: Option<&str>) -> Instance {
    Instance {
        id,
        label: Some(label.into()),
        actual_status: status.map(String::from),
        gpu_name: Some("RTX 4090".into()),
        dph_total: Some(0.4),
        ..Default::default()
    }
}

/// A single-GPU, verified, reliable offer of `gpu` at `dph` $/h.
pub fn offer(id: u64, gpu: &str, dph: f64) -> crate::vast::Offer {
    crate::vast::Offer {
        id,
        gpu_name: gpu.into(),
        num_gpus: 1,
        gpu_ram_mb: 24_000.0,
        dph_total: dph,
        reliability: 0.99,
        verified: true,
        geolocation: None,
        public_ip: None,
        min_bid: None,
        machine_id: None,
        storage_dph: None,
    }
}

pub fn worker(name: &str, host: &str, running: u32) -> Worker {
    Worker {
        machine_name: name.into(),
        host_and_port: host.into(),
        running,
        cordoned: false,
    }
}

pub fn intent(id: i64, label: &str, at: Millis) -> Action {
    Action {
        id,
        run_id: Some(1),
        kind: "launch".into(),
        outcome: "intent".into(),
        actor: "llm".into(),
        instance_id: None,
        label: Some(label.into()),
        offer_id: Some(77),
        dph: Some(0.4),
        emergency: false,
        reason: None,
        detail: None,
        created_at: at,
    }
}

/// The install id of the fixtures' install.
pub const INSTALL: &str = "qwerty";

pub fn input<'a>(
    local: Vec<InstanceRow>,
    intents: Vec<Action>,
    listing: Option<&'a [Instance]>,
    demand: Option<&'a Demand>,
) -> ReconcileInput<'a> {
    ReconcileInput {
        local,
        taken_labels: HashSet::new(),
        intents,
        listing,
        demand,
        prefix: "fleetagent",
        install_id: INSTALL,
        now: NOW,
        listed_at: NOW,
        our_stops: HashSet::new(),
        our_ends: HashMap::new(),
    }
}

/// The snapshot's flagged instances as (vast id, why), for comparing with a list.
pub fn flags(snap: &crate::fleet::Snapshot, c: &Config) -> Vec<(i64, String)> {
    snap.flagged(c)
        .into_iter()
        .map(|f| (f.vast_id, f.why))
        .collect()
}
