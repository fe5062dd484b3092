//! The simulated world: a vast.ai account ([`vast`]), a Curio cluster with its PSProve queue
//! ([`curio`]) and the ProofShare market ([`market`]), composed here. It advances in 10 s
//! steps (Curio's adder cadence), lazily, to whatever time it is asked about, so a caller
//! sleeping on the simulated clock sees it move. Each step moves the instances first (a
//! worker that starts joins Curio, one that dies leaves it), then the market, then Curio
//! (which pulls from the market).
//! Nothing here decides anything for the fleet.

pub mod curio;
pub mod market;
pub mod vast;

use crate::clock::Millis;
use crate::sim::measure;
use crate::sim::scenario::Scenario;
use crate::vast::VastError;
use curio::CurioCluster;
use market::ProofMarket;
use vast::VastAccount;
pub use vast::{Host, Inst, Phase};

pub const STEP_MS: Millis = 10_000;
pub const SAMPLE_MS: Millis = 300_000;
const MIN_MS: Millis = 60_000;
/// The market counts as dead from this long after it went quiet (time for a fleet to see the
/// work gone and shed what it holds, one stop a pass).
pub const DEAD_GRACE_MS: Millis = 90 * MIN_MS;
const HOUR_MS: Millis = 3_600_000;

/// One point of the time series (every 5 simulated minutes).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    pub t: Millis,
    pub pending: u32,
    pub running: u32,
    pub stale: u32,
    pub loading: u32,
    pub live: u32,
    /// Completions in the last 15 min, per hour.
    pub throughput: f64,
    pub market_rate: f64,
    pub spend: f64,
    /// Our $/h over the sample's interval, and the revenue $/h of the last hour's
    /// completions at the price of the moment and the revenue so far (None: no price
    /// modelled). Every Curio worker of the simulator is one of ours.
    pub spend_dph: f64,
    pub revenue_dph: Option<f64>,
    pub revenue: Option<f64>,
}

pub struct World {
    pub start: Millis,
    pub now: Millis,
    next_step: Millis,
    scenario: Scenario,
    pub vast: VastAccount,
    pub curio: CurioCluster,
    pub market: ProofMarket,
    pub samples: Vec<Sample>,
    /// Instances loading past this long count as stuck (policy.stuck_loading_mins).
    pub stuck_ms: Millis,
    /// The money caps (policy.max_instances, policy.max_dph_total), checked every minute.
    pub caps: (Option<u32>, Option<f64>),
    /// Minutes in which our billing instances were over a cap.
    pub over_cap_minutes: u64,
    /// The most of our instances billing at any minute the market was dead (offering
    /// nothing for 90 minutes or more).
    pub most_billing_dead: u32,
    /// Since when the market has offered nothing.
    quiet_since: Option<Millis>,
    /// policy.target_proofs_per_hour (0: none), for the outbid replacement times.
    pub target: f64,
    /// Outbids whose capacity is not yet replaced: when each happened.
    outbid_open: Vec<Millis>,
    /// From each outbid to the minute our fleet (live and booting, at true rates) again
    /// covered 90 % of min(target, the market's rate), or held what it held before.
    pub outbid_replace_ms: Vec<Millis>,
    /// Our fleet's capacity (live and booting, true rates) at the last minute.
    last_coming: f64,
    /// The capacity the fleet held before the open outbids.
    outbid_need: f64,
    /// The starting fleet's instances are bids at this x their offer's min_bid
    /// (vast.offers.bid_factor, with vast.offers.type = "interruptible").
    pub seed_bid_factor: Option<f64>,
    /// Outbid waves not yet fired: (time, count), in order.
    waves: Vec<(Millis, u32)>,
}

/// What the simulator seeds the database with, for instances that exist at the start.
#[derive(Debug, Clone)]
pub struct SeedInstance {
    pub id: u64,
    pub label: String,
    pub created_at: Millis,
    pub dph: f64,
    pub gpu_name: String,
    pub offer_id: u64,
    pub loading: bool,
    pub is_bid: bool,
}

#[derive(Debug, Clone)]
pub struct OursView {
    pub id: u64,
    pub phase: Phase,
    pub rate: f64,
    pub dph: f64,
    pub created_at: Millis,
    pub alive: bool,
    pub busy: bool,
}

