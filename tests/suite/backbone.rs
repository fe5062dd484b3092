//! The backbone with the real binary and real SQLite: triggers, the doorbell, debounce,
//! single flight, crash recovery, run ids, wakes, reset-session and bad input.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::time::{Duration, Instant};

use crate::common::fleet::{Fleet, FAST_CONFIG};

/// (id, started_by, status, verdict, events_claimed, wakes_claimed, started_at, finished_at)
type RunRow = (
    i64,
    String,
    String,
    Option<String>,
    i64,
    i64,
    i64,
    Option<i64>,
);

fn runs(f: &Fleet) -> Vec<RunRow> {
    let db = f.db();
    let mut stmt = db
        .prepare(
            "SELECT id, started_by, status, verdict, events_claimed, wakes_claimed, started_at, finished_at
             FROM runs ORDER BY id",
        )
        .unwrap();
    let rows = stmt
        .query_map([], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
                r.get(7)?,
            ))
        })
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    rows
}

fn mtime_ms(path: &std::path::Path) -> i64 {
    let m = std::fs::metadata(path).unwrap().modified().unwrap();
    m.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

#[test]
fn hundred_triggers_one_pass() {
    let f = Fleet::new();
    for i in 0..100 {
        f.cmd(&[
            "trigger",
            "--priority",
            "1",
            "--reason",
            &format!("change {i}"),
        ])
        .ok();
    }
    // Measured before this test opens the database (its close would checkpoint): 100
    // triggers write about 2 MB of WAL, and every process re-reads the WAL at open, so the
    // processes keep it under 256 KiB (and one more trigger's frames).
    let wal = f.path().join("state/fleetagent.db-wal");
    let wal_len = || std::fs::metadata(&wal).map_or(0, |m| m.len());
    assert!(wal_len() <= (256 + 64) << 10, "WAL of {} bytes", wal_len());
    assert_eq!(f.count("SELECT COUNT(*) FROM events"), 100);
    let bell = f.doorbell();
    assert!(bell.exists());
    assert_eq!(std::fs::read_to_string(&bell).unwrap().lines().count(), 100);
    let last_ring = mtime_ms(&bell);

    let out = f.cmd(&["run"]).ok();
    assert!(out.stdout.contains("100 event(s)"), "{}", out.stdout);
    assert_eq!(wal_len(), 0, "a run truncates the WAL when it ends");
    let rows = runs(&f);
    assert_eq!(rows.len(), 1, "one run row: {rows:?}");
    let (_, started_by, status, verdict, events, _, started_at, _) = &rows[0];
    assert_eq!(started_by, "events");
    assert_eq!(status, "ok");
    assert_eq!(verdict.as_deref(), Some("no-action"));
    assert_eq!(*events, 100);
    // Claimed only after the doorbell had been quiet for the P1 window (1 s in FAST_CONFIG).
    assert!(
        *started_at - last_ring >= 1_000,
        "claimed {} ms after the last ring",
        started_at - last_ring
    );
    assert!(!bell.exists(), "the pass deletes the doorbell");
    assert_eq!(
        f.count("SELECT COUNT(*) FROM events WHERE claimed_by IS NULL"),
        0
    );
    let v = f.inspect();
    assert_eq!(v["unconsumed_events"], 0);
    assert_eq!(v["doorbell"]["exists"], false);
}

#[test]
fn event_during_a_pass_gets_another_pass_in_the_same_process() {
    let f = Fleet::new().env("FLEETAGENT_TEST_PAUSE_AT", "run-after-observe:1500");
    f.cmd(&["trigger", "-p", "0", "-r", "first"]).ok();
    let child = f.spawn(&["run"]);
    // Wait until the first pass has claimed (the doorbell is gone), then ring again.
    wait_for(|| !f.doorbell().exists(), "first claim");
    f.cmd(&["trigger", "-p", "0", "-r", "during the pass"]).ok();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows = runs(&f);
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(rows[0].4, 1);
    assert_eq!(rows[1].4, 1, "the second pass claimed the mid-pass event");
    assert!(!f.doorbell().exists());
    assert_eq!(f.inspect()["unconsumed_events"], 0);
}

#[test]
fn event_after_the_last_look_recreates_the_doorbell() {
    let f = Fleet::new().env("FLEETAGENT_TEST_PAUSE_AT", "run-after-last-look:1500");
    f.cmd(&["trigger", "-p", "0", "-r", "first"]).ok();
    let child = f.spawn(&["run"]);
    wait_for(
        || f.count("SELECT COUNT(*) FROM runs WHERE status = 'ok'") == 1,
        "first pass finished",
    );
    std::thread::sleep(Duration::from_millis(200));
    f.cmd(&["trigger", "-p", "0", "-r", "after the last look"])
        .ok();
    assert!(child.wait_with_output().unwrap().status.success());
    assert_eq!(runs(&f).len(), 1, "the exiting process does not take it");
    assert!(
        f.doorbell().exists(),
        "the ring re-created the doorbell, so systemd starts the agent again"
    );
    f.cmd(&["run"]).ok();
    let rows = runs(&f);
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[1].4, 1, "the next run claims it");
}

