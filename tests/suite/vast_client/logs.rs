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

#[test]
fn a_hosts_log_and_status_message_have_every_known_secret_cut_out() {
    let s = setup();
    let pw = "worker-PW-Xc71bQ9zLm".to_string();
    let client = super::client_for(&s.fake, &s.clock, std::time::Duration::from_secs(20))
        .with_secrets(vec![pw.clone(), "local".to_string()]);
    let id = s.fake.add_instance("fleetagent-1-l");
    s.fake.set_log_text(
        id,
        &format!("+ export CURIO_DB_PASSWORD={pw}\nup on localhost\n"),
    );
    s.fake
        .set_status_msg(id, Some(&format!("exit: bad password {}", &pw[..12])));
    let logs = client.instance_logs(id, 5).unwrap();
    // A stand-in key under 6 characters (a local server's `local`) is no secret to cut.
    assert_eq!(
        logs,
        "+ export CURIO_DB_PASSWORD=[redacted]\nup on localhost\n"
    );
    let listed = client.list_instances().unwrap();
    assert_eq!(
        listed[0].status_msg.as_deref(),
        Some("exit: bad password [redacted]")
    );
    let shown = client.show_instance(id).unwrap().unwrap();
    assert_eq!(listed[0].status_msg, shown.status_msg);
}
