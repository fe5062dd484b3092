//! Database safety: a damaged file (a broken page, a truncated copy, not a database at all)
//! fails each command with one clear line and no spin; `doctor` names it; scripts/recover-db
//! (docs/operations.md) keeps the whole ledger and lets the agent go on with a fresh
//! conversation, and on a file it cannot read stops without swapping anything in. Migrations
//! from every earlier schema version (generic over sql/) keep every row.

use std::path::{Path, PathBuf};

use super::{assert_integrity, files_under};
use crate::common::fleet::{Fleet, BIN, FAST_CONFIG};

const HINT: &str = "Recovering the database";
const LEDGER: [&str; 5] = ["runs", "actions", "instances", "events", "wakes"];

/// A state dir with some history: operator messages and passes (rules), ledger rows, a wake.
fn with_history() -> Fleet {
    let f = Fleet::new();
    for i in 0..8 {
        f.cmd(&[
            "message",
            &format!("note {i}: {}", "keep the fleet small ".repeat(100)),
        ])
        .ok();
        f.cmd(&["run"]).ok();
    }
    f.cmd(&["wakes", "add", "--in", "2h", "--reason", "later"])
        .ok();
    let db = f.db();
    for i in 0..5 {
        db.execute(
            "INSERT INTO actions (run_id, kind, outcome, actor, instance_id, label, created_at)
             VALUES (1, 'launch', 'ok', 'llm', ?1, ?2, 1)",
            rusqlite::params![9000 + i, format!("fleetagent-r1-{i:08x}")],
        )
        .unwrap();
        db.execute(
            "INSERT INTO instances (label, vast_id, state, created_at, state_since)
             VALUES (?1, ?2, 'proving', 1, 1)",
            rusqlite::params![format!("fleetagent-r1-{i:08x}"), 9000 + i],
        )
        .unwrap();
    }
    db.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
    f
}

fn counts(db: &Path) -> Vec<(String, i64)> {
    let c = rusqlite::Connection::open(db).unwrap();
    LEDGER
        .iter()
        .map(|t| {
            let n = c
                .query_row(&format!("SELECT COUNT(*) FROM {t}"), [], |r| r.get(0))
                .unwrap();
            (t.to_string(), n)
        })
        .collect()
}

/// Overwrite one page (1-based) of the database file with garbage.
fn smash_page(db: &Path, page: i64) {
    use std::io::{Seek, SeekFrom, Write};
    let mut file = std::fs::OpenOptions::new().write(true).open(db).unwrap();
    file.seek(SeekFrom::Start(((page - 1) * 4096) as u64))
        .unwrap();
    file.write_all(&[0xA5; 4096]).unwrap();
}

fn root_page(f: &Fleet, table: &str) -> i64 {
    f.db()
        .query_row(
            "SELECT rootpage FROM sqlite_master WHERE type = 'table' AND name = ?1",
            [table],
            |r| r.get(0),
        )
        .unwrap()
}

/// The command fails with exit 1 and one line that names the damage and the recovery.
#[track_caller]
fn fails_clearly(f: &Fleet, args: &[&str]) {
    let out = f.cmd(args);
    assert_eq!(out.code, 1, "{args:?}: {}{}", out.stdout, out.stderr);
    if args[0] == "doctor" {
        let line = out
            .stdout
            .lines()
            .find(|l| l.contains("database"))
            .unwrap_or_else(|| panic!("doctor said nothing of the database: {}", out.stdout));
        assert!(line.contains(HINT), "{line}");
        // One line per problem: no line of doctor's output continues another.
        assert!(
            out.stdout
                .lines()
                .all(|l| !l.starts_with(' ') && !l.starts_with("Page ")),
            "{}",
            out.stdout
        );
    } else {
        let errors: Vec<&str> = out
            .stderr
            .lines()
            .filter(|l| l.starts_with("fleetagent:"))
            .collect();
        assert_eq!(errors.len(), 1, "{args:?}: {}", out.stderr);
        let file = f.state.join("fleetagent.db").display().to_string();
        assert!(
            errors[0].contains(&file) && errors[0].contains(HINT),
            "{args:?}: {}",
            errors[0]
        );
    }
}

