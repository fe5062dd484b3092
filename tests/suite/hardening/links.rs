//! The state dir is group-writable (the operators' group), so a member could plant a symbolic
//! link where fleetagent opens a file. A root `trigger` would then append to any file through
//! the doorbell, and a `run` would create one through the lock or have SQLite write through the
//! database or its WAL. Every such link is refused, and nothing is written through it.
//! `doctor` names each one, and a state dir every user may read.

use std::os::unix::fs::{symlink, PermissionsExt};

use crate::common::fleet::Fleet;

#[test]
fn links_planted_in_the_state_dir_are_never_followed_and_doctor_names_them() {
    let f = Fleet::new();
    f.cmd(&["run"]).ok();
    let victim = f.path().join("victim");
    let state = f.path().join("state");
    let refused = |args: &[&str], file: &str| {
        f.refused(
            args,
            &format!("{file} is a symbolic link: fleetagent never follows"),
        );
        assert!(
            !victim.exists(),
            "{args:?} wrote through the link to {file}"
        );
    };

    // The doorbell: the event is recorded, nothing is appended through the link.
    symlink(&victim, state.join("trigger")).unwrap();
    refused(&["trigger", "-p", "1", "-r", "planted"], "trigger");
    let doctor = f.cmd(&["doctor"]).code(1).stdout;
    assert!(
        doctor.contains("trigger is a symbolic link"),
        "doctor: {doctor}"
    );
    let bell = &f.inspect()["doorbell"];
    assert!(
        bell["problem"]
            .as_str()
            .is_some_and(|p| p.contains("symbolic link")),
        "{bell}"
    );
    // A run deletes the link (its claim deletes the doorbell), saying what it was.
    let out = f.cmd(&["run"]).ok();
    assert!(
        out.stderr.contains("was a symbolic link (to "),
        "{}",
        out.stderr
    );
    assert!(!victim.exists() && !state.join("trigger").exists());

    // The lock, the database and its WAL: refused before anything is opened.
    for file in ["run.lock", "fleetagent.db-wal"] {
        let path = state.join(file);
        let _ = std::fs::remove_file(&path);
        symlink(&victim, &path).unwrap();
        refused(&["run"], file);
        std::fs::remove_file(&path).unwrap();
    }
    let db = state.join("fleetagent.db");
    let real = f.path().join("real.db");
    std::fs::rename(&db, &real).unwrap();
    symlink(&real, &db).unwrap();
    refused(&["wakes", "list"], "fleetagent.db");
    std::fs::remove_file(&db).unwrap();
    std::fs::rename(&real, &db).unwrap();
    f.cmd(&["run"]).ok();

    // A state dir every user may read is named, with the chmod that fixes it.
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o2755)).unwrap();
    let doctor = f.cmd(&["doctor"]).code(1).stdout;
    assert!(
        doctor.contains("is mode 2755: every user may read it") && doctor.contains("chmod 2770"),
        "{doctor}"
    );
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o2770)).unwrap();
    let doctor = f.cmd(&["doctor"]).stdout;
    assert!(!doctor.contains("every user may read"), "{doctor}");
}

/// A state dir reached through a link (a home under /home -> /var/home, a dir linked from
/// another disk) is used as the dir the link resolves to: SQLite refuses a link anywhere in
/// a path opened with NOFOLLOW, and every command failed "unable to open database file"
/// (`init` leaving an empty file behind). Links planted inside the dir are still refused.
#[test]
fn a_state_dir_reached_through_a_link_works() {
    let f = Fleet::new();
    let real = f.path().join("real-state");
    std::fs::create_dir(&real).unwrap();
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o2770)).unwrap();
    let linked = f.path().join("linked-state");
    symlink(&real, &linked).unwrap();
    let at = |args: &[&str]| {
        let mut c = std::process::Command::new(crate::common::fleet::BIN);
        c.arg("--config")
            .arg(&f.config)
            .arg("--state-dir")
            .arg(&linked)
            .args(args);
        crate::common::fleet::clean_env(&mut c);
        crate::common::fleet::Run::from(c.output().expect("spawn fleetagent"))
    };
    at(&["init"]).ok();
    at(&["trigger", "-p", "1", "-r", "through a link"]).ok();
    at(&["run"]).ok();
    let shown = at(&["inspect", "--json"]).ok();
    assert!(
        shown.stdout.contains("\"unconsumed_events\": 0"),
        "{}",
        shown.stdout
    );
    assert!(real.join("fleetagent.db").metadata().unwrap().len() > 0);
}