#[test]
fn two_runs_never_overlap() {
    let f = Fleet::new().env("FLEETAGENT_TEST_PAUSE_AT", "run-after-claim:1200");
    f.cmd(&["trigger", "-p", "0", "-r", "x"]).ok();
    let a = f.spawn(&["run"]);
    let b = f.spawn(&["run"]);
    let oa = a.wait_with_output().unwrap();
    let ob = b.wait_with_output().unwrap();
    assert!(oa.status.success() && ob.status.success());
    let rows = runs(&f);
    assert_eq!(rows.len(), 2, "each process did its own pass: {rows:?}");
    let (s0, e0) = (rows[0].6, rows[0].7.unwrap());
    let (s1, e1) = (rows[1].6, rows[1].7.unwrap());
    assert!(e0 <= s1 || e1 <= s0, "passes overlap: {rows:?}");
}

#[test]
fn sigkill_at_every_point_then_recovery() {
    for point in [
        "run-after-lock",
        "run-after-claim",
        "run-after-observe",
        "run-before-finish",
        "run-end-check",
    ] {
        let f = Fleet::new();
        f.cmd(&["trigger", "-p", "0", "-r", "before crash"]).ok();
        f.cmd(&["wakes", "add", "--in", "0s", "--reason", "due now"])
            .ok();
        let crashed = f
            .command(&["run"])
            .env("FLEETAGENT_TEST_CRASH_AT", point)
            .output()
            .unwrap();
        assert!(!crashed.status.success(), "{point}: the process was killed");
        // The database is consistent and the lock is free.
        assert_eq!(
            f.db()
                .query_row("PRAGMA integrity_check", [], |r| r.get::<_, String>(0))
                .unwrap(),
            "ok"
        );
        let v = f.inspect();
        assert_eq!(v["lock_held"], false, "{point}");
        f.cmd(&["run"]).ok();
        let rows = runs(&f);
        let last = rows.last().unwrap();
        assert_eq!(last.2, "ok", "{point}: {rows:?}");
        if point != "run-after-lock" && point != "run-end-check" {
            // The interrupted pass is failed and its claims went to the next pass.
            assert_eq!(rows[0].2, "failed", "{point}: {rows:?}");
        }
        if point == "run-before-finish"
            || point == "run-after-observe"
            || point == "run-after-claim"
        {
            assert_eq!(last.4, 1, "{point}: the event was handed back: {rows:?}");
            assert_eq!(last.5, 1, "{point}: the wake was handed back: {rows:?}");
        }
        assert_eq!(
            f.count("SELECT COUNT(*) FROM events WHERE claimed_by IS NULL"),
            0,
            "{point}"
        );
        assert_eq!(
            f.count("SELECT COUNT(*) FROM wakes WHERE status = 'processed' AND processed_by IN (SELECT id FROM runs WHERE status = 'ok')"),
            1,
            "{point}: the wake was processed once by a pass that finished"
        );
        assert_eq!(
            f.count("SELECT COUNT(*) FROM runs WHERE status = 'running'"),
            0
        );
    }
}

