//! The rules policy: a plain autoscaler that decides a pass without the LLM
//! (`llm.provider = "rules"`), and plans under the model as the floor (`policy::floor`, which
//! is also the fallback when the LLM is unusable). [`decide`] is pure: from the snapshot (with this pass's
//! streaks), the config and the low-demand streak it returns tool calls, which the pass
//! executes through the same registry and guardrails. The streaks are advanced once per run
//! by the observe step (`run::observe::advance_streaks`, from `policy::streaks`).
//!
//! Decisions, in order:
//! - the operator paused the agent: nothing; an operator hold (an operator stop younger than
//!   `policy.operator_hold_mins`, no resume or message since): no launches.
//! - demand unknown (failed probe): no launches, no stops of working instances. Flagged ones
//!   (exited/offline/stuck loading, known from vast.ai, not from Curio) are still destroyed
//!   in Full mode. A failed probe usually means HarmonyDB is unreachable, and a worker could
//!   not reach it either; launching blind would pay for instances that cannot work. WORKERS
//!   DEAD cannot be known then, so it does not trigger an emergency.
//! - WORKERS DEAD: asks for launches, enough to reach max(target, the queued proofs as one
//!   hour of work) counting the instances already coming (not those booting longer than a
//!   normal boot), at least one; none while what is coming covers that.
//! - a backlog (>= 5 pending while every live worker is busy) seen on 2 passes in a row when
//!   the fleet's hour shows it saturated (the hour's completions >= 95 % of its capacity),
//!   else on [`BACKLOG_WEAK_PASSES`] (a fleet near its capacity sees short backlogs from the
//!   arrivals' noise), with throughput under the target (with a price: the cap, if any) and
//!   the next instance profitable ([`next_profitable`]), nothing of ours still booting
//!   (loading, or running with its worker not registered yet; an instance loading past half
//!   of `stuck_loading_mins` no longer holds this back): launch toward the target, one at a
//!   time (one more every 4 passes the backlog lasts), or, when saturated, half as much again
//!   as the fleet does; never past it. An instance that no longer makes its margin adds one
//!   launch (its replacement).
//! - no live worker, nothing of ours coming and nothing queued, with a target or a price:
//!   one seed instance, since Curio asks the market for work only while a ProofShare node
//!   lives.
//! - Full mode only: destroy flagged instances; on a pass of low demand (pending <= 1 with
//!   idle live workers), stop one idle instance of ours started at least
//!   `policy.min_rental_mins` ago, never the last live worker: one that no longer makes its
//!   margin first (while the capacity left covers the hour's completions with 5 % to
//!   spare), else the dearest per proof whose stop pays for itself ([`stop_pays`]) and
//!   leaves capacity for demand's upper band ([`DemandBand`]: Curio's six hours where demand
//!   is steady, then at 90 % busy, else the hour; plus two deviations). Else the next backlog
//!   relaunches it and each round trip pays a boot.
//!
//! With a price known (`Snapshot::price`), `target_proofs_per_hour` is a cap (0: none), not
//! a goal: the need is the work the market gives. Without one it is the goal, as before.

use serde_json::{json, Value};

use crate::clock::Millis;
use crate::config::Config;
use crate::demand::Demand;
use crate::fleet::{
    dph_of, is_billing_state, Snapshot, BOOTED, LAUNCHING, LOADING, OUTBID, PROVING, REGISTERED,
};
use crate::ratelimit::window::window_state;
use crate::store::instances::InstanceRow;
use crate::store::session::Streaks;

