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

/// What to add to an error when SQLite says the database file is damaged (corrupt, truncated,
/// or not a database at all): where the recovery steps are.
pub const DAMAGED_DATABASE_HINT: &str = "the database is damaged: stop the fleetagent units and \
     follow docs/operations.md, \"Recovering the database\" (the ledger of runs, actions and \
     instances is kept; the conversation can be rebuilt)";

/// Is a damaged database file anywhere in the chain?
pub fn is_damaged_database(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        matches!(
            cause.downcast_ref::<rusqlite::Error>(),
            Some(rusqlite::Error::SqliteFailure(e, _))
                if matches!(e.code, rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase)
        )
    })
}

/// The one line printed for an error, with the recovery hint when the database is damaged.
pub fn report(err: &anyhow::Error) -> String {
    let line = one_line(err);
    if is_damaged_database(err) {
        format!("{line} ({DAMAGED_DATABASE_HINT})")
    } else {
        line
    }
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
