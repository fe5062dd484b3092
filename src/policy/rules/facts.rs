//! What the rules know of a snapshot, derived once per plan ([`Facts::of`]) and read by every
//! rule: the flagged instances and what destroying them frees, and, where demand is known,
//! the need, the capacity working and coming, how busy the fleet is, and the price's verdicts.

use super::{Mode, FULLY_SATURATED, RISING_FACTOR};
use super::{BACKLOG_MIN, BACKLOG_PASSES, BACKLOG_WEAK_PASSES};
use crate::config::Config;
use crate::demand::Demand;
use crate::fleet::day::HOUR_MS;
use crate::fleet::{Flag, Snapshot, BOOTED, LAUNCHING, LOADING, OUTBID, PROVING, REGISTERED};
use crate::store::instances::InstanceRow;
use crate::store::session::Streaks;

/// The facts every rule reads, derived once from the snapshot.
#[derive(Debug, Clone)]
pub struct Facts<'a> {
    pub config: &'a Config,
    pub mode: Mode,
    /// The low-demand streak including this pass, and the backlog streak.
    pub streaks: Streaks,
    /// Ours that bill and earn nothing, with why (`Snapshot::flagged`).
    pub flagged: Vec<Flag>,
    /// This pass destroys the flagged ones: Full mode, and the listing was read.
    pub destroys: bool,
    /// What those destroys free: planned before the launches, so that a slot they free is
    /// filled in the same pass.
    pub freed: Vec<&'a InstanceRow>,
    /// The window's launches left (the emergency allowance while workers are dead).
    pub window_left: u32,
    /// Slots left under `max_instances`, the instances this pass destroys counted as gone.
    pub slots_left: u32,
    /// Launches the boot breaker leaves (`fleet::boot`): while it holds, one when none of
    /// ours waits for its first Curio worker (this pass's destroys counted as gone), else
    /// none; `u32::MAX` otherwise.
    pub boot_left: u32,
    /// The facts that need demand; None when the probe failed.
    pub known: Option<Known<'a>>,
}

/// The facts of a snapshot whose demand is known.
#[derive(Debug, Clone)]
pub struct Known<'a> {
    pub d: &'a Demand,
    /// `policy.target_proofs_per_hour`: the goal, or with a price the cap (0: none).
    pub target: f64,
    /// Proofs/h assumed for a new instance ([`new_instance_rate`]).
    pub rate: f64,
    /// Proofs/h of ours that can or soon will prove (`Snapshot::projected_pph`).
    pub projected: f64,
    /// Ours booting within a normal boot: they hold further scale-up back.
    pub coming: usize,
    /// Proofs/h of ours booting longer than a normal boot: they may never come.
    pub slow_pph: f64,
    /// Work queued, as one hour of work.
    pub queued: u32,
    pub load: Load,
    /// A price is known: the target is a cap and the need the work the market gives.
    pub priced: bool,
    /// Proofs/h the fleet should serve.
    pub need: f64,
    /// The next instance would make money ([`next_profitable`]).
    pub profitable_next: bool,
    /// Ours that no longer make `policy.min_margin`, the worst first ([`unprofitable`]).
    pub losing: Vec<(&'a InstanceRow, f64)>,
    /// Outbid bids among this pass's destroys.
    pub outbid: u32,
    /// What the day profile says, where it is believed (`fleet::day`).
    pub forecast: Option<Forecast>,
}

/// What a believed day profile (`fleet::day`) says for this pass.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Forecast {
    /// The most demand it shows from a normal boot (half of `policy.stuck_loading_mins`)
    /// from now to a timer period after, proofs/h (no more than the target, if any): what
    /// the rule `ahead` rents for, less two of its Poisson deviations.
    pub ahead: f64,
    /// When that starts.
    pub ahead_at: crate::clock::Millis,
    /// The most it shows from now to the stop's payback time ([`super::relaunch_hours`]).
    pub soon: f64,
    /// The profile shows demand falling now, and the present agrees: the most it shows for
    /// the coming hour, where that lies more than two deviations of the difference of two
    /// Poisson hours under what it showed for the last, and the last 15 minutes' rate is
    /// nearer the fallen level than the last hour's (None: no fall; a flat day's noise
    /// almost never passes both).
    pub fall: Option<f64>,
    /// The share of its time the next instance must be busy to pay: its cost per proof over
    /// the revenue per proof (between 0.3 and 1); 0.5 without a price.
    pub break_even: f64,
}

