//! The rules policy: a plain autoscaler that decides a pass without the LLM
//! (`llm.provider = "rules"`), and plans under the model as the floor (`policy::floor`, which
//! is also the fallback when the LLM is unusable). [`decide`] is pure: from the snapshot (with
//! this pass's streaks), the config and the low-demand streak it derives the [`Facts`] once,
//! asks each rule below (one function each, `rules::launches` and `rules::stops`), and
//! [`combine`] makes the pass's calls of their typed plans ([`Launch`], [`Stop`]) in the
//! order of its precedence. The pass executes those calls through the same registry and
//! guardrails; a call becomes a tool name and JSON arguments only there
//! ([`Arguments::to_json`]). The streaks are advanced once per run by the observe step
//! (`run::observe::advance_streaks`, from `policy::streaks`).
//!
//! The rules:
//! - the operator paused the agent: nothing; an operator hold (an operator stop younger than
//!   `policy.operator_hold_mins`, no resume or message since): no launches ([`decide`]).
//! - demand unknown (failed probe): no launches, no stops of working instances. Flagged ones
//!   (exited/offline/stuck loading, known from vast.ai, not from Curio) are still destroyed
//!   in Full mode. A failed probe usually means HarmonyDB is unreachable, and a worker could
//!   not reach it either; launching blind would pay for instances that cannot work. WORKERS
//!   DEAD cannot be known then, so it does not trigger an emergency.
//! - flagged (Full mode, the listing read): destroy each instance of ours that bills and
//!   earns nothing (exited, offline, unknown, stuck loading, silent, stopped too long);
//!   outbid: a bid vast.ai paused is destroyed in the same pass, since it may resume.
//! - over a cap (Full mode): the fleet is over `max_instances` or `max_dph_total` (an outbid
//!   bid resumed): stop the surplus in the same pass, the latest to change state and the dearest first, counting
//!   this pass's destroys as gone.
//! - WORKERS DEAD: asks for launches, enough to reach max(target, the queued proofs as one
//!   hour of work) counting the instances already coming (not those booting longer than a
//!   normal boot), at least one; none while what is coming covers that.
//! - deficit: a backlog (>= 5 pending while every live worker is busy) seen on 2 passes in a
//!   row when the fleet's hour shows it saturated (the hour's completions >= 95 % of its
//!   capacity) or demand has risen (the last quarter at [`RISING_FACTOR`] times the hour's
//!   rate, filling the fleet), else on [`BACKLOG_WEAK_PASSES`] (a fleet near its capacity
//!   sees short backlogs from the arrivals' noise), with throughput under the target (with a
//!   price: the cap, if any) and the next instance profitable ([`next_profitable`]), nothing
//!   of ours still booting (loading, or running with its worker not registered yet; an
//!   instance loading past half of `stuck_loading_mins` no longer holds this back; nor do
//!   the launches of a pass whose others vast.ai refused with 429: those are still owed,
//!   `Snapshot::rate_limited_owed`): launch
//!   toward the target, one at a time (one more every 4 passes the backlog lasts), or, when
//!   saturated and demand has risen or the backlog has lasted 8 passes, half as much again
//!   as the fleet does; never past it. An instance that no longer makes its margin adds one
//!   launch (its replacement).
//! - ahead (only where the day's history is believed, `fleet::day`): the profile shows more
//!   demand from a normal boot from now than ours working and coming take: rent what it
//!   needs, each instance only while it would be busy enough to pay (its cost per proof over
//!   the revenue per proof; half its time without a price), the next instance profitable. It
//!   shares the deficit's place in [`combine`]: the larger ask wins.
//! - seed: no live worker, nothing of ours coming and nothing queued, with a target or a
//!   price: one instance, since Curio asks the market for work only while a ProofShare node
//!   lives.
//! - outbid replacement: no other launch, and outbid bids destroyed this pass: as many come
//!   back as the demand still needs; where the deficit or the rent ahead asks for fewer, it
//!   takes their place.
//! - unprofitable replacement (Full mode, a price known): no other launch, nothing of ours
//!   booting, instances that no longer make `policy.min_margin`: rent profitable
//!   replacements for what the fleet would lack without them (the hour's completions with
//!   5 % to spare), so that they can go.
//! - surplus (Full mode): after [`LOW_DEMAND_PASSES`] passes of low demand (pending <= 1 with
//!   idle live workers; one where the day's history foretells the fall), stop
//!   one idle instance of ours started at least `policy.min_rental_mins` ago, never the last
//!   live worker: one that no longer makes its margin first (whatever the queue, while the
//!   capacity left covers the hour's completions with 5 % to spare), else the dearest per
//!   proof whose stop pays for itself ([`stop_pays`]) and leaves capacity for demand's upper
//!   band ([`DemandBand`]: Curio's six hours where demand is steady, then at 90 % busy, else
//!   the hour; plus two deviations; without a price at 85 % busy either way). Else the next
//!   backlog relaunches it and each round trip pays a boot. Where the day's history is believed, no stop leaves less than it shows
//!   within the stop's payback time ([`relaunch_hours`]: the hold), and where it shows a
//!   fall now the band's level is that forecast (or the last quarter's rate, if higher)
//!   rather than the hour's count, which lags a fall by up to an hour.
//!
//! Which of them wins when several ask is [`combine`]'s precedence.
//!
//! With a price known (`Snapshot::price`), `target_proofs_per_hour` is a cap (0: none), not
//! a goal: the need is the work the market gives. Without one it is the goal, as before.

