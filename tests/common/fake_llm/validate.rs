//! OpenAI's request validation: the schema of each message, the tool-call sequence and the
//! tools, with OpenAI's exact messages, `param` and `code`.

use std::collections::HashSet;

use serde_json::Value;

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
