//! The state dir: where it is, creating it (setgid 2770), refusing a world-writable one,
//! creating files 0660 whatever the umask, and what its file system says of itself (read-only,
//! free space) when an error needs naming. Nothing here writes inside the dir.

use std::fs::{self, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::error::usage;

/// Doorbell file name inside the state dir: exists = work is waiting.
pub const DOORBELL_FILE: &str = "trigger";
/// The single-run lock file.
pub const LOCK_FILE: &str = "run.lock";

/// Resolve the state dir: `--state-dir`, else `state_dir` in the config, else
/// `$STATE_DIRECTORY` (systemd; the first of a colon-separated list), else
/// `/var/lib/fleetagent` for root, else `$XDG_STATE_HOME/fleetagent` or
/// `~/.local/state/fleetagent`.
pub fn resolve_state_dir(
    flag: Option<&Path>,
    from_config: Option<&Path>,
    env: &dyn Fn(&str) -> Option<String>,
    is_root: bool,
) -> Result<PathBuf> {
    if let Some(p) = flag {
        return Ok(absolute(p));
    }
    if let Some(p) = from_config {
        return Ok(p.to_path_buf());
    }
    if let Some(v) = env("STATE_DIRECTORY").filter(|v| !v.is_empty()) {
        let first = v.split(':').next().unwrap_or(&v);
        return Ok(PathBuf::from(first));
    }
    if is_root {
        return Ok(PathBuf::from("/var/lib/fleetagent"));
    }
    match base_dir(env, "XDG_STATE_HOME", ".local/state")? {
        Some(dir) => Ok(dir.join("fleetagent")),
        None => Err(usage(
            "cannot choose a state dir: neither XDG_STATE_HOME nor HOME is set; pass --state-dir",
        )),
    }
}

/// An XDG base dir: `$var`, else `$HOME/<under_home>` (an empty value counts as unset); None
/// when neither is set. A relative value is a usage error naming the variable. The XDG spec
/// says to ignore one, but not every program does (systemd, the shells and man each read
/// these variables their own way), so a fallback could put files where the program meant to
/// read them does not look; an error names what to fix instead.
pub fn base_dir(
    env: &dyn Fn(&str) -> Option<String>,
    var: &str,
    under_home: &str,
) -> Result<Option<PathBuf>> {
    if let Some(v) = env(var).filter(|v| !v.is_empty()) {
        return absolute_var(var, &v).map(Some);
    }
    match env("HOME").filter(|v| !v.is_empty()) {
        Some(home) => Ok(Some(absolute_var("HOME", &home)?.join(under_home))),
        None => Ok(None),
    }
}

fn absolute_var(var: &str, value: &str) -> Result<PathBuf> {
    let p = PathBuf::from(value);
    if p.is_absolute() {
        Ok(p)
    } else {
        Err(usage(format!(
            "{var}={value:?} is not an absolute path: set it to one (or unset it)"
        )))
    }
}

fn absolute(p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|d| d.join(p))
            .unwrap_or_else(|_| p.to_path_buf())
    }
}

/// Check an existing state dir: it exists, is a directory, is not world-writable, and this
/// process may write in it (access(2), never by writing).
pub fn check_state_dir(dir: &Path) -> Result<()> {
    match state_dir_access(dir)? {
        DirAccess::Writable => Ok(()),
        DirAccess::ReadOnlyFs => bail!("{}", read_only_fs(dir)),
    }
}

/// What a command may do in a state dir that passed the checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirAccess {
    Writable,
    /// On a read-only file system: readable, nothing can be recorded.
    ReadOnlyFs,
}

/// The line naming a state dir on a read-only file system.
pub fn read_only_fs(dir: &Path) -> String {
    format!(
        "state dir {} is on a read-only file system (the kernel remounts one read-only after a \
         disk error: see `journalctl -k`): nothing can be recorded until it is repaired and \
         mounted read-write again; `fleetagent inspect`, `history` and `doctor` still read it",
        dir.display()
    )
}

