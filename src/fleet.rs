//! The fleet as one pass sees it: our instances (the local table reconciled with vast.ai's
//! listing and Curio's live machines), the demand reading, the launch window and the money
//! already committed. Built once per pass; tools update it as they act.

use crate::clock::Millis;
use crate::demand::Demand;
use crate::store::instances::InstanceRow;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    pub now: Millis,
    /// None when the probe failed (`demand_error` says why): the fleet is held, never read
    /// as zero demand.
    pub demand: Option<Demand>,
    pub demand_error: Option<String>,
    /// The vast.ai listing failed this pass (the local table is used as is).
    pub listing_error: Option<String>,
    /// Our instances that are not gone, after reconciliation.
    pub instances: Vec<InstanceRow>,
    /// Lifecycle changes found this pass, one line each.
    pub changes: Vec<String>,
}

impl Snapshot {
    /// Work is queued and no live worker can take it.
    pub fn workers_dead(&self) -> bool {
        self.demand.as_ref().is_some_and(|d| d.workers_dead())
    }

    /// $/h of every instance not gone.
    pub fn fleet_dph(&self) -> f64 {
        self.instances.iter().filter_map(|i| i.dph).sum()
    }
}

/// Interim observation until reconciliation lands: the demand probe only.
pub fn observe(
    _store: &mut crate::store::Store,
    _config: &crate::config::Config,
    _env: &crate::app::Env,
    services: &crate::pass::Services,
    clock: &dyn crate::clock::Clock,
    _run_id: i64,
) -> anyhow::Result<Snapshot> {
    let mut s = Snapshot {
        now: clock.now_ms(),
        ..Default::default()
    };
    match &services.demand {
        Some(p) => match p.probe() {
            Ok(d) => s.demand = Some(d),
            Err(e) => s.demand_error = Some(format!("{e:#}")),
        },
        None => s.demand_error = Some("no demand source configured".into()),
    }
    Ok(s)
}

impl Snapshot {
    pub fn observation_line(&self, _config: &crate::config::Config) -> String {
        match &self.demand {
            Some(d) => format!(
                "Demand: {}. Queue: PSProve {}p/{}r.",
                if d.workers_dead() {
                    "WORKERS DEAD"
                } else {
                    "ok"
                },
                d.pending,
                d.running
            ),
            None => format!(
                "Demand: probe failed ({}); holding the fleet.",
                self.demand_error.as_deref().unwrap_or("?")
            ),
        }
    }
}
