//! The simulated vast.ai account: the hosts on offer, the instances rented on them (each
//! one's boot, failure and death drawn from its host's stream when it is placed), the API as
//! it answers (search, create, list, show, stop, destroy, label, logs) and its rate limiter.
//! An instance's worker lives in Curio; the account only knows which machine it became.

use super::{HOUR_MS, MIN_MS};
use crate::clock::Millis;
use crate::sim::rng::{Purpose, Rng};
use crate::sim::scenario::{Bids, Hosts, Scenario, Window};
use crate::vast::{Instance, Offer, OfferQuery, VastError};

/// vast.ai's create interval and its penalty for breaking it (reference/vastai-api.md).
const CREATE_INTERVAL_MS: Millis = 4_500;
const CREATE_PENALTY_MS: Millis = 12_000;

#[derive(Debug, Clone)]
pub struct Host {
    pub id: u64,
    pub gpu_name: String,
    pub dph: f64,
    pub reliability: f64,
    pub verified: bool,
    pub ip: String,
    /// True proofs/h of an instance on this host.
    pub rate: f64,
    pub rented_by: Option<u64>,
    rng: Rng,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Provisioning,
    Loading,
    Running,
    Exited,
    Offline,
    Stopped,
}

#[derive(Debug)]
pub struct Inst {
    pub id: u64,
    pub label: Option<String>,
    pub ours: bool,
    pub host: Option<u64>,
    pub gpu_name: String,
    pub dph: f64,
    pub ip: String,
    pub rate: f64,
    pub created_at: Millis,
    pub phase: Phase,
    pub status_msg: Option<String>,
    pub(super) loading_at: Millis,
    /// None: stuck in loading for ever.
    pub(super) running_at: Option<Millis>,
    pub(super) boot_fails: bool,
    /// When its worker registers with Curio once it runs.
    pub(super) curio_at: Millis,
    /// When the host disconnects or the worker crashes, and into which phase.
    pub(super) dies_at: Option<(Millis, Phase, &'static str)>,
    pub ended_at: Option<Millis>,
    /// Its phase when we stopped or destroyed it (for the flagged short rentals).
    pub ended_phase: Option<Phase>,
    pub destroyed: bool,
    /// The Curio machine its worker registered as.
    pub(super) worker: Option<usize>,
    /// An interruptible instance (a bid at `dph`).
    pub is_bid: bool,
    /// Stopped by vast.ai for a higher bid (not by us); may resume at `resume_at`.
    pub outbid: bool,
    pub(super) resume_at: Option<Millis>,
    /// The next outbid drawn for it (bids only).
    pub(super) outbid_at: Option<Millis>,
    /// Outbids and resumes of this instance: its own stream.
    pub(super) bid_rng: Option<Rng>,
    /// Billing: (from, until, $/h) segments (until None: still billing).
    pub bill: Vec<(Millis, Option<Millis>, f64)>,
}

/// What one step did to an instance's worker, for Curio to follow.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct WorkerChange {
    /// Its worker starts (and registers) at this time.
    pub starts: Option<Millis>,
    /// The instance died at this time: its worker with it.
    pub dies: Option<Millis>,
}

/// The account's counts over the whole run.
#[derive(Debug, Clone, Default)]
pub struct VastTally {
    pub create_calls: u64,
    pub calls_429: u64,
    /// Stops or destroys of instances that are not ours.
    pub foreign_touched: u64,
    /// When each of our bids was outbid.
    pub outbid_times: Vec<Millis>,
    /// Resumes of outbid instances (by themselves, a start or a raised bid).
    pub resumes: u64,
}

pub struct VastAccount {
    spec: Hosts,
    bids: Bids,
    seed: u64,
    /// The scenario's 429 bursts.
    bursts: Vec<Window>,
    start: Millis,
    prefix: String,
    pub hosts: Vec<Host>,
    pub insts: Vec<Inst>,
    next_inst_id: u64,
    last_create: Option<Millis>,
    penalty_until: Millis,
    rl_rng: Rng,
    pub tally: VastTally,
}

