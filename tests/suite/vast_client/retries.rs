//! Retries and limits: a rate limit that outlasts the retries, a hung read, an unreachable
//! server.

use std::sync::Arc;
use std::time::Duration;

use fleetagent::clock::{Clock, ManualClock};
use fleetagent::vast::http::HttpVastClient;
use fleetagent::vast::{VastClient, VastError};

use super::{client_for, launch, setup, statuses, T0};
use crate::common::fake_vast::{FakeReply, Route};

#[test]
fn a_rate_limit_that_outlasts_the_retries_is_rate_limited() {
    let s = setup();
    let id = s.fake.add_instance("fleetagent-1-r");
    // A read waits out up to 8 (a write 4), within the call's budget (3 x 20 s): the
    // doubling waits end it at the seventh.
    s.fake
        .fail_next(Route::Show, 7, FakeReply::too_frequent(2.0));
    assert!(matches!(
        s.client.show_instance(id),
        Err(VastError::RateLimited(_))
    ));
    let calls = s.fake.requests_to(Route::Show);
    assert_eq!(calls.len(), 7);
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

/// `vast.timeout_secs` bounds one call with its retries to three timeouts: a retry is made
/// only when its wait and a whole exchange still fit.
#[test]
fn retries_stop_within_three_timeouts() {
    let s = setup();
    let client = client_for(&s.fake, &s.clock, Duration::from_secs(2));
    let id = s.fake.add_instance("fleetagent-1-b");
    s.fake
        .fail_next(Route::Show, 4, FakeReply::too_frequent(2.5));
    let started = s.clock.now_ms();
    assert!(matches!(
        client.show_instance(id),
        Err(VastError::RateLimited(_))
    ));
    // 2.5 s after the first 429 a second fits (2.5 + 2 <= 6); a third would end past 6 s.
    assert_eq!(s.fake.count(Route::Show), 2);
    assert!(s.clock.now_ms() - started <= 6_000);
}
