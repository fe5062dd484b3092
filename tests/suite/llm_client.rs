//! The HTTP LLM client against the strict fake server: retries and their budget (on a
//! ManualClock, so backoff never sleeps), final rejections, odd server answers, the key kept out
//! of errors, the fake's own strictness, and the token estimate against a provider-like count.

use std::sync::Arc;
use std::time::Duration;

use fleetagent::clock::{Clock, ManualClock};
use fleetagent::llm::{
    AttemptFailure, ChatMessage, ChatRequest, HttpLlmClient, LlmClient, LlmError, Role, ToolCall,
    ToolSpec,
};
use fleetagent::tokens::Tokenizer;
use serde_json::{json, Value};

use crate::common::fake_llm::{
    cookbook_message_tokens, cookbook_tool_tokens, provider_prompt_tokens, FakeLlm, Reply,
};

const KEY: &str = "sk-test-fleetagent-0123456789abcdef";
const T0: i64 = 1_767_225_600_000;
const MODEL: &str = "gpt-4.1-mini";

struct Setup {
    fake: FakeLlm,
    clock: Arc<ManualClock>,
    client: HttpLlmClient,
}

impl Setup {
    fn new(budget_secs: u64) -> Setup {
        Setup::with(Some(KEY), Duration::from_secs(10), budget_secs)
    }

    fn with(key: Option<&str>, timeout: Duration, budget_secs: u64) -> Setup {
        let fake = FakeLlm::start();
        fake.require_key(KEY);
        let clock = Arc::new(ManualClock::new(T0));
        let client = HttpLlmClient::new(
            &fake.base_url(),
            key.map(str::to_string),
            clock.clone(),
            timeout,
            Duration::from_secs(budget_secs),
        );
        Setup {
            fake,
            clock,
            client,
        }
    }

    /// Milliseconds the client waited on the ManualClock.
    fn waited_ms(&self) -> i64 {
        self.clock.now_ms() - T0
    }
}

fn msg(role: Role, content: &str) -> ChatMessage {
    ChatMessage {
        role,
        content: content.to_string(),
        tool_calls: vec![],
        tool_call_id: None,
    }
}

fn calls(calls: &[(&str, &str, &str)]) -> ChatMessage {
    ChatMessage {
        role: Role::Assistant,
        content: String::new(),
        tool_calls: calls
            .iter()
            .map(|(id, name, arguments)| ToolCall {
                id: id.to_string(),
                name: name.to_string(),
                arguments: arguments.to_string(),
            })
            .collect(),
        tool_call_id: None,
    }
}

fn result(id: &str, content: &str) -> ChatMessage {
    ChatMessage {
        role: Role::Tool,
        content: content.to_string(),
        tool_calls: vec![],
        tool_call_id: Some(id.to_string()),
    }
}

/// The six tools of DESIGN.md, with descriptions of the length the agent uses.
fn fleet_tools() -> Vec<ToolSpec> {
    let tool = |name: &str, description: &str, parameters: Value| ToolSpec {
        name: name.into(),
        description: description.into(),
        parameters,
    };
    vec![
        tool(
            "launch_instance",
            "Rent one GPU instance that runs the Curio PSProve worker. Without offer_id the best matching offer (lowest cost per proof) is taken. Several launches are several calls.",
            json!({"type": "object", "properties": {
                "offer_id": {"type": "integer", "description": "A vast.ai offer id from search_offers."},
                "reason": {"type": "string", "description": "Why this launch is needed, one sentence."}},
              "required": ["reason"], "additionalProperties": false}),
        ),
        tool(
            "stop_instance",
            "Stop or destroy one of our instances (per stop_mode). Refused for the last live workers while work is queued.",
            json!({"type": "object", "properties": {
                "instance_id": {"type": "integer", "description": "The vast.ai instance id."},
                "reason": {"type": "string", "description": "Why it should go, one sentence."}},
              "required": ["instance_id", "reason"], "additionalProperties": false}),
        ),
        tool(
            "schedule_next_check",
            "Ask to be run again after this many minutes, in addition to the 5-minute timer.",
            json!({"type": "object", "properties": {
                "minutes": {"type": "integer", "minimum": 1, "maximum": 1440, "description": "Minutes from now."},
                "reason": {"type": "string", "description": "What to look at then."}},
              "required": ["minutes", "reason"], "additionalProperties": false}),
        ),
        tool(
            "search_offers",
            "List current vast.ai offers that match the configured filters, cheapest cost per proof first.",
            json!({"type": "object", "properties": {
                "gpu_name": {"type": "string", "description": "Only this GPU model, e.g. RTX 4090."},
                "max_dph": {"type": "number", "description": "Only offers at or below this $/h."},
                "limit": {"type": "integer", "maximum": 20, "description": "At most this many offers (default 10)."}},
              "additionalProperties": false}),
        ),
        tool(
            "list_instances",
            "List our instances with status, GPU, $/h, age and whether their worker is alive.",
            json!({"type": "object", "properties": {}, "additionalProperties": false}),
        ),
        tool(
            "instance_logs",
            "The last lines of one instance's logs, to see why it is stuck or failing.",
            json!({"type": "object", "properties": {
                "instance_id": {"type": "integer", "description": "The vast.ai instance id."},
                "tail_lines": {"type": "integer", "maximum": 200, "description": "How many lines (default 50)."}},
              "required": ["instance_id"], "additionalProperties": false}),
        ),
    ]
}

