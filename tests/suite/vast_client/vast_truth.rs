//! vast.ai as the second review found it (reference section 11): the start and change-bid
//! routes, bids at min_bid, outbid and resume in both shapes, image_login, bad hosts left
//! out of the search, the daily search quota (never retried), a JSON 429 with Retry-After,
//! and the spacing of list pages and destroys.

use std::time::Duration;

use fleetagent::clock::Clock;
use fleetagent::vast::{VastClient, VastError};
use serde_json::json;

use super::{launch, query, setup};
use crate::common::fake_vast::{FakeReply, Route};

#[test]
fn start_and_change_bid_use_vast_routes_and_bodies() {
    let s = setup();
    let offer = s.fake.add_offer("RTX 4090", 0.45, 0.995); // min_bid 0.27
    let mut req = launch(offer, "fleetagent-1-bid");
    req.bid_price = Some(0.27);
    let id = s.client.create_instance(&req).unwrap();
    assert_eq!(
        s.fake.bid_price(id),
        Some(0.27),
        "a bid at min_bid is taken"
    );
    assert_eq!(
        s.fake.requests_to(Route::Create)[0].json()["price"],
        json!(0.27)
    );

    s.client.stop_instance(id).unwrap();
    s.client.start_instance(id).unwrap();
    let manage = s.fake.requests_to(Route::Manage);
    assert_eq!(manage[1].method, "PUT");
    assert_eq!(manage[1].path, format!("/api/v0/instances/{id}/"));
    assert_eq!(manage[1].json(), json!({"state": "running"}));
    assert_eq!(s.fake.instance(id).unwrap()["actual_status"], "running");

    s.fake.outbid(id, false);
    s.client.change_bid(id, 0.33).unwrap();
    let bid = &s.fake.requests_to(Route::ChangeBid)[0];
    assert_eq!(
        (bid.method.as_str(), bid.path.clone()),
        ("PUT", format!("/api/v0/instances/bid_price/{id}/"))
    );
    assert_eq!(bid.json(), json!({"client_id": "me", "price": 0.33}));
    assert_eq!(s.fake.bid_price(id), Some(0.33));
    assert_eq!(
        s.fake.instance(id).unwrap()["actual_status"],
        "running",
        "a raised bid resumes"
    );
    match s.client.change_bid(424242, 0.3) {
        Err(VastError::NoSuchInstance(424242)) => {}
        other => panic!("expected NoSuchInstance, got {other:?}"),
    }
    match s.client.start_instance(424242) {
        Err(VastError::NoSuchInstance(424242)) => {}
        other => panic!("expected NoSuchInstance, got {other:?}"),
    }
}

#[test]
fn outbid_and_resume_show_in_the_listing_in_both_shapes() {
    let s = setup();
    let a = s.fake.add_offer("RTX 4090", 0.45, 0.995);
    let b = s.fake.add_offer("RTX 4090", 0.45, 0.995);
    let mut ra = launch(a, "fleetagent-1-a");
    ra.bid_price = Some(0.3);
    let mut rb = launch(b, "fleetagent-1-b");
    rb.bid_price = Some(0.3);
    let ia = s.client.create_instance(&ra).unwrap();
    s.clock.advance(Duration::from_secs(5));
    let ib = s.client.create_instance(&rb).unwrap();
    s.fake.outbid(ia, false);
    s.fake.outbid(ib, true);
    let list = s.client.list_instances().unwrap();
    let get = |id: u64| list.iter().find(|i| i.id == id).unwrap().clone();
    let (x, y) = (get(ia), get(ib));
    assert_eq!(x.is_bid, Some(true));
    assert_eq!(
        (
            x.actual_status.as_deref(),
            x.intended_status.as_deref(),
            x.next_state.as_deref()
        ),
        (Some("stopped"), Some("running"), Some("running"))
    );
    assert_eq!(
        (
            y.cur_state.as_deref(),
            y.intended_status.as_deref(),
            y.next_state.as_deref()
        ),
        (Some("stopped"), Some("stopped"), Some("stopped"))
    );
    assert!(x.machine_id.is_some() && x.storage_dph.is_some());
    assert_eq!(x.dph_total, Some(0.3), "a bid bills its price");
    s.fake.resume(ia);
    let x = s.client.show_instance(ia).unwrap().unwrap();
    assert_eq!(x.actual_status.as_deref(), Some("running"));
}

