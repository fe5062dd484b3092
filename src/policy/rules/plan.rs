//! The rules' plans, typed: what one rule asks ([`Launch`], [`Stop`]), and the calls
//! `combine` makes of them ([`PlannedCall`]), which the floor filters and `run::act` carries
//! out. A call becomes a tool name and JSON arguments once, where it is made
//! ([`Arguments::to_json`]); no decision reads the JSON back.

use std::fmt;
use std::ops::Index;

use serde_json::{json, Value};

use super::CallKind;

/// The tool a launch is made with.
pub const LAUNCH_TOOL: &str = "launch_instance";
/// The tool a stop or destroy is made with (`vast.stop_mode` decides which).
pub const STOP_TOOL: &str = "stop_instance";

/// What a launch rule asks: `n` launches, why, and which rule.
#[derive(Debug, Clone, PartialEq)]
pub struct Launch {
    pub n: u32,
    pub why: String,
    pub kind: CallKind,
    /// Asked while the workers are dead: the launch window serves it from its emergency
    /// allowance, and it asks at least once whatever the window says, so that a refusal is
    /// on record.
    pub emergency: bool,
}

/// What a stop rule asks: stop (or destroy) one instance of ours, why, and which rule.
#[derive(Debug, Clone, PartialEq)]
pub struct Stop {
    pub instance_id: i64,
    pub why: String,
    pub kind: CallKind,
}

/// One call of the pass's plan: the tool that carries it out, its arguments (typed), why, and
/// the rule that asked.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedCall {
    /// [`LAUNCH_TOOL`] or [`STOP_TOOL`].
    pub tool: &'static str,
    pub arguments: Arguments,
    /// Why; the call's `reason` too.
    pub why: String,
    pub kind: CallKind,
}

impl PlannedCall {
    /// One launch of `launch` (`why` numbers it among the launches of the pass).
    pub fn launch(launch: &Launch, why: String) -> PlannedCall {
        PlannedCall {
            tool: LAUNCH_TOOL,
            arguments: Arguments {
                instance_id: Arg::Absent,
                reason: Arg::Text(why.clone()),
            },
            why,
            kind: launch.kind,
        }
    }

    pub fn stop(stop: Stop) -> PlannedCall {
        PlannedCall {
            tool: STOP_TOOL,
            arguments: Arguments {
                instance_id: Arg::Id(stop.instance_id),
                reason: Arg::Text(stop.why.clone()),
            },
            why: stop.why,
            kind: stop.kind,
        }
    }

    /// The same call, asked for by someone else: the reason says who and why.
    pub fn with_reason(&self, why: String) -> PlannedCall {
        PlannedCall {
            tool: self.tool,
            arguments: Arguments {
                instance_id: self.arguments.instance_id.clone(),
                reason: Arg::Text(why.clone()),
            },
            why,
            kind: self.kind,
        }
    }

    /// A launch (it names no instance).
    pub fn is_launch(&self) -> bool {
        self.instance_id().is_none()
    }

    /// The instance a stop names.
    pub fn instance_id(&self) -> Option<i64> {
        self.arguments.instance_id.as_i64()
    }
}

/// A planned call's arguments, as its tool takes them: the instance a stop names, and the
/// reason. Read one by its name (`arguments["instance_id"]`); [`Arguments::to_json`] (or
/// `to_string`) is what the tool is sent.
#[derive(Debug, Clone, PartialEq)]
pub struct Arguments {
    instance_id: Arg,
    reason: Arg,
}

impl Arguments {
    /// The call's JSON arguments: `{"reason"}` for a launch, `{"instance_id", "reason"}` for
    /// a stop.
    pub fn to_json(&self) -> Value {
        let mut v = json!({ "reason": self.reason.to_json() });
        if let Arg::Id(id) = self.instance_id {
            v["instance_id"] = json!(id);
        }
        v
    }
}

impl fmt::Display for Arguments {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.to_json())
    }
}

/// No such argument.
static ABSENT: Arg = Arg::Absent;

impl Index<&str> for Arguments {
    type Output = Arg;

    fn index(&self, name: &str) -> &Arg {
        match name {
            "instance_id" => &self.instance_id,
            "reason" => &self.reason,
            _ => &ABSENT,
        }
    }
}

/// One argument of a planned call.
#[derive(Debug, Clone, PartialEq)]
pub enum Arg {
    Id(i64),
    Text(String),
    /// Not given (a launch names no instance).
    Absent,
}

impl Arg {
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Arg::Id(id) => Some(*id),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Arg::Text(t) => Some(t),
            _ => None,
        }
    }

    fn to_json(&self) -> Value {
        match self {
            Arg::Id(id) => json!(id),
            Arg::Text(t) => json!(t),
            Arg::Absent => Value::Null,
        }
    }
}

impl PartialEq<i64> for Arg {
    fn eq(&self, other: &i64) -> bool {
        self.as_i64() == Some(*other)
    }
}

impl PartialEq<i32> for Arg {
    fn eq(&self, other: &i32) -> bool {
        self.as_i64() == Some(i64::from(*other))
    }
}

impl PartialEq<&str> for Arg {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == Some(*other)
    }
}
