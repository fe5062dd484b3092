use super::*;

#[test]
fn sqlite_is_built_as_cargo_config_says() {
    // .cargo/config.toml's LIBSQLITE3_FLAGS: no SQL may load a shared library, and the
    // extensions no query uses are not registered at every open.
    let s = Store::open_memory(1_000).unwrap();
    let used = |opt: &str| -> bool {
        s.conn
            .query_row("SELECT sqlite_compileoption_used(?1)", [opt], |r| r.get(0))
            .unwrap()
    };
    assert!(used("OMIT_LOAD_EXTENSION"));
    for absent in [
        "ENABLE_FTS3",
        "ENABLE_FTS5",
        "ENABLE_RTREE",
        "ENABLE_DBSTAT_VTAB",
    ] {
        assert!(!used(absent), "{absent} is compiled in");
    }
    let err = s
        .conn
        .query_row("SELECT load_extension('/nonexistent')", [], |r| {
            r.get::<_, Option<String>>(0)
        })
        .unwrap_err();
    assert!(err.to_string().contains("no such function"), "{err}");
}

#[test]
fn memory_store_migrates_and_bootstraps() {
    let s = Store::open_memory(1_000).unwrap();
    let v: i64 = s
        .conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(v, SCHEMA_VERSION);
    assert_eq!(session::current(&s.conn).unwrap(), 1);
    assert_eq!(s.next_run_id().unwrap(), 1);
}

/// A database made before install ids (schema 5), created at `created_ms`, opened by
/// this build from a file: its install id.
fn id_of_an_older_database(created_ms: i64) -> String {
    let dir = tempfile::tempdir().unwrap();
    let conn = Connection::open(dir.path().join(DB_FILE)).unwrap();
    for sql in &MIGRATIONS[..5] {
        conn.execute_batch(sql).unwrap();
    }
    session::bootstrap(&conn, created_ms).unwrap();
    conn.execute_batch("PRAGMA user_version = 5;").unwrap();
    drop(conn);
    let s = Store::open(dir.path(), OpenMode::Existing, created_ms + 86_400_000).unwrap();
    ops::install_id(&s.conn).unwrap()
}

#[test]
fn an_older_database_derives_its_install_id_so_a_restored_copy_keeps_it() {
    // A backup from before the upgrade, restored, must get the id the upgraded database
    // got: the instances launched since carry it, and under another id they would bill
    // outside the caps as another install's.
    let id = id_of_an_older_database(1_760_000_000_123);
    assert_eq!(id, id_of_an_older_database(1_760_000_000_123));
    assert!(ops::is_install_id(&id) && id.len() == 6, "{id}");
    assert_ne!(id, id_of_an_older_database(1_760_000_000_124));
    // The derivation never changes between builds.
    assert_eq!(id, "phuhqo");
    // A new database draws its id.
    let a = Store::open_memory(1_760_000_000_123).unwrap();
    let b = Store::open_memory(1_760_000_000_123).unwrap();
    assert_ne!(
        ops::install_id(&a.conn).unwrap(),
        ops::install_id(&b.conn).unwrap()
    );
}

#[test]
fn a_failed_migration_is_one_line_and_leaves_the_database_as_it_was() {
    // A schema 1 that is not ours (a development build's, changed by hand): a column the
    // later migrations copy is missing.
    let dir = tempfile::tempdir().unwrap();
    let conn = Connection::open(dir.path().join(DB_FILE)).unwrap();
    conn.execute_batch(MIGRATIONS[0]).unwrap();
    conn.execute_batch("ALTER TABLE agent_state DROP COLUMN streaks_run; PRAGMA user_version = 1;")
        .unwrap();
    session::bootstrap(&conn, 1_000).unwrap();
    drop(conn);
    let err = format!(
        "{:#}",
        Store::open(dir.path(), OpenMode::Existing, 2_000)
            .err()
            .unwrap()
    );
    assert!(!err.contains('\n'), "{err}");
    assert!(err.len() < 800, "{} bytes: {err}", err.len());
    assert!(
        err.contains("failed: no such column: streaks_run; the database (schema version 1) was left untouched"),
        "{err}"
    );
    assert!(!err.contains("CREATE TABLE"), "{err}");
    let conn = Connection::open(dir.path().join(DB_FILE)).unwrap();
    let v: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(v, 1);
}

