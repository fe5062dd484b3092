//! Auth and the key: a missing or refused key, and the key never in a URL or an error text.

use std::time::Duration;

use fleetagent::vast::http::HttpVastClient;
use fleetagent::vast::{VastClient, VastError};
use serde_json::json;

use super::{launch, query, setup};
use crate::common::fake_vast::{FakeReply, Route};

#[test]
fn a_missing_key_fails_before_sending_anything() {
    let s = setup();
    let client = HttpVastClient::new(&s.fake.url(), None, s.clock.clone(), Duration::from_secs(5));
    match client.list_instances() {
        Err(VastError::Auth(m)) => {
            assert!(
                m.contains("VAST_API_KEY") && m.contains("vast_api_key"),
                "{m}"
            )
        }
        other => panic!("expected Auth, got {other:?}"),
    }
    assert!(matches!(
        client.create_instance(&launch(1, "x")),
        Err(VastError::Auth(_))
    ));
    assert!(s.fake.requests().is_empty());
}

#[test]
fn a_refused_key_is_an_auth_error_in_both_statuses() {
    let s = setup();
    let client = HttpVastClient::new(
        &s.fake.url(),
        Some("wrong-key-98765".into()),
        s.clock.clone(),
        Duration::from_secs(5),
    );
    for status in [401, 404] {
        s.fake.set_auth_error_status(status);
        match client.list_instances() {
            Err(e @ VastError::Auth(_)) => {
                let text = e.to_string();
                assert!(text.contains("VAST_API_KEY"), "{text}");
                assert!(!text.contains("wrong-key-98765"), "{text}");
            }
            other => panic!("HTTP {status}: expected Auth, got {other:?}"),
        }
    }
    assert_eq!(
        s.fake.count(Route::ListV1),
        2,
        "auth errors are not retried"
    );
}

#[test]
fn the_key_never_appears_in_urls_or_error_texts() {
    const KEY: &str = "vk_live_5ecre7_d0_n0t_l3ak";
    let s = setup();
    s.fake.set_api_key(Some(KEY));
    let client = HttpVastClient::new(
        &s.fake.url(),
        Some(KEY.into()),
        s.clock.clone(),
        Duration::from_secs(5),
    );
    let id = s.fake.add_instance("fleetagent-1-k");
    let offer = s.fake.add_offer("RTX 4090", 0.45, 0.995);

    s.fake.fail_next(
        Route::Show,
        1,
        FakeReply::json(
            400,
            json!({"error": "invalid_args", "msg": format!("bad key {KEY}")}),
        ),
    );
    s.fake.fail_next(
        Route::Create,
        1,
        FakeReply::text(500, &format!("Authorization: Bearer {KEY}")),
    );
    s.fake.fail_next(
        Route::ListV1,
        1,
        FakeReply::json(200, json!({"success": false, "error": KEY, "msg": KEY})),
    );
    s.fake.fail_next(
        Route::Offers,
        1,
        FakeReply::text(200, &format!("<p>{KEY}</p>")),
    );
    s.fake.fail_next(
        Route::Manage,
        4,
        FakeReply::text(429, &format!("slow down {KEY}")),
    );
    s.fake.fail_next(
        Route::Destroy,
        1,
        FakeReply::json(
            401,
            json!({"error": "auth_error", "msg": format!("Invalid key {KEY}")}),
        ),
    );
    let errors = vec![
        client.show_instance(id).unwrap_err(),
        client
            .create_instance(&launch(offer, "fleetagent-1-k2"))
            .unwrap_err(),
        client.list_instances().unwrap_err(),
        client.search_offers(&query()).unwrap_err(),
        client.stop_instance(id).unwrap_err(),
        client.destroy_instance(id).unwrap_err(),
    ];
    for e in &errors {
        let shown = format!("{e} {e:?}");
        assert!(!shown.contains(KEY), "key leaked: {shown}");
    }
    assert!(matches!(errors[4], VastError::RateLimited(_)));
    assert!(matches!(errors[5], VastError::Auth(_)));

    client.instance_logs(id, 5).unwrap();
    for r in s.fake.requests() {
        assert!(!r.path.contains(KEY) && !r.query.contains(KEY), "{r:?}");
        assert!(!r.body.contains(KEY), "{r:?}");
        match r.route {
            Route::LogFile => assert_eq!(r.authorization, None),
            _ => assert_eq!(r.authorization.as_deref(), Some(&*format!("Bearer {KEY}"))),
        }
    }
}

#[test]
fn long_error_messages_are_cut() {
    let s = setup();
    let long = "y".repeat(5_000);
    s.fake.fail_next(
        Route::Show,
        1,
        FakeReply::json(400, json!({"error": "invalid_args", "msg": long})),
    );
    match s.client.show_instance(1) {
        Err(e @ VastError::Api { .. }) => {
            let text = e.to_string();
            assert!(text.contains("invalid_args"), "{text}");
            assert!(text.len() < 600, "{} chars", text.len());
        }
        other => panic!("expected Api, got {other:?}"),
    }
}

#[test]
fn a_key_straddling_the_message_cut_leaves_no_prefix_behind() {
    const KEY: &str = "vk_live_abcdefghijklmnopqrstuvwxyz0123456789";
    let s = setup();
    s.fake.set_api_key(Some(KEY));
    let client = HttpVastClient::new(
        &s.fake.url(),
        Some(KEY.into()),
        s.clock.clone(),
        Duration::from_secs(5),
    );
    let msg = format!("{}{KEY}{}", "x".repeat(290), "z".repeat(100));
    s.fake.fail_next(
        Route::Show,
        1,
        FakeReply::json(400, json!({"error": "invalid_args", "msg": msg})),
    );
    let shown = client.show_instance(1).unwrap_err().to_string();
    assert!(!shown.contains(&KEY[..6]), "a key prefix leaked: {shown}");
}
