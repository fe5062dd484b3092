//! The ureq implementation of [`LlmClient`]: one `POST {base_url}/chat/completions` per model
//! turn, retried with backoff inside a total time budget read from the [`Clock`] it is given.
//! It never builds prompts, never logs the API key, and logs whole prompts only at trace level.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Map, Value};

pub use super::parse::parse_completion;
use super::parse::snippet;
#[cfg(test)]
use super::parse::SNIPPET_CHARS;
use super::{AttemptFailure, ChatMessage, ChatRequest, ChatResponse, LlmClient, LlmError, Role};
use crate::clock::Clock;

/// First wait after a transient failure; it doubles after each one.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// Longest wait backoff alone chooses (a server's Retry-After may ask for more). With the
/// default 90 s budget this allows about eight attempts: 0, 1, 3, 7, 15, 31, 47, 63, 79 s.
const MAX_BACKOFF: Duration = Duration::from_secs(16);
/// A chat completion is a few kB; anything far bigger is not an answer we can use.
const MAX_BODY_BYTES: u64 = 8 * 1024 * 1024;

/// An OpenAI-compatible chat-completions client (OpenAI, OpenRouter, vLLM, Ollama, llama.cpp,
/// LiteLLM). Cheap to share: the ureq agent pools connections.
pub struct HttpLlmClient {
    endpoint: String,
    api_key: Option<String>,
    clock: Arc<dyn Clock>,
    timeout: Duration,
    retry_budget: Duration,
    /// The request field the output cap goes in (see [`cap_field`]).
    cap_field: &'static str,
    agent: ureq::Agent,
}

impl fmt::Debug for HttpLlmClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpLlmClient")
            .field("endpoint", &self.endpoint)
            .field("api_key", &self.api_key.as_ref().map(|_| "[redacted]"))
            .field("timeout", &self.timeout)
            .field("retry_budget", &self.retry_budget)
            .finish()
    }
}

/// How one attempt ended.
enum Attempt {
    Answer(ChatResponse),
    /// Worth another try; `hint` is the wait the server asked for, if any.
    Retry {
        failure: AttemptFailure,
        hint: Option<Duration>,
    },
    /// Final: no retry can change the outcome.
    Fail(LlmError),
}

impl HttpLlmClient {
    /// `base_url` ends in `/v1` (a trailing slash is fine). `timeout` bounds one HTTP attempt,
    /// `retry_budget` all attempts and waits of one [`LlmClient::chat`] call together. A `None`
    /// (or blank) key makes every call fail with [`LlmError::NoKey`] before any request.
    pub fn new(
        base_url: &str,
        api_key: Option<String>,
        clock: Arc<dyn Clock>,
        timeout: Duration,
        retry_budget: Duration,
    ) -> Self {
        crate::faults::stats::http_client_built();
        let agent: ureq::Agent = ureq::Agent::config_builder()
            // Error statuses carry the server's message and Retry-After: read them ourselves.
            .http_status_as_error(false)
            // ureq sets no timeout by default; each attempt also gets the remaining budget.
            .timeout_global(Some(timeout))
            // A redirect means a wrong base_url; never carry a POST with a key elsewhere.
            .max_redirects(0)
            .build()
            .into();
        HttpLlmClient {
            endpoint: format!("{}/chat/completions", base_url.trim_end_matches('/')),
            api_key: api_key.filter(|k| !k.trim().is_empty()),
            clock,
            timeout,
            retry_budget,
            cap_field: cap_field(base_url),
            agent,
        }
    }

    /// The URL every request goes to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    fn attempt(&self, body: &str, key: &str, timeout: Duration) -> Attempt {
        let sent = self
            .agent
            .post(&self.endpoint)
            .config()
            .timeout_global(Some(timeout))
            .build()
            .header("Authorization", format!("Bearer {key}"))
            .header("Content-Type", "application/json")
            .header("Accept", "application/json")
            .send(body);
        let response = match sent {
            Ok(r) => r,
            Err(e) => return transport_failure(e, timeout, key),
        };
        let status = response.status().as_u16();
        let hint = retry_hint(response.headers());
        let bytes = match response
            .into_body()
            .with_config()
            .limit(MAX_BODY_BYTES)
            .read_to_vec()
        {
            Ok(b) => b,
            Err(e) => return transport_failure(e, timeout, key),
        };
        let text = String::from_utf8_lossy(&bytes);
        log::trace!("LLM response HTTP {status}: {}", redact(&text, key));
        classify(status, &text, hint, key, self.clock.now_ms())
    }
}

