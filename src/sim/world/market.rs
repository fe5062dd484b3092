//! The simulated ProofShare market: proofs arrive at the scenario's rate (Poisson), wait in
//! an open pool for a provider's request task to pull them, and go to other providers once
//! older than the market's expiry.

use std::collections::VecDeque;

use super::{HOUR_MS, MIN_MS};
use crate::clock::Millis;
use crate::sim::rng::{Purpose, Rng};
use crate::sim::scenario::{Market, Scenario};

/// The market's counts over the whole run.
#[derive(Debug, Clone, Default)]
pub struct MarketTally {
    pub offered: u64,
    /// Went to other providers (not pulled within the market's expiry).
    pub expired: u64,
    /// Market arrivals per hour.
    pub offered_per_hour: Vec<u64>,
}

pub struct ProofMarket {
    start: Millis,
    spec: Market,
    /// Arrival times of the proofs on offer, oldest first.
    pool: VecDeque<Millis>,
    arrivals: Arrivals,
    pub tally: MarketTally,
}

impl ProofMarket {
    pub fn new(scenario: &Scenario, seed: u64, start: Millis) -> ProofMarket {
        ProofMarket {
            start,
            spec: scenario.market.clone(),
            pool: VecDeque::new(),
            arrivals: Arrivals::new(scenario, seed, start),
            tally: MarketTally::default(),
        }
    }

    /// One step at `t`: arrivals join the pool, old ones go to other providers.
    pub(super) fn step(&mut self, t: Millis) {
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
        let expire = (self.spec.expire_mins * MIN_MS as f64) as Millis;
        while self.pool.front().is_some_and(|a| t - a > expire) {
            self.pool.pop_front();
            self.tally.expired += 1;
        }
    }

    /// A request task takes the oldest proof on offer: its arrival time.
    pub(super) fn take(&mut self) -> Option<Millis> {
        self.pool.pop_front()
    }

    /// The scenario's rate (proofs/h) at `t`.
    pub fn rate_at(&self, t: Millis) -> f64 {
        self.spec.rate_at((t - self.start) as f64 / HOUR_MS as f64)
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::scenario;

    const T0: Millis = 1_772_409_600_000;

    fn market(rate: &str) -> ProofMarket {
        let text = format!(
            "name = \"t\"\ndescription = \"t\"\nhours = 24\n[market]\nrate = {rate}\nexpire_mins = 30\n"
        );
        ProofMarket::new(&scenario::parse(&text).unwrap(), 3, T0)
    }

    #[test]
    fn arrivals_follow_the_rate_and_unpulled_ones_expire() {
        let mut m = market("[[0, 600], [1, 0]]");
        let mut t = T0;
        while t <= T0 + 2 * HOUR_MS {
            m.step(t);
            t += 10_000;
        }
        let offered = m.tally.offered;
        assert!((450..750).contains(&offered), "{offered}");
        assert_eq!(m.tally.offered_per_hour.iter().sum::<u64>(), offered);
        // Counted at the step that sees them: one in the last 10 s of the hour falls in the next.
        assert!(
            m.tally.offered_per_hour[0] + 1 >= offered,
            "{:?}",
            m.tally.offered_per_hour
        );
        assert!(m.tally.offered_per_hour.len() <= 2);
        // Nobody pulled: every one went to other providers after 30 minutes.
        assert_eq!(m.tally.expired, offered);
        assert_eq!(m.take(), None);
        assert_eq!(m.rate_at(T0 + HOUR_MS / 2), 600.0);
        assert_eq!(m.rate_at(T0 + HOUR_MS), 0.0);
    }

    #[test]
    fn the_oldest_proof_on_offer_is_taken_first() {
        let mut m = market("[[0, 3600]]");
        m.step(T0 + 60_000);
        let first = m.take().unwrap();
        let second = m.take().unwrap();
        assert!(first <= second && second <= T0 + 60_000);
        assert_eq!(m.tally.expired, 0);
    }
}