#[test]
fn run_ids_strictly_increase_and_are_never_reused() {
    let f = Fleet::new();
    let mut ids = Vec::new();
    for i in 0..3 {
        f.cmd(&["trigger", "-p", "0", "-r", &format!("t{i}")]).ok();
        f.cmd(&["run"]).ok();
        if i == 1 {
            f.cmd(&["reset-session"]).ok();
            f.cmd(&["run"]).ok();
        }
    }
    for r in runs(&f) {
        ids.push(r.0);
    }
    assert!(ids.windows(2).all(|w| w[1] > w[0]), "{ids:?}");
    let max = *ids.last().unwrap();
    // Delete every run row: ids still go on.
    f.db()
        .execute_batch("DELETE FROM messages; UPDATE events SET claimed_by = NULL; UPDATE wakes SET processed_by = NULL; DELETE FROM runs;")
        .unwrap();
    assert_eq!(f.inspect()["next_run_id"], max + 1);
    f.cmd(&["run"]).ok();
    let after = runs(&f);
    assert_eq!(after.len(), 1);
    assert_eq!(after[0].0, max + 1, "never reused");
}

#[test]
fn twenty_overdue_wakes_claimed_once_and_folded() {
    let f = Fleet::new();
    for i in 0..20 {
        f.cmd(&[
            "wakes",
            "add",
            "--at",
            &format!("2026-01-01T00:{i:02}:00Z"),
            "--reason",
            "check fleet",
        ])
        .ok();
    }
    let v = f.inspect();
    assert_eq!(v["pending_wakes"], 20);
    assert_eq!(v["overdue_wakes"], 20);
    f.cmd(&["run"]).ok();
    f.cmd(&["run"]).ok();
    let rows = runs(&f);
    assert_eq!(rows[0].5, 20, "one pass claimed all 20: {rows:?}");
    assert_eq!(rows[1].5, 0, "a processed wake is never seen again");
    assert_eq!(
        f.count("SELECT COUNT(DISTINCT processed_by) FROM wakes WHERE status = 'processed'"),
        1
    );
    let obs: String = f
        .db()
        .query_row(
            "SELECT content FROM messages WHERE run_id = ?1 AND kind = 'observation'",
            [rows[0].0],
            |r| r.get(0),
        )
        .unwrap();
    let wake_lines: Vec<&str> = obs.lines().filter(|l| l.contains("Wake")).collect();
    assert_eq!(wake_lines.len(), 1, "{obs}");
    assert!(wake_lines[0].contains("Wakes due (20"), "{obs}");
    let obs2: String = f
        .db()
        .query_row(
            "SELECT content FROM messages WHERE run_id = ?1 AND kind = 'observation'",
            [rows[1].0],
            |r| r.get(0),
        )
        .unwrap();
    assert!(!obs2.contains("Wake"), "{obs2}");
    let v = f.inspect();
    assert_eq!(v["pending_wakes"], 0);
    assert_eq!(v["overdue_wakes"], 0);
}

#[test]
fn reset_session_cancels_wakes_rings_and_cannot_silence_the_agent() {
    let f = Fleet::new();
    f.cmd(&["trigger", "-p", "1", "-r", "x"]).ok();
    f.cmd(&["run"]).ok();
    for _ in 0..4 {
        f.cmd(&["wakes", "add", "--in", "2h", "--reason", "later"])
            .ok();
    }
    // Several at once, all or none: an id that is not pending cancels nothing.
    f.refused(&["wakes", "cancel", "1", "2", "99"], "no wake with id 99");
    assert_eq!(f.inspect()["pending_wakes"], 4);
    let out = f.cmd(&["wakes", "cancel", "1", "2"]).ok();
    assert_eq!(out.stdout, "wake 1 cancelled\nwake 2 cancelled\n");
    let before = f.inspect();
    assert_eq!(before["pending_wakes"], 2);
    let out = f.cmd(&["reset-session"]).ok();
    assert!(
        out.stdout.contains("cancelled 2 pending wake(s)"),
        "{}",
        out.stdout
    );
    assert!(f.doorbell().exists(), "reset rings the doorbell");
    let v = f.inspect();
    assert_eq!(v["pending_wakes"], 0);
    assert_eq!(v["session_id"], before["session_id"].as_i64().unwrap() + 1);
    assert_eq!(v["next_run_id"], before["next_run_id"]);
    assert_eq!(v["unconsumed_events"], 1);
    f.cmd(&["run"]).ok();
    let rows = runs(&f);
    let last = rows.last().unwrap();
    assert_eq!(last.1, "events");
    assert_eq!(last.4, 1);
    let obs: String = f
        .db()
        .query_row(
            "SELECT content FROM messages WHERE run_id = ?1 AND kind = 'observation'",
            [last.0],
            |r| r.get(0),
        )
        .unwrap();
    assert!(obs.contains("session reset"), "{obs}");
    // --keep-wakes keeps them.
    f.cmd(&["wakes", "add", "--in", "2h", "--reason", "keep me"])
        .ok();
    let out = f.cmd(&["reset-session", "--keep-wakes"]).ok();
    assert!(out.stdout.contains("kept pending wakes"));
    assert_eq!(f.inspect()["pending_wakes"], 1);
}

