//! The economics line of the observation (issue 17): what a proof earns and where each part
//! comes from, what the fleet costs per proof, the most a new launch may cost per proof and
//! the profit per hour; or "price unknown" and why (the profit check is off then). Pure.

use crate::config::Config;
use crate::fleet::{num, Snapshot};
use crate::price::{fleet_economics, max_cost_per_proof, FleetEconomics, Price};
use crate::text::quote;

impl Snapshot {
    /// The fleet's economics at this pass's price (None while it is unknown): over the last
    /// hour's completions when any, else over the fleet's capacity.
    pub fn economics(&self, config: &Config) -> Option<FleetEconomics> {
        let price = self.price.as_ref()?;
        Some(fleet_economics(
            price,
            self.fleet_dph(),
            self.projected_pph(config),
            self.demand.as_ref().map(|d| d.completed_1h),
        ))
    }
}

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

/// The observation's economics line.
pub fn economics_line(s: &Snapshot, config: &Config) -> String {
    let (Some(p), Some(e)) = (s.price.as_ref(), s.economics(config)) else {
        let why = s.price_unknown.as_deref().unwrap_or("no price");
        return format!(
            "Economics: price unknown: {}; profit is not checked.",
            quote(why, 240)
        );
    };
    let over = match e.basis {
        "completions" => format!("the last hour's {} completions", num(e.proofs_per_hour)),
        _ => format!("its capacity of {} p/h", num(e.proofs_per_hour)),
    };
    let cost = match e.cost_per_proof {
        Some(c) => format!("${c:.4}/proof (${:.2}/h over {over})", e.fleet_dph),
        None => format!("${:.2}/h with no proofs", e.fleet_dph),
    };
    format!(
        "Economics: a proof earns {}. Fleet cost {cost}. A launch may cost at most ${:.4}/proof (policy.min_margin {}). Profit ${:.2}/h.",
        revenue_text(p),
        max_cost_per_proof(p, config),
        config.policy.min_margin,
        e.profit_per_hour
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::demand::Demand;
    use crate::fleet::fixtures::*;
    use crate::fleet::PROVING;

    #[test]
    fn known_and_unknown_prices_said_plainly() {
        let mut c = config();
        c.price.proof_price_fil = Some(0.005);
        c.price.fil_usd = Some(4.0);
        let mut s = Snapshot {
            now: NOW,
            demand: Some(Demand {
                completed_1h: 40,
                ..Default::default()
            }),
            instances: vec![row("fleetagent-a", Some(1), PROVING, 0.5)],
            price: crate::price::resolve(&c.price, None, None, NOW).ok(),
            ..Default::default()
        };
        assert_eq!(
            economics_line(&s, &c),
            "Economics: a proof earns $0.0200 (0.005 FIL from config x FIL/USD 4.000 from config). \
             Fleet cost $0.0125/proof ($0.50/h over the last hour's 40 completions). \
             A launch may cost at most $0.0160/proof (policy.min_margin 0.2). Profit $0.30/h."
        );
        s.demand.as_mut().unwrap().completed_1h = 0;
        let line = economics_line(&s, &c);
        assert!(line.contains("over its capacity of 50 p/h"), "{line}");
        s.price = None;
        s.price_unknown = Some("FIL/USD not fetched yet".into());
        assert_eq!(
            economics_line(&s, &c),
            "Economics: price unknown: \"FIL/USD not fetched yet\"; profit is not checked."
        );
        assert_eq!(short_float(0.005), "0.005");
        assert_eq!(short_float(5e15 / 1e18), "0.005");
        assert_eq!(short_float(0.000123456789), "0.000123457");
    }
}
