//! Thin main: parse, set up logging, wire the real clock and environment, run, and turn the
//! error into one line and an exit code.
//!
//! The process entry point is our own C `main` rather than Rust's: `trigger` runs on every
//! state change, and Rust's start-up installs a stack-overflow handler whose guard-page lookup
//! makes glibc read and parse /proc/self/maps in every process, a fifth of a millisecond
//! (docs/testing.md, "trigger"). What else that start-up does, [`entry`] does here: standard
//! descriptors 0-2 are made valid (so a file the process opens, run.lock first in `run`, can
//! never take the place of a closed stderr and receive the log), SIGPIPE is ignored (a closed pipe is an error that output.rs handles), and a
//! panic ends the process with exit code 101. Arguments come from glibc's init array as before.
//! What is given up: a stack overflow ends in a plain SIGSEGV, without Rust's one-line message,
//! and the main thread has no name in a panic message.
#![no_main]

use std::ffi::{c_char, c_int};
use std::sync::Arc;

use clap::Parser;
use fleetagent::clock::SystemClock;
use fleetagent::cmd::App;
use fleetagent::env::Env;
use fleetagent::error;
use fleetagent::journal;

/// The C entry point (see the module comment); the program itself is [`run`].
#[allow(unsafe_code)]
#[unsafe(no_mangle)]
extern "C" fn main(_argc: c_int, _argv: *const *const c_char) -> c_int {
    entry::standard_fds_valid();
    entry::ignore_sigpipe();
    let code = std::panic::catch_unwind(run).unwrap_or(entry::EXIT_PANIC);
    std::process::exit(code)
}

/// What Rust's own start-up would have done before `main`, minus the stack-overflow handler.
#[allow(unsafe_code)]
mod entry {
    /// The exit code of a Rust program whose main thread panicked.
    pub const EXIT_PANIC: i32 = 101;

    /// Opens /dev/null on each of descriptors 0, 1 and 2 that is closed, in order, so that
    /// `open` (lowest free descriptor first) lands on it. A process started with fd 2 closed
    /// would otherwise get run.lock as fd 2, and write its log lines into it.
    pub fn standard_fds_valid() {
        for fd in 0..3 {
            // SAFETY: F_GETFD only reads the descriptor's flags; no memory is passed.
            let closed = unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1
                && std::io::Error::last_os_error().raw_os_error() == Some(libc::EBADF);
            // SAFETY: a NUL-terminated path and plain flags.
            if closed && unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) } != fd {
                // Nothing can be reported without a valid stderr: stop as Rust's start-up does.
                std::process::abort();
            }
        }
    }

    /// Writes to a closed pipe return EPIPE instead of killing the process.
    pub fn ignore_sigpipe() {
        // SAFETY: installs the SIG_IGN disposition; no handler code runs.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    }
}

fn run() -> i32 {
    let stream = std::env::var_os("JOURNAL_STREAM");
    let in_journal = journal::stderr_is_journal(stream.as_deref());
    journal::set_active(in_journal);
    fleetagent::output::set_journal(journal::stdout_is_journal(stream.as_deref()));
    let cli = match fleetagent::cli::Cli::try_parse() {
        Ok(cli) => cli,
        // Help and --version go to stdout as clap prints them; a usage error is one line of
        // stderr with its priority in the journal (exit 2).
        Err(e) if !e.use_stderr() => e.exit(),
        Err(e) => {
            journal::eprint(journal::ERR, e.render().to_string().trim_end());
            return e.exit_code();
        }
    };
    init_logging(&cli, in_journal);
    let app = App {
        config_flag: cli.config.clone(),
        state_dir_flag: cli.state_dir.clone(),
        env: Env::from_process(),
        clock: Arc::new(SystemClock),
    };
    let code = match fleetagent::cmd::dispatch(&app, &cli.command) {
        Ok(()) if fleetagent::output::failed() => error::EXIT_RUNTIME,
        Ok(()) => error::EXIT_OK,
        Err(e) if error::quiet_code(&e).is_some() => error::quiet_code(&e).unwrap_or(1),
        Err(e) => {
            let text = format!("fleetagent: {}", error::report(&e));
            let text = fleetagent::output::terminal_safe(&text);
            journal::eprint(journal::ERR, &text);
            error::exit_code(&e)
        }
    };
    fleetagent::faults::stats::report();
    code
}

/// env_logger behind [`NoWireDump`]: the journal's format when stderr is the journal
/// (`journal`), today's otherwise. Notices pass the default filter in the journal and for
/// `run` (what the units start); the other commands keep a clean terminal unless `-v`.
fn init_logging(cli: &fleetagent::cli::Cli, in_journal: bool) {
    let notices = in_journal || matches!(cli.command, fleetagent::cli::Command::Run(_));
    let filter = journal::default_filter(cli.verbose, notices);
    let mut builder =
        env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(filter));
    if in_journal {
        builder
            .format(journal::format_record)
            .write_style(env_logger::WriteStyle::Never);
    } else {
        builder.format(journal::format_terminal);
    }
    let logger = builder.build();
    log::set_max_level(logger.filter());
    let _ = log::set_boxed_logger(Box::new(NoWireDump(logger)));
}

/// The env_logger, minus the trace level of `ureq` and `ureq_proto`: at trace `ureq_proto`
/// dumps every byte of every HTTP exchange (the Authorization header and any key a server
/// echoes included), and `ureq`'s own debug records print a URL's path and query (a
/// `demand.http_url` token) and a redirect's `Location` whole when its trace level is on
/// (else as `/******`). No `RUST_LOG` may turn either on.
struct NoWireDump(env_logger::Logger);

impl NoWireDump {
    fn hidden(meta: &log::Metadata<'_>) -> bool {
        meta.level() == log::Level::Trace && meta.target().starts_with("ureq")
    }
}

impl log::Log for NoWireDump {
    fn enabled(&self, meta: &log::Metadata<'_>) -> bool {
        !Self::hidden(meta) && self.0.enabled(meta)
    }

    fn log(&self, record: &log::Record<'_>) {
        if !Self::hidden(record.metadata()) {
            self.0.log(record);
        }
    }

    fn flush(&self) {
        self.0.flush();
    }
}