/// [`check_state_dir`] for the commands that only read (`inspect`, `history`, `doctor`): a
/// read-only file system is an answer, not an error (they are needed most just then).
pub fn state_dir_access(dir: &Path) -> Result<DirAccess> {
    use nix::errno::Errno;
    use nix::unistd::{access, AccessFlags};
    let meta = fs::metadata(dir).with_context(|| format!("state dir {}", dir.display()))?;
    if !meta.is_dir() {
        bail!("state dir {} is not a directory", dir.display());
    }
    let mode = meta.permissions().mode();
    if mode & 0o002 != 0 {
        bail!(
            "state dir {} is world-writable (mode {:o}); refusing it: run chmod o-w {} (fleetagent wants 2770)",
            dir.display(),
            mode & 0o7777,
            dir.display()
        );
    }
    match access(dir, AccessFlags::W_OK | AccessFlags::X_OK) {
        Ok(()) => Ok(DirAccess::Writable),
        Err(Errno::EROFS) => Ok(DirAccess::ReadOnlyFs),
        Err(_) if fs_state(dir).is_some_and(|f| f.read_only) => Ok(DirAccess::ReadOnlyFs),
        // Immutable: no mode or owner can help (a re-test was told to fix them).
        Err(Errno::EPERM) => bail!(
            "state dir {} is immutable (`lsattr -d` shows `i`): nothing can be created or deleted in it; chattr -i {}",
            dir.display(),
            dir.display()
        ),
        Err(_) => bail!(
            "state dir {} is not writable by uid {} (mode {:o}); fix its owner/group or pass another --state-dir",
            dir.display(),
            nix::unistd::geteuid(),
            mode & 0o7777
        ),
    }
}

/// What the file system holding a path says of itself (statvfs(3)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsState {
    /// Mounted read-only (ST_RDONLY), as the kernel remounts one after a disk error.
    pub read_only: bool,
    /// Bytes this process may still write (root may use the blocks reserved for it).
    pub free_bytes: u64,
    /// Inodes this process may still create files with.
    pub free_inodes: u64,
}

impl FsState {
    /// Too full for SQLite to grow a page, the WAL or the -shm ([`LOW_SPACE_BYTES`]), or no
    /// inode left: what a plain I/O error means then.
    pub fn nearly_full(&self) -> bool {
        self.free_bytes < LOW_SPACE_BYTES || self.free_inodes == 0
    }

    /// `N bytes free`, and that no inode is when none is.
    pub fn free_said(&self) -> String {
        let inodes = if self.free_inodes == 0 {
            ", no inode free"
        } else {
            ""
        };
        format!("{} bytes free{inodes}", self.free_bytes)
    }
}

/// statvfs(3) of `path`, or of its nearest ancestor that exists; None when none answers.
pub fn fs_state(path: &Path) -> Option<FsState> {
    use nix::sys::statvfs::{statvfs, FsFlags};
    let root = nix::unistd::geteuid().is_root();
    let s = path
        .ancestors()
        .filter(|p| !p.as_os_str().is_empty())
        .find_map(|p| statvfs(p).ok())?;
    let (blocks, inodes) = if root {
        (s.blocks_free(), s.files_free())
    } else {
        (s.blocks_available(), s.files_available())
    };
    Some(FsState {
        read_only: s.flags().contains(FsFlags::ST_RDONLY),
        free_bytes: blocks.saturating_mul(s.fragment_size()),
        free_inodes: inodes,
    })
}

/// Below this much free space, a plain SQLite I/O error is read as a full disk: SQLite grows
/// the -shm 32 KiB and the WAL a page (4 KiB) at a time, so a pass that fails to write with
/// more room than this left failed for another reason.
const LOW_SPACE_BYTES: u64 = 1 << 20;

/// Puts the name of what the storage said (`error::storage_fault`) in front of an error, with
/// the state dir and its free space: "no space left on device (/var/lib/fleetagent: 0 bytes
/// free)" rather than "disk I/O error (SQLite code 4874)". Other errors are returned as they are.
pub fn name_storage_fault(err: anyhow::Error, dir: &Path) -> anyhow::Error {
    let Some(fault) = crate::error::storage_fault(&err) else {
        return err;
    };
    match fs_state(dir).and_then(|fs| storage_fault_line(fault, &fs, dir)) {
        Some(line) => err.context(line),
        None => err,
    }
}

