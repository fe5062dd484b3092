//! `fleetagent backup FILE`: an online copy of the database with SQLite's backup API, checked
//! page by page before it is put in place. Safe while a run writes: the copy is one read
//! transaction of the source (WAL: a reader never blocks the writer, nor is it blocked).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use rusqlite::backup::{Backup, StepResult};
use rusqlite::Connection;

use crate::clock::Millis;

/// The tables whose rows `backup` counts in what it prints: the ledger and the conversation.
pub const COUNTED: [&str; 6] = [
    "runs",
    "actions",
    "instances",
    "events",
    "wakes",
    "messages",
];

/// What a backup wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct Copied {
    pub path: PathBuf,
    pub pages: i64,
    pub page_size: i64,
    /// Rows of [`COUNTED`] in the copy.
    pub rows: Vec<(&'static str, i64)>,
}

/// `PRAGMA quick_check` of a whole database: empty when sound, else the first findings.
/// It reads every page, so its cost grows with the file: `backup` runs it on its copy,
/// `doctor` does not (`store::health::edge_check`).
pub fn quick_check(conn: &Connection) -> Result<Vec<String>> {
    let mut stmt = conn.prepare("PRAGMA quick_check(5)")?;
    let rows = stmt
        .query_map([], |r| r.get::<_, String>(0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows.into_iter().filter(|r| r != "ok").collect())
}

/// Copy the database behind `src` to `file`, which must not exist: written to a temp file in
/// the same dir (0660, the state dir's rule, whatever the umask), checked with
/// [`quick_check`], synced, then linked into place (never over a file that appeared
/// meanwhile). Nothing is left behind on a failure.
pub fn to_file(src: &Connection, file: &Path, now: Millis) -> Result<Copied> {
    if std::fs::symlink_metadata(file).is_ok() {
        bail!(
            "{} exists: a backup never replaces a file (choose a new name, or remove it first)",
            file.display()
        );
    }
    let dir = file
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = file
        .file_name()
        .with_context(|| format!("{} names no file", file.display()))?
        .to_string_lossy()
        .into_owned();
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => bail!(
            "cannot write the backup {}: {} is not a directory",
            file.display(),
            dir.display()
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
            "cannot write the backup {}: its directory {} does not exist (make it first)",
            file.display(),
            dir.display()
        ),
        Err(e) => bail!(
            "cannot write the backup {}: its directory {}: {e}",
            file.display(),
            dir.display()
        ),
    }
    remove_dead_copies(dir);
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    create_0660(&tmp).with_context(|| {
        format!(
            "cannot write the backup {}: cannot create a file in {}",
            file.display(),
            dir.display()
        )
    })?;
    let result = copy_and_check(src, &tmp, now).and_then(|copied| {
        put_in_place(&tmp, file)?;
        Ok(Copied {
            path: file.to_path_buf(),
            ..copied
        })
    });
    let _ = std::fs::remove_file(&tmp);
    for suffix in ["-journal", "-wal", "-shm"] {
        let mut side = tmp.clone().into_os_string();
        side.push(suffix);
        let _ = std::fs::remove_file(PathBuf::from(side));
    }
    result
}

/// The copies in progress (`.NAME.PID.tmp`, and a side file of it) that killed backups left
/// in `dir`, their process gone: a full-size hidden file each, which nothing else removes
/// (a walkthrough counted 45 under a daily timer killed at its timeout). Any name: the daily
/// unit of docs/operations.md names each backup by its date (a re-test: a same-name sweep
/// never found one). Only what reads as one of ours: a SQLite database or an empty file
/// under that pattern (a backup killed right after making it), and its side files.
fn remove_dead_copies(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let file = entry.file_name();
        let Some(main) = file.to_str().and_then(copy_in_progress) else {
            continue;
        };
        let Some(pid) = main
            .strip_suffix(".tmp")
            .and_then(|m| m.rsplit_once('.'))
            .and_then(|(_, pid)| pid.parse::<i32>().ok())
            .filter(|p| *p > 0)
        else {
            continue;
        };
        // Signal 0 asks whether the process lives; ESRCH: it does not. A pid of another
        // namespace (a container, another host on a shared dir) reads gone too: only a copy
        // untouched for an hour is taken for dead (a re-test removed a live one).
        let gone = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None)
            == Err(nix::errno::Errno::ESRCH);
        let idle = entry
            .metadata()
            .ok()
            .and_then(|m| m.modified().ok())
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age >= DEAD_COPY_AGE);
        if gone && idle && reads_as_a_copy(&dir.join(main)) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// How long a copy in progress stays untouched before a later backup takes it for dead.
