//! The SQLite store: opening (WAL, busy timeout, foreign keys; read-only on a read-only file
//! system for the commands that only read), migrations by `user_version` (a newer schema is
//! refused), file permissions, and one file per table group.
//!
//! Nothing here talks to the outside world or reads the clock: times are passed in.

pub mod actions;
pub mod backup;
pub mod bad_hosts;
pub mod calibration;
pub mod clock_step;
pub mod curio;
pub mod events;
pub mod health;
pub mod history;
pub mod instances;
pub mod llm_calls;
pub mod messages;
pub mod operator_stops;
pub mod ops;
pub mod price;
pub mod prune;
pub mod report;
pub mod runs;
pub mod samples;
pub mod session;
pub mod sim_config;
pub mod stops_in_flight;
pub mod tally;
#[macro_use]
pub mod text_enum;
pub mod wakes;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use rusqlite::{Connection, OpenFlags, TransactionBehavior};

use crate::clock::Millis;

/// Numbered, append-only schema files. `user_version` = how many are applied.
const MIGRATIONS: &[&str] = &[
    include_str!("../../sql/0001_init.sql"),
    include_str!("../../sql/0002_floor_and_calibration.sql"),
    include_str!("../../sql/0003_curio_ground_truth.sql"),
    include_str!("../../sql/0004_vast_ground_truth.sql"),
    include_str!("../../sql/0005_economics.sql"),
    include_str!("../../sql/0006_operations.sql"),
    include_str!("../../sql/0007_action_codes.sql"),
    include_str!("../../sql/0008_ha.sql"),
    include_str!("../../sql/0009_day_hours.sql"),
    include_str!("../../sql/0010_sim_config.sql"),
    include_str!("../../sql/0011_clock_skew.sql"),
    include_str!("../../sql/0012_tally.sql"),
    include_str!("../../sql/0013_paused_spans.sql"),
    include_str!("../../sql/0014_clock_skew_since.sql"),
    include_str!("../../sql/0015_operator_stop_in_flight.sql"),
    include_str!("../../sql/0016_operator_spoke.sql"),
    include_str!("../../sql/0017_unusable_answers.sql"),
    include_str!("../../sql/0018_stops_in_flight.sql"),
    include_str!("../../sql/0019_sample_saturated.sql"),
];

pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// File name of the database inside the state dir.
pub const DB_FILE: &str = "fleetagent.db";

/// How long a writer waits for another one before failing with SQLITE_BUSY.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// [`BUSY_TIMEOUT`], or the test-only switch's (`faults::busy_timeout`).
pub fn busy_timeout() -> Duration {
    crate::faults::busy_timeout().unwrap_or(BUSY_TIMEOUT)
}

/// The line naming a database another process held locked past the busy timeout, in front
/// of SQLite's "database is locked": which file, and who is likely to hold it.
pub fn locked_line(dir: &Path) -> String {
    let db = dir.join(DB_FILE);
    format!(
        "database {db} was locked by another process past the busy timeout ({}s): most likely \
         another program holding a long write transaction on it (`fuser -v {db}` lists the \
         processes that have it open); fleetagent's own transactions are short, and its runs \
         wait for each other on run.lock, not on the database",
        busy_timeout().as_secs_f64(),
        db = db.display()
    )
}

/// A process that finds the WAL larger than this when it closes the store folds it back and
/// truncates it. Each process is the database's first connection, so SQLite re-reads the
/// whole WAL at open (the wal-index is rebuilt): an unbounded WAL would make every `trigger`
/// slower than the last. 256 KiB is about 15 triggers, whose reads stay short and who share
/// the checkpoint's fsyncs (measured: mean `trigger` 6.2 ms at 256 KiB, 6.3 at 1 MiB, 6.7 at
/// 64 KiB, 8.4 when every process checkpoints, 8.0 and growing with no limit).
const WAL_LIMIT_BYTES: u64 = 256 << 10;

