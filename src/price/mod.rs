//! What a proof earns and what it costs (issue 17, DESIGN.md "Price and profit"), pure.
//!
//! Revenue per proof = the ask price in FIL (Curio's `proofshare_meta.pprice` in attoFIL,
//! else `[price] proof_price_fil`) x FIL/USD (`[price] fil_usd`, or the last value
//! `fil_usd_command` / `fil_usd_url` printed, while younger than `price.max_age_mins`).
//! Anything missing or stale makes the price unknown, never zero: with no price the profit
//! check is off and the observation says "price unknown".
//!
//! The fetching (command, URL, the cache in `agent_state`) lives behind [`FilUsdSource`]; the
//! pass's observe step resolves the [`Price`] once into `Snapshot::price`.

use serde::Serialize;

use crate::clock::Millis;
use crate::config::{Config, PriceConfig};

/// attoFIL in one FIL.
pub const ATTO_PER_FIL: f64 = 1e18;

/// The price of a proof as this pass knows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Price {
    /// USD one proof earns: `proof_fil` x `fil_usd`.
    pub revenue_per_proof: f64,
    /// FIL one proof earns.
    pub proof_fil: f64,
    /// `curio` (proofshare_meta.pprice) or `config` (price.proof_price_fil).
    pub proof_fil_source: &'static str,
    pub fil_usd: f64,
    /// `config` (price.fil_usd), `command` or `url`.
    pub fil_usd_source: &'static str,
    /// When FIL/USD was read (the pass's time for a static one).
    pub fil_usd_at: Millis,
}

/// FIL/USD from outside: the trait lives with its command and URL sources in the adapters
/// (`crate::fil_usd`); named here too, as the contract has it.
pub use crate::fil_usd::FilUsdSource;

/// A fetched FIL/USD as cached in `agent_state` (`fil_usd`, `fil_usd_at`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fetched {
    pub fil_usd: f64,
    pub at: Millis,
    /// `command` or `url`.
    pub source: &'static str,
}

/// FIL from Curio's ask price in attoFIL (a decimal integer as text). `'0'` (Curio's default),
/// a negative, an empty or unparsable text: None (unknown, not free).
pub fn fil_of_attofil(attofil: &str) -> Option<f64> {
    let t = attofil.trim();
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let v: f64 = t.parse().ok()?;
    (v.is_finite() && v > 0.0).then_some(v / ATTO_PER_FIL)
}

/// Past this a proof's price is a bad reading (Curio's ask price or FIL/USD), not a price: a
/// SNARK proof has been worth cents. The price is then unknown (the profit check off, said
/// by the observation and `doctor`) rather than one every offer passes.
pub const MAX_REVENUE_PER_PROOF: f64 = 10.0;

/// The price this pass uses, or why it is unknown (one line, for the observation and
/// `doctor`). `ask_attofil` is the last reading's `ask_price_attofil`; `fetched` the cached
/// FIL/USD of a command or URL source.
pub fn resolve(
    config: &PriceConfig,
    ask_attofil: Option<&str>,
    fetched: Option<Fetched>,
    now: Millis,
) -> Result<Price, String> {
    let (proof_fil, proof_fil_source) = match ask_attofil.and_then(fil_of_attofil) {
        Some(f) => (f, "curio"),
        None => match config.proof_price_fil {
            Some(f) => (f, "config"),
            None => {
                return Err(match ask_attofil {
                    Some(a) => format!(
                        "Curio's ask price is {:?} (unset) and price.proof_price_fil is not set",
                        crate::text::clip(a, 40)
                    ),
                    None => "no ask price read from Curio and price.proof_price_fil is not set"
                        .to_string(),
                })
            }
        },
    };
    let (fil_usd, fil_usd_source, fil_usd_at) = match config.fil_usd {
        Some(v) => (v, "config", now),
        None => {
            if config.fil_usd_command.is_none() && config.fil_usd_url.is_none() {
                return Err("no FIL/USD: set price.fil_usd, fil_usd_command or fil_usd_url".into());
            }
            let Some(f) = fetched else {
                return Err("FIL/USD not fetched yet".into());
            };
            if !fetched_fresh(config, f.at, now) {
                return Err(format!(
                    "FIL/USD is stale: fetched {} ago (price.max_age_mins = {})",
                    crate::clock::human_duration(now - f.at),
                    config.max_age_mins
                ));
            }
            (f.fil_usd, f.source, f.at)
        }
    };
    let revenue_per_proof = proof_fil * fil_usd;
    if revenue_per_proof > MAX_REVENUE_PER_PROOF {
        return Err(format!(
            "a proof would earn ${} ({proof_fil} FIL from {proof_fil_source} at FIL/USD {fil_usd} from {fil_usd_source}), past the ${MAX_REVENUE_PER_PROOF} taken as the most a proof can be worth: a bad reading, so the profit check would pass every offer",
            crate::text::num(revenue_per_proof)
        ));
    }
    Ok(Price {
        revenue_per_proof,
        proof_fil,
        proof_fil_source,
        fil_usd,
        fil_usd_source,
        fil_usd_at,
    })
}