use crate::clock::Millis;
use crate::config::Config;
use crate::demand::Demand;
use crate::fleet::Snapshot;
use crate::store::instances::InstanceRow;
#[cfg(test)]
use crate::{
    fleet::{LOADING, REGISTERED},
    store::session::Streaks,
};

/// Pending proofs that, with every live worker busy, mean the market offers more than we take.
pub const BACKLOG_MIN: u32 = 5;
/// Passes in a row the backlog must persist before scaling up.
pub const BACKLOG_PASSES: u32 = 2;
/// Pending at or below this with idle live workers is low demand.
pub const LOW_PENDING_MAX: u32 = 1;
/// Passes in a row of low demand before idle surplus is stopped (half an hour at the timer's
/// period): a stop on the first idle pass was relaunched by the next backlog within 4 hours
/// in 45 % of cases on steady demand (docs/sim.md, "What the figures say"), and each round
/// trip pays a boot. Where a believed day profile shows a fall, [`FALL_LOW_DEMAND_PASSES`].
pub const LOW_DEMAND_PASSES: u32 = 6;
/// Passes of low demand before a stop where the day's history foretells the fall
/// (`Forecast::fall`): the fall is expected, so one pass confirms it.
pub const FALL_LOW_DEMAND_PASSES: u32 = 1;
/// After this many backlog passes in a row, launch one more per pass.
pub const BACKLOG_STEP_PASSES: u32 = 4;
/// The last hour's completions over working capacity at which the deficit may be large:
/// launch half as much again as the fleet does, not one at a time, once the last quarter
/// shows demand risen or the backlog has lasted 2 x [`BACKLOG_STEP_PASSES`] (a fleet just
/// under a steady demand is saturated too, and needs one more, not half again).
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
/// The same without a price, steady or not: the target is then the goal and a stop is
/// judged by the hours it may cost, not by profit. A fleet left near its edge sees backlogs
/// from the arrivals' noise and rents again (steady's churn; docs/sim.md, try 10).
pub const UNPRICED_STOP_UTILISATION_MAX: f64 = 0.85;
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

/// Which rule asked for a call (the floor treats each differently).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum CallKind {
    /// WORKERS DEAD: launches.
    Emergency,
    /// A backlog with every live worker busy, under target: launches.
    Deficit,
    /// A rise the day's history shows (`fleet::day`), a normal boot ahead: launches.
    Ahead,
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
    /// surplus is stopped in the same pass, the latest to change state and the dearest first.
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
            CallKind::Ahead => "ahead",
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

