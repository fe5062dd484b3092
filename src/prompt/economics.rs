//! The economics line of the observation (issue 17): what a proof earns and where each part
//! comes from, what the fleet costs per proof, the most a new launch may cost per proof and
//! the profit per hour; or "price unknown" (the profit check is off then; `doctor` says why). The
//! fleet's figures count only the completions of our own instances' workers (issue 22); the
//! cluster's other completions are named apart. Pure.

use crate::config::Config;
use crate::demand::Demand;
use crate::fleet::rates::{completions_1h, Completions};
use crate::fleet::Snapshot;
use crate::price::{fleet_economics, max_cost_per_proof, FleetEconomics, Price};

impl Snapshot {
    /// The last hour's completions with ours apart (None: no reading).
    pub fn completions_1h(&self) -> Option<Completions> {
        self.demand
            .as_ref()
            .map(|d| completions_1h(&self.instances, d))
    }

    /// The fleet's economics this pass: its $/h over our own completions of the last hour,
    /// at this pass's price (revenue and profit unknown while the price is).
    pub fn economics(&self) -> FleetEconomics {
        let c = self.completions_1h();
        fleet_economics(
            self.price.as_ref(),
            self.fleet_dph(),
            c.and_then(|c| c.ours),
            c.and_then(|c| c.others()),
            self.demand.as_ref().and_then(Demand::paid_share),
        )
    }
}

/// The economics line while no price is known.
pub const UNKNOWN_PRICE_LINE: &str = "Economics: price unknown, so profit is not checked.";

/// `$0.0400 (0.01 FIL from config x FIL/USD 4.000 from url)`.
pub fn revenue_text(p: &Price) -> String {
    format!(
        "${:.4} ({} FIL from {} x FIL/USD {:.3} from {})",
        p.revenue_per_proof,
        short_float(p.proof_fil),
        p.proof_fil_source,
        p.fil_usd,
        p.fil_usd_source
    )
}