/// Whether a FIL/USD fetched at `at` still counts at `now`: no older than
/// `price.max_age_mins`.
pub fn fetched_fresh(config: &PriceConfig, at: Millis, now: Millis) -> bool {
    now - at <= config.max_age_mins as Millis * 60_000
}

/// The config key of the FIL/USD source `config` fetches from (`price.fil_usd_command` or
/// `price.fil_usd_url`), for a line about its failure; None when it fetches from neither.
pub fn fetched_source_key(config: &PriceConfig) -> Option<&'static str> {
    match fetched_source(config) {
        "command" => Some(crate::fil_usd::COMMAND_KEY),
        "url" => Some(crate::fil_usd::URL_KEY),
        _ => None,
    }
}

/// Which source a cached FIL/USD came from, by the config: `command` or `url` (`fetched`
/// for a source set by code, the simulator's).
pub fn fetched_source(config: &PriceConfig) -> &'static str {
    if config.fil_usd_command.is_some() {
        "command"
    } else if config.fil_usd_url.is_some() {
        "url"
    } else {
        "fetched"
    }
}

/// [`resolve`] over the FIL/USD cache (`cached`: the last value fetched and when;
/// `fetch_error`: the last fetch's failure), the failure added to an unknown price's reason
/// (a static `price.fil_usd` ignores the cache).
pub fn resolve_cached(
    config: &PriceConfig,
    ask_attofil: Option<&str>,
    cached: Option<(f64, Millis)>,
    fetch_error: Option<&str>,
    now: Millis,
) -> Result<Price, String> {
    if config.fil_usd.is_some() {
        return resolve(config, ask_attofil, None, now);
    }
    let fetched = cached.map(|(fil_usd, at)| Fetched {
        fil_usd,
        at,
        source: fetched_source(config),
    });
    resolve(config, ask_attofil, fetched, now).map_err(|why| match fetch_error {
        Some(e) => format!("{why}; the last fetch failed: {e}"),
        None => why,
    })
}

/// Dollars per proof of something billing `dph` $/h and proving `pph` proofs/h (infinite
/// when it proves nothing).
pub fn cost_per_proof(dph: f64, pph: f64) -> f64 {
    if pph > 0.0 {
        dph / pph
    } else {
        f64::INFINITY
    }
}

/// The most a proof may cost under `policy.min_margin`: revenue x (1 - min_margin).
pub fn max_cost_per_proof(price: &Price, config: &Config) -> f64 {
    price.revenue_per_proof * (1.0 - config.policy.min_margin)
}

/// Does a rental at `dph` $/h proving `pph` proofs/h leave at least `policy.min_margin`?
/// True when the price is unknown (the check is off then).
pub fn profitable(price: Option<&Price>, dph: f64, pph: f64, config: &Config) -> bool {
    match price {
        None => true,
        Some(p) => cost_per_proof(dph, pph) <= max_cost_per_proof(p, config) + 1e-12,
    }
}

/// Profit per hour of a fleet billing `dph` $/h while completing `pph` proofs/h.
pub fn profit_per_hour(price: &Price, dph: f64, pph: f64) -> f64 {
    price.revenue_per_proof * pph - dph
}

