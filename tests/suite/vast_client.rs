//! The vast.ai HTTP client against the fake vast.ai: request shapes, pagination, rate limits
//! and penalties, failure shapes, statuses, auth and key hygiene. Client and fake share one
//! ManualClock, so every wait is simulated and asserted from the fake's request log.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use fleetagent::clock::{Clock, ManualClock};
use fleetagent::vast::http::HttpVastClient;
use fleetagent::vast::{CreateRequest, OfferQuery, VastClient, VastError};
use serde_json::json;

use crate::common::fake_vast::{FakeReply, FakeVast, Route};

const T0: i64 = 1_754_000_000_000;

struct Setup {
    clock: Arc<ManualClock>,
    fake: FakeVast,
    client: HttpVastClient,
}

fn setup() -> Setup {
    let clock = Arc::new(ManualClock::new(T0));
    let fake = FakeVast::start(clock.clone());
    let client = client_for(&fake, &clock, Duration::from_secs(5));
    Setup {
        clock,
        fake,
        client,
    }
}

fn client_for(fake: &FakeVast, clock: &Arc<ManualClock>, timeout: Duration) -> HttpVastClient {
    HttpVastClient::new(&fake.url(), Some(fake.api_key()), clock.clone(), timeout)
}

fn launch(offer_id: u64, label: &str) -> CreateRequest {
    let mut env = BTreeMap::new();
    env.insert("FLEETAGENT_LABEL".to_string(), label.to_string());
    env.insert("CURIO_LAYERS".to_string(), "psprove".to_string());
    CreateRequest {
        offer_id,
        image: "ghcr.io/example/curio-psprove:latest".into(),
        disk_gb: 40.0,
        label: label.into(),
        env,
        onstart: None,
        bid_price: None,
    }
}

fn query() -> OfferQuery {
    OfferQuery {
        gpu_names: vec!["RTX 4090".into(), "RTX_3090".into()],
        max_dph: Some(0.6),
        min_reliability: Some(0.98),
        min_gpu_ram_gb: None,
        verified_only: true,
        interruptible: false,
        disk_gb: 40.0,
        limit: 4,
    }
}

fn statuses(fake: &FakeVast, route: Route) -> Vec<u16> {
    fake.requests_to(route).iter().map(|r| r.status).collect()
}

// ---- search ----

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

// ---- create ----

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
    let other = client_for(&s.fake, &s.clock, Duration::from_secs(5));
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
    let found: Vec<_> = client
        .list_instances()
        .unwrap()
        .into_iter()
        .filter(|i| i.label.as_deref() == Some("fleetagent-6-a"))
        .collect();
    assert_eq!(found.len(), 1, "the rent went through");
}

// ---- list ----

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
    assert!(st.contains(&429), "pages came faster than 1/s: {st:?}");
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

// ---- statuses and strings ----

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

// ---- logs ----

#[test]
fn logs_poll_the_result_url_without_credentials() {
    let s = setup();
    let id = s.fake.add_instance("fleetagent-1-l");
    let text: String = (1..=10).map(|n| format!("line {n}\n")).collect();
    s.fake.set_log_text(id, &text);
    s.fake.set_log_misses(5);
    let logs = s.client.instance_logs(id, 3).unwrap();
    assert_eq!(logs, "line 8\nline 9\nline 10\n");
    assert_eq!(
        s.fake.requests_to(Route::RequestLogs)[0].json(),
        json!({"tail": "3"})
    );
    let polls = s.fake.requests_to(Route::LogFile);
    assert_eq!(polls.len(), 6, "5 misses, then the text");
    assert!(polls.iter().all(|p| p.authorization.is_none()));
    assert!(polls[5].at_ms - polls[0].at_ms >= 5 * 300);
}

#[test]
fn logs_give_up_after_30_polls_and_unknown_ids_are_named() {
    let s = setup();
    let id = s.fake.add_instance("fleetagent-1-l");
    s.fake.set_log_misses(100);
    match s.client.instance_logs(id, 50) {
        Err(VastError::Api { code, .. }) => assert_eq!(code, "logs_not_ready"),
        other => panic!("expected logs_not_ready, got {other:?}"),
    }
    assert_eq!(s.fake.count(Route::LogFile), 30);
    assert!(matches!(
        s.client.instance_logs(id + 7, 50),
        Err(VastError::NoSuchInstance(_))
    ));
}

// ---- retries and limits ----

#[test]
fn a_rate_limit_that_outlasts_the_retries_is_rate_limited() {
    let s = setup();
    let id = s.fake.add_instance("fleetagent-1-r");
    s.fake
        .fail_next(Route::Show, 4, FakeReply::too_frequent(2.0));
    assert!(matches!(
        s.client.show_instance(id),
        Err(VastError::RateLimited(_))
    ));
    let calls = s.fake.requests_to(Route::Show);
    assert_eq!(calls.len(), 4);
    assert!(
        calls.windows(2).all(|w| w[1].at_ms - w[0].at_ms >= 2_000),
        "threshold honoured"
    );

    s.fake.clear_requests();
    s.fake.fail_next(
        Route::Show,
        1,
        FakeReply::text(429, "search quota exceeded").with_retry_after("3600"),
    );
    assert!(matches!(
        s.client.show_instance(id),
        Err(VastError::RateLimited(_))
    ));
    assert_eq!(
        s.fake.count(Route::Show),
        1,
        "an hour is not waited in a pass"
    );
}