impl VastAccount {
    /// The scenario's hosts on offer, drawn from the offers stream.
    pub fn new(scenario: &Scenario, seed: u64, start: Millis, prefix: &str) -> VastAccount {
        let mut offers_rng = Rng::stream(seed, Purpose::Offers, 0);
        let h = &scenario.hosts;
        let total_share: f64 = h.gpus.iter().map(|g| g.share).sum();
        let hosts = (0..h.offers as u64)
            .map(|i| {
                let mut pick = offers_rng.unit() * total_share;
                let gpu = h
                    .gpus
                    .iter()
                    .find(|g| {
                        pick -= g.share;
                        pick < 0.0
                    })
                    .unwrap_or(&h.gpus[0]);
                let id = 20_000 + i * 37;
                Host {
                    id,
                    gpu_name: gpu.name.clone(),
                    dph: round3(offers_rng.range(gpu.dph.0, gpu.dph.1)),
                    reliability: round3(offers_rng.range(h.reliability.0, h.reliability.1)),
                    verified: offers_rng.chance(0.85),
                    ip: format!("198.51.{}.{}", 100 + i / 200, 10 + i % 200),
                    rate: gpu.rate * offers_rng.range(0.93, 1.05),
                    rented_by: None,
                    rng: Rng::stream(seed, Purpose::Host, id),
                }
            })
            .collect();
        VastAccount {
            spec: scenario.hosts.clone(),
            bids: scenario.bids.clone(),
            seed,
            bursts: scenario.vast_429.clone(),
            start,
            prefix: prefix.to_string(),
            hosts,
            insts: Vec::new(),
            next_inst_id: 7_100_001,
            last_create: None,
            penalty_until: 0,
            rl_rng: Rng::stream(seed, Purpose::RateLimit, 0),
            tally: VastTally::default(),
        }
    }

    pub(super) fn inst_index(&self, id: u64) -> Option<usize> {
        self.insts.iter().position(|i| i.id == id)
    }

    pub fn inst(&self, id: u64) -> Option<&Inst> {
        self.insts.iter().find(|i| i.id == id)
    }

    pub(super) fn inst_mut(&mut self, id: u64) -> Option<&mut Inst> {
        self.insts.iter_mut().find(|i| i.id == id)
    }

    pub fn is_ours(&self, label: Option<&str>) -> bool {
        label
            .and_then(|l| l.strip_prefix(&self.prefix))
            .is_some_and(|r| r.starts_with('-') && r.len() > 1)
    }

    /// Rent `host` now: draw the instance's fate from the host's stream.
    pub(super) fn place(&mut self, host_id: u64, label: Option<String>, at: Millis) -> u64 {
        self.place_at(host_id, label, at, None)
    }

    /// Rent `host` now, on demand or as a bid at `bid` $/h.
    pub(super) fn place_at(
        &mut self,
        host_id: u64,
        label: Option<String>,
        at: Millis,
        bid: Option<f64>,
    ) -> u64 {
        let id = self.next_inst_id;
        self.next_inst_id += 1;
        let h = &self.spec;
        let hi = self
            .hosts
            .iter()
            .position(|x| x.id == host_id)
            .expect("known host");
        let host = &mut self.hosts[hi];
        host.rented_by = Some(id);
        let r = &mut host.rng;
        let loading_at = at + r.range(10_000.0, 40_000.0) as Millis;
        let boot = (r.lognormal(h.boot_mins.0, h.boot_mins.1) * MIN_MS as f64) as Millis;
        let fate = r.unit();
        let stuck = fate < h.stuck;
        let boot_fails = !stuck && fate < h.stuck + h.boot_fail;
        let running_at = (!stuck).then_some(loading_at + boot);
        let curio_at = running_at.unwrap_or(Millis::MAX / 2)
            + (r.range(h.curio_start_secs.0, h.curio_start_secs.1) * 1000.0) as Millis;
        let offline_rate = h.offline_per_day * (1.0 - host.reliability).max(0.0) / 0.05;
        let t_off = if offline_rate > 0.0 {
            r.exp(1.0 / offline_rate)
        } else {
            f64::INFINITY
        };
        let t_crash = if h.crash_per_day > 0.0 {
            r.exp(1.0 / h.crash_per_day)
        } else {
            f64::INFINITY
        };
        let base = running_at.unwrap_or(Millis::MAX / 2);
        let day = 24.0 * HOUR_MS as f64;
        let dies_at = if t_off.min(t_crash) * day < 400.0 * day {
            Some(if t_off <= t_crash {
                (
                    base + (t_off * day) as Millis,
                    Phase::Offline,
                    "host disconnected",
                )
            } else {
                (
                    base + (t_crash * day) as Millis,
                    Phase::Exited,
                    "container exited with code 1",
                )
            })
        } else {
            None
        };
        let ours = self.is_ours(label.as_deref());
        let host = &self.hosts[hi];
        let dph = bid.unwrap_or(host.dph);
        let mut bid_rng = bid.map(|_| Rng::stream(self.seed, Purpose::Bids, id));
        let outbid_at = match bid_rng.as_mut() {
            Some(r) if self.bids.outbid_per_day > 0.0 => Some(
                at.max(self.start)
                    + (r.exp(1.0 / self.bids.outbid_per_day) * 24.0 * HOUR_MS as f64) as Millis,
            ),
            _ => None,
        };
        let inst = Inst {
            id,
            label,
            ours,
            host: Some(host_id),
            gpu_name: host.gpu_name.clone(),
            dph,
            ip: host.ip.clone(),
            rate: host.rate,
            created_at: at,
            phase: Phase::Provisioning,
            status_msg: None,
            loading_at,
            running_at,
            boot_fails,
            curio_at,
            dies_at,
            ended_at: None,
            ended_phase: None,
            destroyed: false,
            worker: None,
            is_bid: bid.is_some(),
            outbid: false,
            resume_at: None,
            outbid_at,
            bid_rng,
            bill: vec![(at, None, dph)],
        };
        self.insts.push(inst);
        id
    }