pub struct Store {
    pub conn: Connection,
    pub path: PathBuf,
    /// Opened read-only ([`Store::open_for_report`] on a read-only file system): nothing is
    /// written, not even a checkpoint.
    pub read_only: bool,
    /// With `[ha] enabled`, on the lease's holder: where this copy's changes go at each
    /// fenced step ([`Store::fence`]). None on a single host (and in `sim`): nothing changes.
    pub shared: Option<Box<dyn Shared>>,
}

/// The shared database of several hosts as the store sees it (implemented in `crate::ha`).
pub trait Shared: Send {
    /// A fenced step named `step`: commit what changed in this copy's shared tables to the
    /// shared database while the lease is ours with the margin left, else an error (the
    /// caller stops acting). Runs the fence even when nothing changed, so it is also the
    /// check before a mutating vast.ai request.
    fn push(&mut self, conn: &Connection, step: &str) -> Result<()>;
    /// Events other hosts (and this host's `trigger`) sent, made local events: how many.
    fn take_inbox(&mut self, conn: &Connection, now: Millis) -> Result<usize>;
    /// How many events wait in the shared inbox, not yet made local events.
    fn inbox_waiting(&mut self, conn: &Connection) -> Result<usize>;
    /// Why the last fence no longer vouches for the lease (`ha::mirror::Held::fresh`): a
    /// request that waited since (the create spacing, a 429) must not go. None: it does.
    fn stale(&self, step: &str) -> Option<String>;
}