/// The calls the rules make this pass. `low_demand_passes` is the low-demand streak
/// including this pass (`run::act::low_demand_streak`); the backlog streak comes from
/// `snapshot.streaks`. The operator's hand comes first: while paused nothing is planned
/// (the tools would refuse it), and while an operator hold is in force
/// (`fleet::OperatorHold`), or an instance of ours runs in Curio without PSProve
/// (`Snapshot::taskless`), no launch is (stops still are).
pub fn decide(
    snapshot: &Snapshot,
    config: &Config,
    low_demand_passes: u32,
    mode: Mode,
) -> Vec<PlannedCall> {
    if snapshot.paused.is_some() {
        return Vec::new();
    }
    let facts = Facts::of(snapshot, config, low_demand_passes, mode);
    let mut calls = combine(&facts, &Asks::of(snapshot, &facts));
    // Instances of ours that Curio runs without PSProve: another of the same image would not
    // prove either (stops still are made).
    if snapshot.hold.is_some() || !snapshot.taskless.is_empty() {
        calls.retain(|c| !c.is_launch());
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
        .filter(|c| c.kind == CallKind::Emergency && c.is_launch())
        .count() as u32
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
    let facts = Facts::of(snapshot, config, 0, Mode::Full);
    let Some(k) = &facts.known else {
        return Deficit::default();
    };
    Deficit {
        confirmed: k.confirmed(snapshot.streaks.backlog_passes),
        persists: k.confirmed(BACKLOG_WEAK_PASSES),
        coming: k.coming,
    }
}

/// What keeps every launch of the rules off this pass, whatever demand says: an operator
/// hold, ours running in Curio without PSProve, a spent launch window, `policy.max_instances`
/// reached. The floor says it of a deficit it leaves unanswered, a rules note of a backlog
/// it waits on.
pub fn launches_held(snapshot: &Snapshot, config: &Config) -> Option<String> {
    if snapshot.hold.is_some() {
        return Some("an operator hold: nothing is launched (policy.operator_hold_mins)".into());
    }
    if !snapshot.taskless.is_empty() {
        return Some(
            "ours run in Curio without PSProve: nothing is launched (the image's layers)".into(),
        );
    }
    let w = snapshot.window(config);
    if w.used >= w.limit {
        return Some(format!(
            "the launch window is spent ({} of {} in policy.launch_window_minutes)",
            w.used, w.limit
        ));
    }
    let max = config.policy.max_instances?;
    (snapshot.billing_count() >= max).then(|| format!("policy.max_instances ({max}) reached"))
}

/// Why the rules answer no backlog this pass when one waits on a busy fleet (their streak
/// not long enough yet, ours booting, or every launch held), for the note a pass with no
/// call leaves. None otherwise.
pub fn waiting_why(snapshot: &Snapshot, config: &Config) -> Option<String> {
    let held = match snapshot.paused {
        Some(_) => Some("the agent is paused (`fleetagent resume`)".to_string()),
        None => launches_held(snapshot, config),
    };
    Facts::of(snapshot, config, 0, Mode::Full)
        .known?
        .waiting_why(snapshot.streaks.backlog_passes, held.as_deref())
}

mod band;
mod combine;
mod facts;
mod launches;
mod plan;
mod stops;

#[cfg(test)]
use band::normal_tail;
pub use band::{relaunch_hours, stop_pays, DemandBand};
pub use combine::{combine, Asks};
pub use facts::{new_instance_rate, next_profitable, unprofitable, Facts, Forecast, Known, Load};
pub use plan::{Arg, Arguments, Launch, PlannedCall, Stop, LAUNCH_TOOL, STOP_TOOL};

#[cfg(test)]
mod rule_tests;
#[cfg(test)]
mod tests;