    /// vast.ai stops the bid at `idx` for a higher one at `t` (a wave's or its own draw):
    /// its worker dies, its billing pauses, it may resume later. Returns whether it was outbid.
    pub(super) fn outbid(&mut self, idx: usize, t: Millis) -> bool {
        let share = self.bids.resume_share;
        let (lo, hi) = self.bids.resume_mins;
        let per_day = self.bids.outbid_per_day;
        let inst = &mut self.insts[idx];
        if inst.destroyed
            || !inst.is_bid
            || inst.outbid
            || !matches!(
                inst.phase,
                Phase::Provisioning | Phase::Loading | Phase::Running
            )
        {
            return false;
        }
        inst.phase = Phase::Stopped;
        inst.outbid = true;
        inst.status_msg = Some("stopped: outbid by a higher bid".into());
        inst.dies_at = None;
        close_bill(inst, t);
        let r = inst.bid_rng.as_mut().expect("a bid has its stream");
        inst.resume_at = r
            .chance(share)
            .then(|| t + (r.range(lo, hi) * MIN_MS as f64) as Millis);
        inst.outbid_at =
            (per_day > 0.0).then(|| t + (r.exp(1.0 / per_day) * 24.0 * HOUR_MS as f64) as Millis);
        if inst.ours {
            self.tally.outbid_times.push(t);
        }
        true
    }

    /// A stopped or outbid instance boots again at `t` (its own resume, a start, a raised bid).
    pub(super) fn resume(&mut self, idx: usize, t: Millis) {
        let inst = &mut self.insts[idx];
        if inst.destroyed || inst.phase != Phase::Stopped {
            return;
        }
        if inst.outbid {
            self.tally.resumes += 1;
        }
        inst.outbid = false;
        inst.resume_at = None;
        inst.phase = Phase::Loading;
        inst.status_msg = Some("resuming".into());
        inst.loading_at = t;
        let boot = 60_000 + (inst.id % 3) as Millis * 30_000;
        inst.running_at = Some(t + boot);
        inst.boot_fails = false;
        inst.curio_at = t + boot + 90_000;
        inst.worker = None;
        inst.ended_at = None;
        inst.ended_phase = None;
        inst.bill.push((t, None, inst.dph));
    }

