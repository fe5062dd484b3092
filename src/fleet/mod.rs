//! The fleet as one pass sees it, pure: our instances (the local table reconciled with
//! vast.ai's listing, open launch intents and Curio's live machines), the demand reading, the
//! launch window and the money already committed. Nothing here does I/O: the pass's observe
//! step (`run::observe`) reads the world and builds the [`Snapshot`]; the tools launch and
//! stop through the guardrails and update it; the observation text the model reads is
//! `prompt::observation` (the `observation_line` and `lifecycle_lines` methods).

pub mod boot;
pub mod copies;
pub mod day;
pub mod identity;
pub mod money;
pub mod rates;
pub mod reconcile;
pub mod state;
pub mod workers;

#[cfg(test)]
pub(crate) mod fixtures;

use std::collections::{BTreeMap, HashSet};

use crate::clock::{human_duration, Millis};
use crate::config::Config;
use crate::demand::Demand;
pub use crate::store::actions::FlagKind;
use crate::store::instances::InstanceRow;
pub use crate::text::num;

pub use boot::{BootFailure, BOOT_FAILURES_MAX, BOOT_WINDOW_MS};
pub use money::{dph_of, over_caps, rate_of, spend_since};
pub use reconcile::Recorded;
pub use reconcile::{
    describe, reconcile, seen_elsewhere, ReconcileInput, Reconciled, INTENT_GRACE_MS,
};
pub use state::*;
pub use workers::match_workers;

/// The breaker of silent workers: after this many were stopped or destroyed as silent within
/// [`SILENT_WINDOW_MS`], no more are flagged silent until the window has fewer.
pub const SILENT_DESTROYS_MAX: u32 = 3;
pub const SILENT_WINDOW_MS: Millis = 6 * 3_600_000;

/// Outside text (labels, machine names, status messages) is quoted and cut to this length.
pub const LABEL_CHARS: usize = 64;
pub const STATUS_CHARS: usize = 120;
/// The text shown when no vast.ai key is configured.
pub const NO_VAST_KEY: &str = "not_configured: no vast.ai API key";

/// A listing's error that is a failure: any but [`NO_VAST_KEY`] (no key configured is
/// `doctor`'s to report, not a failed call).
pub fn listing_failure(error: Option<&str>) -> Option<&str> {
    error.filter(|e| *e != NO_VAST_KEY)
}

/// One of our instances that bills and earns nothing (`exited`/`offline`/`unknown`/`frozen`, loading
/// past `policy.stuck_loading_mins`, a silent worker, a bid vast.ai paused (`outbid`), or
/// stopped longer than `vast.stopped_max_hours`): it may be destroyed without the stop
/// protections.
#[derive(Debug, Clone, PartialEq)]
pub struct Flag {
    pub vast_id: i64,
    pub label: String,
    /// What the flag says, as decisions read it.
    pub kind: FlagKind,
    /// `exited`, `offline`, `unknown`, `loading 45m`, `outbid`, `stopped 25h`, or `silent 25m`
    /// (a worker that heartbeats and proves nothing while work waits: [`Snapshot::silent_for`]).
    pub why: String,
}

