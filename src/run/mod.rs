//! One `run` process, as the timer and the path unit start it. Read top to bottom, this file
//! and `pass.rs` are the whole run:
//!
//! 1. take the lock (`lock`: single flight, waiting up to the deadline), open the database,
//!    hand back what a crashed pass claimed (`claim::recover_interrupted`), and carry
//!    vast.ai's create spacing over from the previous process (`ratelimit`);
//! 2. for each pass: wait for the doorbell to be quiet (`trigger::debounce`), claim every
//!    ready event and due wake in one transaction that deletes the doorbell
//!    (`claim::begin`), run the pass (`pass::execute`: observe, decide, act, record),
//!    finish its run row, or hand its claim back when it failed (`claim::fail`);
//! 3. look once more, by state: ready events mean another pass (up to `max_passes`).
//!
//! Any failure before a claim is an early exit: the doorbell goes (systemd would restart the
//! service at once while it exists; the events stay for the timer).

pub mod act;
pub mod boots;
pub mod claim;
pub mod lineage;
pub mod observe;
pub mod pass;
pub mod sample;
pub mod undone;
pub mod vanished;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;

use crate::clock::{Clock, Millis};
use crate::doorbell::{Doorbell, FileDoorbell};
use crate::faults;
use crate::lock::RunLock;
use crate::store::{events, runs, OpenMode, Store};
use crate::trigger::debounce;

pub use claim::Claim;

/// The longest single sleep while debouncing, so a more urgent event shortens the wait.
const DEBOUNCE_TICK: Duration = Duration::from_millis(250);
/// When the state dir is unknown and no terminal is attached (systemd), an early exit waits
/// this long so systemd (which restarts the service while the doorbell exists) runs it at
/// most twice a minute.
const UNKNOWN_DIR_EXIT_DELAY: Duration = Duration::from_secs(30);
/// A pass whose launch vast.ai refused with HTTP 429 (the client's retries spent) is followed
/// by another pass in the same process this long after, not at the next timer tick: what it
/// launched for is still wanted, and a storm of 429s costs a whole timer period per try
/// otherwise. A minute is far above vast.ai's create interval (4.5 s, 12 s penalty).
pub const RATE_LIMITED_RETRY: Duration = Duration::from_secs(60);
/// ...while this much of the deadline is left after the wait: one pass in a storm spends up
/// to a minute per create it tries.
const RATE_LIMITED_RETRY_SLACK: Duration = Duration::from_secs(180);

/// Why a run process failed: before it claimed anything (an early exit) or in a pass.
#[derive(Debug)]
pub enum RunFailure {
    Early(anyhow::Error),
    Pass(anyhow::Error),
}

#[derive(Debug, Clone, PartialEq)]
pub struct PassReport {
    pub run_id: i64,
    pub started_by: runs::StartedBy,
    pub events: usize,
    pub wakes: usize,
    pub verdict: runs::Verdict,
    /// What its launches and stops came to, in words (empty: none asked for).
    pub actions: String,
    /// vast.ai's listing failed in this pass (not "no key"): the process exits 1.
    pub vast_error: Option<String>,
    /// The demand probe failed in this pass: demand unknown, the fleet held.
    pub demand_error: Option<String>,
    /// The LLM was unusable and the fallback decided.
    pub fell_back: bool,
}

pub struct RunEnv<'a> {
    pub ctx: crate::services::Ctx<'a>,
    pub state_dir: &'a Path,
    pub doorbell: &'a dyn Doorbell,
    pub pid: u32,
    /// A peer decides in the rules' place (`policy::peer`; only the simulator sets one).
    pub peer: Option<&'a dyn crate::policy::peer::Peer>,
    /// Whether the config file no longer says what this process loaded (`run`: read again
    /// before each pass; None in the simulator): a changed config is a new process's.
    pub config_changed: Option<&'a dyn Fn() -> bool>,
}

crate::deref_ctx!(RunEnv);

