//! The price in a pass (issue 17), at library level with a ManualClock: a FIL/USD source's
//! value is cached by each observe, kept through failures until `price.max_age_mins`, then
//! unknown; `search_offers` marks each offer profitable or not, best first.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;

use fleetagent::price::FilUsdSource;

use super::{busy_demand, Rig, StaticDemand, BASE, MIN};

/// A FIL/USD source whose answer the test sets.
struct SetRate(Mutex<Result<f64, String>>);

impl FilUsdSource for SetRate {
    fn fil_usd(&self) -> anyhow::Result<f64> {
        self.0.lock().unwrap().clone().map_err(anyhow::Error::msg)
    }
}

#[test]
fn a_fetched_rate_is_kept_through_failures_until_it_is_stale() {
    let config = format!(
        "{BASE}[price]\nproof_price_fil = 0.01\nfil_usd_url = \"http://127.0.0.1:9/p\"\nmax_age_mins = 30\n"
    );
    let mut rig = Rig::new(&config, StaticDemand::new(busy_demand()));
    let source = Arc::new(SetRate(Mutex::new(Ok(4.0))));
    rig.services.fil_usd = Some(source.clone());
    let s = rig.pass();
    let p = s.price.expect("fetched this pass");
    assert_eq!(
        (p.fil_usd, p.fil_usd_source, p.fil_usd_at),
        (4.0, "url", rig.now())
    );
    assert!((p.revenue_per_proof - 0.04).abs() < 1e-12);

    *source.0.lock().unwrap() = Err("price.fil_usd_url: GET failed".into());
    rig.clock.advance(Duration::from_millis(20 * MIN as u64));
    let s = rig.pass();
    assert_eq!(s.price.map(|p| p.fil_usd), Some(4.0), "still fresh: kept");
    rig.clock.advance(Duration::from_millis(11 * MIN as u64));
    let s = rig.pass();
    assert!(s.price.is_none(), "31 minutes old: unknown, never reused");
    let why = s.price_unknown.clone().unwrap();
    assert!(
        why.starts_with("FIL/USD is stale: fetched 31m")
            && why.ends_with("the last fetch failed: price.fil_usd_url: GET failed"),
        "{why}"
    );
    // The check is off: search_offers says so.
    rig.fake.add_offers(2, "RTX 4090", 9.0, 0.99);
    let mut snap = s;
    let r = rig.call(&mut snap, "search_offers", json!({}));
    assert!(
        r.content["price"]
            .as_str()
            .unwrap()
            .starts_with("price unknown ("),
        "{}",
        r.content
    );
    assert!(r.content["offers"][0].get("profitable").is_none());

    *source.0.lock().unwrap() = Ok(5.0);
    let s = rig.pass();
    assert_eq!(s.price.map(|p| p.fil_usd), Some(5.0));
}

#[test]
fn search_offers_marks_each_offer_and_puts_the_profitable_first() {
    let config = format!("{BASE}[price]\nproof_price_fil = 0.01\nfil_usd = 4.0\n");
    let mut rig = Rig::new(&config, StaticDemand::new(busy_demand()));
    // At 50 proofs/h the margin allows $1.60/h ($0.032 a proof).
    rig.fake.add_offers(2, "RTX 4090", 2.0, 0.99);
    rig.fake.add_offers(1, "RTX 4090", 1.5, 0.99);
    let mut snap = rig.pass();
    let r = rig.call(&mut snap, "search_offers", json!({}));
    let c = &r.content;
    assert_eq!(
        (c["matching"].as_u64(), c["profitable"].as_u64()),
        (Some(3), Some(1)),
        "{c}"
    );
    assert_eq!(c["revenue_per_proof"], 0.04);
    assert_eq!(c["max_usd_per_proof"], 0.032);
    let flags: Vec<(f64, bool)> = c["offers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["usd_per_proof"].as_f64().unwrap(),
                o["profitable"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(flags, vec![(0.03, true), (0.04, false), (0.04, false)]);
    assert_eq!(
        r.gist,
        "3 offers, 1 profitable; best 20000003 RTX 4090 $1.50/h"
    );
}
