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
    let mut logger =
        env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(level));
    logger.format_timestamp_secs();
    // At trace, ureq_proto dumps every byte of every HTTP exchange, the Authorization header
    // and any key a server echoes included: no RUST_LOG may turn that on (these directives
    // replace any of the same name from RUST_LOG).
    for module in ["ureq_proto", "ureq_proto::util"] {
        logger.filter_module(module, log::LevelFilter::Debug);
    }
    logger.init();
    let app = App {
        config_flag: cli.config.clone(),
        state_dir_flag: cli.state_dir.clone(),
        env: Env::from_process(),
        clock: Arc::new(SystemClock),
    };
    let code = match fleetagent::cmd::dispatch(&app, &cli.command) {
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
