//! One instance: statuses and strings as given, show, stop, label, destroy, and
//! `success: false` on HTTP 200.

use std::time::Duration;

use fleetagent::vast::http::HttpVastClient;
use fleetagent::vast::{VastClient, VastError};
use serde_json::json;

use super::{launch, query, setup, statuses, T0};
use crate::common::fake_vast::{FakeReply, Route};

#[test]
fn status_values_are_kept_as_given() {
    let s = setup();
    let wanted: [Option<&str>; 6] = [
        None,
        Some("loading"),
        Some("running"),
        Some("exited"),
        Some("offline"),
        Some("hibernating_v2"),
    ];
    let ids: Vec<u64> = wanted
        .iter()
        .map(|st| {
            let id = s.fake.add_instance("fleetagent-2-s");
            s.fake.set_actual_status(id, *st);
            id
        })
        .collect();
    let listed = s.client.list_instances().unwrap();
    let got: Vec<Option<&str>> = listed.iter().map(|i| i.actual_status.as_deref()).collect();
    assert_eq!(got, wanted.to_vec());
    assert_eq!(
        s.client
            .show_instance(ids[0])
            .unwrap()
            .unwrap()
            .actual_status,
        None
    );
    assert_eq!(
        s.client
            .show_instance(ids[5])
            .unwrap()
            .unwrap()
            .actual_status
            .as_deref(),
        Some("hibernating_v2")
    );
}

#[test]
fn instance_strings_are_trimmed() {
    let s = setup();
    let id = s.fake.add_instance("x");
    s.fake.set_public_ip(id, Some(" 203.0.113.9 \n"));
    s.fake
        .set_instance_field(id, "label", json!("  fleetagent-7-c  "));
    s.fake.set_status_msg(id, Some("  pulling image  \n"));
    s.fake.set_actual_status(id, Some(" running "));
    for inst in [
        s.client.list_instances().unwrap().remove(0),
        s.client.show_instance(id).unwrap().unwrap(),
    ] {
        assert_eq!(inst.public_ip.as_deref(), Some("203.0.113.9"));
        assert_eq!(inst.label.as_deref(), Some("fleetagent-7-c"));
        assert_eq!(inst.status_msg.as_deref(), Some("pulling image"));
        assert_eq!(inst.actual_status.as_deref(), Some("running"));
    }
}

#[test]
fn a_new_instance_moves_from_null_to_loading_to_running() {
    let s = setup();
    s.fake
        .set_progression(Duration::from_secs(60), Duration::from_secs(180));
    let offer = s.fake.add_offer("RTX 4090", 0.45, 0.995);
    let id = s
        .client
        .create_instance(&launch(offer, "fleetagent-1-p"))
        .unwrap();
    let status = |c: &HttpVastClient| c.show_instance(id).unwrap().unwrap().actual_status;
    assert_eq!(status(&s.client), None);
    s.clock.advance(Duration::from_secs(90));
    assert_eq!(status(&s.client).as_deref(), Some("loading"));
    s.clock.advance(Duration::from_secs(100));
    assert_eq!(status(&s.client).as_deref(), Some("running"));
    let inst = s.client.show_instance(id).unwrap().unwrap();
    assert_eq!(inst.dph_total, Some(0.45));
    assert_eq!(inst.start_date, Some(T0 as f64 / 1000.0));
}

// ---- show, stop, label, destroy ----

#[test]
fn show_of_a_missing_instance_is_none_in_both_shapes() {
    let s = setup();
    assert_eq!(s.client.show_instance(123).unwrap(), None);
    s.fake.set_show_missing_404(true);
    assert_eq!(s.client.show_instance(123).unwrap(), None);
    assert_eq!(statuses(&s.fake, Route::Show), vec![200, 404]);
    // An answer that says nothing of it is not "gone" (a re-test saw `{}` mark a billing
    // instance gone): an error, so the pass holds the fleet.
    s.fake.set_show_missing_404(false);
    s.fake.fail_next(
        Route::Show,
        1,
        FakeReply::json(200, json!({"success": true})),
    );
    assert!(s.client.show_instance(123).is_err());
}

#[test]
fn stop_and_label_change_the_instance() {
    let s = setup();
    let id = s.fake.add_instance("fleetagent-1-a");
    s.client.stop_instance(id).unwrap();
    let inst = s.fake.instance(id).unwrap();
    assert_eq!(inst["actual_status"], "stopped");
    assert_eq!(inst["cur_state"], "stopped");
    assert_eq!(
        s.fake.requests_to(Route::Manage)[0].json(),
        json!({"state": "stopped"})
    );

    s.client.label_instance(id, "fleetagent-adopted").unwrap();
    assert_eq!(s.fake.instance(id).unwrap()["label"], "fleetagent-adopted");

    match s.client.stop_instance(id + 1000) {
        Err(VastError::NoSuchInstance(x)) => assert_eq!(x, id + 1000),
        other => panic!("expected NoSuchInstance, got {other:?}"),
    }
}