#[test]
fn a_failing_pass_defers_its_events_one_timer_period() {
    let f = Fleet::new();
    f.cmd(&["trigger", "-p", "0", "-r", "x"]).ok();
    f.cmd(&["wakes", "add", "--in", "0s", "--reason", "w"]).ok();
    let out = f
        .command(&["run"])
        .env("FLEETAGENT_TEST_FAIL_AT", "run-after-observe")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(err.contains("run 1 failed"), "{err}");
    let v = f.inspect();
    assert_eq!(v["unconsumed_events"], 1);
    assert_eq!(v["deferred_events"], 1);
    assert_eq!(v["pending_wakes"], 1);
    assert!(
        !f.doorbell().exists(),
        "no doorbell: a failing agent cannot loop"
    );
    // The next run (the timer) finds nothing ready yet: the event waits one timer period.
    f.cmd(&["run"]).ok();
    let rows = runs(&f);
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[1].1, "tick");
    assert_eq!(rows[1].4, 0);
    assert_eq!(rows[1].5, 0);
    let (attempts, not_before, created): (i64, i64, i64) = f
        .db()
        .query_row(
            "SELECT attempts, not_before, created_at FROM events",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!(attempts, 1);
    assert!(not_before - created >= 299_000, "deferred a timer period");
}

#[test]
fn five_failed_attempts_mark_an_event_failed_not_dropped() {
    let f = Fleet::new();
    f.cmd(&["trigger", "-p", "0", "-r", "poison"]).ok();
    for _ in 0..5 {
        // Make it ready again each time, as the timer would after a period.
        f.db()
            .execute("UPDATE events SET not_before = NULL", [])
            .unwrap();
        let _ = f
            .command(&["run"])
            .env("FLEETAGENT_TEST_FAIL_AT", "run-after-observe")
            .output()
            .unwrap();
    }
    let v = f.inspect();
    assert_eq!(v["failed_events"], 1);
    assert_eq!(v["unconsumed_events"], 0);
    let doc = f.cmd(&["doctor"]).code(1);
    assert!(doc.stdout.contains("1 event(s) failed"), "{}", doc.stdout);
}

