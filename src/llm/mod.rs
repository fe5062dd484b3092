//! The LLM boundary: the [`LlmClient`] trait, the chat-completions wire types we send and
//! read, and errors. The ureq implementation (retries inside a time budget) is `http.rs`.
//! Nothing here builds prompts or decides what to do with an answer.

use serde::{Deserialize, Serialize};

pub mod http;
mod parse;

pub use http::HttpLlmClient;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// One tool call as the model made it. `arguments` is the raw JSON text (it may be invalid).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// One message of a request. `tool_calls` only on assistant messages, `tool_call_id` only on
/// tool messages.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: Role,
    pub content: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

/// A function tool: name, description and JSON-schema parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub parameters: serde_json::Value,
}

/// One model turn: the whole prompt and the tools offered. `tool_choice` is "auto" whenever
/// `tools` is non-empty; no sampling settings are sent.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    pub model: String,
    pub messages: Vec<ChatMessage>,
    pub tools: Vec<ToolSpec>,
    /// The longest answer the model may give, in tokens (`llm.max_output_tokens`): sent as
    /// `max_tokens`, or as `max_completion_tokens` to api.openai.com (its o-series and gpt-5
    /// models refuse `max_tokens`). `None` sends no cap.
    pub max_tokens: Option<u64>,
    /// At most this long for the whole call, retries and waits included, when the run's
    /// deadline leaves less than the client's own retry budget. Not sent.
    pub budget: Option<std::time::Duration>,
}

/// What the provider says it billed. Servers that omit a field (Ollama fills only these three,
/// some none) leave it 0; `total_tokens` defaults to the sum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
    /// Of `prompt_tokens`, those the server took from its prompt cache (the longest prefix
    /// it had already processed): OpenAI's `usage.prompt_tokens_details.cached_tokens`, else
    /// llama.cpp's `timings.cache_n`. `None` when the server says nothing about its cache.
    pub cached_tokens: Option<u64>,
}

/// The model's answer. Decide "tool turn" by a non-empty `tool_calls`, not by `finish_reason`
/// (servers disagree on it).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ChatResponse {
    /// The text, `None` when null or empty (a refusal shows here, prefixed `[refusal]`).
    pub content: Option<String>,
    /// Calls in the order given; every id is non-empty and unique within the answer (made up
    /// when the server sent none), every `arguments` a string (which may still be invalid JSON).
    pub tool_calls: Vec<ToolCall>,
    /// As the server sent it (`stop`, `tool_calls`, `length`, `content_filter`, or anything).
    pub finish_reason: Option<String>,
    /// `None` when the server reported no usage.
    pub usage: Option<Usage>,
    /// How many HTTP attempts the answer took (1 = no retry).
    pub attempts: u32,
}

impl ChatResponse {
    /// The answer stopped at the request's `max_tokens` (`finish_reason: "length"`): its text
    /// and its tool calls (arguments included) may be incomplete.
    pub fn cut_at_limit(&self) -> bool {
        self.finish_reason.as_deref() == Some("length")
    }
}

/// What one failed attempt saw, kept for the final [`LlmError::GaveUp`] (and the run's
/// `llm_error`). Server text in here is cut short and never contains the API key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttemptFailure {
    /// HTTP 429, 408 or 5xx: load or an outage, worth another try.
    Status { status: u16, message: String },
    /// No complete answer within the per-attempt timeout.
    Timeout { after_ms: u64 },
    /// Connection refused or reset, DNS, TLS, a broken HTTP exchange.
    Transport(String),
    /// A 2xx whose body is not the documented JSON (HTML, truncated JSON, no message).
    BadBody(String),
    /// A 2xx carrying an error: top-level `error`, `choices[].error` or finish_reason `error`.
    ErrorInBody(String),
    /// A 2xx with `choices` missing or empty.
    NoChoices,
    /// Anything else (fakes in tests use this through `From<&str>`).
    Other(String),
}

impl std::fmt::Display for AttemptFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AttemptFailure::Status { status, message } => write!(f, "HTTP {status}: {message}"),
            AttemptFailure::Timeout { after_ms } => {
                write!(f, "no answer within {:.1}s", *after_ms as f64 / 1000.0)
            }
            AttemptFailure::Transport(e) => write!(f, "transport error: {e}"),
            AttemptFailure::BadBody(e) => write!(f, "unusable response body: {e}"),
            AttemptFailure::ErrorInBody(e) => write!(f, "HTTP 200 carrying an error: {e}"),
            AttemptFailure::NoChoices => write!(f, "HTTP 200 without choices"),
            AttemptFailure::Other(e) => write!(f, "{e}"),
        }
    }
}

impl From<&str> for AttemptFailure {
    fn from(s: &str) -> Self {
        AttemptFailure::Other(s.to_string())
    }
}

impl From<String> for AttemptFailure {
    fn from(s: String) -> Self {
        AttemptFailure::Other(s)
    }
}

/// Why a model turn produced no answer. Callers branch on it: `Rejected` means the request
/// itself is wrong (repair the history or the config, never resend it as is); `GaveUp` means
/// the service was unusable for the whole retry budget (fall back to the rules).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LlmError {
    /// No API key where one is needed. No request was sent.
    #[error("no LLM API key: set FLEETAGENT_LLM_API_KEY (or OPENAI_API_KEY) or the llm_api_key credential")]
    NoKey,
    /// A key that cannot go into an HTTP header (a second line, a comment after it, spaces,
    /// non-ASCII characters). No request was sent; the key is never shown.
    #[error("the LLM API key holds spaces, line breaks or non-ASCII characters (a second line, a comment?): check FLEETAGENT_LLM_API_KEY (or OPENAI_API_KEY) or the llm_api_key credential")]
    BadKey,
    /// A 4xx other than 429 (and 408), a 402, a 429 for quota/billing, or a 5xx saying the
    /// request itself cannot be parsed (llama-server's "Failed to parse tool call arguments
    /// as JSON"): final, never retried. `message` is the server's own message (or its raw body, cut short).
    #[error("LLM server refused the request (HTTP {status}): {message}")]
    Rejected { status: u16, message: String },
    /// Transient failures until the next wait would have overrun the time budget (or a
    /// local error that no retry can fix); `last` says what the last attempt saw.
    #[error("LLM unusable after {attempts} attempts in {elapsed_secs}s: {last}")]
    GaveUp {
        attempts: u32,
        elapsed_secs: u64,
        last: AttemptFailure,
    },
}

pub trait LlmClient: Send + Sync {
    /// One chat completion. Retries transient failures within the client's time budget;
    /// returns [`LlmError::Rejected`] at once for a request no retry can fix.
    fn chat(&self, req: &ChatRequest) -> Result<ChatResponse, LlmError>;
}
