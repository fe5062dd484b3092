//! Creates: what a rent sends, a low bid, the 4.5 s spacing and the 12 s penalty, and the
//! answers that may have created an instance (never retried).

use std::time::Duration;

use fleetagent::vast::{VastClient, VastError};
use serde_json::json;

use super::{client_for, launch, setup, statuses};
use crate::common::fake_vast::{FakeReply, Route};

#[test]
fn create_rents_the_offer_with_label_env_and_args_runtype() {
    let s = setup();
    let offer = s.fake.add_offer("RTX 4090", 0.45, 0.995);
    let id = s
        .client
        .create_instance(&launch(offer, "fleetagent-12-call_a"))
        .unwrap();

    let inst = s.fake.instance(id).expect("the fake made the instance");
    assert_eq!(inst["label"], "fleetagent-12-call_a");
    assert!(
        inst["actual_status"].is_null(),
        "a new instance has no status yet"
    );
    let env = s.fake.instance_env(id).unwrap();
    assert_eq!(env["FLEETAGENT_LABEL"], "fleetagent-12-call_a");
    assert_eq!(env["CURIO_LAYERS"], "psprove");
    assert!(s.fake.offer_rented(offer));

    let sent = &s.fake.requests_to(Route::Create)[0];
    assert_eq!(
        (sent.method.as_str(), sent.path.clone()),
        ("PUT", format!("/api/v0/asks/{offer}/"))
    );
    let body = sent.json();
    assert_eq!(body["client_id"], "me");
    assert_eq!(body["runtype"], "args");
    assert_eq!(body["disk"].as_f64(), Some(40.0));
    assert!(body["price"].is_null());
    assert_eq!(
        body["cancel_unavail"], true,
        "never a stopped instance instead"
    );
    assert!(body.get("onstart").is_none());

    match s
        .client
        .create_instance(&launch(offer, "fleetagent-12-call_b"))
    {
        Err(VastError::NoSuchAsk(o)) => assert_eq!(o, offer),
        other => panic!("a rented offer must be NoSuchAsk, got {other:?}"),
    }
    assert_eq!(s.fake.instance_ids(), vec![id]);
}

#[test]
fn an_onstart_command_becomes_the_entrypoint() {
    let s = setup();
    let offer = s.fake.add_offer("RTX 4090", 0.45, 0.995);
    let mut req = launch(offer, "fleetagent-1-a");
    req.onstart = Some("/opt/start-worker.sh --layers psprove".into());
    let id = s.client.create_instance(&req).unwrap();
    let body = s.fake.requests_to(Route::Create)[0].json();
    assert_eq!(body["onstart"], "/bin/sh");
    assert_eq!(
        body["args"],
        json!(["-c", "/opt/start-worker.sh --layers psprove"])
    );
    assert_eq!(
        s.fake.instance(id).unwrap()["image_args"],
        json!(["-c", "/opt/start-worker.sh --layers psprove"])
    );
}

#[test]
fn a_low_bid_fails_but_names_the_instance_it_made() {
    let s = setup();
    let low = s.fake.add_offer("RTX 4090", 0.45, 0.995); // min_bid 0.27
    let mut req = launch(low, "fleetagent-3-a");
    req.bid_price = Some(0.10);
    let err = s.client.create_instance(&req).unwrap_err();
    let VastError::CreateFailed { new_contract, msg } = &err else {
        panic!("expected CreateFailed, got {err:?}");
    };
    assert!(msg.contains("bid"), "{msg}");
    assert!(err.may_have_created());
    let inst = s
        .fake
        .instance(*new_contract)
        .expect("the stopped instance exists");
    assert_eq!(inst["intended_status"], "stopped");
    assert_eq!(
        s.fake.requests_to(Route::Create)[0].json()["price"],
        json!(0.10)
    );

    let ok_offer = s.fake.add_offer("RTX 4090", 0.45, 0.995);
    let mut req = launch(ok_offer, "fleetagent-3-b");
    req.bid_price = Some(0.30);
    let id = s.client.create_instance(&req).unwrap();
    assert_eq!(s.fake.instance(id).unwrap()["is_bid"], true);
}