/// Since when work has waited without a break, after this reading: the earlier start while
/// work still waits (`queued_work` or Curio's backlog), `now` when it starts, None when none
/// waits. An unknown reading (None) keeps what was known.
pub fn work_waiting_since(
    prev: Option<Millis>,
    demand: Option<&Demand>,
    now: Millis,
) -> Option<Millis> {
    match demand {
        None => prev,
        Some(d) if d.queued_work() > 0 || d.backlog_signal() > 0 => Some(prev.unwrap_or(now)),
        Some(_) => None,
    }
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
    /// Offer searches sent to vast.ai in this pass (the launch's and `search_offers`').
    pub searches: u32,
    /// vast.ai answered a search of this pass `search_quota_exceeded`: none goes out again in
    /// the pass (the model's loop searched on past it, and spent what the floor's WORKERS
    /// DEAD launch needed).
    pub search_quota_this_pass: bool,
    /// GPU model -> proofs/h learned from our workers' Curio history (the `measured_rates`
    /// table, updated by this pass's reading): used where `policy.gpu_rates` does not pin
    /// the GPU (`fleet::rates::gpu_rate`).
    pub measured_rates: BTreeMap<String, f64>,
    /// Since when work has waited without a break (`agent_state.work_waiting_since`, kept by
    /// the observe step; None while none waits): a worker idle that long is silent.
    pub work_waiting_since: Option<Millis>,
    /// Silent workers of ours stopped or destroyed in the last [`SILENT_WINDOW_MS`]: at
    /// [`SILENT_DESTROYS_MAX`] no more are flagged silent (the breaker).
    pub silent_destroys_recent: u32,
    /// The boot breaker's row (`boot::in_a_row`): rentals of ours in a row that never booted
    /// a Curio worker, newest first; at [`BOOT_FAILURES_MAX`] launches go one at a time.
    pub boot_failures: Vec<BootFailure>,
    /// Ours that fleetagent started again (a stopped spare), by vast.ai id: when (its
    /// latest `start` action within two days); their boot is timed from then
    /// (`boot::boot_began`).
    pub started_again: BTreeMap<i64, Millis>,
    /// Hosts (`machine_id`) that failed us, left out of offer searches for now.
    pub bad_hosts: Vec<i64>,
    /// Hosts of instances the operator stopped or destroyed within
    /// `policy.operator_hold_mins`, left out of offer searches as long (the model rented
    /// the very host the operator had just destroyed an instance on: the prompt walkthrough).
    pub operator_hosts: Vec<i64>,
    /// Ours that the operator stopped (`store::actions::operator_stopped`): never flagged
    /// as stopped too long.
    pub operator_stopped: Vec<i64>,
    /// Of the hosts an empty offer search left out (bad hosts, the operator's), those vast.ai
    /// lists matching offers on (`tools::launch`'s second search): a launch is refused
    /// `bad_hosts` naming them rather than failing as "vast.ai has no offer".
    pub left_out_offers: Vec<u64>,
    /// Ours that the listing shows created with another image than `vast.image` (the
    /// operator changed it since): a stopped one is never started again in place of a rental.
    pub other_image: Vec<i64>,
    /// vast.ai said the daily search quota is spent: until when (`X-RateLimit-Reset` as
    /// sent, "" when it sent none).
    pub search_quota: Option<String>,
    /// What a proof earns this pass (`price::resolve`); None when unknown, and then
    /// `price_unknown` says why: the profit check is off and the observation says so.
    pub price: Option<crate::price::Price>,
    pub price_unknown: Option<String>,
    /// A launch was refused `unprofitable` within the last [`UNPROFITABLE_RETRY_MS`]: when.
    /// The rules do not ask for growth or replacements again until it is older (each ask is
    /// an offer search, and vast.ai's searches are counted).
    pub unprofitable_refused_at: Option<Millis>,
    /// Launches the code (rules, floor, fallback) asked for in its latest launching pass,
    /// within the launch window, that vast.ai refused with 429, retries spent: still owed.
    /// The deficit rule rents them though that pass's others are booting (a plan cut short
    /// by vast.ai's rate limit is finished, not re-decided once they boot).
    pub rate_limited_owed: u32,
    /// This install's id (`agent_state.install_id`): new labels carry it.
    pub install_id: String,
    /// Instances under our label prefix that carry another install's id (never ours: not
    /// counted, never stopped).
    pub other_installs: Vec<crate::store::ops::ForeignInstance>,
    /// Instances of another fleet on this account proving for this cluster
    /// (`reconcile::rival_fleet`): `"label" (instance N)`.
    pub rival_fleet: Vec<String>,
    /// The operator's hand-brake in force (`fleetagent pause`): nobody launches or stops.
    pub paused: Option<crate::store::ops::Pause>,
    /// An operator stop within `policy.operator_hold_mins`: the rules and the floor launch
    /// nothing ([`OperatorHold`]).
    pub hold: Option<OperatorHold>,
    /// Our instances Curio runs without PSProve in their task list, one line each
    /// (`identity::taskless_ours`): the rules and the floor launch nothing while any is.
    pub taskless: Vec<String>,
    /// How demand moves with the hour of the day, learned from the samples
    /// (`fleet::day`); None while `policy.learn_day` is off. The rules use it only when
    /// it is believed (`DayProfile::trusted`).
    pub day: Option<crate::fleet::day::DayProfile>,
    /// What an instance of ours that bills with no price known counts against
    /// `policy.max_dph_total` (vast.ai listed it without `dph_total`, or with a figure no host
    /// charges): `vast.offers.max_dph_per_instance`, else the whole cap, never $0.
    pub unpriced_dph: f64,
}

