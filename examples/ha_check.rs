//! `scripts/ha-check`: the lease checked against your own database (`fleetagent::ha::check`).
//! The URL: the first argument, else `FLEETAGENT_HA_DB_URL`. Use a scratch database.

#![allow(clippy::disallowed_macros)]

fn main() {
    let url = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("FLEETAGENT_HA_DB_URL").ok());
    let Some(url) = url else {
        eprintln!("usage: scripts/ha-check URL (or set FLEETAGENT_HA_DB_URL); give a scratch database, e.g. .../fleetagent_check");
        std::process::exit(2);
    };
    match fleetagent::ha::check::run(&url, &mut |line| println!("{line}")) {
        Ok(()) => println!("ha-check: every check passed"),
        Err(e) => {
            eprintln!("ha-check: {e:#}");
            std::process::exit(1);
        }
    }
}
