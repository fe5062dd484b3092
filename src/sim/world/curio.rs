//! The simulated Curio cluster, as reference/curio-demand.md describes it and as its
//! HarmonyDB reads: one machine per worker, heartbeats every 60 s; a dead machine's tasks
//! keep their stale owner until a live node's cleanup (every 5 min) deletes machines silent
//! for 10 min, and with no live node nobody cleans; the request task pulls market work only
//! while a ProofShare node lives, when 5 or fewer proofs wait unclaimed, up to 8.

use std::collections::VecDeque;

use super::market::ProofMarket;
use super::{HOUR_MS, MIN_MS, STEP_MS};
use crate::clock::Millis;
use crate::demand::{Demand, RequestLoop, Worker, WorkerHistory, HISTORY_WINDOW_SECS};
use crate::sim::measure::CAP_BIN_MS;
use crate::sim::rng::{Purpose, Rng};
use crate::sim::scenario::{PricePath, Scenario, Window};

const HEARTBEAT_MS: Millis = 60_000;
const LOOKS_DEAD_MS: Millis = 10 * MIN_MS;
const CLEANUP_EVERY_MS: Millis = 5 * MIN_MS;
const LOW_WATER: usize = 5;
const HIGH_WATER: usize = 8;

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
    /// When the task being proved started.
    busy_from: Millis,
    free_at: Millis,
    /// The proof times of this worker: its instance's own stream.
    rng: Rng,
    /// When its proofs ended and how long each took (`work_end`, `work_end - work_start`),
    /// inside `HISTORY_WINDOW_SECS` (Curio's task history).
    ends: VecDeque<(Millis, Millis)>,
}

impl Machine {
    fn last_contact(&self, now: Millis) -> Millis {
        let until = if self.alive { now } else { self.died_at };
        self.registered_at + ((until - self.registered_at).max(0) / HEARTBEAT_MS) * HEARTBEAT_MS
    }
}

/// The cluster's counts over the whole run.
#[derive(Debug, Clone, Default)]
pub struct CurioTally {
    pub completed: u64,
    /// Of those, proofs the market offered within the run (not queued before the start).
    pub completed_offered: u64,
    /// USD earned: each completion at the price of its time (0 with no price modelled).
    pub revenue: f64,
    /// Seconds from market arrival to a worker claiming the proof.
    pub waits: Vec<f32>,
    /// Capacity (true proofs/h of live workers) integrated per [`CAP_BIN_MS`] bin, in
    /// proof-ms/h.
    pub cap_ms: Vec<f64>,
}

pub struct CurioCluster {
    start: Millis,
    seed: u64,
    /// The scenario's HarmonyDB outages.
    outages: Vec<Window>,
    price: Option<PricePath>,
    machines: Vec<Machine>,
    pending: VecDeque<Task>,
    completions: VecDeque<Millis>,
    pub tally: CurioTally,
}

impl CurioCluster {
    pub fn new(scenario: &Scenario, seed: u64, start: Millis) -> CurioCluster {
        CurioCluster {
            start,
            seed,
            outages: scenario.probe_outage.clone(),
            price: scenario.price.clone(),
            machines: Vec::new(),
            pending: VecDeque::new(),
            completions: VecDeque::new(),
            tally: CurioTally::default(),
        }
    }

    /// `n` proofs already in the queue, pulled from the market at `pulled`.
    pub(super) fn queue_pending(&mut self, n: u32, arrived: Millis, pulled: Millis) {
        for _ in 0..n {
            self.pending.push_back(Task { arrived, pulled });
        }
    }

    /// The worker of instance `inst` registers at `at`; returns its machine.
    pub(super) fn register(
        &mut self,
        inst: u64,
        name: String,
        host_and_port: String,
        rate: f64,
        at: Millis,
    ) -> usize {
        self.machines.push(Machine {
            name,
            host_and_port,
            registered_at: at,
            alive: true,
            died_at: 0,
            deleted: false,
            rate,
            task: None,
            busy_until: 0,
            busy_from: 0,
            free_at: at,
            rng: Rng::stream(self.seed, Purpose::Instance, inst),
            ends: VecDeque::new(),
        });
        self.machines.len() - 1
    }

    /// The machine's worker dies at `at` (its heartbeats stop; its task stays claimed).
    pub(super) fn kill(&mut self, machine: usize, at: Millis) {
        let m = &mut self.machines[machine];
        if m.alive {
            m.alive = false;
            m.died_at = at;
        }
    }