impl Forecast {
    fn of(snapshot: &Snapshot, config: &Config, target: f64) -> Option<Forecast> {
        let profile = snapshot.day.as_ref().filter(|p| p.trusted)?;
        let now = snapshot.now;
        let boot = config.policy.stuck_loading_mins as i64 * 60_000 / 2;
        let pass = config.run.timer_period_secs.max(60) as i64 * 1000;
        let payback = (super::relaunch_hours(config) * 3_600_000.0) as i64;
        let cap = |v: f64| if target > 0.0 { v.min(target) } else { v };
        let break_even = match (snapshot.price.as_ref(), next_offer(snapshot, config)) {
            (Some(price), Some((dph, pph))) if price.revenue_per_proof > 0.0 => {
                (crate::price::cost_per_proof(dph, pph) / price.revenue_per_proof).clamp(0.3, 1.0)
            }
            _ => 0.5,
        };
        let next = profile.max_over(now, now + HOUR_MS - 1)?;
        let quarter = snapshot
            .demand
            .as_ref()
            .map_or(f64::INFINITY, |d| d.completed_15m as f64 * 4.0);
        let fall = profile
            .at(now - HOUR_MS)
            .filter(|prev| {
                prev - next > 2.0 * (prev + next).max(1.0).sqrt() && quarter <= (prev + next) / 2.0
            })
            .map(|_| next);
        let ahead = cap(profile.max_over(now + boot, now + boot + pass)?);
        Some(Forecast {
            fall,
            ahead,
            ahead_at: now + boot,
            soon: cap(profile.max_over(now, now + payback.max(pass))?),
            break_even,
        })
    }
}

impl<'a> Facts<'a> {
    pub fn of(
        snapshot: &'a Snapshot,
        config: &'a Config,
        low_demand_passes: u32,
        mode: Mode,
    ) -> Facts<'a> {
        let flagged = snapshot.flagged(config);
        let destroys = mode == Mode::Full && snapshot.listing_error.is_none();
        let freed: Vec<&InstanceRow> = if destroys {
            flagged
                .iter()
                .filter_map(|f| snapshot.find(f.vast_id))
                .collect()
        } else {
            Vec::new()
        };
        let w = snapshot.window(config);
        let freed_slots = freed
            .iter()
            .filter(|r| crate::fleet::is_billing_state(r.state))
            .count() as u32;
        let slots_left = config
            .policy
            .max_instances
            .unwrap_or(0)
            .saturating_sub(snapshot.billing_count().saturating_sub(freed_slots));
        let known = snapshot
            .demand
            .as_ref()
            .map(|d| Known::of(snapshot, config, d, &flagged, &freed));
        let boot_left = if snapshot.boot_breaker() {
            let waiting = snapshot
                .unproven()
                .any(|r| !freed.iter().any(|f| f.label == r.label));
            u32::from(!waiting)
        } else {
            u32::MAX
        };
        Facts {
            config,
            mode,
            streaks: Streaks {
                low_demand_passes,
                backlog_passes: snapshot.streaks.backlog_passes,
            },
            flagged,
            destroys,
            freed,
            window_left: w.limit.saturating_sub(w.used),
            slots_left,
            boot_left,
            known,
        }
    }
}

