//! `keda`: KEDA's PostgreSQL scaler on Curio's work (queued plus running proofs) with a
//! `targetQueryValue` per instance, under the Kubernetes HPA's documented algorithm and
//! defaults: desired = ceil(metric / target), no change within a 10 % tolerance, scale-up at
//! once but at most max(4 pods, 100 %) per 15 s period, scale-down only to the highest
//! recommendation of the last 300 s (the stabilisation window). KEDA polls every 30 s and the
//! HPA syncs every 15 s; in the simulator the peer reads the metric at the agent's own passes,
//! so each pass is one poll, the scale-up bound allows the 15 s periods elapsed since the
//! previous pass, and the window holds the passes of the last 300 s. `minReplicaCount` is 1,
//! as an operator would set it: Curio asks the market for work only while a node lives.

use std::sync::Mutex;

use crate::clock::Millis;
use crate::config::Config;
use crate::fleet::Snapshot;
use crate::policy::peer::Peer;
use crate::policy::rules::PlannedCall;

use super::{work_in_curio, Fleet};

/// Proofs (queued plus running) per instance the HPA aims at, chosen by a grid over 0.5-4 on
/// seeds 1-10 of every built-in scenario (`scripts/bench peers-grid`; docs/sim.md, "Peers"):
/// 0.7 has the best mean rank. A worker proves one proof at a time, so from 1 up the work
/// held never asks for more instances than hold it and the fleet shrinks to the minimum.
pub const TARGET_QUERY_VALUE: f64 = 0.7;
/// The HPA's default tolerance (`--horizontal-pod-autoscaler-tolerance`).
pub const TOLERANCE: f64 = 0.1;
/// The HPA's default scale-down stabilisation window.
pub const STABILISATION_MS: Millis = 300_000;
/// The HPA's default scale-up policies' period, and their bounds (4 pods or 100 %, the larger).
pub const SCALE_UP_PERIOD_MS: Millis = 15_000;
pub const SCALE_UP_PODS: u32 = 4;
/// KEDA's `minReplicaCount` as set here (KEDA's default is 0; see the module doc).
pub const MIN_REPLICAS: u32 = 1;

/// The HPA's recommendation for an AverageValue target: ceil(metric / target), or `current`
/// while metric / (target * current) is within the tolerance of 1. From no replica at all the
/// ratio is undefined and KEDA activates: ceil(metric / target).
pub fn recommend(metric: f64, target: f64, current: u32) -> u32 {
    let wanted = (metric / target).ceil().max(0.0) as u32;
    if current == 0 {
        return wanted;
    }
    let ratio = metric / (target * current as f64);
    if (ratio - 1.0).abs() <= TOLERANCE {
        current
    } else {
        wanted
    }
}

/// The most replicas the default scale-up policies allow from `current` over `periods` 15 s
/// periods (at least one): each period adds max(4, 100 %).
pub fn scale_up_limit(current: u32, periods: u32) -> u32 {
    let mut c = current;
    for _ in 0..periods.max(1) {
        c = c.saturating_add(SCALE_UP_PODS.max(c));
    }
    c
}

/// The HPA's memory: its recommendations of the last 300 s and when it last ran.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Hpa {
    pub recommendations: Vec<(Millis, u32)>,
    pub last_at: Option<Millis>,
}

impl Hpa {
    /// The replicas the HPA sets at `now` from `current` and this reading's recommendation:
    /// up at once within the scale-up bound, down only to the highest recommendation of the
    /// window (this one included), never below `min`.
    pub fn desired(&mut self, now: Millis, current: u32, recommendation: u32, min: u32) -> u32 {
        let rec = recommendation.max(min);
        self.recommendations
            .retain(|(t, _)| now - *t < STABILISATION_MS);
        self.recommendations.push((now, rec));
        let periods = match self.last_at {
            Some(t) => ((now - t) / SCALE_UP_PERIOD_MS).clamp(1, 64) as u32,
            None => 1,
        };
        self.last_at = Some(now);
        if rec > current {
            rec.min(scale_up_limit(current, periods))
        } else {
            let highest = self.recommendations.iter().map(|(_, r)| *r).max();
            current.min(highest.unwrap_or(rec))
        }
    }
}

