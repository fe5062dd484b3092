//! The stop rules, one function each: from the snapshot and its [`Facts`], which instances
//! of ours to stop or destroy (`vast.stop_mode` decides which) and why. Full mode only.

use super::{
    stop_pays, FALL_LOW_DEMAND_PASSES, LOW_DEMAND_PASSES, LOW_PENDING_MAX, SURPLUS_MARGIN,
};
use super::{within_min_rental, CallKind, DemandBand, Facts, Mode, Stop};
use crate::demand::Demand;
use crate::fleet::{is_billing_state, num, over_caps, FlagKind, Snapshot, PROVING, REGISTERED};
use crate::store::instances::InstanceRow;

/// Flagged: each instance of ours that bills and earns nothing is destroyed; an outbid bid
/// in the same pass, since it may resume. Not when the listing failed (what vast.ai says of
/// them is not known this pass).
pub(super) fn flagged(_s: &Snapshot, f: &Facts) -> Vec<Stop> {
    if !f.destroys {
        return Vec::new();
    }
    f.flagged
        .iter()
        .map(|flag| Stop {
            instance_id: flag.vast_id,
            why: format!(
                "rules: instance {} is {}: it bills and earns nothing",
                flag.vast_id, flag.why
            ),
            kind: if flag.kind == FlagKind::Outbid {
                CallKind::Outbid
            } else {
                CallKind::Flagged
            },
        })
        .collect()
}

/// Over a cap: stops that bring the fleet back within `max_instances` and `max_dph_total`
/// (counting the flagged instances this pass destroys as gone): the latest to change state
/// first (a bid that just resumed), the dearest among equals; never one that is proving while
/// another can go, nor one started within `policy.min_rental_mins` while another can (the
/// caps hold before the rental's minimum: the stop guardrail lets an over-cap stop through).
pub(super) fn over_cap(s: &Snapshot, f: &Facts) -> Vec<Stop> {
    if f.mode != Mode::Full {
        return Vec::new();
    }
    let p = &f.config.policy;
    let is_freed = |r: &InstanceRow| f.freed.iter().any(|x| x.label == r.label);
    let mut left: Vec<&InstanceRow> = s.instances.iter().filter(|r| !is_freed(r)).collect();
    let kept = last_live_worker(s, &left);
    let mut candidates: Vec<&InstanceRow> = left
        .iter()
        .copied()
        .filter(|r| is_billing_state(r.state) && r.vast_id.is_some())
        .filter(|r| {
            Some(&r.label) != kept.as_ref() || s.is_flagged(f.config, r.vast_id.unwrap_or(0))
        })
        .collect();
    let young = |r: &InstanceRow| within_min_rental(r, s.now, f.config);
    // One whose Curio worker the operator cordoned serves nothing: it goes before any that
    // serves (a re-test saw a live worker stopped while two cordoned ones billed on).
    let serving = |r: &InstanceRow| !worker_of(s, r, true);
    candidates.sort_by(|a, b| {
        young(a)
            .cmp(&young(b))
            .then((a.state == PROVING).cmp(&(b.state == PROVING)))
            .then(serving(a).cmp(&serving(b)))
            .then(b.state_since.cmp(&a.state_since))
            .then(b.dph.unwrap_or(0.0).total_cmp(&a.dph.unwrap_or(0.0)))
            .then(b.vast_id.cmp(&a.vast_id))
    });
    let mut stops = Vec::new();
    for c in candidates {
        // Only what a stop can take away counts (`over_caps`: stopped disks are left out,
        // or a fleet of many stopped disks would stop every running instance).
        let Some(figures) = over_caps(&left, p) else {
            break;
        };
        let id = c.vast_id.unwrap_or(0);
        left.retain(|r| r.label != c.label);
        stops.push(Stop {
            instance_id: id,
            why: format!(
                "rules: the fleet is over {figures} (a cap lowered, a paused bid resumed, or an instance billed above its offer): stopping instance {id}, first in the order (past policy.min_rental_mins before young, idle before proving, cordoned in Curio before serving, the latest to change state, the dearest)"
            ),
            kind: CallKind::OverCap,
        });
    }
    stops
}

/// The label of the cluster's last live worker while work waits, among `rows`: the stop
/// guardrail keeps it, over a cap too (asked for, it was refused every pass and nothing else
/// went: a re-test, an idle cordoned instance beside it never asked for).
fn last_live_worker(s: &Snapshot, rows: &[&InstanceRow]) -> Option<String> {
    let d = s.demand.as_ref()?;
    if d.live_workers() > 1 || d.queued_work() == 0 {
        return None;
    }
    rows.iter()
        .find(|r| worker_of(s, r, false))
        .map(|r| r.label.clone())
}

/// Whether `r` is matched to a Curio worker that is `cordoned` (or, false, live).
fn worker_of(s: &Snapshot, r: &InstanceRow, cordoned: bool) -> bool {
    let (Some(d), Some(m)) = (s.demand.as_ref(), r.machine_name.as_ref()) else {
        return false;
    };
    d.has_worker(m, cordoned)
}

/// An idle instance of ours that may go: its vast.ai id, $/h per proof/h, proofs/h, and
/// whether it no longer makes its margin.
struct Idle {
    id: i64,
    per_proof: f64,
    pph: f64,
    losing: bool,
    /// Its cost per proof is above the revenue itself (not only under the margin).
    loses_money: bool,
}