impl<'a> Known<'a> {
    fn of(
        snapshot: &'a Snapshot,
        config: &Config,
        d: &'a Demand,
        flagged: &[Flag],
        freed: &[&InstanceRow],
    ) -> Known<'a> {
        let target = config.policy.target_proofs_per_hour;
        let flagged_ids: Vec<i64> = flagged.iter().map(|f| f.vast_id).collect();
        let (booting, slow) = booting(snapshot, config, &flagged_ids, d.workers_dead());
        let queued = d.queued_work();
        let load = Load::of(snapshot, config, d);
        // With a price known the target is a cap (0: none), not a goal: the need is the work
        // the market gives (queued as one hour of work, the hour's completions), under the cap.
        let priced = snapshot.price.is_some();
        let need = if priced {
            let market = (queued as f64).max(load.hour);
            if target > 0.0 {
                market.min(target)
            } else {
                market
            }
        } else {
            target.max(queued as f64)
        };
        Known {
            d,
            target,
            rate: new_instance_rate(snapshot, config).max(1e-6),
            projected: snapshot.projected_pph(config),
            coming: booting.len(),
            slow_pph: slow.iter().map(|r| snapshot.rate_of(r, config)).sum(),
            queued,
            load,
            priced,
            need,
            profitable_next: next_profitable(snapshot, config),
            losing: unprofitable(snapshot, config),
            outbid: freed.iter().filter(|r| r.state == OUTBID).count() as u32,
            forecast: Forecast::of(snapshot, config, target),
        }
    }

    /// A backlog the rules answer with launches (whatever is coming), given the backlog
    /// streak: seen on [`BACKLOG_PASSES`] passes in a row when the fleet's hour shows it
    /// saturated or demand is rising (one on a fleet with room over the hour may be the
    /// arrivals' noise, and must last [`BACKLOG_WEAK_PASSES`]), the next instance profitable,
    /// every live worker busy, and the hour under the target.
    /// Why a backlog with every live worker busy is not yet answered, in a line for the
    /// rules' note (a pass said "Rules: no action." while 6 proofs waited: a walkthrough).
    /// None when the backlog is answered, or when there is none to wait on.
    /// `held`: what keeps every launch off this pass (a pause, a hold, a spent window, no
    /// slot left), said instead of the streak (a re-test saw the streak promised a launch
    /// the full window then refused).
    pub fn waiting_why(&self, backlog_passes: u32, held: Option<&str>) -> Option<String> {
        let (d, load) = (self.d, &self.load);
        let waits = d.backlog_signal() >= BACKLOG_MIN
            && d.live_workers() > 0
            && d.idle_workers() == 0
            && self.profitable_next
            && (self.target <= 0.0 || load.hour < self.target);
        if !waits {
            return None;
        }
        if let Some(held) = held {
            return Some(format!(
                "a backlog of {} with every live worker busy, {backlog_passes} pass(es) in a row, and no launch can go: {held}",
                d.backlog_signal()
            ));
        }
        if self.confirmed(backlog_passes) {
            // Answered, unless ours are booting: the rules wait for them (a normal boot).
            return (self.coming > 0).then(|| {
                format!(
                    "a backlog of {} with every live worker busy, {backlog_passes} pass(es) in a row: the rules wait for the {} instance(s) of ours booting before renting more",
                    d.backlog_signal(),
                    self.coming
                )
            });
        }
        let strong = load.utilisation >= FULLY_SATURATED || load.rising;
        let need = if strong {
            BACKLOG_PASSES
        } else {
            BACKLOG_WEAK_PASSES
        };
        Some(format!(
            "a backlog of {} with every live worker busy, {backlog_passes} pass(es) in a row: the rules launch for it once it lasts {need} ({BACKLOG_PASSES} while the hour shows the fleet saturated or demand risen; it shows {:.0} % of the fleet's capacity{})",
            d.backlog_signal(),
            load.utilisation * 100.0,
            if load.rising { ", demand risen" } else { "" }
        ))
    }

    pub fn confirmed(&self, backlog_passes: u32) -> bool {
        let (d, load) = (self.d, &self.load);
        let streak_confirms = backlog_passes >= BACKLOG_PASSES
            && (load.utilisation >= FULLY_SATURATED
                || load.rising
                || backlog_passes >= BACKLOG_WEAK_PASSES);
        streak_confirms
            && self.profitable_next
            && d.backlog_signal() >= BACKLOG_MIN
            && d.live_workers() > 0
            && d.idle_workers() == 0
            && (self.target <= 0.0 || load.hour < self.target)
    }
}

/// How busy our working fleet is. A backlog means a large deficit only when the workers have
/// been busy for the hour (not a burst of arrivals, which a 15-minute count times 4 mistakes
/// for demand: it is +/-2 sqrt(rate) noisy).
#[derive(Debug, Clone, Copy)]
pub struct Load {
    /// Proofs completed in the last hour.
    pub hour: f64,
    /// The larger of the hour's completions and the last 15 minutes' times 4.
    pub observed: f64,
    /// Proofs/h of our registered and proving instances.
    pub working: f64,
    /// The hour's completions over that capacity (1 with none working).
    pub utilisation: f64,
    /// Demand has risen, not wobbled ([`RISING_FACTOR`]).
    pub rising: bool,
}

impl Load {
    fn of(snapshot: &Snapshot, config: &Config, d: &Demand) -> Load {
        let observed = (d.completed_1h as f64).max(d.completed_15m as f64 * 4.0);
        let hour = d.completed_1h as f64;
        let working: f64 = snapshot
            .instances
            .iter()
            .filter(|r| matches!(r.state, REGISTERED | PROVING))
            .map(|r| snapshot.rate_of(r, config))
            .sum();
        let utilisation = if working > 0.0 { hour / working } else { 1.0 };
        let quarter_rate = d.completed_15m as f64 * 4.0;
        let rising = working > 0.0
            && quarter_rate >= working * FULLY_SATURATED
            && quarter_rate >= hour * RISING_FACTOR;
        Load {
            hour,
            observed,
            working,
            utilisation,
            rising,
        }
    }
}

