//! The llm check: the fix follows the failure, since when the model has failed, and answers
//! that ran nothing.

use super::*;

/// The model's failure names the setting to change: the server's context, the budget, the
/// timeout; anything else the URL, model and key.
#[test]
fn the_llm_fix_follows_the_failure() {
    use super::agent::llm_fix;
    let overflow = "LLM server refused the request (HTTP 400): the request exceeds the available context size, try increasing it";
    assert!(
        llm_fix(overflow).contains("llm.context_budget_tokens to the server's context or below")
    );
    assert!(llm_fix(
        "the minimal prompt needs 1920 tokens but llm.context_budget_tokens leaves 1814"
    )
    .starts_with("raise llm.context_budget_tokens"));
    assert!(llm_fix("no answer within 8.8s").contains("llm.timeout_secs"));
    assert!(llm_fix("HTTP 401: invalid key").starts_with("check llm.base_url"));
    // The key refused, as the client says it: where the key lives.
    assert!(
        llm_fix("LLM server refused the request (HTTP 401): Incorrect API key")
            .contains("/etc/credstore/fleetagent.llm_api_key")
    );
}

/// A model down for a while reads as such: since its first failed request after the last
/// good one, with how many failed, not "failed 0s ago" at every pass.
#[test]
fn the_llm_check_says_since_when_the_model_has_failed() {
    let (_dir, s) = test_store(NOW);
    let call = |at: Millis, error: Option<&str>| {
        call_at(
            &s,
            at,
            crate::store::llm_calls::Call {
                attempts: 5,
                error,
                ..Default::default()
            },
        );
    };
    let down = "LLM unusable after 5 attempts in 15s: transport error: connection refused";
    call(NOW - 60 * MIN, None);
    for ago in [35, 30, 5] {
        call(NOW - ago * MIN, Some(down));
    }
    let mut state = crate::store::session::state(&s.conn).unwrap();
    state.last_llm_error = Some(down.into());
    state.last_llm_error_at = Some(NOW - 5 * MIN);
    let p = agent::llm(&s.conn, &state, &Config::default(), NOW);
    assert_eq!(p.len(), 1);
    assert!(
        p[0].detail.starts_with(
            "the LLM has failed since 35m ago (3 requests, none answered; the last 5m ago): LLM unusable"
        ),
        "{}",
        p[0].detail
    );
    assert_eq!(p[0].since, Some(NOW - 35 * MIN));
}

/// A model that answers but whose last three answers ran nothing (cut, empty) is named, with
/// since when and what to change; one usable answer clears it, and so does the rules provider.
#[test]
fn the_llm_check_names_answers_that_ran_nothing() {
    let (_dir, s) = test_store(NOW);
    let call = |at: Millis, unusable: Option<&'static str>| {
        call_at(
            &s,
            at,
            crate::store::llm_calls::Call {
                attempts: 1,
                unusable,
                ..Default::default()
            },
        );
    };
    let state = crate::store::session::state(&s.conn).unwrap();
    let config = Config::default();
    call(NOW - 40 * MIN, None);
    call(NOW - 30 * MIN, Some("cut"));
    call(NOW - 20 * MIN, Some("empty"));
    assert!(
        agent::llm(&s.conn, &state, &config, NOW).is_empty(),
        "two of three"
    );
    call(NOW - 10 * MIN, Some("cut"));
    let p = agent::llm(&s.conn, &state, &config, NOW);
    assert_eq!(p.len(), 1);
    assert!(
        p[0].detail.starts_with(
            "the model's last 3 answers ran nothing (2 cut at llm.max_output_tokens, 1 empty), the first 30m ago"
        ),
        "{}",
        p[0].detail
    );
    assert!(
        p[0].fix
            .as_deref()
            .unwrap()
            .starts_with("raise llm.max_output_tokens"),
        "{:?}",
        p[0].fix
    );
    assert_eq!(p[0].since, Some(NOW - 30 * MIN));
    let mut rules = Config::default();
    rules.llm.provider = crate::config::Provider::Rules;
    assert!(agent::llm(&s.conn, &state, &rules, NOW).is_empty());
    call(NOW - 5 * MIN, None);
    assert!(agent::llm(&s.conn, &state, &config, NOW).is_empty());
}