/// Pending proofs that, with every live worker busy, mean the market offers more than we take.
pub const BACKLOG_MIN: u32 = 5;
/// Passes in a row the backlog must persist before scaling up.
pub const BACKLOG_PASSES: u32 = 2;
/// Pending at or below this with idle live workers is low demand.
pub const LOW_PENDING_MAX: u32 = 1;
/// Passes in a row of low demand before idle surplus is stopped: one, since the surplus
/// guard ([`SURPLUS_MARGIN`] over the last hour's completions) keeps what the demand needs.
pub const LOW_DEMAND_PASSES: u32 = 1;
/// After this many backlog passes in a row, launch one more per pass.
pub const BACKLOG_STEP_PASSES: u32 = 4;
/// The last hour's completions over working capacity at which the deficit is taken to be
/// large: launch half as much again as the fleet does, not one at a time.
pub const FULLY_SATURATED: f64 = 0.95;
/// The capacity left after a stop must cover the last hour's completions times this.
pub const SURPLUS_MARGIN: f64 = 1.05;
/// Standard deviations of demand's level ([`DemandBand`]) the capacity left after a surplus
/// stop must cover.
pub const SURPLUS_DEVIATIONS: f64 = 2.0;
/// Passes in a row a backlog must last before a launch when the fleet's hour does not show
/// it saturated (completions under [`FULLY_SATURATED`] of its capacity): a fleet near its
/// capacity sees short backlogs from the arrivals' noise alone, and a launch on each would be
/// stopped again within the hour.
pub const BACKLOG_WEAK_PASSES: u32 = 6;
/// Demand has risen, not wobbled, when the last 15 minutes' rate is at least this many times
/// the hour's and fills the fleet: the hour is low because the work was not there (a dead
/// market waking, a step up), so a backlog then needs no longer confirmation than on a
/// saturated fleet. One quarter's Poisson noise at a steady rate almost never reaches it.
pub const RISING_FACTOR: f64 = 1.5;
/// The share of new hosts that fail us (a boot that never finishes, an exit): what a
/// relaunch risks beyond its boot.
pub const HOST_FAILURE_RISK: f64 = 0.1;
/// The busiest a fleet may be left by a surplus stop: the capacity left times this must
/// cover demand's upper band ([`DemandBand::high`]).
pub const STOP_UTILISATION_MAX: f64 = 0.9;
/// The longest window of Curio's history the demand's variability is judged on.
const LONG_WINDOW_HOURS: f64 = 6.0;
/// The shortest span of history that makes a long window (below it the hour alone counts).
const LONG_WINDOW_MIN_HOURS: f64 = 2.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `provider = "rules"`: launches and stops.
    Full,
    /// Launches only, never stops or destroys. No pass plans so since the fallback became the
    /// floor (issue 23); the rules' tests use it to look at their launches alone.
    LaunchOnly,
}

/// One tool call the rules want, with why (the why is also the call's `reason`).
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedCall {
    pub tool: &'static str,
    pub arguments: Value,
    pub why: String,
    pub kind: CallKind,
}

/// Which rule asked for a call (the floor treats each differently).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum CallKind {
    /// WORKERS DEAD: launches.
    Emergency,
    /// A backlog with every live worker busy, under target: launches.
    Deficit,
    /// A target with no worker and nothing queued: one seed instance.
    Seed,
    /// An instance that bills and earns nothing: destroyed.
    Flagged,
    /// Idle surplus on low demand: one stop.
    Surplus,
    /// A bid vast.ai paused (outbid): destroyed in the same pass, since it may resume.
    Outbid,
    /// A launch replacing an outbid bid destroyed in the same pass, while demand needs it.
    Replace,
    /// The fleet is over `max_instances` or `max_dph_total` (an outbid bid resumed): the
    /// surplus is stopped in the same pass, the newest and dearest first.
    OverCap,
    /// With a price known: an instance whose cost per proof leaves less than
    /// `policy.min_margin` (the price fell, or its measured rate is low), stopped first when
    /// capacity is surplus, or replaced (a stop and a launch) when capacity is needed.
    Unprofitable,
}

impl CallKind {
    pub fn as_str(self) -> &'static str {
        match self {
            CallKind::Emergency => "emergency",
            CallKind::Deficit => "deficit",
            CallKind::Seed => "seed",
            CallKind::Flagged => "flagged",
            CallKind::Surplus => "surplus",
            CallKind::Outbid => "outbid",
            CallKind::Replace => "replace",
            CallKind::OverCap => "over_cap",
            CallKind::Unprofitable => "unprofitable",
        }
    }
}

impl PlannedCall {
    fn launch(kind: CallKind, why: String) -> PlannedCall {
        PlannedCall {
            tool: "launch_instance",
            arguments: json!({ "reason": why }),
            why,
            kind,
        }
    }