impl Drop for Store {
    /// Keeps the WAL bounded whatever the command (see WAL_LIMIT_BYTES): one `stat` when it
    /// is small, a checkpoint when it has grown.
    fn drop(&mut self) {
        if !self.read_only
            && self.path != Path::new(":memory:")
            && self.wal_bytes() > WAL_LIMIT_BYTES
        {
            self.checkpoint();
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    /// Create the database when missing (`run`, `init`, `reset-session`, `sim`).
    Create,
    /// Fail with an error naming the state dir when missing (every other command).
    Existing,
    /// [`OpenMode::Existing`], never migrated, for the commands that only read (`inspect`,
    /// `history`, `doctor`, the lists): a schema older than this build's is refused, saying
    /// that the first command of this build that writes migrates it. A new build tried
    /// beside the one the units run must not move the database past what that one reads (it
    /// would fail every pass with "newer schema").
    Report,
    /// [`OpenMode::Report`] that opens an older schema as it is (`backup`: a copy of the
    /// database before an upgrade is what an operator takes it for).
    AsIs,
}

impl Store {
    /// Open (and migrate) `<state_dir>/fleetagent.db`.
    pub fn open(state_dir: &Path, mode: OpenMode, now: Millis) -> Result<Store> {
        let resolved = resolved_dir(state_dir);
        let state_dir = resolved.as_path();
        let path = state_dir.join(DB_FILE);
        let exists = database_exists(state_dir)?;
        if !exists && mode != OpenMode::Create {
            return Err(no_database(state_dir));
        }
        refuse_links(&path)?;
        if let Some(emptied) = emptied_database(state_dir) {
            bail!("{emptied}");
        }
        if !exists {
            // Create the file ourselves so its mode is 0660 whatever the umask; SQLite gives
            // the -wal and -shm files the mode of the database file.
            crate::paths::create_file_0660(&path)
                .with_context(|| format!("cannot create database {}", path.display()))?;
        }
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_NOFOLLOW;
        let conn = Connection::open_with_flags(&path, flags)
            .with_context(|| format!("cannot open database {}", path.display()))?;
        let mut store = Store {
            conn,
            path,
            read_only: false,
            shared: None,
        };
        store
            .setup(now, mode)
            .with_context(|| format!("database {}", store.path.display()))?;
        for suffix in ["-wal", "-shm"] {
            crate::paths::ensure_mode_0660(&store.side_file(suffix));
        }
        Ok(store)
    }

    /// For the commands that only read (`inspect`, `history`, `doctor`): [`Store::open`] of an
    /// existing database on a writable state dir; on a read-only file system (the kernel
    /// remounts one so after a disk error, just when these commands are needed) the database
    /// opened read-only, as the last commit left it.
    pub fn open_for_report(state_dir: &Path, now: Millis) -> Result<Store> {
        match crate::paths::state_dir_access(state_dir)? {
            crate::paths::DirAccess::Writable => Store::open(state_dir, OpenMode::Report, now),
            crate::paths::DirAccess::ReadOnlyFs => Store::open_read_only(state_dir),
        }
    }

    /// Read-only, for a state dir on a read-only file system (nobody can write there, so no
    /// lock is needed). SQLite reads a WAL-mode database on a read-only medium when both side
    /// files exist (the -shm is then read into private memory, SQLite 3.22+), which sees every
    /// commit still in the WAL; fleetagent's processes always leave both (they never
    /// checkpoint on close). Without a WAL, `immutable=1` needs no side file at all. A WAL
    /// without its -shm cannot be read there: the database file alone is read, and a warning
    /// says what is not seen.
    pub fn open_read_only(state_dir: &Path) -> Result<Store> {
        let store = Store::open_read_only_as_is(state_dir)?;
        store
            .check_read_only_schema()
            .with_context(|| format!("database {} (read-only)", store.path.display()))?;
        Ok(store)
    }

    /// The database read-only whatever its schema version (nothing checked but that it is a
    /// file SQLite opens): for a structure check of a database no command of this build
    /// reads (an older schema, before its migration).
    pub fn open_read_only_as_is(state_dir: &Path) -> Result<Store> {
        let path = state_dir.join(DB_FILE);
        if !database_exists(state_dir)? {
            return Err(no_database(state_dir));
        }
        refuse_links(&path)?;
        if let Some(emptied) = emptied_database(state_dir) {
            bail!("{emptied}");
        }
        let wal_bytes = std::fs::metadata(side_file(&path, "-wal")).map_or(0, |m| m.len());
        let mode = if wal_bytes == 0 {
            "immutable=1"
        } else if side_file(&path, "-shm").exists() {
            "mode=ro"
        } else {
            log::warn!(
                "{} has a WAL ({wal_bytes} bytes) but no -shm, which a read-only file system \
                 cannot make: its last commits are not shown",
                path.display()
            );
            "immutable=1"
        };
        let uri = format!("file:{}?{mode}", uri_path(&path)?);
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_URI
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(&uri, flags)
            .with_context(|| format!("cannot open database {} read-only", path.display()))?;
        conn.busy_timeout(busy_timeout())?;
        Ok(Store {
            conn,
            path,
            read_only: true,
            shared: None,
        })
    }

    /// The schema of a database that cannot be migrated: exactly this version.
    fn check_read_only_schema(&self) -> Result<()> {
        self.conn.busy_timeout(busy_timeout())?;
        let version = self.user_version()?;
        if version < 0 {
            bail!("{}", negative_version(version));
        }
        if version == 0 {
            bail!(
                "{} holds no fleetagent database (empty, or another program's file)",
                self.path.display()
            );
        }
        if version > SCHEMA_VERSION {
            bail!(
                "schema version {version} is newer than this fleetagent understands ({SCHEMA_VERSION}); \
                 upgrade fleetagent (the database was left untouched)"
            );
        }
        if version < SCHEMA_VERSION {
            bail!(
                "schema version {version} is older than this fleetagent's ({SCHEMA_VERSION}) and \
                 cannot be migrated on a read-only file system: read it with the fleetagent that \
                 wrote it, or once the file system is writable again"
            );
        }
        self.conn
            .execute_batch("PRAGMA foreign_keys = ON; PRAGMA temp_store = MEMORY;")?;
        Ok(())
    }

    /// An in-memory store with the real migrations, for tests.
    pub fn open_memory(now: Millis) -> Result<Store> {
        let conn = Connection::open_in_memory()?;
        let mut store = Store {
            conn,
            path: PathBuf::from(":memory:"),
            read_only: false,
            shared: None,
        };
        store.setup(now, OpenMode::Create)?;
        Ok(store)
    }

    fn setup(&mut self, now: Millis, mode: OpenMode) -> Result<()> {
        self.conn.busy_timeout(busy_timeout())?;
        // One read of the schema version serves the check below and the migration (`trigger`
        // opens the store on every state change).
        let mut version = self.user_version()?;
        if version < 0 {
            bail!("{}", negative_version(version));
        }
        if mode != OpenMode::Create && version == 0 {
            version = self.require_schema()?;
        }
        // journal_mode answers with a row; WAL persists in the file once set.
        let journal: String = self
            .conn
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
        if journal != "wal" && self.path != Path::new(":memory:") {
            log::warn!("journal_mode is {journal}, not wal");
        }
        self.conn.execute_batch(
            "PRAGMA foreign_keys = ON; PRAGMA synchronous = NORMAL; PRAGMA temp_store = MEMORY;",
        )?;
        // Closing must not checkpoint: `trigger` runs on every state change, and the
        // checkpoint-on-close fsyncs (tens of ms on a busy disk) would dominate it. The WAL is
        // checkpointed and truncated after each `run`, and by any process that leaves it
        // larger than WAL_LIMIT_BYTES (see Drop). Commits stay durable against process
        // crashes (WAL, synchronous=NORMAL).
        self.conn.set_db_config(
            rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
            true,
        )?;
        match mode {
            OpenMode::Report if (1..SCHEMA_VERSION).contains(&version) => {
                bail!("{}", older_schema(version))
            }
            OpenMode::AsIs if (1..SCHEMA_VERSION).contains(&version) => Ok(()),
            _ => self.migrate(now, version),
        }
    }

    /// The schema version of the open database (`backup` names an older one it copied).
    pub fn schema_version(&self) -> Result<i64> {
        self.user_version()
    }

    fn user_version(&self) -> Result<i64> {
        Ok(self
            .conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))?)
    }