    /// Whether the machine's worker still lives, and whether it holds a proof.
    pub(super) fn alive(&self, machine: usize) -> bool {
        self.machines[machine].alive
    }

    pub(super) fn busy(&self, machine: usize) -> bool {
        self.machines[machine].task.is_some()
    }

    /// One step at `t`: the request task pulls from `market`, workers prove, a live node
    /// cleans up, live capacity is tallied.
    pub(super) fn step(&mut self, t: Millis, market: &mut ProofMarket) {
        let any_alive = self.machines.iter().any(|m| m.alive);
        if any_alive && self.pending.len() <= LOW_WATER {
            while self.pending.len() < HIGH_WATER {
                let Some(a) = market.take() else {
                    break;
                };
                self.pending.push_back(Task {
                    arrived: a,
                    pulled: t,
                });
            }
        }
        // Proving.
        let start = self.start;
        for m in self.machines.iter_mut() {
            if !m.alive {
                continue;
            }
            loop {
                if let Some(done) = m.task {
                    if m.busy_until > t {
                        break;
                    }
                    m.task = None;
                    m.free_at = m.busy_until;
                    self.completions.push_back(m.busy_until);
                    m.ends.push_back((m.busy_until, m.busy_until - m.busy_from));
                    self.tally.completed += 1;
                    if done.arrived >= start {
                        self.tally.completed_offered += 1;
                    }
                    if let Some(p) = &self.price {
                        let h = (m.busy_until - start) as f64 / HOUR_MS as f64;
                        self.tally.revenue += p.revenue_per_proof(h);
                    }
                }
                let Some(task) = self.pending.pop_front() else {
                    break;
                };
                let begin = m.free_at.max(task.pulled).max(m.registered_at);
                let secs = 3600.0 / m.rate * m.rng.range(0.85, 1.15);
                m.task = Some(task);
                m.busy_from = begin;
                m.busy_until = begin + (secs * 1000.0) as Millis;
                self.tally
                    .waits
                    .push(((begin - task.arrived) as f32 / 1000.0).max(0.0));
            }
        }
        // Curio's cleanup, run by any live node.
        if (t - self.start) % CLEANUP_EVERY_MS == 0 && any_alive {
            for m in self.machines.iter_mut() {
                if !m.deleted && t - m.last_contact(t) > LOOKS_DEAD_MS {
                    m.deleted = true;
                    if let Some(task) = m.task.take() {
                        self.pending.push_front(task);
                    }
                }
            }
        }
        // Capacity of live workers, per bin.
        let cap = self.live_capacity();
        let bin = ((t - self.start) / CAP_BIN_MS) as usize;
        if self.tally.cap_ms.len() <= bin {
            self.tally.cap_ms.resize(bin + 1, 0.0);
        }
        self.tally.cap_ms[bin] += cap * STEP_MS as f64;
        while self.completions.front().is_some_and(|c| t - c > HOUR_MS) {
            self.completions.pop_front();
        }
        let window_ms = HISTORY_WINDOW_SECS as Millis * 1000;
        for m in self.machines.iter_mut() {
            while m.ends.front().is_some_and(|(e, _)| t - e > window_ms) {
                m.ends.pop_front();
            }
        }
    }

    // ---- as a demand probe reads it ----