pub fn run_process(env: &RunEnv<'_>) -> Result<Vec<PassReport>, RunFailure> {
    let deadline = env.clock.now_ms() + env.config.run.deadline_secs as i64 * 1000;
    let (mut lock, mut store, follower) = start(env, deadline).map_err(|e| early(env, e))?;
    if let Some(line) = follower {
        // Not ours to act: what this host's doorbell announced is in the shared inbox now.
        let _ = env.doorbell.remove();
        // Under systemd stdout is the journal too: the line once, not twice.
        if !crate::journal::active() {
            log::info!(target: "fleetagent::notice", "{line}");
        }
        crate::outln!("{line}");
        return Ok(Vec::new());
    }
    let opened = file_identity(&store.path);
    let mut reports = Vec::new();
    for pass_no in 1..=env.config.run.max_passes {
        store
            .take_inbox(env.clock.now_ms())
            .map_err(|e| early(env, e))?;
        debounce_wait(&store, env, deadline).map_err(|e| early(env, e))?;
        if env.config_changed.is_some_and(|changed| changed()) {
            // Edited while this process waited (for the lock, the debounce) or between its
            // passes: the operator's new caps and keys are a new process's.
            config_changed(&mut store, env, pass_no).map_err(|e| early(env, e))?;
            break;
        }
        claim::settle_clock(&mut store, env).map_err(|e| early(env, e))?;
        let claim = claim::begin(&mut store, env, pass_no).map_err(|e| early(env, e))?;
        lock.record_run(claim.run_id);
        reports.push(one_pass(&mut store, env, &claim, deadline).map_err(RunFailure::Pass)?);
        if another_pass(&mut store, env, pass_no, deadline).map_err(RunFailure::Pass)? {
            continue;
        }
        if !retry_rate_limited(&store, env, claim.run_id, pass_no, deadline)
            .map_err(RunFailure::Pass)?
        {
            break;
        }
    }
    store.checkpoint();
    if opened.is_some() && file_identity(&store.path) != opened {
        // SQLite wrote to the file it had open, which no longer has this name: nothing this
        // process recorded is in the state dir's database.
        return Err(RunFailure::Pass(anyhow::anyhow!(
            "the database {} was deleted or replaced while this run was writing it: what the run recorded is not in it (restore the database, docs/operations.md \"Recovering the database\")",
            store.path.display()
        )));
    }
    Ok(reports)
}

/// The config changed since this process read it: no more passes here. Events waiting keep
/// (or get back) their doorbell, so a new process takes them at once; with none, the timer's
/// next pass reads the new config. Nothing is claimed.
fn config_changed(store: &mut Store, env: &RunEnv<'_>, pass_no: u32) -> Result<()> {
    let ready = claim::ready_events(store, env.clock.now_ms())?;
    if ready > 0 {
        claim::ensure_doorbell(env.doorbell, ready);
    }
    let line = format!(
        "the config changed since this process read it{}: no pass on the old one; {}",
        if pass_no == 1 {
            ""
        } else {
            " (after its first pass)"
        },
        if ready > 0 {
            format!(
                "{ready} event(s) wait for a new process, which reads it (the doorbell is rung)"
            )
        } else {
            "the next pass reads it".to_string()
        }
    );
    crate::journal::eprint(
        crate::journal::NOTICE_PRIORITY,
        &format!("fleetagent: {line}"),
    );
    Ok(())
}

/// The file a path names (device, inode), or None when none does.
fn file_identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// Lock, database, with `[ha]` the lease (a follower's line instead, and nothing else), recovery
/// of interrupted passes, and vast.ai's create spacing carried over from the previous process
/// (vast.ai spaces creates per key: one sent by it counts too).
fn start(env: &RunEnv<'_>, deadline: Millis) -> Result<(RunLock, Store, Option<String>)> {
    let clock = env.clock;
    let lock = RunLock::acquire(env.state_dir, clock, deadline)?;
    faults::point("run-after-lock")?;
    let mut store = Store::open(env.state_dir, OpenMode::Create, clock.now_ms())?;
    let ha = crate::ha::node::Settings::of(env.config, env.env)?;
    if ha.is_none() {
        let taken = crate::store::events::take_outbox(&store.conn, clock.now_ms())?;
        if taken > 0 {
            log::info!("took {taken} event(s) from this host's outbox ([ha] is off): written while it was on, or by a trigger that could not read the config");
        }
    }
    if let Some(settings) = ha {
        let started = crate::ha::node::start(&settings, &mut store, clock.now_ms(), Some(""))?;
        if let Some(line) = started.not_leading(&settings.host) {
            return Ok((lock, store, Some(line)));
        }
        if let crate::ha::node::Start::Leader { epoch, synced, .. } = &started {
            log::info!(
                "ha: this host ({}) leads at epoch {epoch} ({synced:?})",
                settings.host
            );
        }
    }
    if claim::recover_interrupted(&mut store, clock.now_ms())? > 0 {
        store.fence("recovering interrupted passes")?;
    }
    continue_past_the_lock(&lock, &store)?;
    if let Some(vast) = &env.services.vast {
        if let Some(at) = crate::ratelimit::previous_create_at(&store.conn)? {
            vast.previous_create(at);
        }
    }
    Ok((lock, store, None))
}