    /// For commands that must not create a database, after reading a version 0: a file
    /// without fleetagent's schema (empty, or someone else's) is refused before anything is
    /// written to it. A `run` that is creating the schema right now holds the write lock, so
    /// the version is read again under it (the busy timeout waits for the creator's commit);
    /// returns that version.
    fn require_schema(&mut self) -> Result<i64> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let version: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        drop(tx);
        if version == 0 {
            bail!(
                "{} holds no fleetagent database yet (an empty file, or another program's): \
                 `fleetagent init` makes one in an empty file; another program's file, move it \
                 away first",
                self.path.display()
            );
        }
        Ok(version)
    }

    /// `version`: the schema version as `setup` read it (read again under the write lock
    /// before migrating).
    fn migrate(&mut self, now: Millis, version: i64) -> Result<()> {
        if version > SCHEMA_VERSION {
            bail!(
                "schema version {version} is newer than this fleetagent understands ({SCHEMA_VERSION}); \
                 upgrade fleetagent (the database was left untouched)"
            );
        }
        if version == SCHEMA_VERSION {
            return Ok(());
        }
        // A migration may rebuild a table others refer to (SQLite's procedure for what ALTER
        // TABLE cannot do): foreign keys are off while it runs (the pragma is a no-op inside a
        // transaction) and every one is checked before the commit.
        self.conn.execute_batch("PRAGMA foreign_keys = OFF")?;
        let result = self.migrate_locked(now);
        self.conn.execute_batch("PRAGMA foreign_keys = ON")?;
        result
    }

    fn migrate_locked(&mut self, now: Millis) -> Result<()> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        // Re-read under the write lock: another process may have migrated meanwhile.
        let version: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if version == 0 {
            let tables: i64 = tx.query_row(
                "SELECT COUNT(*) FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'",
                [],
                |r| r.get(0),
            )?;
            if tables > 0 {
                bail!(
                    "it holds {tables} tables or indexes but no fleetagent schema (user_version 0): \
                     another program's database, left untouched"
                );
            }
        }
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
            if let Err(e) = tx.execute_batch(sql) {
                return Err(failed_migration(i + 1, version, e));
            }
        }
        if version == 0 {
            session::bootstrap(&tx, now)?;
        }
        // A new install, or the first open of a database older than install ids.
        ops::ensure_install_id(&tx, version == 0)?;
        let broken: i64 =
            tx.query_row("SELECT COUNT(*) FROM pragma_foreign_key_check", [], |r| {
                r.get(0)
            })?;
        if broken > 0 {
            bail!("the migration left {broken} row(s) whose foreign key points nowhere; the database was left untouched");
        }
        tx.pragma_update(None, "user_version", SCHEMA_VERSION)?;
        tx.commit()?;
        Ok(())
    }

    /// A fenced step (docs/ha.md): with a shared database, push this copy's changes while
    /// the lease is ours, or fail; without one, nothing.
    pub fn fence(&mut self, step: &str) -> Result<()> {
        match &mut self.shared {
            Some(shared) => shared.push(&self.conn, step),
            None => Ok(()),
        }
    }

    /// With a shared database: why the last fenced step no longer vouches for the lease at
    /// this moment (a vast.ai request about to go after a wait); None on a single host.
    pub fn fence_stale(&self, step: &str) -> Option<String> {
        self.shared.as_ref().and_then(|s| s.stale(step))
    }

    /// With a shared database: the inbox's events made local (before a claim and at the
    /// last look); without one, 0.
    pub fn take_inbox(&mut self, now: Millis) -> Result<usize> {
        match &mut self.shared {
            Some(shared) => shared.take_inbox(&self.conn, now),
            None => Ok(0),
        }
    }

    /// A write transaction that takes the write lock at BEGIN (no upgrade deadlocks).
    pub fn immediate(&mut self) -> Result<rusqlite::Transaction<'_>> {
        Ok(self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?)
    }

    /// Fold the WAL back into the database and truncate it (after a run, or when a process
    /// leaves it larger than WAL_LIMIT_BYTES). Never waits: while another process reads or
    /// writes, it is skipped and the next one does it. A PASSIVE checkpoint would not do:
    /// the next process rebuilds the wal-index as if nothing had been copied back, so the WAL
    /// would never restart and would grow forever.
    pub fn checkpoint(&self) {
        if self.read_only || self.path == Path::new(":memory:") {
            return;
        }
        let result = self.conn.busy_timeout(Duration::ZERO).and_then(|()| {
            self.conn
                .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                    r.get::<_, i64>(0)
                })
        });
        match result {
            Ok(0) => {}
            Ok(_) => log::debug!("checkpoint deferred: another process uses the database"),
            Err(e) => log::info!("checkpoint skipped: {e}"),
        }
        let _ = self.conn.busy_timeout(busy_timeout());
    }

    /// SQLite's file beside the database: `-wal` or `-shm`.
    pub fn side_file(&self, suffix: &str) -> PathBuf {
        side_file(&self.path, suffix)
    }

    /// The WAL's size in bytes (0 when absent).
    pub fn wal_bytes(&self) -> u64 {
        std::fs::metadata(self.side_file("-wal")).map_or(0, |m| m.len())
    }

    /// The id the next run row will get.
    pub fn next_run_id(&self) -> Result<i64> {
        let seq: Option<i64> = self
            .conn
            .query_row(
                "SELECT seq FROM sqlite_sequence WHERE name = 'runs'",
                [],
                |r| r.get(0),
            )
            .or_else(|e| match e {
                rusqlite::Error::QueryReturnedNoRows => Ok(None),
                e => Err(e),
            })?;
        seq.unwrap_or(0).checked_add(1).with_context(|| {
            format!(
                "{}: the run id sequence is exhausted (sqlite_sequence 'runs' at {}): a damaged or hand-edited database",
                self.path.display(),
                i64::MAX
            )
        })
    }
}

