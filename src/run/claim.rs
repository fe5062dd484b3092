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
    let mut lines = Vec::with_capacity(stale.len());
    for run in &stale {
        // A pass a backup caught running, in a database restored from it, is no crash.
        let (error, what) = match run.error.as_deref() {
            Some(caught) if runs::caught_by_backup(Some(caught)) => (
                format!("{}; {caught}", runs::CAUGHT_BY_BACKUP_FAILED),
                "was running when the backup this database was restored from was taken",
            ),
            _ => (
                "interrupted: the process ended before the pass finished (killed, at its deadline or by hand; a crash; or a failure it could not record, as on a full disk: its last journal lines say which)".to_string(),
                "was interrupted",
            ),
        };
        runs::finish_failed(&tx, run.id, &error, now)?;
        runs::mark_in_prompt(&tx, run.id)?;
        let ev = events::hand_back(&tx, run.id, None, "pass interrupted", now)?;
        let wk = wakes::hand_back(&tx, run.id, None, now)?;
        lines.push(format!(
            "run {} {what}; handed back {} event(s) and {} wake(s) ({} event(s), {} wake(s) now failed)",
            run.id,
            ev.returned,
            wk.returned,
            ev.failed,
            wk.failed
        ));
    }
    tx.commit()?;
    // Said once committed: a commit that fails (a full disk) handed nothing back.
    for line in &lines {
        log::warn!("{line}");
    }
    Ok(stale.len())
}

