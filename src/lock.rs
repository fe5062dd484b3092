//! The single-run lock: an exclusive flock on `<state_dir>/run.lock`, held as a guard value.
//! The kernel drops it when the process dies. Others read its state from /proc/locks,
//! never by trying it; where /proc/locks is hidden (the units' `ProcSubset=pid`), `poll` and
//! `doctor` try a shared lock without waiting ([`holder_probed`]), and `inspect` says unknown.
//!
//! The file holds two notes. While a run holds the lock, its first line is `<pid> <start ms>`
//! (for `doctor` and `inspect`). Its line `last-run <id>` outlives the holder: the highest run
//! id this state dir gave. A database restored from an older backup, or one that lost its last
//! writes (a deleted WAL), would otherwise give those ids again, and labels that carry them
//! (`run::observe` only sees the ones vast.ai still lists).

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use fs2::FileExt;

use crate::clock::{Clock, Millis};

/// How often a waiting `run` retries the lock.
const POLL: Duration = Duration::from_millis(100);

#[derive(Debug)]
pub struct RunLock {
    file: File,
    pub path: PathBuf,
    /// When this process took the lock (Unix ms).
    since: Millis,
    /// The highest run id this state dir gave, by the file's `last-run` note.
    last_run: Option<i64>,
}

impl RunLock {
    /// Take the lock, waiting for a holder until `deadline` (Unix ms).
    pub fn acquire(state_dir: &Path, clock: &dyn Clock, deadline: Millis) -> Result<RunLock> {
        let path = state_dir.join(crate::paths::LOCK_FILE);
        crate::paths::refuse_special(&path)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .custom_flags(crate::paths::no_follow())
            .mode(0o660)
            .open(&path)
            .with_context(|| format!("cannot open lock {}", path.display()))?;
        crate::paths::ensure_mode_0660(&path);
        let mut logged = false;
        loop {
            match file.try_lock_exclusive() {
                Ok(()) => break,
                Err(e) if e.raw_os_error() == fs2::lock_contended_error().raw_os_error() => {
                    if clock.now_ms() >= deadline {
                        let holder = holder_pid(&path)
                            .map(|p| format!("pid {p}"))
                            .unwrap_or_else(|| "an unknown process".into());
                        bail!(
                            "lock {} still held by {holder} at this run's deadline; giving up",
                            path.display()
                        );
                    }
                    if !logged {
                        log::info!(
                            "another run holds {} ({}); waiting for it",
                            path.display(),
                            holder_pid(&path)
                                .map(|p| format!("pid {p}"))
                                .unwrap_or_else(|| "holder unknown".into())
                        );
                        logged = true;
                    }
                    clock.sleep(POLL);
                }
                Err(e) => return Err(e).with_context(|| format!("cannot lock {}", path.display())),
            }
        }
        let mut note = String::new();
        let _ = (&file).read_to_string(&mut note);
        let mut lock = RunLock {
            file,
            path,
            since: clock.now_ms(),
            last_run: last_run_of(&note),
        };
        lock.note_holder(true);
        Ok(lock)
    }

    /// The highest run id this state dir gave before this process, by the lock's note.
    pub fn last_run(&self) -> Option<i64> {
        self.last_run
    }

    /// This process gave run id `id`: the note keeps the highest, for the next process.
    pub fn record_run(&mut self, id: i64) {
        if self.last_run.is_some_and(|last| last >= id) {
            return;
        }
        self.last_run = Some(id);
        self.note_holder(true);
    }

    /// Write the notes: "pid start-ms" while `held`, then `last-run <id>`. Best effort: the
    /// lock itself is the flock.
    fn note_holder(&mut self, held: bool) {
        let mut text = String::new();
        if held {
            text.push_str(&format!("{} {}\n", std::process::id(), self.since));
        }
        if let Some(last) = self.last_run {
            text.push_str(&format!("{LAST_RUN} {last}\n"));
        }
        let _ = self.file.set_len(0);
        let _ = self.file.seek(SeekFrom::Start(0));
        let _ = self.file.write_all(text.as_bytes());
    }
}

