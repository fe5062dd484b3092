//! `reset-session`: a fresh conversation that cannot silence the agent. Run ids go on,
//! pending wakes are cancelled (unless --keep-wakes), and a P0 event rings the doorbell.

use anyhow::Result;

use crate::cli::ResetSessionArgs;
use crate::cmd::App;
use crate::doorbell::FileDoorbell;

pub fn run(app: &App, args: &ResetSessionArgs) -> Result<()> {
    let (config, dir, mut store) = super::open_or_create(app)?;
    super::lead(app, &config, &mut store, "reset-session")?;
    let done = crate::trigger::reset_session(
        &mut store,
        &FileDoorbell::new(&dir),
        args.keep_wakes,
        app.now(),
    )?;
    store.fence("reset-session")?;
    // A restored backup is older than the runs its state dir gave: the next `run` goes on
    // past the lock's note (`run::continue_past_the_lock`), and so does this line.
    let next_run = crate::lock::next_run_id(&dir, store.next_run_id()?);
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
