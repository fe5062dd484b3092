//! The vast.ai HTTP client against the fake vast.ai: request shapes, pagination, rate limits
//! and penalties, failure shapes, statuses, auth and key hygiene. Client and fake share one
//! ManualClock, so every wait is simulated and asserted from the fake's request log.

mod auth;
mod create;
mod fake;
mod instances;
mod list;
mod logs;
mod retries;
mod search;
mod vast_truth;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use fleetagent::clock::ManualClock;
use fleetagent::vast::http::HttpVastClient;
use fleetagent::vast::{CreateRequest, OfferQuery};

use crate::common::fake_vast::{FakeVast, Route};

const T0: i64 = 1_754_000_000_000;

struct Setup {
    clock: Arc<ManualClock>,
    fake: FakeVast,
    client: HttpVastClient,
}

fn setup() -> Setup {
    let clock = Arc::new(ManualClock::new(T0));
    let fake = FakeVast::start(clock.clone());
    // vast.timeout_secs' default: one call (429 waits included) may take 3x as long.
    let client = client_for(&fake, &clock, Duration::from_secs(20));
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
        image_login: None,
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
        exclude_machines: Vec::new(),
    }
}

fn statuses(fake: &FakeVast, route: Route) -> Vec<u16> {
    fake.requests_to(route).iter().map(|r| r.status).collect()
}