    fn stop(kind: CallKind, instance_id: i64, why: String) -> PlannedCall {
        PlannedCall {
            tool: "stop_instance",
            arguments: json!({ "instance_id": instance_id, "reason": why }),
            why,
            kind,
        }
    }

    /// The same call, asked for by someone else: the reason says who and why.
    pub fn with_reason(&self, why: String) -> PlannedCall {
        let mut arguments = self.arguments.clone();
        arguments["reason"] = json!(why);
        PlannedCall {
            tool: self.tool,
            arguments,
            why,
            kind: self.kind,
        }
    }
}

/// When an instance of ours may be stopped or destroyed at the earliest, unless it is
/// flagged: `policy.min_rental_mins` after its start (every rental pays a boot; one ended
/// sooner paid it for nothing).
pub fn may_stop_from(row: &InstanceRow, config: &Config) -> Millis {
    row.created_at + config.policy.min_rental_mins as Millis * 60_000
}

/// A rental of ours (launched by fleetagent, not adopted: an adopted instance's start is
/// not known, its `created_at` is when we first saw it) started less than
/// `policy.min_rental_mins` ago.
pub fn within_min_rental(row: &InstanceRow, now: Millis, config: &Config) -> bool {
    !row.adopted && now < may_stop_from(row, config)
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
    let best = match &snapshot.offers {
        Some(offers) => super::offers::best_offer(offers, config, &snapshot.measured_rates)
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
    };
    best.is_none_or(|(dph, pph)| crate::price::profitable(Some(price), dph, pph, config))
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

/// Our instances still booting (a running one whose worker has not registered yet included),
/// flagged ones aside: those that hold further scale-up back, and those booting longer than
/// a normal boot (half of `policy.stuck_loading_mins`), which may never come (they are
/// destroyed once flagged as stuck) and so hold nothing back.
fn booting<'a>(
    snapshot: &'a Snapshot,
    config: &Config,
    flagged_ids: &[i64],
) -> (Vec<&'a InstanceRow>, Vec<&'a InstanceRow>) {
    let slow_boot_ms = (config.policy.stuck_loading_mins as i64 * 60_000 / 2).max(60_000);
    snapshot
        .instances
        .iter()
        .filter(|r| matches!(r.state, LAUNCHING | LOADING | BOOTED))
        .filter(|r| !r.vast_id.is_some_and(|id| flagged_ids.contains(&id)))
        .partition(|r| snapshot.now - r.state_since < slow_boot_ms)
}

/// How busy our working fleet is. A backlog means a large deficit only when the workers have
/// been busy for the hour (not a burst of arrivals, which a 15-minute count times 4 mistakes
/// for demand: it is +/-2 sqrt(rate) noisy).
#[derive(Debug, Clone, Copy)]
struct Load {
    /// Proofs completed in the last hour.
    hour: f64,
    /// The larger of the hour's completions and the last 15 minutes' times 4.
    observed: f64,
    /// Proofs/h of our registered and proving instances.
    working: f64,
    /// The hour's completions over that capacity (1 with none working).
    utilisation: f64,
    /// Demand has risen, not wobbled ([`RISING_FACTOR`]).
    rising: bool,
}

fn load(snapshot: &Snapshot, config: &Config, d: &Demand) -> Load {
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

/// A backlog the rules answer with launches (whatever is coming): a backlog seen on
/// [`BACKLOG_PASSES`] passes in a row when the fleet's hour shows it saturated or demand is
/// rising (one on a fleet with room over the hour may be the arrivals' noise, and must last
/// [`BACKLOG_WEAK_PASSES`]), the next instance profitable, every live worker busy, and the
/// hour under the target.
fn confirmed(
    d: &Demand,
    load: &Load,
    backlog_passes: u32,
    target: f64,
    profitable_next: bool,
) -> bool {
    let streak_confirms = backlog_passes >= BACKLOG_PASSES
        && (load.utilisation >= FULLY_SATURATED
            || load.rising
            || backlog_passes >= BACKLOG_WEAK_PASSES);
    streak_confirms
        && profitable_next
        && d.backlog_signal() >= BACKLOG_MIN
        && d.live_workers() > 0
        && d.idle_workers() == 0
        && (target <= 0.0 || load.hour < target)
}

/// The rules' facts about a deficit in this snapshot, as [`decide`] judges it: what the
/// floor's deficit clock reads (`policy::floor`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Deficit {
    /// The rules confirm it (their backlog streak included): they launch for it unless
    /// something of ours is coming.
    pub confirmed: bool,
    /// All they require but the streak holds: a backlog with every live worker busy, the
    /// hour under the target, the next instance profitable.
    pub persists: bool,
    /// Our instances booting within a normal boot: the rules wait for them.
    pub coming: usize,
}