impl World {
    pub fn new(scenario: &Scenario, seed: u64, start: Millis, prefix: &str) -> World {
        let mut waves: Vec<(Millis, u32)> = scenario
            .bids
            .waves
            .iter()
            .map(|w| (start + (w.at_hours * HOUR_MS as f64) as Millis, w.count))
            .collect();
        waves.sort();
        World {
            start,
            now: start,
            next_step: start,
            scenario: scenario.clone(),
            vast: VastAccount::new(scenario, seed, start, prefix),
            curio: CurioCluster::new(scenario, seed, start),
            market: ProofMarket::new(scenario, seed, start),
            samples: Vec::new(),
            stuck_ms: 30 * MIN_MS,
            caps: (None, None),
            over_cap_minutes: 0,
            most_billing_dead: 0,
            quiet_since: None,
            target: 0.0,
            outbid_open: Vec::new(),
            outbid_replace_ms: Vec::new(),
            last_coming: 0.0,
            outbid_need: 0.0,
            seed_bid_factor: None,
            waves,
        }
    }

    /// These world settings from the agent's config: the stuck limit, the caps, bids.
    pub fn configure(&mut self, config: &crate::config::Config) {
        self.stuck_ms = config.policy.stuck_loading_mins as Millis * 60_000;
        self.caps = (config.policy.max_instances, config.policy.max_dph_total);
        self.target = config.policy.target_proofs_per_hour;
        self.seed_bid_factor = (config.vast.offers.offer_type
            == crate::config::OfferType::Interruptible)
            .then_some(config.vast.offers.bid_factor);
    }

    /// USD one proof earns at `t` (None: no price modelled).
    pub fn revenue_per_proof(&self, t: Millis) -> Option<f64> {
        let h = (t - self.start) as f64 / HOUR_MS as f64;
        self.scenario.price.as_ref().map(|p| p.revenue_per_proof(h))
    }

    /// Hours from `start` (the run's start, or a bin's after it) to `end` that live
    /// capacity stayed below `target`, by [`measure::hours_below_target`] over Curio's
    /// capacity bins from `start` on and the market's rate.
    pub fn hours_below_target(&self, target: f64, start: Millis, end: Millis) -> f64 {
        let first = ((start - self.start).max(0) / measure::CAP_BIN_MS) as usize;
        let bins = self.curio.tally.cap_ms.get(first..).unwrap_or(&[]);
        measure::hours_below_target(bins, |t| self.market.rate_at(t), target, start, end)
    }

    /// FIL/USD at `t` (None: no price modelled).
    pub fn fil_usd(&self, t: Millis) -> Option<f64> {
        let h = (t - self.start) as f64 / HOUR_MS as f64;
        self.scenario
            .price
            .as_ref()
            .map(|p| crate::sim::scenario::path_at(&p.fil_usd, h))
    }