#[test]
fn bad_input_is_refused_clearly() {
    let f = Fleet::new();
    // Unknown priority, empty reason: usage errors.
    f.cmd(&["trigger", "-p", "3", "-r", "x"]).code(2);
    f.cmd(&["trigger", "-p", "1", "-r", "  "]).code(2);
    f.cmd(&["message", ""]).code(2);
    assert_eq!(f.count("SELECT COUNT(*) FROM events"), 0);

    // Unknown key and wrong type: exit 2 naming key and line.
    f.write_config("[run]\nmax_passes = 2\nbogus_key = 1\n");
    let out = f.cmd(&["trigger", "-p", "1", "-r", "x"]).code(2);
    assert!(
        out.stderr.contains("bogus_key") && out.stderr.contains("line 3"),
        "{}",
        out.stderr
    );
    assert_eq!(out.stderr.trim().lines().count(), 1);
    // The event is recorded all the same (messages::a_refused_config_key_keeps_the_event).
    f.db().execute("DELETE FROM events", []).unwrap();
    f.write_config("[debounce]\np1_secs = \"ten\"\n");
    let out = f.cmd(&["run"]).code(2);
    assert!(
        out.stderr.contains("debounce.p1_secs") && out.stderr.contains("line 2"),
        "{}",
        out.stderr
    );
    f.write_config(FAST_CONFIG);

    // World-writable config: exit 2 (the event is kept where `--state-dir` says:
    // messages::a_refused_config_key_keeps_the_event).
    std::fs::set_permissions(&f.config, std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = f.cmd(&["run"]).code(2);
    assert!(out.stderr.contains("world-writable"), "{}", out.stderr);
    std::fs::set_permissions(&f.config, std::fs::Permissions::from_mode(0o640)).unwrap();

    // World-writable state dir: exit 1, nothing written.
    std::fs::set_permissions(&f.state, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = f.cmd(&["trigger", "-p", "1", "-r", "x"]).code(1);
    assert!(out.stderr.contains("world-writable"), "{}", out.stderr);
    std::fs::set_permissions(&f.state, std::fs::Permissions::from_mode(0o2770)).unwrap();
    assert_eq!(f.count("SELECT COUNT(*) FROM events"), 0);

    // A database from a newer schema: exit 1, untouched.
    f.db().pragma_update(None, "user_version", 99).unwrap();
    let out = f.cmd(&["trigger", "-p", "1", "-r", "x"]).code(1);
    assert!(out.stderr.contains("newer"), "{}", out.stderr);
    let out = f.cmd(&["run"]).code(1);
    assert!(out.stderr.contains("newer"), "{}", out.stderr);
    let v: i64 = f
        .db()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(v, 99);
}

#[test]
fn trigger_without_a_database_writes_nothing() {
    let f = Fleet::with_config(FAST_CONFIG);
    std::fs::create_dir(&f.state).unwrap();
    let out = f.cmd(&["trigger", "-p", "1", "-r", "x"]).code(1);
    assert!(
        out.stderr.contains("no database in state dir"),
        "{}",
        out.stderr
    );
    assert_eq!(out.stderr.trim().lines().count(), 1);
    assert_eq!(
        std::fs::read_dir(&f.state).unwrap().count(),
        0,
        "nothing written"
    );
    for cmd in [
        &["inspect"][..],
        &["history"],
        &["wakes", "list"],
        &["message", "hi"],
    ] {
        f.cmd(cmd).code(1);
    }
    assert_eq!(std::fs::read_dir(&f.state).unwrap().count(), 0);
    // A missing state dir too.
    let g = Fleet::with_config(FAST_CONFIG);
    g.cmd(&["trigger", "-p", "1", "-r", "x"]).code(1);
    assert!(!g.state.exists());

    // An empty fleetagent.db is not a database: refused, and left empty (it used to be
    // migrated into a whole one by commands that must not create one).
    let db = f.state.join("fleetagent.db");
    std::fs::write(&db, b"").unwrap();
    for cmd in [
        &["trigger", "-p", "1", "-r", "x"][..],
        &["doctor"],
        &["inspect"],
    ] {
        let out = f.cmd(cmd).code(1);
        assert!(
            out.stderr.contains("holds no fleetagent database")
                || out.stdout.contains("holds no fleetagent database"),
            "{cmd:?}: {} {}",
            out.stdout,
            out.stderr
        );
    }
    assert_eq!(std::fs::metadata(&db).unwrap().len(), 0);
}

#[test]
fn absurd_operator_input_is_a_usage_error_not_a_panic() {
    let f = Fleet::new();
    f.cmd(&["init"]).ok();
    for args in [
        &["wakes", "add", "--in", "106751991167d", "--reason", "r"][..],
        &["wakes", "add", "--in", "9223372036854775s", "--reason", "r"],
        &["wakes", "add", "--in", "40000d", "--reason", "r"],
        &[
            "wakes",
            "add",
            "--at",
            "2962-01-01T00:00:00Z",
            "--reason",
            "r",
        ],
        &["wakes", "cancel", "0"],
        &["history", "-n", "0"],
        &["instances", "stop", "18446744073709551615", "--force"],
        &["instances", "stop", "0"],
    ] {
        let out = f.cmd(args).code(2);
        // One line of ours, or clap's own usage error (its first line names the value).
        let first = out.stderr.lines().next().unwrap_or_default();
        assert!(
            first.contains("--in") || first.contains("--at") || first.contains("invalid value"),
            "{args:?}: {}",
            out.stderr
        );
        assert!(!out.stderr.contains("panicked"), "{args:?}: {}", out.stderr);
    }
    assert_eq!(f.count("SELECT COUNT(*) FROM wakes"), 0);
    let out = f
        .cmd(&["wakes", "add", "--in", "1h 30m", "--reason", "r"])
        .ok();
    assert!(out.stdout.contains("in 1h30m"), "{}", out.stdout);
    // Past a year: taken, with a note and the command that takes it back (a date years
    // ahead is legal; a typo in the year is likelier, so it is said).
    let at = (chrono::Utc::now() + chrono::Duration::days(3 * 365)).to_rfc3339();
    let out = f.cmd(&["wakes", "add", "--at", &at, "--reason", "r"]).ok();
    assert!(
        out.stdout.contains(
            "days ahead (a typo in the year?); `fleetagent wakes cancel 2` takes it back"
        ),
        "{}",
        out.stdout
    );
}

#[test]
fn a_lock_note_is_believed_only_for_its_own_holder() {
    let f = Fleet::new();
    f.cmd(&["init"]).ok();
    // A run that ended long ago left its note; someone else (flock(1)) holds the lock now.
    std::fs::write(f.state.join("run.lock"), "1 1000\n").unwrap();
    let mut holder = std::process::Command::new("flock")
        .arg("-x")
        .arg(f.state.join("run.lock"))
        .args(["sleep", "30"])
        .spawn()
        .unwrap();
    let held = (0..100).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(50));
        f.cmd(&["inspect", "--json"]).ok().json()["lock_held"] == true
    });
    let doctor = f.cmd(&["doctor"]);
    let inspect = f.cmd(&["inspect", "--json"]).ok().json();
    let _ = holder.kill();
    let _ = holder.wait();
    assert!(held, "flock(1) never showed as the holder");
    assert!(!doctor.stdout.contains("stuck"), "{}", doctor.stdout);
    assert!(inspect["lock_held_since"].is_null(), "{inspect}");
}

