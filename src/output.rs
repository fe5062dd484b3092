//! Standard output of the commands. `println!` panics when the reader has gone
//! (`fleetagent inspect | head -1`); here a closed pipe only ends the output: the command
//! finishes its work and exits with its own code. Any other write failure (a full disk
//! behind a redirect) is reported once on stderr and makes a successful command exit 1.
//! Commands print through [`outln!`](crate::outln) and [`out!`](crate::out).

use std::fmt;
use std::io::{ErrorKind, Write};
use std::sync::atomic::{AtomicBool, Ordering};

/// The reader closed the pipe: nothing more is written.
static CLOSED: AtomicBool = AtomicBool::new(false);
/// A write failed for another reason (already reported on stderr).
static FAILED: AtomicBool = AtomicBool::new(false);

/// Write to stdout and flush, so a failure is seen here and not lost at exit.
pub fn print(args: fmt::Arguments<'_>) {
    if CLOSED.load(Ordering::Relaxed) || FAILED.load(Ordering::Relaxed) {
        return;
    }
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(args).and_then(|()| out.flush()) {
        if e.kind() == ErrorKind::BrokenPipe {
            CLOSED.store(true, Ordering::Relaxed);
        } else {
            FAILED.store(true, Ordering::Relaxed);
            eprintln!("fleetagent: cannot write to standard output: {e}");
        }
    }
}

/// At a terminal, one line on stderr saying what the command waits for and for how long at
/// most, so a slow outside service does not look like a hang. Nothing when stderr is a
/// file, a pipe or the journal.
pub fn waiting(what: &str, at_most: std::time::Duration) {
    use std::io::IsTerminal;
    if std::io::stderr().is_terminal() {
        eprintln!("waiting for {what} (up to {}s)...", at_most.as_secs());
    }
}

/// Whether a write to stdout failed for a reason other than a closed pipe.
pub fn failed() -> bool {
    FAILED.load(Ordering::Relaxed)
}

/// `println!` for command output (see the module doc).
#[macro_export]
macro_rules! outln {
    () => {
        $crate::output::print(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::output::print(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` for command output (see the module doc).
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::print(format_args!($($arg)*))
    };
}
