//! A strict fake OpenAI-compatible chat-completions server on 127.0.0.1 for tests: it rejects
//! broken requests with OpenAI's exact HTTP 400 bodies (and counts them), records every request,
//! answers from a script the test pushes, and reports `usage.prompt_tokens` the way OpenAI
//! documents counting, with `prompt_tokens_details.cached_tokens` what a prefix cache would
//! have reused of the request before. It never talks to anything beyond loopback.
//!
//! ```ignore
//! let llm = FakeLlm::start();
//! llm.push(Reply::rate_limited(7));
//! llm.push(Reply::tool_call("launch_instance", r#"{"reason":"queue"}"#));
//! // point the client or the binary at llm.base_url() ("http://127.0.0.1:PORT/v1")
//! assert_eq!(llm.rejected_count(), 0);
//! ```

// examples/bench.rs includes this file with `#[path]`, and from there a plain `mod` would be
// looked for beside this file; explicit paths resolve the same from both.
#[path = "fake_llm/render.rs"]
mod render;
#[path = "fake_llm/reply.rs"]
mod reply;
#[path = "fake_llm/server.rs"]
mod server;
#[path = "fake_llm/tokens.rs"]
mod tokens;
#[path = "fake_llm/validate.rs"]
mod validate;

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::Value;
use tiny_http::Server;

pub use reply::Reply;
// Used by the tests, not by examples/bench.rs (which includes this file too).
#[allow(unused_imports)]
pub use tokens::{
    cookbook_message_tokens, cookbook_tool_tokens, prompt_and_cached_tokens, provider_prompt_tokens,
};
#[allow(unused_imports)]
pub use validate::{validate, ApiError};

use server::serve;
use tokens::count;

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
    tokenizer: Tokenizer,
    overflows: usize,
    /// Answer HTTP 500 to a history whose tool-call arguments are not valid JSON, as
    /// llama-server does.
    llama_arguments: bool,
    /// The last request answered: what a prefix cache holds.
    last_prompt: Option<Value>,
}

/// How the fake's model counts a prompt: `factor` times the cookbook's o200k count (1.0: as
/// OpenAI documents it; 1.2: a tokenizer that splits digits, as Qwen's and SmolLM's do), and
/// the context it refuses beyond, with llama.cpp server's 400 (`None`: no limit).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tokenizer {
    pub factor: f64,
    pub context: Option<u64>,
}

impl Tokenizer {
    /// The fake's count of a request body, what it reports as `usage.prompt_tokens`.
    pub fn count(&self, body: &Value) -> u64 {
        self.scale(provider_prompt_tokens(body))
    }

    /// [`Tokenizer::count`] and what it reports as `usage.prompt_tokens_details.cached_tokens`
    /// for `body` after `previous` ([`prompt_and_cached_tokens`]).
    pub fn count_with_cache(&self, previous: Option<&Value>, body: &Value) -> (u64, u64) {
        let (prompt, cached) = prompt_and_cached_tokens(previous, body);
        (self.scale(prompt), self.scale(cached))
    }

    fn scale(&self, n: u64) -> u64 {
        if self.factor == 1.0 {
            n
        } else {
            (n as f64 * self.factor).ceil() as u64
        }
    }
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
                tokenizer: Tokenizer {
                    factor: 1.0,
                    context: None,
                },
                overflows: 0,
                llama_arguments: false,
                last_prompt: None,
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

    /// From now on, answer a request whose assistant `tool_calls[].function.arguments` is not
    /// valid JSON (empty, truncated, a raw newline) the way llama-server does: HTTP 500
    /// `Failed to parse tool call arguments as JSON: ...`, counted as a rejection.
    pub fn parse_arguments_like_llama_server(&self) {
        self.state().llama_arguments = true;
    }

    /// Queue an answer; valid requests take them in order.
    pub fn push(&self, reply: Reply) {
        self.state().script.push_back(reply);
    }

    /// The answer once the queue is empty.
    pub fn set_default(&self, reply: Reply) {
        self.state().default = reply;
    }

    /// From now on count prompts with `tokenizer` (in `usage` and against its context).
    pub fn set_tokenizer(&self, tokenizer: Tokenizer) {
        self.state().tokenizer = tokenizer;
    }

    /// How many requests it refused as over its context (not counted as rejections).
    pub fn overflow_count(&self) -> usize {
        self.state().overflows
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

    /// How many HTTP 400s the fake's own validation sent, and 500s for unparseable arguments
    /// when it plays llama-server (scripted statuses not counted).
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
