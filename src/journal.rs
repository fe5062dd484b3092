//! How a line on stderr looks: with its syslog priority and no timestamp of its own when
//! stderr is the journal (`JOURNAL_STREAM`, sd-daemon(3)), env_logger's format otherwise; and
//! the notice level the `log` crate lacks. main.rs sets it up once; a line printed outside
//! the logger (the final error, the watchdog) takes its prefix from [`line`].
//!
//! Notice: an info record whose target is [`NOTICE`] (the [`notice!`](crate::notice) macro).
//! Every action of the fleet (launched, stopped, destroyed, refused) is one, and a failed one
//! a warning with the same target; the default filter lets them through where someone reads
//! them (the journal, and `run` at a terminal) and keeps them off the terminal of the other
//! commands, which print their own outcome (`-v` shows them).

use std::ffi::OsStr;
use std::sync::atomic::{AtomicBool, Ordering};

/// The target of the action journal's records: notices, and warnings for failed actions and
/// for a pass that decides blind (demand unknown) or without its model (the fallback).
pub const NOTICE: &str = "fleetagent::notice";

/// syslog priorities (sd-daemon(3)).
pub const ERR: u8 = 3;
pub const WARNING: u8 = 4;
pub const NOTICE_PRIORITY: u8 = 5;
pub const INFO: u8 = 6;
pub const DEBUG: u8 = 7;

/// stderr is the journal (set once by main).
static ACTIVE: AtomicBool = AtomicBool::new(false);

/// A notice: `log::info!` with the [`NOTICE`] target, printed `<5>` in the journal.
#[macro_export]
macro_rules! notice {
    ($($arg:tt)*) => {
        log::info!(target: $crate::journal::NOTICE, $($arg)*)
    };
}

/// Whether `JOURNAL_STREAM` (`<dev>:<inode>`, in decimal) names the file open on descriptor 2.
/// One fstat, and only when the variable is set: `trigger` pays nothing more without it. A
/// child of a journald-connected service that redirected its stderr keeps the variable but
/// not the stream, hence the comparison.
pub fn stderr_is_journal(stream: Option<&OsStr>) -> bool {
    names(stream, std::io::stderr())
}

/// Whether `JOURNAL_STREAM` names the file open on descriptor 1: under systemd stdout is the
/// same stream, and the commands' own lines (`run`'s summary) then carry a priority too.
pub fn stdout_is_journal(stream: Option<&OsStr>) -> bool {
    names(stream, std::io::stdout())
}

fn names(stream: Option<&OsStr>, fd: impl std::os::fd::AsFd) -> bool {
    let Some((dev, ino)) = stream.and_then(OsStr::to_str).and_then(parse_stream) else {
        return false;
    };
    // dev_t and ino_t are u64 here but narrower on some targets.
    #[allow(clippy::unnecessary_cast)]
    match nix::sys::stat::fstat(fd) {
        Ok(st) => st.st_dev as u64 == dev && st.st_ino as u64 == ino,
        Err(_) => false,
    }
}

/// `"<dev>:<inode>"` as two numbers.
fn parse_stream(s: &str) -> Option<(u64, u64)> {
    let (dev, ino) = s.trim().split_once(':')?;
    Some((dev.parse().ok()?, ino.parse().ok()?))
}

pub fn set_active(on: bool) {
    ACTIVE.store(on, Ordering::Relaxed);
}

/// Whether stderr is the journal.
pub fn active() -> bool {
    ACTIVE.load(Ordering::Relaxed)
}

/// The priority of a log record.
pub fn priority(level: log::Level, target: &str) -> u8 {
    match level {
        log::Level::Error => ERR,
        log::Level::Warn => WARNING,
        log::Level::Info if target == NOTICE => NOTICE_PRIORITY,
        log::Level::Info => INFO,
        log::Level::Debug | log::Level::Trace => DEBUG,
    }
}

/// The filter when `RUST_LOG` is unset: warnings (`-v` info, `-vv` debug), with the action
/// journal where it is read (`notices`: the journal, or `run`) and without it elsewhere.
pub fn default_filter(verbose: u8, notices: bool) -> &'static str {
    // Literals: `trigger` builds this on every state change.
    match verbose {
        0 if notices => "warn,fleetagent::notice=info",
        0 => "warn,fleetagent::notice=off",
        1 => "info",
        _ => "debug",
    }
}

/// Writes `text` to stderr as [`line`] shapes it: a line outside the logger (the final
/// error, an operator command's warning, doctor's notes) with its priority in the journal.
pub fn eprint(priority: u8, text: &str) {
    write_stderr(&line(priority, text));
}

/// Writes `text` and a newline to stderr as they are. A failed write is ignored: stderr is
/// where failures are reported, so nothing is left to report this one to (`eprintln!` would
/// panic, exit 101, with stderr on a full disk or `2>/dev/full`).
pub fn write_stderr(text: &str) {
    use std::io::Write;
    let mut bytes = Vec::with_capacity(text.len() + 1);
    bytes.extend_from_slice(text.as_bytes());
    bytes.push(b'\n');
    let _ = std::io::stderr().lock().write_all(&bytes);
}