/// scripts/recover-db on this state dir, with `systemctl` replaced by a stub that logs its
/// arguments (no units here): the script's output, whether it succeeded, and the stub's log.
fn recover(f: &Fleet) -> (bool, String, String) {
    recover_with(f, &[])
}

/// [`recover`] with more environment.
fn recover_with(f: &Fleet, extra: &[(&str, &str)]) -> (bool, String, String) {
    let stub = f.path().join("systemctl-stub");
    let log = f.path().join("systemctl.log");
    std::fs::write(
        &stub,
        format!("#!/bin/sh\necho \"$*\" >> {}\n", log.display()),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&stub, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out =
        std::process::Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/recover-db"))
            .env("STATE_DIR", &f.state)
            .env("SYSTEMCTL", &stub)
            .env(
                "FLEETAGENT",
                format!(
                    "{BIN} --config {} --state-dir {}",
                    f.config.display(),
                    f.state.display()
                ),
            )
            .envs(extra.iter().copied())
            .output()
            .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let log = std::fs::read_to_string(&log).unwrap_or_default();
    (out.status.success(), said, log)
}

#[test]
fn a_damaged_conversation_fails_clearly_and_the_documented_recovery_keeps_the_ledger() {
    let f = with_history();
    let db_path = f.state.join("fleetagent.db");
    // A tally of the metrics' counters (derived from the ledger): counted afresh after.
    f.db()
        .execute_batch(
            "INSERT INTO tally (name, key, n) VALUES ('runs_by_verdict', 'action', 99);
             INSERT INTO tally_marks (name, upto, check_at) VALUES ('runs_by_verdict', 1, NULL);",
        )
        .unwrap();
    smash_page(&db_path, root_page(&f, "messages"));
    f.cmd(&["trigger", "-p", "0", "-r", "after the damage"])
        .ok();
    fails_clearly(&f, &["run"]);
    // The ledger as it stands (the failed pass and the trigger are in it).
    let before = counts(&db_path);
    let last_run: i64 = f
        .db()
        .query_row("SELECT MAX(id) FROM runs", [], |r| r.get(0))
        .unwrap();
    fails_clearly(&f, &["history"]);
    fails_clearly(&f, &["doctor"]);

    // Too little space for the copy, the dump and the new file: it stops before it stops
    // the units or writes anything.
    let (ok, said, systemctl) = recover_with(&f, &[("RECOVER_DB_FREE_BYTES", "4096")]);
    assert!(
        !ok && said.contains("4096 bytes free in") && said.contains("free some space first"),
        "{said}"
    );
    assert_eq!(systemctl, "", "the units were not touched");
    let kept = std::fs::read_dir(&f.state)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with("broken-")
        })
        .count();
    assert_eq!(kept, 0, "nothing written");

    let (ok, said, systemctl) = recover(&f);
    assert!(ok, "the recovery failed:\n{said}");
    assert_eq!(
        f.count("SELECT COUNT(*) FROM tally_marks"),
        0,
        "the tally kept"
    );
    // What it kept is readable by the state dir's group, never by others.
    {
        use std::os::unix::fs::PermissionsExt;
        let broken = std::fs::read_dir(&f.state)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("broken-")
            })
            .expect("the damaged file kept");
        for file in ["dump.sql", "fleetagent.db"] {
            let mode = std::fs::metadata(broken.join(file))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o007, 0, "{file}: {mode:o}");
        }
    }
    assert!(
        systemctl.starts_with("stop ") && systemctl.contains("\nstart "),
        "units stopped, then started: {systemctl}"
    );
    // The rows before and after, table by table: the ledger whole; the conversation, which
    // can be rebuilt, lost its unreadable table (its index still counts the rows).
    assert!(
        said.lines()
            .any(|l| l.starts_with("messages: ") && l.ends_with(" -> 0")),
        "{said}"
    );
    for (t, n) in &before {
        let line = said
            .lines()
            .find(|l| l.starts_with(&format!("{t}: ")))
            .unwrap();
        let after = line.rsplit(' ').next().unwrap().parse::<i64>().unwrap();
        assert_eq!(after, *n, "{line}\n{said}");
    }
    assert_integrity(&f, "recovered");
    // The damaged copy is kept; the new file has the designed mode.
    assert!(files_under(&f.state)
        .iter()
        .any(|p| p.to_string_lossy().contains("/broken-")));
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&db_path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o660);
    // The agent goes on: a fresh session, run ids after the old ones, every event served.
    let out = f.cmd(&["run"]).ok();
    let id: i64 = out
        .stdout
        .strip_prefix("run ")
        .and_then(|r| r.split(':').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(
        id > last_run,
        "run id {id} after {last_run}: {}",
        out.stdout
    );
    // Only the event of the failed pass waits (one timer period, as for any failed pass).
    let v = f.inspect();
    assert_eq!(v["unconsumed_events"], v["deferred_events"], "{v}");
    f.cmd(&["history"]).ok();
    assert_eq!(counts(&db_path)[2], before[2], "instances kept");
}

