//! The ureq implementation of [`LlmClient`]: one `POST {base_url}/chat/completions` per model
//! turn, retried with backoff inside a total time budget read from the [`Clock`] it is given.
//! It never builds prompts, never logs the API key, and logs whole prompts only at trace level.

use std::collections::HashSet;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Map, Value};

use super::{
    AttemptFailure, ChatRequest, ChatResponse, LlmClient, LlmError, Role, ToolCall, Usage,
};
use crate::clock::Clock;

/// First wait after a transient failure; it doubles after each one.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// Longest wait backoff alone chooses (a server's Retry-After may ask for more). With the
/// default 90 s budget this allows about eight attempts: 0, 1, 3, 7, 15, 31, 47, 63, 79 s.
const MAX_BACKOFF: Duration = Duration::from_secs(16);
/// A chat completion is a few kB; anything far bigger is not an answer we can use.
const MAX_BODY_BYTES: u64 = 8 * 1024 * 1024;
/// How much of a non-JSON body an error keeps.
const SNIPPET_CHARS: usize = 200;

/// Process-wide counter for ids we make up when a server sends a tool call without one.
static SYNTHETIC_IDS: AtomicU64 = AtomicU64::new(0);

/// An OpenAI-compatible chat-completions client (OpenAI, OpenRouter, vLLM, Ollama, llama.cpp,
/// LiteLLM). Cheap to share: the ureq agent pools connections.
pub struct HttpLlmClient {
    endpoint: String,
    api_key: Option<String>,
    clock: Arc<dyn Clock>,
    timeout: Duration,
    retry_budget: Duration,
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
        let body = request_body(req).to_string();
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
            if elapsed + duration_ms(wait) >= budget_ms {
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

/// The JSON body of one request. Assistant turns with tool calls send `content: ""` (not null),
/// tool messages carry `tool_call_id`, arguments are always a JSON string, and `tool_choice` is
/// sent only with tools. No `temperature` (reasoning models accept only the default) and no
/// token cap or `parallel_tool_calls` (servers disagree on both).
pub fn request_body(req: &ChatRequest) -> Value {
    let messages: Vec<Value> = req
        .messages
        .iter()
        .map(|m| {
            let mut obj = Map::new();
            obj.insert("role".into(), json!(m.role.as_str()));
            obj.insert("content".into(), json!(m.content));
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

/// The start of a body on one line, at most [`SNIPPET_CHARS`] characters.
fn snippet(body: &str) -> String {
    let flat = body.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.is_empty() {
        return "(empty body)".into();
    }
    match flat.char_indices().nth(SNIPPET_CHARS) {
        Some((cut, _)) => format!("{}…", &flat[..cut]),
        None => flat,
    }
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

/// Read a 2xx body. Anything that is not a usable completion is a retryable failure. Pure (no
/// I/O), public for the fuzz targets.
pub fn parse_completion(body: &str, now_ms: i64) -> Result<ChatResponse, AttemptFailure> {
    let v: Value = serde_json::from_str(body)
        .map_err(|e| AttemptFailure::BadBody(format!("not JSON ({e}): {}", snippet(body))))?;
    if !v.is_object() {
        return Err(AttemptFailure::BadBody(format!(
            "not a JSON object: {}",
            snippet(body)
        )));
    }
    if let Some(err) = v.get("error").filter(|e| !e.is_null()) {
        return Err(AttemptFailure::ErrorInBody(error_text(err)));
    }
    let choice = match v.get("choices").and_then(Value::as_array) {
        Some(choices) if !choices.is_empty() => &choices[0],
        _ => return Err(AttemptFailure::NoChoices),
    };
    if let Some(err) = choice.get("error").filter(|e| !e.is_null()) {
        return Err(AttemptFailure::ErrorInBody(error_text(err)));
    }
    let finish_reason = choice
        .get("finish_reason")
        .and_then(Value::as_str)
        .map(str::to_string);
    if finish_reason.as_deref() == Some("error") {
        let native = choice
            .get("native_finish_reason")
            .and_then(Value::as_str)
            .unwrap_or("none given");
        return Err(AttemptFailure::ErrorInBody(format!(
            "finish_reason \"error\" (native: {native})"
        )));
    }
    let Some(message) = choice.get("message").filter(|m| m.is_object()) else {
        return Err(AttemptFailure::BadBody(format!(
            "choices[0] has no message: {}",
            snippet(body)
        )));
    };
    Ok(ChatResponse {
        content: message_text(message),
        tool_calls: tool_calls(message, now_ms),
        finish_reason,
        usage: v.get("usage").and_then(usage),
        attempts: 0,
    })
}

fn error_text(err: &Value) -> String {
    match err {
        Value::String(s) => s.clone(),
        Value::Object(o) => match o.get("message").and_then(Value::as_str) {
            Some(m) => m.to_string(),
            None => snippet(&err.to_string()),
        },
        other => snippet(&other.to_string()),
    }
}

/// `content` as a string, or text parts joined; a refusal stands in for absent content.
/// Empty text is `None`.
fn message_text(message: &Value) -> Option<String> {
    let text = match message.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    };
    if !text.is_empty() {
        return Some(text);
    }
    message
        .get("refusal")
        .and_then(Value::as_str)
        .filter(|r| !r.is_empty())
        .map(|r| format!("[refusal] {r}"))
}

/// Tool calls with string arguments and unique, non-empty ids. An object `arguments` (some
/// llama.cpp builds, KoboldCpp) is serialized back to a string; absent arguments become `{}`;
/// an empty or repeated id is replaced by a made-up one. A legacy `function_call` counts as one
/// tool call.
fn tool_calls(message: &Value, now_ms: i64) -> Vec<ToolCall> {
    let mut raw: Vec<(Option<&str>, &Value)> = message
        .get("tool_calls")
        .and_then(Value::as_array)
        .map(|calls| {
            calls
                .iter()
                .map(|c| {
                    let id = c.get("id").and_then(Value::as_str);
                    (id, c.get("function").unwrap_or(c))
                })
                .collect()
        })
        .unwrap_or_default();
    if raw.is_empty() {
        if let Some(f) = message.get("function_call").filter(|f| f.is_object()) {
            raw.push((None, f));
        }
    }
    let mut seen = HashSet::new();
    raw.into_iter()
        .map(|(id, function)| {
            let name = function
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let arguments = match function.get("arguments") {
                Some(Value::String(s)) => s.clone(),
                None | Some(Value::Null) => "{}".to_string(),
                Some(other) => other.to_string(),
            };
            let id = match id.map(str::trim) {
                Some(id) if !id.is_empty() && !seen.contains(id) => id.to_string(),
                _ => synthetic_id(now_ms),
            };
            seen.insert(id.clone());
            ToolCall {
                id,
                name,
                arguments,
            }
        })
        .collect()
}

/// `call_fa<time>_<n>`: unique within the process (counter) and across runs (time).
fn synthetic_id(now_ms: i64) -> String {
    let n = SYNTHETIC_IDS.fetch_add(1, Ordering::Relaxed);
    format!("call_fa{now_ms:x}_{n}")
}

fn usage(v: &Value) -> Option<Usage> {
    let obj = v.as_object()?;
    let field = |name: &str| obj.get(name).and_then(Value::as_u64);
    let prompt_tokens = field("prompt_tokens").unwrap_or(0);
    let completion_tokens = field("completion_tokens").unwrap_or(0);
    Some(Usage {
        prompt_tokens,
        completion_tokens,
        total_tokens: field("total_tokens").unwrap_or(prompt_tokens + completion_tokens),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{ChatMessage, ToolSpec};

    fn ok(body: &str) -> ChatResponse {
        parse_completion(body, 0).unwrap()
    }

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
            budget: None,
        };
        let body = request_body(&req);
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
            ..req
        };
        let body = request_body(&no_tools);
        assert!(body.get("tools").is_none() && body.get("tool_choice").is_none());
    }

    #[test]
    fn tool_calls_are_normalised() {
        let r = ok(
            r#"{"choices":[{"finish_reason":"tool_calls","message":{"content":"",
            "tool_calls":[
              {"id":"call_a","type":"function","function":{"name":"a","arguments":{"x":1}}},
              {"id":"","type":"function","function":{"name":"b","arguments":"{\"y\":2}"}},
              {"id":"call_a","type":"function","function":{"name":"c"}}]}}]}"#,
        );
        assert_eq!(r.content, None);
        assert_eq!(r.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(r.usage, None);
        let ids: Vec<&str> = r.tool_calls.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids[0], "call_a");
        assert!(ids[1].starts_with("call_fa") && ids[2].starts_with("call_fa"));
        assert_ne!(ids[1], ids[2]);
        assert_eq!(r.tool_calls[0].arguments, r#"{"x":1}"#);
        assert_eq!(r.tool_calls[1].arguments, r#"{"y":2}"#);
        assert_eq!(r.tool_calls[2].arguments, "{}");
    }

    #[test]
    fn legacy_function_call_and_text_parts() {
        let r = ok(
            r#"{"choices":[{"finish_reason":"function_call","message":{"content":null,
            "function_call":{"name":"list_instances","arguments":"{}"}}}],
            "usage":{"prompt_tokens":10,"completion_tokens":2}}"#,
        );
        assert_eq!(r.tool_calls.len(), 1);
        assert_eq!(r.tool_calls[0].name, "list_instances");
        assert_eq!(
            r.usage,
            Some(Usage {
                prompt_tokens: 10,
                completion_tokens: 2,
                total_tokens: 12
            })
        );
        let r = ok(r#"{"choices":[{"finish_reason":"stop","message":{
            "content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}}]}"#);
        assert_eq!(r.content.as_deref(), Some("ab"));
    }

    #[test]
    fn unusable_bodies_are_retryable_failures() {
        let cases = [
            ("<html>502 Bad Gateway</html>", "BadBody"),
            (r#"{"choices":[{"message":{"content":"hal"#, "BadBody"),
            (
                r#"{"error":{"message":"upstream died","code":502}}"#,
                "ErrorInBody",
            ),
            (
                r#"{"choices":[{"error":{"message":"boom"},"message":{"content":""}}]}"#,
                "ErrorInBody",
            ),
            (
                r#"{"choices":[{"finish_reason":"error","message":{"content":""}}]}"#,
                "ErrorInBody",
            ),
            (r#"{"choices":[]}"#, "NoChoices"),
            (r#"{"id":"x"}"#, "NoChoices"),
            (r#"{"choices":[{"finish_reason":"stop"}]}"#, "BadBody"),
            ("[1,2]", "BadBody"),
        ];
        for (body, kind) in cases {
            let got = parse_completion(body, 0).unwrap_err();
            let name = match got {
                AttemptFailure::BadBody(_) => "BadBody",
                AttemptFailure::ErrorInBody(_) => "ErrorInBody",
                AttemptFailure::NoChoices => "NoChoices",
                _ => "other",
            };
            assert_eq!(name, kind, "{body}");
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
}
