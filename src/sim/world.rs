//! The simulated world: vast.ai's hosts and instances, Curio's machines and PSProve queue,
//! and the ProofShare market. It advances in 10 s steps (Curio's adder cadence), lazily, to
//! whatever time it is asked about, so a caller sleeping on the simulated clock sees it move.
//!
//! Curio as reference/curio-demand.md describes it: heartbeats every 60 s; a dead machine's
//! tasks keep their stale owner until a live node's cleanup (every 5 min) deletes machines
//! silent for 10 min, and with no live node nobody cleans; the request task pulls market work
//! only while a ProofShare node lives, when 5 or fewer proofs wait unclaimed, up to 8.
//! Nothing here decides anything for the fleet.

use std::collections::VecDeque;

use super::rng::{Purpose, Rng};
use super::scenario::Scenario;
use crate::clock::Millis;
use crate::demand::{Demand, Worker};
use crate::vast::{Instance, Offer, OfferQuery, VastError};

pub const STEP_MS: Millis = 10_000;
pub const SAMPLE_MS: Millis = 300_000;
/// Live capacity is tallied in bins of this length (the timer's period) for the hours below
/// target: fine enough to tell a boot's worth of delay (minutes) from none.
pub const CAP_BIN_MS: Millis = 300_000;
const MIN_MS: Millis = 60_000;
const HOUR_MS: Millis = 3_600_000;
const HEARTBEAT_MS: Millis = 60_000;
const LOOKS_DEAD_MS: Millis = 10 * MIN_MS;
const CLEANUP_EVERY_MS: Millis = 5 * MIN_MS;
const LOW_WATER: usize = 5;
const HIGH_WATER: usize = 8;
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
    loading_at: Millis,
    /// None: stuck in loading for ever.
    running_at: Option<Millis>,
    boot_fails: bool,
    curio_at: Millis,
    /// When the host disconnects or the worker crashes, and into which phase.
    dies_at: Option<(Millis, Phase, &'static str)>,
    pub ended_at: Option<Millis>,
    pub destroyed: bool,
    machine: Option<usize>,
    rng: Rng,
}

#[derive(Debug, Clone, Copy)]
struct Task {
    arrived: Millis,
    pulled: Millis,
}

#[derive(Debug)]
struct Machine {
    name: String,
    host_and_port: String,
    registered_at: Millis,
    alive: bool,
    died_at: Millis,
    deleted: bool,
    rate: f64,
    task: Option<Task>,
    busy_until: Millis,
    free_at: Millis,
    inst: u64,
}

impl Machine {
    fn last_contact(&self, now: Millis) -> Millis {
        let until = if self.alive { now } else { self.died_at };
        self.registered_at + ((until - self.registered_at).max(0) / HEARTBEAT_MS) * HEARTBEAT_MS
    }
}

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
}

/// Totals over the whole run.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    pub offered: u64,
    pub expired: u64,
    pub completed: u64,
    /// Seconds from market arrival to a worker claiming the proof.
    pub waits: Vec<f32>,
    /// Capacity (true proofs/h of live workers) integrated per [`CAP_BIN_MS`] bin, in
    /// proof-ms/h.
    pub cap_ms: Vec<f64>,
    /// Market arrivals per hour.
    pub offered_per_hour: Vec<u64>,
    pub create_calls: u64,
    pub calls_429: u64,
    /// Stops or destroys of instances that are not ours.
    pub foreign_touched: u64,
}

pub struct World {
    pub start: Millis,
    pub now: Millis,
    next_step: Millis,
    scenario: Scenario,
    seed: u64,
    prefix: String,
    pub hosts: Vec<Host>,
    pub insts: Vec<Inst>,
    machines: Vec<Machine>,
    pending: VecDeque<Task>,
    pool: VecDeque<Millis>,
    arrivals: Arrivals,
    completions: VecDeque<Millis>,
    next_inst_id: u64,
    pub samples: Vec<Sample>,
    pub tally: Tally,
    last_create: Option<Millis>,
    penalty_until: Millis,
    rl_rng: Rng,
    /// Instances loading past this long count as stuck (policy.stuck_loading_mins).
    pub stuck_ms: Millis,
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
}