#[test]
fn creates_from_one_client_are_spaced_4_5_s_apart() {
    let s = setup();
    s.fake.vast_rate_limits();
    let offers = s.fake.add_offers(3, "RTX 4090", 0.45, 0.995);
    for (n, offer) in offers.iter().enumerate() {
        s.client
            .create_instance(&launch(*offer, &format!("fleetagent-5-{n}")))
            .unwrap();
    }
    let creates = s.fake.requests_to(Route::Create);
    assert_eq!(
        statuses(&s.fake, Route::Create),
        vec![200, 200, 200],
        "no 429 at all"
    );
    for pair in creates.windows(2) {
        assert!(
            pair[1].at_ms - pair[0].at_ms >= 4_500,
            "creates {} ms apart",
            pair[1].at_ms - pair[0].at_ms
        );
    }
    assert_eq!(s.fake.instance_ids().len(), 3);
}

#[test]
fn a_create_sent_by_another_process_spaces_the_next_one() {
    let s = setup();
    s.fake.vast_rate_limits();
    let offers = s.fake.add_offers(2, "RTX 4090", 0.45, 0.995);
    s.client
        .create_instance(&launch(offers[0], "fleetagent-5-0"))
        .unwrap();
    // A second process: a fresh client told (from the action ledger) when the last create went.
    let first_at = s.fake.requests_to(Route::Create)[0].at_ms;
    let other = client_for(&s.fake, &s.clock, Duration::from_secs(5));
    other.previous_create(first_at);
    other
        .create_instance(&launch(offers[1], "fleetagent-6-0"))
        .unwrap();
    let creates = s.fake.requests_to(Route::Create);
    assert_eq!(statuses(&s.fake, Route::Create), vec![200, 200], "no 429");
    assert!(
        creates[1].at_ms - creates[0].at_ms >= 4_500,
        "creates {} ms apart",
        creates[1].at_ms - creates[0].at_ms
    );
}

#[test]
fn a_create_429_waits_out_the_12_s_penalty_before_retrying() {
    let s = setup();
    s.fake.vast_rate_limits();
    let offers = s.fake.add_offers(2, "RTX 4090", 0.45, 0.995);
    // Another process (its own client) created a moment ago.
    let other = client_for(&s.fake, &s.clock, Duration::from_secs(20));
    other
        .create_instance(&launch(offers[0], "fleetagent-8-a"))
        .unwrap();

    s.client
        .create_instance(&launch(offers[1], "fleetagent-8-b"))
        .unwrap();
    let creates = s.fake.requests_to(Route::Create);
    assert_eq!(statuses(&s.fake, Route::Create), vec![200, 429, 200]);
    assert!(creates[1].body.contains("fleetagent-8-b"));
    let waited = creates[2].at_ms - creates[1].at_ms;
    assert!(
        waited >= 12_000,
        "retried after {waited} ms, inside the penalty"
    );
    assert!(creates[2].at_ms - creates[0].at_ms >= 4_500);
    assert_eq!(s.fake.instance_ids().len(), 2, "exactly one instance each");
}

#[test]
fn a_create_429_honours_a_longer_retry_after() {
    let s = setup();
    let offer = s.fake.add_offer("RTX 4090", 0.45, 0.995);
    s.fake.fail_next(
        Route::Create,
        1,
        FakeReply::too_frequent(4.5).with_retry_after("40"),
    );
    s.client
        .create_instance(&launch(offer, "fleetagent-9-a"))
        .unwrap();
    let creates = s.fake.requests_to(Route::Create);
    assert_eq!(statuses(&s.fake, Route::Create), vec![429, 200]);
    assert!(creates[1].at_ms - creates[0].at_ms >= 40_000);
}

#[test]
fn a_gateway_error_on_create_is_not_retried_and_may_have_created() {
    let s = setup();
    let offer = s.fake.add_offer("RTX 4090", 0.45, 0.995);
    // The rent happened; the gateway lost the answer.
    s.fake
        .lose_next_answer(Route::Create, 1, FakeReply::text(504, "Gateway Time-out"));
    let err = s
        .client
        .create_instance(&launch(offer, "fleetagent-4-a"))
        .unwrap_err();
    assert!(matches!(err, VastError::Api { status: 504, .. }), "{err:?}");
    assert!(err.may_have_created());
    assert_eq!(
        s.fake.count(Route::Create),
        1,
        "a create is never retried blindly"
    );
    let listed = s.client.list_instances().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].label.as_deref(), Some("fleetagent-4-a"));
}

