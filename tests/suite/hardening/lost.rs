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
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(f.state.join(format!("fleetagent.db{suffix}")));
    }
    for args in [&["run"][..], &["reset-session"]] {
        let out = f.cmd(args).code(1);
        assert!(
            out.stderr.contains("the database was deleted or moved")
                && out.stderr.contains("fleetagent init --install-id ID"),
            "{args:?}: {}",
            out.stderr
        );
        assert!(
            !f.state.join("fleetagent.db").exists(),
            "{args:?} made a new database"
        );
    }
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
