//! The script: what the fake answers to a valid request, as the test pushes it.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

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
