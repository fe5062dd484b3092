//! `reset-session`: a fresh conversation that cannot silence the agent. Run ids go on,
//! pending wakes are cancelled (unless --keep-wakes), and a P0 event rings the doorbell.

use anyhow::Result;

use crate::app::App;
use crate::cli::ResetSessionArgs;
use crate::store::{events, session, wakes};

pub fn run(app: &App, args: &ResetSessionArgs) -> Result<()> {
    let (_config, dir, mut store) = super::open_or_create(app)?;
    let now = app.now();
    let tx = store.immediate()?;
    let old = session::current(&tx)?;
    let new = session::start_new(&tx, "reset-session by operator", now)?;
    let cancelled = if args.keep_wakes {
        0
    } else {
        wakes::cancel_pending(&tx, now)?
    };
    let reason = format!(
        "session reset by operator (session {old} -> {new}, {cancelled} pending wake(s) cancelled)"
    );
    let id = events::insert(&tx, 0, "reset", &reason, None, now)?;
    tx.commit()?;
    let next_run = store.next_run_id()?;
    super::trigger::ring(&dir, id, 0, &reason, now)?;
    println!("new session {new} (was {old})");
    if args.keep_wakes {
        println!("kept pending wakes");
    } else {
        println!("cancelled {cancelled} pending wake(s)");
    }
    println!("run ids go on: the next run is {next_run}");
    println!("recorded event {id} (P0) and rang the doorbell: the agent runs next");
    Ok(())
}
