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
/// stdout is the journal (`JOURNAL_STREAM`, set once by main): each line starts `<6>`.
static JOURNAL: AtomicBool = AtomicBool::new(false);
/// The next byte written to stdout starts a line (for the journal's prefix).
static AT_LINE_START: AtomicBool = AtomicBool::new(true);

/// stdout is the journal (main, from `JOURNAL_STREAM`): every line of the commands' output
/// then starts with the info priority, as DESIGN.md's journal contract asks of every line.
pub fn set_journal(on: bool) {
    JOURNAL.store(on, Ordering::Relaxed);
}

/// `text` with `<6>` at the start of every line (`at_start`: the text begins one), and
/// whether the text after it begins a line.
fn journal_lines(text: &str, at_start: bool) -> (String, bool) {
    let mut out = String::with_capacity(text.len() + 8);
    let mut start = at_start;
    for c in text.chars() {
        if start {
            out.push_str("<6>");
        }
        out.push(c);
        start = c == '\n';
    }
    (out, start)
}

/// Write to stdout and flush, so a failure is seen here and not lost at exit.
pub fn print(args: fmt::Arguments<'_>) {
    if CLOSED.load(Ordering::Relaxed) || FAILED.load(Ordering::Relaxed) {
        return;
    }
    let text = fmt::format(args);
    let mut text = terminal_safe(&text);
    if JOURNAL.load(Ordering::Relaxed) && !text.is_empty() {
        let (lines, next) = journal_lines(&text, AT_LINE_START.load(Ordering::Relaxed));
        AT_LINE_START.store(next, Ordering::Relaxed);
        text = std::borrow::Cow::Owned(lines);
    }
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        if e.kind() == ErrorKind::BrokenPipe {
            CLOSED.store(true, Ordering::Relaxed);
        } else {
            FAILED.store(true, Ordering::Relaxed);
            crate::journal::write_stderr(&format!(
                "fleetagent: cannot write to standard output: {e}"
            ));
        }
    }
}

pub use crate::text::terminal_safe;

/// At a terminal, one line on stderr saying what the command waits for and for how long at
/// most, so a slow outside service does not look like a hang. Nothing when stderr is a
/// file, a pipe or the journal.
pub fn waiting(what: &str, at_most: std::time::Duration) {
    use std::io::IsTerminal;
    if std::io::stderr().is_terminal() {
        crate::journal::write_stderr(&format!(
            "waiting for {what} (up to {}s)...",
            at_most.as_secs()
        ));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn journal_lines_prefix_every_line_once_across_writes() {
        assert_eq!(journal_lines("a\nb\n", true), ("<6>a\n<6>b\n".into(), true));
        // A line written in two parts (`out!` then `outln!`) gets one prefix.
        let (first, next) = journal_lines("run 7: ", true);
        let (second, after) = journal_lines("ok\n", next);
        assert_eq!((first + &second, after), ("<6>run 7: ok\n".into(), true));
        assert_eq!(journal_lines("\n", true), ("<6>\n".into(), true));
    }

    #[test]
    fn control_characters_are_escaped_but_newlines_and_tabs_kept() {
        assert!(matches!(
            terminal_safe("plain\tline\n"),
            std::borrow::Cow::Borrowed("plain\tline\n")
        ));
        assert_eq!(
            terminal_safe("hi\u{1b}]0;pwned\u{7}\r\u{9b}2J\n"),
            "hi\\u{1b}]0;pwned\\u{7}\\u{d}\\u009b2J\n"
        );
        assert_eq!(terminal_safe("a\u{202e}b"), "a\\u202eb");
        // Inside JSON the escape is JSON's own: the document stays valid and the value whole.
        // DEL and the C1 controls too, which JSON leaves raw (a walkthrough: `\u{7f}` made
        // `doctor --json` unparsable).
        let r = "x\u{2028}y\u{202e}z\u{7f}\u{9b}\u{85}";
        let json = serde_json::to_string(&serde_json::json!({ "r": r })).unwrap();
        let shown = terminal_safe(&json);
        let back: serde_json::Value = serde_json::from_str(&shown).unwrap();
        assert_eq!(back["r"], r);
    }
}