/// The state dir as its links resolve (as given when it cannot be resolved): SQLite's
/// NOFOLLOW refuses a link anywhere in the path, and a state dir under a linked home
/// (/home -> /var/home) failed every command with "unable to open database file" (the
/// database file itself must still be no link).
pub(crate) fn resolved_dir(state_dir: &Path) -> PathBuf {
    state_dir
        .canonicalize()
        .unwrap_or_else(|_| state_dir.to_path_buf())
}

/// The database of `state_dir` and its side files: `fleetagent.db`, `-wal`, `-shm`.
pub(crate) fn database_files(state_dir: &Path) -> [PathBuf; 3] {
    let db = state_dir.join(DB_FILE);
    ["", "-wal", "-shm"].map(|suffix| side_file(&db, suffix))
}

fn side_file(db: &Path, suffix: &str) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// Whether `<state_dir>/fleetagent.db` exists; an error, not "no", when the dir cannot be
/// looked into (a caller with the wrong user or group must not be told to `init` over a
/// database that is there).
pub fn database_exists(state_dir: &Path) -> Result<bool> {
    state_dir.join(DB_FILE).try_exists().map_err(|e| {
        anyhow::anyhow!(
            "cannot look for the database in state dir {}: {e} (run as the service's user, or \
             as a member of the state dir's group: docs/operations.md)",
            state_dir.display()
        )
    })
}