fn request(messages: Vec<ChatMessage>) -> ChatRequest {
    ChatRequest {
        model: MODEL.into(),
        messages,
        tools: fleet_tools(),
        max_tokens: Some(1024),
        budget: None,
    }
}

fn simple() -> ChatRequest {
    request(vec![
        msg(Role::System, "You manage a GPU fleet."),
        msg(Role::User, "Demand: active=true. Queue: PSProve 6p/4r."),
    ])
}

fn gave_up(e: LlmError) -> (u32, u64, AttemptFailure) {
    match e {
        LlmError::GaveUp {
            attempts,
            elapsed_secs,
            last,
        } => (attempts, elapsed_secs, last),
        other => panic!("expected GaveUp, got {other:?}"),
    }
}

fn rejected(e: LlmError) -> (u16, String) {
    match e {
        LlmError::Rejected { status, message } => (status, message),
        other => panic!("expected Rejected, got {other:?}"),
    }
}

#[test]
fn rate_limit_waits_for_retry_after_then_succeeds() {
    let s = Setup::new(90);
    s.fake.push(Reply::rate_limited(7));
    s.fake
        .push(Reply::tool_call("launch_instance", r#"{"reason":"queue"}"#));
    let answer = s.client.chat(&simple()).unwrap();
    assert_eq!(answer.attempts, 2);
    assert_eq!(answer.tool_calls[0].name, "launch_instance");
    assert_eq!(answer.finish_reason.as_deref(), Some("tool_calls"));
    // Retry-After (7 s) wins over the first backoff step (1 s).
    assert_eq!(s.waited_ms(), 7_000);
    assert_eq!(s.fake.request_count(), 2);
}

#[test]
fn rate_limit_reset_header_is_used_without_retry_after() {
    let s = Setup::new(90);
    s.fake.push(
        Reply::openai_error(
            429,
            "Rate limit reached",
            "tokens",
            Some("rate_limit_exceeded"),
        )
        .header("x-ratelimit-remaining-tokens", "0")
        .header("x-ratelimit-reset-tokens", "4.5s")
        .header("x-ratelimit-remaining-requests", "120")
        .header("x-ratelimit-reset-requests", "40ms"),
    );
    let answer = s.client.chat(&simple()).unwrap();
    assert_eq!(answer.attempts, 2);
    assert_eq!(s.waited_ms(), 4_500);
}

#[test]
fn server_errors_back_off_exponentially_then_succeed() {
    let s = Setup::new(90);
    s.fake.push(Reply::server_error(500));
    s.fake.push(Reply::server_error(502));
    s.fake.push(Reply::server_error(503));
    s.fake.push(Reply::text("steady, no action"));
    let answer = s.client.chat(&simple()).unwrap();
    assert_eq!(answer.attempts, 4);
    assert_eq!(answer.content.as_deref(), Some("steady, no action"));
    assert_eq!(s.waited_ms(), 1_000 + 2_000 + 4_000);
}

#[test]
fn a_timeout_is_retried() {
    // The one test that waits for real: a 1 s client timeout against a 10 s delay (cut short
    // when the fake drops).
    let s = Setup::with(Some(KEY), Duration::from_secs(1), 90);
    s.fake.push(Reply::delayed(
        Duration::from_secs(10),
        Reply::text("too late"),
    ));
    s.fake.push(Reply::text("on time"));
    let answer = s.client.chat(&simple()).unwrap();
    assert_eq!(answer.content.as_deref(), Some("on time"));
    assert_eq!(answer.attempts, 2);
    assert_eq!(s.waited_ms(), 1_000);
    assert_eq!(s.fake.request_count(), 2);
}

#[test]
fn a_timeout_every_time_gives_up_naming_it() {
    let s = Setup::with(Some(KEY), Duration::from_millis(200), 2);
    s.fake.set_default(Reply::delayed(
        Duration::from_secs(5),
        Reply::text("too late"),
    ));
    let (attempts, _, last) = gave_up(s.client.chat(&simple()).unwrap_err());
    assert_eq!(attempts, 2);
    assert_eq!(last, AttemptFailure::Timeout { after_ms: 200 });
}

#[test]
fn unusable_200_bodies_are_retried() {
    let cases = [
        ("html", Reply::html()),
        ("truncated json", Reply::truncated_json()),
        (
            "error object",
            Reply::error_in_body("upstream provider died"),
        ),
        ("choice error", Reply::choice_error("generation failed")),
        ("empty choices", Reply::EmptyChoices),
    ];
    for (what, bad) in cases {
        let s = Setup::new(90);
        s.fake.push(bad);
        s.fake.push(Reply::text("fine now"));
        let answer = s
            .client
            .chat(&simple())
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(answer.content.as_deref(), Some("fine now"), "{what}");
        assert_eq!(answer.attempts, 2, "{what}");
        assert_eq!(s.fake.request_count(), 2, "{what}");
    }
}

#[test]
fn a_spent_budget_gives_up_naming_the_last_failure() {
    let s = Setup::new(10);
    s.fake.set_default(Reply::openai_error(
        503,
        "The engine is currently overloaded, please try again later.",
        "server_error",
        None,
    ));
    let err = s.client.chat(&simple()).unwrap_err();
    let text = err.to_string();
    let (attempts, elapsed_secs, last) = gave_up(err);
    // Attempts at 0, 1, 3 and 7 s; the next wait (8 s) would end past 10 s.
    assert_eq!((attempts, elapsed_secs), (4, 7));
    assert_eq!(
        last,
        AttemptFailure::Status {
            status: 503,
            message: "The engine is currently overloaded, please try again later.".into()
        }
    );
    assert!(
        text.contains("HTTP 503") && text.contains("overloaded"),
        "{text}"
    );
    assert_eq!(s.fake.request_count(), 4);
    assert_eq!(s.waited_ms(), 7_000);
}

/// Also one no budget can hold (1e300 s, the milliseconds header past u64): the sum of the
/// elapsed time and the wait wrapped negative and the client slept past the run's deadline,
/// so the fallback never ran.
#[test]
fn a_retry_after_beyond_the_budget_gives_up_at_once() {
    for (name, value) in [
        ("Retry-After", "120"),
        ("Retry-After", "1e300"),
        ("retry-after-ms", "18446744073709551616000"),
    ] {
        let s = Setup::new(90);
        s.fake
            .push(Reply::openai_error(429, "Rate limit", "requests", None).header(name, value));
        let (attempts, elapsed_secs, last) = gave_up(s.client.chat(&simple()).unwrap_err());
        assert_eq!((attempts, elapsed_secs), (1, 0), "{name}: {value}");
        assert!(matches!(last, AttemptFailure::Status { status: 429, .. }));
        assert_eq!(s.waited_ms(), 0, "must not sleep for a wait it cannot use");
    }
}

#[test]
fn a_broken_sequence_is_rejected_once_with_the_servers_message() {
    let s = Setup::new(90);
    let broken = request(vec![
        msg(Role::System, "You manage a GPU fleet."),
        result("call_orphan", r#"{"ok":true}"#),
    ]);
    let (status, message) = rejected(s.client.chat(&broken).unwrap_err());
    assert_eq!(status, 400);
    assert_eq!(
        message,
        "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'."
    );
    assert_eq!(s.fake.request_count(), 1);
    assert_eq!(s.fake.rejected_count(), 1);
    assert_eq!(s.waited_ms(), 0);
}

#[test]
fn other_client_errors_are_final_flat_wrapped_or_raw() {
    let long_page = format!("<html><body>{}</body></html>", "Not Found. ".repeat(100));
    let cases = [
        (
            Reply::status(
                400,
                r#"{"object":"error","message":"This model's maximum context length is 4096 tokens.","type":"BadRequestError","param":null,"code":400}"#,
            ),
            400,
            "This model's maximum context length is 4096 tokens.".to_string(),
        ),
        (
            Reply::openai_error(
                422,
                "Unsupported parameter: 'max_tokens' is not supported with this model.",
                "invalid_request_error",
                Some("unsupported_parameter"),
            ),
            422,
            "Unsupported parameter: 'max_tokens' is not supported with this model.".to_string(),
        ),
        (
            Reply::status(404, &long_page),
            404,
            format!(
                "{}…",
                &long_page.split_whitespace().collect::<Vec<_>>().join(" ")[..200]
            ),
        ),
        (
            Reply::status(
                402,
                r#"{"error":{"code":402,"message":"Insufficient credits. Add more using https://openrouter.ai/credits"}}"#,
            ),
            402,
            "Insufficient credits. Add more using https://openrouter.ai/credits".to_string(),
        ),
        (
            Reply::insufficient_quota(),
            429,
            "You exceeded your current quota, please check your plan and billing details."
                .to_string(),
        ),
        (
            Reply::openai_error(
                429,
                "You have no credits remaining.",
                "invalid_request_error",
                Some("credit_balance_exhausted"),
            ),
            429,
            "You have no credits remaining.".to_string(),
        ),
    ];
    for (reply, want_status, want_message) in cases {
        let s = Setup::new(90);
        s.fake.push(reply);
        s.fake.push(Reply::text("must not be reached"));
        let (status, message) = rejected(s.client.chat(&simple()).unwrap_err());
        assert_eq!(
            (status, message.as_str()),
            (want_status, want_message.as_str())
        );
        assert_eq!(
            s.fake.request_count(),
            1,
            "HTTP {want_status} must not be retried"
        );
        assert_eq!(s.waited_ms(), 0);
    }
}

#[test]
fn object_arguments_come_back_as_a_json_string() {
    let s = Setup::new(90);
    s.fake.push(Reply::Json(json!({
        "id": "chatcmpl-1", "object": "chat.completion",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": null,
            "tool_calls": [{"id": "call_obj", "type": "function", "function": {
                "name": "launch_instance",
                "arguments": {"offer_id": 18234567, "reason": "59 proofs queued"}}}]}}],
    })));
    let answer = s.client.chat(&simple()).unwrap();
    let call = &answer.tool_calls[0];
    assert_eq!(call.id, "call_obj");
    let parsed: Value = serde_json::from_str(&call.arguments).unwrap();
    assert_eq!(
        parsed,
        json!({"offer_id": 18234567, "reason": "59 proofs queued"})
    );
    assert_eq!(answer.usage, None);
}