#[test]
fn a_create_timeout_is_not_retried_and_the_label_finds_the_instance() {
    let s = setup();
    let client = client_for(&s.fake, &s.clock, Duration::from_secs(1));
    let offer = s.fake.add_offer("RTX 4090", 0.45, 0.995);
    s.fake.lose_next_answer(Route::Create, 1, FakeReply::hang());
    let err = client
        .create_instance(&launch(offer, "fleetagent-6-a"))
        .unwrap_err();
    match &err {
        VastError::Transport(m) => assert!(m.contains("may have gone through"), "{m}"),
        other => panic!("expected Transport, got {other:?}"),
    }
    assert!(err.may_have_created());
    assert_eq!(s.fake.count(Route::Create), 1);
    // vast.ai left it unanswered: this process asks nothing more of it (no new wait).
    let err = client.list_instances().unwrap_err();
    assert!(matches!(err, VastError::Unanswered(_)), "{err:?}");
    assert!(!err.may_have_created());
    assert_eq!(s.fake.count(Route::ListV1), 0);
    // The next process's listing finds it by its label.
    let found: Vec<_> = client_for(&s.fake, &s.clock, Duration::from_secs(1))
        .list_instances()
        .unwrap()
        .into_iter()
        .filter(|i| i.label.as_deref() == Some("fleetagent-6-a"))
        .collect();
    assert_eq!(found.len(), 1, "the rent went through");
}

/// The hand-brake is asked when the create could go, after the spacing: a pause pressed
/// while a create waited for it holds it (nothing sent, `Withheld`), and a brake that stays
/// off lets it through.
#[test]
fn a_create_asks_its_brake_after_the_spacing() {
    let s = setup();
    let a = s.fake.add_offer("RTX 4090", 0.45, 0.995);
    let b = s.fake.add_offer("RTX 4090", 0.45, 0.995);
    s.client
        .create_instance_unless(&launch(a, "fleetagent-1-a"), &|| None)
        .unwrap();
    let start = fleetagent::clock::Clock::now_ms(&*s.clock);
    let asked_at = std::cell::Cell::new(0);
    let held = s
        .client
        .create_instance_unless(&launch(b, "fleetagent-1-b"), &|| {
            asked_at.set(fleetagent::clock::Clock::now_ms(&*s.clock));
            Some("paused by the operator".into())
        });
    assert_eq!(
        held,
        Err(VastError::Withheld("paused by the operator".into()))
    );
    assert!(asked_at.get() - start >= 4_500, "asked after the spacing");
    assert_eq!(s.fake.count(Route::Create), 1, "nothing sent");
    assert!(!s.fake.offer_rented(b));
}

/// vast.ai refusing a create with a message that quotes the request body: its `env` holds the
/// worker's credential values, which the error must not carry (nor a piece of them).
#[test]
fn a_create_error_that_echoes_the_env_has_the_worker_credential_cut_out() {
    let s = setup();
    let pw = "curio-DB-pw-Rq58tYz3Kd";
    let client =
        client_for(&s.fake, &s.clock, Duration::from_secs(20)).with_secrets(vec![pw.into()]);
    let offer = s.fake.add_offer("RTX 4090", 0.45, 0.995);
    s.fake.fail_next(
        Route::Create,
        1,
        FakeReply::json(
            400,
            json!({"success": false, "error": "invalid_args",
                   "msg": format!("bad request: {{\"env\": {{\"CURIO_DB_PASSWORD\": \"{pw}\"}}}} (or {})", &pw[..11])}),
        ),
    );
    let mut req = launch(offer, "fleetagent-1-echo");
    req.env.insert("CURIO_DB_PASSWORD".into(), pw.into());
    let err = client.create_instance(&req).unwrap_err().to_string();
    assert!(
        err.contains("invalid_args") && err.contains("[redacted]"),
        "{err}"
    );
    assert!(
        !err.contains(&pw[..10]) && !err.contains(&pw[11..]),
        "{err}"
    );
}