    /// The fleet at the start: the foreign instance, and ours per `[start]`. Pending proofs
    /// are put in Curio's queue. Returns ours for the database seed.
    pub fn set_up_start(&mut self) -> Vec<SeedInstance> {
        let start = self.start;
        let s = self.scenario.start.clone();
        self.curio
            .queue_pending(s.pending, start - 20 * MIN_MS, start - 15 * MIN_MS);
        let hosts = &self.vast.hosts;
        let mut order: Vec<usize> = (0..hosts.len()).collect();
        order.sort_by(|a, b| {
            let (x, y) = (&hosts[*a], &hosts[*b]);
            (x.dph / x.rate).total_cmp(&(y.dph / y.rate))
        });
        let mut picks = order.into_iter();
        // Someone's notebook on the same account: never ours to touch.
        if let Some(i) = picks.next_back() {
            let host = self.vast.hosts[i].id;
            let id = self
                .vast
                .place(host, Some("jupyter-notebook".into()), start - 30 * HOUR_MS);
            self.force_running(id, start - 30 * HOUR_MS, false);
        }
        let mut seeded = Vec::new();
        for k in 0..s.live {
            let Some(i) = picks.next() else { break };
            let label = format!("{}-r0-live{:02}", self.prefix(), k + 1);
            let created = start - 3 * HOUR_MS;
            let bid = self
                .seed_bid_factor
                .map(|f| (vast::min_bid(self.vast.hosts[i].dph) * f * 1e4).round() / 1e4);
            let id = self
                .vast
                .place_at(self.vast.hosts[i].id, Some(label), created, bid);
            self.force_running(id, created + 8 * MIN_MS, true);
            seeded.push(self.seed_of(id, false));
        }
        for k in 0..s.dead {
            let Some(i) = picks.next() else { break };
            let label = format!("{}-r0-old{:02}", self.prefix(), k + 1);
            let created = start - 5 * HOUR_MS;
            let id = self.vast.place(self.vast.hosts[i].id, Some(label), created);
            self.force_running(id, created + 8 * MIN_MS, false);
            let inst = self.vast.inst_mut(id).expect("just placed");
            inst.phase = Phase::Offline;
            inst.status_msg = Some("host disconnected".into());
            inst.dies_at = None;
            seeded.push(self.seed_of(id, false));
        }
        for k in 0..s.loading {
            let Some(i) = picks.next() else { break };
            let label = format!("{}-r0-boot{:02}", self.prefix(), k + 1);
            // Launched 12, 8 and 3 minutes ago: the launch window is spent.
            let created = start - (12 - 4 * k as i64).max(1) * MIN_MS;
            let id = self.vast.place(self.vast.hosts[i].id, Some(label), created);
            let stuck = k < s.loading_stuck;
            let inst = self.vast.inst_mut(id).expect("just placed");
            inst.boot_fails = false;
            if stuck {
                inst.running_at = None;
            } else if inst.running_at.is_none_or(|t| t <= start) {
                inst.running_at = Some(start + (4 + 5 * k as i64) * MIN_MS);
            }
            if let Some(r) = inst.running_at {
                inst.curio_at = r + 90_000;
            }
            seeded.push(self.seed_of(id, true));
        }
        seeded
    }

    /// The label prefix of our instances (the config's `vast.label_prefix`).
    fn prefix(&self) -> String {
        self.vast.prefix().to_string()
    }

    fn seed_of(&self, id: u64, loading: bool) -> SeedInstance {
        let i = self.vast.inst(id).expect("seeded instance");
        SeedInstance {
            id,
            label: i.label.clone().unwrap_or_default(),
            created_at: i.created_at,
            dph: i.dph,
            gpu_name: i.gpu_name.clone(),
            offer_id: i.host.unwrap_or(0),
            loading,
            is_bid: i.is_bid,
        }
    }

    fn force_running(&mut self, id: u64, at: Millis, with_worker: bool) {
        let start = self.start;
        let inst = self.vast.inst_mut(id).expect("placed");
        inst.phase = Phase::Running;
        inst.loading_at = at - 5 * MIN_MS;
        inst.running_at = Some(at);
        inst.boot_fails = false;
        inst.curio_at = if with_worker {
            at + 90_000
        } else {
            Millis::MAX
        };
        if let Some((t, _, _)) = inst.dies_at {
            if t < start {
                inst.dies_at = None;
            }
        }
        if with_worker {
            let idx = self.vast.inst_index(id).expect("placed");
            self.register(idx, at + 90_000);
        }
    }

    /// The worker of the instance at `idx` registers with Curio at `at`.
    fn register(&mut self, idx: usize, at: Millis) {
        let inst = &self.vast.insts[idx];
        let name = inst
            .label
            .clone()
            .unwrap_or_else(|| format!("C.{}", inst.id));
        let machine =
            self.curio
                .register(inst.id, name, format!("{}:12300", inst.ip), inst.rate, at);
        self.vast.insts[idx].worker = Some(machine);
    }

    // ---- time ----

    /// Advance to `now` (never backwards).
    pub fn advance(&mut self, now: Millis) {
        while self.next_step <= now {
            let t = self.next_step;
            self.step(t);
            self.next_step += STEP_MS;
        }
        self.now = self.now.max(now);
    }