pub struct Keda {
    target: f64,
    hpa: Mutex<Hpa>,
}

impl Keda {
    pub fn new(target: f64) -> Keda {
        Keda {
            target,
            hpa: Mutex::new(Hpa::default()),
        }
    }
}

impl Peer for Keda {
    fn name(&self) -> &'static str {
        "keda"
    }

    fn plan(&self, s: &Snapshot, config: &Config) -> Vec<PlannedCall> {
        if s.paused.is_some() {
            return Vec::new();
        }
        let fleet = Fleet::of(s, config);
        // No reading: the HPA keeps the replicas it has (KEDA's fallback is not configured).
        let desired = fleet.demand.map(|d| {
            let metric = work_in_curio(d) as f64;
            let rec = recommend(metric, self.target, fleet.current);
            let mut hpa = self.hpa.lock().unwrap_or_else(|e| e.into_inner());
            hpa.desired(s.now, fleet.current, rec, MIN_REPLICAS)
        });
        let why = match (fleet.demand, desired) {
            (Some(d), Some(n)) => format!(
                "{} proofs queued or running over targetQueryValue {}: {n} replicas",
                work_in_curio(d),
                self.target
            ),
            _ => "no reading".to_string(),
        };
        let mut calls = fleet.calls(desired, "keda", &why);
        if s.hold.is_some() {
            calls.retain(|c| !c.is_launch());
        }
        calls
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_formula_is_ceil_of_metric_over_target() {
        assert_eq!(recommend(7.0, 2.0, 1), 4);
        assert_eq!(recommend(0.0, 1.0, 3), 0);
        // From zero KEDA activates on any work.
        assert_eq!(recommend(1.0, 1.0, 0), 1);
        assert_eq!(recommend(0.0, 1.0, 0), 0);
    }

    #[test]
    fn within_the_tolerance_nothing_changes() {
        // 10 proofs on 10 replicas at target 1.05: ratio 0.952, inside 10 %.
        assert_eq!(recommend(10.0, 1.05, 10), 10);
        // 10.5 on 10 at target 1: ratio 1.05.
        assert_eq!(recommend(10.5, 1.0, 10), 10);
        // 12 on 10: ratio 1.2, outside: ceil(12 / 1).
        assert_eq!(recommend(12.0, 1.0, 10), 12);
        // 8 on 10: ratio 0.8, outside.
        assert_eq!(recommend(8.0, 1.0, 10), 8);
    }

    #[test]
    fn scale_up_is_bounded_by_four_pods_or_double_per_period() {
        assert_eq!(scale_up_limit(1, 1), 5);
        assert_eq!(scale_up_limit(10, 1), 20);
        assert_eq!(scale_up_limit(1, 2), 10);
        let mut hpa = Hpa::default();
        assert_eq!(hpa.desired(0, 2, 40, 1), 6, "one period: 2 + 4");
        // 30 s later: two periods from 6: 12, then 24.
        assert_eq!(hpa.desired(30_000, 6, 40, 1), 24);
    }

    #[test]
    fn scale_down_waits_for_the_stabilisation_window() {
        let mut hpa = Hpa::default();
        assert_eq!(hpa.desired(0, 10, 10, 1), 10);
        // The work fell: the recommendation of 3 waits while 10 is in the window.
        assert_eq!(hpa.desired(60_000, 10, 3, 1), 10);
        assert_eq!(hpa.desired(240_000, 10, 3, 1), 10);
        // 300 s after the last 10 it is out of the window: down to the highest left, 3.
        assert_eq!(hpa.desired(300_000, 10, 3, 1), 3);
        // Never below the minimum.
        assert_eq!(hpa.desired(700_000, 3, 0, 1), 1);
    }
}
