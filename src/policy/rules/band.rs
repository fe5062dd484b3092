//! Demand's band as the surplus rule judges it, and whether a stop pays for itself against
//! it (split from `policy::rules` for its length; the rules use it through `rules::`).

use super::{
    Config, Demand, HOST_FAILURE_RISK, LONG_WINDOW_HOURS, LONG_WINDOW_MIN_HOURS,
    STOP_UTILISATION_MAX, SURPLUS_DEVIATIONS, UNPRICED_STOP_UTILISATION_MAX,
};

/// Demand as the surplus rule judges it: its level and how far it may stray. Where Curio's
/// history spans at least [`LONG_WINDOW_MIN_HOURS`] and the last hour lies within two of its
/// own Poisson deviations of the history's average (up to [`LONG_WINDOW_HOURS`]), demand is
/// steady: its level is that average (never under the hour less one deviation), known to
/// the square root of the window's count. Otherwise demand moved, or there is too little
/// history: the level is the hour's count, known to its square root.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DemandBand {
    /// Proofs completed in the last hour.
    pub hour: f64,
    /// Proofs/h over the history's window (None: under [`LONG_WINDOW_MIN_HOURS`] of it).
    pub long: Option<f64>,
    /// The level of demand, proofs/h.
    pub level: f64,
    /// One standard deviation of that level.
    pub sigma: f64,
    /// The level is the history's: demand has been steady for hours.
    pub steady: bool,
}

impl DemandBand {
    pub fn of(d: &Demand) -> DemandBand {
        let hour = d.completed_1h as f64;
        let hour_dev = hour.max(1.0).sqrt();
        let proofs: u64 = d.history.iter().map(|h| u64::from(h.proofs)).sum();
        let span = d
            .history
            .iter()
            .map(|h| h.first_end_secs_ago)
            .max()
            .unwrap_or(0) as f64
            / 3600.0;
        let span = span.min(LONG_WINDOW_HOURS);
        let long = (span >= LONG_WINDOW_MIN_HOURS).then(|| proofs as f64 / span);
        match long {
            Some(l) if (l - hour).abs() <= 2.0 * hour_dev => DemandBand {
                hour,
                long,
                level: l.max(hour - hour_dev),
                sigma: (l.max(1.0) / span).sqrt(),
                steady: true,
            },
            _ => DemandBand {
                hour,
                long,
                level: hour,
                sigma: hour_dev,
                steady: false,
            },
        }
    }

    /// Demand as the day's history foretells it where the profile shows a fall
    /// (`Forecast::fall`): its level the larger of that forecast and the last 15 minutes'
    /// rate (the present must not be doing more), known to the hour's Poisson deviation.
    pub fn foretold(d: &Demand, forecast: f64) -> DemandBand {
        let level = forecast.max(d.completed_15m as f64 * 4.0);
        DemandBand {
            hour: d.completed_1h as f64,
            long: None,
            level,
            sigma: level.max(1.0).sqrt(),
            steady: false,
        }
    }

    /// The level demand may reach again soon: [`SURPLUS_DEVIATIONS`] above its level.
    pub fn high(&self) -> f64 {
        self.level + SURPLUS_DEVIATIONS * self.sigma
    }

    /// Is `capacity` enough to leave after a stop? It must cover [`DemandBand::high`], and
    /// where demand is steady at no more than [`STOP_UTILISATION_MAX`]: a fleet left busier
    /// than that sees backlogs from the arrivals' noise alone, and relaunches. Where demand
    /// moved (or the history is short), the band itself is wide, and a fleet left after a
    /// fall sheds its surplus sooner. Without a price (`priced` false) the target is the goal,
    /// and the fleet is left at no more than [`UNPRICED_STOP_UTILISATION_MAX`] either way.
    pub fn covered_by(&self, capacity: f64, priced: bool) -> bool {
        let busy = if !priced {
            UNPRICED_STOP_UTILISATION_MAX
        } else if self.steady {
            STOP_UTILISATION_MAX
        } else {
            1.0
        };
        capacity * busy >= self.high()
    }

    /// Expected hours before demand needs more than `capacity` again: each pass (the timer's
    /// period) demand is taken as drawn from a normal law around its level with the hour's
    /// spread, and the first pass above `capacity` comes after 1/p passes.
    pub fn hours_until_needed(&self, capacity: f64, pass_hours: f64) -> f64 {
        let spread = self.hour.max(1.0).sqrt().max(self.sigma);
        let p = normal_tail((capacity - self.level) / spread);
        pass_hours / p.max(1e-12)
    }
}

/// What a relaunch costs, in hours of the instance's own $/h: a normal boot (half of
/// `policy.stuck_loading_mins`) plus [`HOST_FAILURE_RISK`] of a failed one (the whole
/// `stuck_loading_mins`, then another boot).
pub fn relaunch_hours(config: &Config) -> f64 {
    let stuck = config.policy.stuck_loading_mins as f64 / 60.0;
    let boot = stuck / 2.0;
    boot + HOST_FAILURE_RISK * (stuck + boot)
}

/// Does stopping an idle instance pay for itself? Its idle cost until demand needs the
/// capacity again (`capacity_left` is what stays) must exceed what a relaunch then costs
/// (both are at its $/h, so they compare in hours).
pub fn stop_pays(band: &DemandBand, capacity_left: f64, config: &Config) -> bool {
    let pass_hours = (config.run.timer_period_secs.max(60) as f64) / 3600.0;
    band.hours_until_needed(capacity_left, pass_hours) >= relaunch_hours(config)
}

/// P(X > z) for a standard normal X (Abramowitz and Stegun 7.1.26, error under 1.5e-7).
pub(super) fn normal_tail(z: f64) -> f64 {
    let x = z.abs() / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.327_591_1 * x);
    let poly = t
        * (0.254_829_592
            + t * (-0.284_496_736
                + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    let erfc = poly * (-x * x).exp();
    if z >= 0.0 {
        erfc / 2.0
    } else {
        1.0 - erfc / 2.0
    }
}