/// A database older than the runs its state dir gave (restored from an older backup, or one
/// that lost its last writes with its WAL) would give their ids again, and with them labels an
/// instance already carried: the next run id goes past the lock's `last-run` note, said once.
fn continue_past_the_lock(lock: &RunLock, store: &Store) -> Result<()> {
    let Some(last) = lock.last_run() else {
        return Ok(());
    };
    let next = store.next_run_id()?;
    if next > last {
        return Ok(());
    }
    if crate::lock::next_past(last, next).is_none() {
        // Not a run this state dir gave (a hand edit, a damaged file): going past it would
        // spend the id space (SQLite's AUTOINCREMENT stops at 2^63 - 1).
        log::warn!(
            "{} says run {last} was given, far past this database's next run ({next}): not a run id this state dir gave; ignored (delete its last-run line, or the file, to clear this)",
            lock.path.display()
        );
        return Ok(());
    }
    crate::store::runs::continue_past(&store.conn, last)?;
    log::warn!(
        "{} says run {last} was given, and this database's next run would be {next}: the database is older than this state dir's runs (restored from a backup, or it lost its last writes); run ids go on from {}",
        lock.path.display(),
        last + 1
    );
    Ok(())
}

/// One claimed pass: run it and finish its row, or hand its claim back.
fn one_pass(
    store: &mut Store,
    env: &RunEnv<'_>,
    claim: &Claim,
    deadline: Millis,
) -> Result<PassReport> {
    let run_id = claim.run_id;
    let result = faults::point("run-after-claim")
        .and_then(|()| pass::execute(store, env, claim, deadline))
        .and_then(|o| faults::point("run-before-finish").map(|()| o));
    match result {
        Ok(done) => {
            claim::finish_ok(store, run_id, &done.outcome, env.clock.now_ms())
                .map_err(|e| e.context(format!("run {run_id}")))?;
            Ok(PassReport {
                run_id,
                started_by: claim.started_by,
                events: claim.events.len(),
                wakes: claim.wakes.len(),
                verdict: done.outcome.verdict,
                actions: done.words,
                vast_error: done.vast_error,
                demand_error: done.demand_error,
                fell_back: done.fell_back,
            })
        }
        Err(e) => {
            let note = claim::fail(store, env, run_id, &e);
            Err(e.context(format!("run {run_id} failed{note}")))
        }
    }
}

/// The last look, by state: another pass while events are ready, up to `max_passes` and the
/// deadline; past them the doorbell is left for the next process.
fn another_pass(
    store: &mut Store,
    env: &RunEnv<'_>,
    pass_no: u32,
    deadline: Millis,
) -> Result<bool> {
    let ready = faults::point("run-end-check")
        .and_then(|()| store.take_inbox(env.clock.now_ms()))
        .and_then(|_| claim::ready_events(store, env.clock.now_ms()))
        .map_err(|e| e.context("end-of-run check"))?;
    if ready == 0 {
        faults::point("run-after-last-look")?;
        return Ok(false);
    }
    if pass_no == env.config.run.max_passes || env.clock.now_ms() >= deadline {
        // Leave the rest to the next process; systemd starts it while the doorbell exists.
        log::info!(
            "{ready} event(s) still waiting after {pass_no} pass(es); leaving them to the next run"
        );
        claim::ensure_doorbell(env.doorbell, ready);
        return Ok(false);
    }
    Ok(true)
}

/// After a pass whose own launch (not the model's: it reads the refusal and decides) vast.ai
/// refused with 429, retries spent: wait [`RATE_LIMITED_RETRY`] and run another pass, up to
/// `max_passes` and while the deadline leaves room. `false`: the process ends as before.
fn retry_rate_limited(
    store: &Store,
    env: &RunEnv<'_>,
    run_id: i64,
    pass_no: u32,
    deadline: Millis,
) -> Result<bool> {
    if pass_no >= env.config.run.max_passes {
        return Ok(false);
    }
    let room = (RATE_LIMITED_RETRY + RATE_LIMITED_RETRY_SLACK).as_millis() as Millis;
    if env.clock.now_ms() + room > deadline {
        return Ok(false);
    }
    if crate::store::actions::own_launches_rate_limited(&store.conn, run_id)? == 0 {
        return Ok(false);
    }
    log::info!(
        "vast.ai rate-limited a launch of run {run_id}: another pass in {}s",
        RATE_LIMITED_RETRY.as_secs()
    );
    env.clock.sleep(RATE_LIMITED_RETRY);
    Ok(true)
}