/// What an operator stopped by hand is not put back by the rules or the floor for
/// `policy.operator_hold_mins`, unless the operator resumes or sends a message after the
/// stop (docs/guardrails.md, "Operator hold").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorHold {
    /// The operator's latest stop or destroy that went through.
    pub stopped_at: Millis,
    pub instance_id: Option<i64>,
    pub label: Option<String>,
    /// `stopped_at` + `policy.operator_hold_mins`.
    pub until: Millis,
}

impl OperatorHold {
    /// The hold after the operator's latest stop (None: none recorded), if it is still in
    /// force at `now`: younger than `hold_mins`, and the operator has neither resumed nor
    /// sent a message since (`spoke_since`).
    pub fn in_force(
        stop: Option<crate::store::actions::OperatorStop>,
        spoke_since: bool,
        hold_mins: u64,
        now: Millis,
    ) -> Option<OperatorHold> {
        let stop = stop?;
        let until = stop
            .at
            .saturating_add((hold_mins as Millis).saturating_mul(60_000));
        (now < until && !spoke_since).then_some(OperatorHold {
            stopped_at: stop.at,
            instance_id: stop.instance_id,
            label: stop.label,
            until,
        })
    }
}

/// How long after an `unprofitable` refusal the rules wait before asking for a launch the
/// market may again have no profitable offer for (WORKERS DEAD aside).
pub const UNPROFITABLE_RETRY_MS: Millis = 30 * 60_000;

impl Snapshot {
    /// Work is queued and no live worker can take it.
    pub fn workers_dead(&self) -> bool {
        self.demand.as_ref().is_some_and(|d| d.workers_dead())
    }

    /// $/h of every instance of ours that bills: the full price of all but stopped ones
    /// (launching ones at the price of their offer, outbid ones at theirs), the disk of
    /// stopped ones.
    pub fn fleet_dph(&self) -> f64 {
        money::caps_dph(&self.instances, self.unpriced_dph)
    }

    /// Instances that take a slot under `max_instances` (all but stopped ones).
    pub fn billing_count(&self) -> u32 {
        self.instances
            .iter()
            .filter(|i| is_billing_state(i.state))
            .count() as u32
    }

    /// The mean $/h of our instances that bill and carry a price (None: none does): what an
    /// instance costs here, for judging the room the caps leave (the observation's WORKERS
    /// DEAD line, the floor's flagged-first order).
    pub fn mean_instance_dph(&self) -> Option<f64> {
        let prices: Vec<f64> = self
            .instances
            .iter()
            .filter(|i| is_billing_state(i.state))
            .filter_map(|i| i.dph)
            .filter(|d| *d > 0.0)
            .collect();
        (!prices.is_empty()).then(|| prices.iter().sum::<f64>() / prices.len() as f64)
    }

    /// $/h a launch may add (None while `policy.max_dph_total` is unset): the guardrail's own
    /// room ([`money::dph_room`]), under `policy.daily_spend_max` too (the observation said
    /// $10.00/h left of a daily cap that left $0.67/h).
    pub fn headroom_dph(&self, config: &Config) -> Option<f64> {
        let p = &config.policy;
        p.max_dph_total
            .map(|_| money::dph_room(p, self.fleet_dph(), self.spent_today).max(0.0))
    }

