//! The instance list: pagination by next_token, the documented rate limits, the deprecated
//! v0 list, the page shapes that are not an empty fleet, and gateway errors on reads retried
//! with backoff.

use fleetagent::vast::{VastClient, VastError};
use serde_json::json;

use super::{setup, statuses};
use crate::common::fake_vast::{FakeReply, Route};

#[test]
fn list_follows_next_token_over_several_pages() {
    let s = setup();
    let mut ids: Vec<u64> = (0..60)
        .map(|n| s.fake.add_instance(&format!("fleetagent-{n}-x")))
        .collect();
    ids.sort_unstable();
    let listed = s.client.list_instances().unwrap();
    let got: Vec<u64> = listed.iter().map(|i| i.id).collect();
    assert_eq!(got, ids);

    let pages = s.fake.requests_to(Route::ListV1);
    assert_eq!(pages.len(), 3, "25 + 25 + 10");
    assert!(pages
        .iter()
        .all(|p| p.status == 200 && p.path == "/api/v1/instances/"));
    assert_eq!(pages[0].param("limit").as_deref(), Some("25"));
    assert_eq!(pages[0].param("after_token"), None);
    let token = pages[1]
        .param("after_token")
        .expect("second page has a token");
    assert!(
        token.contains('+') && token.contains('/'),
        "token decoded intact: {token}"
    );
    assert_ne!(pages[2].param("after_token"), Some(token));
    assert_eq!(s.fake.count(Route::ListV0), 0, "never the deprecated list");
}

#[test]
fn list_survives_the_documented_rate_limits() {
    let s = setup();
    s.fake.vast_rate_limits();
    for n in 0..60 {
        s.fake.add_instance(&format!("fleetagent-{n}-y"));
    }
    assert_eq!(s.client.list_instances().unwrap().len(), 60);
    let st = statuses(&s.fake, Route::ListV1);
    assert_eq!(st.iter().filter(|&&c| c == 200).count(), 3);
    assert!(
        !st.contains(&429),
        "pages are spaced by vast.ai's 1 s, so none is refused: {st:?}"
    );
    let ok_times: Vec<i64> = s
        .fake
        .requests_to(Route::ListV1)
        .iter()
        .filter(|r| r.status == 200)
        .map(|r| r.at_ms)
        .collect();
    assert!(
        ok_times.windows(2).all(|w| w[1] - w[0] >= 1_000),
        "{ok_times:?}"
    );
}

#[test]
fn a_410_is_deprecated_and_never_an_empty_fleet() {
    let s = setup();
    s.fake.add_instance("fleetagent-1-a");
    s.fake.fail_next(
        Route::ListV1,
        1,
        FakeReply::json(
            410,
            json!({"success": false, "error": "deprecated_endpoint",
                   "msg": "This endpoint is deprecated. Use /api/v2/instances/ instead."}),
        ),
    );
    match s.client.list_instances() {
        Err(VastError::Deprecated(m)) => assert!(m.contains("/api/v2/instances/"), "{m}"),
        other => panic!("expected Deprecated, got {other:?}"),
    }

    // The fake's v0 list itself answers as vast.ai does now.
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut resp = agent
        .get(format!("{}/api/v0/instances/", s.fake.url()))
        .header("Authorization", format!("Bearer {}", s.fake.api_key()))
        .call()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 410);
    let body: serde_json::Value =
        serde_json::from_str(&resp.body_mut().read_to_string().unwrap()).unwrap();
    assert_eq!(body["error"], "deprecated_endpoint");
}

#[test]
fn a_null_page_is_empty_but_a_page_without_instances_is_an_error() {
    let s = setup();
    s.fake.fail_next(
        Route::ListV1,
        1,
        FakeReply::json(
            200,
            json!({"success": true, "instances": null, "next_token": null}),
        ),
    );
    assert_eq!(s.client.list_instances().unwrap(), vec![]);
    s.fake.fail_next(
        Route::ListV1,
        1,
        FakeReply::json(200, json!({"success": true})),
    );
    assert!(matches!(
        s.client.list_instances(),
        Err(VastError::Decode(_))
    ));
}