impl Drop for RunLock {
    fn drop(&mut self) {
        // Clear the holder's note first, so no reader takes it for the next holder's.
        self.note_holder(false);
        let _ = FileExt::unlock(&self.file);
    }
}

/// The highest run id the state dir's lock note says was given (None: no note), read
/// without taking the lock: for `reset-session`, which names the next run.
pub fn last_run_noted(state_dir: &Path) -> Option<i64> {
    last_run_of(&std::fs::read_to_string(state_dir.join(crate::paths::LOCK_FILE)).ok()?)
}

/// More runs than a state dir gives in centuries (288 a day at the 5-minute timer): a
/// `last-run` note this far past the database is no run it gave (a hand edit, a damaged
/// file), and going past it would spend the id space (AUTOINCREMENT stops at 2^63 - 1).
pub const IMPLAUSIBLE_RUN_GAP: i64 = 100_000_000;

/// The next run id a `last-run` note asks for, given the database's own next one: None when
/// the database is already past it, or the note is implausible ([`IMPLAUSIBLE_RUN_GAP`]).
pub fn next_past(last: i64, db_next: i64) -> Option<i64> {
    (last >= db_next && last - db_next <= IMPLAUSIBLE_RUN_GAP).then(|| last + 1)
}

/// The id the next run of this state dir gets, from the database's next (`db_next`): past
/// the lock's `last-run` note when the database is older than the runs the dir gave (a
/// restored backup; `run::continue_past_the_lock` does the same).
pub fn next_run_id(state_dir: &Path, db_next: i64) -> i64 {
    last_run_noted(state_dir)
        .and_then(|last| next_past(last, db_next))
        .unwrap_or(db_next)
}

/// The word of the note that outlives the holder.
const LAST_RUN: &str = "last-run";

/// The `last-run <id>` note of a lock file's text.
fn last_run_of(note: &str) -> Option<i64> {
    note.lines()
        .find_map(|l| l.trim().strip_prefix(LAST_RUN))
        .and_then(|id| id.trim().parse().ok())
        .filter(|&id: &i64| id > 0)
}

/// Who holds the lock on a file, as /proc/locks says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holder {
    /// Held, by this pid when known (a holder found by [`holder_probed`] is named by its note).
    Held(Option<u32>),
    Free,
    /// /proc/locks cannot be read: the units' `ProcSubset=pid` hides it, as some containers do.
    Unknown,
}

impl Holder {
    pub fn pid(self) -> Option<u32> {
        match self {
            Holder::Held(pid) => pid,
            _ => None,
        }
    }
}

/// Who holds an FLOCK on this file, read from /proc/locks (no file: free).
pub fn holder(path: &Path) -> Holder {
    let Ok(meta) = std::fs::metadata(path) else {
        return Holder::Free;
    };
    match std::fs::read_to_string("/proc/locks") {
        Ok(locks) => find_flock_holder(&locks, meta.dev(), meta.ino())
            .map_or(Holder::Free, |pid| Holder::Held(Some(pid))),
        Err(_) => Holder::Unknown,
    }
}

/// The pid holding an FLOCK on this file, read from /proc/locks (None when free or unknown).
pub fn holder_pid(path: &Path) -> Option<u32> {
    holder(path).pid()
}

/// [`holder`], where /proc/locks cannot say (the units' `ProcSubset=pid` hides it: `poll`
/// in its unit read every run's lock as free) asked of the lock itself: a shared lock tried
/// without waiting and dropped at once (a run starting meanwhile waits those microseconds).
/// For `poll` and `doctor`, which must not judge a pass going as ended; `inspect` never tries
/// the lock. A holder found so is named by its note's pid.
pub fn holder_probed(path: &Path) -> Holder {
    match holder(path) {
        Holder::Unknown => probe(path),
        read => read,
    }
}