    fn step(&mut self, t: Millis) {
        let outbids_before = self.vast.tally.outbid_times.len();
        let coming_before = self.last_coming;
        // Outbid waves: that many of our running bids stop at once.
        while self.waves.first().is_some_and(|(at, _)| *at <= t) {
            let (_, count) = self.waves.remove(0);
            let mut hit = 0;
            for idx in 0..self.vast.insts.len() {
                if hit >= count {
                    break;
                }
                let i = &self.vast.insts[idx];
                if !(i.ours && i.is_bid && i.phase == Phase::Running) {
                    continue;
                }
                if self.vast.outbid(idx, t) {
                    hit += 1;
                    if let Some(m) = self.vast.insts[idx].worker {
                        self.curio.kill(m, t);
                    }
                }
            }
        }
        // Instances, and their workers joining or leaving Curio.
        for idx in 0..self.vast.insts.len() {
            let change = self.vast.step_instance(idx, t);
            if let Some(at) = change.starts {
                self.register(idx, at);
            }
            if let Some(at) = change.dies {
                if let Some(m) = self.vast.insts[idx].worker {
                    self.curio.kill(m, at);
                }
            }
        }
        self.market.step(t);
        self.curio.step(t, &mut self.market);
        let new_outbids = self.vast.tally.outbid_times.len() - outbids_before;
        if new_outbids > 0 {
            // What the fleet held before: replaced once it holds that again (or enough).
            self.outbid_open.extend(std::iter::repeat_n(t, new_outbids));
            self.outbid_need = self.outbid_need.max(coming_before);
        }
        if (t - self.start) % MIN_MS == 0 {
            let coming = self.vast.capacity_coming();
            self.last_coming = coming;
            if !self.outbid_open.is_empty() {
                let enough = measure::enough(self.market.rate_at(t), self.target);
                if coming + 1e-9 >= enough.min(self.outbid_need) {
                    for at in self.outbid_open.drain(..) {
                        self.outbid_replace_ms.push(t - at);
                    }
                    self.outbid_need = 0.0;
                }
            }
            let (n, dph) = self.vast.billing_ours();
            let over_n = self.caps.0.is_some_and(|m| n > m);
            let over_dph = self.caps.1.is_some_and(|m| dph > m + 1e-9);
            if over_n || over_dph {
                self.over_cap_minutes += 1;
            }
            if self.market.rate_at(t) > 0.0 {
                self.quiet_since = None;
            } else if t - *self.quiet_since.get_or_insert(t) >= DEAD_GRACE_MS {
                self.most_billing_dead = self.most_billing_dead.max(n);
            }
        }
        if (t - self.start) % SAMPLE_MS == 0 {
            let s = self.sample(t);
            self.samples.push(s);
        }
    }

    fn sample(&self, t: Millis) -> Sample {
        let d = self.curio.demand(t, 150_000);
        let ours = self.vast.insts.iter().filter(|i| i.ours && !i.destroyed);
        let (mut loading, mut live) = (0, 0);
        for i in ours {
            match i.phase {
                Phase::Provisioning | Phase::Loading => loading += 1,
                Phase::Running if i.worker.is_some_and(|m| self.curio.alive(m)) => live += 1,
                _ => {}
            }
        }
        Sample {
            t,
            pending: d.pending,
            running: d.running,
            stale: d.running_stale,
            loading,
            live,
            throughput: d.completed_15m as f64 * 4.0,
            market_rate: self.market.rate_at(t),
            spend: self.vast.spend_ours(t),
            spend_dph: self.vast.spend_between((t - SAMPLE_MS).max(self.start), t)
                / (SAMPLE_MS as f64 / HOUR_MS as f64),
            revenue_dph: self
                .revenue_per_proof(t)
                .map(|r| r * f64::from(d.completed_1h)),
            revenue: self.revenue_per_proof(t).map(|_| self.curio.tally.revenue),
        }
    }

    // ---- vast.ai calls that reach Curio: the instance's worker dies with it ----

    pub fn destroy(&mut self, id: u64, now: Millis) -> Result<(), VastError> {
        if let Some(m) = self.vast.destroy(id, now)? {
            self.curio.kill(m, now);
        }
        Ok(())
    }

    pub fn stop(&mut self, id: u64, now: Millis) -> Result<(), VastError> {
        if let Some(m) = self.vast.stop(id, now)? {
            self.curio.kill(m, now);
        }
        Ok(())
    }

    // ---- bookkeeping ----

    /// Outbids still not replaced at `end`, with how long they have waited.
    pub fn outbids_open(&self, end: Millis) -> Vec<Millis> {
        self.outbid_open.iter().map(|t| end - t).collect()
    }