#[test]
fn unwritable_state_dir_is_refused() {
    // Root passes access(2) checks; run the binary as nobody against a root-owned 2770 dir.
    let f = Fleet::new();
    std::fs::set_permissions(f.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&f.config, std::fs::Permissions::from_mode(0o644)).unwrap();
    let as_nobody = |args: &[&str]| f.command(args).uid(65534).gid(65534).output().unwrap();
    let out = as_nobody(&["trigger", "-p", "1", "-r", "x"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("not writable") || err.contains("Permission denied"),
        "{err}"
    );
    assert_eq!(f.count("SELECT COUNT(*) FROM events"), 0);
    // doctor, run as the wrong user, names the permission, never "no database ... init"
    // over the database that is there.
    f.cmd(&["init"]).ok();
    let out = as_nobody(&["doctor"]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("cannot look for the database in state dir") && !said.contains("no database"),
        "{said}"
    );
}

#[test]
fn state_files_have_the_designed_permissions() {
    let f = Fleet::new();
    f.cmd(&["trigger", "-p", "0", "-r", "x"]).ok();
    f.cmd(&["run"]).ok();
    f.cmd(&["trigger", "-p", "0", "-r", "y"]).ok();
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode(&f.state), 0o2770);
    for name in ["fleetagent.db", "run.lock", "trigger"] {
        assert_eq!(mode(&f.state.join(name)), 0o660, "{name}");
    }
    for entry in std::fs::read_dir(&f.state).unwrap() {
        let p = entry.unwrap().path();
        assert_eq!(mode(&p) & 0o007, 0, "{} is world-accessible", p.display());
    }
}

#[test]
fn early_exit_with_bad_config_deletes_the_doorbell() {
    let f = Fleet::new();
    f.cmd(&["trigger", "-p", "0", "-r", "x"]).ok();
    assert!(f.doorbell().exists());
    f.write_config("[run]\nnope = 1\n");
    let t = Instant::now();
    f.cmd(&["run"]).code(2);
    assert!(
        t.elapsed() < Duration::from_secs(20),
        "known state dir: no delay"
    );
    assert!(
        !f.doorbell().exists(),
        "systemd must not restart it in a loop"
    );
    f.write_config(FAST_CONFIG);
    assert_eq!(
        f.inspect()["unconsumed_events"],
        1,
        "the event stays for the timer"
    );
}