/// The market's Poisson arrivals, drawn from their own stream as the world reaches them, so
/// only the proofs of the simulated horizon are ever drawn (a year at most). The sequence is
/// the one a draw of the whole year would give: each rate segment `[from, to)` is walked from
/// `from` with exponential gaps, the draw that passes `to` is dropped.
struct Arrivals {
    rng: Rng,
    start: Millis,
    /// The rate schedule, closed by a zero rate at a year (or the scenario's hours).
    edges: Vec<(f64, f64)>,
    /// The segment being drawn (`edges[seg]` to `edges[seg + 1]`).
    seg: usize,
    /// Hours of the last draw in that segment; None before its first.
    h: Option<f64>,
    /// The next arrival, drawn but not yet taken.
    next: Option<Millis>,
}

impl Arrivals {
    fn new(scenario: &Scenario, seed: u64, start: Millis) -> Arrivals {
        let mut edges: Vec<(f64, f64)> = scenario.market.rate.clone();
        edges.push((scenario.hours.max(24.0 * 366.0), 0.0));
        Arrivals {
            rng: Rng::stream(seed, Purpose::Market, 0),
            start,
            edges,
            seg: 0,
            h: None,
            next: None,
        }
    }

    /// The next arrival (None when the schedule has no more).
    fn peek(&mut self) -> Option<Millis> {
        if self.next.is_none() {
            self.next = self.draw();
        }
        self.next
    }

    fn take(&mut self) -> Option<Millis> {
        let a = self.peek();
        self.next = None;
        a
    }

    fn draw(&mut self) -> Option<Millis> {
        while self.seg + 1 < self.edges.len() {
            let (from, rate) = self.edges[self.seg];
            let to = self.edges[self.seg + 1].0;
            // (Negated so that a NaN skips the segment too.)
            if !(rate > 0.0 && to > from) {
                self.seg += 1;
                continue;
            }
            let h = self.h.unwrap_or(from) + self.rng.exp(1.0 / rate);
            if h >= to || h > 24.0 * 366.0 {
                self.seg += 1;
                self.h = None;
                continue;
            }
            self.h = Some(h);
            return Some(self.start + (h * HOUR_MS as f64) as Millis);
        }
        None
    }
}

impl World {
    pub fn new(scenario: &Scenario, seed: u64, start: Millis, prefix: &str) -> World {
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
        World {
            start,
            now: start,
            next_step: start,
            scenario: scenario.clone(),
            seed,
            prefix: prefix.to_string(),
            hosts,
            insts: Vec::new(),
            machines: Vec::new(),
            pending: VecDeque::new(),
            pool: VecDeque::new(),
            arrivals: Arrivals::new(scenario, seed, start),
            completions: VecDeque::new(),
            next_inst_id: 7_100_001,
            samples: Vec::new(),
            tally: Tally::default(),
            last_create: None,
            penalty_until: 0,
            rl_rng: Rng::stream(seed, Purpose::RateLimit, 0),
            stuck_ms: 30 * MIN_MS,
        }
    }