    /// Our instances that are up but loading past the stuck limit right now.
    pub fn stuck_now(&self, now: Millis) -> Vec<u64> {
        self.vast.stuck_now(now, self.stuck_ms)
    }

    /// Our instances that ever stayed loading past the stuck limit (destroyed or not).
    pub fn stuck_ever(&self, now: Millis) -> u64 {
        self.vast.stuck_ever(now, self.stuck_ms)
    }

    /// Instance ids and their live/idle state, for the oracle.
    pub fn ours_view(&self) -> Vec<OursView> {
        self.vast
            .insts
            .iter()
            .filter(|i| i.ours && !i.destroyed)
            .map(|i| OursView {
                id: i.id,
                phase: i.phase,
                rate: self.vast.host_rate(i),
                dph: i.dph,
                created_at: i.created_at,
                alive: i.worker.is_some_and(|m| self.curio.alive(m)),
                busy: i.worker.is_some_and(|m| self.curio.busy(m)),
            })
            .collect()
    }

    pub fn scenario(&self) -> &Scenario {
        &self.scenario
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::scenario;
    use crate::vast::OfferQuery;

    const T0: Millis = 1_772_409_600_000;

    fn world(text: &str) -> World {
        let s = scenario::parse(text).unwrap();
        World::new(&s, 3, T0, "fleetagent")
    }

    const BASE: &str = "name = \"t\"\ndescription = \"t\"\nhours = 24\n[market]\nrate = [[0, 120]]\n[hosts]\nboot_fail = 0\nstuck = 0\noffline_per_day = 0\ncrash_per_day = 0\n";

    #[test]
    fn an_instance_boots_registers_and_proves() {
        let mut w = world(BASE);
        let offers = w.vast.search(&OfferQuery {
            limit: 5,
            ..Default::default()
        });
        assert_eq!(offers.len(), 5);
        assert!(offers.windows(2).all(|p| p[0].dph_total <= p[1].dph_total));
        let id = w.vast.create(offers[0].id, "fleetagent-r1-aa", T0).unwrap();
        assert!(matches!(
            w.vast.create(offers[0].id, "x", T0),
            Err(VastError::NoSuchAsk(_))
        ));
        assert_eq!(w.vast.show(id).unwrap().actual_status, None);
        w.advance(T0 + 2 * HOUR_MS);
        assert_eq!(
            w.vast.show(id).unwrap().actual_status.as_deref(),
            Some("running")
        );
        let d = w.curio.demand(w.now, 150_000);
        assert_eq!(d.workers.len(), 1);
        assert_eq!(d.workers[0].machine_name, "fleetagent-r1-aa");
        assert!(d.completed_1h > 10, "{d:?}");
        // Curio buffers at most 8 while a worker lives.
        assert!(d.pending <= 8, "{d:?}");
        let spent = w.vast.spend_ours(w.now);
        assert!((spent - offers[0].dph_total * 2.0).abs() < 1e-6, "{spent}");
    }

    #[test]
    fn hours_below_target_are_counted_in_five_minute_bins() {
        let end = T0 + 2 * HOUR_MS;
        // No worker at all: every bin of the two hours is below.
        let mut empty = world(BASE);
        empty.advance(end);
        let all = empty.hours_below_target(300.0, T0, end);
        assert!((all - 2.0).abs() < 1e-9, "{all}");
        // One instance from the start, and a target it covers once it proves: below only
        // while it boots, a whole number of 5-minute bins, not a whole hour.
        let mut w = world(BASE);
        let offer = w.vast.search(&OfferQuery::default())[0].id;
        w.vast.create(offer, "fleetagent-r1-aa", T0).unwrap();
        w.advance(end);
        let below = w.hours_below_target(1.0, T0, end);
        assert!(below > 0.0 && below < 1.0, "{below}");
        assert!(
            (below * 12.0 - (below * 12.0).round()).abs() < 1e-9,
            "{below}"
        );
    }

    #[test]
    fn a_dead_worker_keeps_a_stale_owner_until_cleanup_by_a_live_node() {
        let mut w = world(BASE);
        let offers = w.vast.search(&OfferQuery::default());
        let a = w.vast.create(offers[0].id, "fleetagent-r1-a", T0).unwrap();
        let b = w.vast.create(offers[1].id, "fleetagent-r1-b", T0).unwrap();
        w.advance(T0 + HOUR_MS);
        // Kill a's worker (the container exits) while it proves.
        let ia = w.vast.inst_index(a).unwrap();
        w.vast.insts[ia].dies_at = Some((w.now + 1, Phase::Exited, "container exited"));
        w.advance(w.now + STEP_MS);
        let died = w.now;
        let d = w.curio.demand(died + 30_000, 150_000);
        assert_eq!(d.workers.len(), 2, "a dead worker looks live for a while");
        let later = w.curio.demand(died + 200_000, 150_000);
        assert_eq!(later.workers.len(), 1);
        // After >10 min silent plus a cleanup round, its task is pending again.
        w.advance(died + 16 * MIN_MS);
        assert_eq!(w.curio.demand(w.now, 150_000).running_stale, 0);
        let _ = b;
    }

    #[test]
    fn a_destroyed_or_stopped_instance_takes_its_worker_with_it() {
        let mut w = world(BASE);
        let offers = w.vast.search(&OfferQuery::default());
        let a = w.vast.create(offers[0].id, "fleetagent-r1-a", T0).unwrap();
        let b = w.vast.create(offers[1].id, "fleetagent-r1-b", T0).unwrap();
        w.advance(T0 + HOUR_MS);
        assert!(w.ours_view().iter().all(|v| v.alive), "{:?}", w.ours_view());
        let both = w.curio.live_capacity();
        w.destroy(a, w.now).unwrap();
        assert!(w.curio.live_capacity() < both);
        w.stop(b, w.now).unwrap();
        assert_eq!(w.curio.live_capacity(), 0.0);
        let view = w.ours_view();
        assert_eq!(view.len(), 1, "the destroyed one is gone");
        assert!(view[0].phase == Phase::Stopped && !view[0].alive);
        assert!(matches!(
            w.stop(a, w.now),
            Err(VastError::NoSuchInstance(_))
        ));
        assert!(w.destroy(a, w.now).is_ok());
    }

    #[test]
    fn no_live_node_means_no_pulls_and_no_cleanup() {
        let text = format!("{BASE}[start]\npending = 59\n");
        let mut w = world(&text);
        w.set_up_start();
        w.advance(T0 + HOUR_MS);
        let d = w.curio.demand(w.now, 150_000);
        assert_eq!(d.pending, 59);
        assert!(d.workers_dead());
        assert!(
            w.market.tally.expired > 0,
            "the market gave the work to others"
        );
    }

    const BIDS: &str = "name = \"t\"\ndescription = \"t\"\nhours = 24\n[market]\nrate = [[0, 120]]\n[hosts]\nboot_fail = 0\nstuck = 0\noffline_per_day = 0\ncrash_per_day = 0\n[bids]\nresume_share = 1\nresume_mins = [30, 30]\n[[bids.wave]]\nat_hours = 1\ncount = 1\n";

    #[test]
    fn an_outbid_bid_stops_unasked_pauses_its_bill_and_resumes() {
        let mut w = world(BIDS);
        let offer = w.vast.search(&OfferQuery::default())[0].clone();
        let low = offer.min_bid.unwrap() - 0.01;
        assert!(matches!(
            w.vast
                .create_bid(offer.id, "fleetagent-r1-a", T0, Some(low)),
            Err(VastError::Api { .. })
        ));
        let bid = offer.min_bid.unwrap();
        let id = w
            .vast
            .create_bid(offer.id, "fleetagent-r1-a", T0, Some(bid))
            .unwrap();
        w.advance(T0 + HOUR_MS - STEP_MS);
        assert!(w.ours_view()[0].alive);
        w.advance(T0 + HOUR_MS + STEP_MS);
        // Outbid by the wave: stopped without our asking, its worker gone, no bill.
        let listed = w.vast.show(id).unwrap();
        assert_eq!(listed.is_bid, Some(true));
        assert_eq!(listed.actual_status.as_deref(), Some("stopped"));
        assert_eq!(listed.cur_state.as_deref(), Some("stopped"));
        assert!(listed.next_state.is_some());
        assert!(!w.ours_view()[0].alive);
        assert_eq!(w.vast.tally.outbid_times, vec![T0 + HOUR_MS]);
        let at_outbid = w.vast.spend_ours(T0 + HOUR_MS);
        assert!((at_outbid - bid).abs() < 1e-6, "{at_outbid}");
        w.advance(T0 + HOUR_MS + 20 * MIN_MS);
        assert!((w.vast.spend_ours(w.now) - at_outbid).abs() < 1e-9);
        // It resumes by itself 30 minutes later, boots and registers again.
        w.advance(T0 + 2 * HOUR_MS);
        assert_eq!(w.vast.tally.resumes, 1);
        assert_eq!(
            w.vast.show(id).unwrap().actual_status.as_deref(),
            Some("running")
        );
        assert!(w.ours_view()[0].alive);
        let billed = w.vast.spend_ours(w.now);
        assert!((billed - bid * 1.5).abs() < 1e-6, "{billed}");
    }

    #[test]
    fn a_start_or_a_raised_bid_resumes_a_stopped_instance() {
        let mut w = world(&BIDS.replace("resume_share = 1", "resume_share = 0"));
        let offer = w.vast.search(&OfferQuery::default())[0].clone();
        let bid = offer.min_bid.unwrap();
        let id = w
            .vast
            .create_bid(offer.id, "fleetagent-r1-a", T0, Some(bid))
            .unwrap();
        w.advance(T0 + HOUR_MS + STEP_MS);
        assert_eq!(
            w.vast.show(id).unwrap().actual_status.as_deref(),
            Some("stopped")
        );
        w.vast.change_bid(id, bid * 2.0, w.now).unwrap();
        w.advance(w.now + 10 * MIN_MS);
        assert_eq!(
            w.vast.show(id).unwrap().actual_status.as_deref(),
            Some("running")
        );
        assert_eq!(w.vast.show(id).unwrap().dph_total, Some(bid * 2.0));
        w.stop(id, w.now).unwrap();
        w.vast.start(id, w.now).unwrap();
        w.advance(w.now + 10 * MIN_MS);
        assert!(w.ours_view()[0].alive);
        // An on-demand instance has no bid to change.
        let other = w.vast.search(&OfferQuery::default())[0].id;
        let od = w.vast.create(other, "fleetagent-r1-b", w.now).unwrap();
        assert!(w.vast.change_bid(od, 1.0, w.now).is_err());
    }

    #[test]
    fn the_price_path_sets_the_ask_price_and_each_proof_earns_its_time_price() {
        let text =
            format!("{BASE}[price]\nfil_usd = [[0, 4.0], [1, 2.0]]\nask_fil = [[0, 0.005]]\n");
        let mut w = world(&text);
        let offer = w.vast.search(&OfferQuery::default())[0].id;
        w.vast.create(offer, "fleetagent-r1-a", T0).unwrap();
        w.advance(T0 + 2 * HOUR_MS);
        let d = w.curio.demand(w.now, 150_000);
        assert_eq!(d.ask_price_attofil.as_deref(), Some("5000000000000000"));
        assert_eq!(w.fil_usd(T0), Some(4.0));
        assert_eq!(w.fil_usd(T0 + HOUR_MS), Some(2.0));
        let t = &w.curio.tally;
        // Between 0.01 (all at the late price) and 0.02 (all at the early one) per proof.
        assert!(t.completed > 20);
        let per = t.revenue / t.completed as f64;
        assert!(per > 0.0105 && per < 0.0195, "{per}");
        // Without [price]: no ask price read, nothing earned, no FIL/USD.
        let mut plain = world(BASE);
        plain.advance(T0 + HOUR_MS);
        assert_eq!(
            plain.curio.demand(plain.now, 150_000).ask_price_attofil,
            None
        );
        assert_eq!(plain.fil_usd(T0), None);
    }

    #[test]
    fn the_starting_fleet_is_billed_from_the_start_only() {
        let text = format!("{BASE}[start]\nlive = 2\npending = 10\n");
        let mut w = world(&text);
        w.set_up_start();
        w.advance(T0 + HOUR_MS);
        let dph: f64 = w.ours_view().iter().map(|v| v.dph).sum();
        assert!((w.vast.spend_ours(w.now) - dph).abs() < 1e-6);
        // The proofs queued before the start are work done, not demand offered in the run.
        let t = &w.curio.tally;
        assert!(
            t.completed >= 10 && t.completed_offered + 10 <= t.completed,
            "{t:?}"
        );
    }
}
