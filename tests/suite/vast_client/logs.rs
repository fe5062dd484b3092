//! Container logs: the result_url is polled without credentials, and the wait is bounded.

use fleetagent::vast::{VastClient, VastError};
use serde_json::json;

use super::setup;
use crate::common::fake_vast::Route;

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