    /// The instance at `idx` at step time `t`: it loads, boots (or fails to), its worker
    /// starts, its host or worker dies.
    pub(super) fn step_instance(&mut self, idx: usize, t: Millis) -> WorkerChange {
        let mut change = WorkerChange::default();
        if self.insts[idx].destroyed {
            return change;
        }
        if self.insts[idx].resume_at.is_some_and(|r| r <= t) {
            self.resume(idx, t);
        }
        if self.insts[idx].outbid_at.is_some_and(|o| o <= t) {
            let had_worker = self.insts[idx].phase == Phase::Running;
            if !self.outbid(idx, t) {
                // Not running now (stopped by us, dead): the next draw is for later.
                self.insts[idx].outbid_at = None;
            } else if had_worker {
                change.dies = Some(t);
                return change;
            }
        }
        let inst = &mut self.insts[idx];
        if inst.phase == Phase::Provisioning && inst.loading_at <= t {
            inst.phase = Phase::Loading;
            inst.status_msg = Some("pulling image".into());
        }
        if inst.phase == Phase::Loading && inst.running_at.is_some_and(|r| r <= t) {
            if inst.boot_fails {
                inst.phase = Phase::Exited;
                inst.status_msg =
                    Some("Error response from daemon: OCI runtime create failed".into());
            } else {
                inst.phase = Phase::Running;
                inst.status_msg = Some("success, running".into());
            }
        }
        if inst.phase == Phase::Running && inst.worker.is_none() && inst.curio_at <= t {
            change.starts = Some(inst.curio_at);
        }
        if let Some((at, phase, msg)) = inst.dies_at {
            if at <= t && inst.phase == Phase::Running {
                inst.phase = phase;
                inst.status_msg = Some(msg.into());
                inst.dies_at = None;
                change.dies = Some(at);
            }
        }
        change
    }

    // ---- the API, as it answers ----

    /// vast.ai's limiter: the create interval (with its penalty) and the scenario's bursts.
    /// `Some(text)` is a 429 body.
    pub fn rate_limited(&mut self, create: bool, now: Millis) -> Option<String> {
        let h = (now - self.start) as f64 / HOUR_MS as f64;
        let share = self
            .bursts
            .iter()
            .filter(|w| w.contains(h))
            .map(|w| w.share)
            .fold(0.0, f64::max);
        let burst = share > 0.0 && self.rl_rng.chance(share);
        let mut limited = burst;
        if create {
            self.tally.create_calls += 1;
            let too_soon = now < self.penalty_until
                || self
                    .last_create
                    .is_some_and(|l| now - l < CREATE_INTERVAL_MS);
            if too_soon {
                self.penalty_until = now + CREATE_PENALTY_MS;
                limited = true;
            } else if !burst {
                self.last_create = Some(now);
            }
        }
        if limited {
            self.tally.calls_429 += 1;
            Some(if create {
                "API requests too frequent endpoint threshold=4.5".into()
            } else {
                "API requests too frequent".into()
            })
        } else {
            None
        }
    }

    pub fn search(&self, q: &OfferQuery) -> Vec<Offer> {
        let mut v: Vec<Offer> = self
            .hosts
            .iter()
            .filter(|h| h.rented_by.is_none())
            .filter(|h| {
                q.gpu_names.is_empty()
                    || q.gpu_names
                        .iter()
                        .any(|g| g.replace('_', " ").eq_ignore_ascii_case(&h.gpu_name))
            })
            .filter(|h| q.max_dph.is_none_or(|m| h.dph <= m))
            .filter(|h| q.min_reliability.is_none_or(|m| h.reliability >= m))
            .filter(|h| !q.verified_only || h.verified)
            .map(|h| Offer {
                id: h.id,
                gpu_name: h.gpu_name.clone(),
                num_gpus: 1,
                gpu_ram_mb: 24_576.0,
                dph_total: h.dph,
                reliability: h.reliability,
                verified: h.verified,
                geolocation: Some("Simland".into()),
                public_ip: Some(h.ip.clone()),
                min_bid: Some(min_bid(h.dph)),
                // Hosts are not told apart in the sim: no bad-host exclusion there.
                machine_id: None,
                storage_dph: None,
            })
            .collect();
        v.sort_by(|a, b| a.dph_total.total_cmp(&b.dph_total).then(a.id.cmp(&b.id)));
        if q.limit > 0 {
            v.truncate(q.limit as usize);
        }
        v
    }

    pub fn create(&mut self, offer_id: u64, label: &str, now: Millis) -> Result<u64, VastError> {
        self.create_bid(offer_id, label, now, None)
    }