/// Our instances still booting (a running one whose worker has not registered yet included),
/// flagged ones aside: those that hold further scale-up back, and those booting longer than
/// a normal boot (half of `policy.stuck_loading_mins`), which may never come (they are
/// destroyed once flagged as stuck) and so hold nothing back.
///
/// While workers are dead, so is a launch whose create may not have happened (a 5xx or a
/// timeout left its intent open, `policy::launch`) once a listing a minute after it did not
/// show it (`Snapshot::is_unconfirmed`): it may never come either, and the intent waits up
/// to `fleet::INTENT_GRACE_MS` (10 minutes) to be settled. It still counts against
/// the caps, so a create that did happen can only leave a surplus within them. So is a
/// running one whose Curio worker registered once (its address is kept) and is gone: it is
/// not booting, it lost its worker (the incident: every worker died on instances vast.ai
/// still lists as running), and waiting half of `stuck_loading_mins` for it left the
/// queue unserved.
fn booting<'a>(
    snapshot: &'a Snapshot,
    config: &Config,
    flagged_ids: &[i64],
    workers_dead: bool,
) -> (Vec<&'a InstanceRow>, Vec<&'a InstanceRow>) {
    let slow_boot_ms = (config.policy.stuck_loading_mins as i64 * 60_000 / 2).max(60_000);
    let unseen = |r: &InstanceRow| workers_dead && snapshot.is_unconfirmed(r);
    let lost_worker =
        |r: &InstanceRow| workers_dead && r.state == BOOTED && r.worker_address.is_some();
    snapshot
        .instances
        .iter()
        .filter(|r| matches!(r.state, LAUNCHING | LOADING | BOOTED))
        .filter(|r| !r.vast_id.is_some_and(|id| flagged_ids.contains(&id)))
        .partition(|r| snapshot.now - r.state_since < slow_boot_ms && !unseen(r) && !lost_worker(r))
}

/// With a price known: the instances of ours (working, not flagged) whose cost per proof
/// (their $/h over their GPU's rate) leaves less than `policy.min_margin`, the worst first,
/// with their cost per proof. Empty without a price.
pub fn unprofitable<'a>(snapshot: &'a Snapshot, config: &Config) -> Vec<(&'a InstanceRow, f64)> {
    let Some(price) = snapshot.price.as_ref() else {
        return Vec::new();
    };
    let max = crate::price::max_cost_per_proof(price, config);
    let flagged: Vec<i64> = snapshot.flagged(config).iter().map(|f| f.vast_id).collect();
    let mut out: Vec<(&InstanceRow, f64)> = snapshot
        .instances
        .iter()
        .filter(|r| matches!(r.state, REGISTERED | PROVING))
        .filter(|r| !r.vast_id.is_some_and(|id| flagged.contains(&id)))
        .filter_map(|r| {
            let cost = crate::price::cost_per_proof(r.dph?, snapshot.rate_of(r, config));
            (cost > max + 1e-12).then_some((r, cost))
        })
        .collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.vast_id.cmp(&b.0.vast_id)));
    out
}

/// Would the next instance make money (`price::profitable`)? Judged on the best offer this
/// pass has seen where it searched, else on the cheapest per proof of our own working
/// instances (what the market rented us last); true without a price or without either
/// (the launch tool refuses an unprofitable offer anyway).
pub fn next_profitable(snapshot: &Snapshot, config: &Config) -> bool {
    let Some(price) = snapshot.price.as_ref() else {
        return true;
    };
    if snapshot.unprofitable_refused_at.is_some() {
        // The market had no profitable offer a moment ago: asking again would only search.
        return false;
    }
    next_offer(snapshot, config)
        .is_none_or(|(dph, pph)| crate::price::profitable(Some(price), dph, pph, config))
}

/// The next instance's $/h and proofs/h as [`next_profitable`] judges them: the best offer
/// this pass has seen where it searched, else the cheapest per proof of our own working
/// instances; None without either.
fn next_offer(snapshot: &Snapshot, config: &Config) -> Option<(f64, f64)> {
    match &snapshot.offers {
        Some(offers) => crate::policy::offers::best_offer(offers, config, &snapshot.measured_rates)
            .map(|o| (o.dph_total, snapshot.gpu_rate(config, &o.gpu_name))),
        None => snapshot
            .instances
            .iter()
            .filter(|r| matches!(r.state, REGISTERED | PROVING))
            .filter_map(|r| Some((r.dph?, snapshot.rate_of(r, config))))
            .min_by(|a, b| {
                crate::price::cost_per_proof(a.0, a.1)
                    .total_cmp(&crate::price::cost_per_proof(b.0, b.1))
            }),
    }
}

/// Proofs/h assumed for an instance not launched yet: the best rate among the configured
/// GPUs (pinned, else measured, else the default: `fleet::rates`; the default rate when no
/// GPU is configured). Optimistic on purpose: too few launches are corrected next pass, too
/// many cost money until the surplus rule removes them.
pub fn new_instance_rate(snapshot: &Snapshot, config: &Config) -> f64 {
    config
        .vast
        .offers
        .gpu_names
        .iter()
        .map(|g| snapshot.gpu_rate(config, g))
        .fold(None, |best: Option<f64>, r| {
            Some(best.map_or(r, |b| b.max(r)))
        })
        .unwrap_or(config.policy.proofs_per_hour_per_instance)
}