/// A failure before any claim: the doorbell goes so systemd does not restart a failing run
/// (the events stay; the timer retries).
fn early(env: &RunEnv<'_>, err: anyhow::Error) -> RunFailure {
    // The caller (`cmd::run`) deletes it again, and waits before exiting when it cannot.
    let _ = remove_doorbell(env.doorbell);
    RunFailure::Early(err)
}

/// Deletes the doorbell of a run that fails before it starts; the error when it cannot (a
/// state dir this user cannot write, a read-only file system): it is still there.
fn remove_doorbell(bell: &dyn Doorbell) -> std::result::Result<bool, String> {
    match bell.remove() {
        Ok(true) => {
            // info, not warn: the error itself is the one line a failed run prints.
            log::info!(
                "deleted the doorbell {} so systemd does not restart a failing run; events stay for the timer",
                bell.path().display()
            );
            Ok(true)
        }
        Ok(false) => Ok(false),
        Err(e) => Err(crate::error::report(&e)),
    }
}

/// Where an early exit looks for the doorbell: no dir, a dir known for sure (the flag, the
/// config's), or `$STATE_DIRECTORY` while a config that may name another dir cannot be read.
#[derive(Clone, Copy, Debug)]
pub enum DoorbellDir<'a> {
    Unknown,
    Known(&'a Path),
    /// A doorbell found there goes; none found may mean the real one is elsewhere.
    Guessed(&'a Path),
}

/// An exit before the run could start (config, state dir, credentials). With the state dir
/// known (or guessed, and a doorbell found there), the doorbell goes and the error is
/// returned. When it cannot go (the dir unknown, a guess without one, or not writable by
/// this user), at a terminal (`at_terminal`: stdin or stderr is one, so
/// someone typed the command) the error is returned at once; otherwise (systemd restarts the
/// service while the doorbell exists) the error is printed first, then why the process waits,
/// then it waits [`UNKNOWN_DIR_EXIT_DELAY`] and exits with the error's code (a quiet error:
/// already printed).
pub fn exit_before_start(
    clock: &dyn Clock,
    dir: DoorbellDir<'_>,
    at_terminal: bool,
    err: anyhow::Error,
) -> anyhow::Error {
    let why = match dir {
        DoorbellDir::Known(d) | DoorbellDir::Guessed(d) => {
            match (remove_doorbell(&FileDoorbell::new(d)), dir) {
                (Ok(false), DoorbellDir::Guessed(d)) => format!(
                    "$STATE_DIRECTORY ({}) has no doorbell, and the config, which may name another \
                     state dir, cannot be read, so that dir's doorbell cannot be deleted",
                    d.display()
                ),
                (Ok(_), _) => return err,
                (Err(e), _) => format!("its doorbell could not be deleted ({e})"),
            }
        }
        DoorbellDir::Unknown => {
            "the state dir is unknown (neither --state-dir nor $STATE_DIRECTORY names it, \
                 and the error above keeps the config from naming it), so its doorbell cannot \
                 be deleted"
                .to_string()
        }
    };
    if at_terminal {
        return err;
    }
    let text = format!("fleetagent: {}", crate::error::report(&err));
    crate::journal::eprint(crate::journal::ERR, &text);
    log::warn!(
        "waiting {}s before exiting: {why}, and systemd restarts the service at once while the \
         doorbell exists; this way it runs at most twice a minute until the error is fixed",
        UNKNOWN_DIR_EXIT_DELAY.as_secs()
    );
    clock.sleep(faults::exit_delay().unwrap_or(UNKNOWN_DIR_EXIT_DELAY));
    crate::error::Quiet(crate::error::exit_code(&err)).into()
}

/// Hard stop past the deadline (plus a grace period): the kernel frees the lock, and the
/// next run recovers the interrupted pass. systemd's TimeoutStartSec is the outer bound.
pub fn spawn_watchdog(clock: Arc<dyn Clock>, deadline_secs: u64) {
    let limit = Duration::from_secs(deadline_secs + 30);
    let _ = std::thread::Builder::new()
        .name("deadline".into())
        .spawn(move || {
            clock.sleep(limit);
            let text = format!(
                "fleetagent: run exceeded its deadline of {deadline_secs}s (+30s grace); exiting"
            );
            crate::journal::eprint(crate::journal::ERR, &text);
            std::process::exit(crate::error::EXIT_RUNTIME);
        });
}

fn debounce_wait(store: &Store, env: &RunEnv<'_>, deadline: Millis) -> Result<()> {
    let clock = env.clock;
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
