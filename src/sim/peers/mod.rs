//! The peers: what an operator would deploy instead of fleetagent, rendered from what each
//! project documents (docs/sim.md cites the pages), deciding on the same snapshot as the
//! rules and carried out through the same tools and guardrails (`policy::peer`). Each peer
//! reduces to a desired instance count; what turns a count into calls is shared here: the
//! platform's health check (the rules' flagged, outbid and over-a-cap destroys: a ReplicaSet
//! replaces a failed pod, an Auto Scaling group an unhealthy instance), launches up to what the
//! launch window and `max_instances` leave, and stops of the instances the tools would take
//! (past `policy.min_rental_mins`), those with no live worker first, then idle ones, then
//! busy ones, the newest first in each (Kubernetes removes unready and newer pods first;
//! an operator would protect busy workers with a pod deletion cost or scale-in protection).
//! The peers never name the rest of the simulator: the driver hands them what they read.

pub mod keda;
pub mod target_tracking;

use crate::clock::Millis;
use crate::config::Config;
use crate::demand::Demand;
use crate::fleet::Snapshot;
use crate::policy::peer::Peer;
use crate::policy::rules::{self, Asks, CallKind, Facts, Launch, Mode, PlannedCall, Stop};
use crate::store::instances::InstanceRow;

/// The peers, in the order reports list them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum PeerKind {
    Keda,
    TargetTracking,
}

pub const ALL: [PeerKind; 2] = [PeerKind::Keda, PeerKind::TargetTracking];

impl PeerKind {
    pub fn as_str(self) -> &'static str {
        match self {
            PeerKind::Keda => "keda",
            PeerKind::TargetTracking => "target-tracking",
        }
    }

    pub fn parse(name: &str) -> Option<PeerKind> {
        ALL.into_iter().find(|k| k.as_str() == name)
    }

    /// The peer, fresh (no memory), with its free parameter (`param`, for the bench's grid:
    /// keda's targetQueryValue, target tracking's instance warm-up in minutes) or the chosen
    /// one.
    pub fn build(self, param: Option<f64>) -> Box<dyn Peer> {
        match self {
            PeerKind::Keda => Box::new(keda::Keda::new(param.unwrap_or(keda::TARGET_QUERY_VALUE))),
            PeerKind::TargetTracking => {
                let mins = param.unwrap_or(target_tracking::WARM_UP_MINS);
                Box::new(target_tracking::TargetTracking::new(
                    target_tracking::TARGET_BUSY_SHARE,
                    (mins * 60_000.0) as Millis,
                ))
            }
        }
    }

    /// `NAME` or `NAME:PARAM` (the free parameter: keda's targetQueryValue, above 0; target
    /// tracking's warm-up in minutes, 0 or more), as `sim --peer` takes it.
    pub fn parse_with_param(text: &str) -> Result<(PeerKind, Option<f64>), String> {
        let (name, param) = match text.split_once(':') {
            Some((n, p)) => (n, Some(p)),
            None => (text, None),
        };
        let kind = PeerKind::parse(name)
            .ok_or_else(|| format!("--peer {name:?}: no such peer (keda, target-tracking)"))?;
        let (least, what) = match kind {
            PeerKind::Keda => (
                f64::MIN_POSITIVE,
                "targetQueryValue must be a number above 0",
            ),
            PeerKind::TargetTracking => (0.0, "warm-up must be 0 to 1440 minutes"),
        };
        let param = param
            .map(|p| match p.parse::<f64>() {
                Ok(v) if v.is_finite() && v >= least && v <= 1440.0 => Ok(v),
                _ => Err(format!("--peer {text:?}: the {what}")),
            })
            .transpose()?;
        Ok((kind, param))
    }
}

/// The fleet as a peer counts it this pass.
pub struct Fleet<'a> {
    /// The health check's destroys (flagged, outbid, over a cap), made first.
    pub health: Vec<PlannedCall>,
    /// Ours that stay after them: the replicas a controller counts.
    pub current: u32,
    /// Launches the launch window and `max_instances` leave.
    pub room: u32,
    /// Ours that may be stopped, in the order they would go.
    pub stoppable: Vec<&'a InstanceRow>,
    pub demand: Option<&'a Demand>,
}