#[test]
fn history_shows_operator_messages() {
    let f = Fleet::new();
    f.cmd(&["message", "please keep two instances"]).ok();
    f.cmd(&["run"]).ok();
    let out = f.cmd(&["history"]).ok();
    assert!(
        out.stdout.contains("please keep two instances"),
        "{}",
        out.stdout
    );
    let j = f.cmd(&["history", "--json"]).ok().json();
    assert_eq!(j[0]["kind"], "operator");
    assert!(j[0]["tokens"].as_i64().unwrap() > 0);
}

#[test]
fn inspect_json_has_the_contract_fields() {
    let f = Fleet::new();
    f.cmd(&["trigger", "-p", "2", "-r", "x"]).ok();
    f.cmd(&["run"]).ok();
    f.cmd(&["trigger", "-p", "2", "-r", "y"]).ok();
    let v = f.inspect();
    for key in [
        "session_id",
        "next_run_id",
        "unconsumed_events",
        "failed_events",
        "pending_wakes",
        "overdue_wakes",
    ] {
        assert!(v[key].is_i64(), "{key}: {v}");
    }
    assert!(v["lock_held"].is_boolean());
    assert!(v["units"].is_null() || v["units"].is_object());
    assert_eq!(v["doorbell"]["exists"], true);
    assert!(v["doorbell"]["path"]
        .as_str()
        .unwrap()
        .ends_with("/trigger"));
    assert!(v["doorbell"]["mtime"].as_str().unwrap().ends_with('Z'));
    let run = &v["runs"][0];
    for key in ["id", "session_id"] {
        assert!(run[key].is_i64(), "{key}");
    }
    for key in [
        "started_by",
        "status",
        "verdict",
        "started_at",
        "finished_at",
    ] {
        assert!(run[key].is_string(), "{key}: {run}");
    }
    assert!(chrono::DateTime::parse_from_rfc3339(run["started_at"].as_str().unwrap()).is_ok());
    assert_eq!(v["unconsumed_events"], 1);
}

