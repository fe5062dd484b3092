//! The oracle: a controller that knows the market's demand in advance and the fleet's true
//! state at every moment, acting on the same world (same hosts, same boot times and failures
//! for a seed) every 5 minutes, within the same money caps but without the launch window or
//! vast.ai's 429s. It is the yardstick of the decision-quality table, not a policy to ship.
//!
//! [`Foresight::Reactive`] is the same controller without the look-ahead and inside the launch
//! window: it learns the market's rate the moment it changes and sizes the fleet to it exactly,
//! but can launch only as the window allows (the emergency allowance while no worker of ours
//! lives). No policy that learns demand from the queue does better: it is the bound the
//! benchmark prints beside the rules, to tell what the window and reacting cost from what the
//! rules cost.

use super::measure;
use super::scenario::Scenario;
use super::world::{Phase, World};
use crate::clock::Millis;
use crate::config::{Config, OfferType};
use crate::policy::launch::bid_price;
use crate::ratelimit::window::window_state;
use crate::vast::OfferQuery;

const STEP_MS: Millis = 300_000;

/// What the controller knows of the demand to come.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Foresight {
    /// The market's peak rate over the next boot time; no launch window: the yardstick.
    Full,
    /// The rate now, exactly, and the launch window as the guardrails count it.
    Reactive,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct OracleResult {
    pub dollars: f64,
    /// USD its proofs earned (None: no price modelled).
    pub revenue: Option<f64>,
    pub completed: u64,
    pub hours_below_target: f64,
    pub launches: u64,
    /// When each launch was made.
    pub launch_times: Vec<Millis>,
}

impl OracleResult {
    /// Revenue less dollars (None: no price modelled).
    pub fn profit(&self) -> Option<f64> {
        self.revenue.map(|r| r - self.dollars)
    }

    pub fn dollars_per_proof(&self) -> f64 {
        if self.completed == 0 {
            0.0
        } else {
            self.dollars / self.completed as f64
        }
    }
}

/// How long a new instance takes to prove, at the 90th percentile: boot plus Curio's start.
pub fn lead_ms(s: &Scenario) -> Millis {
    ((s.hosts.boot_mins.1 * 60.0 + s.hosts.curio_start_secs.1 + 60.0) * 1000.0) as Millis
}

pub fn run(
    scenario: &Scenario,
    seed: u64,
    config: &Config,
    start: Millis,
    end: Millis,
    foresight: Foresight,
) -> OracleResult {
    let mut w = World::new(scenario, seed, start, &config.vast.label_prefix);
    w.configure(config);
    w.set_up_start();
    let lead = lead_ms(scenario);
    let mut launches = 0;
    // Launch times for the window: the start's own instances count (the incident's window is
    // spent when it begins).
    let mut launched_at: Vec<Millis> = w.ours_view().iter().map(|v| v.created_at).collect();
    let first_ours = launched_at.len();
    let mut t = start;
    while t < end {
        w.advance(t);
        let allowed = match foresight {
            Foresight::Full => u32::MAX,
            Foresight::Reactive => {
                // The emergency allowance while none of ours lives.
                let none_alive = !w.ours_view().iter().any(|v| v.alive);
                let win = window_state(&launched_at, t, &config.policy, none_alive);
                win.limit.saturating_sub(win.used)
            }
        };
        let n = decide(&mut w, config, t, lead, foresight, allowed);
        launched_at.extend(std::iter::repeat_n(t, n as usize));
        launches += n;
        t += STEP_MS;
    }
    w.advance(end);
    OracleResult {
        dollars: w.vast.spend_ours(end),
        revenue: scenario.price.as_ref().map(|_| w.curio.tally.revenue),
        completed: w.curio.tally.completed,
        hours_below_target: w.hours_below_target(config.policy.target_proofs_per_hour, start, end),
        launches,
        launch_times: launched_at.split_off(first_ours),
    }
}

/// The highest market rate in [from, to].
fn peak_rate(w: &World, from: Millis, to: Millis) -> f64 {
    let mut t = from;
    let mut peak: f64 = 0.0;
    while t <= to {
        peak = peak.max(w.market.rate_at(t));
        t += 60_000;
    }
    peak
}

