//! The claim transaction and its ends: a pass's run row created with every ready event and
//! due wake claimed and the doorbell deleted before COMMIT; a pass finished, or failed with
//! its claim handed back one timer period later; passes a crash left `running` recovered.

use anyhow::{Context, Result};

use crate::clock::Millis;
use crate::doorbell::Doorbell;
use crate::store::{events, runs, session, wakes, Store};

use super::RunEnv;

/// Claimed work of one pass.
pub struct Claim {
    pub run_id: i64,
    pub session_id: i64,
    pub pass_no: u32,
    pub started_by: runs::StartedBy,
    pub events: Vec<events::Event>,
    pub wakes: Vec<wakes::Wake>,
}

/// Mark passes a dead process left `running` as failed and hand their claims back.
pub fn recover_interrupted(store: &mut Store, now: Millis) -> Result<usize> {
    let tx = store.immediate()?;
    let stale = runs::running(&tx)?;
    for run in &stale {
        runs::finish_failed(
            &tx,
            run.id,
            "interrupted: the process ended before the pass finished (killed, at its deadline or by hand; a crash; or a failure it could not record, as on a full disk: its last journal lines say which)",
            now,
        )?;
        runs::mark_in_prompt(&tx, run.id)?;
        let ev = events::hand_back(&tx, run.id, None, "pass interrupted", now)?;
        let wk = wakes::hand_back(&tx, run.id, None, now)?;
        log::warn!(
            "run {} was interrupted; handed back {} event(s) and {} wake(s) ({} event(s), {} wake(s) now failed)",
            run.id,
            ev.returned,
            wk.returned,
            ev.failed,
            wk.failed
        );
    }
    tx.commit()?;
    Ok(stale.len())
}

/// The transaction that creates the run row, claims every ready event and due wake, and
/// deletes the doorbell before COMMIT.
pub fn begin(store: &mut Store, env: &RunEnv<'_>, pass_no: u32) -> Result<Claim> {
    let now = env.clock.now_ms();
    let tx = store.immediate().context("cannot begin the claim")?;
    let session_id = session::current(&tx)?;
    let waiting = events::count_ready(&tx, now)? > 0;
    let bell = env.doorbell.mtime()?.is_some();
    let started_by = if waiting || bell {
        runs::StartedBy::Events
    } else {
        runs::StartedBy::Tick
    };
    let run_id = runs::create(&tx, session_id, env.pid, pass_no, started_by, now)?;
    let claimed_events = events::claim_ready(&tx, run_id, now)?;
    let claimed_wakes = wakes::claim_due(&tx, run_id, now)?;
    runs::set_claimed(&tx, run_id, claimed_events.len(), claimed_wakes.len())?;
    let removed = env.doorbell.remove()?;
    if let Err(e) = tx.commit() {
        if removed {
            // Nothing was claimed: put the ring back so the work is not stranded.
            let _ = env.doorbell.ring("restored: claim transaction failed");
        }
        return Err(e).context("cannot commit the claim");
    }
    store.fence("claim")?;
    log::info!(
        "run {run_id} (pass {pass_no}, {started_by}): claimed {} event(s), {} wake(s)",
        claimed_events.len(),
        claimed_wakes.len()
    );
    Ok(Claim {
        run_id,
        session_id,
        pass_no,
        started_by,
        events: claimed_events,
        wakes: claimed_wakes,
    })
}

pub fn finish_ok(
    store: &mut Store,
    run_id: i64,
    outcome: &runs::Outcome,
    now: Millis,
) -> Result<()> {
    let tx = store.immediate()?;
    runs::finish_ok(&tx, run_id, outcome, now)?;
    runs::mark_in_prompt(&tx, run_id)?;
    session::record_run_finished(&tx, true, now)?;
    tx.commit()?;
    store.fence("finishing the run")
}

/// A failed pass: its events and wakes go back, waiting one timer period, so a failing agent
/// never loops at full speed. Best effort: if the database itself is the problem, the next
/// run's recovery does the same. Returns a note for the one-line error.
pub fn fail(store: &mut Store, env: &RunEnv<'_>, run_id: i64, err: &anyhow::Error) -> String {
    let now = env.clock.now_ms();
    let not_before = now + env.config.run.timer_period_secs as i64 * 1000;
    let text = crate::error::one_line(err);
    let result = (|| -> Result<String> {
        let tx = store.immediate()?;
        runs::finish_failed(&tx, run_id, &text, now)?;
        runs::mark_in_prompt(&tx, run_id)?;
        let ev = events::hand_back(&tx, run_id, Some(not_before), &text, now)?;
        let wk = wakes::hand_back(&tx, run_id, Some(not_before), now)?;
        session::record_run_finished(&tx, false, now)?;
        tx.commit()?;
        store.fence("recording the failed run")?;
        let mut note = format!(
            " ({} event(s) and {} wake(s) handed back to wait one timer period",
            ev.returned, wk.returned
        );
        if ev.failed + wk.failed > 0 {
            note.push_str(&format!(
                "; {} event(s) and {} wake(s) marked failed after {} attempts",
                ev.failed,
                wk.failed,
                events::MAX_ATTEMPTS
            ));
        }
        note.push(')');
        Ok(note)
    })();
    result.unwrap_or_else(|e| {
        format!(" (and its failure could not be recorded: {e}; the next run recovers it)")
    })
}

/// The last look, by state: how many events are ready now.
pub fn ready_events(store: &mut Store, now: Millis) -> Result<i64> {
    let tx = store.immediate()?;
    let n = events::count_ready(&tx, now)?;
    tx.commit()?;
    Ok(n)
}

pub fn ensure_doorbell(doorbell: &dyn Doorbell, ready: i64) {
    if let Ok(None) = doorbell.mtime() {
        let _ = doorbell.ring(&format!("{ready} event(s) left for the next run"));
    }
}
