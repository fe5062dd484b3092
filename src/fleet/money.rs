//! Money arithmetic of the fleet: $/h of what bills, spend since a time, a row's proofs/h.

use crate::clock::Millis;
use crate::config::Config;
use crate::store::instances::{is_paused, InstanceRow};

use super::state::{is_billing_state, STOPPED};

const HOUR_MS: f64 = 3_600_000.0;

/// The daily cap looks one hour ahead: a launch must leave the fleet (with it) able to run
/// one more hour inside `daily_spend_max` (`policy::guardrails`, and the headroom the
/// observation states).
pub const DAILY_LOOKAHEAD_HOURS: f64 = 1.0;

/// The most $/h one more instance may cost under both money limits (may be <= 0): what is
/// left under `max_dph_total` (none while unset), and under `daily_spend_max` today's spend
/// plus an hour of the fleet with it. The guardrail's test (`guardrails::offer_headroom`) and
/// the headroom the observation states (`Snapshot::headroom_dph`).
pub fn dph_room(policy: &crate::config::PolicyConfig, fleet_dph: f64, spent_today: f64) -> f64 {
    let mut room = policy.max_dph_total.unwrap_or(0.0) - fleet_dph;
    if let Some(daily) = policy.daily_spend_max {
        room = room.min((daily - spent_today) / DAILY_LOOKAHEAD_HOURS - fleet_dph);
    }
    room
}

/// $/h of the rows that bill by the hour, as the money guardrail counts it: the full price
/// of those in a billing state (an outbid bid included), the disk (`storage_dph`) of stopped
/// ones; gone ones nothing.
pub fn dph_of(rows: &[InstanceRow]) -> f64 {
    rows.iter()
        .filter_map(|i| {
            if is_billing_state(i.state) {
                i.dph
            } else if i.state == STOPPED {
                i.storage_dph
            } else {
                None
            }
        })
        .sum::<f64>()
        // An empty float sum is -0.0.
        + 0.0
}

/// An instance of ours that bills with no price known (vast.ai listed it without
/// `dph_total`, or with a figure no host charges).
pub fn is_unpriced(row: &InstanceRow) -> bool {
    is_billing_state(row.state) && row.dph.is_none()
}

/// What an unpriced instance counts against `policy.max_dph_total`: the most one instance may
/// cost (`vast.offers.max_dph_per_instance`), else the whole cap; None when neither is set.
pub fn unpriced_dph(config: &Config) -> Option<f64> {
    config
        .vast
        .offers
        .max_dph_per_instance
        .or(config.policy.max_dph_total)
}

/// $/h of `rows` as the money caps count it: [`dph_of`], and each instance that bills with no
/// price from vast.ai ([`is_unpriced`]) at `unpriced_dph` ([`unpriced_dph`]), never at $0.
/// The snapshot's, `inspect`'s and the metrics' figure.
pub fn caps_dph(rows: &[InstanceRow], unpriced_dph: f64) -> f64 {
    let unpriced = rows.iter().filter(|i| is_unpriced(i)).count();
    dph_of(rows) + unpriced as f64 * unpriced_dph
}

/// Which caps the billing part of `rows` is over, with its figures: `max_instances (4, cap
/// 2)`, `max_dph_total ($1.32/h, cap $0.50/h)`, or both; None within them. Only what a stop
/// can take away counts: a stopped instance's disk does not.
pub fn over_caps(rows: &[&InstanceRow], p: &crate::config::PolicyConfig) -> Option<String> {
    // Read in place: a clone of every row at every call made a pass's plan quadratic in the
    // fleet's size (a 2,000-instance simulated fleet spent a quarter of its time copying).
    let billing = || rows.iter().filter(|r| is_billing_state(r.state));
    let n = billing().count();
    let mut over = Vec::new();
    if let Some(m) = p.max_instances.filter(|m| n as u32 > *m) {
        over.push(format!("max_instances ({n}, cap {m})"));
    }
    // As `dph_of` adds them (billing rows: their dph), in the same order.
    let dph = billing().filter_map(|r| r.dph).sum::<f64>() + 0.0;
    if let Some(m) = p.max_dph_total.filter(|m| dph > m + 1e-9) {
        over.push(format!("max_dph_total (${dph:.2}/h, cap ${m:.2}/h)"));
    }
    (!over.is_empty()).then(|| over.join(" and "))
}