    /// Whether the caps leave room for `launches` more instances as the fleet is now: slots
    /// under `policy.max_instances`, and $/h under `policy.max_dph_total` (and the daily
    /// cap) at our billing instances' mean price. An unset cap, or no price to judge by,
    /// leaves room.
    pub fn room_for(&self, config: &Config, launches: usize) -> bool {
        let slots = self
            .headroom_slots(config)
            .is_none_or(|n| n as usize >= launches);
        let money = match (self.headroom_dph(config), self.mean_instance_dph()) {
            (Some(room), Some(each)) => room >= launches as f64 * each,
            _ => true,
        };
        slots && money
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
        let mut flags: Vec<Flag> = self
            .instances
            .iter()
            .filter_map(|r| {
                let id = r.vast_id?;
                let status = r
                    .actual_status
                    .as_deref()
                    .map(|s| s.trim().to_ascii_lowercase());
                let lost = self.worker_lost_for(r, config);
                let unbooted = self.unbooted_for(r, config);
                let began = |r: &InstanceRow| boot::boot_clock(r, &self.started_again);
                let (kind, why) = match status.as_deref() {
                    _ if r.state == OUTBID => (FlagKind::Outbid, String::new()),
                    // Kept stopped by the operator: its disk is theirs to end.
                    _ if r.state == STOPPED && self.operator_stopped.contains(&id) => return None,
                    _ if r.state == STOPPED && self.now - r.state_since > stopped_ms => (
                        FlagKind::Stopped,
                        format!(" {}h", (self.now - r.state_since) / 3_600_000),
                    ),
                    _ if r.state == STOPPED => return None,
                    // Before any worker of its own: a boot that failed (the boot breaker's).
                    Some("exited") if r.worker_address.is_none() && !r.adopted => (
                        FlagKind::Unbooted,
                        ": exited before its Curio worker started".to_string(),
                    ),
                    Some("exited") => (FlagKind::Exited, String::new()),
                    Some("offline") => (FlagKind::Offline, String::new()),
                    // Paused with its memory kept, the GPU billed (reference/vastai-api.md
                    // 4d), and fleetagent never freezes one: it was counted against the caps
                    // and never destroyed (a walkthrough). As for `unknown`, a live Curio
                    // worker matched to it proves it runs (a re-test saw one destroyed).
                    Some("frozen") if !matches!(r.state, REGISTERED | PROVING) => {
                        (FlagKind::Frozen, String::new())
                    }
                    // No recent heartbeat from the host: vast.ai says it will not run again.
                    // A live Curio worker matched to it (`classify` keeps those alive) proves
                    // the container runs, so only one without is flagged.
                    Some("unknown") if !matches!(r.state, REGISTERED | PROVING) => {
                        (FlagKind::Unknown, String::new())
                    }
                    // From when its present boot began (a spare started again: its start).
                    _ if r.state == LOADING && self.now - began(r) > stuck_ms => (
                        FlagKind::Loading,
                        format!(" {}", human_duration(self.now - began(r))),
                    ),
                    _ if unbooted.is_some() => (
                        FlagKind::Unbooted,
                        format!(
                            " {}: vast.ai runs it and no Curio worker appeared",
                            human_duration(unbooted.unwrap_or(0))
                        ),
                    ),
                    _ if lost.is_some() => {
                        let ms = human_duration(lost.unwrap_or(0));
                        let why = ": its Curio worker stopped heartbeating";
                        (FlagKind::Silent, format!(" {ms}{why}"))
                    }
                    _ => match self.silent_for(r, config) {
                        Some(ms) => (FlagKind::Silent, format!(" {}", human_duration(ms))),
                        None => return None,
                    },
                };
                Some(Flag {
                    vast_id: id,
                    label: r.label.clone(),
                    kind,
                    why: format!("{kind}{why}"),
                })
            })
            .collect();
        // The breaker holds within a pass too: no more silent ones than it has left (a
        // re-test saw four destroyed in one pass; `tools::stop` counts each that goes). With
        // no worker of ours alive, one a pass: all of ours losing theirs at once may be a
        // fault they share (Curio, its database, the network), which destroying them does not
        // mend, while a lone instance whose worker died must still go (a re-test: one that
        // held the only slot billed for ever once none could be flagged).
        let any_live = self
            .instances
            .iter()
            .any(|o| matches!(o.state, REGISTERED | PROVING));
        let mut left = SILENT_DESTROYS_MAX.saturating_sub(self.silent_destroys_recent);
        if !any_live {
            left = left.min(1);
        }
        flags.retain(|f| {
            let keep = f.kind != FlagKind::Silent || left > 0;
            if f.kind == FlagKind::Silent {
                left = left.saturating_sub(1);
            }
            keep
        });
        flags
    }