/// A database of an older schema is not read by `doctor` (the next `run` migrates it), but
/// its structure is still checked: the line must not say "go ahead" over a damaged file.
#[test]
fn doctor_checks_the_structure_of_an_older_schema() {
    let f = with_history();
    let older = fleetagent::store::SCHEMA_VERSION - 1;
    f.db().pragma_update(None, "user_version", older).unwrap();
    let page = root_page(&f, "actions");
    let line = |f: &Fleet| {
        let out = f.cmd(&["doctor"]);
        out.stdout
            .lines()
            .find(|l| l.contains("is older than this fleetagent's"))
            .unwrap_or_else(|| panic!("{}", out.stdout))
            .to_string()
    };
    assert!(!line(&f).contains("structure check failed"), "{}", line(&f));
    // It names the install it read (README's upgrade runs this doctor before the switch: a
    // walkthrough saw "install unknown: no readable database" beside the line that read it).
    let id: String = f
        .db()
        .query_row("SELECT install_id FROM agent_state", [], |r| r.get(0))
        .unwrap();
    let out = f.cmd(&["doctor", "--json"]);
    assert_eq!(out.json()["install_id"], id.as_str(), "{}", out.stdout);
    assert!(
        out.stderr.contains(&format!("(install {id})")),
        "{}",
        out.stderr
    );
    smash_page(&f.state.join("fleetagent.db"), page);
    let damaged = line(&f);
    assert!(
        damaged.contains("; and its structure check failed: ") && damaged.contains(HINT),
        "{damaged}"
    );
}

