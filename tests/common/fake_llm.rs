//! A strict fake OpenAI-compatible chat-completions server on 127.0.0.1 for tests: it rejects
//! broken requests with OpenAI's exact HTTP 400 bodies (and counts them), records every request,
//! answers from a script the test pushes, and reports `usage.prompt_tokens` the way OpenAI
//! documents counting. It never talks to anything beyond loopback.
//!
//! ```ignore
//! let llm = FakeLlm::start();
//! llm.push(Reply::rate_limited(7));
//! llm.push(Reply::tool_call("launch_instance", r#"{"reason":"queue"}"#));
//! // point the client or the binary at llm.base_url() ("http://127.0.0.1:PORT/v1")
//! assert_eq!(llm.rejected_count(), 0);
//! ```

use std::collections::{HashSet, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::{json, Value};
use tiny_http::{Header, Response, Server};

/// The answer to one request.
#[derive(Clone)]
pub enum Reply {
    /// 200, `finish_reason: "tool_calls"`, one call per `(name, arguments)`, fresh ids.
    ToolCalls(Vec<(String, String)>),
    /// 200, `finish_reason: "stop"`, this content.
    Text(String),
    /// Any status with this body (JSON or not) and extra headers.
    Status {
        status: u16,
        body: String,
        headers: Vec<(String, String)>,
    },
    /// Any status, content type and body, sent as is (HTML pages, truncated JSON).
    Raw {
        status: u16,
        content_type: String,
        body: String,
    },
    /// 200 with this JSON body exactly as given (odd servers: object arguments, empty ids).
    Json(Value),
    /// 200 with `choices: []`.
    EmptyChoices,
    /// Wait this long (real time; ends early when the fake shuts down), then answer.
    Delay(Duration, Box<Reply>),
    /// Decide from the request body (the parsed JSON) at the time it arrives.
    Dynamic(Arc<dyn Fn(&Value) -> Reply + Send + Sync>),
}

impl fmt::Debug for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reply::ToolCalls(c) => f.debug_tuple("ToolCalls").field(c).finish(),
            Reply::Text(t) => f.debug_tuple("Text").field(t).finish(),
            Reply::Status { status, body, .. } => write!(f, "Status({status}, {body:?})"),
            Reply::Raw { status, body, .. } => write!(f, "Raw({status}, {body:?})"),
            Reply::Json(v) => write!(f, "Json({v})"),
            Reply::EmptyChoices => write!(f, "EmptyChoices"),
            Reply::Delay(d, r) => write!(f, "Delay({d:?}, {r:?})"),
            Reply::Dynamic(_) => write!(f, "Dynamic(..)"),
        }
    }
}

impl Reply {
    pub fn tool_call(name: &str, arguments: &str) -> Reply {
        Reply::ToolCalls(vec![(name.to_string(), arguments.to_string())])
    }

    pub fn tool_calls(calls: &[(&str, &str)]) -> Reply {
        Reply::ToolCalls(
            calls
                .iter()
                .map(|(n, a)| (n.to_string(), a.to_string()))
                .collect(),
        )
    }

    pub fn text(content: &str) -> Reply {
        Reply::Text(content.to_string())
    }

    /// A status with a raw body and no extra headers; add some with [`Reply::header`].
    pub fn status(status: u16, body: &str) -> Reply {
        Reply::Status {
            status,
            body: body.to_string(),
            headers: vec![],
        }
    }

    /// A status with OpenAI's error body `{"error":{message,type,param,code}}`.
    pub fn openai_error(status: u16, message: &str, kind: &str, code: Option<&str>) -> Reply {
        Reply::status(
            status,
            &json!({"error": {"message": message, "type": kind, "param": null, "code": code}})
                .to_string(),
        )
    }

    /// Add a header to a `Status` reply (no effect on other kinds).
    pub fn header(mut self, name: &str, value: &str) -> Reply {
        if let Reply::Status { headers, .. } = &mut self {
            headers.push((name.to_string(), value.to_string()));
        }
        self
    }

    /// OpenAI's 429 for load, with `Retry-After: secs`.
    pub fn rate_limited(retry_after_secs: u64) -> Reply {
        Reply::openai_error(
            429,
            "Rate limit reached for gpt-4.1-mini in organization org-test on requests per min (RPM): Limit 3, Used 3, Requested 1.",
            "requests",
            Some("rate_limit_exceeded"),
        )
        .header("Retry-After", &retry_after_secs.to_string())
    }