/// Surplus: one idle instance of ours past `policy.min_rental_mins`, never the last live
/// worker nor while workers are dead. One that no longer makes its margin goes first, on the
/// hour alone (the capacity left covers the hour's completions with [`SURPLUS_MARGIN`] to
/// spare), whatever the queue. Other surplus only after [`LOW_DEMAND_PASSES`] of low demand
/// (one where the day's history foretells the fall), the dearest per
/// proof first, when the stop pays for itself ([`stop_pays`]) and the capacity left covers
/// demand's upper band ([`DemandBand`]) and, where the day's history is believed
/// (`Known::forecast`), what it shows within the stop's payback time: otherwise the next
/// backlog relaunches it, and each round trip pays a boot.
pub(super) fn surplus(s: &Snapshot, f: &Facts) -> Option<Stop> {
    let k = f.known.as_ref()?;
    let d = k.d;
    let fall = k.forecast.and_then(|fc| fc.fall);
    let passes = match fall {
        Some(_) => FALL_LOW_DEMAND_PASSES,
        None => LOW_DEMAND_PASSES,
    };
    let low_demand = f.streaks.low_demand_passes >= passes && d.backlog_signal() <= LOW_PENDING_MAX;
    let asked = f.mode == Mode::Full && (low_demand || !k.losing.is_empty()) && !d.workers_dead();
    if !asked {
        return None;
    }
    let idle = idle(s, f);
    // The last live worker stays (it proves the next work at once, where a relaunch waits a
    // boot), unless it loses money on every proof and no work waits: then nothing it could
    // do pays, and a launch for the next work is judged afresh (WORKERS DEAD included).
    let last_loses =
        d.queued_work() == 0 && d.backlog_signal() == 0 && idle.iter().any(|i| i.loses_money);
    if d.live_workers() <= 1 && !last_loses {
        return None;
    }
    let band = match fall {
        Some(level) => DemandBand::foretold(d, level),
        None => DemandBand::of(d),
    };
    let (working, hour) = (k.load.working, k.load.hour);
    let stop = idle.into_iter().find(|i| {
        let left = working - i.pph;
        if i.loses_money {
            // Each proof it does costs more than it earns: serving less earns more.
            true
        } else if i.losing {
            left >= hour * SURPLUS_MARGIN
        } else {
            low_demand
                && band.covered_by(left, k.priced)
                && stop_pays(&band, left, f.config)
                && !k.forecast.is_some_and(|fc| fc.soon > left)
        }
    })?;
    Some(surplus_stop(&stop, f, d, &band, fall))
}

/// The surplus rule's stop of `idle`, its kind and its reason: why it goes, with the figures
/// of demand the rule read (and the fall the day's history shows, if that decided it).
fn surplus_stop(idle: &Idle, f: &Facts, d: &Demand, band: &DemandBand, fall: Option<f64>) -> Stop {
    let (kind, what) = if idle.loses_money {
        (
            CallKind::Unprofitable,
            "the idle instance that loses money on every proof",
        )
    } else if idle.losing {
        (
            CallKind::Unprofitable,
            "the idle instance that no longer makes its margin",
        )
    } else {
        (CallKind::Surplus, "idle surplus")
    };
    let foretold = fall.map_or(String::new(), |level| {
        format!(
            " (the day's history shows demand falling to {}/h)",
            num(level)
        )
    });
    Stop {
        instance_id: idle.id,
        why: format!(
            "rules: demand low for {} passes (backlog {}, {} idle workers, {}/h done, up to {}/h likely): stopping {what}{foretold}",
            f.streaks.low_demand_passes,
            d.backlog_signal(),
            d.idle_workers(),
            d.completed_1h,
            num(band.high()),
        ),
        kind,
    }
}

/// Ours whose worker is idle (registered, matched to a live worker running nothing) and
/// past `policy.min_rental_mins`: the unprofitable first, then the dearest per proof.
fn idle(s: &Snapshot, f: &Facts) -> Vec<Idle> {
    let Some(k) = f.known.as_ref() else {
        return Vec::new();
    };
    let losing_ids: Vec<i64> = k.losing.iter().filter_map(|(r, _)| r.vast_id).collect();
    let mut idle: Vec<Idle> = s
        .instances
        .iter()
        .filter(|r| r.state == REGISTERED)
        .filter(|r| !within_min_rental(r, s.now, f.config))
        .filter(|r| {
            r.machine_name.as_ref().is_some_and(|m| {
                k.d.workers
                    .iter()
                    .any(|w| &w.machine_name == m && w.running == 0 && !w.cordoned)
            })
        })
        .filter_map(|r| {
            let pph = s.rate_of(r, f.config);
            let id = r.vast_id?;
            let per_proof = r.dph.unwrap_or(0.0) / pph;
            let losing = losing_ids.contains(&id);
            Some(Idle {
                id,
                per_proof,
                pph,
                losing,
                loses_money: losing
                    && s.price.as_ref().is_some_and(|p| {
                        crate::price::profit_per_hour(p, r.dph.unwrap_or(0.0), pph) < 0.0
                    }),
            })
        })
        .collect();
    idle.sort_by(|a, b| {
        b.losing
            .cmp(&a.losing)
            .then(b.per_proof.total_cmp(&a.per_proof))
            .then(a.id.cmp(&b.id))
    });
    idle
}
