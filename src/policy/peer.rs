//! A peer: another autoscaler's policy that decides a pass in the rules' place (the
//! simulator's `sim::peers` implement it), on the same snapshot, its calls carried out by the
//! same tools and guardrails. It owns its own memory between passes (a stabilisation window,
//! a cooldown), as the controller it renders does; it never does I/O.

use crate::config::Config;
use crate::fleet::Snapshot;

use super::rules::PlannedCall;

pub trait Peer: Send + Sync {
    /// Its name in reports (`keda`, `target-tracking`).
    fn name(&self) -> &'static str;
    /// The calls it makes this pass.
    fn plan(&self, snapshot: &Snapshot, config: &Config) -> Vec<PlannedCall>;
}