    /// A create, as a bid at `bid` $/h when given (refused under the offer's `min_bid`).
    pub fn create_bid(
        &mut self,
        offer_id: u64,
        label: &str,
        now: Millis,
        bid: Option<f64>,
    ) -> Result<u64, VastError> {
        let Some(host) = self
            .hosts
            .iter()
            .find(|h| h.id == offer_id && h.rented_by.is_none())
        else {
            return Err(VastError::NoSuchAsk(offer_id));
        };
        if let Some(b) = bid {
            let min = min_bid(host.dph);
            if !(b.is_finite() && b + 1e-9 >= min) {
                return Err(VastError::Api {
                    status: 400,
                    code: "bid_too_low".into(),
                    msg: format!("bid {b} is below the offer's min_bid {min}"),
                });
            }
        }
        Ok(self.place_at(offer_id, Some(label.to_string()), now, bid))
    }

    pub fn list(&self) -> Vec<Instance> {
        self.insts
            .iter()
            .filter(|i| !i.destroyed)
            .map(listed)
            .collect()
    }

    pub fn show(&self, id: u64) -> Option<Instance> {
        self.insts
            .iter()
            .find(|i| i.id == id && !i.destroyed)
            .map(listed)
    }

    /// Destroy `id` (a destroyed or unknown id is no error). Returns the Curio machine of
    /// its worker, which dies with it.
    pub(super) fn destroy(&mut self, id: u64, now: Millis) -> Result<Option<usize>, VastError> {
        let Some(idx) = self.insts.iter().position(|i| i.id == id && !i.destroyed) else {
            return Ok(None);
        };
        if !self.insts[idx].ours {
            self.tally.foreign_touched += 1;
        }
        let inst = &mut self.insts[idx];
        inst.destroyed = true;
        if inst.ended_at.is_none() {
            inst.ended_at = Some(now);
            inst.ended_phase = Some(inst.phase);
        }
        close_bill(inst, now);
        let (host, worker) = (inst.host, inst.worker);
        if let Some(h) = self.hosts.iter_mut().find(|h| Some(h.id) == host) {
            h.rented_by = None;
        }
        Ok(worker)
    }

    /// Stop `id`. Returns the Curio machine of its worker, which dies with it.
    pub(super) fn stop(&mut self, id: u64, now: Millis) -> Result<Option<usize>, VastError> {
        let Some(idx) = self.insts.iter().position(|i| i.id == id && !i.destroyed) else {
            return Err(VastError::NoSuchInstance(id));
        };
        if !self.insts[idx].ours {
            self.tally.foreign_touched += 1;
        }
        let inst = &mut self.insts[idx];
        if inst.ended_at.is_none() {
            inst.ended_at = Some(now);
            inst.ended_phase = Some(inst.phase);
        }
        inst.phase = Phase::Stopped;
        inst.outbid = false;
        inst.resume_at = None;
        inst.dies_at = None;
        close_bill(inst, now);
        Ok(inst.worker)
    }

    /// Start a stopped (or outbid) instance of ours.
    pub fn start(&mut self, id: u64, now: Millis) -> Result<(), VastError> {
        let Some(idx) = self.insts.iter().position(|i| i.id == id && !i.destroyed) else {
            return Err(VastError::NoSuchInstance(id));
        };
        if !self.insts[idx].ours {
            self.tally.foreign_touched += 1;
        }
        self.resume(idx, now);
        Ok(())
    }

    /// Change the bid of an interruptible instance: an outbid one resumes at the new price.
    pub fn change_bid(&mut self, id: u64, price: f64, now: Millis) -> Result<(), VastError> {
        let Some(idx) = self.insts.iter().position(|i| i.id == id && !i.destroyed) else {
            return Err(VastError::NoSuchInstance(id));
        };
        let inst = &mut self.insts[idx];
        if !inst.ours {
            self.tally.foreign_touched += 1;
        }
        if !inst.is_bid {
            return Err(VastError::Api {
                status: 400,
                code: "not_a_bid".into(),
                msg: format!("instance {id} is not interruptible"),
            });
        }
        if !(price.is_finite() && price > 0.0) {
            return Err(VastError::Api {
                status: 400,
                code: "invalid_args".into(),
                msg: format!("bad bid price {price}"),
            });
        }
        inst.dph = price;
        if let Some(last) = inst.bill.last_mut().filter(|b| b.1.is_none()) {
            // A raised bid bills from now at the new price.
            last.1 = Some(now);
            inst.bill.push((now, None, price));
        }
        if inst.outbid {
            self.resume(idx, now);
        }
        Ok(())
    }