/// The line naming a storage fault, given what the file system says; None when it does not
/// explain the fault (an I/O error with room left).
pub fn storage_fault_line(
    fault: crate::error::StorageFault,
    fs: &FsState,
    dir: &Path,
) -> Option<String> {
    use crate::error::StorageFault;
    let full = fs.nearly_full();
    match fault {
        StorageFault::NoSpace => Some(no_space(dir, fs)),
        _ if fs.read_only => Some(read_only_fs(dir)),
        // A file system the kernel stopped writing after an error may not say so in
        // statvfs (ext4's emergency read-only on 6.x kernels): an open for writing does.
        _ if refuses_writes_as_read_only(dir) => Some(read_only_fs(dir)),
        StorageFault::Io if full => Some(no_space(dir, fs)),
        StorageFault::ReadOnly => Some(match immutable_database_file(dir) {
            // chmod cannot help there (a walkthrough: every writing command said it would).
            Some(file) => format!(
                "the database file {} is immutable or append-only (`lsattr` shows `i` or `a`): \
                 chattr -i -a {}",
                file.display(),
                file.display()
            ),
            None => format!(
                "the database in {} is read-only to this process, on a writable file system (a \
                 file's mode or owner: fleetagent makes them 0660, owned by the service user; \
                 `fleetagent doctor` names the file): chmod 0660 {}/fleetagent.db* and chown \
                 them to the service user",
                dir.display(),
                dir.display()
            ),
        }),
        _ => None,
    }
}

/// The state dir's database or lock file refuses an open for writing with EROFS.
fn refuses_writes_as_read_only(dir: &Path) -> bool {
    ["fleetagent.db", LOCK_FILE]
        .iter()
        .any(|n| write_open_error(&dir.join(n)) == Some(libc::EROFS))
}

/// The database file (or a side file of it) that refuses an open for writing with EPERM:
/// immutable or append-only (`chattr +i`, `+a`), which its mode does not show. Opened with
/// O_NOFOLLOW, nothing written.
fn immutable_database_file(dir: &Path) -> Option<PathBuf> {
    let database = STATE_FILES
        .iter()
        .filter(|n| n.starts_with("fleetagent.db"));
    database
        .map(|n| dir.join(n))
        .find(|f| write_open_error(f) == Some(libc::EPERM))
}

/// The errno an open of `path` for writing meets (None: it opens), nothing written nor
/// truncated; O_NOFOLLOW: a link planted in the state dir is never opened. What the mode
/// cannot show: EPERM for a file immutable or append-only, EROFS on a read-only mount (for
/// root too, where access(2) misses append-only).
pub fn write_open_error(path: &Path) -> Option<i32> {
    use std::os::unix::fs::OpenOptionsExt;
    fs::OpenOptions::new()
        .write(true)
        .custom_flags(no_follow())
        .open(path)
        .err()
        .map(|e| e.raw_os_error().unwrap_or(0))
}

fn no_space(dir: &Path, fs: &FsState) -> String {
    format!(
        "no space left on device ({}: {}; nothing can be recorded until some is freed on that \
         file system)",
        dir.display(),
        fs.free_said()
    )
}

/// access(W_OK|X_OK): may this process create files in `dir`?
pub fn writable(dir: &Path) -> bool {
    use nix::unistd::{access, AccessFlags};
    access(dir, AccessFlags::W_OK | AccessFlags::X_OK).is_ok()
}

