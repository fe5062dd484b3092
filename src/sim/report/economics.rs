//! The report's economic figures, from the world's own record (what really happened, at the
//! true rates and prices): short rentals, unprofitable launches, spend while the market was
//! dead, minutes over a cap, outbids and their replacements.

use super::{r4, Economics};
use crate::clock::Millis;
use crate::config::Config;
use crate::sim::world::{Phase, World};

const MIN_MS: Millis = 60_000;
/// A rental ended within this long of its start is short.
pub const SHORT_RENTAL_MS: Millis = 30 * MIN_MS;
use crate::sim::world::DEAD_GRACE_MS;

/// Our rentals launched within the run that ended (stopped or destroyed by us) within 30
/// minutes of their start: (not flagged, flagged). Flagged: it was dead, exited, outbid or
/// stuck loading past the stuck limit when it ended.
pub fn short_rentals(w: &World, start: Millis, end: Millis) -> (u64, u64) {
    let (mut plain, mut flagged) = (0, 0);
    for i in w
        .vast
        .insts
        .iter()
        .filter(|i| i.ours && i.created_at >= start)
    {
        let Some(ended) = i.ended_at.filter(|e| *e <= end) else {
            continue;
        };
        if ended - i.created_at >= SHORT_RENTAL_MS {
            continue;
        }
        let bad = match i.ended_phase {
            Some(Phase::Exited | Phase::Offline | Phase::Stopped) => true,
            Some(Phase::Provisioning | Phase::Loading) => ended - i.created_at > w.stuck_ms,
            _ => false,
        };
        if bad {
            flagged += 1;
        } else {
            plain += 1;
        }
    }
    (plain, flagged)
}

/// The GPU's true proofs/h in the scenario (the nominal rate of `hosts.gpus`).
fn true_rate(w: &World, gpu: &str) -> Option<f64> {
    w.scenario()
        .hosts
        .gpus
        .iter()
        .find(|g| g.name == gpu)
        .map(|g| g.rate)
}

/// Dollars billed in the 5-minute bins in which the market offered nothing, from
/// [`DEAD_GRACE_MS`] after it went quiet.
fn spend_in_dead_hours(w: &World, start: Millis, end: Millis) -> f64 {
    let bin = 5 * MIN_MS;
    let mut total = 0.0;
    let mut quiet_since: Option<Millis> = None;
    let mut t = start;
    while t < end {
        let to = (t + bin).min(end);
        let mut dead = true;
        let mut m = t;
        while m < to {
            if w.market.rate_at(m) > 0.0 {
                dead = false;
                break;
            }
            m += MIN_MS;
        }
        if dead {
            let since = *quiet_since.get_or_insert(t);
            if t - since >= DEAD_GRACE_MS {
                total += w.vast.spend_between(t, to);
            }
        } else {
            quiet_since = None;
        }
        t = to;
    }
    total
}

/// Hours our instances billed while their $/proof at the GPU's true rate left less than
/// `margin` of the revenue per proof (0 with no price modelled), in 5-minute bins.
fn unprofitable_hours(w: &World, start: Millis, end: Millis, margin: f64) -> f64 {
    let bin = 5 * MIN_MS;
    let mut total = 0.0;
    let mut t = start;
    while t < end {
        let to = (t + bin).min(end);
        let Some(rev) = w.revenue_per_proof(t) else {
            return 0.0;
        };
        let most = rev * (1.0 - margin) + 1e-12;
        for i in w.vast.insts.iter().filter(|i| i.ours) {
            let Some(rate) = true_rate(w, &i.gpu_name) else {
                continue;
            };
            for (a, b, dph) in &i.bill {
                let overlap = b.unwrap_or(to).min(to) - (*a).max(t);
                if overlap > 0 && dph / rate > most {
                    total += overlap as f64 / 3_600_000.0;
                }
            }
        }
        t = to;
    }
    total
}

pub fn build(
    conn: &rusqlite::Connection,
    w: &World,
    config: &Config,
    start: Millis,
    end: Millis,
    profit: Option<f64>,
    oracle_profit: Option<f64>,
) -> anyhow::Result<Economics> {
    // A FIL/USD the agent fetched and cached (the price slice's observe step), or a static one.
    let fetched: Option<f64> =
        conn.query_row("SELECT fil_usd FROM agent_state WHERE id = 1", [], |r| {
            r.get(0)
        })?;
    let agent_priced = config.price.fil_usd.is_some() || fetched.is_some();
    let margin = config.policy.min_margin;
    let mut unprofitable = 0;
    for i in w
        .vast
        .insts
        .iter()
        .filter(|i| i.ours && i.created_at >= start)
    {
        let (Some(rev), Some(rate)) =
            (w.revenue_per_proof(i.created_at), true_rate(w, &i.gpu_name))
        else {
            continue;
        };
        let billed = i.bill.first().map_or(i.dph, |b| b.2);
        if billed / rate > rev * (1.0 - margin) + 1e-12 {
            unprofitable += 1;
        }
    }
    let outbids = w.vast.tally.outbid_times.len();
    let worst = w
        .outbid_replace_ms
        .iter()
        .chain(w.outbids_open(end).iter())
        .copied()
        .max();
    let share = match (profit, oracle_profit) {
        (Some(p), Some(o)) if o > 0.0 => Some(r4(p / o)),
        _ => None,
    };
    Ok(Economics {
        agent_priced,
        unprofitable_launches: unprofitable,
        unprofitable_instance_hours: r4(unprofitable_hours(w, start, end, margin)),
        loss_instance_hours: r4(unprofitable_hours(w, start, end, 0.0)),
        spend_in_dead_hours: r4(spend_in_dead_hours(w, start, end)),
        over_cap_minutes: w.over_cap_minutes,
        most_instances_in_dead_hours: w.most_billing_dead,
        outbids: outbids as u64,
        resumes: w.vast.tally.resumes,
        outbid_replace_mins_max: worst.map(|d| r4(d as f64 / MIN_MS as f64)),
        profit_share_of_oracle: share,
    })
}