/// A small positive figure without float noise: up to 6 significant digits, no trailing 0s.
pub fn short_float(x: f64) -> String {
    if !x.is_finite() || x == 0.0 {
        return format!("{x}");
    }
    let digits = (5 - x.abs().log10().floor() as i32).clamp(0, 18) as usize;
    let s = format!("{x:.digits$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// Dollars with the sign before the `$`: `$0.30`, `-$0.50`.
pub fn dollars(x: f64, decimals: usize) -> String {
    let v = format!("{:.decimals$}", x.abs());
    if x < 0.0 && v.bytes().any(|b| b.is_ascii_digit() && b != b'0') {
        format!("-${v}")
    } else {
        format!("${v}")
    }
}

/// What the fleet billed against what it proved in the last hour, ours apart from the
/// cluster's other machines: `$0.0125/proof ($0.50/h over our 40 completions of the last
/// hour; the cluster's other machines completed 12)`.
pub fn fleet_cost_text(e: &FleetEconomics) -> String {
    let others = match e.others_completed_1h {
        Some(n) => format!("; the cluster's other machines completed {n}"),
        None => String::new(),
    };
    match (e.ours_completed_1h, e.cost_per_proof) {
        (Some(n), Some(c)) => format!(
            "${c:.4}/proof (${:.2}/h over our {n} completions of the last hour{others})",
            e.fleet_dph
        ),
        (Some(_), None) => format!(
            "${:.2}/h with no completion of ours in the last hour, so no cost per proof{others}",
            e.fleet_dph
        ),
        (None, _) => format!(
            "${:.2}/h; which completions are ours is unknown (no demand reading, or one without per-machine history)",
            e.fleet_dph
        ),
    }
}

/// `at the cluster's paid share of 25 %` where Curio paid fewer than all its completions of
/// the last hour (`FleetEconomics::paid_share`; None otherwise): the observation and
/// `inspect` say it beside the revenue.
pub fn paid_text(paid_share: Option<f64>) -> Option<String> {
    paid_share
        .filter(|s| *s < 1.0)
        .map(|s| format!("at the cluster's paid share of {:.0} %", s * 100.0))
}

/// The observation's economics line. Without a price it is short: why the price is
/// unknown and the keys that would set it are the operator's business, and `doctor` names
/// them (small models copied the long reason into every `reason` they wrote).
pub fn economics_line(s: &Snapshot, config: &Config) -> String {
    let Some(p) = s.price.as_ref() else {
        return UNKNOWN_PRICE_LINE.into();
    };
    let e = s.economics();
    let profit = match (e.profit_per_hour, e.revenue_per_hour) {
        (Some(p), Some(r)) => format!(
            "{}/h (revenue {}/h{})",
            dollars(p, 2),
            dollars(r, 2),
            paid_text(e.paid_share)
                .map(|t| format!(", {t}"))
                .unwrap_or_default()
        ),
        _ => "unknown".into(),
    };
    // Under a paid share the launch check still prices a paid proof (proofs of work earn
    // later): said, or the revenue and the margin read as contradicting (the prompt audit).
    let per = if paid_text(e.paid_share).is_some() {
        " per paid proof (the launch check prices every proof as paid)"
    } else {
        "/proof"
    };
    format!(
        "Economics: a proof earns {}. Fleet cost {}. A launch may cost at most ${:.4}{per} (policy.min_margin {}). Profit {profit}.",
        revenue_text(p),
        fleet_cost_text(&e),
        max_cost_per_proof(p, config),
        config.policy.min_margin,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::demand::{Demand, WorkerHistory};
    use crate::fleet::fixtures::*;
    use crate::fleet::PROVING;

    fn hist(address: &str, completed_1h: u32) -> WorkerHistory {
        WorkerHistory {
            host_and_port: address.into(),
            proofs: completed_1h,
            first_end_secs_ago: 3000,
            last_end_secs_ago: 60,
            busy_secs: None,
            completed_1h: Some(completed_1h),
        }
    }

    #[test]
    fn known_and_unknown_prices_said_plainly_with_our_completions_apart() {
        let mut c = config();
        c.price.proof_price_fil = Some(0.005);
        c.price.fil_usd = Some(4.0);
        let mut ours = row("fleetagent-a", Some(1), PROVING, 0.5);
        ours.worker_address = Some("172.17.0.2:12300".into());
        let mut s = Snapshot {
            now: NOW,
            demand: Some(Demand {
                completed_1h: 52,
                history: vec![hist("172.17.0.2:12300", 40), hist("10.0.0.7:12300", 12)],
                ..Default::default()
            }),
            instances: vec![ours],
            price: crate::price::resolve(&c.price, None, None, NOW).ok(),
            ..Default::default()
        };
        assert_eq!(
            economics_line(&s, &c),
            "Economics: a proof earns $0.0200 (0.005 FIL from config x FIL/USD 4.000 from config). \
             Fleet cost $0.0125/proof ($0.50/h over our 40 completions of the last hour; \
             the cluster's other machines completed 12). \
             A launch may cost at most $0.0160/proof (policy.min_margin 0.2). \
             Profit $0.30/h (revenue $0.80/h)."
        );
        // Curio paid 13 of the 52 (the rest proofs of work): ours earn at that share.
        s.demand.as_mut().unwrap().paid_1h = Some(13);
        assert!(
            economics_line(&s, &c).ends_with(
                "A launch may cost at most $0.0160 per paid proof (the launch check prices every proof as paid) (policy.min_margin 0.2). \
                 Profit -$0.30/h (revenue $0.20/h, at the cluster's paid share of 25 %)."
            ),
            "{}",
            economics_line(&s, &c)
        );
        s.demand.as_mut().unwrap().paid_1h = None;
        // Our instance proved nothing; an on-prem machine proved 40: cost, no revenue.
        s.demand.as_mut().unwrap().history = vec![hist("10.0.0.7:12300", 40)];
        s.demand.as_mut().unwrap().completed_1h = 40;
        let line = economics_line(&s, &c);
        assert!(
            line.contains(
                "Fleet cost $0.50/h with no completion of ours in the last hour, so no cost per \
                 proof; the cluster's other machines completed 40."
            ),
            "{line}"
        );
        assert!(
            line.ends_with("Profit -$0.50/h (revenue $0.00/h)."),
            "{line}"
        );
        // A document with completions and no per-machine history cannot tell ours apart.
        s.demand.as_mut().unwrap().history.clear();
        let line = economics_line(&s, &c);
        assert!(
            line.contains("which completions are ours is unknown")
                && line.ends_with("Profit unknown."),
            "{line}"
        );
        s.price = None;
        s.price_unknown = Some("FIL/USD not fetched yet".into());
        assert_eq!(
            economics_line(&s, &c),
            "Economics: price unknown, so profit is not checked."
        );
        assert_eq!(short_float(0.005), "0.005");
        assert_eq!(short_float(5e15 / 1e18), "0.005");
        assert_eq!(short_float(0.000123456789), "0.000123457");
        assert_eq!(
            [dollars(0.3, 2), dollars(-0.5, 2), dollars(-0.001, 2)],
            ["$0.30", "-$0.50", "$0.00"]
        );
    }
}