/// `text` as it goes to stderr: each line prefixed `<priority>` in the journal (journald
/// reads a prefix per line), unchanged otherwise.
pub fn line(priority: u8, text: &str) -> String {
    // No control character but the line break (a NUL is a line break to journald, an ESC
    // drives the terminal that shows it) and no direction override, whoever wrote the text.
    let text = crate::text::terminal_safe(text);
    if !active() {
        return text.into_owned();
    }
    prefixed(priority, &text)
}

/// The longest line written to the journal, in characters: journald splits a longer one
/// (`LineMax`, 48K by default) into records of which the second starts with whatever text was
/// there, read as a new line (a priority prefix of its own included).
const JOURNAL_LINE_MAX_CHARS: usize = 8_000;

fn prefixed(priority: u8, text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(JOURNAL_LINE_MAX_CHARS) + 4);
    for (i, l) in text.lines().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&format!("<{priority}>"));
        if l.chars().count() > JOURNAL_LINE_MAX_CHARS {
            out.extend(l.chars().take(JOURNAL_LINE_MAX_CHARS - 1));
            out.push('…');
        } else {
            out.push_str(l);
        }
    }
    out
}

/// The journal's format of a log record: `<priority>message`, no timestamp (journald keeps
/// its own) and no level word (the priority is it).
pub fn format_record(
    buf: &mut impl std::io::Write,
    record: &log::Record<'_>,
) -> std::io::Result<()> {
    let p = priority(record.level(), record.target());
    let text = record.args().to_string();
    writeln!(buf, "{}", prefixed(p, &crate::text::terminal_safe(&text)))
}

/// env_logger's own line (`[time LEVEL target] message`, the level coloured where the
/// terminal takes it), the message made [`crate::text::terminal_safe`] as the journal's is: a
/// `run` at a terminal logged outside text with U+009B (which clears an xterm's screen) and
/// U+202E raw (a walkthrough).
pub fn format_terminal(
    buf: &mut env_logger::fmt::Formatter,
    record: &log::Record<'_>,
) -> std::io::Result<()> {
    let style = buf.default_level_style(record.level());
    let time = buf.timestamp_seconds();
    let text = record.args().to_string();
    use std::io::Write;
    writeln!(
        buf,
        "[{time} {style}{:<5}{style:#} {}] {}",
        record.level(),
        record.target(),
        crate::text::terminal_safe(&text)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stream_is_two_decimal_numbers() {
        assert_eq!(parse_stream("8:123456"), Some((8, 123_456)));
        assert_eq!(parse_stream(" 0:1\n"), Some((0, 1)));
        for bad in ["", "8", "8:", ":1", "a:1", "8:1:2", "-1:3"] {
            assert_eq!(parse_stream(bad), None, "{bad:?}");
        }
        assert!(!stderr_is_journal(None));
        assert!(!stderr_is_journal(Some(OsStr::new("garbage"))));
        // Not our stderr: dev 0 inode 0 names no file.
        assert!(!stderr_is_journal(Some(OsStr::new("0:0"))));
    }

    #[test]
    fn priorities_and_prefixes() {
        assert_eq!(priority(log::Level::Error, "x"), 3);
        assert_eq!(priority(log::Level::Warn, NOTICE), 4);
        assert_eq!(priority(log::Level::Info, NOTICE), 5);
        assert_eq!(priority(log::Level::Info, "fleetagent::run"), 6);
        assert_eq!(priority(log::Level::Trace, "x"), 7);
        assert_eq!(prefixed(4, "one\ntwo"), "<4>one\n<4>two");
        // A line longer than journald keeps whole is cut, so no tail starts a record.
        let long = prefixed(5, &format!("{}<0>forged", "L".repeat(60_000)));
        assert_eq!(long.chars().count(), JOURNAL_LINE_MAX_CHARS + 3);
        assert!(long.ends_with('…') && !long.contains("<0>"));
        // A NUL (a line break to journald), an ESC or a direction override never reach it.
        assert_eq!(
            line(4, "a\u{0}<0>b\u{1b}[2J\u{202e}"),
            if active() { "<4>" } else { "" }.to_string() + "a\\u{0}<0>b\\u{1b}[2J\\u202e"
        );
        let mut buf = Vec::new();
        format_record(
            &mut buf,
            &log::Record::builder()
                .args(format_args!("launched a"))
                .level(log::Level::Info)
                .target(NOTICE)
                .build(),
        )
        .unwrap();
        assert_eq!(String::from_utf8(buf).unwrap(), "<5>launched a\n");
    }

    #[test]
    fn notices_pass_the_default_filter_only_where_read() {
        assert_eq!(default_filter(0, false), format!("warn,{NOTICE}=off"));
        assert_eq!(default_filter(0, true), format!("warn,{NOTICE}=info"));
        assert_eq!(default_filter(1, false), "info");
        assert_eq!(default_filter(2, true), "debug");
    }
}
