//! Seeded random draws for the simulator: independent ChaCha8 streams per purpose (market,
//! one per host, one per instance, vast.ai's 429s), so a seed gives the same world whatever
//! the agent does, and the oracle meets the same hosts as the agent.

use rand_chacha::rand_core::{Rng as _, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// What a stream is for; part of its seed.
#[derive(Debug, Clone, Copy)]
pub enum Purpose {
    Market = 1,
    Offers = 2,
    Host = 3,
    Instance = 4,
    RateLimit = 5,
    /// Outbids and resumes of interruptible instances.
    Bids = 6,
}

#[derive(Debug, Clone)]
pub struct Rng(ChaCha8Rng);

/// SplitMix64: spreads (seed, purpose, index) over the whole seed space.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl Rng {
    pub fn stream(seed: u64, purpose: Purpose, index: u64) -> Rng {
        let s = mix(mix(seed) ^ mix(purpose as u64) ^ mix(index.wrapping_mul(0x1000_0001)));
        Rng(ChaCha8Rng::seed_from_u64(s))
    }

    /// Uniform in [0, 1), from the top 53 bits (the same on every platform).
    pub fn unit(&mut self) -> f64 {
        (self.0.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    pub fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }

    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    /// Exponential with this mean.
    pub fn exp(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.unit()).ln()
    }

    /// Standard normal (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.unit();
        let u2 = self.unit();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    /// Log-normal given its median and 90th percentile.
    pub fn lognormal(&mut self, median: f64, p90: f64) -> f64 {
        let sigma = (p90.max(median * 1.0001) / median).ln() / 1.281_551_6;
        median * (sigma * self.normal()).exp()
    }

    pub fn index(&mut self, n: usize) -> usize {
        ((self.unit() * n as f64) as usize).min(n.saturating_sub(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_reproducible_and_distinct() {
        let a: Vec<f64> = (0..4)
            .map({
                let mut r = Rng::stream(7, Purpose::Host, 3);
                move |_| r.unit()
            })
            .collect();
        let b: Vec<f64> = (0..4)
            .map({
                let mut r = Rng::stream(7, Purpose::Host, 3);
                move |_| r.unit()
            })
            .collect();
        let mut c = Rng::stream(7, Purpose::Host, 4);
        assert_eq!(a, b);
        assert_ne!(a[0], c.unit());
        assert!(a.iter().all(|x| (0.0..1.0).contains(x)));
    }

    #[test]
    fn lognormal_median_is_about_right() {
        let mut r = Rng::stream(1, Purpose::Market, 0);
        let mut v: Vec<f64> = (0..4001).map(|_| r.lognormal(6.0, 12.0)).collect();
        v.sort_by(f64::total_cmp);
        assert!((v[2000] - 6.0).abs() < 0.5, "{}", v[2000]);
        assert!((v[3600] - 12.0).abs() < 1.5, "{}", v[3600]);
    }
}