#[test]
fn a_file_that_is_not_a_database_or_is_truncated_is_refused_clearly() {
    let pristine = with_history();
    for damage in ["header", "truncated"] {
        let f = Fleet::with_config(FAST_CONFIG);
        std::fs::create_dir(&f.state).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&f.state, std::fs::Permissions::from_mode(0o2770)).unwrap();
        let db_path = f.state.join("fleetagent.db");
        std::fs::copy(pristine.state.join("fleetagent.db"), &db_path).unwrap();
        match damage {
            "header" => smash_page(&db_path, 1),
            _ => {
                let len = std::fs::metadata(&db_path).unwrap().len();
                let file = std::fs::OpenOptions::new()
                    .write(true)
                    .open(&db_path)
                    .unwrap();
                file.set_len(len / 3).unwrap();
            }
        }
        std::fs::write(f.doorbell(), "ring\n").unwrap();
        fails_clearly(&f, &["run"]);
        assert!(
            !f.doorbell().exists(),
            "{damage}: the early exit must not let systemd spin"
        );
        for args in [&["inspect"][..], &["history"], &["doctor"]] {
            fails_clearly(&f, args);
        }
        if damage == "header" {
            for args in [
                &["trigger", "-p", "1", "-r", "x"][..],
                &["message", "x"],
                &["wakes", "list"],
            ] {
                fails_clearly(&f, args);
            }
            // The recovery stops at the first step that fails (sqlite3 reads nothing of this
            // file) and swaps nothing in: the file is byte for byte what it was, kept aside
            // too, and the units stay stopped.
            let damaged = std::fs::read(&db_path).unwrap();
            let (ok, said, systemctl) = recover(&f);
            assert!(!ok, "{said}");
            assert!(
                said.contains("sqlite3 cannot read") && said.contains("stopped;"),
                "{said}"
            );
            assert_eq!(std::fs::read(&db_path).unwrap(), damaged, "{said}");
            assert!(!systemctl.contains("start "), "{systemctl}");
            let kept = files_under(&f.state)
                .into_iter()
                .find(|p| {
                    p.to_string_lossy().ends_with("fleetagent.db")
                        && p.to_string_lossy().contains("/broken-")
                })
                .expect("the damaged file kept aside");
            assert_eq!(std::fs::read(kept).unwrap(), damaged);
        }
    }
    // A damaged ledger table: the salvage would lose ledger rows, so the script stops there
    // unless told otherwise (--accept-ledger-loss), swapping nothing in.
    let f = Fleet::with_config(FAST_CONFIG);
    std::fs::create_dir(&f.state).unwrap();
    let db_path = f.state.join("fleetagent.db");
    std::fs::copy(pristine.state.join("fleetagent.db"), &db_path).unwrap();
    smash_page(&db_path, root_page(&pristine, "actions"));
    let damaged = std::fs::read(&db_path).unwrap();
    let (ok, said, systemctl) = recover(&f);
    assert!(!ok, "{said}");
    assert!(
        said.contains("ledger rows may be lost") && said.contains(" actions ("),
        "{said}"
    );
    assert_eq!(std::fs::read(&db_path).unwrap(), damaged, "{said}");
    assert!(!systemctl.contains("start "), "{systemctl}");
}

// --- migrations -------------------------------------------------------------------------------

/// sql/NNNN_*.sql in order; numbering must be 1, 2, ... with no gap.
fn migrations() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("sql");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sql"))
        .collect();
    files.sort();
    for (i, p) in files.iter().enumerate() {
        let name = p.file_name().unwrap().to_string_lossy();
        assert!(
            name.starts_with(&format!("{:04}_", i + 1)),
            "sql/ must be numbered 0001_, 0002_, ... without gaps: {name}"
        );
    }
    files
}

/// Tables with their columns, and indexes, as a comparable list.
fn schema(db: &rusqlite::Connection) -> Vec<String> {
    let mut st = db
        .prepare("SELECT type, name, tbl_name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name")
        .unwrap();
    let objects: Vec<(String, String, String)> = st
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let mut out = Vec::new();
    for (kind, name, table) in objects {
        if kind == "table" {
            let mut c = db.prepare(&format!("PRAGMA table_info({name})")).unwrap();
            let cols: Vec<String> = c
                .query_map([], |r| {
                    Ok(format!(
                        "{} {} notnull={} default={:?} pk={}",
                        r.get::<_, String>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, i64>(3)?,
                        r.get::<_, Option<String>>(4)?,
                        r.get::<_, i64>(5)?
                    ))
                })
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            out.push(format!("table {name}: {}", cols.join(", ")));
        } else {
            out.push(format!("{kind} {name} on {table}"));
        }
    }
    out
}

/// Samples a pass now keeps (younger than 30 days); 0 before the table exists.
/// The rows of the tables a pass prunes by age that are young enough to stay: samples (30
/// days) and the day profile's cached hours (8 days); a table the seed's version lacks has 0.
fn recent_samples(db: &rusqlite::Connection) -> Vec<(&'static str, i64)> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let count = |sql: &str, keep: i64| db.query_row(sql, [now - keep], |r| r.get(0)).unwrap_or(0);
    vec![
        (
            "samples",
            count(
                "SELECT COUNT(*) FROM samples WHERE at >= ?1",
                fleetagent::store::samples::KEEP_MS,
            ),
        ),
        (
            "day_hours",
            count(
                "SELECT COUNT(*) FROM day_hours WHERE start >= ?1",
                fleetagent::store::samples::DAY_HOURS_KEEP_MS,
            ),
        ),
    ]
}