#[test]
fn success_false_on_http_200_is_a_failure_with_its_message() {
    let s = setup();
    let id = s.fake.add_instance("fleetagent-1-a");
    s.fake.fail_next(
        Route::Manage,
        1,
        FakeReply::success_false("missing_billing", "add a card before stopping"),
    );
    match s.client.stop_instance(id) {
        Err(VastError::Api { status, code, msg }) => {
            assert_eq!((status, code.as_str()), (200, "missing_billing"));
            // The message names the route it came from.
            assert_eq!(
                msg,
                format!("PUT /api/v0/instances/{id}/: add a card before stopping")
            );
        }
        other => panic!("expected Api, got {other:?}"),
    }
    assert_eq!(s.fake.instance(id).unwrap()["actual_status"], "running");

    s.fake.fail_next(
        Route::Offers,
        1,
        FakeReply::json(200, json!({"success": false, "msg": "no"})),
    );
    match s.client.search_offers(&query()) {
        Err(VastError::Api {
            status: 200,
            code,
            msg,
        }) => {
            assert_eq!(
                (code.as_str(), msg.as_str()),
                ("success_false", "POST /api/v0/bundles/: no")
            )
        }
        other => panic!("expected Api, got {other:?}"),
    }
}

#[test]
fn destroy_is_idempotent() {
    let s = setup();
    let offer = s.fake.add_offer("RTX 4090", 0.45, 0.995);
    let id = s
        .client
        .create_instance(&launch(offer, "fleetagent-1-d"))
        .unwrap();
    s.client.destroy_instance(id).unwrap();
    s.client.destroy_instance(id).unwrap();
    assert_eq!(statuses(&s.fake, Route::Destroy), vec![200, 404]);
    let deletes = s.fake.requests_to(Route::Destroy);
    assert_eq!(deletes[0].method, "DELETE");
    assert_eq!(deletes[0].body, "{}");
    assert_eq!(s.client.show_instance(id).unwrap(), None);
    assert!(!s.fake.offer_rented(offer), "the machine is free again");
}

/// A destroy answered 500 is sent again (it was the panic button's only try: a walkthrough);
/// a create never is (it may have rented).
#[test]
fn a_destroy_answered_500_is_retried_a_create_is_not() {
    let s = setup();
    let offer = s.fake.add_offer("RTX 4090", 0.45, 0.995);
    let id = s
        .client
        .create_instance(&launch(offer, "fleetagent-1-e"))
        .unwrap();
    let boom = FakeReply::json(
        500,
        serde_json::json!({"error": "server_error", "msg": "boom"}),
    );
    s.fake.fail_next(Route::Destroy, 1, boom.clone());
    s.client.destroy_instance(id).unwrap();
    assert_eq!(statuses(&s.fake, Route::Destroy), vec![500, 200]);
    let offer = s.fake.add_offer("RTX 4090", 0.45, 0.995);
    s.fake.fail_next(Route::Create, 1, boom);
    assert!(s
        .client
        .create_instance(&launch(offer, "fleetagent-1-f"))
        .is_err());
    assert_eq!(s.fake.count(Route::Create), 2, "one create before, one now");
}

/// A destroy refused 429 and sent again: the next destroy is spaced from the retry, not from
/// the refused first try (the scale walkthrough: each destroy after one 429 went 0.25 s after
/// the previous retry and was refused too, every DELETE sent twice).
#[test]
fn destroys_after_a_429_are_spaced_from_the_retry() {
    let s = setup();
    let ids: Vec<u64> = (0..3)
        .map(|i| {
            let offer = s.fake.add_offer("RTX 4090", 0.45, 0.995);
            s.client
                .create_instance(&launch(offer, &format!("fleetagent-1-s{i}")))
                .unwrap()
        })
        .collect();
    s.fake
        .fail_next(Route::Destroy, 1, FakeReply::too_frequent(2.0));
    for id in &ids {
        s.client.destroy_instance(*id).unwrap();
    }
    assert_eq!(statuses(&s.fake, Route::Destroy), vec![429, 200, 200, 200]);
    let at: Vec<i64> = s
        .fake
        .requests_to(Route::Destroy)
        .iter()
        .map(|r| r.at_ms)
        .collect();
    for pair in at[1..].windows(2) {
        assert!(pair[1] - pair[0] >= 3_250, "{at:?}");
    }
}
