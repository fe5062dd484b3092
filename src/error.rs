//! The few typed errors a caller branches on, and the exit codes they map to.
//!
//! Exit codes (DESIGN.md): 0 success (also "another run holds the lock"), 1 runtime error,
//! 2 usage or configuration error. Everything not typed here is a runtime error.

use std::fmt;

/// A bad flag, value or config: exit 2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

pub const EXIT_OK: i32 = 0;
pub const EXIT_RUNTIME: i32 = 1;
pub const EXIT_USAGE: i32 = 2;

/// The exit code for an error: 2 when a [`UsageError`] is anywhere in the chain, else 1.
pub fn exit_code(err: &anyhow::Error) -> i32 {
    if err.chain().any(|e| e.is::<UsageError>()) {
        EXIT_USAGE
    } else {
        EXIT_RUNTIME
    }
}

/// `a: b: c` on one line, the way the top-level error is printed.
pub fn one_line(err: &anyhow::Error) -> String {
    let mut out = String::new();
    for (i, cause) in err.chain().enumerate() {
        let text = cause.to_string();
        if i > 0 {
            if out.contains(&text) {
                continue;
            }
            out.push_str(": ");
        }
        out.push_str(&text.split_whitespace().collect::<Vec<_>>().join(" "));
    }
    out
}

pub fn usage(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(UsageError(msg.into()))
}

/// The command already printed what the user needs; exit with this code and print nothing
/// more (`doctor` with problems).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quiet(pub i32);

impl fmt::Display for Quiet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "exit {}", self.0)
    }
}

impl std::error::Error for Quiet {}

/// The quiet exit code, if the error is a [`Quiet`].
pub fn quiet_code(err: &anyhow::Error) -> Option<i32> {
    err.downcast_ref::<Quiet>().map(|q| q.0)
}