impl LlmClient for HttpLlmClient {
    fn chat(&self, req: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let Some(key) = self.api_key.as_deref() else {
            return Err(LlmError::NoKey);
        };
        // Checked as the vast.ai client checks its key: ureq's "failed to parse header
        // value" named neither the key nor where it comes from.
        if !key.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(LlmError::BadKey);
        }
        let body = request_body_with(req, self.cap_field).to_string();
        log::debug!(
            "LLM request to {}: model {}, {} messages, {} tools, {} bytes",
            self.endpoint,
            req.model,
            req.messages.len(),
            req.tools.len(),
            body.len()
        );
        log::trace!("LLM request body: {body}");

        let budget_ms = duration_ms(match req.budget {
            Some(b) => b.min(self.retry_budget),
            None => self.retry_budget,
        });
        let start = self.clock.now_ms();
        let mut backoff = FIRST_BACKOFF;
        let mut attempts = 0u32;
        loop {
            let elapsed = (self.clock.now_ms() - start).max(0);
            let remaining = budget_ms - elapsed;
            let timeout = if remaining > 0 {
                self.timeout.min(Duration::from_millis(remaining as u64))
            } else {
                self.timeout
            };
            attempts += 1;
            let (failure, hint) = match self.attempt(&body, key, timeout) {
                Attempt::Answer(mut answer) => {
                    answer.attempts = attempts;
                    log::debug!(
                        "LLM answered after {attempts} attempt(s): {} tool calls, finish_reason {:?}",
                        answer.tool_calls.len(),
                        answer.finish_reason
                    );
                    return Ok(answer);
                }
                Attempt::Fail(e) => return Err(e),
                Attempt::Retry { failure, hint } => (failure, hint),
            };
            let wait = backoff.max(hint.unwrap_or_default());
            let elapsed = (self.clock.now_ms() - start).max(0);
            // Give up now rather than wait past the budget: a wait that ends at the budget
            // would leave no time for the attempt it waited for.
            // Saturating: a Retry-After of 1e300 s wrapped the sum negative and the client
            // slept past the run's deadline instead of giving up (the fallback never ran).
            if elapsed.saturating_add(duration_ms(wait)) >= budget_ms {
                log::info!("LLM attempt {attempts} failed ({failure}); giving up, the retry budget is spent");
                return Err(LlmError::GaveUp {
                    attempts,
                    elapsed_secs: (elapsed / 1000) as u64,
                    last: failure,
                });
            }
            log::info!(
                "LLM attempt {attempts} failed ({failure}); retrying in {:.1}s",
                wait.as_secs_f64()
            );
            self.clock.sleep(wait);
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }
}

fn duration_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The field the output cap is sent in: `max_completion_tokens` to api.openai.com (o1, o3 and
/// gpt-5 refuse `max_tokens` there, every current model accepts the newer field), `max_tokens`
/// everywhere else (Ollama, llama.cpp and vLLM read only that one; OpenRouter and LiteLLM
/// forward it).
pub fn cap_field(base_url: &str) -> &'static str {
    let host = base_url
        .split("://")
        .nth(1)
        .unwrap_or(base_url)
        .split(['/', ':'])
        .next()
        .unwrap_or_default();
    if host.eq_ignore_ascii_case("api.openai.com") {
        "max_completion_tokens"
    } else {
        "max_tokens"
    }
}

/// The JSON body of one request as a local server gets it (the cap as `max_tokens`); see
/// [`request_body_with`].
pub fn request_body(req: &ChatRequest) -> Value {
    request_body_with(req, "max_tokens")
}