/// Create `dir` and every missing parent with `mode`, whatever the umask (mkdir's mode goes
/// through the umask, so each dir created is chmod'ed after). Dirs that exist are left as they
/// are. Returns the dirs created, outermost first.
pub fn create_dirs(dir: &Path, mode: u32) -> io::Result<Vec<PathBuf>> {
    let missing: Vec<&Path> = dir
        .ancestors()
        .filter(|d| !d.as_os_str().is_empty())
        .take_while(|d| fs::symlink_metadata(d).is_err())
        .collect();
    let mut created = Vec::new();
    for d in missing.into_iter().rev() {
        match fs::DirBuilder::new().mode(mode).create(d) {
            Ok(()) => {
                fs::set_permissions(d, fs::Permissions::from_mode(mode))?;
                created.push(d.to_path_buf());
            }
            // Made meanwhile by another process: theirs, left as it is.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && d.is_dir() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(created)
}

/// Create the state dir when missing: its parents 0755, the dir itself setgid 2770 (both
/// whatever the umask).
pub fn ensure_state_dir(dir: &Path) -> Result<()> {
    if !dir.exists() {
        if let Some(parent) = dir.parent() {
            create_dirs(parent, 0o755)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        match fs::DirBuilder::new().mode(0o2770).create(dir) {
            Ok(()) => {
                fs::set_permissions(dir, fs::Permissions::from_mode(0o2770))
                    .with_context(|| format!("cannot chmod state dir {}", dir.display()))?;
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                return Err(e).with_context(|| format!("cannot create state dir {}", dir.display()))
            }
        }
    }
    check_state_dir(dir)
}

/// The mode of a state dir that every user may read or enter (world-writable is refused
/// outright by [`state_dir_access`]); None when it is closed to them, or cannot be read.
/// DESIGN.md: nothing in the state dir is world-accessible.
pub fn open_to_everyone(dir: &Path) -> Option<u32> {
    let mode = fs::metadata(dir).ok()?.permissions().mode() & 0o7777;
    (mode & 0o007 != 0).then_some(mode)
}

/// The files fleetagent opens in the state dir: each must be a regular file where it exists,
/// never a symbolic link. The dir is group-writable (the operators' group), so a member could
/// plant a link there, and a root `trigger` or `run` would then append to, create or chmod any
/// file on the host through it.
pub const STATE_FILES: [&str; 6] = [
    DOORBELL_FILE,
    LOCK_FILE,
    "fleetagent.db",
    "fleetagent.db-wal",
    "fleetagent.db-shm",
    "fleetagent.db-journal",
];

/// A state file's path that is a symbolic link, or not a regular file: the line that names it
/// (None when it is absent or a regular file).
pub fn not_a_plain_file(path: &Path) -> Option<String> {
    let meta = fs::symlink_metadata(path).ok()?;
    let what = if meta.file_type().is_symlink() {
        "a symbolic link"
    } else if meta.is_file() {
        return None;
    } else if meta.is_dir() {
        "a directory"
    } else {
        "not a regular file"
    };
    Some(format!(
        "{} is {what}: fleetagent never follows or replaces it (a member of the state dir's group may have planted it); remove it",
        path.display()
    ))
}

/// [`not_a_plain_file`] as an error, for the commands about to open the file.
pub fn refuse_special(path: &Path) -> Result<()> {
    match not_a_plain_file(path) {
        Some(line) => bail!("{line}"),
        None => Ok(()),
    }
}

/// Every state file of `dir` that is a link or not a regular file ([`STATE_FILES`]).
pub fn special_state_files(dir: &Path) -> Vec<String> {
    STATE_FILES
        .iter()
        .filter_map(|f| not_a_plain_file(&dir.join(f)))
        .collect()
}

/// Whether two paths name one file or directory: one device and inode (through links, `..`
/// and bind mounts: a re-test wrote a backup over `run.lock` through a bind mount of the
/// state dir); as written when either cannot be looked at.
pub fn same_path(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (fs::metadata(a), fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => a == b,
    }
}

/// Open flags that refuse a symbolic link as the last component of the path (ELOOP).
pub fn no_follow() -> i32 {
    libc::O_NOFOLLOW
}

/// Create a file 0660 (explicitly, whatever the umask) if missing.
pub fn create_file_0660(path: &Path) -> io::Result<()> {
    match OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(no_follow())
        .mode(0o660)
        .open(path)
    {
        Ok(f) => f.set_permissions(fs::Permissions::from_mode(0o660)),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

/// Give an existing file we own mode 0660 (best effort; used for the SQLite side files).
pub fn ensure_mode_0660(path: &Path) {
    // Never through a link: chmod(2) follows one.
    if let Ok(meta) = fs::symlink_metadata(path) {
        if meta.is_file() && meta.permissions().mode() & 0o777 != 0o660 {
            let _ = fs::set_permissions(path, fs::Permissions::from_mode(0o660));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One dir through a link and through a bind mount (where this process may mount);
    /// two dirs are two.
    #[test]
    fn one_dir_is_one_through_links_and_bind_mounts() {
        let t = tempfile::tempdir().unwrap();
        let (a, b) = (t.path().join("a"), t.path().join("b"));
        fs::create_dir(&a).unwrap();
        fs::create_dir(&b).unwrap();
        std::os::unix::fs::symlink(&a, t.path().join("link")).unwrap();
        assert!(same_path(&a, &t.path().join("link")));
        assert!(same_path(&a, &a.join(".")));
        assert!(!same_path(&a, &b));
        let bound = std::process::Command::new("mount")
            .args(["--bind"])
            .arg(&a)
            .arg(&b)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if bound {
            let same = same_path(&a, &b);
            let _ = std::process::Command::new("umount").arg(&b).status();
            assert!(same, "a bind mount of a is a");
        }
    }

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn resolution_order() {
        let env = env_of(&[("STATE_DIRECTORY", "/sd/a:/sd/b"), ("HOME", "/home/u")]);
        assert_eq!(
            resolve_state_dir(
                Some(Path::new("/flag")),
                Some(Path::new("/cfg")),
                &env,
                false
            )
            .unwrap(),
            PathBuf::from("/flag")
        );
        assert_eq!(
            resolve_state_dir(None, Some(Path::new("/cfg")), &env, false).unwrap(),
            PathBuf::from("/cfg")
        );
        assert_eq!(
            resolve_state_dir(None, None, &env, false).unwrap(),
            PathBuf::from("/sd/a")
        );
        let env = env_of(&[("HOME", "/home/u")]);
        assert_eq!(
            resolve_state_dir(None, None, &env, true).unwrap(),
            PathBuf::from("/var/lib/fleetagent")
        );
        assert_eq!(
            resolve_state_dir(None, None, &env, false).unwrap(),
            PathBuf::from("/home/u/.local/state/fleetagent")
        );
        let env = env_of(&[("HOME", "/home/u"), ("XDG_STATE_HOME", "/xdg")]);
        assert_eq!(
            resolve_state_dir(None, None, &env, false).unwrap(),
            PathBuf::from("/xdg/fleetagent")
        );
        let env = env_of(&[("HOME", "/home/u"), ("XDG_STATE_HOME", "")]);
        assert_eq!(
            resolve_state_dir(None, None, &env, false).unwrap(),
            PathBuf::from("/home/u/.local/state/fleetagent")
        );
    }

    #[test]
    fn relative_or_missing_home_is_a_usage_error_naming_the_variable() {
        let usage_of = |env: &dyn Fn(&str) -> Option<String>| {
            let err = resolve_state_dir(None, None, env, false).unwrap_err();
            assert_eq!(crate::error::exit_code(&err), crate::error::EXIT_USAGE);
            err.to_string()
        };
        let msg = usage_of(&env_of(&[("HOME", "relhome")]));
        assert!(
            msg.starts_with("HOME=\"relhome\" is not an absolute path"),
            "{msg}"
        );
        let msg = usage_of(&env_of(&[("HOME", "/home/u"), ("XDG_STATE_HOME", "st")]));
        assert!(msg.starts_with("XDG_STATE_HOME=\"st\""), "{msg}");
        let msg = usage_of(&env_of(&[]));
        assert!(msg.contains("--state-dir"), "{msg}");
        // An absolute XDG dir needs no HOME at all.
        let env = env_of(&[("XDG_DATA_HOME", "/d")]);
        assert_eq!(
            base_dir(&env, "XDG_DATA_HOME", ".local/share").unwrap(),
            Some(PathBuf::from("/d"))
        );
        assert_eq!(base_dir(&env, "XDG_CONFIG_HOME", ".config").unwrap(), None);
    }

    #[test]
    fn created_dir_is_setgid_2770_and_files_0660() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a/state");
        ensure_state_dir(&dir).unwrap();
        let mode = fs::metadata(&dir).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o2770);
        let f = dir.join("x");
        create_file_0660(&f).unwrap();
        assert_eq!(
            fs::metadata(&f).unwrap().permissions().mode() & 0o777,
            0o660
        );
    }

    #[test]
    fn create_dirs_sets_the_mode_of_each_dir_it_creates_and_no_other() {
        let tmp = tempfile::tempdir().unwrap();
        fs::set_permissions(tmp.path(), fs::Permissions::from_mode(0o700)).unwrap();
        let leaf = tmp.path().join("a/b/c");
        let created = create_dirs(&leaf, 0o755).unwrap();
        assert_eq!(
            created,
            vec![tmp.path().join("a"), tmp.path().join("a/b"), leaf.clone()]
        );
        for d in &created {
            assert_eq!(
                fs::metadata(d).unwrap().permissions().mode() & 0o7777,
                0o755
            );
        }
        // The existing root is not touched; a second call creates nothing.
        assert_eq!(
            fs::metadata(tmp.path()).unwrap().permissions().mode() & 0o7777,
            0o700
        );
        assert!(create_dirs(&leaf, 0o755).unwrap().is_empty());
    }

    #[test]
    fn a_storage_fault_is_named_by_what_the_file_system_says() {
        use crate::error::StorageFault::{Io, NoSpace, ReadOnly};
        let dir = Path::new("/var/lib/fleetagent");
        let fs = |read_only, free_bytes, free_inodes| FsState {
            read_only,
            free_bytes,
            free_inodes,
        };
        let roomy = fs(false, 5 << 30, 1000);
        let line = |fault, f: &FsState| storage_fault_line(fault, f, dir);
        // SQLITE_FULL or ENOSPC: no space, whatever statvfs says now (a quota, or room freed since).
        assert_eq!(
            line(NoSpace, &fs(false, 0, 10)).as_deref(),
            Some(
                "no space left on device (/var/lib/fleetagent: 0 bytes free; nothing can be \
                 recorded until some is freed on that file system)"
            )
        );
        assert!(line(NoSpace, &roomy).is_some());
        // A plain I/O error (SQLITE_IOERR_SHMSIZE, 4874, on a full tmpfs) with nearly nothing
        // left, or no inode left, is a full disk; with room left it is something else.
        let l = line(Io, &fs(false, 12_288, 10)).unwrap();
        assert!(l.starts_with("no space left on device (/var/lib/fleetagent: 12288 bytes free"));
        let l = line(Io, &fs(false, 5 << 30, 0)).unwrap();
        assert!(l.contains("bytes free, no inode free"), "{l}");
        assert_eq!(line(Io, &roomy), None);
        // Read-only: the file system's when it is one; else a file's mode or owner, named
        // with the fix.
        for fault in [ReadOnly, Io] {
            let l = line(fault, &fs(true, 5 << 30, 1000)).unwrap();
            assert!(l.contains("is on a read-only file system"), "{l}");
        }
        let l = line(ReadOnly, &roomy).unwrap();
        assert!(
            l.starts_with("the database in /var/lib/fleetagent is read-only to this process, on a writable file system")
                && l.ends_with("chmod 0660 /var/lib/fleetagent/fleetagent.db* and chown them to the service user"),
            "{l}"
        );
        // The chain keeps its cause after the name; other errors pass untouched.
        let err = name_storage_fault(anyhow::anyhow!("not a storage error"), dir);
        assert_eq!(format!("{err:#}"), "not a storage error");
        assert!(fs_state(Path::new("/nonexistent/deeper")).is_some());
    }

    #[test]
    fn world_writable_refused() {
        let tmp = tempfile::tempdir().unwrap();
        fs::set_permissions(tmp.path(), fs::Permissions::from_mode(0o777)).unwrap();
        let err = check_state_dir(tmp.path()).unwrap_err();
        assert!(format!("{err}").contains("world-writable"));
    }
}