const DEAD_COPY_AGE: std::time::Duration = std::time::Duration::from_secs(3600);

/// The main file's name of a copy in progress (`.NAME.PID.tmp`) this entry is, itself or a
/// side file of it.
fn copy_in_progress(file: &str) -> Option<&str> {
    if !file.starts_with('.') {
        return None;
    }
    ["", "-journal", "-wal", "-shm"]
        .iter()
        .find_map(|side| file.strip_suffix(side).filter(|m| m.ends_with(".tmp")))
}

/// A copy's main file as a backup leaves it: absent (its side file outlived it), empty, or a
/// SQLite database; never a file of another kind that shares the pattern.
fn reads_as_a_copy(main: &Path) -> bool {
    use std::io::Read;
    let Ok(mut f) = std::fs::File::open(main) else {
        return !main.exists();
    };
    let mut head = [0u8; 16];
    let n = f.read(&mut head).unwrap_or(0);
    n == 0 || (n == 16 && &head == b"SQLite format 3\0")
}

fn create_0660(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o660)
        .open(path)?;
    f.set_permissions(std::fs::Permissions::from_mode(0o660))
}

fn copy_and_check(src: &Connection, tmp: &Path, now: Millis) -> Result<Copied> {
    let mut dst =
        Connection::open(tmp).with_context(|| format!("cannot open {}", tmp.display()))?;
    {
        let backup = Backup::new(src, &mut dst)?;
        // All pages in one step: one read transaction of the source, so the copy is one
        // consistent snapshot and a run's commits meanwhile never restart it.
        match backup.step(-1).context("the online backup failed")? {
            StepResult::Done => {}
            other => bail!("the online backup stopped unfinished ({other:?}); try again"),
        }
    }
    let bad = match quick_check(&dst) {
        Ok(bad) => bad,
        // A page too damaged for the check itself to read is a finding too.
        Err(e) if crate::error::is_damaged_database(&e) => vec![format!("{e:#}")],
        Err(e) => return Err(e.context("cannot check the copy")),
    };
    if !bad.is_empty() {
        bail!(
            "the copy fails PRAGMA quick_check, so the database {} itself is damaged: {} ({}); no backup was written",
            src.path().unwrap_or("?"),
            crate::text::clip(&bad.join("; "), 300),
            crate::error::DAMAGED_DATABASE_HINT
        );
    }
    // Checked first. A pass running as the copy was taken: restored, it is no crash (`runs::CAUGHT_BY_BACKUP`).
    crate::store::runs::mark_caught_by_backup(&dst, now)
        .context("cannot mark the passes running in the copy")?;
    let pages: i64 = dst.query_row("PRAGMA page_count", [], |r| r.get(0))?;
    let page_size: i64 = dst.query_row("PRAGMA page_size", [], |r| r.get(0))?;
    let mut rows = Vec::new();
    for t in COUNTED {
        let n: i64 = dst.query_row(&format!("SELECT COUNT(*) FROM {t}"), [], |r| r.get(0))?;
        rows.push((t, n));
    }
    dst.close().map_err(|(_, e)| e)?;
    std::fs::File::open(tmp)
        .and_then(|f| f.sync_all())
        .with_context(|| format!("cannot sync {}", tmp.display()))?;
    Ok(Copied {
        path: tmp.to_path_buf(),
        pages,
        page_size,
        rows,
    })
}

