//! Which offers fleetagent would rent, pure: the query `[vast.offers]` asks vast.ai for, the
//! local check of what comes back, and the best offer by $ per proof.

use serde_json::{json, Value};

use super::guardrails::Refusal;
use crate::config::{Config, OfferType};
use crate::fleet::rates::{gpu_rate, rate_source, Rates};
use crate::price::Price;
use crate::text::clip;
use crate::vast::{Offer, OfferQuery};

/// The query for `[vast.offers]`, optionally narrowed to one GPU and a lower $/h cap.
pub fn config_query(
    config: &Config,
    gpu_name: Option<&str>,
    max_dph: Option<f64>,
    limit: u32,
) -> OfferQuery {
    let o = &config.vast.offers;
    let max_dph = match (o.max_dph_per_instance, max_dph) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    OfferQuery {
        gpu_names: match gpu_name {
            Some(g) => vec![g.to_string()],
            None => o.gpu_names.clone(),
        },
        max_dph,
        min_reliability: Some(o.min_reliability),
        min_gpu_ram_gb: o.min_gpu_ram_gb,
        verified_only: o.verified_only,
        interruptible: o.offer_type == OfferType::Interruptible,
        disk_gb: config.vast.disk_gb,
        limit,
        exclude_machines: Vec::new(),
    }
}

/// Does this offer satisfy `[vast.offers]`? Checked locally too, whatever the server did.
pub fn matches_config(offer: &Offer, config: &Config) -> bool {
    let o = &config.vast.offers;
    gpu_asked(o, &offer.gpu_name)
        && within_max_dph(o, offer.dph_total)
        && offer.reliability + 1e-9 >= o.min_reliability
        && (!o.verified_only || offer.verified)
        && o.min_gpu_ram_gb
            .is_none_or(|gb| offer.gpu_ram_mb + 1e-6 >= gb * 1000.0)
        && offer.dph_total.is_finite()
        && offer.dph_total > 0.0
}

/// `[vast.offers] gpu_names` asks for this GPU (any, when unset): vast.ai's CLI spelling
/// (`RTX_4090`) and any case match the listed name.
pub fn gpu_asked(o: &crate::config::OffersConfig, gpu_name: &str) -> bool {
    o.gpu_names.is_empty()
        || o.gpu_names
            .iter()
            .any(|g| g.replace('_', " ").eq_ignore_ascii_case(gpu_name.trim()))
}

/// Within `[vast.offers] max_dph_per_instance` (when set).
pub fn within_max_dph(o: &crate::config::OffersConfig, dph: f64) -> bool {
    o.max_dph_per_instance.is_none_or(|m| dph <= m + 1e-9)
}

/// Dollars per proof of an offer: what it bills per hour ([`rent_dph`]) / the GPU's proofs
/// per hour (pinned, else `measured`, else the default: `fleet::rates::gpu_rate`).
pub fn usd_per_proof(offer: &Offer, config: &Config, measured: &Rates) -> f64 {
    rent_dph(offer, config) / gpu_rate(config, measured, &offer.gpu_name)
}

/// What renting this offer bills per hour: its `dph_total`; when `vast.offers.offer_type` is
/// interruptible, the cheaper of that and the bid a launch would place with its disk
/// ([`bid_dph`]): a launch rents on demand where the bid is not cheaper
/// (`launch::bid_or_on_demand`), and places the bid where on demand would not pay.
pub fn rent_dph(offer: &Offer, config: &Config) -> f64 {
    match config.vast.offers.offer_type {
        OfferType::OnDemand => offer.dph_total,
        OfferType::Interruptible => bid_dph(offer, config).min(offer.dph_total),
    }
}

/// A bid's $/h on this offer: `launch::bid_price` and the disk's `storage_total_cost`, which
/// vast.ai bills beside a bid (a bid is for the machine; a walkthrough's 300 GB disk added
/// $0.125/h to a $0.63/h bid the profit check had passed). An offer without `min_bid` bids
/// its `dph_total`, which holds the disk already (the re-test saw it counted twice).
pub fn bid_dph(offer: &Offer, config: &Config) -> f64 {
    let bid = super::launch::bid_price(offer, config);
    if offer.min_bid.is_some_and(|b| b.is_finite() && b > 0.0) {
        bid + offer.storage_dph.unwrap_or(0.0)
    } else {
        bid
    }
}

/// The profit check of renting this offer (`guardrails::check_profit`, off while the price
/// is unknown): its $/h over the GPU's rate, measured where known.
pub fn check_offer_profit(
    offer: &Offer,
    config: &Config,
    measured: &Rates,
    price: Option<&Price>,
    among: Option<usize>,
) -> Result<(), Refusal> {
    let rented = (offer.id, offer.gpu_name.as_str(), rent_dph(offer, config));
    check_gpu_profit(rented, config, measured, price, among)
}