fn row_counts(db: &rusqlite::Connection) -> Vec<(String, i64)> {
    let mut st = db
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")
        .unwrap();
    let tables: Vec<String> = st
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    tables
        .into_iter()
        .map(|t| {
            let n = db
                .query_row(&format!("SELECT COUNT(*) FROM {t}"), [], |r| r.get(0))
                .unwrap();
            (t, n)
        })
        .collect()
}

/// From every earlier schema version (and the current one), the binary opens the database,
/// migrates it to the current schema, keeps every row, and runs. Generic over sql/: a new
/// migration is covered as soon as its file and the seed of the version before it exist.
#[test]
fn migrations_from_every_earlier_version_keep_every_row() {
    let files = migrations();
    let latest = files.len() as i64;
    assert_eq!(
        latest,
        fleetagent::store::SCHEMA_VERSION,
        "every file in sql/ must be in store::MIGRATIONS"
    );
    // The schema a fresh database gets.
    let fresh = Fleet::new();
    let want = schema(&fresh.db());
    let mut versions = 0;
    for from in 0..=latest {
        let f = Fleet::with_config(FAST_CONFIG);
        std::fs::create_dir(&f.state).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&f.state, std::fs::Permissions::from_mode(0o2770)).unwrap();
        let db_path = f.state.join("fleetagent.db");
        let seeded = {
            let db = rusqlite::Connection::open(&db_path).unwrap();
            for file in &files[..from as usize] {
                db.execute_batch(&std::fs::read_to_string(file).unwrap())
                    .unwrap();
            }
            if from > 0 {
                let seed = Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join(format!("tests/fixtures/migrations/seed_v{from}.sql"));
                let sql = std::fs::read_to_string(&seed).unwrap_or_else(|_| {
                    panic!(
                        "no seed for schema version {from}: write {}",
                        seed.display()
                    )
                });
                db.execute_batch(&sql).unwrap();
            }
            db.pragma_update(None, "user_version", from).unwrap();
            (row_counts(&db), recent_samples(&db))
        };
        let (seeded, recent_samples) = seeded;
        if (1..latest).contains(&from) {
            // A reader never migrates: a new build tried beside the old one must not move
            // the database past what the old one reads. `backup` copies it as it is.
            let out = f.cmd(&["inspect", "--json"]).code(1);
            assert!(
                out.stderr.contains(&format!(
                    "schema version {from} is older than this fleetagent's ({latest}); this command only reads and left it untouched"
                )) && out.stderr.contains("the first command of this build that writes (`run`, `trigger`, `pause`, `message`, ...) migrates it"),
                "from version {from}: {}",
                out.stderr
            );
            let copy = f.path().join(format!("before-upgrade-v{from}.db"));
            let out = f.cmd(&["backup", copy.to_str().unwrap()]).ok();
            assert!(
                out.stdout
                    .contains(&format!("schema version {from}, older than")),
                "{}",
                out.stdout
            );
            for db in [f.db(), rusqlite::Connection::open(&copy).unwrap()] {
                let v: i64 = db
                    .query_row("PRAGMA user_version", [], |r| r.get(0))
                    .unwrap();
                assert_eq!(v, from, "read or copied, never migrated");
            }
        }
        // From version 10 the seed holds a simulation's config (sim_config), which `run`
        // refuses to act on once it has migrated the database.
        let simulated = from >= 10;
        let out = f.cmd(&["run"]);
        if simulated {
            assert_eq!(out.code, 1, "from version {from}: {}", out.stderr);
            if from < latest {
                // `run` refuses it before opening it: untouched. `init` opens it, which
                // migrates it, and then refuses it too.
                let v: i64 = f
                    .db()
                    .query_row("PRAGMA user_version", [], |r| r.get(0))
                    .unwrap();
                assert_eq!(v, from, "run left a simulation's database as it was");
                let out = f.cmd(&["init"]);
                assert!(
                    out.code == 1 && out.stderr.contains("is a simulation's database"),
                    "from version {from}: {}",
                    out.stderr
                );
            }
        } else {
            assert_eq!(out.code, 0, "from version {from}: {}", out.stderr);
        }
        let db = f.db();
        let version: i64 = db
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version, latest, "from version {from}");
        assert_eq!(
            schema(&db),
            want,
            "from version {from}: schema differs from a fresh one"
        );
        let after = row_counts(&db);
        for (table, n) in &seeded {
            // A pass drops samples older than 30 days (store::samples::KEEP_MS) and the day
            // profile's hours older than 8: the seed's younger ones must stay, and the pass
            // adds its own.
            let n = recent_samples
                .iter()
                .find(|(t, _)| t == table)
                .map_or(n, |(_, recent)| recent);
            let m = after
                .iter()
                .find(|(t, _)| t == table)
                .map(|(_, m)| *m)
                .unwrap_or(0);
            assert!(
                m >= *n,
                "from version {from}: {table} had {n} rows, now {m}"
            );
        }
        if simulated {
            f.cmd(&["run"]).code(1);
            db.execute("DELETE FROM sim_config", []).unwrap();
            f.cmd(&["run"]).ok();
        }
        if from > 0 {
            // Run ids go on after the seeded ones, and the seeded ledger is still read.
            let max_seeded: i64 = 18;
            let last: i64 = db
                .query_row("SELECT MAX(id) FROM runs", [], |r| r.get(0))
                .unwrap();
            assert!(last > max_seeded, "from version {from}: run id {last}");
            let v = f.inspect();
            assert!(
                v.to_string().contains("fleetagent-r17-0badc0de"),
                "from version {from}: {v}"
            );
        }
        versions += 1;
    }
    println!("migrations: {versions} starting versions (0..={latest}) migrated to {latest}, every row kept");
}

