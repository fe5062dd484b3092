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

/// `a: b: c` on one line, the way the top-level error is printed. SQLite's code follows its
/// message in brackets (`disk I/O error (SQLite code 4874)`) rather than as a cause of its own
/// that repeats the message (`disk I/O error: Error code 4874: disk I/O error`).
pub fn one_line(err: &anyhow::Error) -> String {
    let mut out = String::new();
    for (i, cause) in err.chain().enumerate() {
        if let Some(e) = cause.downcast_ref::<rusqlite::ffi::Error>() {
            if i > 0 {
                out.push_str(&format!(" (SQLite code {})", e.extended_code));
                continue;
            }
        }
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
     follow docs/operations.md, \"Recovering the database\" (scripts/recover-db keeps every \
     row of the ledger of runs, actions and instances it can read and names what it could \
     not; the conversation can be rebuilt)";

/// Is a damaged database file anywhere in the chain?
pub fn is_damaged_database(err: &anyhow::Error) -> bool {
    // A table or column the schema's version has missing is a database changed by hand or
    // damaged: the recovery is the same (a walkthrough dropped a table and got SQLite's
    // bare "no such table").
    let missing = |msg: &str| msg.starts_with("no such table") || msg.starts_with("no such column");
    err.chain()
        .any(|cause| match cause.downcast_ref::<rusqlite::Error>() {
            Some(rusqlite::Error::SqliteFailure(e, msg)) => {
                matches!(
                    e.code,
                    rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase
                ) || msg.as_deref().is_some_and(missing)
            }
            Some(rusqlite::Error::SqlInputError { msg, .. }) => missing(msg),
            _ => false,
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

/// What the storage under the state dir said, where an error says it: the names an operator
/// needs instead of "disk I/O error" (`paths::name_storage_fault` adds the dir and its free
/// space).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StorageFault {
    /// SQLITE_FULL, ENOSPC, EDQUOT: no room for a page, the WAL or the -shm.
    NoSpace,
    /// SQLITE_READONLY, EROFS: the file system (or the file) refuses writes.
    ReadOnly,
    /// Any other SQLITE_IOERR or SQLITE_CANTOPEN: its cause is the file system's state (a
    /// full disk extending the -shm reads SQLITE_IOERR_SHMSIZE, code 4874).
    Io,
}

/// The storage fault in the chain, if any.
pub fn storage_fault(err: &anyhow::Error) -> Option<StorageFault> {
    use rusqlite::ErrorCode;
    let mut found = None;
    for cause in err.chain() {
        let this = if let Some(e) = cause.downcast_ref::<rusqlite::ffi::Error>() {
            match e.code {
                ErrorCode::DiskFull => Some(StorageFault::NoSpace),
                ErrorCode::ReadOnly => Some(StorageFault::ReadOnly),
                ErrorCode::SystemIoFailure | ErrorCode::CannotOpen => Some(StorageFault::Io),
                _ => None,
            }
        } else if let Some(e) = cause.downcast_ref::<std::io::Error>() {
            match e.raw_os_error() {
                Some(libc::ENOSPC | libc::EDQUOT) => Some(StorageFault::NoSpace),
                Some(libc::EROFS) => Some(StorageFault::ReadOnly),
                _ => None,
            }
        } else {
            None
        };
        // The most specific wins: a named errno or code over a generic I/O error.
        match (found, this) {
            (_, Some(StorageFault::NoSpace)) => return Some(StorageFault::NoSpace),
            (None | Some(StorageFault::Io), Some(f)) => found = Some(f),
            _ => {}
        }
    }
    found
}

/// Is SQLITE_BUSY or SQLITE_LOCKED in the chain: another connection held the database past
/// the busy timeout (`store::locked_line` names the file)?
pub fn is_database_locked(err: &anyhow::Error) -> bool {
    use rusqlite::ErrorCode;
    err.chain().any(|cause| {
        cause
            .downcast_ref::<rusqlite::ffi::Error>()
            .is_some_and(|e| matches!(e.code, ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked))
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn sqlite(code: i32, msg: &str) -> anyhow::Error {
        anyhow::Error::new(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(code),
            Some(msg.into()),
        ))
    }

    #[test]
    fn storage_faults_are_read_from_sqlite_codes_and_errnos() {
        let shm = sqlite(4874, "disk I/O error").context("database /s/fleetagent.db");
        assert_eq!(storage_fault(&shm), Some(StorageFault::Io));
        // SQLite's code follows its message once, in brackets.
        assert_eq!(
            one_line(&shm),
            "database /s/fleetagent.db: disk I/O error (SQLite code 4874)"
        );
        let full = sqlite(13, "database or disk is full").context("cannot record the event");
        assert_eq!(storage_fault(&full), Some(StorageFault::NoSpace));
        let ro = sqlite(8, "attempt to write a readonly database");
        assert_eq!(storage_fault(&ro), Some(StorageFault::ReadOnly));
        let errno = |n| anyhow::Error::new(std::io::Error::from_raw_os_error(n)).context("ring");
        assert_eq!(
            storage_fault(&errno(libc::ENOSPC)),
            Some(StorageFault::NoSpace)
        );
        assert_eq!(
            storage_fault(&errno(libc::EROFS)),
            Some(StorageFault::ReadOnly)
        );
        assert_eq!(storage_fault(&errno(libc::EACCES)), None);
        assert_eq!(storage_fault(&sqlite(19, "UNIQUE constraint failed")), None);
        assert_eq!(storage_fault(&anyhow::anyhow!("plain")), None);
    }

    #[test]
    fn a_locked_database_is_read_from_busy_and_locked() {
        let busy = sqlite(5, "database is locked").context("cannot record the event");
        assert!(is_database_locked(&busy));
        assert!(is_database_locked(&sqlite(6, "database table is locked")));
        assert!(is_database_locked(&sqlite(517, "database is locked")));
        assert!(!is_database_locked(&sqlite(13, "database or disk is full")));
        assert_eq!(storage_fault(&busy), None);
    }
}