#[test]
fn empty_call_ids_are_replaced_and_the_strict_server_accepts_them_back() {
    let s = Setup::new(90);
    s.fake.push(Reply::Json(json!({
        "id": "chatcmpl-2", "object": "chat.completion",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": "",
            "tool_calls": [
                {"id": "", "type": "function", "function": {"name": "list_instances", "arguments": "{}"}},
                {"id": "", "type": "function", "function": {"name": "search_offers", "arguments": "{\"limit\":3}"}}]}}],
    })));
    let first = s.client.chat(&simple()).unwrap();
    let ids: Vec<String> = first.tool_calls.iter().map(|c| c.id.clone()).collect();
    assert!(ids.iter().all(|id| !id.is_empty()), "{ids:?}");
    assert_ne!(ids[0], ids[1]);

    let mut history = simple().messages;
    history.push(ChatMessage {
        role: Role::Assistant,
        content: String::new(),
        tool_calls: first.tool_calls.clone(),
        tool_call_id: None,
    });
    history.push(result(&ids[0], "[]"));
    history.push(result(&ids[1], "[]"));
    s.client.chat(&request(history)).unwrap();
    assert_eq!(s.fake.rejected_count(), 0, "{:?}", s.fake.rejections());
    let sent = &s.fake.requests()[1];
    assert_eq!(sent["messages"][2]["tool_calls"][1]["id"], json!(ids[1]));
    assert_eq!(sent["messages"][4]["tool_call_id"], json!(ids[1]));
}