/// Before a pass claims its due wakes: while the last listing found this host's clock behind
/// vast.ai's, one listing first, so that a clock set right since dates the slow hours' wakes
/// later before they are read as due (a pass that claimed first ran a wake of the slow hours
/// at once: the soak's repro, a 10-minute wake run 10 minutes early after a step back and the
/// clock set right). Likewise when a wake is overdue by more than two timer periods: the
/// clock may have stepped forward since the last pass (the away walkthrough: +6 h, and a
/// 10-minute wake ran at once, 5h51m "late", when the pass came before any `poll`), or the
/// host was away, when the listing costs one request; and when the last run was at work
/// more than [`AWAY_PERIODS`] timer periods ago ([`last_activity`]), so that [`begin`] tells an absence from a clock that
/// stepped forward (a re-test: "the first pass in 6h01m" said beside "6h ahead of vast.ai's").
/// Nothing else is done with the listing (the pass lists again); a failed listing changes
/// nothing here (the pass's own says why). Said at warning and to the agent.
pub fn settle_clock(store: &mut Store, env: &RunEnv<'_>) -> Result<()> {
    use crate::store::clock_step::{store_skew, CLOCK_SKEW_MAX_MS};
    let Some(vast) = env.services.vast.as_ref() else {
        return Ok(());
    };
    let skew = crate::store::ops::vast_health(&store.conn)?.clock_skew_ms;
    let behind = skew.is_some_and(|s| s < -CLOCK_SKEW_MAX_MS);
    // A clock known ahead needs no listing: the claim judges the wakes on vast.ai's time
    // already (a re-test: 6 h ahead with a wake for 3 h on, two listings a pass for 3 h).
    let ahead = skew.is_some_and(|s| s > CLOCK_SKEW_MAX_MS);
    let overdue = || {
        let periods = 2 * env.config.run.timer_period_secs as Millis * 1000;
        crate::store::wakes::any_due_by(&store.conn, env.clock.now_ms() - periods)
    };
    let away = || -> Result<bool> {
        let last = last_activity(&store.conn)?;
        let period = env.config.run.timer_period_secs;
        Ok(away_line(last, period, env.clock.now_ms()).is_some())
    };
    if !(behind || (!ahead && (overdue()? || away()?))) || vast.list_instances().is_err() {
        return Ok(());
    }
    let tx = store.immediate()?;
    let now = env.clock.now_ms();
    if let Some(skew) = super::observe::clock_skew(env.services, None, now) {
        for line in store_skew(&tx, skew, now)?.repaired_lines() {
            crate::journal::eprint(crate::journal::WARNING, &format!("fleetagent run: {line}"));
            events::insert(&tx, 1, "lifecycle", &line, None, now)?;
        }
    }
    tx.commit()?;
    Ok(())
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
    // Judged on vast.ai's time while this clock runs ahead of it (settle_clock measured it
    // after a long gap): a step forward is no absence.
    let ahead = crate::store::clock_step::ahead(&tx)?;
    let last = last_activity(&tx)?.map(|t| ahead.map_or(t, |a| a.recent(t, now)));
    let run_id = runs::create(&tx, session_id, env.pid, pass_no, started_by, now)?;
    if let Some(line) = away_line(last, env.config.run.timer_period_secs, now) {
        crate::journal::eprint(
            crate::journal::WARNING,
            &format!("fleetagent: run {run_id}: {line}"),
        );
        events::insert(&tx, 1, "lifecycle", &line, None, now)?;
    }
    let claimed_events = events::claim_ready(&tx, run_id, now)?;
    let claimed_wakes = wakes::claim_due(&tx, run_id, now)?;
    runs::set_claimed(&tx, run_id, claimed_events.len(), claimed_wakes.len())?;
    let removed = env.doorbell.remove()?;
    if let Err(e) = tx.commit() {
        if removed {
            // Nothing was claimed: put the ring back so the work is not stranded.
            if let Err(ring) = env.doorbell.ring("restored: claim transaction failed") {
                log::warn!(
                    "the doorbell could not be rung again after the failed claim: {}; the timer takes the events within one period",
                    crate::error::one_line(&ring)
                );
            }
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

/// Passes this many timer periods apart mean nothing ran between them (doctor's stale
/// threshold).
pub const AWAY_PERIODS: i64 = 3;

/// When this database last saw a run at work: the later of the last run's end and the last
/// run's start (a pass that died after it started never ends its run: a re-test saw each
/// later pass read as "the first in 20m, 25m, ..."). From the end, a run that waited on the
/// lock for a long pass is no absence (another re-test, counting from the starts).
pub fn last_activity(conn: &rusqlite::Connection) -> Result<Option<Millis>> {
    let ended = session::state(conn)?.last_run_finished_at;
    let started = runs::recent(conn, 1)?.first().map(|r| r.started_at);
    Ok(ended.max(started))
}

/// The line for a pass that comes more than [`AWAY_PERIODS`] timer periods after the last
/// run at work (`last`, [`last_activity`]): the timer, the host or fleetagent was stopped,
/// and the fleet billed unwatched (the away walkthrough: 3 days off, and the first pass said
/// nothing of it). None otherwise. A timer period just shortened reads the last gap against
/// the new one: said once (an hour's timer set to 5 minutes: "the first pass in 55m").
pub fn away_line(last: Option<Millis>, period_secs: u64, now: Millis) -> Option<String> {
    let last = last?;
    let gap = now - last;
    (gap > AWAY_PERIODS * period_secs as Millis * 1000).then(|| {
        format!(
            "the first pass in {} (the last run was at work {}): the timer, the host or fleetagent was stopped meanwhile, and the fleet went on billing unwatched",
            crate::clock::human_duration(gap),
            crate::clock::rfc3339(last)
        )
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
    let mut note = result.unwrap_or_else(|e| {
        format!(" (and its failure could not be recorded: {e}; the next run recovers it)")
    });
    note.push_str(&in_flight(&store.conn, run_id));
    note
}

/// The launches this pass left open (a create sent, its answer not recorded), said with the
/// failure: vast.ai may have rented them, money an operator must know of, and the next
/// pass adopts what it created (a disk that filled mid-launch said nothing of it).
fn in_flight(conn: &rusqlite::Connection, run_id: i64) -> String {
    let labels: Vec<String> = crate::store::actions::open_intents(conn)
        .unwrap_or_default()
        .into_iter()
        .filter(|a| a.run_id == Some(run_id))
        .map(|a| a.label.unwrap_or_else(|| "?".into()))
        .collect();
    if labels.is_empty() {
        return String::new();
    }
    format!(
        "; {} launch(es) in flight ({}): vast.ai may have rented them, and the next pass adopts what it created",
        labels.len(),
        labels.join(", ")
    )
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

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::path::Path;

    use super::*;
    use crate::doorbell::DoorbellStatus;

    const T: Millis = 1_800_000_000_000;

    thread_local! {
        /// The warnings logged on this thread while [`warnings`] runs.
        static WARNINGS: RefCell<Option<Vec<String>>> = const { RefCell::new(None) };
    }

    /// A logger that keeps the warnings of the threads that ask for them.
    struct Capture;

    impl log::Log for Capture {
        fn enabled(&self, meta: &log::Metadata<'_>) -> bool {
            meta.level() <= log::Level::Warn && WARNINGS.with(|w| w.borrow().is_some())
        }

        fn log(&self, record: &log::Record<'_>) {
            if self.enabled(record.metadata()) {
                WARNINGS.with(|w| {
                    if let Some(lines) = w.borrow_mut().as_mut() {
                        lines.push(record.args().to_string());
                    }
                });
            }
        }

        fn flush(&self) {}
    }

    /// What `f` returns, and the warnings it logged.
    fn warnings<R>(f: impl FnOnce() -> R) -> (R, Vec<String>) {
        static INSTALL: std::sync::Once = std::sync::Once::new();
        INSTALL.call_once(|| {
            if log::set_logger(&Capture).is_ok() {
                log::set_max_level(log::LevelFilter::Warn);
            }
        });
        WARNINGS.with(|w| *w.borrow_mut() = Some(Vec::new()));
        let out = f();
        (
            out,
            WARNINGS.with(|w| w.borrow_mut().take()).unwrap_or_default(),
        )
    }

    /// A doorbell on a full disk: it was rung (the run deletes it) and cannot be rung again.
    struct FullDoorbell;

    impl Doorbell for FullDoorbell {
        fn ring(&self, _line: &str) -> Result<()> {
            Err(std::io::Error::from_raw_os_error(libc::ENOSPC)).context("cannot write doorbell")
        }

        fn mtime(&self) -> Result<Option<Millis>> {
            Ok(Some(T))
        }

        fn remove(&self) -> Result<bool> {
            Ok(true)
        }

        fn status(&self) -> Result<DoorbellStatus> {
            anyhow::bail!("not read here")
        }

        fn path(&self) -> &Path {
            Path::new("(full disk)")
        }
    }

    /// Every COMMIT on `store` fails (a deferred foreign key left broken by a write to `runs`),
    /// as on a full disk, until [`commits_succeed`].
    fn commits_fail(store: &Store) {
        store
            .conn
            .execute_batch(
                "CREATE TEMP TABLE parent (id INTEGER PRIMARY KEY);
                 CREATE TEMP TABLE child (p INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED);
                 CREATE TEMP TRIGGER break_commit AFTER INSERT ON main.runs BEGIN INSERT INTO child VALUES (1); END;
                 CREATE TEMP TRIGGER break_commit_update AFTER UPDATE ON main.runs BEGIN INSERT INTO child VALUES (1); END;",
            )
            .unwrap();
    }

    fn commits_succeed(store: &Store) {
        store
            .conn
            .execute_batch("DROP TRIGGER temp.break_commit; DROP TRIGGER temp.break_commit_update;")
            .unwrap();
    }

    #[test]
    fn a_failed_claim_names_a_doorbell_it_cannot_ring_again() {
        let mut store = Store::open_memory(T).unwrap();
        events::insert(&store.conn, 1, "trigger", "work", None, T).unwrap();
        commits_fail(&store);
        let config = crate::config::Config::default();
        let clock = crate::clock::ManualClock::new(T);
        let services = crate::services::Services::default();
        let process_env = crate::env::Env::default();
        let env = RunEnv {
            ctx: crate::services::Ctx {
                config: &config,
                env: &process_env,
                clock: &clock,
                services: &services,
            },
            state_dir: Path::new("/nonexistent"),
            doorbell: &FullDoorbell,
            pid: 1,
            peer: None,
            config_changed: None,
        };
        let (claimed, said) = warnings(|| begin(&mut store, &env, 1));
        let err = crate::error::one_line(&claimed.err().expect("the commit fails"));
        assert!(err.starts_with("cannot commit the claim"), "{err}");
        assert_eq!(
            said,
            ["the doorbell could not be rung again after the failed claim: cannot write doorbell: \
              No space left on device (os error 28); the timer takes the events within one period"]
        );
        // Nothing was claimed: the event waits for the timer.
        assert_eq!(events::count_ready(&store.conn, T).unwrap(), 1);
    }

    #[test]
    fn an_interrupted_run_is_said_handed_back_only_once_committed() {
        let mut store = Store::open_memory(T).unwrap();
        let session = session::current(&store.conn).unwrap();
        let run = runs::create(&store.conn, session, 1, 1, runs::StartedBy::Tick, T).unwrap();
        commits_fail(&store);
        let (recovered, said) = warnings(|| recover_interrupted(&mut store, T + 1));
        assert!(recovered.is_err(), "the commit fails");
        assert_eq!(said, Vec::<String>::new(), "nothing was handed back");
        let status = |s: &Store| runs::get(&s.conn, run).unwrap().unwrap().status;
        assert_eq!(status(&store), runs::Status::Running);

        commits_succeed(&store);
        let (recovered, said) = warnings(|| recover_interrupted(&mut store, T + 2));
        assert_eq!(recovered.unwrap(), 1);
        assert_eq!(
            said,
            [format!(
                "run {run} was interrupted; handed back 0 event(s) and 0 wake(s) (0 event(s), 0 wake(s) now failed)"
            )]
        );
        assert_eq!(status(&store), runs::Status::Failed);
    }

    /// A pass that fails with a create sent and its answer unrecorded says so in its error
    /// line: money may have been spent, and the next pass adopts it.
    #[test]
    fn a_failed_pass_names_the_launches_it_left_in_flight() {
        let store = Store::open_memory(T).unwrap();
        let session = session::current(&store.conn).unwrap();
        let run = runs::create(&store.conn, session, 1, 1, runs::StartedBy::Tick, T).unwrap();
        assert_eq!(in_flight(&store.conn, run), "");
        store
            .conn
            .execute(
                "INSERT INTO actions (run_id, kind, outcome, actor, label, created_at)
                 VALUES (?1, 'launch', 'intent', 'llm', 'fa-abc-r1-0a1b2c3d', ?2),
                        (?1, 'launch', 'ok', 'llm', 'fa-abc-r1-0a1b2c3e', ?2)",
                rusqlite::params![run, T],
            )
            .unwrap();
        assert_eq!(
            in_flight(&store.conn, run),
            "; 1 launch(es) in flight (fa-abc-r1-0a1b2c3d): vast.ai may have rented them, and the next pass adopts what it created"
        );
        assert_eq!(in_flight(&store.conn, run + 1), "");
    }

    /// A backup taken while a pass ran, restored: that pass is handed back as an interrupted
    /// one is, but it is no crash (its outcome is in the database the backup was taken
    /// from), and `doctor` counts no failure (a walkthrough saw it red for an hour).
    #[test]
    fn a_pass_a_backup_caught_running_is_no_failure_once_restored() {
        let (dir, mut live) = crate::store::test_store(T);
        events::insert(&live.conn, 1, "trigger", "work", None, T).unwrap();
        let run = runs::create(&live.conn, 1, 7, 1, runs::StartedBy::Events, T).unwrap();
        assert_eq!(events::claim_ready(&live.conn, run, T).unwrap().len(), 1);
        let restored = tempfile::tempdir().unwrap();
        let copy = restored.path().join(crate::store::DB_FILE);
        crate::store::backup::to_file(&live.conn, &copy, T + 1000).unwrap();
        let mut copy = Store::open(
            restored.path(),
            crate::store::OpenMode::Existing,
            T + 60_000,
        )
        .unwrap();
        assert_eq!(recover_interrupted(&mut copy, T + 60_000).unwrap(), 1);
        let row = runs::get(&copy.conn, run).unwrap().unwrap();
        let error = row.error.unwrap();
        assert!(error.starts_with(runs::CAUGHT_BY_BACKUP_FAILED), "{error}");
        assert!(
            error.ends_with("caught running by `fleetagent backup` at 2027-01-15T08:00:01Z"),
            "{error}"
        );
        assert_eq!(
            crate::store::health::failed_since(&copy.conn, 0).unwrap(),
            None
        );
        assert_eq!(
            events::count_ready(&copy.conn, T + 60_000 + 3_600_000).unwrap(),
            1,
            "handed back"
        );
        // The live database's own pass, killed, is a failure as before.
        assert_eq!(recover_interrupted(&mut live, T + 60_000).unwrap(), 1);
        let failed = crate::store::health::failed_since(&live.conn, 0)
            .unwrap()
            .unwrap();
        assert!(failed
            .last
            .error
            .unwrap()
            .starts_with("interrupted: the process ended"));
        drop(dir);
    }
}

#[cfg(test)]
mod away_tests {
    use super::*;

    #[test]
    fn a_pass_is_away_past_three_timer_periods_after_the_last_run_at_work() {
        let now = 1_000_000_000;
        let min = 60_000;
        assert_eq!(away_line(None, 300, now), None);
        assert_eq!(away_line(Some(now - 15 * min), 300, now), None);
        let line = away_line(Some(now - 15 * min - 1), 300, now).unwrap();
        assert!(line.starts_with("the first pass in 15m"), "{line}");
        let line = away_line(Some(now - 3 * 86_400_000), 300, now).unwrap();
        assert!(
            line.starts_with(
                "the first pass in 3d00h (the last run was at work 1970-01-09T13:46:40Z)"
            ),
            "{line}"
        );
    }
}