/// The profit check of renting `(offer id, GPU, $/h)` (an offer, or a stopped spare started
/// again): the $/h over the GPU's rate, measured where known.
pub fn check_gpu_profit(
    (offer_id, gpu, dph): (u64, &str, f64),
    config: &Config,
    measured: &Rates,
    price: Option<&Price>,
    among: Option<usize>,
) -> Result<(), Refusal> {
    super::guardrails::check_profit(
        price,
        config,
        offer_id,
        gpu,
        dph,
        gpu_rate(config, measured, gpu),
        rate_source(config, measured, gpu),
        among,
    )
}

/// Is this offer profitable at `price` (true while the price is unknown)?
pub fn is_profitable(
    offer: &Offer,
    config: &Config,
    measured: &Rates,
    price: Option<&Price>,
) -> bool {
    check_offer_profit(offer, config, measured, price, None).is_ok()
}

/// The best offer: lowest $/proof, then lowest $/h, then highest reliability.
pub fn best_offer<'a>(offers: &'a [Offer], config: &Config, measured: &Rates) -> Option<&'a Offer> {
    offers
        .iter()
        .filter(|o| matches_config(o, config))
        .min_by(|a, b| {
            usd_per_proof(a, config, measured)
                .total_cmp(&usd_per_proof(b, config, measured))
                .then(a.dph_total.total_cmp(&b.dph_total))
                .then(b.reliability.total_cmp(&a.reliability))
        })
}

/// One offer as the model sees it (with `bid_dph`, the bid a launch would place with its
/// disk, when offers are interruptible: `usd_per_proof` is reckoned on the cheaper of it and
/// `dph`, [`rent_dph`]).
pub fn offer_json(o: &Offer, config: &Config, measured: &Rates) -> Value {
    let mut v = json!({
        "id": o.id,
        "gpu": clip(&o.gpu_name, 40),
        "dph": (o.dph_total * 1e4).round() / 1e4,
        "pph": (gpu_rate(config, measured, &o.gpu_name) * 100.0).round() / 100.0,
        "usd_per_proof": (usd_per_proof(o, config, measured) * 1e5).round() / 1e5,
        "reliability": (o.reliability * 1e3).round() / 1e3,
        "where": o.geolocation.as_deref().map(|g| clip(g, 40)),
    });
    if config.vast.offers.offer_type == OfferType::Interruptible {
        v["bid_dph"] = json!((bid_dph(o, config) * 1e4).round() / 1e4);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::fleet::fixtures::offer;

    #[test]
    fn best_is_cheapest_per_proof() {
        let mut c = Config::default();
        c.policy.proofs_per_hour_per_instance = 20.0;
        c.policy.gpu_rates.insert("RTX 4090".into(), 50.0);
        // 0.50 / 50 = 0.01 per proof beats 0.30 / 20 = 0.015.
        let offers = vec![offer(1, "RTX 3090", 0.30), offer(2, "RTX 4090", 0.50)];
        let none = Rates::new();
        assert_eq!(best_offer(&offers, &c, &none).unwrap().id, 2);
        c.vast.offers.max_dph_per_instance = Some(0.4);
        assert_eq!(best_offer(&offers, &c, &none).unwrap().id, 1);
        c.vast.offers.gpu_names = vec!["RTX_4090".into()];
        assert!(best_offer(&offers, &c, &none).is_none());
    }

    #[test]
    fn a_measured_rate_ranks_offers_where_the_gpu_is_not_pinned() {
        let mut c = Config::default();
        c.policy.proofs_per_hour_per_instance = 20.0;
        let offers = vec![offer(1, "RTX 3090", 0.30), offer(2, "RTX 4090", 0.50)];
        // Unpinned and unmeasured: both at 20/h, the cheaper per hour wins.
        assert_eq!(best_offer(&offers, &c, &Rates::new()).unwrap().id, 1);
        // Measured: the 4090 proves 50/h (0.01 $/proof against 0.015).
        let measured: Rates = [("RTX 4090".to_string(), 50.0)].into_iter().collect();
        assert_eq!(best_offer(&offers, &c, &measured).unwrap().id, 2);
        assert_eq!(offer_json(&offers[1], &c, &measured)["pph"], 50.0);
        // Pinned wins over measured.
        c.policy.gpu_rates.insert("RTX 4090".into(), 10.0);
        assert_eq!(best_offer(&offers, &c, &measured).unwrap().id, 1);
    }
}