    /// How long an instance of ours has run without the Curio worker it had (matched once:
    /// its `worker_address` is kept) once past `policy.silent_worker_mins` with demand read:
    /// the worker died in a running container. Flagged as silent: it holds a slot, bills and
    /// proves nothing (a soak saw one kept for 4h50m and counted as capacity). The silent
    /// breaker holds it too. None: not so.
    pub fn worker_lost_for(&self, r: &InstanceRow, config: &Config) -> Option<Millis> {
        let limit = config.policy.silent_worker_mins as Millis * 60_000;
        let d = self.demand.as_ref()?;
        let lost = r.state == BOOTED
            && identity::lost_address(&self.instances, &d.workers, r).is_some()
            && self.silent_destroys_recent < SILENT_DESTROYS_MAX;
        let ms = self.now - r.state_since;
        (lost && ms > limit).then_some(ms)
    }

    /// How long the Curio worker of this instance has been silent: live (heartbeats,
    /// matched to it, not cordoned), running nothing and registered for at least
    /// `policy.silent_worker_mins`, its last completion (Curio's history of its address)
    /// older than that or none in the window, while work has waited for as long without a
    /// break ([`Snapshot::work_waiting_since`]). Such a worker cannot prove (parameters never
    /// fetched, a broken GPU) and holds a slot. None: not silent.
    pub fn silent_for(&self, r: &InstanceRow, config: &Config) -> Option<Millis> {
        if self.silent_destroys_recent >= SILENT_DESTROYS_MAX {
            // Several silent workers in a row, each replaced by another that cannot prove
            // either: the cause is not the host (the image's parameter fetch, Curio itself).
            // Renting more would pay a boot each time for nothing; `doctor` says so.
            return None;
        }
        let d = self.demand.as_ref()?;
        if r.state != REGISTERED || (d.queued_work() == 0 && d.backlog_signal() == 0) {
            return None;
        }
        let limit = config.policy.silent_worker_mins as Millis * 60_000;
        let machine = r.machine_name.as_deref()?.trim();
        let worker = d
            .workers
            .iter()
            .find(|w| !w.cordoned && w.machine_name.trim() == machine)?;
        if worker.running > 0 {
            return None;
        }
        let idle = self.now - r.state_since;
        let waiting = self.now - self.work_waiting_since?;
        let address = r.worker_address.as_deref().unwrap_or(&worker.host_and_port);
        let completed_recently = d.history.iter().any(|h| {
            h.host_and_port.trim() == address.trim()
                && (h.last_end_secs_ago as Millis) * 1000 < limit
        });
        (idle >= limit && waiting >= limit && !completed_recently).then_some(idle.min(waiting))
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
            .map(|r| self.rate_of(r, config))
            .sum()
    }

    /// Proofs/h of one instance of ours (pinned, measured, default: `fleet::rates`).
    pub fn rate_of(&self, row: &InstanceRow, config: &Config) -> f64 {
        rate_of(row, config, &self.measured_rates)
    }