/// What the fleet costs and earns, per proof and per hour, over the last hour's completions
/// of our own instances' workers (never the cluster's: on-prem provers earn nothing for what
/// we rent). A fleet that completed nothing has its cost and no revenue: its profit is
/// minus its $/h and its cost per proof unknown.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FleetEconomics {
    pub fleet_dph: f64,
    /// Our completions of the last hour (None: no reading, or it cannot tell ours apart).
    pub ours_completed_1h: Option<u32>,
    /// The rest of the cluster's completions of the last hour (None as above).
    pub others_completed_1h: Option<u32>,
    /// `fleet_dph` over our completions; None when we completed none (or that is unknown).
    pub cost_per_proof: Option<f64>,
    /// Of the cluster's completions of the last hour, the share Curio recorded a payment for
    /// (`paid_1h` over `completed_1h`, at most 1; None: not read): proofs of work and proofs
    /// the market answered "gone" earn nothing.
    pub paid_share: Option<f64>,
    /// Our completions x the revenue per proof x the paid share (1 when not read); None while
    /// either is unknown.
    pub revenue_per_hour: Option<f64>,
    /// `revenue_per_hour - fleet_dph`; None while the revenue is unknown.
    pub profit_per_hour: Option<f64>,
}

/// The fleet's economics at `price` (None: unknown) over the last hour's completions of
/// ours and of the rest of the cluster (None: unknown; `fleet::rates::completions_1h`), our
/// completions earning at the cluster's paid share (`Demand::paid_share`: a walkthrough's
/// inspect showed $16/h of revenue for 40 completions Curio paid none of).
pub fn fleet_economics(
    price: Option<&Price>,
    fleet_dph: f64,
    ours: Option<u32>,
    others: Option<u32>,
    paid_share: Option<f64>,
) -> FleetEconomics {
    let revenue = match (price, ours) {
        (Some(p), Some(n)) => Some(p.revenue_per_proof * f64::from(n) * paid_share.unwrap_or(1.0)),
        _ => None,
    };
    FleetEconomics {
        fleet_dph,
        ours_completed_1h: ours,
        others_completed_1h: others,
        paid_share,
        cost_per_proof: ours.filter(|n| *n > 0).map(|n| fleet_dph / f64::from(n)),
        revenue_per_hour: revenue,
        profit_per_hour: revenue.map(|r| r - fleet_dph),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> PriceConfig {
        PriceConfig::default()
    }

    #[test]
    fn curio_default_ask_price_zero_is_unknown_not_free() {
        assert_eq!(fil_of_attofil("0"), None);
        assert_eq!(fil_of_attofil(""), None);
        assert_eq!(fil_of_attofil("-5"), None);
        assert_eq!(fil_of_attofil("1e18"), None);
        assert_eq!(fil_of_attofil("5000000000000000"), Some(0.005));
        let mut c = cfg();
        c.fil_usd = Some(4.0);
        let e = resolve(&c, Some("0"), None, 0).unwrap_err();
        assert!(e.contains("unset") && e.contains("proof_price_fil"), "{e}");
        c.proof_price_fil = Some(0.01);
        let p = resolve(&c, Some("0"), None, 0).unwrap();
        assert_eq!(p.proof_fil_source, "config");
        assert!((p.revenue_per_proof - 0.04).abs() < 1e-12);
        let p = resolve(&c, Some("5000000000000000"), None, 0).unwrap();
        assert_eq!(p.proof_fil_source, "curio");
        assert!((p.revenue_per_proof - 0.02).abs() < 1e-12);
        // A glitch in Curio's ask price (here 5 FIL a proof, at $4): unknown, not a price
        // that passes every offer.
        let e = resolve(&c, Some("5000000000000000000"), None, 0).unwrap_err();
        assert!(
            e.starts_with("a proof would earn $20 (5 FIL from curio"),
            "{e}"
        );
    }

    #[test]
    fn a_fetched_rate_counts_only_while_fresh() {
        let mut c = cfg();
        c.proof_price_fil = Some(0.01);
        assert!(resolve(&c, None, None, 0)
            .unwrap_err()
            .contains("no FIL/USD"));
        c.fil_usd_url = Some("http://127.0.0.1:1/p".into());
        assert!(resolve(&c, None, None, 0)
            .unwrap_err()
            .contains("not fetched"));
        let f = Fetched {
            fil_usd: 5.0,
            at: 0,
            source: "url",
        };
        let p = resolve(&c, None, Some(f), 60 * 60_000).unwrap();
        assert_eq!((p.fil_usd, p.fil_usd_source), (5.0, "url"));
        let e = resolve(&c, None, Some(f), 60 * 60_000 + 1).unwrap_err();
        assert!(e.contains("stale"), "{e}");
    }

    #[test]
    fn the_cache_counts_while_fresh_and_its_failure_is_said() {
        let mut c = cfg();
        c.proof_price_fil = Some(0.01);
        c.fil_usd_command = Some("fil-usd".into());
        let e = resolve_cached(&c, None, None, Some("boom"), 0).unwrap_err();
        assert_eq!(e, "FIL/USD not fetched yet; the last fetch failed: boom");
        let p = resolve_cached(&c, None, Some((4.0, 1_000)), Some("boom"), 2_000).unwrap();
        assert_eq!(
            (p.fil_usd, p.fil_usd_source, p.fil_usd_at),
            (4.0, "command", 1_000)
        );
        let e = resolve_cached(&c, None, Some((4.0, 0)), Some("boom"), 61 * 60_000).unwrap_err();
        assert!(
            e.contains("stale") && e.ends_with("the last fetch failed: boom"),
            "{e}"
        );
        // A static rate ignores the cache.
        c.fil_usd_command = None;
        c.fil_usd = Some(3.0);
        let p = resolve_cached(&c, None, Some((4.0, 0)), Some("boom"), 5).unwrap();
        assert_eq!((p.fil_usd, p.fil_usd_source), (3.0, "config"));
    }

    #[test]
    fn the_margin_decides_what_is_profitable() {
        let mut config = Config::default();
        config.price.proof_price_fil = Some(0.01);
        config.price.fil_usd = Some(4.0);
        let p = resolve(&config.price, None, None, 0).unwrap();
        // 0.04 $/proof, margin 0.2: at most 0.032 $/proof.
        assert!(profitable(Some(&p), 0.64, 20.0, &config));
        assert!(!profitable(Some(&p), 0.66, 20.0, &config));
        assert!(!profitable(Some(&p), 0.10, 0.0, &config));
        assert!(profitable(None, 100.0, 1.0, &config));
        assert!((profit_per_hour(&p, 0.5, 20.0) - 0.3).abs() < 1e-12);
    }

    #[test]
    fn the_fleet_is_judged_by_our_completions_only() {
        let mut config = Config::default();
        config.price.proof_price_fil = Some(0.01);
        config.price.fil_usd = Some(4.0);
        let p = resolve(&config.price, None, None, 0).unwrap();
        let e = fleet_economics(Some(&p), 1.0, Some(20), Some(12), None);
        assert_eq!(
            (e.ours_completed_1h, e.others_completed_1h),
            (Some(20), Some(12))
        );
        assert!((e.cost_per_proof.unwrap() - 0.05).abs() < 1e-12);
        assert!((e.revenue_per_hour.unwrap() - 0.8).abs() < 1e-12);
        assert!((e.profit_per_hour.unwrap() + 0.2).abs() < 1e-12);
        // An on-prem prover completes 40; our rented instance nothing: its cost, no revenue,
        // and no cost per proof (never 0, never infinite).
        let e = fleet_economics(Some(&p), 0.5, Some(0), Some(40), None);
        assert_eq!(e.cost_per_proof, None);
        assert_eq!(e.revenue_per_hour, Some(0.0));
        assert_eq!(e.profit_per_hour, Some(-0.5));
        assert_eq!(e.others_completed_1h, Some(40));
        // Nothing rented: no profit, not the on-prem provers' revenue.
        assert_eq!(
            fleet_economics(Some(&p), 0.0, Some(0), Some(40), None).profit_per_hour,
            Some(0.0)
        );
        // Price unknown: the cost per proof stands, revenue and profit do not.
        let e = fleet_economics(None, 1.0, Some(4), Some(6), None);
        assert_eq!((e.cost_per_proof, e.profit_per_hour), (Some(0.25), None));
        // Ours unknown (or no reading): every figure over them unknown.
        let e = fleet_economics(Some(&p), 1.0, None, None, None);
        assert_eq!(
            (e.cost_per_proof, e.revenue_per_hour, e.profit_per_hour),
            (None, None, None)
        );
        // Curio paid 10 of the cluster's 40 completions (the rest proofs of work): our 20
        // earn as 5, $0.20/h, not $0.80/h; none paid, nothing earned.
        let e = fleet_economics(Some(&p), 1.0, Some(20), Some(20), Some(0.25));
        assert!((e.revenue_per_hour.unwrap() - 0.2).abs() < 1e-12);
        assert!((e.profit_per_hour.unwrap() + 0.8).abs() < 1e-12);
        assert_eq!(e.cost_per_proof, Some(0.05));
        let e = fleet_economics(Some(&p), 0.25, Some(40), Some(0), Some(0.0));
        assert_eq!(
            (e.revenue_per_hour, e.profit_per_hour),
            (Some(0.0), Some(-0.25))
        );
    }
}