/// `run` where runs were made before (the state dir keeps their `run.lock`) but the database
/// is gone: deleted or moved. A new one would restart the run ids at 1 and take a new install
/// id, and the old instances, labelled with the old one, would be another install's: never
/// counted against the caps (the rules would rent past them), never stopped. Refused with how
/// to go on: restore it, or start afresh on purpose with `init`.
pub fn refuse_lost_database(state_dir: &Path) -> Result<()> {
    if database_exists(state_dir)? {
        return match emptied_database(state_dir) {
            Some(emptied) => bail!("{emptied}"),
            None => Ok(()),
        };
    }
    match lost_database(state_dir) {
        Some(lost) => bail!("{lost}"),
        None => Ok(()),
    }
}

/// A database file of 0 bytes that was emptied, not made new: runs were made there
/// (`run.lock`), or its WAL holds frames (SQLite writes the header, page 1, before any frame
/// can be in a WAL). SQLite would take the file for an empty database, discard the WAL as it
/// opens it, and a run would start afresh beside the fleet, as with a deleted one
/// ([`refuse_lost_database`]). Checked before SQLite opens the file, so the WAL is kept for
/// whoever recovers it. None for a whole database, or a 0-byte file with nothing beside it.
pub fn emptied_database(state_dir: &Path) -> Option<String> {
    let db = state_dir.join(DB_FILE);
    let len = |p: &Path| std::fs::metadata(p).map_or(0, |m| m.len());
    if len(&db) > 0 || !db.exists() {
        return None;
    }
    let head = format!(
        "the database in state dir {} is empty (0 bytes)",
        state_dir.display()
    );
    let wal = len(&side_file(&db, "-wal"));
    runs_were_made(state_dir, &head, "it was emptied").or_else(|| {
        (wal > 0).then(|| {
            format!(
                "{head}, but its -wal holds {wal} bytes: the file was emptied, and opening it would discard the WAL; keep both files and restore the newest `fleetagent backup` (docs/operations.md \"Backups\"), or move them away and start afresh with `fleetagent init`"
            )
        })
    })
}

/// The line for a state dir whose `run.lock` shows that runs were made there and whose
/// database is gone (None when there is no lock: a state dir never run in).
pub fn lost_database(state_dir: &Path) -> Option<String> {
    let head = format!("no database in state dir {}", state_dir.display());
    runs_were_made(state_dir, &head, "the database was deleted or moved")
}

/// `head`, then that the lock shows runs were made in `state_dir`, what `happened`, and how
/// to go on; None when the lock notes no run (there is none, or the `run` asking made it
/// just now: a walkthrough saw a first `run` on an empty file told "runs were made here").
fn runs_were_made(state_dir: &Path, head: &str, happened: &str) -> Option<String> {
    crate::lock::last_run_noted(state_dir)?;
    Some(format!(
        "{head}, but its {} shows that runs were made here: {happened}, and a new one would not know the fleet (its instances would be another install's, past the caps); restore it (the newest `fleetagent backup`, docs/operations.md \"Backups\"), or start afresh on purpose with `fleetagent init --install-id ID`, ID from the instances' labels (<label_prefix>-ID-r<run>-...)",
        crate::paths::LOCK_FILE
    ))
}

/// The database and its side files must not be links (nor anything but regular files): SQLite
/// would write through them (`paths::STATE_FILES`).
fn refuse_links(path: &Path) -> Result<()> {
    crate::paths::refuse_special(path)?;
    for suffix in ["-wal", "-shm", "-journal"] {
        crate::paths::refuse_special(&side_file(path, suffix))?;
    }
    Ok(())
}

