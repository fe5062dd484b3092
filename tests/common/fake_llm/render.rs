//! A scripted reply as an HTTP answer: OpenAI's completion shape with fresh ids and the
//! provider's `usage` count.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{json, Value};

use super::reply::Reply;
use super::tokens::count;

/// What to send back.
pub(super) struct Answer {
    pub(super) delay: Duration,
    pub(super) status: u16,
    pub(super) content_type: String,
    pub(super) headers: Vec<(String, String)>,
    pub(super) body: String,
}

impl Answer {
    pub(super) fn json(status: u16, body: Value) -> Answer {
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

/// What the fake's tokenizer counted of a request, reported as usage: the whole prompt and
/// the part a prefix cache would have reused from the request before it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Counted {
    pub(super) prompt_tokens: u64,
    pub(super) cached_tokens: u64,
}

pub(super) fn render(reply: Reply, request: &Value, counted: Counted) -> Answer {
    let model = request["model"].as_str().unwrap_or("gpt-4.1-mini");
    match reply {
        Reply::Delay(d, then) => {
            let mut answer = render(*then, request, counted);
            answer.delay += d;
            answer
        }
        Reply::Dynamic(f) => render(f(request), request, counted),
        Reply::Text(content) => {
            let completion = count(&content);
            completion_answer(
                model,
                json!({"role": "assistant", "content": content, "refusal": null}),
                "stop",
                counted,
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
                counted,
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
                   "usage": usage(counted, 0)}),
        ),
    }
}

fn completion_answer(
    model: &str,
    message: Value,
    finish_reason: &str,
    counted: Counted,
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
            "usage": usage(counted, completion_tokens),
        }),
    )
}

fn usage(counted: Counted, completion_tokens: u64) -> Value {
    let prompt_tokens = counted.prompt_tokens;
    json!({"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
           "total_tokens": prompt_tokens + completion_tokens,
           "prompt_tokens_details": {"cached_tokens": counted.cached_tokens},
           "completion_tokens_details": {"reasoning_tokens": 0}})
}