    pub fn label(&mut self, id: u64, label: &str) -> Result<(), VastError> {
        let ours = self.is_ours(Some(label));
        let Some(inst) = self.insts.iter_mut().find(|i| i.id == id && !i.destroyed) else {
            return Err(VastError::NoSuchInstance(id));
        };
        inst.label = Some(label.to_string());
        inst.ours = ours;
        Ok(())
    }

    pub fn logs(&self, id: u64, tail: u32) -> Result<String, VastError> {
        let Some(i) = self.insts.iter().find(|i| i.id == id && !i.destroyed) else {
            return Err(VastError::NoSuchInstance(id));
        };
        let mut lines = vec![format!("[sim] instance {} on {}", i.id, i.gpu_name)];
        match i.phase {
            Phase::Provisioning | Phase::Loading => lines.push("pulling image layers...".into()),
            Phase::Running => lines.push("curio: PSProve worker running".into()),
            _ => lines.push(i.status_msg.clone().unwrap_or_default()),
        }
        let n = lines.len().saturating_sub(tail.max(1) as usize);
        Ok(lines[n..].join("\n"))
    }

    // ---- bookkeeping ----

    /// Dollars billed for our instances from the start up to `t` (a fleet rented before the
    /// start is billed from the start).
    pub fn spend_ours(&self, t: Millis) -> f64 {
        self.spend_between(self.start, t)
    }

    /// Dollars billed for our instances within [from, to).
    pub fn spend_between(&self, from: Millis, to: Millis) -> f64 {
        self.insts
            .iter()
            .filter(|i| i.ours)
            .flat_map(|i| i.bill.iter())
            .map(|(a, b, dph)| {
                let end = b.unwrap_or(to).min(to);
                dph * (end - (*a).max(from)).max(0) as f64 / HOUR_MS as f64
            })
            .sum::<f64>()
            // An empty float sum is -0.0: "$-0.00" in the report.
            + 0.0
    }

    /// Our instances billing compute now (not stopped, not destroyed): how many, and $/h.
    pub fn billing_ours(&self) -> (u32, f64) {
        let mut n = 0;
        let mut dph = 0.0;
        for i in self
            .insts
            .iter()
            .filter(|i| i.ours && !i.destroyed && i.phase != Phase::Stopped)
        {
            n += 1;
            dph += i.dph;
        }
        (n, dph)
    }

    /// True proofs/h of our instances that prove or boot (not stopped, dead or destroyed; a
    /// boot that will fail counts until it does, as the agent sees it).
    pub fn capacity_coming(&self) -> f64 {
        self.insts
            .iter()
            .filter(|i| i.ours && !i.destroyed)
            .filter(|i| {
                matches!(
                    i.phase,
                    Phase::Provisioning | Phase::Loading | Phase::Running
                )
            })
            .map(|i| self.host_rate(i))
            .sum()
    }

    /// The true proofs/h of the host behind an offer.
    pub fn offer_rate(&self, offer_id: u64) -> Option<f64> {
        self.hosts.iter().find(|h| h.id == offer_id).map(|h| h.rate)
    }

    /// Our instances that are up but loading past `stuck_ms` right now.
    pub fn stuck_now(&self, now: Millis, stuck_ms: Millis) -> Vec<u64> {
        self.insts
            .iter()
            .filter(|i| i.ours && !i.destroyed)
            .filter(|i| matches!(i.phase, Phase::Provisioning | Phase::Loading))
            .filter(|i| now - i.created_at > stuck_ms)
            .map(|i| i.id)
            .collect()
    }

    /// Our instances that ever stayed loading past `stuck_ms` (destroyed or not).
    pub fn stuck_ever(&self, now: Millis, stuck_ms: Millis) -> u64 {
        self.insts
            .iter()
            .filter(|i| i.ours)
            .filter(|i| {
                let until = i.ended_at.unwrap_or(now);
                let ran = i.running_at.filter(|r| *r <= until);
                match ran {
                    Some(r) => r - i.created_at > stuck_ms,
                    None => until - i.created_at > stuck_ms,
                }
            })
            .count() as u64
    }