#[test]
fn image_login_is_sent_on_create_only_when_set() {
    let s = setup();
    let offer = s.fake.add_offer("RTX 4090", 0.45, 0.995);
    let mut req = launch(offer, "fleetagent-1-login");
    req.image_login = fleetagent::secrets::Secret::new("-u bot -p s3cr3t-t0ken-xyz ghcr.io");
    assert!(!format!("{req:?}").contains("s3cr3t"), "Debug hides it");
    s.client.create_instance(&req).unwrap();
    let body = s.fake.requests_to(Route::Create)[0].json();
    assert_eq!(body["image_login"], "-u bot -p s3cr3t-t0ken-xyz ghcr.io");
    let other = s.fake.add_offer("RTX 4090", 0.45, 0.995);
    s.clock.advance(Duration::from_secs(5));
    s.client
        .create_instance(&launch(other, "fleetagent-1-plain"))
        .unwrap();
    assert!(s.fake.requests_to(Route::Create)[1]
        .json()
        .get("image_login")
        .is_none());
    // A server echoing it in an error does not put it into the error text.
    let third = s.fake.add_offer("RTX 4090", 0.45, 0.995);
    s.fake.fail_next(
        Route::Create,
        1,
        FakeReply::json(
            400,
            json!({"success": false, "error": "invalid_args",
                   "msg": "bad image_login -u bot -p s3cr3t-t0ken-xyz ghcr.io"}),
        ),
    );
    s.clock.advance(Duration::from_secs(5));
    let mut req = launch(third, "fleetagent-1-echo");
    req.image_login = fleetagent::secrets::Secret::new("-u bot -p s3cr3t-t0ken-xyz ghcr.io");
    let err = s.client.create_instance(&req).unwrap_err().to_string();
    assert!(!err.contains("s3cr3t"), "{err}");
}

#[test]
fn bad_hosts_are_left_out_of_the_search() {
    let s = setup();
    let a = s.fake.add_offer("RTX 4090", 0.45, 0.995);
    let b = s.fake.add_offer("RTX 4090", 0.46, 0.995);
    let all = s.client.search_offers(&query()).unwrap();
    let bad = all.iter().find(|o| o.id == a).unwrap().machine_id.unwrap();
    let mut q = query();
    q.exclude_machines = vec![bad];
    let found = s.client.search_offers(&q).unwrap();
    assert_eq!(found.iter().map(|o| o.id).collect::<Vec<_>>(), vec![b]);
    let body = s.fake.requests_to(Route::Offers)[1].json();
    assert_eq!(body["machine_id"], json!({"notin": [bad]}));
}

#[test]
fn the_daily_search_quota_is_not_retried_and_names_its_reset() {
    let s = setup();
    s.fake.add_offer("RTX 4090", 0.45, 0.995);
    s.fake.set_search_limit(1, "1754086400");
    assert_eq!(s.client.search_offers(&query()).unwrap().len(), 1);
    match s.client.search_offers(&query()) {
        Err(VastError::SearchQuota { reset }) => assert_eq!(reset, "1754086400"),
        other => panic!("expected SearchQuota, got {other:?}"),
    }
    assert_eq!(s.fake.count(Route::Offers), 2, "never retried");
    let e = VastError::SearchQuota {
        reset: "1754086400".into(),
    };
    assert_eq!(
        e.to_string(),
        "vast.ai search quota exhausted until 1754086400"
    );
}

#[test]
fn a_json_429_with_retry_after_is_waited_out_up_to_a_minute() {
    let s = setup();
    s.fake.add_offer("RTX 4090", 0.45, 0.995);
    s.fake.fail_next(
        Route::Offers,
        1,
        FakeReply::too_frequent_json(1.0).with_retry_after("7"),
    );
    let t0 = s.clock.now_ms();
    assert_eq!(s.client.search_offers(&query()).unwrap().len(), 1);
    let seen = s.fake.requests_to(Route::Offers);
    assert_eq!(seen[1].at_ms - seen[0].at_ms, 7_000, "Retry-After honoured");
    assert!(s.clock.now_ms() - t0 >= 7_000);
    // Longer than 60 s: the call fails instead of sleeping.
    s.fake.fail_next(
        Route::Offers,
        1,
        FakeReply::too_frequent_json(1.0).with_retry_after("120"),
    );
    match s.client.search_offers(&query()) {
        Err(VastError::RateLimited(_)) => {}
        other => panic!("expected RateLimited, got {other:?}"),
    }
}

#[test]
fn list_pages_go_a_second_apart_and_destroys_three() {
    let s = setup();
    for i in 0..30 {
        s.fake.add_instance(&format!("fleetagent-x{i}"));
    }
    s.fake.vast_rate_limits();
    assert_eq!(s.client.list_instances().unwrap().len(), 30);
    let pages = s.fake.requests_to(Route::ListV1);
    assert_eq!(pages.len(), 2, "no 429 on the second page");
    assert!(pages[1].at_ms - pages[0].at_ms >= 1_000);
    let ids = s.fake.instance_ids();
    s.client.destroy_instance(ids[0]).unwrap();
    s.client.destroy_instance(ids[1]).unwrap();
    s.client.destroy_instance(ids[2]).unwrap();
    let d = s.fake.requests_to(Route::Destroy);
    assert!(d.iter().all(|r| r.status == 200), "no 429 on a destroy");
    assert_eq!(d.len(), 3);
    assert!(d[1].at_ms - d[0].at_ms >= 3_000 && d[2].at_ms - d[1].at_ms >= 3_000);
}
