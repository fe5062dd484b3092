//! `reset-session`: a fresh conversation that cannot silence the agent. Run ids go on,
//! pending wakes are cancelled (unless --keep-wakes), and a P0 event rings the doorbell.

use anyhow::Result;

use crate::app::App;
use crate::cli::ResetSessionArgs;
use crate::clock::Millis;
use crate::doorbell::{Doorbell, FileDoorbell};
use crate::store::{events, session, wakes, Store};

/// What a reset did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reset {
    pub old_session: i64,
    pub new_session: i64,
    pub cancelled_wakes: usize,
    pub event_id: i64,
}

pub fn run(app: &App, args: &ResetSessionArgs) -> Result<()> {
    let (_config, dir, mut store) = super::open_or_create(app)?;
    let done = reset(
        &mut store,
        &FileDoorbell::new(&dir),
        args.keep_wakes,
        app.now(),
    )?;
    let next_run = store.next_run_id()?;
    crate::outln!(
        "new session {} (was {})",
        done.new_session,
        done.old_session
    );
    if args.keep_wakes {
        crate::outln!("kept pending wakes");
    } else {
        crate::outln!("cancelled {} pending wake(s)", done.cancelled_wakes);
    }
    crate::outln!("run ids go on: the next run is {next_run}");
    crate::outln!(
        "recorded event {} (P0) and rang the doorbell: the agent runs next",
        done.event_id
    );
    Ok(())
}

/// The reset itself (also what `sim` runs): new session, wakes cancelled, a P0 event
/// committed, then the doorbell rung.
pub fn reset(
    store: &mut Store,
    doorbell: &dyn Doorbell,
    keep_wakes: bool,
    now: Millis,
) -> Result<Reset> {
    let tx = store.immediate()?;
    let old = session::current(&tx)?;
    let new = session::start_new(&tx, "reset-session by operator", now)?;
    let cancelled = if keep_wakes {
        0
    } else {
        wakes::cancel_pending(&tx, now)?
    };
    let reason = format!(
        "session reset by operator (session {old} -> {new}, {cancelled} pending wake(s) cancelled)"
    );
    let id = events::insert(&tx, 0, "reset", &reason, None, now)?;
    tx.commit()?;
    super::trigger::ring_on(doorbell, id, 0, &reason, now)?;
    Ok(Reset {
        old_session: old,
        new_session: new,
        cancelled_wakes: cancelled,
        event_id: id,
    })
}