    /// The fleet at the start: the foreign instance, and ours per `[start]`. Pending proofs
    /// are put in Curio's queue. Returns ours for the database seed.
    pub fn set_up_start(&mut self) -> Vec<SeedInstance> {
        let start = self.start;
        let s = self.scenario.start.clone();
        for _ in 0..s.pending {
            self.pending.push_back(Task {
                arrived: start - 20 * MIN_MS,
                pulled: start - 15 * MIN_MS,
            });
        }
        let mut order: Vec<usize> = (0..self.hosts.len()).collect();
        order.sort_by(|a, b| {
            let (x, y) = (&self.hosts[*a], &self.hosts[*b]);
            (x.dph / x.rate).total_cmp(&(y.dph / y.rate))
        });
        let mut picks = order.into_iter();
        // Someone's notebook on the same account: never ours to touch.
        if let Some(i) = picks.next_back() {
            let host = self.hosts[i].id;
            let id = self.place(host, Some("jupyter-notebook".into()), start - 30 * HOUR_MS);
            self.force_running(id, start - 30 * HOUR_MS, false);
        }
        let mut seeded = Vec::new();
        for k in 0..s.live {
            let Some(i) = picks.next() else { break };
            let label = format!("{}-r0-live{:02}", self.prefix, k + 1);
            let created = start - 3 * HOUR_MS;
            let id = self.place(self.hosts[i].id, Some(label.clone()), created);
            self.force_running(id, created + 8 * MIN_MS, true);
            seeded.push(self.seed_of(id, false));
        }
        for k in 0..s.dead {
            let Some(i) = picks.next() else { break };
            let label = format!("{}-r0-old{:02}", self.prefix, k + 1);
            let created = start - 5 * HOUR_MS;
            let id = self.place(self.hosts[i].id, Some(label.clone()), created);
            self.force_running(id, created + 8 * MIN_MS, false);
            let inst = self.inst_mut(id).expect("just placed");
            inst.phase = Phase::Offline;
            inst.status_msg = Some("host disconnected".into());
            inst.dies_at = None;
            seeded.push(self.seed_of(id, false));
        }
        for k in 0..s.loading {
            let Some(i) = picks.next() else { break };
            let label = format!("{}-r0-boot{:02}", self.prefix, k + 1);
            // Launched 12, 8 and 3 minutes ago: the launch window is spent.
            let created = start - (12 - 4 * k as i64).max(1) * MIN_MS;
            let id = self.place(self.hosts[i].id, Some(label.clone()), created);
            let stuck = k < s.loading_stuck;
            let inst = self.inst_mut(id).expect("just placed");
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

    fn seed_of(&self, id: u64, loading: bool) -> SeedInstance {
        let i = self.inst(id).expect("seeded instance");
        SeedInstance {
            id,
            label: i.label.clone().unwrap_or_default(),
            created_at: i.created_at,
            dph: i.dph,
            gpu_name: i.gpu_name.clone(),
            offer_id: i.host.unwrap_or(0),
            loading,
        }
    }

    fn force_running(&mut self, id: u64, at: Millis, with_worker: bool) {
        let start = self.start;
        let inst = self.inst_mut(id).expect("placed");
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
            let idx = self.inst_index(id).expect("placed");
            self.register(idx, at + 90_000);
        }
    }

    fn inst_index(&self, id: u64) -> Option<usize> {
        self.insts.iter().position(|i| i.id == id)
    }

    pub fn inst(&self, id: u64) -> Option<&Inst> {
        self.insts.iter().find(|i| i.id == id)
    }

    fn inst_mut(&mut self, id: u64) -> Option<&mut Inst> {
        self.insts.iter_mut().find(|i| i.id == id)
    }

    pub fn is_ours(&self, label: Option<&str>) -> bool {
        label
            .and_then(|l| l.strip_prefix(&self.prefix))
            .is_some_and(|r| r.starts_with('-') && r.len() > 1)
    }

    /// Rent `host` now: draw the instance's fate from the host's stream.
    fn place(&mut self, host_id: u64, label: Option<String>, at: Millis) -> u64 {
        let id = self.next_inst_id;
        self.next_inst_id += 1;
        let h = self.scenario.hosts.clone();
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
        let inst = Inst {
            id,
            label,
            ours,
            host: Some(host_id),
            gpu_name: host.gpu_name.clone(),
            dph: host.dph,
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
            destroyed: false,
            machine: None,
            rng: Rng::stream(self.seed, Purpose::Instance, id),
        };
        self.insts.push(inst);
        id
    }

    fn register(&mut self, idx: usize, at: Millis) {
        let inst = &self.insts[idx];
        let name = inst
            .label
            .clone()
            .unwrap_or_else(|| format!("C.{}", inst.id));
        let m = Machine {
            name,
            host_and_port: format!("{}:12300", inst.ip),
            registered_at: at,
            alive: true,
            died_at: 0,
            deleted: false,
            rate: inst.rate,
            task: None,
            busy_until: 0,
            free_at: at,
            inst: inst.id,
        };
        self.machines.push(m);
        self.insts[idx].machine = Some(self.machines.len() - 1);
    }

    fn kill_machine(&mut self, idx: usize, at: Millis) {
        if let Some(m) = self.insts[idx].machine {
            let mach = &mut self.machines[m];
            if mach.alive {
                mach.alive = false;
                mach.died_at = at;
            }
        }
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
        // Instances.
        for idx in 0..self.insts.len() {
            if self.insts[idx].destroyed {
                continue;
            }
            let inst = &mut self.insts[idx];
            if inst.phase == Phase::Provisioning && inst.loading_at <= t {
                inst.phase = Phase::Loading;
                inst.status_msg = Some("pulling image".into());
            }
            if inst.phase == Phase::Loading {
                if let Some(r) = inst.running_at.filter(|r| *r <= t) {
                    if inst.boot_fails {
                        inst.phase = Phase::Exited;
                        inst.status_msg =
                            Some("Error response from daemon: OCI runtime create failed".into());
                    } else {
                        inst.phase = Phase::Running;
                        inst.status_msg = Some("success, running".into());
                    }
                    let _ = r;
                }
            }
            let inst = &self.insts[idx];
            if inst.phase == Phase::Running && inst.machine.is_none() && inst.curio_at <= t {
                let at = inst.curio_at;
                self.register(idx, at);
            }
            let inst = &mut self.insts[idx];
            if let Some((at, phase, msg)) = inst.dies_at {
                if at <= t && inst.phase == Phase::Running {
                    inst.phase = phase;
                    inst.status_msg = Some(msg.into());
                    inst.dies_at = None;
                    self.kill_machine(idx, at);
                }
            }
        }
        // Market: arrivals join the pool, old ones go to other providers.
        while let Some(a) = self.arrivals.peek().filter(|a| *a <= t) {
            self.arrivals.take();
            self.pool.push_back(a);
            self.tally.offered += 1;
            let hour = ((t - self.start) / HOUR_MS) as usize;
            if self.tally.offered_per_hour.len() <= hour {
                self.tally.offered_per_hour.resize(hour + 1, 0);
            }
            self.tally.offered_per_hour[hour] += 1;
        }
        let expire = (self.scenario.market.expire_mins * MIN_MS as f64) as Millis;
        while self.pool.front().is_some_and(|a| t - a > expire) {
            self.pool.pop_front();
            self.tally.expired += 1;
        }
        let any_alive = self.machines.iter().any(|m| m.alive);
        if any_alive && self.pending.len() <= LOW_WATER {
            while self.pending.len() < HIGH_WATER {
                let Some(a) = self.pool.pop_front() else {
                    break;
                };
                self.pending.push_back(Task {
                    arrived: a,
                    pulled: t,
                });
            }
        }
        // Proving.
        for mi in 0..self.machines.len() {
            if !self.machines[mi].alive {
                continue;
            }
            loop {
                let m = &mut self.machines[mi];
                if m.task.is_some() {
                    if m.busy_until > t {
                        break;
                    }
                    m.task = None;
                    m.free_at = m.busy_until;
                    self.completions.push_back(m.busy_until);
                    self.tally.completed += 1;
                }
                let Some(task) = self.pending.pop_front() else {
                    break;
                };
                let m = &mut self.machines[mi];
                let begin = m.free_at.max(task.pulled).max(m.registered_at);
                let inst = self
                    .insts
                    .iter_mut()
                    .find(|i| i.id == m.inst)
                    .expect("machine's instance");
                let secs = 3600.0 / m.rate * inst.rng.range(0.85, 1.15);
                m.task = Some(task);
                m.busy_until = begin + (secs * 1000.0) as Millis;
                self.tally
                    .waits
                    .push(((begin - task.arrived) as f32 / 1000.0).max(0.0));
            }
        }
        // Curio's cleanup, run by any live node.
        if (t - self.start) % CLEANUP_EVERY_MS == 0 && any_alive {
            for mi in 0..self.machines.len() {
                let m = &mut self.machines[mi];
                if !m.deleted && t - m.last_contact(t) > LOOKS_DEAD_MS {
                    m.deleted = true;
                    if let Some(task) = m.task.take() {
                        self.pending.push_front(task);
                    }
                }
            }
        }
        // Capacity of live workers, per bin.
        let cap: f64 = self
            .machines
            .iter()
            .filter(|m| m.alive)
            .map(|m| m.rate)
            .sum();
        let bin = ((t - self.start) / CAP_BIN_MS) as usize;
        if self.tally.cap_ms.len() <= bin {
            self.tally.cap_ms.resize(bin + 1, 0.0);
        }
        self.tally.cap_ms[bin] += cap * STEP_MS as f64;
        while self.completions.front().is_some_and(|c| t - c > HOUR_MS) {
            self.completions.pop_front();
        }
        if (t - self.start) % SAMPLE_MS == 0 {
            let s = self.sample(t);
            self.samples.push(s);
        }
    }

    fn sample(&self, t: Millis) -> Sample {
        let d = self.demand(t, 150_000);
        let ours = self.insts.iter().filter(|i| i.ours && !i.destroyed);
        let (mut loading, mut live) = (0, 0);
        for i in ours {
            match i.phase {
                Phase::Provisioning | Phase::Loading => loading += 1,
                Phase::Running if i.machine.is_some_and(|m| self.machines[m].alive) => live += 1,
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
            market_rate: self.market_rate(t),
            spend: self.spend_ours(t),
        }
    }

    pub fn market_rate(&self, t: Millis) -> f64 {
        self.scenario
            .market
            .rate_at((t - self.start) as f64 / HOUR_MS as f64)
    }

    fn hour_of(&self, t: Millis) -> f64 {
        (t - self.start) as f64 / HOUR_MS as f64
    }

    // ---- Curio, as a demand probe reads it ----

    pub fn demand(&self, now: Millis, alive_ms: Millis) -> Demand {
        let mut d = Demand {
            pending: self.pending.len() as u32,
            ..Default::default()
        };
        for m in self.machines.iter().filter(|m| !m.deleted) {
            let fresh = now - m.last_contact(now) <= alive_ms;
            let busy = m.task.is_some() as u32;
            if fresh {
                d.running += busy;
                d.workers.push(Worker {
                    machine_name: m.name.clone(),
                    host_and_port: m.host_and_port.clone(),
                    running: busy,
                    cordoned: false,
                });
            } else {
                d.running_stale += busy;
            }
        }
        d.completed_1h = self
            .completions
            .iter()
            .filter(|c| now - **c <= HOUR_MS)
            .count() as u32;
        d.completed_15m = self
            .completions
            .iter()
            .filter(|c| now - **c <= 15 * MIN_MS)
            .count() as u32;
        d
    }

    pub fn probe_down(&self, now: Millis) -> bool {
        let h = self.hour_of(now);
        self.scenario.probe_outage.iter().any(|w| w.contains(h))
    }

    // ---- vast.ai, as the API answers ----

    /// vast.ai's limiter: the create interval (with its penalty) and the scenario's bursts.
    /// `Some(text)` is a 429 body.
    pub fn rate_limited(&mut self, create: bool, now: Millis) -> Option<String> {
        let h = self.hour_of(now);
        let share = self
            .scenario
            .vast_429
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
                min_bid: Some(round3(h.dph * 0.6)),
            })
            .collect();
        v.sort_by(|a, b| a.dph_total.total_cmp(&b.dph_total).then(a.id.cmp(&b.id)));
        if q.limit > 0 {
            v.truncate(q.limit as usize);
        }
        v
    }