    /// The true proofs/h of an instance's host (its own rate when the host is unknown).
    pub(super) fn host_rate(&self, i: &Inst) -> f64 {
        self.hosts
            .iter()
            .find(|h| Some(h.id) == i.host)
            .map(|h| h.rate)
            .unwrap_or(i.rate)
    }

    /// The label prefix of our instances.
    pub(super) fn prefix(&self) -> &str {
        &self.prefix
    }
}

/// An instance as the API lists it.
fn listed(i: &Inst) -> Instance {
    let status = match i.phase {
        Phase::Provisioning => None,
        Phase::Loading => Some("loading"),
        Phase::Running => Some("running"),
        Phase::Exited => Some("exited"),
        Phase::Offline => Some("offline"),
        Phase::Stopped => Some("stopped"),
    };
    let stopped = i.phase == Phase::Stopped;
    // An outbid bid in vast.ai's two shapes: intended_status left running (half of them), or
    // cur_state, intended_status and next_state all stopped.
    let resumes_shape = i.outbid && i.id % 2 == 0;
    let intended = if stopped && !resumes_shape {
        "stopped"
    } else {
        "running"
    };
    Instance {
        id: i.id,
        label: i.label.clone(),
        actual_status: status.map(String::from),
        intended_status: Some(intended.into()),
        cur_state: Some(if stopped { "stopped" } else { "running" }.into()),
        next_state: i.outbid.then(|| intended.to_string()),
        is_bid: Some(i.is_bid),
        status_msg: i.status_msg.clone(),
        gpu_name: Some(i.gpu_name.clone()),
        num_gpus: Some(1),
        dph_total: Some(i.dph),
        public_ip: Some(i.ip.clone()),
        start_date: Some(i.created_at as f64 / 1000.0),
        ..Default::default()
    }
}

/// The offer's current minimum bid.
pub(super) fn min_bid(dph: f64) -> f64 {
    round3(dph * 0.6)
}

/// End the open billing segment of `inst` at `t`.
fn close_bill(inst: &mut Inst, t: Millis) {
    if let Some(last) = inst.bill.last_mut().filter(|b| b.1.is_none()) {
        last.1 = Some(t.max(last.0));
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::scenario;

    const T0: Millis = 1_772_409_600_000;

    fn account() -> VastAccount {
        let s = scenario::parse("name = \"t\"\ndescription = \"t\"\nhours = 24\n").unwrap();
        VastAccount::new(&s, 3, T0, "fleetagent")
    }

    #[test]
    fn creates_closer_than_the_interval_are_refused_with_a_penalty() {
        let mut v = account();
        assert!(v.rate_limited(true, T0).is_none());
        assert!(v.rate_limited(true, T0 + 1_000).is_some());
        // The penalty: even after the interval, within 12 s of the violation.
        assert!(v.rate_limited(true, T0 + 6_000).is_some());
        assert!(v.rate_limited(true, T0 + 6_000 + 12_001).is_none());
        assert_eq!((v.tally.create_calls, v.tally.calls_429), (4, 2));
    }

    #[test]
    fn a_rented_host_is_no_longer_offered_until_its_instance_is_destroyed() {
        let mut v = account();
        let offer = v.search(&OfferQuery::default())[0].id;
        let id = v.create(offer, "fleetagent-r1-a", T0).unwrap();
        assert!(v.inst(id).unwrap().ours);
        assert!(v
            .search(&OfferQuery::default())
            .iter()
            .all(|o| o.id != offer));
        assert_eq!(v.destroy(id, T0 + 1).unwrap(), None);
        assert!(v.show(id).is_none());
        assert!(v
            .search(&OfferQuery::default())
            .iter()
            .any(|o| o.id == offer));
        // A second destroy is no error; a stop of it is.
        assert_eq!(v.destroy(id, T0 + 2).unwrap(), None);
        assert!(matches!(
            v.stop(id, T0 + 2),
            Err(VastError::NoSuchInstance(_))
        ));
        assert_eq!(v.tally.foreign_touched, 0);
    }
}
