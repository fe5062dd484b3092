//! The HTTP client's own checks (the exchanges are tested against a fake in tests/).

use super::*;

#[test]
fn only_local_endpoints_skip_the_proxy() {
    assert!(is_loopback("http://127.0.0.1:4000"));
    assert!(!is_loopback("https://console.vast.ai"));
}

#[test]
fn debug_never_shows_the_key() {
    let c = HttpVastClient::new(
        "http://127.0.0.1:1/",
        Some("sekrit-key-123".into()),
        Arc::new(crate::clock::ManualClock::new(0)),
        Duration::from_secs(1),
    );
    let shown = format!("{c:?}");
    assert!(!shown.contains("sekrit"), "{shown}");
    assert!(
        shown.contains("http://127.0.0.1:1\""),
        "base url trimmed: {shown}"
    );
    assert_eq!(c.scrub("echo sekrit-key-123 back"), "echo [redacted] back");
}

#[test]
fn missing_or_malformed_key_is_an_auth_error_naming_the_sources() {
    let clock = Arc::new(crate::clock::ManualClock::new(0));
    for key in [None, Some(""), Some("two words")] {
        let c = HttpVastClient::new(
            "http://127.0.0.1:1",
            key.map(String::from),
            clock.clone(),
            Duration::from_secs(1),
        );
        match c.list_instances() {
            Err(VastError::Auth(m)) => {
                assert!(
                    m.contains("VAST_API_KEY") && m.contains("vast_api_key"),
                    "{m}"
                )
            }
            other => panic!("expected Auth, got {other:?}"),
        }
    }
}
