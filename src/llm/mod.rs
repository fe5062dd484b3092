//! The LLM boundary: the [`LlmClient`] trait, the chat-completions wire types we send and
//! read, and errors. The ureq implementation (retries inside a time budget) is `http.rs`.
//! Nothing here builds prompts or decides what to do with an answer.

use serde::{Deserialize, Serialize};

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

#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    pub model: String,
    pub messages: Vec<ChatMessage>,
    pub tools: Vec<ToolSpec>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct ChatResponse {
    pub content: Option<String>,
    pub tool_calls: Vec<ToolCall>,
    pub finish_reason: Option<String>,
    pub usage: Option<Usage>,
    /// How many HTTP attempts the answer took (1 = no retry).
    pub attempts: u32,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LlmError {
    /// No API key where one is needed.
    #[error("no LLM API key: set FLEETAGENT_LLM_API_KEY (or OPENAI_API_KEY) or the llm_api_key credential")]
    NoKey,
    /// A 4xx other than 429, or a 429 for quota/billing: final, never retried.
    #[error("LLM server refused the request (HTTP {status}): {message}")]
    Rejected { status: u16, message: String },
    /// Retries used up the time budget; `last` says what the last attempt saw.
    #[error("LLM unusable after {attempts} attempts in {elapsed_secs}s: {last}")]
    GaveUp {
        attempts: u32,
        elapsed_secs: u64,
        last: String,
    },
}

pub trait LlmClient: Send + Sync {
    /// One chat completion. Retries transient failures within the client's time budget.
    fn chat(&self, req: &ChatRequest) -> Result<ChatResponse, LlmError>;
}