/// Estimated dollars spent by these instances between `since` and `now`, as vast.ai bills
/// them: each row's `dph` for the hours it was alive in that span (from `created_at` to
/// `gone_at`, or to `now`), except the hours of its spans: stopped or outbid (and its present
/// state when paused: `store::instances::is_paused`), which bill its disk (`storage_dph`)
/// instead, and those billed at an earlier price (`instances::paused_spans_after`). A row vast.ai lists without a price counts at `unpriced_dph`
/// ([`unpriced_dph`]), never at $0. Bandwidth is not counted.
pub fn spend_since(rows: &[InstanceRow], since: Millis, now: Millis, unpriced_dph: f64) -> f64 {
    rows.iter()
        .map(|r| {
            let start = r.created_at.max(since);
            let end = r.gone_at.unwrap_or(now).min(now);
            let hours = |from: Millis, to: Millis| {
                (to.min(end) - from.max(start)).max(0) as f64 / HOUR_MS
            };
            let open = is_paused(r.state).then(|| (r.state_since, end, r.storage_dph.unwrap_or(0.0)));
            let (mut paused, mut disk) = (0.0, 0.0);
            for (from, to, disk_dph) in r.paused_spans.iter().copied().chain(open) {
                let h = hours(from, to);
                paused += h;
                disk += disk_dph * h;
            }
            r.dph.unwrap_or(unpriced_dph) * (hours(start, end) - paused).max(0.0) + disk
        })
        .sum::<f64>()
        // An empty float sum is -0.0, which prints as "$-0.00".
        + 0.0
}