    /// OpenAI's 429 for an empty account: never worth a retry.
    pub fn insufficient_quota() -> Reply {
        Reply::openai_error(
            429,
            "You exceeded your current quota, please check your plan and billing details.",
            "insufficient_quota",
            Some("insufficient_quota"),
        )
    }

    pub fn server_error(status: u16) -> Reply {
        Reply::openai_error(
            status,
            "The server had an error while processing your request. Sorry about that!",
            "server_error",
            None,
        )
    }

    /// 200 with a proxy's HTML error page.
    pub fn html() -> Reply {
        Reply::Raw {
            status: 200,
            content_type: "text/html".into(),
            body: "<html><head><title>502 Bad Gateway</title></head><body><center><h1>502 Bad Gateway</h1></center><hr><center>nginx</center></body></html>".into(),
        }
    }

    /// 200 with a completion cut off mid-way.
    pub fn truncated_json() -> Reply {
        Reply::Raw {
            status: 200,
            content_type: "application/json".into(),
            body: r#"{"id":"chatcmpl-cut","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"I will la"#.into(),
        }
    }

    /// 200 with a top-level `error` (OpenRouter once the model has started).
    pub fn error_in_body(message: &str) -> Reply {
        Reply::Json(json!({"error": {"code": 502, "message": message}}))
    }

    /// 200 whose choice carries an `error` and finish_reason `error` (OpenRouter).
    pub fn choice_error(message: &str) -> Reply {
        Reply::Json(json!({
            "id": "chatcmpl-err", "object": "chat.completion",
            "choices": [{"index": 0, "finish_reason": "error", "native_finish_reason": "error",
                         "error": {"code": 502, "message": message},
                         "message": {"role": "assistant", "content": ""}}],
        }))
    }

    pub fn delayed(delay: Duration, then: Reply) -> Reply {
        Reply::Delay(delay, Box::new(then))
    }

    pub fn dynamic(f: impl Fn(&Value) -> Reply + Send + Sync + 'static) -> Reply {
        Reply::Dynamic(Arc::new(f))
    }
}

/// One request as the fake saw it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    /// The `Authorization` header, verbatim.
    pub authorization: Option<String>,
    /// The parsed JSON body (`Null` when it did not parse).
    pub body: Value,
    /// HTTP status the fake answered (a delayed answer is recorded before it is sent).
    pub status: u16,
}

struct State {
    script: VecDeque<Reply>,
    default: Reply,
    key: Option<String>,
    requests: Vec<Recorded>,
    rejections: Vec<String>,
}

struct Shared {
    state: Mutex<State>,
    stopping: Mutex<bool>,
    stop_signal: Condvar,
}

impl Shared {
    /// Wait up to `d`, or less when the fake is shutting down.
    fn pause(&self, d: Duration) {
        let stopping = self.stopping.lock().unwrap();
        let _ = self
            .stop_signal
            .wait_timeout_while(stopping, d, |stop| !*stop)
            .unwrap();
    }
}

/// The fake server. Dropping it stops it.
pub struct FakeLlm {
    port: u16,
    shared: Arc<Shared>,
    server: Arc<Server>,
    thread: Option<JoinHandle<()>>,
}