/// Link the finished copy at `file` (fails if it exists), else, on a file system without
/// hard links, rename it there after one more look.
fn put_in_place(tmp: &Path, file: &Path) -> Result<()> {
    match std::fs::hard_link(tmp, file) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => bail!(
            "{} appeared while the copy was made: a backup never replaces a file",
            file.display()
        ),
        Err(_) if std::fs::symlink_metadata(file).is_err() => std::fs::rename(tmp, file)
            .with_context(|| format!("cannot move the copy to {}", file.display()))?,
        Err(e) => {
            return Err(e).with_context(|| format!("cannot put the copy at {}", file.display()))
        }
    }
    if let Some(dir) = file.parent().filter(|d| !d.as_os_str().is_empty()) {
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_store;

    #[test]
    fn a_copy_while_a_write_is_open_has_every_committed_row_and_mode_0660() {
        let (dir, s) = test_store(0);
        for i in 0..50 {
            crate::store::runs::create(&s.conn, 1, 1, 1, crate::store::runs::StartedBy::Tick, i)
                .unwrap();
        }
        // Another connection holds a write transaction open (a run mid-pass).
        let writer = Connection::open(dir.path().join(crate::store::DB_FILE)).unwrap();
        writer.execute_batch("BEGIN IMMEDIATE").unwrap();
        writer
            .execute(
                "INSERT INTO runs (session_id, pid, pass, started_by, status, started_at)
                 VALUES (1, 1, 1, 'tick', 'running', 99)",
                [],
            )
            .unwrap();
        let file = dir.path().join("copy.db");
        let copied = to_file(&s.conn, &file, 0).unwrap();
        writer.execute_batch("COMMIT").unwrap();
        assert_eq!(copied.rows[0], ("runs", 50), "committed rows only");
        assert!(copied.pages > 10, "{copied:?}");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o660);
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".tmp"))
            .collect();
        assert!(names.is_empty(), "temp files left: {names:?}");
        let copy = Connection::open(&file).unwrap();
        assert!(quick_check(&copy).unwrap().is_empty());
        let n: i64 = copy
            .query_row("SELECT COUNT(*) FROM runs", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 50);
        // Never over an existing file.
        let err = to_file(&s.conn, &file, 0).unwrap_err().to_string();
        assert!(err.contains("exists"), "{err}");
        // A directory that does not exist is named, not the temp file in it.
        let nowhere = dir.path().join("nodir").join("x.db");
        let err = to_file(&s.conn, &nowhere, 0).unwrap_err().to_string();
        assert!(
            err.contains(&format!(
                "{} does not exist",
                dir.path().join("nodir").display()
            )),
            "{err}"
        );
        // So is a file in a directory's place.
        let err = to_file(&s.conn, &file.join("x.db"), 0)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!("{} is not a directory", file.display())),
            "{err}"
        );
    }

    /// What killed backups left (their process gone) goes with the next backup, whatever
    /// its name; a live one's copy, a file of another kind under the pattern, stay.
    #[test]
    fn a_killed_backups_hidden_copy_goes_with_the_next_one() {
        let (dir, s) = test_store(0);
        let d = dir.path();
        let dead = i32::MAX - 7; // no such pid (pid_max is at most 2^22)
        let live = std::process::id();
        let parent = std::os::unix::process::parent_id();
        let sqlite = b"SQLite format 3\0 and pages".to_vec();
        for (f, text) in [
            (format!(".copy.db.{dead}.tmp"), sqlite.clone()),
            (format!(".copy.db.{dead}.tmp-journal"), b"j".to_vec()),
            (format!(".daily-1.db.{dead}.tmp"), Vec::new()),
            (format!(".gone.db.{dead}.tmp-journal"), b"j".to_vec()),
            (format!(".notes.{dead}.tmp"), b"someone's notes".to_vec()),
            (format!(".copy.db.{live}1.tmp.keep"), sqlite.clone()),
            (format!(".copy.db.{parent}.tmp"), sqlite.clone()),
        ] {
            std::fs::write(d.join(&f), text).unwrap();
            // Untouched for long (a copy written a moment ago may be another namespace's).
            let old = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000_000);
            std::fs::File::options()
                .write(true)
                .open(d.join(&f))
                .unwrap()
                .set_modified(old)
                .unwrap();
        }
        // A dead pid's copy written just now stays: its pid may be another namespace's.
        let fresh = format!(".fresh.db.{dead}.tmp");
        std::fs::write(d.join(&fresh), b"SQLite format 3\0").unwrap();
        to_file(&s.conn, &d.join("copy.db"), 0).unwrap();
        let mut left: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".tmp"))
            .collect();
        left.sort();
        let mut want = vec![
            fresh,
            format!(".copy.db.{parent}.tmp"),
            format!(".copy.db.{live}1.tmp.keep"),
            format!(".notes.{dead}.tmp"),
        ];
        want.sort();
        assert_eq!(left, want);
    }

    #[test]
    fn a_damaged_database_gives_no_backup_and_says_so() {
        let (dir, s) = test_store(0);
        for i in 0..500 {
            crate::store::runs::create(&s.conn, 1, 1, 1, crate::store::runs::StartedBy::Tick, i)
                .unwrap();
        }
        s.conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .unwrap();
        let pages: i64 = s
            .conn
            .query_row("PRAGMA page_count", [], |r| r.get(0))
            .unwrap();
        drop(s);
        // A page in the middle of the file: a reader of the edges never reaches it.
        crate::store::damage_page(dir.path(), pages - 2, 4096);
        let src = Connection::open(dir.path().join(crate::store::DB_FILE)).unwrap();
        let file = dir.path().join("copy.db");
        let err = format!("{:#}", to_file(&src, &file, 0).unwrap_err());
        assert!(
            err.contains("fails PRAGMA quick_check") && err.contains("Recovering the database"),
            "{err}"
        );
        assert!(!file.exists());
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .filter(|n| n.to_string_lossy().contains("copy"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }
}