    pub fn demand(&self, now: Millis, alive_ms: Millis) -> Demand {
        // Curio's own backlog counts queue rows whose task nobody owns: the unclaimed ones
        // (a stale owner still owns its task until the cleanup). ProofShare is on and its
        // request loop runs; every proof has its queue row (no orphans, no stale rows).
        let mut d = Demand {
            pending: self.pending.len() as u32,
            backlog: Some(self.pending.len() as u32),
            proofshare_enabled: Some(true),
            request_loop: Some(RequestLoop::Ok),
            // Our ask price from the scenario's path, as Curio stores it (attoFIL as text);
            // with no price modelled, not read (as before the price existed).
            ask_price_attofil: self.price.as_ref().map(|p| {
                let h = (now - self.start) as f64 / HOUR_MS as f64;
                let fil = crate::sim::scenario::path_at(&p.ask_fil, h);
                format!("{}", (fil * crate::price::ATTO_PER_FIL).round() as u128)
            }),
            ..Default::default()
        };
        for m in &self.machines {
            if let (Some((first, _)), Some((last, _))) = (m.ends.front(), m.ends.back()) {
                // Completions still to come (a proof ending after `now`) are not history yet.
                let done: Vec<&(Millis, Millis)> =
                    m.ends.iter().filter(|(e, _)| *e <= now).collect();
                if done.is_empty() || *first > now {
                    continue;
                }
                let last = done.last().map_or(last, |(e, _)| e);
                let busy: Millis = done.iter().map(|(_, d)| *d).sum();
                d.history.push(WorkerHistory {
                    host_and_port: m.host_and_port.clone(),
                    proofs: done.len() as u32,
                    first_end_secs_ago: ((now - first) / 1000) as u64,
                    last_end_secs_ago: ((now - last) / 1000) as u64,
                    busy_secs: Some((busy / 1000) as u64),
                    completed_1h: Some(
                        done.iter().filter(|(e, _)| now - *e <= HOUR_MS).count() as u32
                    ),
                });
            }
        }
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

    /// Whether HarmonyDB is down (a scenario's outage) at `now`.
    pub fn probe_down(&self, now: Millis) -> bool {
        let h = (now - self.start) as f64 / HOUR_MS as f64;
        self.outages.iter().any(|w| w.contains(h))
    }

    /// True proofs/h of the live workers.
    pub fn live_capacity(&self) -> f64 {
        self.machines
            .iter()
            .filter(|m| m.alive)
            .map(|m| m.rate)
            .sum()
    }

    /// Proofs waiting in the queue, unclaimed.
    pub fn queued(&self) -> usize {
        self.pending.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::scenario;

    const T0: Millis = 1_772_409_600_000;

    fn cluster() -> CurioCluster {
        let s = scenario::parse("name = \"t\"\ndescription = \"t\"\nhours = 24\n").unwrap();
        CurioCluster::new(&s, 3, T0)
    }

    #[test]
    fn a_dead_worker_looks_live_until_its_heartbeats_are_stale() {
        let mut c = cluster();
        let m = c.register(1, "w".into(), "198.51.100.10:12300".into(), 30.0, T0);
        assert!(c.alive(m));
        c.kill(m, T0 + 90_000);
        assert!(!c.alive(m));
        // Its last heartbeat was at one minute: fresh for 150 s after that.
        assert_eq!(c.demand(T0 + 200_000, 150_000).workers.len(), 1);
        assert!(c.demand(T0 + 211_000, 150_000).workers.is_empty());
        assert_eq!(c.live_capacity(), 0.0);
    }

    #[test]
    fn work_is_pulled_only_while_a_node_lives_and_the_queue_is_low() {
        let text = "name = \"t\"\ndescription = \"t\"\nhours = 24\n[market]\nrate = [[0, 3600]]\nexpire_mins = 60\n";
        let s = scenario::parse(text).unwrap();
        let mut market = ProofMarket::new(&s, 3, T0);
        let mut c = CurioCluster::new(&s, 3, T0);
        let mut t = T0;
        for _ in 0..30 {
            market.step(t);
            c.step(t, &mut market);
            t += STEP_MS;
        }
        assert_eq!(c.queued(), 0, "no live node: nothing pulled");
        c.register(1, "w".into(), "198.51.100.10:12300".into(), 30.0, t);
        market.step(t);
        c.step(t, &mut market);
        // Up to 8 pulled, one of them claimed at once by the worker.
        assert_eq!(c.queued(), 7);
        assert!(c.busy(0));
    }

    #[test]
    fn the_reading_carries_curios_backlog_proofshare_state_and_each_workers_history() {
        let text = "name = \"t\"\ndescription = \"t\"\nhours = 24\n[market]\nrate = [[0, 3600]]\nexpire_mins = 60\n";
        let s = scenario::parse(text).unwrap();
        let mut market = ProofMarket::new(&s, 3, T0);
        let mut c = CurioCluster::new(&s, 3, T0);
        c.register(1, "w".into(), "198.51.100.10:12300".into(), 30.0, T0);
        let mut t = T0;
        while t < T0 + 2 * HOUR_MS {
            market.step(t);
            c.step(t, &mut market);
            t += STEP_MS;
        }
        let d = c.demand(t, 150_000);
        assert_eq!(d.backlog, Some(d.pending));
        assert_eq!(d.proofshare_enabled, Some(true));
        assert_eq!(d.request_loop, Some(RequestLoop::Ok));
        assert_eq!(d.history.len(), 1);
        let h = &d.history[0];
        assert_eq!(h.host_and_port, "198.51.100.10:12300");
        // About 30/h for two hours; the measured rate is close to the true one.
        let rate =
            (h.proofs - 1) as f64 * 3600.0 / (h.first_end_secs_ago - h.last_end_secs_ago) as f64;
        assert!((rate - 30.0).abs() < 3.0, "{rate} from {h:?}");
    }
}
