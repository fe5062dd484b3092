//! The tools the model (or the rules, or the operator) may call: the [`Tool`] trait, the
//! registry that parses arguments and turns every failure into an error result, and the
//! context a call runs in. Guardrails live in the tools that act; nothing here trusts the
//! caller.

pub mod brake;
pub mod launch;
pub mod list;
pub mod logs;
pub mod schedule;
pub mod search;
pub mod stop;

use anyhow::Result;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use crate::fleet::Snapshot;
use crate::llm::ToolSpec;
use crate::store::Store;

/// Who asked for a tool call; recorded in the action ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Actor {
    Llm,
    /// `provider = "rules"`.
    Rules,
    /// The LLM unusable: the floor decides the pass, as under a model that did nothing.
    Fallback,
    /// The rules under the model's decision (`policy::floor`): what the model left undone.
    Floor,
    Operator,
}

impl Actor {
    pub fn as_str(self) -> &'static str {
        match self {
            Actor::Llm => "llm",
            Actor::Rules => "rules",
            Actor::Fallback => "fallback-rules",
            Actor::Floor => "floor",
            Actor::Operator => "operator",
        }
    }
}

/// What a tool call runs against. `snapshot` is this pass's view of the fleet; tools that act
/// update it so later calls in the same pass see earlier launches and stops.
pub struct ToolCtx<'a> {
    pub store: &'a mut Store,
    pub ctx: crate::services::Ctx<'a>,
    pub snapshot: &'a mut Snapshot,
    /// The pass's run id; 0 outside any pass (an operator command: the ledger records no run).
    pub run_id: i64,
    pub actor: Actor,
    /// The model's call id (or a synthesized one for rules/operator calls).
    pub call_id: String,
}

crate::deref_ctx!(ToolCtx);

pub use crate::policy::result::ToolResult;