impl FakeLlm {
    /// Listen on 127.0.0.1 on a free port; the default answer is the text "no action needed".
    pub fn start() -> FakeLlm {
        // Load the BPE tables now (once per process, seconds in a debug build), not inside the
        // first answer, where they would trip a client's short timeout.
        count("warm up");
        let server = Arc::new(Server::http("127.0.0.1:0").expect("bind 127.0.0.1:0"));
        let port = server.server_addr().to_ip().expect("an IP listener").port();
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                script: VecDeque::new(),
                default: Reply::text("no action needed"),
                key: None,
                requests: Vec::new(),
                rejections: Vec::new(),
            }),
            stopping: Mutex::new(false),
            stop_signal: Condvar::new(),
        });
        let thread = {
            let (server, shared) = (server.clone(), shared.clone());
            std::thread::spawn(move || serve(&server, &shared))
        };
        FakeLlm {
            port,
            shared,
            server,
            thread: Some(thread),
        }
    }

    /// `http://127.0.0.1:PORT/v1`, what `llm.base_url` should be.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// From now on, answer 401 (OpenAI's bodies) unless `Authorization: Bearer <key>`.
    pub fn require_key(&self, key: &str) {
        self.state().key = Some(key.to_string());
    }

    /// Queue an answer; valid requests take them in order.
    pub fn push(&self, reply: Reply) {
        self.state().script.push_back(reply);
    }

    /// The answer once the queue is empty.
    pub fn set_default(&self, reply: Reply) {
        self.state().default = reply;
    }

    /// Scripted answers not yet used.
    pub fn pending(&self) -> usize {
        self.state().script.len()
    }

    /// The parsed body of every request, in arrival order (rejected ones included).
    pub fn requests(&self) -> Vec<Value> {
        self.state()
            .requests
            .iter()
            .map(|r| r.body.clone())
            .collect()
    }

    /// Every request with method, path, auth header and the status it got.
    pub fn recorded(&self) -> Vec<Recorded> {
        self.state().requests.clone()
    }

    pub fn request_count(&self) -> usize {
        self.state().requests.len()
    }

    /// How many HTTP 400s the fake's own validation sent (scripted statuses not counted).
    pub fn rejected_count(&self) -> usize {
        self.state().rejections.len()
    }

    /// The messages of those 400s, for a failing test to print.
    pub fn rejections(&self) -> Vec<String> {
        self.state().rejections.clone()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.shared.state.lock().unwrap()
    }
}

