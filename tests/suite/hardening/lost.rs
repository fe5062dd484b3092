//! A database deleted (or moved) under a state dir where runs were made: `run` and
//! `reset-session` refuse to start a new one, which would restart the run ids, take a new
//! install id and leave the old instances as another install's (past the caps). `init
//! --install-id` starts afresh on purpose under the old id, so the first pass adopts them.

use crate::common::fleet::Fleet;

#[test]
fn a_lost_database_is_not_silently_replaced_and_init_keeps_the_old_install_id() {
    let f = Fleet::new();
    f.cmd(&["run"]).ok();
    let id = f.inspect()["install_id"].as_str().unwrap().to_string();
    // Emptied, not deleted (`: > fleetagent.db`, its WAL gone): SQLite would take the empty
    // file for a new database; the same refusal, the file left as it is.
    std::fs::write(f.state.join("fleetagent.db"), b"").unwrap();
    for suffix in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(f.state.join(format!("fleetagent.db{suffix}")));
    }
    let out = f.refused(&["run"], "is empty (0 bytes), but its run.lock shows");
    assert!(out.stderr.contains("it was emptied"), "{}", out.stderr);
    assert_eq!(
        std::fs::metadata(f.state.join("fleetagent.db"))
            .unwrap()
            .len(),
        0
    );
    // Emptied with its WAL left (which SQLite would discard on opening it), where no run was
    // made: refused before SQLite opens it, by every command, and the WAL kept.
    let g = Fleet::new();
    g.cmd(&["init"]).ok();
    // init leaves the database whole, its WAL empty: a file copied over fleetagent.db alone
    // (a move to a host README's Install prepared) is not replayed over by init's WAL.
    assert_eq!(
        std::fs::metadata(g.state.join("fleetagent.db-wal")).map_or(0, |m| m.len()),
        0
    );
    std::fs::write(g.state.join("fleetagent.db"), b"").unwrap();
    std::fs::write(g.state.join("fleetagent.db-wal"), vec![7u8; 4096]).unwrap();
    let _ = std::fs::remove_file(g.state.join("run.lock"));
    for args in [&["trigger", "-p", "1", "-r", "x"][..], &["inspect"]] {
        g.refused(args, "its -wal holds 4096 bytes: the file was emptied");
    }
    // `run` takes its lock (run.lock) first, and says it the lock's way.
    g.refused(&["run"], "is empty (0 bytes)");
    assert_eq!(
        std::fs::metadata(g.state.join("fleetagent.db-wal"))
            .unwrap()
            .len(),
        4096
    );
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(f.state.join(format!("fleetagent.db{suffix}")));
    }
    for args in [&["run"][..], &["reset-session"]] {
        let out = f.refused(args, "the database was deleted or moved");
        assert!(
            out.stderr.contains("fleetagent init --install-id ID"),
            "{args:?}: {}",
            out.stderr
        );
        assert!(
            !f.state.join("fleetagent.db").exists(),
            "{args:?} made a new database"
        );
    }
    // What reads or records says the same, and doctor; a plain init (a new random id) too.
    f.refused(
        &["trigger", "-p", "1", "-r", "x"],
        "the database was deleted or moved",
    );
    let doctor = f.cmd(&["doctor"]).code(1).stdout;
    assert!(
        doctor.contains("the database was deleted or moved") && doctor.contains("--install-id"),
        "{doctor}"
    );
    f.refused(&["init"], "delete");
    assert!(!f.state.join("fleetagent.db").exists());
    // Starting afresh on purpose, under the old id.
    let out = f.cmd(&["init", "--install-id", &id]).ok();
    assert!(
        out.stdout.contains(&format!("install id {id})")),
        "{}",
        out.stdout
    );
    f.cmd(&["run"]).ok();
    assert_eq!(f.inspect()["install_id"], id.as_str());
    // An existing database keeps its id; the simulator's and malformed ids are refused.
    let out = f.cmd(&["init", "--install-id", "other"]).code(2);
    assert!(
        out.stderr.contains(&format!("already has install id {id}")),
        "{}",
        out.stderr
    );
    for bad in ["sim", "Upper", "a-b"] {
        f.cmd(&["init", "--install-id", bad]).code(2);
    }
    f.cmd(&["init", "--install-id", &id]).ok();
}

/// The database deleted while a pass writes it: SQLite goes on writing the unlinked file, so
/// the run's records are nowhere. The process says so and exits 1 (it exited 0 "no-action").
#[test]
fn a_database_deleted_under_a_running_pass_fails_the_run() {
    use crate::common::fake_llm::{FakeLlm, Reply};
    use crate::common::fake_vast::FakeVast;
    use crate::suite::agent_e2e::{dead_fleet, rig, write_demand, ONE_LAUNCH};
    let llm = FakeLlm::start();
    let vast = FakeVast::start_real_time();
    let f = rig(&llm, &vast, ONE_LAUNCH, "quiet_interval_mins = 0");
    write_demand(f.path(), dead_fleet());
    f.cmd(&["run"]).ok();
    let state = f.state.clone();
    llm.push(Reply::dynamic(move |_| {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(state.join(format!("fleetagent.db{suffix}")));
        }
        Reply::text("No action needed.")
    }));
    f.cmd(&["trigger", "-p", "1", "-r", "check"]).ok();
    f.refused(
        &["run"],
        "was deleted or replaced while this run was writing it",
    );
    // And the next run does not start over in its place.
    f.refused(&["run"], "the database was deleted or moved");
}

/// An empty database file where no run was made (no `run.lock`): nothing to lose, so the
/// first `run` makes its database there (a walkthrough saw it refused with "its run.lock
/// shows that runs were made here", a lock that `run` had just made itself).
#[test]
fn an_empty_file_where_no_run_was_made_becomes_the_database() {
    let f = Fleet::new();
    let _ = std::fs::remove_dir_all(&f.state);
    std::fs::create_dir_all(&f.state).unwrap();
    std::fs::write(f.state.join("fleetagent.db"), b"").unwrap();
    let out = f.cmd(&["run"]).ok();
    assert!(
        !out.stderr.contains("shows that runs were made"),
        "{}",
        out.stderr
    );
    assert_eq!(f.count("SELECT COUNT(*) FROM runs"), 1);
}