impl<'a> Fleet<'a> {
    pub fn of(s: &'a Snapshot, config: &'a Config) -> Fleet<'a> {
        let f = Facts::of(s, config, 0, Mode::Full);
        let asks = Asks::of(s, &f);
        let gone: Vec<i64> = asks.health_stops().map(|st| st.instance_id).collect();
        let health: Vec<PlannedCall> = asks
            .health_stops()
            .cloned()
            .map(PlannedCall::stop)
            .collect();
        let staying: Vec<&InstanceRow> = s
            .instances
            .iter()
            .filter(|r| crate::fleet::is_billing_state(r.state))
            .filter(|r| !r.vast_id.is_some_and(|id| gone.contains(&id)))
            .collect();
        let worker = |r: &InstanceRow| {
            let d = s.demand.as_ref()?;
            let m = r.machine_name.as_ref()?;
            d.workers
                .iter()
                .find(|w| &w.machine_name == m && !w.cordoned)
        };
        let mut stoppable: Vec<&InstanceRow> = staying
            .iter()
            .copied()
            .filter(|r| r.vast_id.is_some() && !rules::within_min_rental(r, s.now, config))
            .collect();
        // No live worker (booting), then idle, then busy; the newest first within each.
        stoppable.sort_by_key(|r| {
            let rank = match worker(r) {
                None => 0,
                Some(w) if w.running == 0 => 1,
                Some(_) => 2,
            };
            (rank, std::cmp::Reverse(r.created_at))
        });
        Fleet {
            health,
            current: staying.len() as u32,
            room: f.window_left.min(f.slots_left),
            stoppable,
            demand: s.demand.as_ref(),
        }
    }

    /// The health check's destroys, then what reaching `desired` takes (None: no change).
    pub fn calls(self, desired: Option<u32>, who: &str, why: &str) -> Vec<PlannedCall> {
        let mut calls = self.health;
        let Some(desired) = desired else {
            return calls;
        };
        if desired > self.current {
            let n = (desired - self.current).min(self.room);
            let launch = Launch {
                n,
                why: format!("{who}: {why}"),
                kind: CallKind::Deficit,
                emergency: false,
            };
            calls.extend((0..n).map(|i| {
                PlannedCall::launch(&launch, format!("{} (launch {} of {n})", launch.why, i + 1))
            }));
        } else if desired < self.current {
            let n = (self.current - desired) as usize;
            calls.extend(self.stoppable.iter().take(n).filter_map(|r| {
                Some(PlannedCall::stop(Stop {
                    instance_id: r.vast_id?,
                    why: format!("{who}: {why}"),
                    kind: CallKind::Surplus,
                }))
            }));
        }
        calls
    }
}

/// Work in Curio: queued plus running proofs (what KEDA's PostgreSQL query counts).
pub fn work_in_curio(d: &Demand) -> u32 {
    d.queued_work() + d.running
}

/// Ours whose worker is live and running a proof / live, among `rows`.
pub fn busy_and_live(d: &Demand, rows: &[&InstanceRow]) -> (u32, u32) {
    let mut busy = 0;
    let mut live = 0;
    for r in rows {
        let Some(m) = &r.machine_name else { continue };
        if let Some(w) = d
            .workers
            .iter()
            .find(|w| &w.machine_name == m && !w.cordoned)
        {
            live += 1;
            if w.running > 0 {
                busy += 1;
            }
        }
    }
    (busy, live)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_and_its_parameter_parse_or_say_why_not() {
        assert_eq!(
            PeerKind::parse_with_param("keda"),
            Ok((PeerKind::Keda, None))
        );
        assert_eq!(
            PeerKind::parse_with_param("keda:2.5"),
            Ok((PeerKind::Keda, Some(2.5)))
        );
        assert_eq!(
            PeerKind::parse_with_param("target-tracking:0"),
            Ok((PeerKind::TargetTracking, Some(0.0)))
        );
        for (bad, why) in [
            ("hpa", "no such peer"),
            ("keda:0", "above 0"),
            ("keda:x", "above 0"),
            ("target-tracking:-1", "0 to 1440 minutes"),
            ("target-tracking:inf", "0 to 1440 minutes"),
        ] {
            let err = PeerKind::parse_with_param(bad).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }
}