/// A migration that failed, in one line. Its SQL did not fit the tables (written by a
/// development build, or changed by hand): SQLite's message without the statement it quotes
/// (a whole migration file) and what to do. Anything else (a full disk, an I/O error) keeps
/// its cause in the chain, which names storage faults. The transaction is rolled back, so the
/// database is as it was.
fn failed_migration(number: usize, from: i64, e: rusqlite::Error) -> anyhow::Error {
    let rusqlite::Error::SqlInputError { msg, .. } = &e else {
        return anyhow::Error::new(e).context(format!(
            "migration {number:04} failed; the database (schema version {from}) was left untouched"
        ));
    };
    let error = crate::text::clip(msg.lines().next().unwrap_or_default(), 200);
    anyhow::anyhow!(
        "migration {number:04} failed: {error}; the database (schema version {from}) was left \
         untouched. Its tables are not the ones fleetagent's schema {from} has (written by a \
         development build, or changed by hand): restore a backup, or move fleetagent.db* \
         aside and run `fleetagent init --install-id ID` with its install id if it had one \
         (`inspect` of the build that wrote it), so that its instances stay ours"
    )
}

/// A reader's refusal of a database whose schema is older than this build's: nothing was
/// changed, and what migrates it.
fn older_schema(version: i64) -> String {
    format!(
        "schema version {version} is older than this fleetagent's ({SCHEMA_VERSION}); this command \
         only reads and left it untouched (the fleetagent that wrote it may still be running \
         on it): the first command of this build that writes (`run`, `trigger`, `pause`, \
         `message`, ...) migrates it, and the fleetagent that wrote it then refuses it (take \
         a `fleetagent backup FILE` first), or read it with the fleetagent that wrote it"
    )
}

/// A schema version below 0 is none fleetagent ever wrote: another program's file, or a
/// damaged header. Refused before anything is written (it once read as "every migration
/// done" and was stamped current).
fn negative_version(version: i64) -> String {
    format!(
        "schema version {version} is not one fleetagent writes (another program's file, or a damaged header); the database was left untouched"
    )
}

fn no_database(state_dir: &Path) -> anyhow::Error {
    if let Some(lost) = lost_database(state_dir) {
        return anyhow::anyhow!("{lost}");
    }
    anyhow::anyhow!(
        "no database in state dir {} (run `fleetagent init` or `fleetagent run` there first, \
         or pass the right --state-dir / config)",
        state_dir.display()
    )
}

/// A path as the path of a `file:` URI: SQLite reads `?` as the start of the parameters, `#`
/// as a fragment and `%` as an escape, so those three are escaped.
fn uri_path(path: &Path) -> Result<String> {
    let Some(text) = path.to_str() else {
        bail!(
            "{} is not valid UTF-8: it cannot be opened read-only",
            path.display()
        );
    };
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '%' => out.push_str("%25"),
            '?' => out.push_str("%3f"),
            '#' => out.push_str("%23"),
            c => out.push(c),
        }
    }
    Ok(out)
}

/// A store on a real file (made by [`Store::open`], as every command does) in a fresh temp
/// dir, for the tests of each table group. Bind it as `let (_dir, s) = ...`: the store, bound
/// last, is dropped before its dir.
/// Overwrite page `page` (1-based) of the database file in `dir` with garbage, as a disk
/// error would: for the tests of what reads a damaged file.
#[cfg(test)]
pub(crate) fn damage_page(dir: &Path, page: i64, page_size: i64) {
    use std::io::{Seek, SeekFrom, Write};
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join(DB_FILE))
        .unwrap();
    f.seek(SeekFrom::Start(((page - 1) * page_size) as u64))
        .unwrap();
    f.write_all(&vec![0xA5; page_size as usize]).unwrap();
}

#[cfg(test)]
pub(crate) fn test_store(now: Millis) -> (tempfile::TempDir, Store) {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    // An install's state dir is 2770; tempfile's follows the umask (0755 under 022).
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o2770)).unwrap();
    let store = Store::open(dir.path(), OpenMode::Create, now).unwrap();
    (dir, store)
}

#[cfg(test)]
mod tests;
