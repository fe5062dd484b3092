//! Thin main: parse, set up logging, wire the real clock and environment, run, and turn the
//! error into one line and an exit code.

use std::sync::Arc;

use clap::Parser;
use fleetagent::app::{App, Env};
use fleetagent::clock::SystemClock;
use fleetagent::error;

fn main() {
    let cli = fleetagent::cli::Cli::parse();
    let level = match cli.verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let logger = env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(level))
        .format_timestamp_secs()
        .build();
    log::set_max_level(logger.filter());
    let _ = log::set_boxed_logger(Box::new(NoWireDump(logger)));
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
            eprintln!("fleetagent: {}", error::report(&e));
            error::exit_code(&e)
        }
    };
    fleetagent::faults::stats::report();
    std::process::exit(code);
}

/// The env_logger, minus `ureq_proto`'s trace records: at trace it dumps every byte of every
/// HTTP exchange, the Authorization header and any key a server echoes included, and no
/// `RUST_LOG` may turn that on.
struct NoWireDump(env_logger::Logger);

impl NoWireDump {
    fn hidden(meta: &log::Metadata<'_>) -> bool {
        meta.level() == log::Level::Trace && meta.target().starts_with("ureq_proto")
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