    pub fn create(&mut self, offer_id: u64, label: &str, now: Millis) -> Result<u64, VastError> {
        let free = self
            .hosts
            .iter()
            .any(|h| h.id == offer_id && h.rented_by.is_none());
        if !free {
            return Err(VastError::NoSuchAsk(offer_id));
        }
        Ok(self.place(offer_id, Some(label.to_string()), now))
    }

    pub fn list(&self) -> Vec<Instance> {
        self.insts
            .iter()
            .filter(|i| !i.destroyed)
            .map(|i| self.listed(i))
            .collect()
    }

    fn listed(&self, i: &Inst) -> Instance {
        let status = match i.phase {
            Phase::Provisioning => None,
            Phase::Loading => Some("loading"),
            Phase::Running => Some("running"),
            Phase::Exited => Some("exited"),
            Phase::Offline => Some("offline"),
            Phase::Stopped => Some("stopped"),
        };
        let stopped = i.phase == Phase::Stopped;
        Instance {
            id: i.id,
            label: i.label.clone(),
            actual_status: status.map(String::from),
            intended_status: Some(if stopped { "stopped" } else { "running" }.into()),
            cur_state: Some(if stopped { "stopped" } else { "running" }.into()),
            status_msg: i.status_msg.clone(),
            gpu_name: Some(i.gpu_name.clone()),
            num_gpus: Some(1),
            dph_total: Some(i.dph),
            public_ip: Some(i.ip.clone()),
            start_date: Some(i.created_at as f64 / 1000.0),
        }
    }

