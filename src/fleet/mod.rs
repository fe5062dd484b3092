//! The fleet as one pass sees it, pure: our instances (the local table reconciled with
//! vast.ai's listing, open launch intents and Curio's live machines), the demand reading, the
//! launch window and the money already committed. Nothing here does I/O: the pass's observe
//! step (`run::observe`) reads the world and builds the [`Snapshot`]; the tools launch and
//! stop through the guardrails and update it; the observation text the model reads is
//! `prompt::observation` (the `observation_line` and `lifecycle_lines` methods).

pub mod money;
pub mod reconcile;
pub mod state;
pub mod workers;

#[cfg(test)]
pub(crate) mod fixtures;

use std::collections::HashSet;

use crate::clock::{human_duration, Millis};
use crate::config::Config;
use crate::demand::Demand;
use crate::store::instances::InstanceRow;
pub use crate::text::num;

pub use money::{dph_of, rate_of, spend_since};
pub use reconcile::{describe, reconcile, ReconcileInput, Reconciled, INTENT_GRACE_MS};
pub use state::*;
pub use workers::match_workers;

/// Outside text (labels, machine names, status messages) is quoted and cut to this length.
pub const LABEL_CHARS: usize = 64;
pub const STATUS_CHARS: usize = 120;
/// The text shown when no vast.ai key is configured.
pub const NO_VAST_KEY: &str = "not_configured: no vast.ai API key";

/// One of our instances that bills and earns nothing (`exited`/`offline`/`unknown`, loading
/// past `policy.stuck_loading_mins`, a bid vast.ai paused (`outbid`), or stopped longer than
/// `vast.stopped_max_hours`): it may be destroyed without the stop protections.
#[derive(Debug, Clone, PartialEq)]
pub struct Flag {
    pub vast_id: i64,
    pub label: String,
    /// `exited`, `offline`, `unknown`, `loading 45m`, `outbid`, or `stopped 25h`.
    pub why: String,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    pub now: Millis,
    pub run_id: i64,
    /// None when the probe failed (`demand_error` says why): the fleet is held, never read
    /// as zero demand.
    pub demand: Option<Demand>,
    pub demand_error: Option<String>,
    /// The vast.ai listing failed (or no key): the local table is used as is, nothing is
    /// marked gone and no intent is settled.
    pub listing_error: Option<String>,
    /// Our instances that are not gone, after reconciliation (launching ones included).
    pub instances: Vec<InstanceRow>,
    /// Ids of instances on the account whose label lacks our prefix: never ours to stop.
    pub foreign: Vec<i64>,
    /// Workers Curio still lists as live whose instance we destroyed or stopped (their last
    /// heartbeat is younger than `worker_alive_secs`): not counted as live.
    pub ghost_workers: Vec<String>,
    /// Lifecycle changes found this pass, one line each (outside text quoted).
    pub changes: Vec<String>,
    /// `created_at` of the launches the window counts (succeeded, or open intents, in the
    /// last `launch_window_minutes`), oldest first.
    pub window_launches: Vec<Millis>,
    /// Estimated spend of our instances since 00:00 UTC, in dollars (see [`spend_since`]).
    pub spent_today: f64,
    /// The pass streaks after this reading (advanced once per run by [`observe`]; the
    /// stored ones, unadvanced, in [`view`]).
    pub streaks: crate::store::session::Streaks,
    /// Offers matching `[vast.offers]` found by a launch earlier in this pass (rented ones
    /// removed), so several launches cost one search (vast.ai allows 10 a minute).
    pub offers: Option<Vec<crate::vast::Offer>>,
    /// Hosts (`machine_id`) that failed us, left out of offer searches for now.
    pub bad_hosts: Vec<i64>,
    /// vast.ai said the daily search quota is spent: until when (`X-RateLimit-Reset` as
    /// sent, "" when it sent none).
    pub search_quota: Option<String>,
}

impl Snapshot {
    /// Work is queued and no live worker can take it.
    pub fn workers_dead(&self) -> bool {
        self.demand.as_ref().is_some_and(|d| d.workers_dead())
    }

    /// $/h of every instance of ours that bills: the full price of all but stopped ones
    /// (launching ones at the price of their offer, outbid ones at theirs), the disk of
    /// stopped ones.
    pub fn fleet_dph(&self) -> f64 {
        dph_of(&self.instances)
    }

    /// Instances that take a slot under `max_instances` (all but stopped ones).
    pub fn billing_count(&self) -> u32 {
        self.instances
            .iter()
            .filter(|i| is_billing_state(i.state))
            .count() as u32
    }

    /// $/h left under `policy.max_dph_total` (None while it is unset).
    pub fn headroom_dph(&self, config: &Config) -> Option<f64> {
        config
            .policy
            .max_dph_total
            .map(|max| (max - self.fleet_dph()).max(0.0))
    }

    /// Instances left under `policy.max_instances` (None while it is unset).
    pub fn headroom_slots(&self, config: &Config) -> Option<u32> {
        config
            .policy
            .max_instances
            .map(|max| max.saturating_sub(self.billing_count()))
    }

    /// The launch window as the guardrails see it now.
    pub fn window(&self, config: &Config) -> crate::ratelimit::window::WindowState {
        crate::ratelimit::window::window_state(
            &self.window_launches,
            self.now,
            &config.policy,
            self.workers_dead(),
        )
    }