#[test]
fn the_runs_rebuild_keeps_the_counter_and_every_row() {
    // A version-5 database whose counter is ahead of its rows (the newest run rows gone):
    // migration 0006 rebuilds `runs`, and the next run id must still follow the counter.
    let conn = Connection::open_in_memory().unwrap();
    for sql in &MIGRATIONS[..5] {
        conn.execute_batch(sql).unwrap();
    }
    session::bootstrap(&conn, 1_000).unwrap();
    conn.execute_batch(
        "INSERT INTO runs (id, session_id, pid, pass, started_by, status, verdict, started_at)
             VALUES (7, 1, 1, 1, 'tick', 'ok', 'no-action', 1000);
         UPDATE sqlite_sequence SET seq = 50 WHERE name = 'runs';
         INSERT INTO events (priority, kind, reason, created_at, claimed_by, claimed_at)
             VALUES (1, 'trigger', 'x', 1000, 7, 1000);
         PRAGMA user_version = 5;",
    )
    .unwrap();
    let mut s = Store {
        conn,
        path: PathBuf::from(":memory:"),
        read_only: false,
        shared: None,
    };
    s.setup(2_000, OpenMode::Existing).unwrap();
    assert_eq!(s.next_run_id().unwrap(), 51);
    let verdict: String = s
        .conn
        .query_row("SELECT verdict FROM runs WHERE id = 7", [], |r| r.get(0))
        .unwrap();
    assert_eq!(verdict, "no-action");
    let fk: i64 = s
        .conn
        .query_row("SELECT COUNT(*) FROM pragma_foreign_key_check", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(fk, 0, "the events still point at their run");
    s.conn
        .execute(
            "UPDATE runs SET verdict = 'action-failed', actions_failed = 2 WHERE id = 7",
            [],
        )
        .unwrap();
    assert!(
        ops::install_id(&s.conn).is_ok(),
        "an older database gets an id"
    );
}

#[test]
fn newer_schema_refused() {
    let dir = tempfile::tempdir().unwrap();
    drop(Store::open(dir.path(), OpenMode::Create, 0).unwrap());
    let conn = Connection::open(dir.path().join(DB_FILE)).unwrap();
    conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
        .unwrap();
    drop(conn);
    let err = Store::open(dir.path(), OpenMode::Existing, 0)
        .err()
        .unwrap();
    assert!(format!("{err:#}").contains("newer"), "{err:#}");
    // A negative version is none of ours: refused by every opening, and left as it was
    // (it read as "every migration done" and was stamped current).
    let conn = Connection::open(dir.path().join(DB_FILE)).unwrap();
    conn.pragma_update(None, "user_version", -2_147_483_648_i64)
        .unwrap();
    drop(conn);
    for mode in [OpenMode::Existing, OpenMode::Create] {
        let err = Store::open(dir.path(), mode, 0).err().unwrap();
        assert!(
            format!("{err:#}").contains("schema version -2147483648 is not one fleetagent writes"),
            "{err:#}"
        );
    }
    let err = Store::open_read_only(dir.path()).err().unwrap();
    assert!(
        format!("{err:#}").contains("not one fleetagent writes"),
        "{err:#}"
    );
    let conn = Connection::open(dir.path().join(DB_FILE)).unwrap();
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, -2_147_483_648);
}

#[test]
fn existing_mode_refuses_a_file_without_the_schema() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(DB_FILE);
    std::fs::write(&path, b"").unwrap();
    let err = Store::open(dir.path(), OpenMode::Existing, 0)
        .err()
        .unwrap();
    assert!(
        format!("{err:#}").contains("holds no fleetagent database"),
        "{err:#}"
    );
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        0,
        "nothing written"
    );
    // Someone else's database is not migrated into, even by a creating command.
    let conn = Connection::open(&path).unwrap();
    conn.execute_batch("CREATE TABLE theirs (x)").unwrap();
    drop(conn);
    let err = Store::open(dir.path(), OpenMode::Create, 0).err().unwrap();
    assert!(
        format!("{err:#}").contains("no fleetagent schema"),
        "{err:#}"
    );
}

#[test]
fn read_only_open_sees_the_wal_writes_nothing_and_refuses_an_older_schema() {
    // A dir name with the characters a `file:` URI reads as syntax.
    let dir = tempfile::Builder::new()
        .prefix("a?b#c%d")
        .tempdir()
        .unwrap();
    let s = Store::open(dir.path(), OpenMode::Create, 0).unwrap();
    events::insert(&s.conn, 1, "operator", "in the WAL", None, 5).unwrap();
    drop(s);
    assert!(
        std::fs::metadata(dir.path().join("fleetagent.db-wal"))
            .unwrap()
            .len()
            > 0
    );
    let events = |s: &Store| -> i64 {
        s.conn
            .query_row("SELECT COUNT(*) FROM events", [], |r| r.get(0))
            .unwrap()
    };
    let ro = Store::open_read_only(dir.path()).unwrap();
    assert!(ro.read_only);
    assert_eq!(events(&ro), 1, "the commit still in the WAL is seen");
    let err = ro.conn.execute("DELETE FROM events", []).unwrap_err();
    assert!(err.to_string().contains("readonly"), "{err}");
    drop(ro);
    // Checkpointed, without a WAL: read as it is (immutable).
    Store::open(dir.path(), OpenMode::Existing, 0)
        .unwrap()
        .checkpoint();
    assert_eq!(
        std::fs::metadata(dir.path().join("fleetagent.db-wal"))
            .unwrap()
            .len(),
        0
    );
    assert_eq!(events(&Store::open_read_only(dir.path()).unwrap()), 1);
    let conn = Connection::open(dir.path().join(DB_FILE)).unwrap();
    conn.pragma_update(None, "user_version", SCHEMA_VERSION - 1)
        .unwrap();
    drop(conn);
    let err = Store::open_read_only(dir.path()).err().unwrap();
    assert!(
        format!("{err:#}").contains("cannot be migrated on a read-only file system"),
        "{err:#}"
    );
    let empty = tempfile::tempdir().unwrap();
    let err = Store::open_read_only(empty.path()).err().unwrap();
    assert!(
        err.to_string().starts_with("no database in state dir"),
        "{err}"
    );
}

#[test]
fn existing_mode_does_not_create() {
    let dir = tempfile::tempdir().unwrap();
    let err = Store::open(dir.path(), OpenMode::Existing, 0)
        .err()
        .unwrap();
    assert!(format!("{err}").contains("no database"));
    assert!(!dir.path().join(DB_FILE).exists());
}