#[test]
fn the_wire_format_passes_the_strict_server() {
    let s = Setup::new(90);
    let history = request(vec![
        msg(Role::System, "You manage a GPU fleet."),
        msg(Role::User, "Queue: PSProve 7p/2r. Fleet: 2 running."),
        calls(&[
            ("call_a1", "launch_instance", r#"{"reason":"backlog"}"#),
            (
                "call_b2",
                "schedule_next_check",
                r#"{"minutes":10,"reason":"verify"}"#,
            ),
        ]),
        result("call_a1", r#"{"ok":true,"instance_id":28412345}"#),
        result("call_b2", r#"{"ok":true}"#),
        msg(Role::Assistant, "Launched one instance."),
        msg(Role::User, "Queue: PSProve 5p/3r."),
    ]);
    s.client.chat(&history).unwrap();
    s.client
        .chat(&ChatRequest {
            tools: vec![],
            ..simple()
        })
        .unwrap();
    assert_eq!(s.fake.rejected_count(), 0, "{:?}", s.fake.rejections());
    let recorded = s.fake.recorded();
    assert_eq!(
        recorded[0].authorization.as_deref(),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(recorded[0].path, "/v1/chat/completions");
    let body = &recorded[0].body;
    assert_eq!(body["model"], MODEL);
    assert_eq!(body["tool_choice"], "auto");
    assert_eq!(body["tools"].as_array().unwrap().len(), 6);
    assert_eq!(body["tools"][0]["type"], "function");
    assert_eq!(body["messages"][2]["content"], "");
    assert!(body["messages"][2]["tool_calls"][1]["function"]["arguments"].is_string());
    assert_eq!(body["messages"][4]["tool_call_id"], "call_b2");
    assert!(body.get("temperature").is_none());
    let plain = &recorded[1].body;
    assert!(plain.get("tools").is_none() && plain.get("tool_choice").is_none());
}

#[test]
fn usage_is_the_providers_count() {
    let s = Setup::new(90);
    let answer = s.client.chat(&simple()).unwrap();
    assert_eq!(answer.content.as_deref(), Some("no action needed"));
    let usage = answer.usage.unwrap();
    assert_eq!(
        usage.prompt_tokens,
        provider_prompt_tokens(&s.fake.requests()[0])
    );
    assert_eq!(
        usage.total_tokens,
        usage.prompt_tokens + usage.completion_tokens
    );
}

#[test]
fn no_key_sends_nothing() {
    for key in [None, Some("   ")] {
        let s = Setup::with(key, Duration::from_secs(10), 90);
        assert_eq!(s.client.chat(&simple()).unwrap_err(), LlmError::NoKey);
        assert_eq!(s.fake.request_count(), 0);
    }
}

#[test]
fn the_key_never_appears_in_errors() {
    // A proxy that echoes the key in a final error.
    let s = Setup::new(90);
    s.fake.push(Reply::openai_error(
        401,
        &format!("Incorrect API key provided: {KEY}. Check your proxy."),
        "invalid_request_error",
        Some("invalid_api_key"),
    ));
    let err = s.client.chat(&simple()).unwrap_err();
    assert!(matches!(err, LlmError::Rejected { status: 401, .. }));
    for shown in [err.to_string(), format!("{err:?}")] {
        assert!(!shown.contains(KEY), "{shown}");
        assert!(shown.contains("[redacted]"), "{shown}");
    }

    // ... and in a transient one, through GaveUp.
    let s = Setup::new(2);
    s.fake.set_default(Reply::status(
        502,
        &format!("<html>bad gateway for Bearer {KEY}</html>"),
    ));
    let err = s.client.chat(&simple()).unwrap_err();
    assert!(matches!(err, LlmError::GaveUp { .. }));
    for shown in [err.to_string(), format!("{err:?}")] {
        assert!(!shown.contains(KEY), "{shown}");
    }

    // A wrong key: the strict server's 401 is final and masks what it was given.
    let wrong = "sk-wrong-key-9876543210";
    let s = Setup::with(Some(wrong), Duration::from_secs(10), 90);
    let (status, message) = rejected(s.client.chat(&simple()).unwrap_err());
    assert_eq!(status, 401);
    assert!(
        message.starts_with("Incorrect API key provided: sk-"),
        "{message}"
    );
    assert!(!message.contains(wrong));
    assert_eq!(s.fake.request_count(), 1);
}

/// POST a raw body to the fake, bypassing the client's own shaping.
fn post_raw(fake: &FakeLlm, body: &Value) -> (u16, Value) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into();
    let mut response = agent
        .post(format!("{}/chat/completions", fake.base_url()))
        .header("Authorization", format!("Bearer {KEY}"))
        .header("Content-Type", "application/json")
        .send(body.to_string())
        .unwrap();
    let status = response.status().as_u16();
    let text = response.body_mut().read_to_string().unwrap();
    (status, serde_json::from_str(&text).unwrap())
}

#[test]
fn the_fake_rejects_what_openai_rejects_with_its_exact_messages() {
    let fake = FakeLlm::start();
    fake.require_key(KEY);
    let sys = json!({"role": "system", "content": "s"});
    let user = json!({"role": "user", "content": "u"});
    let call = |id: &str| json!({"id": id, "type": "function", "function": {"name": "list_instances", "arguments": "{}"}});
    let asks = |ids: &[&str]| json!({"role": "assistant", "content": null, "tool_calls": ids.iter().map(|i| call(i)).collect::<Vec<_>>()});
    let answer = |id: &str| json!({"role": "tool", "tool_call_id": id, "content": "[]"});
    let cases: Vec<(Vec<Value>, &str, &str)> = vec![
        (
            vec![sys.clone(), answer("call_1")],
            "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.",
            "messages.[1].role",
        ),
        (
            vec![sys.clone(), asks(&["call_1"]), answer("call_2")],
            "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.",
            "messages.[2].role",
        ),
        (
            vec![sys.clone(), asks(&["call_1", "call_2", "call_3"]), answer("call_2"), user.clone()],
            "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: call_1, call_3",
            "messages.[1].role",
        ),
        (
            vec![sys.clone(), asks(&["call_1"])],
            "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: call_1",
            "messages.[1].role",
        ),
        (
            vec![sys.clone(), asks(&["call_1"]), user.clone(), answer("call_1")],
            "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: call_1",
            "messages.[1].role",
        ),
        (
            vec![sys.clone(), json!({"role": "assistant", "content": "", "tool_calls": []})],
            "Invalid 'messages[1].tool_calls': empty array. Expected an array with minimum length 1, but got an empty array instead.",
            "messages[1].tool_calls",
        ),
        (
            vec![sys.clone(), json!({"role": "user", "content": null})],
            "Invalid value for 'content': expected a string, got null.",
            "messages.[1].content",
        ),
        (
            vec![sys.clone(), json!({"role": "assistant", "content": null})],
            "Invalid value for 'content': expected a string, got null.",
            "messages.[1].content",
        ),
        (
            vec![json!({"role": "xyz", "content": "hi"})],
            "Invalid value: 'xyz'. Supported values are: 'system', 'assistant', 'user', 'function', 'tool', and 'developer'.",
            "messages[0].role",
        ),
        (
            vec![sys.clone(), asks(&["call_1"]), json!({"role": "tool", "content": "[]"})],
            "Missing required parameter: 'messages[2].tool_call_id'.",
            "messages[2].tool_call_id",
        ),
        (
            vec![],
            "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.",
            "messages",
        ),
        (
            vec![sys.clone(), json!({"role": "assistant", "content": "", "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "x", "arguments": {"a": 1}}}]}),
                answer("call_1")],
            "Invalid type for 'messages[1].tool_calls[0].function.arguments': expected a string, but got an object instead.",
            "messages[1].tool_calls[0].function.arguments",
        ),
    ];
    let total = cases.len();
    for (messages, want, param) in cases {
        let (status, body) = post_raw(&fake, &json!({"model": MODEL, "messages": messages}));
        assert_eq!(status, 400, "{want}");
        assert_eq!(body["error"]["message"], want);
        assert_eq!(body["error"]["param"], param, "{want}");
        assert_eq!(body["error"]["type"], "invalid_request_error");
    }
    let (status, body) = post_raw(
        &fake,
        &json!({"model": MODEL, "messages": [sys.clone()], "tool_choice": "auto"}),
    );
    assert_eq!(status, 400);
    assert_eq!(
        body["error"]["message"],
        "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified."
    );
    assert_eq!(fake.rejected_count(), total + 1);

    // A valid round trip with the same pieces passes, and null content is fine beside calls.
    let (status, body) = post_raw(
        &fake,
        &json!({"model": MODEL, "messages": [sys, user, asks(&["call_1", "call_2"]), answer("call_2"), answer("call_1")]}),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["choices"][0]["message"]["content"], "no action needed");
    assert_eq!(fake.rejected_count(), total + 1);
    assert_eq!(fake.request_count(), total + 2);
}

const SYSTEM_PROMPT: &str = "You are fleetagent, the operator of a fleet of rented vast.ai GPU instances that prove SNARKs for a Filecoin Curio cluster through ProofShare (the PSProve task). Your job is to keep the fleet sized to the work: enough live PSProve workers to take the proofs the market offers up to the operator's target throughput, and no more, because every instance costs money by the hour whether it proves or idles.

How to read the observation. Each turn starts with one line: demand, queue, throughput, fleet, projection, spend, budget headroom and the launch window, followed by the events and wakes of this pass. Queue: PSProve Np/Mr means N proofs pending (not yet claimed) and M running. While workers live, Curio asks the market for more work only when 5 or fewer proofs wait unclaimed and stops at 8, so pending stays small by design and is not a measure of market demand. A backlog of about 5 to 8 that persists over several passes while every live PSProve slot is busy, with throughput below target, means the market would give more than the fleet takes: scale up. Pending near 0 with idle live workers over several passes means the fleet is larger than the work: scale down. A large pending count with no live worker is a dead fleet, shown as WORKERS DEAD; it is not high demand, and the fix is to bring workers back, not to buy many more.

Money comes first. Never plan a launch that would push the fleet's dollars per hour above the budget headroom shown, never exceed the instance slots shown, and prefer the offer with the lowest cost per proof (dollars per hour divided by the GPU's proofs per hour). The tools enforce every limit and refuse what breaks one; a refusal is an answer, not an error to work around. Do not retry a refused launch in the same pass unless the refusal says when to try again and that time has come.

Launching. launch_instance rents one instance; several launches are several calls. Without offer_id it takes the best matching offer. An instance needs 5 to 15 minutes to download its image, start the worker and appear as live; until then it shows as loading. Count loading instances as coming capacity and do not launch again for the same backlog while they load, unless they have been loading longer than the stuck threshold, in which case look at instance_logs and consider stopping them.

Stopping. stop_instance removes one of our instances. Never stop the last live workers while proofs are queued, and never stop an instance that is proving; the tool refuses both. Instances that sit exited or offline, or loading past the stuck threshold, earn nothing: stop them. When scaling down, stop the most expensive per proof first, and only after idle has persisted for several passes, since demand comes in waves.

Emergencies. When the observation says WORKERS DEAD, the launch window allows more launches than usual (the emergency bypass). Use it to restore a small working fleet, then wait for it to come up. The money caps still hold.

Scheduling. The timer runs you every 5 minutes and events wake you sooner. Use schedule_next_check when you want to look again at a specific time, for example 10 minutes after a launch to confirm the worker came up. Give a reason; it will be shown to you when the wake fires.

Reading the fleet. list_instances shows each of our instances with its status (loading, running, exited, offline), GPU model, dollars per hour, age in minutes and whether its Curio worker is alive, meaning it sent a heartbeat recently and has PSProve in its task list. Curio keeps a machine that stopped sending heartbeats listed as running for up to about 15 minutes, so a running instance whose worker is not alive is not capacity: look at its logs before counting on it. Throughput is the number of proofs finished in the last hour and the last 15 minutes; projected throughput adds what running and loading instances should prove at their GPU's rate.

Operator messages. The operator may write to you between passes. Their instructions override your own preferences but never the limits in code: a request to spend more than the budget allows is answered with what the limits permit and which setting would change them. Acknowledge every operator message in your final sentence, even when no action follows from it, so the operator knows it was read.

Answering. Act through tools, then end with one or two plain sentences saying what you did and why, or why nothing was needed. Do not restate the observation. If an operator message is present, answer it directly and follow its instructions when they stay within the limits. Never invent instance ids or offer ids: take them from list_instances and search_offers. When unsure whether an instance is healthy, read its logs before acting. Be brief: every word you write is paid for on every later turn.";

fn offers_json() -> String {
    let gpus = [
        ("RTX 4090", 0.412, 50),
        ("RTX 4090", 0.438, 50),
        ("RTX 3090", 0.221, 22),
        ("RTX A6000", 0.51, 31),
        ("RTX 4080", 0.305, 34),
        ("L40S", 0.79, 58),
        ("RTX 4090", 0.455, 50),
        ("RTX 3090 Ti", 0.262, 25),
        ("A100 PCIE", 1.12, 64),
        ("RTX 5090", 0.69, 71),
    ];
    let offers: Vec<Value> = gpus
        .iter()
        .enumerate()
        .map(|(i, (gpu, dph, rate))| {
            json!({"id": 18_234_560 + i * 7, "gpu_name": gpu, "num_gpus": 1, "dph_total": dph,
                   "reliability": 0.9912 + i as f64 * 0.0007, "gpu_ram_gb": 24,
                   "geolocation": "Sweden, SE", "inet_down_mbps": 812.4,
                   "proofs_per_hour": rate, "cost_per_proof": dph / *rate as f64})
        })
        .collect();
    json!({"offers": offers, "total_matching": 37}).to_string()
}

fn logs_text() -> String {
    let mut lines = vec![
        "2026-11-29T18:01:02Z curio: starting PSProve worker fleetagent-r41-call_8xQpL2vN"
            .to_string(),
        "2026-11-29T18:01:09Z curio: connected to harmonydb at 10.0.0.5:5433".to_string(),
    ];
    for i in 0..30 {
        lines.push(format!(
            "2026-11-29T18:{:02}:{:02}Z supraseal: loading params 32GiB chunk {i}/30 ({} MiB/s)",
            2 + i / 6,
            (i * 10) % 60,
            380 + i * 3
        ));
    }
    lines.push("2026-11-29T18:09:41Z worker: model output <|endoftext|> marker in stdout".into());
    lines.join("\n")
}

/// Three passes of a realistic conversation: observations, tool calls, JSON tool results.
fn real_shaped_conversation() -> Vec<ChatMessage> {
    vec![
        msg(Role::System, SYSTEM_PROMPT),
        msg(Role::User, "Run 412. Demand: active=false, WORKERS DEAD. Queue: PSProve 59p/0r. Throughput: 0/h (1h), 0 (15m). Fleet: 0 running (0 p/h), 3 loading. Projected: 150 p/h. $1.33/h. Target: 500 p/h. Budget headroom: $8.67/h, 17 slots. Launch window: 3/3 used, emergency bypass ON.\nEvents: P1 poll: instance 28412345 loading for 34 min (stuck); P1 poll: WORKERS DEAD (59 pending, 0 live workers).\nWakes: 1 overdue (18:05 \"check that the 3 launches came up\")."),
        calls(&[("call_8xQpL2vN0aRtY7mKcW3eHs1D", "list_instances", "{}")]),
        result("call_8xQpL2vN0aRtY7mKcW3eHs1D", &json!({"instances": [
            {"id": 28412345, "label": "fleetagent-r409-call_Q1", "status": "loading", "gpu": "RTX 4090", "dph": 0.412, "age_min": 34, "worker_alive": false},
            {"id": 28412399, "label": "fleetagent-r409-call_Q2", "status": "loading", "gpu": "RTX 4090", "dph": 0.438, "age_min": 33, "worker_alive": false},
            {"id": 28412411, "label": "fleetagent-r409-call_Q3", "status": "loading", "gpu": "RTX 3090", "dph": 0.221, "age_min": 12, "worker_alive": false}]}).to_string()),
        calls(&[("call_Zt4RmW9qPx2LbN7cVe5KyA0s", "instance_logs", r#"{"instance_id":28412345,"tail_lines":40}"#)]),
        result("call_Zt4RmW9qPx2LbN7cVe5KyA0s", &logs_text()),
        calls(&[
            ("call_Hq3TnB8wLc5XsJ1mPa6RzE9v", "stop_instance", r#"{"instance_id":28412345,"reason":"loading for 34 min, stuck on params download"}"#),
            ("call_Mv7KpY2dQf9WgT4hNs1XbC6j", "search_offers", r#"{"gpu_name":"RTX 4090","max_dph":0.6,"limit":10}"#),
        ]),
        result("call_Hq3TnB8wLc5XsJ1mPa6RzE9v", r#"{"ok":true,"stopped":28412345,"mode":"destroy"}"#),
        result("call_Mv7KpY2dQf9WgT4hNs1XbC6j", &offers_json()),
        calls(&[
            ("call_Rb2NcX8vTq4LmZ7sKd1WyF5g", "launch_instance", r#"{"offer_id":18234560,"reason":"WORKERS DEAD with 59 queued; replace the stuck instance"}"#),
            ("call_Pd6JwA3rHn9VeQ2tGx7MbK4u", "launch_instance", r#"{"reason":"WORKERS DEAD; restore a second worker"}"#),
            ("call_Yf1SgE5kWm8CuR3pLz6NhD2q", "launch_instance", r#"{"reason":"WORKERS DEAD; third worker toward target"}"#),
            ("call_Ua9DxL4bVj2QoT7eMr5GcS8n", "schedule_next_check", r#"{"minutes":10,"reason":"confirm the new workers are live"}"#),
        ]),
        result("call_Rb2NcX8vTq4LmZ7sKd1WyF5g", r#"{"ok":true,"instance_id":28415001,"label":"fleetagent-r412-call_Rb2NcX8v","gpu":"RTX 4090","dph":0.412}"#),
        result("call_Pd6JwA3rHn9VeQ2tGx7MbK4u", r#"{"ok":true,"instance_id":28415007,"label":"fleetagent-r412-call_Pd6JwA3r","gpu":"RTX 4090","dph":0.438}"#),
        result("call_Yf1SgE5kWm8CuR3pLz6NhD2q", r#"{"error":"rate_limited","limit":"6 launches per 15 min (emergency)","retry_after_secs":412}"#),
        result("call_Ua9DxL4bVj2QoT7eMr5GcS8n", r#"{"ok":true,"wake_id":77,"at":"2026-11-29T18:22:00Z"}"#),
        msg(Role::Assistant, "Destroyed stuck instance 28412345 and launched two RTX 4090s (28415001, 28415007) to restore workers; a third launch hit the emergency limit. Checking again in 10 minutes."),
        msg(Role::User, "Run 413. Demand: active=true. Queue: PSProve 8p/6r. Throughput: 41/h (1h), 14 (15m). Fleet: 2 running (100 p/h), 2 loading. Projected: 172 p/h. $1.51/h. Target: 500 p/h. Budget headroom: $8.49/h, 16 slots. Launch window: 5/6 used.\nEvents: P1 poll: instance 28415001 running, worker live; P1 poll: instance 28415007 running, worker live.\nOperator: \"keep spend under $3/h tonight\""),
        calls(&[("call_Kc5VbN1mXz8LqW3rTy6HsJ2p", "launch_instance", r#"{"reason":"backlog 8 with all slots busy, below target; operator cap $3/h leaves room"}"#)]),
        result("call_Kc5VbN1mXz8LqW3rTy6HsJ2p", r#"{"ok":true,"instance_id":28415190,"label":"fleetagent-r413-call_Kc5VbN1m","gpu":"RTX 4090","dph":0.455}"#),
        msg(Role::Assistant, "Launched one more RTX 4090 (28415190); fleet will be $1.97/h, under your $3/h cap."),
        msg(Role::User, "Run 414. Demand: active=true. Queue: PSProve 3p/8r. Throughput: 96/h (1h), 31 (15m). Fleet: 3 running (150 p/h), 2 loading. Projected: 222 p/h. $1.97/h. Target: 500 p/h. Budget headroom: $1.03/h (operator cap), 15 slots. Launch window: 1/3 used.\nWakes: 1 due (18:22 \"confirm the new workers are live\")."),
    ]
}

fn wire_tools(tools: &[ToolSpec]) -> Vec<Value> {
    tools
        .iter()
        .map(|t| json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}))
        .collect()
}

#[test]
fn tool_estimate_is_never_below_the_cookbook_formula() {
    let t = Tokenizer::for_model(MODEL, None).unwrap();
    let tools = fleet_tools();
    for tool in &tools {
        let ours = t.count_tools(std::slice::from_ref(tool));
        let cookbook = cookbook_tool_tokens(&wire_tools(std::slice::from_ref(tool)));
        assert!(ours >= cookbook, "{}: {ours} < {cookbook}", tool.name);
    }
    let ours = t.count_tools(&tools);
    let cookbook = cookbook_tool_tokens(&wire_tools(&tools));
    assert!(ours >= cookbook, "{ours} < {cookbook}");
    println!(
        "tool schemas: estimate {ours} vs cookbook {cookbook} (+{:.1}%)",
        over_pct(ours, cookbook)
    );
}

fn over_pct(estimate: u64, reference: u64) -> f64 {
    (estimate as f64 - reference as f64) * 100.0 / reference as f64
}

#[test]
fn token_estimate_does_not_undercount_the_provider() {
    let t = Tokenizer::for_model(MODEL, None).unwrap();
    let system_tokens = t.count_text(SYSTEM_PROMPT);
    assert!(
        (900..=1300).contains(&system_tokens),
        "system prompt is {system_tokens} tokens"
    );

    let s = Setup::new(90);
    let cases = [
        (
            "full prompt with tools",
            request(real_shaped_conversation()),
        ),
        (
            "messages only",
            ChatRequest {
                tools: vec![],
                ..request(real_shaped_conversation())
            },
        ),
        (
            "system and one observation",
            request(real_shaped_conversation()[..2].to_vec()),
        ),
    ];
    for (what, req) in cases {
        let estimate = t.count_request(&req);
        let answer = s.client.chat(&req).unwrap();
        let provider = answer.usage.expect("the fake reports usage").prompt_tokens;
        let over = over_pct(estimate, provider);
        println!("{what}: estimate {estimate} vs provider {provider} ({over:+.1}%)");
        // The project's bar: never more than 2 % below what the provider reports...
        assert!(
            estimate * 100 >= provider * 98,
            "{what}: estimate {estimate} under-counts provider {provider}"
        );
        // ... and not so far above that the context budget is wasted.
        assert!(over < 20.0, "{what}: estimate {estimate} vs {provider}");
    }
    assert_eq!(s.fake.rejected_count(), 0, "{:?}", s.fake.rejections());

    // The message part on its own, against the cookbook rule over the wire body.
    let req = request(real_shaped_conversation());
    let wire = fleetagent::llm::http::request_body(&req);
    let cookbook = cookbook_message_tokens(wire["messages"].as_array().unwrap());
    assert!(t.count_messages(&req.messages) >= cookbook);
}