pub trait Tool: Send + Sync {
    fn name(&self) -> &'static str;
    fn description(&self) -> &'static str;
    /// JSON schema of the arguments (an object; `additionalProperties: false`).
    fn parameters(&self) -> Value;
    /// Does a success change the fleet (makes the run's verdict `action`)?
    fn mutating(&self) -> bool;
    /// Run with arguments already parsed as a JSON object. Refusals are results, not errors;
    /// an `Err` is a database failure that fails the pass.
    fn call(&self, ctx: &mut ToolCtx<'_>, args: Value) -> Result<ToolResult>;
}

/// The journal's line for ledger row `id` as stored (a notice; a warning for a call that
/// failed at vast.ai), with the GPU when the caller knows it. Best effort: the row is
/// committed, and a line that cannot be read back is not worth failing the pass for.
pub fn journal_action(conn: &rusqlite::Connection, id: i64, gpu: Option<&str>) {
    // Off where nobody reads it (`sim`, the other commands at a terminal): no read, no text.
    if !log::log_enabled!(target: crate::journal::NOTICE, log::Level::Warn) {
        return;
    }
    let Ok(Some(a)) = crate::store::actions::get(conn, id) else {
        return;
    };
    let line = crate::policy::action_lines::action_line(&a, gpu);
    let run = a.run_id.map(|r| format!("run {r}: ")).unwrap_or_default();
    if line.warning {
        log::warn!(target: crate::journal::NOTICE, "{run}{}", line.text);
    } else {
        crate::notice!("{run}{}", line.text);
    }
}

/// What an offer search said of vast.ai's daily search quota, kept for the next observation
/// and `doctor`: cleared by a search that went through, set by `search_quota_exceeded`.
pub fn note_search_quota(
    ctx: &mut ToolCtx<'_>,
    found: &std::result::Result<Vec<crate::vast::Offer>, crate::vast::VastError>,
    now: crate::clock::Millis,
) -> Result<()> {
    ctx.snapshot.searches += 1;
    match found {
        Ok(_) => crate::store::bad_hosts::clear_search_quota(&ctx.store.conn)?,
        Err(crate::vast::VastError::SearchQuota { reset }) => {
            crate::store::bad_hosts::set_search_quota(&ctx.store.conn, reset, now)?;
            ctx.snapshot.search_quota = Some(reset.clone());
            ctx.snapshot.search_quota_this_pass = true;
        }
        Err(_) => {}
    }
    Ok(())
}

/// Parse arguments into a typed struct (`deny_unknown_fields`): extra or wrong arguments
/// become an `invalid_args` result naming the problem.
///
/// A number sent as a string (`"30"`, as small models often write it) is read as the number
/// when the field wants one ([`number_sent_as_text`]: a `reason` of "5" stays text).
pub fn parse_args<T: DeserializeOwned>(args: Value) -> std::result::Result<T, ToolResult> {
    let mut args = args;
    let mut tries = 0;
    loop {
        let e = match T::deserialize(&args) {
            Ok(t) => return Ok(t),
            Err(e) => e,
        };
        tries += 1;
        match (tries <= 8).then(|| number_sent_as_text::<T>(&args, &e.to_string())) {
            Some(Some(fixed)) => args = fixed,
            _ => {
                return Err(ToolResult::error(
                    "invalid_args",
                    json!({ "message": crate::text::clip(&e.to_string(), 300) }),
                ))
            }
        }
    }
}

/// `args` with the string serde refused (`invalid type: string "30", expected ...`) as the
/// number it spells, in one field that holds it: the first of those fields whose change gets
/// further (the parse succeeds, or fails otherwise), so that a `reason` of the same text
/// stays text. None when it spells no number or no field's change helps.
fn number_sent_as_text<T: DeserializeOwned>(args: &Value, error: &str) -> Option<Value> {
    let rest = error.strip_prefix("invalid type: string \"")?;
    let text = &rest[..rest.find("\", expected")?];
    let number: Value = match text.trim().parse::<i64>() {
        Ok(n) => n.into(),
        Err(_) => serde_json::Number::from_f64(text.trim().parse::<f64>().ok()?)?.into(),
    };
    let fields: Vec<&String> = args
        .as_object()?
        .iter()
        .filter(|(_, v)| v.as_str() == Some(text))
        .map(|(k, _)| k)
        .collect();
    fields.into_iter().find_map(|field| {
        let mut fixed = args.clone();
        fixed[field.as_str()] = number.clone();
        match T::deserialize(&fixed) {
            Ok(_) => Some(fixed),
            // Another field's problem now, not this one wanting its text back.
            Err(e) => {
                let e = e.to_string();
                let wanted_text = e.starts_with("invalid type: integer")
                    || e.starts_with("invalid type: floating point");
                (e != error && !wanted_text).then_some(fixed)
            }
        }
    })
}

/// Arguments larger than this are refused before parsing (a model can send megabytes).
pub const MAX_ARGUMENT_BYTES: usize = 16 * 1024;

pub struct Registry {
    tools: Vec<Box<dyn Tool>>,
}

impl Registry {
    pub fn new(tools: Vec<Box<dyn Tool>>) -> Registry {
        Registry { tools }
    }

    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools
            .iter()
            .map(|t| ToolSpec {
                name: t.name().to_string(),
                description: t.description().to_string(),
                parameters: t.parameters(),
            })
            .collect()
    }

    pub fn get(&self, name: &str) -> Option<&dyn Tool> {
        self.tools
            .iter()
            .find(|t| t.name() == name)
            .map(|t| t.as_ref())
    }

    /// Run one call from its raw arguments text. Unknown tools, arguments that are not a
    /// JSON object, too large or of the wrong shape become error results fed back to the model.
    pub fn call(&self, ctx: &mut ToolCtx<'_>, name: &str, arguments: &str) -> Result<ToolResult> {
        let Some(tool) = self.get(name) else {
            let known: Vec<&str> = self.tools.iter().map(|t| t.name()).collect();
            return Ok(ToolResult::error(
                "unknown_tool",
                json!({
                    "message": format!("no tool named {}", crate::text::quote(name, 64)),
                    "tools": known,
                }),
            ));
        };
        if arguments.len() > MAX_ARGUMENT_BYTES {
            return Ok(ToolResult::error(
                "invalid_args",
                json!({ "message": format!("arguments are {} bytes; the limit is {MAX_ARGUMENT_BYTES}", arguments.len()) }),
            ));
        }
        let text = if arguments.trim().is_empty() {
            "{}"
        } else {
            arguments
        };
        let args: Value = match crate::prompt::answer::lenient_object(text) {
            Ok(v @ Value::Object(_)) => v,
            Ok(_) => {
                return Ok(ToolResult::error(
                    "invalid_args",
                    json!({ "message": "arguments must be a JSON object" }),
                ))
            }
            Err(e) => {
                return Ok(ToolResult::error(
                    "invalid_args",
                    json!({ "message": format!("arguments are not valid JSON: {e}") }),
                ))
            }
        };
        tool.call(ctx, args)
    }
}

