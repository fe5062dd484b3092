//! Offer search: filters, order and limit go to the server, the disk we ask for is priced,
//! offers parse leniently.

use fleetagent::vast::{OfferQuery, VastClient, VastError};
use serde_json::json;

use super::{query, setup};
use crate::common::fake_vast::{FakeReply, Route};

#[test]
fn search_filters_orders_and_limits_on_the_server() {
    let s = setup();
    let mid = s.fake.add_offers(3, "RTX 4090", 0.45, 0.995);
    let cheap_4090 = s.fake.add_offer("RTX 4090", 0.35, 0.99);
    s.fake.add_offer("RTX 4090", 0.30, 0.90); // unreliable
    let cheap_3090 = s.fake.add_offer("RTX 3090", 0.20, 0.99);
    s.fake.add_offer("RTX 4090", 0.80, 0.999); // too expensive
    s.fake.add_offer("A100 SXM4", 0.25, 0.99); // other GPU
    let unverified = s.fake.add_offer("RTX 4090", 0.10, 0.99);
    s.fake
        .set_offer_field(unverified, "verification", json!("unverified"));

    let offers = s.client.search_offers(&query()).unwrap();
    let ids: Vec<u64> = offers.iter().map(|o| o.id).collect();
    assert_eq!(ids, vec![cheap_3090, cheap_4090, mid[0], mid[1]]);
    assert_eq!(offers[0].gpu_name, "RTX 3090");
    assert_eq!(offers[1].dph_total, 0.35);
    assert!(offers.iter().all(|o| o.verified && o.num_gpus == 1));
    assert_eq!(offers[0].min_bid, Some(0.12));

    let sent = s.fake.requests_to(Route::Offers);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].method, "POST");
    assert_eq!(sent[0].path, "/api/v0/bundles/");
    let body = sent[0].json();
    assert_eq!(body["gpu_name"], json!({"in": ["RTX 4090", "RTX 3090"]}));
    assert_eq!(body["rented"], json!({"eq": false}));
    assert_eq!(body["limit"], 4);
}

#[test]
fn search_prices_the_disk_we_ask_for_and_sends_ram_in_mb() {
    let s = setup();
    let id = s.fake.add_offer("RTX 4090", 0.4, 0.99);
    s.fake.set_offer_field(id, "dph_base", json!(0.4));
    s.fake.set_offer_field(id, "storage_cost", json!(0.15));
    let mut q = query();
    q.disk_gb = 20.0;
    q.min_gpu_ram_gb = Some(24.0); // 24 000 MB <= 24 564 MB
    let offers = s.client.search_offers(&q).unwrap();
    assert_eq!(offers.len(), 1);
    assert!(
        (offers[0].dph_total - 0.404_166_67).abs() < 1e-6,
        "{offers:?}"
    );
    assert_eq!(offers[0].gpu_ram_mb, 24_564.0);

    q.min_gpu_ram_gb = Some(30.0); // 30 000 MB > 24 564 MB
    assert!(s.client.search_offers(&q).unwrap().is_empty());

    q.min_gpu_ram_gb = None;
    q.max_dph = Some(0.404); // below the price with storage
    assert!(s.client.search_offers(&q).unwrap().is_empty());
    assert_eq!(
        s.fake.requests_to(Route::Offers)[1].json()["gpu_ram"]["gte"].as_f64(),
        Some(30_000.0)
    );
}

#[test]
fn offers_parse_leniently_and_rows_without_id_are_skipped() {
    let s = setup();
    s.fake.add_offer_json(json!({
        "id": 7, "gpu_name": "  RTX 4090\t", "dph_total": 1, "gpu_ram": "24564",
        "reliability": 0.99, "verification": "verified", "public_ipaddr": " 198.51.100.4 \n",
        "geolocation": null, "num_gpus": 1.0, "brand_new_field": [1, 2]
    }));
    s.fake.add_offer_json(json!({
        "id": 8, "gpu_name": "RTX 3090", "dph_total": 0.2, "reliability2": 0.97,
        "verification": "verified", "num_gpus": 1, "cpu_cores": null,
        "public_ipaddr": null, "min_bid": "0.11"
    }));
    s.fake.add_offer_json(json!({
        "gpu_name": "RTX 4090", "dph_total": 0.1, "verification": "verified"
    }));
    let q = OfferQuery {
        verified_only: true,
        disk_gb: 40.0,
        limit: 10,
        ..OfferQuery::default()
    };
    let offers = s.client.search_offers(&q).unwrap();
    assert_eq!(offers.len(), 2, "{offers:?}");
    let (a, b) = (&offers[0], &offers[1]);
    assert_eq!(
        (a.id, a.gpu_name.as_str(), a.dph_total),
        (8, "RTX 3090", 0.2)
    );
    assert_eq!(
        (a.reliability, a.num_gpus, a.min_bid),
        (0.97, 1, Some(0.11))
    );
    assert_eq!(a.public_ip, None);
    assert_eq!(
        (b.id, b.gpu_name.as_str(), b.dph_total),
        (7, "RTX 4090", 1.0)
    );
    assert_eq!(b.gpu_ram_mb, 24_564.0);
    assert_eq!(b.public_ip.as_deref(), Some("198.51.100.4"));
    assert_eq!(b.geolocation, None);
}

#[test]
fn a_non_json_200_is_a_decode_error_with_a_short_excerpt() {
    let s = setup();
    let page = format!("<html><body>{}</body></html>", "maintenance ".repeat(200));
    s.fake
        .fail_next(Route::Offers, 1, FakeReply::text(200, &page));
    match s.client.search_offers(&query()) {
        Err(e @ VastError::Decode(_)) => {
            let text = e.to_string();
            assert!(text.contains("<html><body>maintenance"), "{text}");
            assert!(text.len() < 300, "excerpt too long: {} chars", text.len());
        }
        other => panic!("expected Decode, got {other:?}"),
    }
}

/// A walkthrough: one offer with half an emoji escaped (`"\ud83d"`, as Python's `json.dumps`
/// writes a broken string) made serde_json refuse the whole page, so every search failed
/// ("without a JSON object"), WORKERS DEAD's included. It reads as U+FFFD; a page that is not
/// JSON at all names serde_json's reason.
#[test]
fn a_lone_surrogate_in_one_offer_does_not_fail_the_search() {
    let s = setup();
    let page = r#"{"offers": [{"id": 7, "ask_contract_id": 7, "machine_id": 30007, "num_gpus": 1,
        "gpu_name": "RTX 4090", "gpu_ram": 24564, "dph_total": 0.4, "reliability2": 0.99,
        "verification": "verified", "rentable": true, "cpu_name": "AMD \ud83d EPYC"}]}"#;
    s.fake
        .fail_next(Route::Offers, 1, FakeReply::text(200, page));
    let offers = s.client.search_offers(&query()).unwrap();
    assert_eq!(offers.iter().map(|o| o.id).collect::<Vec<_>>(), vec![7]);
    s.fake.fail_next(
        Route::Offers,
        1,
        FakeReply::text(200, r#"{"offers": [{"id": 7,"#),
    );
    match s.client.search_offers(&query()) {
        Err(e @ VastError::Decode(_)) => {
            let text = e.to_string();
            assert!(
                text.contains("without a JSON object (EOF while parsing"),
                "{text}"
            );
        }
        other => panic!("expected Decode, got {other:?}"),
    }
}