/// Who holds the lock, asked of the lock itself ([`holder_probed`]).
fn probe(path: &Path) -> Holder {
    let Ok(file) = OpenOptions::new()
        .read(true)
        .custom_flags(crate::paths::no_follow())
        .open(path)
    else {
        return Holder::Unknown;
    };
    match FileExt::try_lock_shared(&file) {
        Ok(()) => {
            let _ = FileExt::unlock(&file);
            Holder::Free
        }
        Err(e) if e.raw_os_error() == fs2::lock_contended_error().raw_os_error() => {
            Holder::Held(noted_pid(path))
        }
        Err(_) => Holder::Unknown,
    }
}

/// The pid of the holder's note (the file's first line, `<pid> <start ms>`), if any, while
/// that process lives: a run that crashed leaves its note, and the lock's holder is then
/// another process (`flock(1)`; a re-test was told to kill the dead run's pid).
fn noted_pid(path: &Path) -> Option<u32> {
    let text = std::fs::read_to_string(path).ok()?;
    let first = text.lines().next()?;
    let mut fields = first.split_whitespace();
    let pid: u32 = fields.next()?.parse().ok()?;
    fields.next()?.parse::<Millis>().ok()?;
    let raw = i32::try_from(pid).ok().filter(|p| *p > 0)?;
    // Signal 0 asks whether it lives (EPERM: it does, another user's).
    let dead = nix::sys::signal::kill(nix::unistd::Pid::from_raw(raw), None)
        == Err(nix::errno::Errno::ESRCH);
    (!dead).then_some(pid)
}

/// When `holder` took the lock, from the note it wrote (Unix ms). None when the note is
/// another process's (a run that has ended, or a holder that writes no note, such as
/// `flock(1)`): its time says nothing about the current holder.
pub fn held_since(state_dir: &Path, holder: u32) -> Option<Millis> {
    let text = std::fs::read_to_string(state_dir.join(crate::paths::LOCK_FILE)).ok()?;
    let mut fields = text.split_whitespace();
    let pid: u32 = fields.next()?.parse().ok()?;
    if pid != holder {
        return None;
    }
    fields.next()?.parse().ok()
}

/// When process `pid` started (Unix ms), from /proc: for a lock holder that wrote no note
/// (`flock(1)`, another program), the longest it can have held the lock. None when /proc
/// does not say.
pub fn process_started(pid: u32) -> Option<Millis> {
    // starttime is the 22nd field, the 20th after the comm.
    let ticks: u64 = stat_after_comm(pid)?
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()?;
    let boot: i64 = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .filter(|&h| h > 0)? as u64;
    Some(boot * 1000 + (ticks * 1000 / hz) as i64)
}

/// Whether process `pid` is stopped, from its state in /proc (`T`: SIGSTOP, Ctrl-Z; `t`:
/// stopped by a debugger): a stopped holder keeps the lock, and a SIGTERM to it waits behind
/// the stop. None when /proc does not say.
pub fn process_stopped(pid: u32) -> Option<Stopped> {
    // The state is the first field after the comm.
    match stat_after_comm(pid)?.split_whitespace().next()? {
        "T" => Some(Stopped::BySignal),
        "t" => Some(Stopped::ByDebugger),
        _ => None,
    }
}

/// The fields of /proc/`pid`/stat after the comm: `pid (comm) state ...`, where comm may
/// hold spaces and parentheses, so it ends at the last `)`.
fn stat_after_comm(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(stat[stat.rfind(')')? + 1..].to_string())
}

/// How a process is stopped ([`process_stopped`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// SIGSTOP, SIGTSTP (Ctrl-Z): SIGCONT resumes it.
    BySignal,
    /// A tracer holds it (a debugger): SIGCONT does not resume it, SIGKILL ends it.
    ByDebugger,
}