/// Every tool, in the order the model sees them.
pub fn registry() -> Registry {
    Registry::new(vec![
        Box::new(launch::LaunchInstance),
        Box::new(stop::StopInstance),
        Box::new(schedule::ScheduleNextCheck),
        Box::new(search::SearchOffers),
        Box::new(list::ListInstances),
        Box::new(logs::InstanceLogs),
    ])
}

/// How many of the model's answers wrote a call to one of [`registry`]'s tools as text
/// ([`crate::prompt::answer::tool_call_as_text`]): `inspect`'s and the sim report's malformed
/// count, by one rule.
pub fn calls_written_as_text<S: AsRef<str>>(answers: &[S]) -> usize {
    let names: Vec<String> = registry().specs().into_iter().map(|s| s.name).collect();
    let tools: Vec<&str> = names.iter().map(String::as_str).collect();
    answers
        .iter()
        .filter(|t| crate::prompt::answer::tool_call_as_text(t.as_ref(), &tools))
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Args {
        minutes: i64,
        reason: String,
    }

    /// What small models and their servers send (the prompt walkthrough: `"30"` refused with
    /// serde's "expected i64", `&#34;` and twice-encoded objects refused as not JSON).
    #[test]
    fn numbers_as_text_escaped_quotes_and_twice_encoded_objects_are_read() {
        let parse = |text: &str| -> std::result::Result<Args, String> {
            let v = crate::prompt::answer::lenient_object(text).map_err(|e| e.to_string())?;
            parse_args::<Args>(v).map_err(|r| r.content.to_string())
        };
        let want = Args {
            minutes: 30,
            reason: "5".into(),
        };
        assert_eq!(parse(r#"{"minutes": 30, "reason": "5"}"#), Ok(want));
        assert_eq!(
            parse(r#"{"minutes": "30", "reason": "5"}"#)
                .unwrap()
                .minutes,
            30
        );
        assert_eq!(
            parse(r#"{"minutes": " 30", "reason": "look"}"#)
                .unwrap()
                .minutes,
            30
        );
        assert_eq!(
            parse(r#"{&#34;minutes&#34;: 30, &#34;reason&#34;: &#34;look&#34;}"#)
                .unwrap()
                .reason,
            "look"
        );
        assert_eq!(
            parse(r#""{\"minutes\": 30, \"reason\": \"look\"}""#)
                .unwrap()
                .minutes,
            30
        );
        // The same text in a field that wants text stays text, whichever comes first.
        assert_eq!(
            parse(r#"{"minutes": "5", "reason": "5"}"#),
            Ok(Args {
                minutes: 5,
                reason: "5".into()
            })
        );
        #[derive(Debug, PartialEq, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Search {
            gpu_name: String,
            limit: u32,
        }
        let v = crate::prompt::answer::lenient_object(r#"{"gpu_name": "4090", "limit": "4090"}"#)
            .unwrap();
        assert_eq!(
            parse_args::<Search>(v).map_err(|r| r.content.to_string()),
            Ok(Search {
                gpu_name: "4090".into(),
                limit: 4090
            })
        );
        // A key sent twice is no choice of ours (serde_json would keep the last): refused.
        let e = parse(r#"{"minutes": 30, "reason": "look", "minutes": 5}"#).unwrap_err();
        assert!(e.contains("the key \"minutes\" appears twice"), "{e}");
        // What is not a number stays refused, naming the problem.
        let e = parse(r#"{"minutes": "soon", "reason": "look"}"#).unwrap_err();
        assert!(e.contains("invalid type: string \\\"soon\\\""), "{e}");
        let e = parse(r#"{"minutes": 30, "reason": 5}"#).unwrap_err();
        assert!(e.contains("expected a string"), "{e}");
        assert!(parse("not json").is_err());
    }
}