#[test]
fn a_hung_read_is_retried_after_the_timeout() {
    let s = setup();
    let client = client_for(&s.fake, &s.clock, Duration::from_secs(1));
    let id = s.fake.add_instance("fleetagent-1-h");
    s.fake.fail_next(Route::Show, 1, FakeReply::hang());
    let inst = client.show_instance(id).unwrap().unwrap();
    assert_eq!(inst.id, id);
    assert_eq!(statuses(&s.fake, Route::Show), vec![0, 200]);
}

#[test]
fn an_unreachable_server_is_a_transport_error() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let clock = Arc::new(ManualClock::new(T0));
    let client = HttpVastClient::new(
        &format!("http://127.0.0.1:{port}"),
        Some("k-123456".into()),
        clock.clone(),
        Duration::from_secs(2),
    );
    assert!(matches!(
        client.list_instances(),
        Err(VastError::Transport(_))
    ));
    assert!(clock.now_ms() > T0, "backed off between attempts");
    let err = client
        .create_instance(&launch(1, "fleetagent-1-u"))
        .unwrap_err();
    assert!(matches!(err, VastError::Transport(_)), "{err:?}");
}

// ---- auth and the key ----

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

// ---- the fake itself (operators the client does not send yet) ----

fn raw(
    fake: &FakeVast,
    method: &str,
    path_and_query: &str,
    body: serde_json::Value,
) -> (u16, serde_json::Value) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let url = format!("{}{path_and_query}", fake.url());
    let auth = format!("Bearer {}", fake.api_key());
    let mut resp = match method {
        "GET" => agent.get(&url).header("Authorization", &auth).call(),
        _ => agent
            .post(&url)
            .header("Authorization", &auth)
            .send(body.to_string()),
    }
    .unwrap();
    let status = resp.status().as_u16();
    let text = resp.body_mut().read_to_string().unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(serde_json::Value::Null),
    )
}

#[test]
fn the_fake_applies_every_filter_operator() {
    let s = setup();
    let a = s.fake.add_offer("RTX 4090", 0.30, 0.99);
    let b = s.fake.add_offer("RTX 3090", 0.20, 0.95);
    let c = s.fake.add_offer("A100 SXM4", 0.90, 0.999);
    let ids = |q: serde_json::Value| -> Vec<u64> {
        let (status, body) = raw(&s.fake, "POST", "/api/v0/bundles/", q);
        assert_eq!(status, 200, "{body}");
        body["offers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["id"].as_u64().unwrap())
            .collect()
    };
    let by_price = json!([["dph_total", "asc"]]);
    assert_eq!(
        ids(json!({"gpu_name": {"neq": "RTX 4090"}, "order": by_price})),
        vec![b, c]
    );
    assert_eq!(
        ids(json!({"gpu_name": {"notin": ["RTX 4090", "A100 SXM4"]}})),
        vec![b]
    );
    assert_eq!(ids(json!({"dph_total": {"gt": 0.2, "lt": 0.9}})), vec![a]);
    assert_eq!(
        ids(json!({"reliability": {"gte": 0.99}, "order": [["dph_total", "desc"]]})),
        vec![c, a]
    );
    assert_eq!(ids(json!({"order": by_price, "limit": 2})), vec![b, a]);
    let (status, body) = raw(
        &s.fake,
        "POST",
        "/api/v0/bundles/",
        json!({"gpu_name": {"like": "x"}}),
    );
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("invalid_args"))
    );

    // v1 list: select_filters on a stored column, and a bad token.
    let run = s.fake.add_instance("fleetagent-1-a");
    let gone = s.fake.add_instance("fleetagent-1-b");
    s.fake.set_actual_status(gone, Some("exited"));
    let (status, body) = raw(
        &s.fake,
        "GET",
        "/api/v1/instances/?select_filters=%7B%22actual_status%22%3A%7B%22eq%22%3A%22running%22%7D%7D",
        json!(null),
    );
    assert_eq!(status, 200);
    assert_eq!(body["instances"].as_array().unwrap().len(), 1);
    assert_eq!(body["instances"][0]["id"].as_u64(), Some(run));
    assert_eq!(
        (
            body["instances_found"].as_u64(),
            body["total_instances"].as_u64()
        ),
        (Some(1), Some(2))
    );
    let (status, body) = raw(
        &s.fake,
        "GET",
        "/api/v1/instances/?after_token=nope",
        json!(null),
    );
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("invalid_token"))
    );
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