/// See [`Deficit`]. Unknown demand: no deficit.
pub fn deficit(snapshot: &Snapshot, config: &Config) -> Deficit {
    let Some(d) = &snapshot.demand else {
        return Deficit::default();
    };
    let flagged = snapshot.flagged(config);
    let flagged_ids: Vec<i64> = flagged.iter().map(|f| f.vast_id).collect();
    let (l, target) = (
        load(snapshot, config, d),
        config.policy.target_proofs_per_hour,
    );
    let profitable = next_profitable(snapshot, config);
    let streak = snapshot.streaks.backlog_passes;
    Deficit {
        confirmed: confirmed(d, &l, streak, target, profitable),
        persists: confirmed(d, &l, BACKLOG_WEAK_PASSES, target, profitable),
        coming: booting(snapshot, config, &flagged_ids).0.len(),
    }
}

/// The calls the rules make this pass. `low_demand_passes` is the low-demand streak
/// including this pass (`run::act::low_demand_streak`); the backlog streak comes from
/// `snapshot.streaks`. The operator's hand comes first: while paused nothing is planned
/// (the tools would refuse it), and while an operator hold is in force
/// (`fleet::OperatorHold`) no launch is (stops still are).
pub fn decide(
    snapshot: &Snapshot,
    config: &Config,
    low_demand_passes: u32,
    mode: Mode,
) -> Vec<PlannedCall> {
    if snapshot.paused.is_some() {
        return Vec::new();
    }
    let mut calls = decide_fleet(snapshot, config, low_demand_passes, mode);
    if snapshot.hold.is_some() {
        calls.retain(|c| c.tool != "launch_instance");
    }
    calls
}

/// How many launches the rules would make for WORKERS DEAD on this snapshot: the emergency
/// launches of their own plan ([`decide`] in `Full` mode, as the floor plans it), so the
/// observation's `Action needed:` line and the floor never disagree. 0 when work is not
/// waiting for a dead fleet, while paused or held, or when what is coming covers the need.
pub fn emergency_launches(snapshot: &Snapshot, config: &Config) -> u32 {
    decide(snapshot, config, 0, Mode::Full)
        .iter()
        .filter(|c| c.kind == CallKind::Emergency && c.tool == "launch_instance")
        .count() as u32
}