/// The JSON body of one request. Assistant turns with tool calls send `content: ""` (not null),
/// tool messages carry `tool_call_id`, arguments are always a JSON string, and `tool_choice` is
/// sent only with tools. The output cap goes in `cap_field` when the request has one. No
/// `temperature` (reasoning models accept only the default) and no `parallel_tool_calls`
/// (servers disagree on it).
pub fn request_body_with(req: &ChatRequest, cap_field: &str) -> Value {
    let messages: Vec<Value> = alternating(&req.messages)
        .iter()
        .map(|m| {
            let mut obj = Map::new();
            obj.insert("role".into(), json!(m.role.as_str()));
            // Outside text in it (tool results, observations) without what no operator
            // sees: a host's instruction in tag characters (`text::visible`).
            obj.insert("content".into(), json!(crate::text::visible(&m.content)));
            if m.role == Role::Assistant && !m.tool_calls.is_empty() {
                let calls: Vec<Value> = m
                    .tool_calls
                    .iter()
                    .map(|c| {
                        json!({
                            "id": c.id,
                            "type": "function",
                            "function": {"name": c.name, "arguments": c.arguments},
                        })
                    })
                    .collect();
                obj.insert("tool_calls".into(), Value::Array(calls));
            }
            if let Some(id) = &m.tool_call_id {
                obj.insert("tool_call_id".into(), json!(id));
            }
            Value::Object(obj)
        })
        .collect();
    let mut body = Map::new();
    body.insert("model".into(), json!(req.model));
    body.insert("messages".into(), Value::Array(messages));
    if let Some(cap) = req.max_tokens {
        body.insert(cap_field.into(), json!(cap));
    }
    if !req.tools.is_empty() {
        let tools: Vec<Value> = req
            .tools
            .iter()
            .map(|t| {
                let mut function = Map::new();
                function.insert("name".into(), json!(t.name));
                function.insert("description".into(), json!(t.description));
                if !t.parameters.is_null() {
                    function.insert("parameters".into(), t.parameters.clone());
                }
                json!({"type": "function", "function": function})
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
        body.insert("tool_choice".into(), json!("auto"));
    }
    Value::Object(body)
}

/// The messages with each run of consecutive user messages joined into one (their texts
/// apart by a blank line): the chat templates of Gemma and Mistral refuse two user turns in a
/// row ("Conversation roles must alternate user/assistant/user/assistant/...", a 500 from
/// llama-server every time), and the pinned state block is followed by the observation, a
/// note by the next observation. What is stored, counted and cached stays one message each;
/// joined the same way every time, the bytes sent stay the same from pass to pass.
fn alternating(messages: &[ChatMessage]) -> std::borrow::Cow<'_, [ChatMessage]> {
    let plain_user = |m: &ChatMessage| m.role == Role::User && m.tool_calls.is_empty();
    if !messages
        .windows(2)
        .any(|w| plain_user(&w[0]) && plain_user(&w[1]))
    {
        return std::borrow::Cow::Borrowed(messages);
    }
    let mut out: Vec<ChatMessage> = Vec::with_capacity(messages.len());
    for m in messages {
        match out.last_mut() {
            Some(last) if plain_user(last) && plain_user(m) => {
                last.content.push_str("\n\n");
                last.content.push_str(&m.content);
            }
            _ => out.push(m.clone()),
        }
    }
    std::borrow::Cow::Owned(out)
}

fn transport_failure(e: ureq::Error, timeout: Duration, key: &str) -> Attempt {
    let after_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
    let failure = match &e {
        ureq::Error::Timeout(_) => AttemptFailure::Timeout { after_ms },
        ureq::Error::Io(io)
            if matches!(
                io.kind(),
                std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
            ) =>
        {
            AttemptFailure::Timeout { after_ms }
        }
        // Local mistakes no retry can fix: report at once (GaveUp after one attempt).
        ureq::Error::BadUri(_)
        | ureq::Error::Http(_)
        | ureq::Error::RequireHttpsOnly(_)
        | ureq::Error::InvalidProxyUrl => {
            return Attempt::Fail(LlmError::GaveUp {
                attempts: 1,
                elapsed_secs: 0,
                last: AttemptFailure::Other(format!(
                    "cannot send the request: {}",
                    redact(&e.to_string(), key)
                )),
            })
        }
        _ => AttemptFailure::Transport(redact(&e.to_string(), key)),
    };
    Attempt::Retry {
        failure,
        hint: None,
    }
}

/// Turn one HTTP exchange into an answer, a retry or a final error.
fn classify(status: u16, body: &str, hint: Option<Duration>, key: &str, now_ms: i64) -> Attempt {
    match status {
        200..=299 => match parse_completion(body, now_ms) {
            Ok(answer) => Attempt::Answer(answer),
            Err(failure) => Attempt::Retry {
                failure: redact_failure(failure, key),
                hint: None,
            },
        },
        429 if is_billing_error(body) => Attempt::Fail(LlmError::Rejected {
            status,
            message: redact(&server_message(body), key),
        }),
        500..=599 if cannot_parse_the_request(&server_message(body)) => {
            Attempt::Fail(LlmError::Rejected {
                status,
                message: redact(&server_message(body), key),
            })
        }
        // 408 is the server timing out on us (OpenRouter): load, not a bad request.
        408 | 429 | 500..=599 => Attempt::Retry {
            failure: AttemptFailure::Status {
                status,
                message: redact(&server_message(body), key),
            },
            hint,
        },
        _ => Attempt::Fail(LlmError::Rejected {
            status,
            message: redact(&server_message(body), key),
        }),
    }
}

/// A 429 that is about money, not load: `insufficient_quota` (OpenAI) or
/// `credit_balance_exhausted`. Waiting does not refill an account.
fn is_billing_error(body: &str) -> bool {
    let Ok(v) = serde_json::from_str::<Value>(body) else {
        return false;
    };
    let err = match v.get("error") {
        Some(e @ Value::Object(_)) => e,
        _ => &v,
    };
    ["type", "code"].iter().any(|field| {
        matches!(
            err.get(*field).and_then(Value::as_str),
            Some("insufficient_quota" | "credit_balance_exhausted")
        )
    })
}

/// A 5xx whose message says the server could not parse what we sent: llama-server answers a
/// history with invalid tool-call arguments `500 Failed to parse tool call arguments as JSON:
/// ...`, and its JSON library's `[json.exception.parse_error.101] ...` the same way. The same
/// body fails the same way every time, so it is final, not load. A proxy that cannot parse its
/// upstream's *response* says so and stays transient.
fn cannot_parse_the_request(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    let parse = [
        "failed to parse",
        "could not parse",
        "cannot parse",
        "unable to parse",
        "parse_error",
        "parse error",
    ]
    .iter()
    .any(|p| m.contains(p));
    // A chat template that refuses the conversation's shape (Jinja's raise_exception in
    // llama-server: "Conversation roles must alternate ...") refuses it every time too.
    let template = m.contains("roles must alternate");
    template || (parse && !m.contains("upstream") && !m.contains("response"))
}

/// The server's message from an error body: OpenAI/OpenRouter/llama.cpp wrap it in `error`,
/// older vLLM sends it flat, some proxies send `{"error": "text"}` or `{"detail": "text"}`.
/// Anything else is kept as raw text, cut short.
fn server_message(body: &str) -> String {
    if let Ok(v) = serde_json::from_str::<Value>(body) {
        let found = match v.get("error") {
            Some(Value::Object(e)) => e.get("message").and_then(Value::as_str),
            Some(Value::String(s)) => Some(s.as_str()),
            _ => None,
        }
        .or_else(|| v.get("message").and_then(Value::as_str))
        .or_else(|| v.get("detail").and_then(Value::as_str));
        if let Some(msg) = found {
            return msg.to_string();
        }
    }
    snippet(body)
}

/// A server that echoes the key (a misconfigured proxy, a debug endpoint) must not put it
/// into our errors and logs.
fn redact(text: &str, key: &str) -> String {
    crate::secrets::redact(text, key)
}

fn redact_failure(f: AttemptFailure, key: &str) -> AttemptFailure {
    match f {
        AttemptFailure::BadBody(s) => AttemptFailure::BadBody(redact(&s, key)),
        AttemptFailure::ErrorInBody(s) => AttemptFailure::ErrorInBody(redact(&s, key)),
        other => other,
    }
}

/// The wait a 429/5xx asks for: `retry-after-ms`, else `Retry-After` in seconds (an HTTP date
/// is ignored: backoff covers it), else OpenAI's `x-ratelimit-reset-{requests,tokens}`
/// durations: the reset of a limit whose remaining count is 0, or the later of the two.
fn retry_hint(headers: &ureq::http::HeaderMap) -> Option<Duration> {
    // Past any retry budget (at most an hour): a longer hint means "give up", whatever it says.
    retry_hint_uncapped(headers).map(|d| d.min(MAX_RETRY_HINT))
}

/// The longest wait a server's hint is read as.
const MAX_RETRY_HINT: Duration = Duration::from_secs(86_400);

fn retry_hint_uncapped(headers: &ureq::http::HeaderMap) -> Option<Duration> {
    let get = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(ms) = get("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        if ms.is_finite() && ms >= 0.0 {
            return Some(Duration::from_millis(ms.ceil() as u64));
        }
    }
    if let Some(secs) = get("retry-after").and_then(|v| v.parse::<f64>().ok()) {
        if secs.is_finite() && secs >= 0.0 {
            return Some(Duration::from_millis((secs * 1000.0).ceil() as u64));
        }
    }
    let resets: Vec<(Duration, bool)> = ["requests", "tokens"]
        .iter()
        .filter_map(|kind| {
            let reset = parse_go_duration(get(&format!("x-ratelimit-reset-{kind}"))?)?;
            let exhausted = get(&format!("x-ratelimit-remaining-{kind}")) == Some("0");
            Some((reset, exhausted))
        })
        .collect();
    let exhausted = resets.iter().filter(|r| r.1).map(|r| r.0).max();
    exhausted.or_else(|| resets.iter().map(|r| r.0).max())
}