    /// Ours that bill and earn nothing, with why.
    pub fn flagged(&self, config: &Config) -> Vec<Flag> {
        let stuck_ms = config.policy.stuck_loading_mins as i64 * 60_000;
        let stopped_ms = (config.vast.stopped_max_hours * 3_600_000.0) as i64;
        self.instances
            .iter()
            .filter_map(|r| {
                let id = r.vast_id?;
                let status = r
                    .actual_status
                    .as_deref()
                    .map(|s| s.trim().to_ascii_lowercase());
                let why = match status.as_deref() {
                    _ if r.state == OUTBID => "outbid".to_string(),
                    _ if r.state == STOPPED && self.now - r.state_since > stopped_ms => {
                        format!("stopped {}h", (self.now - r.state_since) / 3_600_000)
                    }
                    _ if r.state == STOPPED => return None,
                    Some(s @ ("exited" | "offline")) => s.to_string(),
                    // No recent heartbeat from the host: vast.ai says it will not run again.
                    // A live Curio worker matched to it (`classify` keeps those alive) proves
                    // the container runs, so only one without is flagged.
                    Some("unknown") if !matches!(r.state, REGISTERED | PROVING) => {
                        "unknown".to_string()
                    }
                    _ if r.state == LOADING && self.now - r.created_at > stuck_ms => {
                        format!("loading {}", human_duration(self.now - r.created_at))
                    }
                    _ => return None,
                };
                Some(Flag {
                    vast_id: id,
                    label: r.label.clone(),
                    why,
                })
            })
            .collect()
    }

    pub fn is_flagged(&self, config: &Config, vast_id: i64) -> bool {
        self.flagged(config).iter().any(|f| f.vast_id == vast_id)
    }

    /// Nominal proofs/h of instances that can or soon will prove (launching, loading,
    /// booted, registered, proving), flagged ones left out.
    pub fn projected_pph(&self, config: &Config) -> f64 {
        let flagged: HashSet<i64> = self.flagged(config).iter().map(|f| f.vast_id).collect();
        self.instances
            .iter()
            .filter(|r| {
                matches!(r.state, LAUNCHING | LOADING | BOOTED | REGISTERED | PROVING)
                    && !r.vast_id.is_some_and(|id| flagged.contains(&id))
            })
            .map(|r| rate_of(r, config))
            .sum()
    }

    /// Instances of ours in a state, counted.
    pub fn count_in(&self, states: &[State]) -> u32 {
        self.instances
            .iter()
            .filter(|r| states.contains(&r.state))
            .count() as u32
    }

    pub fn find(&self, vast_id: i64) -> Option<&InstanceRow> {
        self.instances.iter().find(|r| r.vast_id == Some(vast_id))
    }

    /// A launch went out: later calls of this pass see its slot, its money and its window use.
    pub fn record_launch(&mut self, row: InstanceRow, at: Millis) {
        self.instances.push(row);
        self.window_launches.push(at);
    }

    /// A stop or destroy went through: the instance leaves the fleet (or becomes stopped),
    /// and the Curio worker matched to it no longer counts as live.
    pub fn record_stop(&mut self, vast_id: i64, destroyed: bool) {
        let Some(pos) = self
            .instances
            .iter()
            .position(|r| r.vast_id == Some(vast_id))
        else {
            return;
        };
        let machine = self.instances[pos].machine_name.clone();
        if destroyed {
            self.instances.remove(pos);
        } else {
            let row = &mut self.instances[pos];
            row.state = STOPPED;
            row.state_since = self.now;
            row.machine_name = None;
        }
        if let (Some(machine), Some(d)) = (machine, self.demand.as_mut()) {
            if let Some(i) = d.workers.iter().position(|w| w.machine_name == machine) {
                d.workers.remove(i);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use super::*;

    #[test]
    fn unknown_status_is_flagged_like_exited_and_offline() {
        let with = |id: i64, status: &str, state: State| {
            let mut r = row(&format!("fleetagent-{id}"), Some(id), state, 0.4);
            r.actual_status = Some(status.into());
            r
        };
        let snap = Snapshot {
            now: NOW,
            instances: vec![
                with(1, "exited", DEAD),
                with(2, "offline", DEAD),
                with(3, " Unknown ", DEAD),
                with(4, "running", BOOTED),
                // A Curio worker still heartbeats from it: the container runs.
                with(5, "unknown", PROVING),
            ],
            ..Default::default()
        };
        let c = config();
        let flags: Vec<(i64, String)> = snap
            .flagged(&c)
            .into_iter()
            .map(|f| (f.vast_id, f.why))
            .collect();
        assert_eq!(
            flags,
            vec![
                (1, "exited".to_string()),
                (2, "offline".to_string()),
                (3, "unknown".to_string()),
            ]
        );
        assert!(snap.is_flagged(&c, 3) && !snap.is_flagged(&c, 5));
        assert_eq!(classify(Some("unknown"), None), DEAD);
        let line = snap.lifecycle_lines(&c).join("\n");
        assert!(
            line.contains("instance 3 \"fleetagent-3\" unknown"),
            "{line}"
        );
    }
}