fn decide_fleet(
    snapshot: &Snapshot,
    config: &Config,
    low_demand_passes: u32,
    mode: Mode,
) -> Vec<PlannedCall> {
    let streaks = Streaks {
        low_demand_passes,
        backlog_passes: snapshot.streaks.backlog_passes,
    };
    let mut calls = Vec::new();
    let flagged = snapshot.flagged(config);
    let destroys = mode == Mode::Full && snapshot.listing_error.is_none();
    if destroys {
        for f in &flagged {
            let kind = if f.why == "outbid" {
                CallKind::Outbid
            } else {
                CallKind::Flagged
            };
            calls.push(PlannedCall::stop(
                kind,
                f.vast_id,
                format!(
                    "rules: instance {} is {}: it bills and earns nothing",
                    f.vast_id, f.why
                ),
            ));
        }
    }
    // What this pass's destroys of flagged instances free, planned before the launches so
    // that a slot they free is filled in the same pass.
    let freed: Vec<&InstanceRow> = if destroys {
        flagged
            .iter()
            .filter_map(|f| snapshot.find(f.vast_id))
            .collect()
    } else {
        Vec::new()
    };
    calls.extend(over_cap(snapshot, config, mode, &freed));
    let Some(d) = &snapshot.demand else {
        return calls;
    };

    let target = config.policy.target_proofs_per_hour;
    let rate = new_instance_rate(snapshot, config).max(1e-6);
    let projected = snapshot.projected_pph(config);
    let flagged_ids: Vec<i64> = flagged.iter().map(|f| f.vast_id).collect();
    let (booting, slow) = booting(snapshot, config, &flagged_ids);
    let coming = booting.len();
    // In an emergency, an instance booting longer than a normal boot does not count as
    // coming either: it may never come, and every minute without a worker costs.
    let slow_pph: f64 = slow.iter().map(|r| snapshot.rate_of(r, config)).sum();
    let queued = d.queued_work();
    let fleet_load = load(snapshot, config, d);
    let Load {
        hour,
        observed,
        working,
        utilisation,
        ..
    } = fleet_load;
    // With a price known the target is a cap (0: none), not a goal: the need is the work
    // the market gives (queued as one hour of work, the hour's completions), under the cap.
    let priced = snapshot.price.is_some();
    let need = if priced {
        let market = (queued as f64).max(hour);
        if target > 0.0 {
            market.min(target)
        } else {
            market
        }
    } else {
        target.max(queued as f64)
    };
    let profitable_next = next_profitable(snapshot, config);

    let (wanted, why, kind) = if d.workers_dead() && need.max(1.0) > projected - slow_pph {
        // Enough to reach the need counting what is coming; nothing when that covers it (a
        // booting fleet already sized to the target is not doubled while it boots).
        let n = ((need - (projected - slow_pph)) / rate).ceil().max(1.0) as u32;
        (
            n.min(config.policy.emergency_launch_max.max(1)),
            format!(
                "rules: WORKERS DEAD: {queued} proofs queued and no live worker; {} p/h coming",
                crate::fleet::num(projected)
            ),
            CallKind::Emergency,
        )
    } else if coming == 0
        && confirmed(
            d,
            &fleet_load,
            streaks.backlog_passes,
            target,
            profitable_next,
        )
    {
        // One more at a time, a second after a long backlog: the market's rate is unknown
        // (Curio buffers at most 8), and every surplus instance is paid to sit idle.
        // The deficit is unknown (Curio buffers at most 8 either way): size it from what the
        // saturated fleet does now, half as much again, toward the target.
        let step = if utilisation >= FULLY_SATURATED {
            (((observed * 1.5).max(working + rate) - projected) / rate)
                .ceil()
                .max(1.0) as u32
        } else {
            1 + streaks.backlog_passes / BACKLOG_STEP_PASSES
        };
        let n = if target > 0.0 {
            if projected >= target {
                0
            } else {
                (((target - projected) / rate).ceil().max(1.0) as u32).min(step)
            }
        } else {
            step
        };
        (
            n.min(config.policy.launch_window_max.max(1)),
            format!(
                "rules: backlog of {} for {} passes with every live worker busy; {}/h done",
                d.backlog_signal(),
                streaks.backlog_passes,
                d.completed_1h
            ),
            CallKind::Deficit,
        )
    } else if (target > 0.0 || priced)
        && profitable_next
        && !d.proofshare_disabled()
        && d.live_workers() == 0
        && projected <= 0.0
        && queued == 0
    {
        (
            1,
            "rules: no worker lives: one instance so Curio can ask the market for work".to_string(),
            CallKind::Seed,
        )
    } else {
        (0, String::new(), CallKind::Seed)
    };
    let outbid = freed.iter().filter(|r| r.state == OUTBID).count() as u32;
    let (wanted, why, kind) = if wanted == 0 && outbid > 0 && !d.proofshare_disabled() {
        // The outbid bids go this pass; as many come back as the demand still needs.
        let n = if need > projected {
            (((need - projected) / rate).ceil() as u32).min(outbid)
        } else {
            0
        };
        (
            n,
            format!(
                "rules: replacing {outbid} outbid bid(s) destroyed this pass; {} p/h coming of {} needed",
                crate::fleet::num(projected),
                crate::fleet::num(need)
            ),
            CallKind::Replace,
        )
    } else {
        (wanted, why, kind)
    };
    // Capacity is needed and an instance no longer makes its margin: one more launch (a
    // profitable offer, the launch tool refuses any other) replaces it; it goes first once
    // capacity is surplus.
    let losing = unprofitable(snapshot, config);
    let (wanted, why) = match losing.first() {
        Some((r, cost)) if kind == CallKind::Deficit && wanted > 0 => (
            wanted + 1,
            format!(
                "{why}; and one to replace instance {} (${cost:.4}/proof leaves less than policy.min_margin)",
                r.vast_id.unwrap_or(0)
            ),
        ),
        _ => (wanted, why),
    };
    // No other launch this pass, nothing of ours booting, and instances that no longer make
    // their margin (the price fell, or their measured rate is low): rent profitable
    // replacements for what the fleet would lack without them, so that they can go (the stop
    // below takes them once idle and covered). Their capacity is not counted as staying.
    let (wanted, why, kind) = if wanted == 0
        && mode == Mode::Full
        && !losing.is_empty()
        && coming == 0
        && !d.workers_dead()
        && !d.proofshare_disabled()
        && profitable_next
    {
        let losing_pph: f64 = losing
            .iter()
            .map(|(r, _)| snapshot.rate_of(r, config))
            .sum();
        let want = hour * SURPLUS_MARGIN;
        let short = want - (projected - losing_pph);
        let n = if short > 0.0 {
            ((short / rate).ceil() as u32).min(losing.len() as u32)
        } else {
            0
        };
        let (r, cost) = &losing[0];
        (
            n,
            format!(
                "rules: {} instance(s) no longer make policy.min_margin (instance {} at ${cost:.4}/proof): renting profitable replacements before they go",
                losing.len(),
                r.vast_id.unwrap_or(0)
            ),
            CallKind::Unprofitable,
        )
    } else {
        (wanted, why, kind)
    };

    if wanted > 0 {
        // Never ask for more than the window and the slots allow; but an emergency always
        // asks at least once, so a refusal is on record if it cannot be served.
        let w = window_state(
            &snapshot.window_launches,
            snapshot.now,
            &config.policy,
            snapshot.workers_dead(),
        );
        let window_left = w.limit.saturating_sub(w.used);
        let freed_slots = freed.iter().filter(|r| is_billing_state(r.state)).count() as u32;
        let slots_left = config
            .policy
            .max_instances
            .unwrap_or(0)
            .saturating_sub(snapshot.billing_count().saturating_sub(freed_slots));
        let mut n = wanted.min(window_left).min(slots_left);
        if d.workers_dead() {
            n = n.max(1);
        }
        for i in 0..n {
            calls.push(PlannedCall::launch(
                kind,
                format!("{why} (launch {} of {n})", i + 1),
            ));
        }
    }

    let low_demand =
        streaks.low_demand_passes >= LOW_DEMAND_PASSES && d.backlog_signal() <= LOW_PENDING_MAX;
    if mode == Mode::Full
        && (low_demand || !losing.is_empty())
        && !d.workers_dead()
        && d.live_workers() > 1
    {
        // An idle instance past `min_rental_mins` goes when the stop pays for itself and the
        // capacity left covers demand's upper band (the hour plus its spread over the recent
        // hours): otherwise the next backlog relaunches it, and each round trip pays a boot.
        // One that no longer makes its margin goes first, on the hour alone.
        let band = DemandBand::of(d);
        let losing_ids: Vec<i64> = losing.iter().filter_map(|(r, _)| r.vast_id).collect();
        let mut idle: Vec<(i64, f64, f64, bool)> = snapshot
            .instances
            .iter()
            .filter(|r| r.state == REGISTERED)
            .filter(|r| !within_min_rental(r, snapshot.now, config))
            .filter(|r| {
                r.machine_name.as_ref().is_some_and(|m| {
                    d.workers
                        .iter()
                        .any(|w| &w.machine_name == m && w.running == 0 && !w.cordoned)
                })
            })
            .filter_map(|r| {
                let pph = snapshot.rate_of(r, config);
                let id = r.vast_id?;
                Some((
                    id,
                    r.dph.unwrap_or(0.0) / pph,
                    pph,
                    losing_ids.contains(&id),
                ))
            })
            .collect();
        idle.sort_by(|a, b| b.3.cmp(&a.3).then(b.1.total_cmp(&a.1)).then(a.0.cmp(&b.0)));
        // One that no longer makes its margin goes whenever it is idle and the rest cover the
        // hour; other surplus only on low demand.
        let stop = idle.into_iter().find(|(_, _, pph, losing)| {
            let left = working - pph;
            if *losing {
                left >= hour * SURPLUS_MARGIN
            } else {
                low_demand && band.covered_by(left) && stop_pays(&band, left, config)
            }
        });
        if let Some((id, _, _, losing)) = stop {
            let (kind, what) = if losing {
                (
                    CallKind::Unprofitable,
                    "the idle instance that no longer makes its margin",
                )
            } else {
                (CallKind::Surplus, "idle surplus")
            };
            calls.push(PlannedCall::stop(
                kind,
                id,
                format!(
                    "rules: demand low for {} passes (backlog {}, {} idle workers, {}/h done, up to {}/h likely): stopping {what}",
                    streaks.low_demand_passes,
                    d.backlog_signal(),
                    d.idle_workers(),
                    d.completed_1h,
                    crate::fleet::num(band.high()),
                ),
            ));
        }
    }
    calls
}

