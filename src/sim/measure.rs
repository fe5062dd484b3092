//! The target share and the hours below target: what the fleet is asked to carry at a moment
//! (min(target, the market's rate)), when live capacity counts as enough (a share of it), and
//! the measure of the time it was not, counted in 5-minute bins. One place, used by the world
//! (when an outbid bid counts as replaced), the oracle and the bound (their own hours below
//! target) and the report (the agent's), so the three can never measure differently. Built on
//! plain values (capacity bins, a rate function): it names no other module of the simulator.

use crate::clock::Millis;

/// Live capacity under this share of [`wanted`] is below target.
pub const BELOW_TARGET_SHARE: f64 = 0.9;
/// Live capacity is tallied in bins of this length (the timer's period) for the hours below
/// target: fine enough to tell a boot's worth of delay (minutes) from none.
pub const CAP_BIN_MS: Millis = 300_000;
const MIN_MS: Millis = 60_000;
const HOUR_MS: Millis = 3_600_000;

/// What the fleet is asked to carry, in proofs/h: the market's `rate` capped by the target
/// (no cap when the target is 0).
pub fn wanted(rate: f64, target: f64) -> f64 {
    if target > 0.0 {
        rate.min(target)
    } else {
        rate
    }
}

/// [`wanted`] for a count of proofs (an hour's offered proofs).
pub fn wanted_count(offered: u64, target: f64) -> u64 {
    if target > 0.0 {
        offered.min(target as u64)
    } else {
        offered
    }
}

/// The live capacity that is enough at `rate` under `target`: [`BELOW_TARGET_SHARE`] of
/// [`wanted`].
pub fn enough(rate: f64, target: f64) -> f64 {
    BELOW_TARGET_SHARE * wanted(rate, target)
}

/// How long (in hours) live capacity stayed under [`enough`] from `start` to `end`. `cap_ms`
/// is the live capacity (proofs/h) integrated over each [`CAP_BIN_MS`] bin from `start`, in
/// proofs/h x ms (a missing bin is none); `rate_at` the market's rate, averaged over each
/// minute of a bin. Bins, not whole hours: the aim compares the figure with boot times. A
/// partial last bin counts pro rata.
pub fn hours_below_target(
    cap_ms: &[f64],
    rate_at: impl Fn(Millis) -> f64,
    target: f64,
    start: Millis,
    end: Millis,
) -> f64 {
    let mut total = 0.0;
    let mut b = 0usize;
    loop {
        let from = start + b as Millis * CAP_BIN_MS;
        if from >= end {
            break;
        }
        let to = (from + CAP_BIN_MS).min(end);
        let span = (to - from) as f64;
        let cap = cap_ms.get(b).copied().unwrap_or(0.0) / span;
        // The market's rate at each minute of the bin.
        let points = (CAP_BIN_MS / MIN_MS) as usize;
        let mut market = 0.0;
        for k in 0..points {
            market += rate_at(from + (span as Millis) * k as Millis / points as Millis);
        }
        market /= points as f64;
        let wanted = wanted(market, target);
        if wanted > 0.0 && cap < BELOW_TARGET_SHARE * wanted {
            total += span / HOUR_MS as f64;
        }
        b += 1;
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    const BIN: f64 = CAP_BIN_MS as f64;

    #[test]
    fn the_target_caps_what_is_wanted_unless_it_is_zero() {
        assert_eq!(wanted(400.0, 300.0), 300.0);
        assert_eq!(wanted(120.0, 300.0), 120.0);
        assert_eq!(wanted(400.0, 0.0), 400.0);
        assert_eq!(wanted_count(400, 300.5), 300);
        assert_eq!(wanted_count(7, 0.0), 7);
        assert!((enough(400.0, 300.0) - 270.0).abs() < 1e-9);
    }

    #[test]
    fn a_bin_is_below_when_its_capacity_is_under_the_share_of_what_is_wanted() {
        // Three bins at 100/h wanted: enough, just under the share, none tallied.
        let cap = [100.0 * BIN, 89.0 * BIN];
        let end = 3 * CAP_BIN_MS;
        let below = hours_below_target(&cap, |_| 100.0, 300.0, 0, end);
        assert!((below - 2.0 / 12.0).abs() < 1e-9, "{below}");
        // Nothing wanted (a quiet market): never below, whatever the capacity.
        assert_eq!(hours_below_target(&[], |_| 0.0, 300.0, 0, end), 0.0);
    }

    #[test]
    fn a_partial_last_bin_counts_pro_rata() {
        let end = CAP_BIN_MS + CAP_BIN_MS / 5;
        let below = hours_below_target(&[], |_| 50.0, 300.0, 0, end);
        assert!((below - 1.2 / 12.0).abs() < 1e-9, "{below}");
    }
}
