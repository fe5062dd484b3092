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
    let db_next = store.next_run_id()?;
    let next_run = crate::lock::next_run_id(&dir, db_next);
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
    if next_run > db_next {
        // The step of a restore (docs/operations.md, "Backups"): what the operator decided
        // after the backup is not in it (a walkthrough: a pause in force was lifted, and a
        // disk kept stopped by the operator was destroyed as stopped too long).
        crate::outln!(
            "this database is older than the runs this state dir gave (restored from a backup): a pause, and the operator's stops and holds made after the backup, are not in it; to keep the fleet hands-off, `fleetagent pause --reason ...` now, before the units start; an instance you stopped since to keep its disk is destroyed vast.stopped_max_hours after its stop unless you start or destroy it"
        );
    }
    crate::outln!(
        "recorded event {} (P0) and rang the doorbell: the agent runs next",
        done.event_id
    );
    Ok(())
}