pub(crate) fn wait_for(mut cond: impl FnMut() -> bool, what: &str) {
    let t = Instant::now();
    while !cond() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn trigger_never_loads_the_tokenizer_or_an_http_client() {
    let f = Fleet::new().env("FLEETAGENT_TEST_STATS", "1");
    let out = f.cmd(&["trigger", "-p", "1", "-r", "x"]).ok();
    assert!(
        out.stderr.contains("tokenizer_loads=0 http_clients=0"),
        "{}",
        out.stderr
    );
    let out = f.cmd(&["message", "hello"]).ok();
    assert!(out.stderr.contains("tokenizer_loads=0 http_clients=0"));
    // A run loads it, once per process however many passes it makes.
    let out = f.cmd(&["run"]).ok();
    assert!(out.stderr.contains("tokenizer_loads=1"), "{}", out.stderr);
}

#[test]
fn closed_standard_descriptors_are_reopened_not_reused() {
    // A caller that starts the agent with stderr closed (`2>&-`): `run` opens run.lock first,
    // which would get descriptor 2, and every log line would be appended to the lock file.
    // The entry point (src/main.rs) puts /dev/null on closed descriptors 0-2 first.
    let f = Fleet::new();
    f.cmd(&["trigger", "-p", "0", "-r", "stderr closed"]).ok();
    let inner = f.command(&["-vv", "run"]);
    let mut sh = std::process::Command::new("sh");
    sh.arg("-c")
        .arg(r#"exec "$@" 2>&-"#)
        .arg("sh")
        .arg(inner.get_program())
        .args(inner.get_args());
    for (key, value) in inner.get_envs() {
        match value {
            Some(v) => sh.env(key, v),
            None => sh.env_remove(key),
        };
    }
    let out = sh.output().expect("spawn sh");
    assert_eq!(out.status.code(), Some(0), "run with stderr closed");
    assert_eq!(
        f.count("SELECT COUNT(*) FROM runs WHERE status = 'ok'"),
        1,
        "the pass ran"
    );
    let lock = std::fs::read_to_string(f.state.join("run.lock")).expect("run.lock");
    assert!(
        !lock.contains("INFO") && lock.lines().count() <= 1,
        "log lines went into run.lock: {lock:?}"
    );
}

#[test]
fn a_closed_pipe_ends_the_output_not_the_command() {
    // `fleetagent history | head -1`: the reader goes away; println! would panic mid-command.
    let f = Fleet::new();
    for i in 0..30 {
        f.cmd(&["message", &format!("note {i}")]).ok();
    }
    f.cmd(&["run"]).ok();
    let doctor_code = f.cmd(&["doctor"]).code;
    let cases: [(&[&str], i32); 4] = [
        (&["history"], 0),
        (&["inspect"], 0),
        (&["trigger", "-p", "1", "-r", "piped"], 0),
        (&["doctor"], doctor_code),
    ];
    for (args, code) in cases {
        let (reader, writer) = nix::unistd::pipe().expect("pipe");
        drop(reader);
        let out = f
            .command(args)
            .stdout(std::process::Stdio::from(writer))
            .output()
            .expect("spawn fleetagent");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
    }
    assert_eq!(
        f.count("SELECT COUNT(*) FROM events WHERE reason = 'piped'"),
        1,
        "the trigger's work is done whatever happens to its output"
    );
}

#[test]
fn a_full_stderr_keeps_the_exit_code() {
    // `2>/dev/full`: every write to stderr fails; eprintln! panicked (exit 101).
    let f = Fleet::new();
    let bad = Fleet::with_config("[run]\nno_such_key = 1\n");
    let full = || {
        std::fs::File::options()
            .write(true)
            .open("/dev/full")
            .unwrap()
    };
    let doctor_code = f.cmd(&["doctor"]).code;
    // (fleet, args, stdout on /dev/full too, the exit code)
    let cases: [(&Fleet, &[&str], bool, i32); 6] = [
        (&f, &["trigger", "-p", "0", "-r", "full"], false, 0),
        (&f, &["-vv", "trigger", "-p", "0", "-r", "full"], false, 0),
        (&f, &["history", "--run", "999"], false, 1),
        (&bad, &["trigger", "-p", "0", "-r", "x"], false, 2),
        (&f, &["trigger", "--no-such-flag"], false, 2),
        // stdout fails as well: said on stderr (which fails too), and the command fails.
        (&f, &["doctor"], true, doctor_code.max(1)),
    ];
    for (fleet, args, stdout_full, code) in cases {
        let mut c = fleet.command(args);
        c.stderr(std::process::Stdio::from(full()));
        if stdout_full {
            c.stdout(std::process::Stdio::from(full()));
        }
        let out = c.output().expect("spawn fleetagent");
        assert_eq!(out.status.code(), Some(code), "{args:?}");
    }
    assert_eq!(
        f.count("SELECT COUNT(*) FROM events WHERE reason = 'full'"),
        2,
        "the triggers' work is done whatever happens to stderr"
    );
}

#[test]
fn doctor_names_what_makes_every_pass_futile() {
    let f = Fleet::new();
    f.write_config(&format!(
        "{FAST_CONFIG}\n[vast]\nimage = \"img\"\n[vast.env]\nCURIO_DB_PASSWORD = {{ credential = \"curio_db_password\" }}\n\
         [demand]\nsource = \"http\"\nhttp_url = \"http://127.0.0.1:9/demand\"\n\
         [policy]\nmax_dph_total = 5.0\nmax_instances = 0\n"
    ));
    f.cmd(&["init"]).ok();
    let out = f.cmd(&["doctor"]).code(1);
    for needle in [
        "launches are impossible: policy.max_instances = 0",
        "no vast.ai API key",
        "worker credential \"curio_db_password\" (vast.env.CURIO_DB_PASSWORD) not found",
    ] {
        assert!(out.stdout.contains(needle), "{needle}: {}", out.stdout);
    }
    // The provider is the rules: no LLM key is needed, and none is asked for.
    assert!(!out.stdout.contains("LLM API key"), "{}", out.stdout);

    // A failed run is named until one succeeds.
    let g = Fleet::new();
    g.cmd(&["init"]).ok();
    g.db()
        .execute(
            "INSERT INTO runs (session_id, pid, pass, started_by, status, started_at, finished_at, error)
             VALUES (1, 1, 1, 'tick', 'failed', 1000, 2000, 'interrupted (the process died)')",
            [],
        )
        .unwrap();
    let out = g.cmd(&["doctor"]).code(1);
    assert!(
        out.stdout.contains("failed") && out.stdout.contains("interrupted (the process died)"),
        "{}",
        out.stdout
    );
}