    /// Proofs/h of a new instance with this GPU.
    pub fn gpu_rate(&self, config: &Config, gpu_name: &str) -> f64 {
        rates::gpu_rate(config, &self.measured_rates, gpu_name)
    }

    /// Instances of ours in a state, counted.
    /// Launches vast.ai has not confirmed: a create with no answer (an open intent) that a
    /// good listing at least [`crate::store::instances::UNSEEN_LAUNCH_MS`] after it did not
    /// show. They keep their slot until a listing settles them (`INTENT_GRACE_MS`), but
    /// nothing is booting.
    pub fn unconfirmed_launches(&self) -> u32 {
        self.instances
            .iter()
            .filter(|r| self.is_unconfirmed(r))
            .count() as u32
    }

    /// One of [`Self::unconfirmed_launches`].
    pub fn is_unconfirmed(&self, r: &InstanceRow) -> bool {
        self.listing_error.is_none()
            && r.state == LAUNCHING
            && r.vast_id.is_none()
            && self.now - r.created_at >= crate::store::instances::UNSEEN_LAUNCH_MS
    }

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
    fn unknown_and_frozen_are_flagged_like_exited_and_offline() {
        let with = |id: i64, status: &str, state: State| {
            let mut r = row(&format!("fleetagent-{id}"), Some(id), state, 0.4);
            r.actual_status = Some(status.into());
            r
        };
        let snap = Snapshot {
            now: NOW,
            instances: vec![
                // It had a worker: a boot that failed is `unbooted` (`boot`).
                InstanceRow {
                    worker_address: Some("10.0.0.1:12300".into()),
                    ..with(1, "exited", DEAD)
                },
                with(2, "offline", DEAD),
                with(3, " Unknown ", DEAD),
                with(4, "running", BOOTED),
                // A Curio worker still heartbeats from it: the container runs.
                with(5, "unknown", PROVING),
                with(6, "frozen", DEAD),
                with(7, "frozen", PROVING),
            ],
            ..Default::default()
        };
        let c = config();
        let flags = flags(&snap, &c);
        assert_eq!(
            flags,
            vec![
                (1, "exited".to_string()),
                (2, "offline".to_string()),
                (3, "unknown".to_string()),
                (6, "frozen".to_string()),
            ]
        );
        assert!(snap.is_flagged(&c, 3) && !snap.is_flagged(&c, 5) && !snap.is_flagged(&c, 7));
        assert_eq!(classify(Some("unknown"), None), DEAD);
        assert_eq!(classify(Some("frozen"), None), DEAD);
        let line = snap.lifecycle_lines(&c).join("\n");
        assert!(
            line.contains(
                "Flagged (bill, earn nothing; destroy with stop_instance): 1 exited; 2 offline; 3 unknown; 6 frozen."
            ),
            "{line}"
        );
        // Past 12 the rest are counted, not dropped (the scale walkthrough: 30 exited, 12
        // named, nothing said of 18).
        let mut many = snap.clone();
        many.instances = (100..130).map(|id| with(id, "exited", DEAD)).collect();
        let line = many.lifecycle_lines(&c).join("\n");
        assert!(
            line.contains("111 unbooted: exited before its Curio worker started; +18 more, each named FLAGGED among our instances."),
            "{line}"
        );
    }
    #[test]
    fn a_worker_that_heartbeats_and_never_proves_while_work_waits_is_flagged_silent() {
        use crate::demand::WorkerHistory;
        let mut c = config();
        c.policy.silent_worker_mins = 20;
        let mut r = row("fleetagent-s", Some(7), REGISTERED, 0.4);
        r.machine_name = Some("fleetagent-s".into());
        r.worker_address = Some("172.17.0.2:12300".into());
        r.actual_status = Some("running".into());
        r.state_since = NOW - 25 * MIN;
        let base = Snapshot {
            now: NOW,
            demand: Some(Demand {
                pending: 4,
                workers: vec![worker("fleetagent-s", "172.17.0.2:12300", 0)],
                ..Default::default()
            }),
            instances: vec![r],
            work_waiting_since: Some(NOW - 30 * MIN),
            ..Default::default()
        };
        let why = |s: &Snapshot| s.flagged(&c).into_iter().map(|f| f.why).collect::<Vec<_>>();
        assert_eq!(why(&base), vec!["silent 25m".to_string()]);
        assert!(base.is_flagged(&c, 7));
        // Not silent: work has waited less than 20 minutes; none waits; the worker runs a
        // task; it completed one 10 minutes ago; it registered 10 minutes ago; cordoned.
        let mut s = base.clone();
        s.work_waiting_since = Some(NOW - 10 * MIN);
        assert!(why(&s).is_empty());
        let mut s = base.clone();
        s.work_waiting_since = None;
        assert!(why(&s).is_empty());
        let mut s = base.clone();
        s.demand.as_mut().unwrap().pending = 0;
        assert!(why(&s).is_empty());
        let mut s = base.clone();
        s.demand.as_mut().unwrap().workers[0].running = 1;
        assert!(why(&s).is_empty());
        let mut s = base.clone();
        s.demand.as_mut().unwrap().history = vec![WorkerHistory {
            host_and_port: "172.17.0.2:12300".into(),
            proofs: 3,
            first_end_secs_ago: 3000,
            last_end_secs_ago: 600,
            busy_secs: None,
            completed_1h: None,
        }];
        assert!(why(&s).is_empty());
        // A completion older than the limit does not count.
        s.demand.as_mut().unwrap().history[0].last_end_secs_ago = 21 * 60;
        assert_eq!(why(&s), vec!["silent 25m".to_string()]);
        let mut s = base.clone();
        s.instances[0].state_since = NOW - 10 * MIN;
        assert!(why(&s).is_empty());
        let mut s = base.clone();
        s.demand.as_mut().unwrap().workers[0].cordoned = true;
        assert!(why(&s).is_empty());
        // The breaker: after SILENT_DESTROYS_MAX silent destroys in the window, none more.
        let mut s = base.clone();
        s.silent_destroys_recent = SILENT_DESTROYS_MAX - 1;
        assert_eq!(why(&s), vec!["silent 25m".to_string()]);
        s.silent_destroys_recent = SILENT_DESTROYS_MAX;
        assert!(why(&s).is_empty());
        // Unknown demand: nothing is known of Curio, nothing is silent.
        let mut s = base.clone();
        s.demand = None;
        assert!(why(&s).is_empty());
        // Its worker died and the container runs on (booted again, its address kept): silent
        // past the limit, with no work waiting too, and no longer counted as capacity (a soak
        // saw one billed 4h50m and counted). One that never had a worker is not.
        let mut s = base.clone();
        s.demand.as_mut().unwrap().workers = vec![worker("fleetagent-t", "172.17.0.9:12300", 1)];
        s.demand.as_mut().unwrap().pending = 0;
        s.instances[0].state = BOOTED;
        s.instances[0].machine_name = None;
        let mut live = row("fleetagent-t", Some(8), PROVING, 0.4);
        live.machine_name = Some("fleetagent-t".into());
        s.instances.push(live);
        let lost = "silent 25m: its Curio worker stopped heartbeating".to_string();
        assert_eq!(why(&s), vec![lost.clone()]);
        let pph = s.projected_pph(&c);
        assert!(
            pph > 0.0 && pph < 2.0 * s.rate_of(&s.instances[1], &c),
            "{pph}"
        );
        let mut t = s.clone();
        t.instances[0].state_since = NOW - 10 * MIN;
        assert!(why(&t).is_empty(), "within the limit");
        let mut t = s.clone();
        t.instances[0].worker_address = None;
        assert!(why(&t).is_empty(), "never had a worker");
        // A live worker listed at its address (two of ours behind one IP, unmatched): not
        // lost (a re-test saw a proving one destroyed).
        let mut t = s.clone();
        t.demand.as_mut().unwrap().workers[0].host_and_port = "172.17.0.2:12300".into();
        t.instances[1].state = BOOTED;
        assert!(why(&t).is_empty(), "{:?}", why(&t));
        // Alone, its worker dead: flagged (a re-test saw one hold the only slot for ever).
        let mut t = s.clone();
        t.instances.pop();
        assert_eq!(why(&t), vec![lost.clone()]);
        // Five lost beside one live: the breaker's three at most, in one pass too.
        let mut t = s.clone();
        for i in 0..4 {
            let mut r = t.instances[0].clone();
            r.label = format!("fleetagent-l{i}");
            r.vast_id = Some(20 + i);
            r.worker_address = Some(format!("172.17.1.{i}:12300"));
            t.instances.push(r);
        }
        assert_eq!(why(&t).len(), SILENT_DESTROYS_MAX as usize);
        t.silent_destroys_recent = 2;
        assert_eq!(why(&t).len(), 1);
        // All of ours lost theirs at once (a shared fault?): one a pass (a re-test saw a
        // whole fleet destroyed in one pass).
        t.silent_destroys_recent = 0;
        t.instances.remove(1);
        assert_eq!(why(&t).len(), 1);
    }