/// Stops that bring the fleet back within `max_instances` and `max_dph_total` (counting the
/// flagged instances this pass destroys, `freed`, as gone): the newest first (a bid that just
/// resumed), the dearest among equals; never one that is proving while another can go.
/// Full mode only (the fallback never stops).
fn over_cap(
    snapshot: &Snapshot,
    config: &Config,
    mode: Mode,
    freed: &[&InstanceRow],
) -> Vec<PlannedCall> {
    if mode != Mode::Full {
        return Vec::new();
    }
    let p = &config.policy;
    let is_freed = |r: &InstanceRow| freed.iter().any(|f| f.label == r.label);
    let mut left: Vec<&InstanceRow> = snapshot.instances.iter().filter(|r| !is_freed(r)).collect();
    // Only what a stop can take away counts here: stopped disks are left out, or a fleet
    // of many stopped disks would stop every running instance.
    let over = |left: &[&InstanceRow]| {
        let rows: Vec<_> = left
            .iter()
            .filter(|r| is_billing_state(r.state))
            .map(|r| (*r).clone())
            .collect();
        p.max_instances.is_some_and(|m| rows.len() as u32 > m)
            || p.max_dph_total.is_some_and(|m| dph_of(&rows) > m + 1e-9)
    };
    let mut candidates: Vec<&InstanceRow> = left
        .iter()
        .copied()
        .filter(|r| is_billing_state(r.state) && r.vast_id.is_some())
        .collect();
    // One started within `min_rental_mins` goes only when no other can (the caps hold
    // before the rental's minimum: the stop guardrail lets an over-cap stop through).
    let young = |r: &InstanceRow| within_min_rental(r, snapshot.now, config);
    candidates.sort_by(|a, b| {
        young(a)
            .cmp(&young(b))
            .then((a.state == PROVING).cmp(&(b.state == PROVING)))
            .then(b.state_since.cmp(&a.state_since))
            .then(b.dph.unwrap_or(0.0).total_cmp(&a.dph.unwrap_or(0.0)))
            .then(b.vast_id.cmp(&a.vast_id))
    });
    let mut calls = Vec::new();
    for c in candidates {
        if !over(&left) {
            break;
        }
        let id = c.vast_id.unwrap_or(0);
        left.retain(|r| r.label != c.label);
        calls.push(PlannedCall::stop(
            CallKind::OverCap,
            id,
            format!(
                "rules: the fleet is over max_instances or max_dph_total (a paused bid resumed?): stopping instance {id}, the newest"
            ),
        ));
    }
    calls
}

mod band;
#[cfg(test)]
use band::normal_tail;
pub use band::{relaunch_hours, stop_pays, DemandBand};

#[cfg(test)]
mod tests;
