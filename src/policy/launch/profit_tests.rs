//! The profit guardrail of the launch plan (issue 17): with a known price nothing is rented
//! whose cost per proof leaves less than `policy.min_margin`; unknown, the check is off.

use super::*;
use crate::demand::Demand;

const NOW: Millis = 1_000_000_000;

fn config() -> Config {
    let mut c = Config::default();
    c.vast.image = Some("img".into());
    c.policy.max_dph_total = Some(10.0);
    c.policy.max_instances = Some(20);
    c.policy.proofs_per_hour_per_instance = 20.0;
    // 0.01 FIL x 4 $/FIL = $0.04 a proof; margin 0.2: at most $0.032 a proof.
    c.price.proof_price_fil = Some(0.01);
    c.price.fil_usd = Some(4.0);
    c
}

fn offer(id: u64, gpu: &str, dph: f64) -> Offer {
    Offer {
        min_bid: Some(dph / 2.0),
        ..crate::fleet::fixtures::offer(id, gpu, dph)
    }
}

fn snap(c: &Config) -> Snapshot {
    Snapshot {
        now: NOW,
        demand: Some(Demand {
            pending: 4,
            ..Default::default()
        }),
        price: crate::price::resolve(&c.price, None, None, NOW).ok(),
        ..Default::default()
    }
}

fn choose_of(
    c: &Config,
    s: &Snapshot,
    id: Option<u64>,
    o: &[Offer],
) -> Result<Create, Box<Answer>> {
    let ask = Ask::new(s, c, 7, "call_1", id, NOW);
    choose(&ask, c, o, BTreeMap::new())
}

#[test]
fn an_offer_asked_for_that_loses_money_is_refused_with_its_figures() {
    let c = config();
    let s = snap(&c);
    // $0.80/h over 20 p/h = $0.04 a proof: no margin left.
    let a = choose_of(&c, &s, Some(9), &[offer(9, "RTX 3090", 0.8)]).unwrap_err();
    assert_eq!(a.result.error_code(), Some("unprofitable"));
    let v = &a.result.content;
    assert_eq!(v["offer_id"], 9);
    assert_eq!(v["usd_per_proof"], 0.04);
    assert_eq!(v["revenue_per_proof"], 0.04);
    assert_eq!(v["max_usd_per_proof"], 0.032);
    assert_eq!(v["pph"], 20.0);
    assert_eq!(v["rate_source"], "default");
    assert!(v.get("offers_checked").is_none());
    let m = v["message"].as_str().unwrap();
    assert!(
        m.starts_with(
            "offer 9 (RTX 3090 $0.8000/h over 20 proofs/h, default rate) costs $0.0400 per proof"
        ),
        "{m}"
    );
    let e = a.record.unwrap();
    assert_eq!((e.outcome, e.offer_id), ("refused", Some(9)));
    assert_eq!(e.detail, v.to_string());
    // $0.60/h: $0.03 a proof, within the margin.
    assert!(choose_of(&c, &s, Some(8), &[offer(8, "RTX 3090", 0.6)]).is_ok());
}

#[test]
fn without_an_offer_the_best_profitable_is_taken_and_none_is_refused() {
    let mut c = config();
    // Measured: the 4090 proves 40/h, so $1.00/h is $0.025 a proof.
    let mut s = snap(&c);
    s.measured_rates.insert("RTX 4090".into(), 40.0);
    let offers = [offer(1, "RTX 3090", 0.7), offer(2, "RTX 4090", 1.0)];
    let cr = choose_of(&c, &s, None, &offers).unwrap();
    assert_eq!(cr.offer.id, 2);
    // Asked for by id, the cheap-per-hour one is refused: $0.035 a proof.
    let a = choose_of(&c, &s, Some(1), &offers).unwrap_err();
    assert_eq!(a.result.error_code(), Some("unprofitable"));
    // The measured rate is named as such.
    s.measured_rates.insert("RTX 4090".into(), 20.0);
    let a = choose_of(&c, &s, None, &offers).unwrap_err();
    let v = &a.result.content;
    assert_eq!(v["error"], "unprofitable");
    assert_eq!(
        (v["offer_id"].as_u64(), v["offers_checked"].as_u64()),
        (Some(1), Some(2))
    );
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .starts_with("none of the 2 offers is profitable"),
        "{v}"
    );
    assert_eq!(a.record.unwrap().offer_id, Some(1));
    let a = choose_of(&c, &s, Some(2), &offers).unwrap_err();
    assert_eq!(a.result.content["rate_source"], "measured");
    // A bid is judged at the bid it would place (half the $/h here, x bid_factor).
    c.vast.offers.offer_type = OfferType::Interruptible;
    c.vast.offers.bid_factor = 1.0;
    let cr = choose_of(&c, &s, Some(1), &offers).unwrap();
    assert_eq!(cr.request.bid_price, Some(0.35));
    let shown = offer_json(&offers[0], &c, &s.measured_rates);
    assert_eq!(
        (shown["dph"].as_f64(), shown["bid_dph"].as_f64()),
        (Some(0.7), Some(0.35))
    );
    assert_eq!(shown["usd_per_proof"], 0.035 / 2.0);
}

#[test]
fn with_the_price_unknown_the_check_is_off() {
    let mut c = config();
    c.price.fil_usd = None;
    let s = snap(&c);
    assert!(s.price.is_none());
    let cr = choose_of(&c, &s, Some(9), &[offer(9, "RTX 3090", 5.0)]).unwrap();
    assert_eq!(cr.offer.id, 9);
}