    pub fn show(&self, id: u64) -> Option<Instance> {
        self.insts
            .iter()
            .find(|i| i.id == id && !i.destroyed)
            .map(|i| self.listed(i))
    }

    pub fn destroy(&mut self, id: u64, now: Millis) -> Result<(), VastError> {
        let Some(idx) = self.insts.iter().position(|i| i.id == id && !i.destroyed) else {
            return Ok(());
        };
        if !self.insts[idx].ours {
            self.tally.foreign_touched += 1;
        }
        self.kill_machine(idx, now);
        let inst = &mut self.insts[idx];
        inst.destroyed = true;
        if inst.ended_at.is_none() {
            inst.ended_at = Some(now);
        }
        let host = inst.host;
        if let Some(h) = self.hosts.iter_mut().find(|h| Some(h.id) == host) {
            h.rented_by = None;
        }
        Ok(())
    }

    pub fn stop(&mut self, id: u64, now: Millis) -> Result<(), VastError> {
        let Some(idx) = self.insts.iter().position(|i| i.id == id && !i.destroyed) else {
            return Err(VastError::NoSuchInstance(id));
        };
        if !self.insts[idx].ours {
            self.tally.foreign_touched += 1;
        }
        self.kill_machine(idx, now);
        let inst = &mut self.insts[idx];
        inst.phase = Phase::Stopped;
        inst.dies_at = None;
        if inst.ended_at.is_none() {
            inst.ended_at = Some(now);
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

    /// Dollars billed for our instances up to `t`.
    pub fn spend_ours(&self, t: Millis) -> f64 {
        self.insts
            .iter()
            .filter(|i| i.ours)
            .map(|i| {
                let end = i.ended_at.unwrap_or(t).min(t);
                i.dph * (end - i.created_at).max(0) as f64 / HOUR_MS as f64
            })
            .sum()
    }

    /// Our instances that are up but loading past the stuck limit right now.
    pub fn stuck_now(&self, now: Millis) -> Vec<u64> {
        self.insts
            .iter()
            .filter(|i| i.ours && !i.destroyed)
            .filter(|i| matches!(i.phase, Phase::Provisioning | Phase::Loading))
            .filter(|i| now - i.created_at > self.stuck_ms)
            .map(|i| i.id)
            .collect()
    }

    /// Our instances that ever stayed loading past the stuck limit (destroyed or not).
    pub fn stuck_ever(&self, now: Millis) -> u64 {
        self.insts
            .iter()
            .filter(|i| i.ours)
            .filter(|i| {
                let until = i.ended_at.unwrap_or(now);
                let ran = i.running_at.filter(|r| *r <= until);
                match ran {
                    Some(r) => r - i.created_at > self.stuck_ms,
                    None => until - i.created_at > self.stuck_ms,
                }
            })
            .count() as u64
    }

    pub fn live_capacity(&self) -> f64 {
        self.machines
            .iter()
            .filter(|m| m.alive)
            .map(|m| m.rate)
            .sum()
    }

    /// Instance ids and their live/idle state, for the oracle.
    pub fn ours_view(&self) -> Vec<OursView> {
        self.insts
            .iter()
            .filter(|i| i.ours && !i.destroyed)
            .map(|i| {
                let m = i.machine.map(|m| &self.machines[m]);
                OursView {
                    id: i.id,
                    phase: i.phase,
                    rate: self
                        .hosts
                        .iter()
                        .find(|h| Some(h.id) == i.host)
                        .map(|h| h.rate)
                        .unwrap_or(i.rate),
                    dph: i.dph,
                    created_at: i.created_at,
                    alive: m.is_some_and(|m| m.alive),
                    busy: m.is_some_and(|m| m.task.is_some()),
                }
            })
            .collect()
    }

    pub fn queued(&self) -> usize {
        self.pending.len()
    }

    pub fn scenario(&self) -> &Scenario {
        &self.scenario
    }
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

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::scenario;

    const T0: Millis = 1_772_409_600_000;

    fn world(text: &str) -> World {
        let s = scenario::parse(text).unwrap();
        World::new(&s, 3, T0, "fleetagent")
    }

    const BASE: &str = "name = \"t\"\ndescription = \"t\"\nhours = 24\n[market]\nrate = [[0, 120]]\n[hosts]\nboot_fail = 0\nstuck = 0\noffline_per_day = 0\ncrash_per_day = 0\n";

    #[test]
    fn an_instance_boots_registers_and_proves() {
        let mut w = world(BASE);
        let offers = w.search(&OfferQuery {
            limit: 5,
            ..Default::default()
        });
        assert_eq!(offers.len(), 5);
        assert!(offers.windows(2).all(|p| p[0].dph_total <= p[1].dph_total));
        let id = w.create(offers[0].id, "fleetagent-r1-aa", T0).unwrap();
        assert!(matches!(
            w.create(offers[0].id, "x", T0),
            Err(VastError::NoSuchAsk(_))
        ));
        assert_eq!(w.show(id).unwrap().actual_status, None);
        w.advance(T0 + 2 * HOUR_MS);
        assert_eq!(
            w.show(id).unwrap().actual_status.as_deref(),
            Some("running")
        );
        let d = w.demand(w.now, 150_000);
        assert_eq!(d.workers.len(), 1);
        assert_eq!(d.workers[0].machine_name, "fleetagent-r1-aa");
        assert!(d.completed_1h > 10, "{d:?}");
        // Curio buffers at most 8 while a worker lives.
        assert!(d.pending <= 8, "{d:?}");
        let spent = w.spend_ours(w.now);
        assert!((spent - offers[0].dph_total * 2.0).abs() < 1e-6, "{spent}");
    }

    #[test]
    fn hours_below_target_are_counted_in_five_minute_bins() {
        use crate::sim::report::hours_below_target;
        let end = T0 + 2 * HOUR_MS;
        // No worker at all: every bin of the two hours is below.
        let mut empty = world(BASE);
        empty.advance(end);
        let all = hours_below_target(&empty, 300.0, T0, end);
        assert!((all - 2.0).abs() < 1e-9, "{all}");
        // One instance from the start, and a target it covers once it proves: below only
        // while it boots, a whole number of 5-minute bins, not a whole hour.
        let mut w = world(BASE);
        let offer = w.search(&OfferQuery::default())[0].id;
        w.create(offer, "fleetagent-r1-aa", T0).unwrap();
        w.advance(end);
        let below = hours_below_target(&w, 1.0, T0, end);
        assert!(below > 0.0 && below < 1.0, "{below}");
        assert!(
            (below * 12.0 - (below * 12.0).round()).abs() < 1e-9,
            "{below}"
        );
    }

    #[test]
    fn a_dead_worker_keeps_a_stale_owner_until_cleanup_by_a_live_node() {
        let mut w = world(BASE);
        let offers = w.search(&OfferQuery::default());
        let a = w.create(offers[0].id, "fleetagent-r1-a", T0).unwrap();
        let b = w.create(offers[1].id, "fleetagent-r1-b", T0).unwrap();
        w.advance(T0 + HOUR_MS);
        // Kill a's worker (the container exits) while it proves.
        let ia = w.inst_index(a).unwrap();
        w.insts[ia].dies_at = Some((w.now + 1, Phase::Exited, "container exited"));
        w.advance(w.now + STEP_MS);
        let died = w.now;
        let d = w.demand(died + 30_000, 150_000);
        assert_eq!(d.workers.len(), 2, "a dead worker looks live for a while");
        let later = w.demand(died + 200_000, 150_000);
        assert_eq!(later.workers.len(), 1);
        // After >10 min silent plus a cleanup round, its task is pending again.
        w.advance(died + 16 * MIN_MS);
        assert_eq!(w.demand(w.now, 150_000).running_stale, 0);
        let _ = b;
    }

    #[test]
    fn no_live_node_means_no_pulls_and_no_cleanup() {
        let text = format!("{BASE}[start]\npending = 59\n");
        let mut w = world(&text);
        w.set_up_start();
        w.advance(T0 + HOUR_MS);
        let d = w.demand(w.now, 150_000);
        assert_eq!(d.pending, 59);
        assert!(d.workers_dead());
        assert!(w.tally.expired > 0, "the market gave the work to others");
    }

    #[test]
    fn creates_closer_than_the_interval_are_refused_with_a_penalty() {
        let mut w = world(BASE);
        assert!(w.rate_limited(true, T0).is_none());
        assert!(w.rate_limited(true, T0 + 1_000).is_some());
        // The penalty: even after the interval, within 12 s of the violation.
        assert!(w.rate_limited(true, T0 + 6_000).is_some());
        assert!(w.rate_limited(true, T0 + 6_000 + 12_001).is_none());
    }
}