    /// An instance of ours that bills with no price known counts at the worst case against
    /// the $/h cap, never $0 (one adopted without `dph_total` let launches past the cap).
    #[test]
    fn an_unpriced_instance_counts_at_the_worst_case() {
        let priced = row("fleetagent-a", Some(1), PROVING, 0.5);
        let mut unpriced = row("fleetagent-b", Some(2), PROVING, 0.5);
        unpriced.dph = None;
        let mut stopped = row("fleetagent-c", Some(3), STOPPED, 0.5);
        stopped.dph = None;
        stopped.storage_dph = None;
        let s = Snapshot {
            instances: vec![priced, unpriced, stopped],
            unpriced_dph: 2.0,
            ..Default::default()
        };
        assert!((s.fleet_dph() - 2.5).abs() < 1e-9, "{}", s.fleet_dph());
    }

    /// The headroom the observation states is the guardrail's: under the daily cap too (it
    /// said $10.00/h left of a day that left $0.67/h; the numbers walkthrough).
    #[test]
    fn the_headroom_counts_the_daily_cap() {
        let mut config = Config::default();
        config.policy.max_dph_total = Some(10.0);
        let s = Snapshot {
            instances: vec![row("fleetagent-a", Some(1), PROVING, 0.5)],
            spent_today: 5.38,
            ..Default::default()
        };
        assert!((s.headroom_dph(&config).unwrap() - 9.5).abs() < 1e-9);
        config.policy.daily_spend_max = Some(6.05);
        let room = s.headroom_dph(&config).unwrap();
        assert!((room - (6.05 - 5.38 - 0.5)).abs() < 1e-9, "{room}");
        config.policy.daily_spend_max = Some(5.0);
        assert_eq!(
            s.headroom_dph(&config),
            Some(0.0),
            "spent past the cap: none"
        );
    }

    #[test]
    fn work_waiting_starts_once_and_stops_when_none_waits() {
        let waiting = Demand {
            pending: 2,
            ..Default::default()
        };
        assert_eq!(work_waiting_since(None, Some(&waiting), 10), Some(10));
        assert_eq!(work_waiting_since(Some(5), Some(&waiting), 10), Some(5));
        // Curio's own backlog counts as work waiting too.
        let backlog = Demand {
            backlog: Some(3),
            ..Default::default()
        };
        assert_eq!(work_waiting_since(Some(5), Some(&backlog), 10), Some(5));
        assert_eq!(
            work_waiting_since(Some(5), Some(&Demand::default()), 10),
            None
        );
        // An unknown reading keeps what was known.
        assert_eq!(work_waiting_since(Some(5), None, 10), Some(5));
        // ProofShare disabled: nothing is work.
        let off = Demand {
            pending: 2,
            proofshare_enabled: Some(false),
            ..Default::default()
        };
        assert_eq!(work_waiting_since(Some(5), Some(&off), 10), None);
    }
}