/// Proofs per hour of one instance of ours: its GPU's rate (pinned, else `measured`, see
/// `fleet::rates`), else the default rate.
pub fn rate_of(row: &InstanceRow, config: &Config, measured: &super::rates::Rates) -> f64 {
    match row.gpu_name.as_deref() {
        Some(gpu) => super::rates::gpu_rate(config, measured, gpu),
        None => config.policy.proofs_per_hour_per_instance,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::fixtures::*;
    use crate::fleet::state::*;

    const DAY_MS: Millis = 86_400_000;

    /// The live rows as the table holds them, priced as the caps count them: only billing
    /// ones at their price, a stopped one at its disk (none here), a gone one nothing, one
    /// with no price at the most one may cost (the metrics' figure; it was SQL of its own).
    #[test]
    fn live_rows_are_priced_as_the_caps_count_them() {
        let (_dir, s) = crate::store::test_store(0);
        let live = || crate::store::instances::live(&s.conn).unwrap();
        assert_eq!(caps_dph(&live(), 0.9), 0.0);
        let mut gone = row("d", Some(4), GONE, 8.0);
        gone.gone_at = Some(1);
        for r in [
            row("a", Some(1), PROVING, 0.5),
            row("b", Some(2), PROVING, 0.25),
            row("c", Some(3), STOPPED, 4.0),
            gone,
            row("e", Some(5), BOOTED, 0.125),
        ] {
            crate::store::instances::upsert(&s.conn, &r).unwrap();
        }
        assert_eq!(caps_dph(&live(), 0.9), 0.875);
        let mut unpriced = row("f", Some(6), BOOTED, 0.0);
        unpriced.dph = None;
        crate::store::instances::upsert(&s.conn, &unpriced).unwrap();
        assert_eq!(caps_dph(&live(), 0.9), 1.775);
    }

    #[test]
    fn nothing_spent_is_zero_not_minus_zero() {
        let spent = spend_since(&[], 0, NOW, 1.0);
        assert!(spent == 0.0 && spent.is_sign_positive(), "{spent}");
        assert_eq!(format!("${spent:.2}"), "$0.00");
    }

    #[test]
    fn stopped_disks_bill_and_outbid_bids_count_in_full_against_the_caps() {
        let mut stopped = row("s", Some(1), STOPPED, 0.5);
        stopped.storage_dph = Some(0.02);
        stopped.state_since = NOW - 60 * MIN;
        stopped.created_at = NOW - 120 * MIN;
        let outbid = row("o", Some(2), OUTBID, 0.3);
        let gone = row("g", Some(3), GONE, 9.0);
        let rows = [stopped, outbid, gone];
        assert!((dph_of(&rows) - 0.32).abs() < 1e-9, "{}", dph_of(&rows));
        // An hour running at $0.50 and an hour stopped at $0.02 for the disk.
        let spent = spend_since(&rows[..1], NOW - 180 * MIN, NOW, 0.0);
        assert!((spent - 0.52).abs() < 1e-9, "{spent}");
    }

    #[test]
    fn spend_counts_hours_alive_today() {
        let day = NOW - NOW.rem_euclid(DAY_MS);
        let mut a = row("a", Some(1), PROVING, 1.0);
        a.created_at = day - 5 * 60 * MIN; // yesterday: only today's part counts
        let mut b = row("b", Some(2), GONE, 2.0);
        b.created_at = day;
        b.gone_at = Some(day + 30 * MIN);
        let now = day + 2 * 60 * MIN;
        let spent = spend_since(&[a, b], day, now, 0.0);
        assert!((spent - 3.0).abs() < 1e-9, "{spent}");
    }

    /// A running instance listed at a new price: the hours before count at the old one, a
    /// paused span between at its disk (a walkthrough saw ten hours at $0.40 counted at $2.00
    /// once the listing said $2.00, and the daily cap then refuse WORKERS DEAD's launch).
    #[test]
    fn a_new_price_counts_from_when_it_was_listed() {
        let (_dir, s) = crate::store::test_store(0);
        let day = NOW - NOW.rem_euclid(DAY_MS);
        let at = |h: i64| day + h * 60 * MIN;
        let write = |r: &InstanceRow| crate::store::instances::upsert(&s.conn, r).unwrap();
        let spent = |now: Millis| {
            let rows = crate::store::instances::alive_since(&s.conn, day).unwrap();
            spend_since(&rows, day, now, 2.0)
        };
        let mut bid = row("bid", Some(1), PROVING, 0.4);
        bid.storage_dph = Some(0.01);
        (bid.created_at, bid.state_since, bid.last_seen_at) = (at(0), at(0), Some(at(0)));
        write(&bid);
        (bid.state, bid.state_since, bid.last_seen_at) = (OUTBID, at(1), Some(at(1)));
        write(&bid);
        (bid.state, bid.state_since, bid.last_seen_at) = (PROVING, at(2), Some(at(2)));
        write(&bid);
        bid.last_seen_at = Some(at(9));
        write(&bid);
        (bid.dph, bid.last_seen_at) = (Some(2.0), Some(at(10)));
        write(&bid);
        let want = 0.4 * 9.0 + 0.01 + 2.0;
        assert!(
            (spent(at(11)) - want).abs() < 1e-9,
            "{} != {want}",
            spent(at(11))
        );
        // And back down: the two hours at $2.00 stay at $2.00.
        (bid.dph, bid.last_seen_at) = (Some(0.4), Some(at(12)));
        write(&bid);
        let want = 0.4 * 9.0 + 0.01 + 2.0 * 2.0 + 0.4;
        assert!(
            (spent(at(13)) - want).abs() < 1e-9,
            "{} != {want}",
            spent(at(13))
        );
    }

    /// Outbid at $0.40, resumed at a raised $2.00 (a re-test): the hours before the outbid
    /// stay at $0.40, the outbid hour bills its disk, the new price counts from the resume.
    #[test]
    fn a_price_changed_across_a_pause_counts_from_the_resume() {
        let (_dir, s) = crate::store::test_store(0);
        let day = NOW - NOW.rem_euclid(DAY_MS);
        let at = |h: i64| day + h * 60 * MIN;
        let write = |r: &InstanceRow| crate::store::instances::upsert(&s.conn, r).unwrap();
        let mut bid = row("bid", Some(2), PROVING, 0.4);
        bid.storage_dph = Some(0.01);
        (bid.created_at, bid.state_since, bid.last_seen_at) = (at(0), at(0), Some(at(7)));
        write(&bid);
        (bid.state, bid.state_since, bid.last_seen_at) = (OUTBID, at(8), Some(at(8)));
        write(&bid);
        (bid.state, bid.state_since, bid.last_seen_at) = (PROVING, at(9), Some(at(9)));
        bid.dph = Some(2.0);
        write(&bid);
        let rows = crate::store::instances::alive_since(&s.conn, day).unwrap();
        let spent = spend_since(&rows, day, at(10), 2.0);
        let want = 0.4 * 8.0 + 0.01 + 2.0;
        assert!((spent - want).abs() < 1e-9, "{spent} != {want}");
    }

    /// Today's spend as vast.ai bills it, through the table's own writes (`upsert` keeps the
    /// paused spans): an outbid bid bills its disk, not its GPU, while paused; one stopped and
    /// then destroyed, or started again, bills its disk for the stopped hours, not its full
    /// price (the numbers walkthrough: $2.87 counted of $1.62 spent refused a WORKERS DEAD
    /// launch); one listed without a price counts at the caps' figure, never $0.
    #[test]
    fn paused_hours_bill_the_disk_whatever_came_after() {
        let (_dir, s) = crate::store::test_store(0);
        let day = NOW - NOW.rem_euclid(DAY_MS);
        let at = |h: i64| day + h * 60 * MIN;
        let write = |r: &InstanceRow| crate::store::instances::upsert(&s.conn, r).unwrap();
        let spent = |now: Millis| {
            let rows = crate::store::instances::alive_since(&s.conn, day).unwrap();
            spend_since(&rows, day, now, 2.0)
        };
        // A bid at $0.40/h (disk $0.01/h) from 00:00, outbid 01:00-03:00, running again.
        let mut bid = row("bid", Some(1), PROVING, 0.4);
        bid.storage_dph = Some(0.01);
        bid.created_at = at(0);
        bid.state_since = at(0);
        write(&bid);
        bid.state = OUTBID;
        bid.state_since = at(1);
        write(&bid);
        let during = spent(at(2));
        assert!((during - (0.4 + 0.01)).abs() < 1e-9, "{during}");
        bid.state = PROVING;
        bid.state_since = at(3);
        write(&bid);
        let after = spent(at(4));
        assert!((after - (0.4 * 2.0 + 0.01 * 2.0)).abs() < 1e-9, "{after}");
        // Another at $0.30/h (disk $0.03/h): stopped 01:00, destroyed 02:30.
        let mut spare = row("spare", Some(2), PROVING, 0.3);
        spare.storage_dph = Some(0.03);
        spare.created_at = at(0);
        write(&spare);
        spare.state = STOPPED;
        spare.state_since = at(1);
        write(&spare);
        spare.state = GONE;
        spare.state_since = at(2) + 30 * MIN;
        spare.gone_at = Some(at(2) + 30 * MIN);
        write(&spare);
        let both = spent(at(4));
        assert!((both - after - (0.3 + 0.03 * 1.5)).abs() < 1e-9, "{both}");
        // One listed without a price, an hour: at the caps' $2/h, not $0.
        let mut unpriced = row("u", Some(3), BOOTED, 0.0);
        unpriced.dph = None;
        unpriced.created_at = at(3);
        write(&unpriced);
        assert!((spent(at(4)) - both - 2.0).abs() < 1e-9);
    }
}