fn decide(
    w: &mut World,
    config: &Config,
    now: Millis,
    lead: Millis,
    foresight: Foresight,
    allowed: u32,
) -> u64 {
    let p = &config.policy;
    let cap = |r: f64| measure::wanted(r, p.target_proofs_per_hour);
    // Proofs already queued beyond Curio's buffer are worked off within the hour.
    let backlog = w.curio.queued().saturating_sub(8) as f64;
    let ahead = |to: Millis| match foresight {
        Foresight::Full => peak_rate(w, now, to),
        Foresight::Reactive => w.market.rate_at(now),
    };
    let want_soon = cap(ahead(now + lead + STEP_MS)) + backlog;
    let want_now = cap(ahead(now + lead)) + backlog;
    // With a price: the most a proof may cost (policy.min_margin), at its true rate.
    let max_cost = w
        .revenue_per_proof(now)
        .map(|rev| rev * (1.0 - p.min_margin) + 1e-12);
    let bids = config.vast.offers.offer_type == OfferType::Interruptible;

    // Dead, stuck and outbid instances earn nothing: destroy them at once.
    for v in w.ours_view() {
        let stuck = matches!(v.phase, Phase::Provisioning | Phase::Loading)
            && now - v.created_at > lead * 3 / 2;
        if matches!(v.phase, Phase::Exited | Phase::Offline | Phase::Stopped) || stuck {
            let _ = w.destroy(v.id, now);
        }
    }
    let q = OfferQuery {
        gpu_names: config.vast.offers.gpu_names.clone(),
        min_reliability: Some(config.vast.offers.min_reliability),
        max_dph: config.vast.offers.max_dph_per_instance,
        verified_only: config.vast.offers.verified_only,
        ..Default::default()
    };
    // Offers at their price (a bid's for a bid fleet) and true rate, cheapest per proof
    // first, profitable ones only when a price is known.
    let mut offers: Vec<(u64, f64, f64)> = w
        .vast
        .search(&q)
        .into_iter()
        .map(|o| {
            let dph = if bids {
                bid_price(&o, config)
            } else {
                o.dph_total
            };
            (o.id, dph, w.vast.offer_rate(o.id).unwrap_or(1.0))
        })
        .filter(|(_, dph, rate)| max_cost.is_none_or(|m| dph / rate <= m))
        .collect();
    offers.sort_by(|a, b| (a.1 / a.2).total_cmp(&(b.1 / b.2)).then(a.0.cmp(&b.0)));
    // An idle instance that no longer pays (the price fell) goes when a profitable offer
    // can take its place.
    if let Some(m) = max_cost {
        if !offers.is_empty() {
            for v in w.ours_view() {
                if v.alive && !v.busy && v.dph / v.rate > m {
                    let _ = w.destroy(v.id, now);
                }
            }
        }
    }
    let view = w.ours_view();
    let mut capacity: f64 = view.iter().map(|v| v.rate).sum();
    let mut count = view.len() as u32;
    let mut dph: f64 = view.iter().map(|v| v.dph).sum();

    let mut launched = 0;
    if capacity < want_soon {
        for (id, o_dph, rate) in offers {
            if capacity >= want_soon || launched >= u64::from(allowed) {
                break;
            }
            if p.max_instances.is_some_and(|m| count >= m)
                || p.max_dph_total.is_some_and(|m| dph + o_dph > m + 1e-9)
            {
                continue;
            }
            let label = format!(
                "{}-oracle-{}-{launched}",
                config.vast.label_prefix,
                now / 1000
            );
            if w.vast
                .create_bid(id, &label, now, bids.then_some(o_dph))
                .is_ok()
            {
                capacity += rate;
                count += 1;
                dph += o_dph;
                launched += 1;
            }
        }
    } else {
        // Surplus: the dearest idle live instances go while the rest still cover the lead.
        let mut idle: Vec<_> = view.iter().filter(|v| v.alive && !v.busy).collect();
        idle.sort_by(|a, b| {
            (b.dph / b.rate)
                .total_cmp(&(a.dph / a.rate))
                .then(a.id.cmp(&b.id))
        });
        for v in idle {
            if capacity - v.rate >= want_now.max(want_soon) && capacity - v.rate > 0.0 {
                let _ = w.destroy(v.id, now);
                capacity -= v.rate;
            }
        }
    }
    launched
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{effective_config, scenario, Options, START};

    /// Demand steps from 60 to 400 proofs/h at hour 2 (target 300); no host ever fails.
    const STEP: &str = "name = \"t\"\ndescription = \"t\"\nhours = 3\n[market]\nrate = [[0, 60], [2, 400]]\n[hosts]\nboot_fail = 0\nstuck = 0\noffline_per_day = 0\ncrash_per_day = 0\n[start]\nlive = 2\n";

    fn both() -> (OracleResult, OracleResult, Config) {
        let opts = Options::new(scenario::parse(STEP).unwrap(), 1);
        let config = effective_config(&opts).unwrap();
        let end = START + 3 * 3_600_000;
        let full = run(&opts.scenario, 1, &config, START, end, Foresight::Full);
        let reactive = run(&opts.scenario, 1, &config, START, end, Foresight::Reactive);
        (full, reactive, config)
    }

    #[test]
    fn the_reactive_bound_waits_for_the_change_and_keeps_to_the_window() {
        let (full, reactive, config) = both();
        let step = START + 2 * 3_600_000;
        let window = config.policy.launch_window_minutes as Millis * 60_000;
        let most_in_a_window = |times: &[Millis]| {
            times
                .iter()
                .map(|&t| times.iter().filter(|&&u| u > t - window && u <= t).count())
                .max()
                .unwrap_or(0) as u32
        };
        // The yardstick launches ahead of the step, more at once than the window allows; the
        // bound only once the rate has changed, and never past the window (the fleet lives
        // throughout: no emergency allowance).
        assert!(
            full.launch_times
                .iter()
                .any(|&t| t < step && t >= step - 1_800_000),
            "{full:?}"
        );
        assert!(most_in_a_window(&full.launch_times) > config.policy.launch_window_max);
        assert!(most_in_a_window(&reactive.launch_times) <= config.policy.launch_window_max);
        let after: Vec<Millis> = reactive
            .launch_times
            .iter()
            .copied()
            .filter(|&t| t >= step - 1_800_000)
            .collect();
        assert!(
            after.len() > 3 && after.iter().all(|&t| t >= step),
            "{reactive:?}"
        );
        // Reacting inside the window costs time below target that foresight does not.
        assert!(
            reactive.hours_below_target > full.hours_below_target,
            "{} vs {}",
            reactive.hours_below_target,
            full.hours_below_target
        );
    }
}
