//! The server side: one thread per request, recorded, then checked the way OpenAI checks it
//! (route, API key, JSON, the request schema) before the script answers.

use std::sync::Arc;

use serde_json::{json, Value};
use tiny_http::{Header, Response, Server};

use super::render::{render, Answer, Counted};
use super::validate::validate;
use super::{Recorded, Shared, State};

pub(super) fn serve(server: &Server, shared: &Arc<Shared>) {
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
    let (prompt_tokens, cached_tokens) = state
        .tokenizer
        .count_with_cache(state.last_prompt.as_ref(), body);
    if let Some(n_ctx) = state.tokenizer.context.filter(|c| prompt_tokens > *c) {
        // llama.cpp server's answer (tools/server/server.cpp, `exceed_context_size_error`).
        state.overflows += 1;
        return Answer::json(
            400,
            json!({"error": {"code": 400,
                   "message": "the request exceeds the available context size, try increasing it",
                   "type": "exceed_context_size_error",
                   "n_prompt_tokens": prompt_tokens, "n_ctx": n_ctx}}),
        );
    }
    if state.llama_arguments {
        if let Some(bad) = unparseable_arguments(body) {
            let msg = format!(
                "Failed to parse tool call arguments as JSON: [json.exception.parse_error.101] parse error at line 1: {bad}"
            );
            state.rejections.push(msg.clone());
            return Answer::json(
                500,
                json!({"error": {"code": 500, "message": msg, "type": "server_error"}}),
            );
        }
    }
    // A server's prefix cache holds the last prompt it processed.
    state.last_prompt = Some(body.clone());
    let reply = state
        .script
        .pop_front()
        .unwrap_or_else(|| state.default.clone());
    let counted = Counted {
        prompt_tokens,
        cached_tokens,
    };
    render(reply, body, counted)
}

/// The first assistant tool-call `arguments` of the history that is not valid JSON.
fn unparseable_arguments(body: &Value) -> Option<String> {
    body["messages"]
        .as_array()?
        .iter()
        .filter_map(|m| m["tool_calls"].as_array())
        .flatten()
        .filter_map(|c| c["function"]["arguments"].as_str())
        .find(|a| serde_json::from_str::<Value>(a).is_err())
        .map(|a| format!("{a:?}"))
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
