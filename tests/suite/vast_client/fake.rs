//! The fake itself: operators the client does not send yet.

use serde_json::json;

use super::setup;
use crate::common::fake_vast::FakeVast;

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