/// Parse a Go-style duration as OpenAI's rate-limit headers send them: `1s`, `6m0s`, `12ms`,
/// `1m30.5s`, `2h`, `500us`.
pub(crate) fn parse_go_duration(text: &str) -> Option<Duration> {
    let mut rest = text.trim();
    if rest.is_empty() {
        return None;
    }
    let mut total_ms = 0f64;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..num_len].parse().ok()?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit_ms = match &rest[..unit_len] {
            "h" => 3_600_000.0,
            "m" => 60_000.0,
            "s" => 1_000.0,
            "ms" => 1.0,
            "us" | "µs" => 0.001,
            "ns" => 0.000_001,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total_ms += number * unit_ms;
    }
    Some(Duration::from_millis(total_ms.ceil() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{ToolCall, ToolSpec};

    #[test]
    fn body_shapes_follow_the_wire_contract() {
        let req = ChatRequest {
            model: "gpt-4.1-mini".into(),
            messages: vec![
                ChatMessage {
                    role: Role::System,
                    content: "sys".into(),
                    tool_calls: vec![],
                    tool_call_id: None,
                },
                ChatMessage {
                    role: Role::Assistant,
                    content: String::new(),
                    tool_calls: vec![ToolCall {
                        id: "call_1".into(),
                        name: "list_instances".into(),
                        arguments: "{}".into(),
                    }],
                    tool_call_id: None,
                },
                ChatMessage {
                    role: Role::Tool,
                    content: "[]".into(),
                    tool_calls: vec![],
                    tool_call_id: Some("call_1".into()),
                },
            ],
            tools: vec![ToolSpec {
                name: "list_instances".into(),
                description: "List".into(),
                parameters: json!({"type": "object", "properties": {}}),
            }],
            max_tokens: Some(512),
            budget: None,
        };
        let body = request_body(&req);
        assert_eq!(body["max_tokens"], 512);
        let openai = request_body_with(&req, cap_field("https://api.openai.com/v1"));
        assert_eq!(openai["max_completion_tokens"], 512);
        assert!(openai.get("max_tokens").is_none());
        assert_eq!(body["messages"][1]["content"], json!(""));
        assert_eq!(body["messages"][1]["tool_calls"][0]["type"], "function");
        assert_eq!(
            body["messages"][1]["tool_calls"][0]["function"]["arguments"],
            json!("{}")
        );
        assert_eq!(body["messages"][2]["tool_call_id"], "call_1");
        assert!(body["messages"][0].get("tool_calls").is_none());
        assert_eq!(body["tools"][0]["type"], "function");
        assert_eq!(body["tool_choice"], "auto");
        assert!(body.get("temperature").is_none());

        let no_tools = ChatRequest {
            tools: vec![],
            max_tokens: None,
            ..req
        };
        let body = request_body(&no_tools);
        assert!(body.get("tools").is_none() && body.get("tool_choice").is_none());
        assert!(body.get("max_tokens").is_none());
    }

    #[test]
    fn the_cap_field_follows_the_provider() {
        for url in [
            "https://api.openai.com/v1",
            "https://API.openai.com:443/v1/",
        ] {
            assert_eq!(cap_field(url), "max_completion_tokens", "{url}");
        }
        for url in [
            "http://127.0.0.1:8080/v1",
            "https://openrouter.ai/api/v1",
            "http://localhost:11434/v1",
            "https://api.openai.com.example.org/v1",
        ] {
            assert_eq!(cap_field(url), "max_tokens", "{url}");
        }
    }

    /// The state block, the observation and a note are user messages in a row: sent as one
    /// (Gemma's and Mistral's templates refuse two user turns in a row, a 500 every time:
    /// the prompt walkthrough), and a template's refusal is final, not load.
    #[test]
    fn consecutive_user_messages_go_as_one_and_a_templates_refusal_is_final() {
        let msg = |role: Role, content: &str| ChatMessage {
            role,
            content: content.into(),
            tool_calls: vec![],
            tool_call_id: None,
        };
        let req = ChatRequest {
            model: "gemma".into(),
            messages: vec![
                msg(Role::System, "sys"),
                msg(Role::User, "note"),
                msg(Role::User, "observation 1"),
                msg(Role::Assistant, "no action"),
                msg(Role::User, "state"),
                msg(Role::User, "observation 2"),
            ],
            tools: vec![],
            max_tokens: None,
            budget: None,
        };
        let body = request_body(&req);
        let sent: Vec<(String, String)> = body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                (
                    m["role"].as_str().unwrap().to_string(),
                    m["content"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        let pairs = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter()
                .map(|(r, c)| (r.to_string(), c.to_string()))
                .collect()
        };
        assert_eq!(
            sent,
            pairs(&[
                ("system", "sys"),
                ("user", "note\n\nobservation 1"),
                ("assistant", "no action"),
                ("user", "state\n\nobservation 2"),
            ])
        );
        let gemma = r#"{"error":{"code":500,"message":"Conversation roles must alternate user/assistant/user/assistant/...","type":"server_error"}}"#;
        assert!(matches!(
            classify(500, gemma, None, "k", 0),
            Attempt::Fail(LlmError::Rejected { status: 500, .. })
        ));
    }

    #[test]
    fn a_5xx_that_cannot_parse_the_request_is_final() {
        let llama = r#"{"error":{"code":500,"message":"Failed to parse tool call arguments as JSON: [json.exception.parse_error.101] parse error at line 1, column 1: attempting to parse an empty input","type":"server_error"}}"#;
        match classify(500, llama, None, "k", 0) {
            Attempt::Fail(LlmError::Rejected { status, message }) => {
                assert_eq!(status, 500);
                assert!(message.starts_with("Failed to parse tool call arguments"));
            }
            _ => panic!("a parse error must be final"),
        }
        for transient in [
            r#"{"error":{"code":500,"message":"The server had an error while processing your request.","type":"server_error"}}"#,
            r#"{"error":{"message":"upstream: failed to parse the response","code":502}}"#,
            r#"{"error":{"message":"","type":"internal_server_error","param":null,"code":null}}"#,
            "<html>503 Service Unavailable</html>",
        ] {
            assert!(
                matches!(
                    classify(503, transient, None, "k", 0),
                    Attempt::Retry { .. }
                ),
                "{transient}"
            );
        }
    }

    #[test]
    fn server_messages_flat_wrapped_and_raw() {
        assert_eq!(
            server_message(r#"{"error":{"message":"bad","type":"x","param":null,"code":null}}"#),
            "bad"
        );
        assert_eq!(
            server_message(r#"{"object":"error","message":"flat","code":400}"#),
            "flat"
        );
        assert_eq!(server_message(r#"{"error":"plain"}"#), "plain");
        assert_eq!(
            server_message("  <h1>Bad\n request</h1> "),
            "<h1>Bad request</h1>"
        );
        assert_eq!(server_message(""), "(empty body)");
        let long = "x".repeat(1000);
        assert_eq!(server_message(&long).chars().count(), SNIPPET_CHARS + 1);
    }

    #[test]
    fn billing_429s_are_recognised() {
        assert!(is_billing_error(
            r#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}"#
        ));
        assert!(is_billing_error(
            r#"{"error":{"message":"You have no credits remaining","code":"credit_balance_exhausted"}}"#
        ));
        assert!(!is_billing_error(
            r#"{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}"#
        ));
        assert!(!is_billing_error("too many requests"));
    }

    #[test]
    fn go_durations() {
        let ms = |s: &str| parse_go_duration(s).map(|d| d.as_millis());
        assert_eq!(ms("1s"), Some(1000));
        assert_eq!(ms("6m0s"), Some(360_000));
        assert_eq!(ms("12ms"), Some(12));
        assert_eq!(ms("1m30.5s"), Some(90_500));
        assert_eq!(ms("2h"), Some(7_200_000));
        assert_eq!(ms("0.2s"), Some(200));
        assert_eq!(ms(""), None);
        assert_eq!(ms("5"), None);
        assert_eq!(ms("3x"), None);
    }

    #[test]
    fn retry_hints_from_headers() {
        let headers = |pairs: &[(&'static str, &'static str)]| {
            let mut h = ureq::http::HeaderMap::new();
            for (k, v) in pairs {
                h.insert(*k, ureq::http::HeaderValue::from_static(v));
            }
            h
        };
        let secs = |pairs| retry_hint(&headers(pairs)).map(|d| d.as_millis());
        assert_eq!(secs(&[("retry-after", "7")]), Some(7000));
        assert_eq!(
            secs(&[("retry-after", "7"), ("retry-after-ms", "1500")]),
            Some(1500)
        );
        assert_eq!(
            secs(&[("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT")]),
            None
        );
        assert_eq!(
            secs(&[
                ("x-ratelimit-reset-requests", "2s"),
                ("x-ratelimit-remaining-requests", "0"),
                ("x-ratelimit-reset-tokens", "6m0s"),
                ("x-ratelimit-remaining-tokens", "5000"),
            ]),
            Some(2000)
        );
        assert_eq!(
            secs(&[
                ("x-ratelimit-reset-requests", "2s"),
                ("x-ratelimit-reset-tokens", "20s"),
            ]),
            Some(20_000)
        );
        assert_eq!(secs(&[]), None);
    }

    #[test]
    fn redaction() {
        assert_eq!(
            redact("key sk-secret-123 leaked", "sk-secret-123"),
            "key [redacted] leaked"
        );
        let c = HttpLlmClient::new(
            "http://127.0.0.1:9/v1/",
            Some("sk-secret-123".into()),
            Arc::new(crate::clock::ManualClock::new(0)),
            Duration::from_secs(1),
            Duration::from_secs(1),
        );
        assert_eq!(c.endpoint(), "http://127.0.0.1:9/v1/chat/completions");
        assert!(!format!("{c:?}").contains("sk-secret"));
    }

    /// A key with a second line (a comment after it) cannot go into a header: one clear
    /// error naming where the key comes from, never the key, and nothing sent (a request
    /// to the closed port would fail otherwise).
    #[test]
    fn a_key_that_is_no_header_value_is_named_not_sent() {
        for key in [
            "sk-Hb52nJ9sKd\n# rotated 2026-12-01",
            "sk-Hb52 nJ9sKd",
            "sk-Hb52nJ9sKdé",
        ] {
            let c = HttpLlmClient::new(
                "http://127.0.0.1:1/v1",
                Some(key.into()),
                Arc::new(crate::clock::ManualClock::new(0)),
                Duration::from_secs(1),
                Duration::from_secs(1),
            );
            let req = ChatRequest {
                model: "m".into(),
                messages: vec![],
                tools: vec![],
                max_tokens: None,
                budget: None,
            };
            let err = c.chat(&req).unwrap_err();
            assert_eq!(err, LlmError::BadKey);
            let said = err.to_string();
            assert!(said.contains("FLEETAGENT_LLM_API_KEY") && said.contains("llm_api_key"));
            assert!(!said.contains("Hb52"), "{said}");
        }
    }
}