/// A listing that cannot be read whole is an error, never a smaller fleet: what it leaves out
/// reads as gone and is replaced while it bills (a walkthrough saw two creates for each).
#[test]
fn a_page_that_hides_instances_is_an_error() {
    let s = setup();
    let decode = |page: serde_json::Value, said: &str| {
        s.fake
            .fail_next(Route::ListV1, 1, FakeReply::json(200, page));
        match s.client.list_instances() {
            Err(VastError::Decode(m)) => assert!(m.contains(said), "{m}"),
            other => panic!("expected Decode with {said:?}, got {other:?}"),
        }
    };
    decode(
        json!({"success": true, "instances": null, "instances_found": 2, "next_token": null}),
        "says 2 instance(s) found and lists none",
    );
    decode(
        json!({"success": true, "instances": [], "instances_found": 2, "next_token": null}),
        "says 2 instance(s) found and lists none",
    );
    for id in [
        json!(-7000001),
        json!(99999999999999999999u128.to_string()),
        json!(null),
    ] {
        decode(
            json!({"success": true, "instances": [{"id": 1}, {"id": id, "actual_status": "running"}]}),
            "row without a usable id",
        );
    }
    decode(
        json!({"success": true, "instances": [
            {"id": 5, "actual_status": "exited"}, {"id": 5, "actual_status": "running"}]}),
        "has instance 5 twice, in two different states",
    );
    // Fewer rows over all pages than the listing counts (a short last page; an empty
    // second page; the count sent as a string).
    decode(
        json!({"success": true, "instances": [{"id": 1}], "instances_found": 2, "next_token": null}),
        "counts 2 instance(s) (`instances_found`) and lists 1",
    );
    decode(
        json!({"success": true, "instances": [{"id": 1}], "instances_found": "2"}),
        "counts 2 instance(s)",
    );
    // The same row twice (pages that overlap) is one instance.
    let twice = json!({"success": true, "instances": [
        {"id": 5, "actual_status": "running"}, {"id": 5, "actual_status": "running"}]});
    s.fake
        .fail_next(Route::ListV1, 1, FakeReply::json(200, twice));
    assert_eq!(s.client.list_instances().unwrap().len(), 1);
}

#[test]
fn a_repeated_next_token_stops_the_loop() {
    let s = setup();
    let page = json!({"success": true, "instances": [{"id": 1}], "next_token": "same"});
    s.fake
        .fail_next(Route::ListV1, 5, FakeReply::json(200, page));
    match s.client.list_instances() {
        Err(VastError::Decode(m)) => assert!(m.contains("next_token"), "{m}"),
        other => panic!("expected Decode, got {other:?}"),
    }
    assert_eq!(s.fake.count(Route::ListV1), 2);
}

#[test]
fn gateway_errors_on_reads_are_retried_with_backoff() {
    let s = setup();
    s.fake.add_instance("fleetagent-1-a");
    s.fake.fail_next(
        Route::ListV1,
        2,
        FakeReply::text(502, "<html>Bad Gateway</html>"),
    );
    assert_eq!(s.client.list_instances().unwrap().len(), 1);
    let calls = s.fake.requests_to(Route::ListV1);
    assert_eq!(statuses(&s.fake, Route::ListV1), vec![502, 502, 200]);
    assert!(calls[1].at_ms - calls[0].at_ms >= 500);
    assert!(calls[2].at_ms - calls[1].at_ms >= 1_000, "backoff grows");
}

/// An answer larger than any listing (17 MiB): vast.ai was reached, and said something the
/// client will not read; "unreachable" sent the operator to the network.
#[test]
fn a_body_over_the_limit_is_unreadable_not_unreachable() {
    let s = setup();
    let huge = format!(
        "{{\"instances\": [], \"pad\": \"{}\"}}",
        "x".repeat(17 << 20)
    );
    s.fake
        .fail_next(Route::ListV1, 10, FakeReply::text(200, &huge));
    let e = s.client.list_instances().unwrap_err();
    assert!(matches!(e, VastError::Decode(_)), "{e:?}");
    assert!(
        e.to_string()
            .starts_with("vast.ai answered something unreadable: ")
            && e.to_string().contains("a body over 16777216 bytes"),
        "{e}"
    );
}

/// vast.ai's clock comes with its answers (`Date`, to the second) and the client keeps the
/// last one with when it came: the fake shares the client's clock, so the skew is what
/// `Date`'s truncation to the second leaves. A wall clock set right after the answer is read
/// as set right (the skew is taken as of the moment it is read). None before any answer.
#[test]
fn the_last_answer_gives_vast_ais_clock() {
    let s = setup();
    assert_eq!(s.client.server_clock(), None);
    s.clock.advance(std::time::Duration::from_millis(1_700));
    s.client.list_instances().unwrap();
    let c = s.client.server_clock().expect("a Date with the answer");
    let now = fleetagent::clock::Clock::now_ms(&*s.clock);
    assert_eq!(c.server_ms, now - now.rem_euclid(1000));
    assert!((0..1000).contains(&c.skew_at(now)), "{c:?}");
    let two_hours = 7_200_000;
    let stepped = c.skew_at(now + two_hours);
    assert!(
        (two_hours - 1000..two_hours + 1000).contains(&stepped),
        "{stepped}"
    );
}

/// Another process of the same key paging at vast.ai's 1 s limit (a poll beside a run) can
/// have a page refused several times in a row: a read waits out up to 8 of them within the
/// call's budget, where a write gives up after 4 (the scale walkthrough: at 200 instances a
/// run and a poll refused each other until one gave up, blind).
#[test]
fn a_page_refused_429_five_times_still_lists() {
    let s = setup();
    for n in 0..3 {
        s.fake.add_instance(&format!("fleetagent-{n}-z"));
    }
    s.fake
        .fail_next(Route::ListV1, 5, FakeReply::too_frequent(1.0));
    assert_eq!(s.client.list_instances().unwrap().len(), 3);
    assert_eq!(
        statuses(&s.fake, Route::ListV1),
        vec![429, 429, 429, 429, 429, 200]
    );
}