/// Parse /proc/locks: `1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF`. Waiters (`->`) are
/// skipped. The device is `major:minor` in hex.
fn find_flock_holder(locks: &str, dev: u64, ino: u64) -> Option<u32> {
    let major = nix::sys::stat::major(dev);
    let minor = nix::sys::stat::minor(dev);
    for line in locks.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 6 || fields.get(1) == Some(&"->") || fields[1] != "FLOCK" {
            continue;
        }
        let mut id = fields[5].split(':');
        let (Some(maj), Some(min), Some(inode)) = (id.next(), id.next(), id.next()) else {
            continue;
        };
        let same_dev = u64::from_str_radix(maj, 16).ok() == Some(major)
            && u64::from_str_radix(min, 16).ok() == Some(minor);
        if same_dev && inode.parse::<u64>().ok() == Some(ino) {
            return fields[4].parse().ok();
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::SystemClock;

    /// Where /proc/locks is hidden, the lock itself says whether a run holds it, and its
    /// note which: a pass going is not read as ended (poll released an HA lease under it).
    #[test]
    fn a_probe_tells_a_held_lock_from_a_free_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(crate::paths::LOCK_FILE);
        assert_eq!(
            holder_probed(&path),
            Holder::Free,
            "no file: nobody holds it"
        );
        let lock = RunLock::acquire(dir.path(), &SystemClock, i64::MAX).unwrap();
        assert_eq!(probe(&path), Holder::Held(Some(std::process::id())));
        assert_eq!(holder_probed(&path), Holder::Held(Some(std::process::id())));
        drop(lock);
        assert_eq!(probe(&path), Holder::Free);
        // A holder that writes no note (flock(1)) is held, by an unknown pid; so is one
        // behind a note a dead run left.
        let other = File::open(&path).unwrap();
        FileExt::lock_exclusive(&other).unwrap();
        assert_eq!(probe(&path), Holder::Held(None));
        std::fs::write(&path, format!("{} 1000\n", i32::MAX - 7)).unwrap();
        assert_eq!(probe(&path), Holder::Held(None));
    }

    #[test]
    fn parses_proc_locks() {
        let dev = nix::sys::stat::makedev(0xfd, 0x01);
        let text = "1: POSIX  ADVISORY  WRITE 99 fd:01:42 0 EOF\n\
                    2: FLOCK  ADVISORY  WRITE 1234 fd:01:42 0 EOF\n\
                    2: -> FLOCK  ADVISORY  WRITE 555 fd:01:42 0 EOF\n";
        assert_eq!(find_flock_holder(text, dev, 42), Some(1234));
        assert_eq!(find_flock_holder(text, dev, 43), None);
    }

    #[test]
    fn held_lock_is_seen_in_proc_locks() {
        let dir = tempfile::tempdir().unwrap();
        assert!(holder_pid(&dir.path().join(crate::paths::LOCK_FILE)).is_none());
        let clock = SystemClock;
        let lock = RunLock::acquire(dir.path(), &clock, clock.now_ms() + 1_000).unwrap();
        assert!(holder_pid(&dir.path().join(crate::paths::LOCK_FILE)).is_some());
        assert_eq!(holder_pid(&lock.path), Some(std::process::id()));
        assert!(held_since(dir.path(), std::process::id()).is_some());
        assert!(held_since(dir.path(), std::process::id() + 1).is_none());
        drop(lock);
        assert!(holder_pid(&dir.path().join(crate::paths::LOCK_FILE)).is_none());
        assert!(held_since(dir.path(), std::process::id()).is_none());
    }

    #[test]
    fn the_highest_run_id_outlives_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let clock = SystemClock;
        let take = || RunLock::acquire(dir.path(), &clock, clock.now_ms() + 1_000).unwrap();
        let mut lock = take();
        assert_eq!(lock.last_run(), None);
        lock.record_run(7);
        lock.record_run(5);
        assert!(held_since(dir.path(), std::process::id()).is_some());
        drop(lock);
        let note = std::fs::read_to_string(dir.path().join(crate::paths::LOCK_FILE)).unwrap();
        assert_eq!(note, "last-run 7\n");
        assert!(held_since(dir.path(), std::process::id()).is_none());
        let mut lock = take();
        assert_eq!(lock.last_run(), Some(7));
        lock.record_run(8);
        drop(lock);
        assert_eq!(take().last_run(), Some(8));
        // A note from before this line existed ("pid start-ms", or nothing) gives none.
        std::fs::write(dir.path().join(crate::paths::LOCK_FILE), "123 456\n").unwrap();
        assert_eq!(take().last_run(), None);
    }
}