impl Drop for FakeLlm {
    fn drop(&mut self) {
        *self.shared.stopping.lock().unwrap() = true;
        self.shared.stop_signal.notify_all();
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(server: &Server, shared: &Arc<Shared>) {
    loop {
        let request = match server.recv() {
            Ok(r) => r,
            Err(_) if *shared.stopping.lock().unwrap() => return,
            Err(_) => continue,
        };
        let shared = shared.clone();
        // One thread per request: a delayed answer never holds up the next request.
        std::thread::spawn(move || handle(request, &shared));
    }
}

/// What to send back.
struct Answer {
    delay: Duration,
    status: u16,
    content_type: String,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn json(status: u16, body: Value) -> Answer {
        Answer {
            delay: Duration::ZERO,
            status,
            content_type: "application/json".into(),
            headers: vec![],
            body: body.to_string(),
        }
    }
}

static IDS: AtomicU64 = AtomicU64::new(1);

fn handle(mut request: tiny_http::Request, shared: &Shared) {
    let mut raw = String::new();
    let _ = std::io::Read::read_to_string(request.as_reader(), &mut raw);
    let method = request.method().as_str().to_string();
    let path = request.url().to_string();
    let authorization = request
        .headers()
        .iter()
        .find(|h| h.field.equiv("Authorization"))
        .map(|h| h.value.as_str().to_string());
    let body: Value = serde_json::from_str(&raw).unwrap_or(Value::Null);

    let answer = {
        let mut state = shared.state.lock().unwrap();
        let answer = decide(
            &mut state,
            &method,
            &path,
            authorization.as_deref(),
            &raw,
            &body,
        );
        state.requests.push(Recorded {
            method,
            path,
            authorization,
            body,
            status: answer.status,
        });
        answer
    };
    if !answer.delay.is_zero() {
        shared.pause(answer.delay);
    }
    let mut response = Response::from_string(answer.body)
        .with_status_code(answer.status)
        .with_header(Header::from_bytes("Content-Type", answer.content_type.as_bytes()).unwrap());
    for (k, v) in &answer.headers {
        response.add_header(Header::from_bytes(k.as_bytes(), v.as_bytes()).unwrap());
    }
    // The client may have timed out and gone; that is the point of a delay.
    let _ = request.respond(response);
}

fn decide(
    state: &mut State,
    method: &str,
    path: &str,
    authorization: Option<&str>,
    raw: &str,
    body: &Value,
) -> Answer {
    let route = path.split('?').next().unwrap_or(path);
    if method != "POST" || route != "/v1/chat/completions" {
        return Answer::json(
            404,
            error_body(&format!("Invalid URL ({method} {route})"), None, None),
        );
    }
    if let Some(key) = &state.key {
        if let Some(reject) = check_key(key, authorization) {
            return reject;
        }
    }
    if body.is_null() && !raw.trim().eq("null") {
        let msg = "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON. If you have trouble figuring out how to fix this, please contact us through our help center at help.openai.com.)";
        state.rejections.push(msg.to_string());
        return Answer::json(400, error_body(msg, None, None));
    }
    if let Err(e) = validate(body) {
        state.rejections.push(e.message.clone());
        return Answer::json(
            400,
            error_body(&e.message, e.param.as_deref(), e.code.as_deref()),
        );
    }
    let reply = state
        .script
        .pop_front()
        .unwrap_or_else(|| state.default.clone());
    render(reply, body)
}

fn check_key(key: &str, authorization: Option<&str>) -> Option<Answer> {
    let given = authorization
        .and_then(|a| a.strip_prefix("Bearer "))
        .map(str::trim);
    match given {
        Some(k) if k == key => None,
        None | Some("") => Some(Answer::json(
            401,
            error_body(
                "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY), or as the password field (with blank username) if you're accessing the API from your browser and are prompted for a username and password. You can obtain an API key from https://platform.openai.com/account/api-keys.",
                None,
                None,
            ),
        )),
        Some(k) => {
            // OpenAI shows the first 3 and last 4 characters of a wrong key.
            let masked = if k.len() > 8 && k.is_ascii() {
                format!("{}{}{}", &k[..3], "*".repeat(k.len() - 7), &k[k.len() - 4..])
            } else {
                "*".repeat(k.len())
            };
            Some(Answer::json(
                401,
                error_body(
                    &format!("Incorrect API key provided: {masked}. You can find your API key at https://platform.openai.com/account/api-keys."),
                    None,
                    Some("invalid_api_key"),
                ),
            ))
        }
    }
}

fn error_body(message: &str, param: Option<&str>, code: Option<&str>) -> Value {
    json!({"error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}})
}

fn render(reply: Reply, request: &Value) -> Answer {
    let model = request["model"].as_str().unwrap_or("gpt-4.1-mini");
    match reply {
        Reply::Delay(d, then) => {
            let mut answer = render(*then, request);
            answer.delay += d;
            answer
        }
        Reply::Dynamic(f) => render(f(request), request),
        Reply::Text(content) => {
            let completion = count(&content);
            completion_answer(
                model,
                json!({"role": "assistant", "content": content, "refusal": null}),
                "stop",
                provider_prompt_tokens(request),
                completion,
            )
        }
        Reply::ToolCalls(calls) => {
            let mut completion = 0;
            let calls: Vec<Value> = calls
                .into_iter()
                .map(|(name, arguments)| {
                    completion += count(&name) + count(&arguments) + 3;
                    let id = format!("call_fake{:06}", IDS.fetch_add(1, Ordering::Relaxed));
                    json!({"id": id, "type": "function",
                           "function": {"name": name, "arguments": arguments}})
                })
                .collect();
            completion_answer(
                model,
                json!({"role": "assistant", "content": null, "refusal": null, "tool_calls": calls}),
                "tool_calls",
                provider_prompt_tokens(request),
                completion,
            )
        }
        Reply::Status {
            status,
            body,
            headers,
        } => {
            let content_type = if serde_json::from_str::<Value>(&body).is_ok() {
                "application/json"
            } else {
                "text/plain"
            };
            Answer {
                delay: Duration::ZERO,
                status,
                content_type: content_type.into(),
                headers,
                body,
            }
        }
        Reply::Raw {
            status,
            content_type,
            body,
        } => Answer {
            delay: Duration::ZERO,
            status,
            content_type,
            headers: vec![],
            body,
        },
        Reply::Json(v) => Answer::json(200, v),
        Reply::EmptyChoices => Answer::json(
            200,
            json!({"id": "chatcmpl-empty", "object": "chat.completion", "created": 1767225600,
                   "model": model, "choices": [],
                   "usage": usage(provider_prompt_tokens(request), 0)}),
        ),
    }
}

fn completion_answer(
    model: &str,
    message: Value,
    finish_reason: &str,
    prompt_tokens: u64,
    completion_tokens: u64,
) -> Answer {
    let n = IDS.fetch_add(1, Ordering::Relaxed);
    Answer::json(
        200,
        json!({
            "id": format!("chatcmpl-fake{n}"), "object": "chat.completion",
            // A fixed time: the fake reads no clock.
            "created": 1767225600, "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason,
                         "logprobs": null}],
            "usage": usage(prompt_tokens, completion_tokens),
        }),
    )
}

fn usage(prompt_tokens: u64, completion_tokens: u64) -> Value {
    json!({"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
           "total_tokens": prompt_tokens + completion_tokens,
           "prompt_tokens_details": {"cached_tokens": 0},
           "completion_tokens_details": {"reasoning_tokens": 0}})
}

/// One validation failure: OpenAI's message, `param` and `code`.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub message: String,
    pub param: Option<String>,
    pub code: Option<String>,
}

fn api_error(message: String, param: &str, code: Option<&str>) -> ApiError {
    ApiError {
        message,
        param: Some(param.to_string()),
        code: code.map(str::to_string),
    }
}

fn missing(param: &str) -> ApiError {
    api_error(
        format!("Missing required parameter: '{param}'."),
        param,
        Some("missing_required_parameter"),
    )
}

fn empty_array(param: &str) -> ApiError {
    api_error(
        format!("Invalid '{param}': empty array. Expected an array with minimum length 1, but got an empty array instead."),
        param,
        Some("empty_array"),
    )
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

const ROLES: [&str; 6] = [
    "system",
    "assistant",
    "user",
    "function",
    "tool",
    "developer",
];

/// Check a request body the way OpenAI does (reference section 2): the schema of each message
/// first, then the tool-call sequence, then the tools. The first problem wins.
pub fn validate(body: &Value) -> Result<(), ApiError> {
    if !body.is_object() {
        return Err(api_error(
            format!(
                "Invalid type for request body: expected an object, but got {} instead.",
                json_type(body)
            ),
            "body",
            Some("invalid_type"),
        ));
    }
    if !body["model"].is_string() {
        return Err(ApiError {
            message: "you must provide a model parameter".into(),
            param: None,
            code: None,
        });
    }
    let messages = match body.get("messages") {
        None | Some(Value::Null) => return Err(missing("messages")),
        Some(Value::Array(m)) => m,
        Some(other) => {
            return Err(api_error(
                format!(
                    "Invalid type for 'messages': expected an array, but got {} instead.",
                    json_type(other)
                ),
                "messages",
                Some("invalid_type"),
            ))
        }
    };
    if messages.is_empty() {
        return Err(empty_array("messages"));
    }
    for (i, m) in messages.iter().enumerate() {
        check_message_schema(i, m)?;
    }
    check_sequence(messages)?;
    check_tools(body)
}

fn check_message_schema(i: usize, m: &Value) -> Result<(), ApiError> {
    let role = match m.get("role") {
        None | Some(Value::Null) => return Err(missing(&format!("messages[{i}].role"))),
        Some(r) => r,
    };
    let role_text = role.as_str().unwrap_or_default();
    if !ROLES.contains(&role_text) {
        let shown = role
            .as_str()
            .map(str::to_string)
            .unwrap_or(role.to_string());
        return Err(api_error(
            format!("Invalid value: '{shown}'. Supported values are: 'system', 'assistant', 'user', 'function', 'tool', and 'developer'."),
            &format!("messages[{i}].role"),
            Some("invalid_value"),
        ));
    }
    let mut has_calls = false;
    if let Some(calls) = m.get("tool_calls").filter(|c| !c.is_null()) {
        let Some(calls) = calls.as_array() else {
            return Err(api_error(
                format!(
                    "Invalid type for 'messages[{i}].tool_calls': expected an array, but got {} instead.",
                    json_type(calls)
                ),
                &format!("messages[{i}].tool_calls"),
                Some("invalid_type"),
            ));
        };
        if calls.is_empty() {
            return Err(empty_array(&format!("messages[{i}].tool_calls")));
        }
        for (j, call) in calls.iter().enumerate() {
            let at = format!("messages[{i}].tool_calls[{j}]");
            if !call["id"].is_string() {
                return Err(missing(&format!("{at}.id")));
            }
            let name = &call["function"]["name"];
            match name.as_str() {
                None => return Err(missing(&format!("{at}.function.name"))),
                Some("") => {
                    return Err(api_error(
                        format!("Invalid '{at}.function.name': empty string. Expected a string with minimum length 1, but got an empty string instead."),
                        &format!("{at}.function.name"),
                        Some("empty_string"),
                    ))
                }
                Some(_) => {}
            }
            match &call["function"]["arguments"] {
                Value::String(_) => {}
                Value::Null => return Err(missing(&format!("{at}.function.arguments"))),
                other => {
                    return Err(api_error(
                        format!(
                            "Invalid type for '{at}.function.arguments': expected a string, but got {} instead.",
                            json_type(other)
                        ),
                        &format!("{at}.function.arguments"),
                        Some("invalid_type"),
                    ))
                }
            }
        }
        has_calls = true;
    }
    match m.get("content") {
        Some(Value::String(_)) | Some(Value::Array(_)) => {}
        Some(Value::Null) | None if role_text == "assistant" && has_calls => {}
        None => return Err(missing(&format!("messages[{i}].content"))),
        Some(Value::Null) => {
            return Err(api_error(
                "Invalid value for 'content': expected a string, got null.".into(),
                &format!("messages.[{i}].content"),
                None,
            ))
        }
        Some(other) => {
            return Err(api_error(
                format!(
                    "Invalid type for 'messages[{i}].content': expected one of a string or array of objects, but got {} instead.",
                    json_type(other)
                ),
                &format!("messages[{i}].content"),
                Some("invalid_type"),
            ))
        }
    }
    if role_text == "tool" && !m["tool_call_id"].is_string() {
        return Err(missing(&format!("messages[{i}].tool_call_id")));
    }
    Ok(())
}

fn unanswered(index: usize, ids: &[String]) -> ApiError {
    api_error(
        format!(
            "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: {}",
            ids.join(", ")
        ),
        &format!("messages.[{index}].role"),
        None,
    )
}

/// Rules 1 and 2: tool messages directly follow the assistant message whose `tool_calls` they
/// answer, one per id, and every id is answered before anything else comes.
fn check_sequence(messages: &[Value]) -> Result<(), ApiError> {
    // The assistant message whose calls are being answered, and the ids still open.
    let mut open: Option<(usize, Vec<String>)> = None;
    for (i, m) in messages.iter().enumerate() {
        let role = m["role"].as_str().unwrap_or_default();
        let calls = m["tool_calls"].as_array().filter(|c| !c.is_empty());
        if role == "tool" {
            let id = m["tool_call_id"].as_str().unwrap_or_default();
            let answered = match &mut open {
                Some((_, pending)) => match pending.iter().position(|p| p == id) {
                    Some(at) => {
                        pending.remove(at);
                        true
                    }
                    None => false,
                },
                None => false,
            };
            if !answered {
                return Err(api_error(
                    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.".into(),
                    &format!("messages.[{i}].role"),
                    None,
                ));
            }
            continue;
        }
        if let Some((at, pending)) = &open {
            if !pending.is_empty() {
                return Err(unanswered(*at, pending));
            }
        }
        open = match (role, calls) {
            ("assistant", Some(calls)) => Some((
                i,
                calls
                    .iter()
                    .map(|c| c["id"].as_str().unwrap_or_default().to_string())
                    .collect(),
            )),
            _ => None,
        };
    }
    match open {
        Some((at, pending)) if !pending.is_empty() => Err(unanswered(at, &pending)),
        _ => Ok(()),
    }
}

fn check_tools(body: &Value) -> Result<(), ApiError> {
    let tools = match body.get("tools") {
        None | Some(Value::Null) => {
            if body.get("tool_choice").is_some_and(|c| !c.is_null()) {
                return Err(ApiError {
                    message: "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified.".into(),
                    param: Some("tool_choice".into()),
                    code: None,
                });
            }
            return Ok(());
        }
        Some(Value::Array(t)) => t,
        Some(other) => {
            return Err(api_error(
                format!(
                    "Invalid type for 'tools': expected an array, but got {} instead.",
                    json_type(other)
                ),
                "tools",
                Some("invalid_type"),
            ))
        }
    };
    if tools.is_empty() {
        return Err(empty_array("tools"));
    }
    let mut names = HashSet::new();
    for (i, t) in tools.iter().enumerate() {
        if t["type"] != "function" {
            return Err(api_error(
                format!(
                    "Invalid value: '{}'. Supported values are: 'function' and 'custom'.",
                    t["type"].as_str().unwrap_or_default()
                ),
                &format!("tools[{i}].type"),
                Some("invalid_value"),
            ));
        }
        let Some(name) = t["function"]["name"].as_str() else {
            return Err(missing(&format!("tools[{i}].function.name")));
        };
        let valid = !name.is_empty()
            && name.len() <= 64
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !valid {
            return Err(api_error(
                format!("Invalid 'tools[{i}].function.name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'."),
                &format!("tools[{i}].function.name"),
                Some("invalid_value"),
            ));
        }
        if !names.insert(name) {
            return Err(api_error(
                format!("Duplicate value for 'tools[{i}].function.name': {name}."),
                &format!("tools[{i}].function.name"),
                Some("invalid_value"),
            ));
        }
        let params = &t["function"]["parameters"];
        if !(params.is_null() || params.is_object()) {
            return Err(api_error(
                format!(
                    "Invalid type for 'tools[{i}].function.parameters': expected an object, but got {} instead.",
                    json_type(params)
                ),
                &format!("tools[{i}].function.parameters"),
                Some("invalid_type"),
            ));
        }
    }
    Ok(())
}

fn count(text: &str) -> u64 {
    tiktoken_rs::o200k_base_singleton().count_ordinary(text) as u64
}

/// `usage.prompt_tokens` as OpenAI documents it for gpt-4o-class models, computed from the wire
/// body: the cookbook's message rule (3 per message, plus the tokens of every string field,
/// plus 1 for a `name`) extended to nested tool calls (every string in them, plus 1 per call,
/// as tiktoken-rs does), the reply primer 3, and the cookbook's `num_tokens_for_tools`.
pub fn provider_prompt_tokens(body: &Value) -> u64 {
    let messages = body["messages"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let tools = body["tools"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    cookbook_message_tokens(messages) + cookbook_tool_tokens(tools)
}

/// The cookbook's `num_tokens_from_messages` (o200k_base): messages plus the reply primer.
pub fn cookbook_message_tokens(messages: &[Value]) -> u64 {
    let mut n = 0;
    for m in messages {
        n += 3;
        let Some(fields) = m.as_object() else {
            continue;
        };
        for (key, value) in fields {
            match value {
                Value::String(s) => {
                    n += count(s);
                    if key == "name" {
                        n += 1;
                    }
                }
                Value::Array(items) if key == "content" => {
                    n += items
                        .iter()
                        .filter_map(|p| p["text"].as_str())
                        .map(count)
                        .sum::<u64>();
                }
                Value::Array(calls) if key == "tool_calls" => {
                    for call in calls {
                        n += 1 + strings_in(call);
                    }
                }
                _ => {}
            }
        }
    }
    n + 3
}

fn strings_in(v: &Value) -> u64 {
    match v {
        Value::String(s) => count(s),
        Value::Array(a) => a.iter().map(strings_in).sum(),
        Value::Object(o) => o.values().map(strings_in).sum(),
        _ => 0,
    }
}

/// The cookbook's `num_tokens_for_tools` for gpt-4o/gpt-4o-mini (`func_init=7, prop_init=3,
/// prop_key=3, enum_init=-3, enum_item=3, func_end=12`) over wire-format tools
/// (`{"type":"function","function":{…}}`). Zero without tools.
pub fn cookbook_tool_tokens(tools: &[Value]) -> u64 {
    const FUNC_INIT: i64 = 7;
    const PROP_INIT: i64 = 3;
    const PROP_KEY: i64 = 3;
    const ENUM_INIT: i64 = -3;
    const ENUM_ITEM: i64 = 3;
    const FUNC_END: i64 = 12;
    if tools.is_empty() {
        return 0;
    }
    let text = |v: &Value| -> String {
        match v {
            Value::String(s) => s.clone(),
            Value::Null => String::new(),
            other => other.to_string(),
        }
    };
    let no_period = |s: String| s.strip_suffix('.').map(str::to_string).unwrap_or(s);
    let mut n: i64 = 0;
    for tool in tools {
        let f = &tool["function"];
        n += FUNC_INIT;
        let desc = no_period(text(&f["description"]));
        n += count(&format!("{}:{}", text(&f["name"]), desc)) as i64;
        let Some(props) = f["parameters"]["properties"].as_object() else {
            continue;
        };
        if props.is_empty() {
            continue;
        }
        n += PROP_INIT;
        for (key, prop) in props {
            n += PROP_KEY;
            if let Some(items) = prop["enum"].as_array() {
                n += ENUM_INIT;
                for item in items {
                    n += ENUM_ITEM + count(&text(item)) as i64;
                }
            }
            let p_desc = no_period(text(&prop["description"]));
            n += count(&format!("{key}:{}:{p_desc}", text(&prop["type"]))) as i64;
        }
    }
    (n + FUNC_END).max(0) as u64
}