/// An immutable database file (`chattr +i`: a backup tool's lock, an operator's guard): every
/// writing command fails, and says so with the fix that helps (it said chmod 0660, the mode
/// already 0660). Skipped where the file system has no such attribute.
#[test]
fn an_immutable_database_is_named_with_chattr_by_a_writing_command() {
    let f = Fleet::new();
    f.cmd(&["run"]).ok();
    let db = f.state.join("fleetagent.db");
    let chattr = |sign: &str| {
        std::process::Command::new("chattr")
            .arg(format!("{sign}i"))
            .arg(&db)
            .status()
            .is_ok_and(|s| s.success())
    };
    if !chattr("+") {
        eprintln!("skipped: chattr +i does not work on {}", db.display());
        return;
    }
    let out = f.cmd(&["trigger", "-p", "1", "-r", "look"]);
    // The panic button cannot write its pause: it says the fleet bills on.
    let button = f.cmd(&["instances", "stop", "--all", "--reason", "runaway bill"]);
    // init does not call it ready.
    let init = f.cmd(&["init"]);
    assert!(chattr("-"), "chattr -i {}", db.display());
    let init = init.code(1);
    assert!(init.stderr.contains("chattr -i -a"), "{}", init.stderr);
    assert!(!init.stdout.contains("ready"), "{}", init.stdout);
    let button = button.code(1);
    assert!(
        button
            .stderr
            .contains("instances stop --all destroyed nothing and the fleet bills on")
            && button.stderr.contains("chattr -i -a"),
        "{}",
        button.stderr
    );
    let out = out.code(1);
    assert!(
        out.stderr.contains(&format!(
            "the database file {} is immutable or append-only (`lsattr` shows `i` or `a`): chattr -i -a {}",
            db.display(),
            db.display()
        )),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("chmod 0660"), "{}", out.stderr);
    // The state dir itself immutable: named as such, not as its owner or mode.
    let dir_flag = |sign: &str| {
        std::process::Command::new("chattr")
            .arg(format!("{sign}i"))
            .arg(&f.state)
            .status()
            .is_ok_and(|s| s.success())
    };
    assert!(dir_flag("+"));
    let out = f.cmd(&["trigger", "-p", "1", "-r", "look"]);
    assert!(dir_flag("-"));
    let out = out.code(1);
    assert!(
        out.stderr.contains("is immutable (`lsattr -d` shows `i`)")
            && out
                .stderr
                .contains(&format!("chattr -i {}", f.state.display())),
        "{}",
        out.stderr
    );
}
