//! One `run` process: lock, recovery of interrupted passes, priority debounce, passes that
//! claim their work transactionally, failed passes that hand it back, and the last look
//! before exiting. The pass itself (observe, decide, act) is `pass.rs`.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};

use crate::clock::{Clock, Millis};
use crate::config::Config;
use crate::debounce;
use crate::doorbell::Doorbell;
use crate::faults;
use crate::lock::RunLock;
use crate::pass::{self, Services};
use crate::store::{events, runs, session, wakes, OpenMode, Store};

/// The longest single sleep while debouncing, so a more urgent event shortens the wait.
const DEBOUNCE_TICK: Duration = Duration::from_millis(250);

/// Why a run process failed: before it claimed anything (an early exit) or in a pass.
#[derive(Debug)]
pub enum RunFailure {
    Early(anyhow::Error),
    Pass(anyhow::Error),
}

impl RunFailure {
    pub fn into_error(self) -> anyhow::Error {
        match self {
            RunFailure::Early(e) | RunFailure::Pass(e) => e,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct PassReport {
    pub run_id: i64,
    pub started_by: String,
    pub events: usize,
    pub wakes: usize,
    pub verdict: String,
}

pub struct RunEnv<'a> {
    pub config: &'a Config,
    pub env: &'a crate::app::Env,
    pub state_dir: &'a Path,
    pub clock: Arc<dyn Clock>,
    pub doorbell: &'a dyn Doorbell,
    pub services: &'a Services,
    pub pid: u32,
}

/// Claimed work of one pass.
pub struct Claim {
    pub run_id: i64,
    pub session_id: i64,
    pub pass_no: u32,
    pub started_by: &'static str,
    pub events: Vec<events::Event>,
    pub wakes: Vec<wakes::Wake>,
}

pub fn run_process(env: &RunEnv<'_>) -> Result<Vec<PassReport>, RunFailure> {
    let clock = env.clock.as_ref();
    let start = clock.now_ms();
    let deadline = start + env.config.run.deadline_secs as i64 * 1000;
    let _lock = RunLock::acquire(env.state_dir, clock, deadline).map_err(RunFailure::Early)?;
    faults::point("run-after-lock").map_err(RunFailure::Early)?;
    let mut store =
        Store::open(env.state_dir, OpenMode::Create, clock.now_ms()).map_err(RunFailure::Early)?;
    recover_interrupted(&mut store, clock.now_ms()).map_err(RunFailure::Early)?;
    // vast.ai spaces creates per key: one sent by the previous process counts too.
    if let Some(vast) = &env.services.vast {
        if let Some(at) = crate::store::actions::last_create_at(&store.conn)
            .context("reading the last create time from the action ledger")
            .map_err(RunFailure::Early)?
        {
            vast.previous_create(at);
        }
    }

    let mut reports = Vec::new();
    for pass_no in 1..=env.config.run.max_passes {
        debounce_wait(&store, env, deadline).map_err(RunFailure::Early)?;
        let claim = begin_pass(&mut store, env, pass_no).map_err(RunFailure::Early)?;
        let run_id = claim.run_id;
        let result = faults::point("run-after-claim")
            .and_then(|()| pass::execute(&mut store, env, &claim, deadline))
            .and_then(|o| faults::point("run-before-finish").map(|()| o));
        match result {
            Ok(outcome) => {
                finish_ok(&mut store, run_id, &outcome, clock.now_ms())
                    .map_err(|e| RunFailure::Pass(e.context(format!("run {run_id}"))))?;
                reports.push(PassReport {
                    run_id,
                    started_by: claim.started_by.to_string(),
                    events: claim.events.len(),
                    wakes: claim.wakes.len(),
                    verdict: outcome.verdict.clone(),
                });
            }
            Err(e) => {
                let note = fail_pass(&mut store, env, run_id, &e);
                return Err(RunFailure::Pass(
                    e.context(format!("run {run_id} failed{note}")),
                ));
            }
        }
        let ready = faults::point("run-end-check")
            .and_then(|()| ready_events(&mut store, clock.now_ms()))
            .map_err(|e| RunFailure::Pass(e.context("end-of-run check")))?;
        if ready == 0 {
            faults::point("run-after-last-look").map_err(RunFailure::Pass)?;
            break;
        }
        if pass_no == env.config.run.max_passes || clock.now_ms() >= deadline {
            // Leave the rest to the next process; systemd starts it while the doorbell exists.
            log::info!("{ready} event(s) still waiting after {pass_no} pass(es); leaving them to the next run");
            ensure_doorbell(env.doorbell, ready);
            break;
        }
    }
    store.checkpoint();
    Ok(reports)
}

/// Mark passes a dead process left `running` as failed and hand their claims back.
pub fn recover_interrupted(store: &mut Store, now: Millis) -> Result<usize> {
    let tx = store.immediate()?;
    let stale = runs::running(&tx)?;
    for run in &stale {
        runs::finish_failed(
            &tx,
            run.id,
            "interrupted: the process ended before the pass finished",
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

fn debounce_wait(store: &Store, env: &RunEnv<'_>, deadline: Millis) -> Result<()> {
    let clock = env.clock.as_ref();
    let started = clock.now_ms();
    loop {
        let now = clock.now_ms();
        let top = events::ready_top_priority(&store.conn, now)?;
        let mtime = env.doorbell.mtime()?;
        match debounce::step(top, mtime, now, started, &env.config.debounce) {
            debounce::Step::Go => return Ok(()),
            debounce::Step::Wait(d) => {
                let left = deadline - now;
                if left <= 0 {
                    return Ok(());
                }
                let d = d.min(DEBOUNCE_TICK).min(Duration::from_millis(left as u64));
                clock.sleep(d);
            }
        }
    }
}

/// The transaction that creates the run row, claims every ready event and due wake, and
/// deletes the doorbell before COMMIT.
fn begin_pass(store: &mut Store, env: &RunEnv<'_>, pass_no: u32) -> Result<Claim> {
    let now = env.clock.now_ms();
    let tx = store.immediate().context("cannot begin the claim")?;
    let session_id = session::current(&tx)?;
    let waiting = events::count_ready(&tx, now)? > 0;
    let bell = env.doorbell.mtime()?.is_some();
    let started_by = if waiting || bell { "events" } else { "tick" };
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

fn finish_ok(store: &mut Store, run_id: i64, outcome: &runs::Outcome, now: Millis) -> Result<()> {
    let tx = store.immediate()?;
    runs::finish_ok(&tx, run_id, outcome, now)?;
    runs::mark_in_prompt(&tx, run_id)?;
    session::record_run_finished(&tx, true, now)?;
    tx.commit()?;
    Ok(())
}

/// A failed pass: its events and wakes go back, waiting one timer period, so a failing agent
/// never loops at full speed. Best effort: if the database itself is the problem, the next
/// run's recovery does the same. Returns a note for the one-line error.
fn fail_pass(store: &mut Store, env: &RunEnv<'_>, run_id: i64, err: &anyhow::Error) -> String {
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
fn ready_events(store: &mut Store, now: Millis) -> Result<i64> {
    let tx = store.immediate()?;
    let n = events::count_ready(&tx, now)?;
    tx.commit()?;
    Ok(n)
}

fn ensure_doorbell(doorbell: &dyn Doorbell, ready: i64) {
    if let Ok(None) = doorbell.mtime() {
        let _ = doorbell.ring(&format!("{ready} event(s) left for the next run"));
    }
}
