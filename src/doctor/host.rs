//! The checks of the machine: the state dir, its file system, the database file, the systemd
//! units and the metrics textfile's dir.

use std::path::Path;

use rusqlite::Connection;
use serde_json::Value;

use super::{unreadable, Problem};
use crate::clock::{human_duration, Millis};
use crate::config::Config;
use crate::store::Store;

/// Below this much space free to the service in the state dir's file system, `doctor`
/// reports it: a day of passes writes a few MB, a `fleetagent backup` in the same file
/// system needs the database's size, and SQLite fails every write once it is full.
pub const MIN_FREE_BYTES: u64 = 100 << 20;
/// Below this many free inodes (on file systems that count them), the same.
pub const MIN_FREE_INODES: u64 = 1_000;

/// The state dir exists, is a directory, is not world-writable, and may be written by this
/// user. On a read-only file system the `disk` check names the cause, so "not writable" is
/// not said twice. `scoped`: `fleetagent --config C --state-dir D` for this install
/// (`scope::fleetagent`).
pub(super) fn state_dir(dir: &Path, read_only: bool, scoped: &str) -> Vec<Problem> {
    match crate::paths::check_state_dir(dir) {
        Ok(()) => {
            let mut problems: Vec<Problem> = crate::paths::special_state_files(dir)
                .into_iter()
                .map(Problem::new)
                .collect();
            problems.extend(world_access(dir));
            problems
        }
        Err(e) => {
            let text = format!("{e:#}");
            if read_only && text.contains("not writable") {
                Vec::new()
            } else if text.contains("world-writable") {
                // The fix in its own field too, for `doctor --json` (a drill saw it null).
                vec![Problem::new(text).fix(format!(
                    "chmod o-w {} (fleetagent wants 2770)",
                    super::scope::word(dir)
                ))]
            } else if std::fs::symlink_metadata(dir)
                .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
            {
                // Its fix was null (a walkthrough): `init` makes the dir and the database.
                vec![Problem::new(text).fix(format!(
                    "run `{scoped} init` (it creates the dir, setgid 2770, and the database), or run doctor with the right --state-dir or --config"
                ))]
            } else {
                vec![Problem::new(text)]
            }
        }
    }
}

/// A state dir that every user may read or enter (world-writable is refused outright): the
/// database holds the conversation, the fleet and the ledger (DESIGN.md: nothing is
/// world-accessible).
fn world_access(dir: &Path) -> Option<Problem> {
    crate::paths::open_to_everyone(dir).map(|mode| {
        Problem::new(format!(
            "state dir {} is mode {mode:o}: every user may read it (the database holds the conversation, the fleet and the ledger)",
            dir.display(),
        ))
        .fix(format!(
            "chmod 2770 {} (and give it the operators' group: docs/operations.md)",
            super::scope::word(dir)
        ))
    })
}

/// The file system of the state dir: read-only, or (nearly) full. Nothing when the dir
/// cannot be examined (the `state_dir` check says why).
// statvfs's counts are u64 here, u32 on 32-bit targets.
#[allow(clippy::unnecessary_cast)]
pub(super) fn disk(dir: &Path) -> Vec<Problem> {
    use nix::sys::statvfs::{statvfs, FsFlags};
    let Ok(st) = statvfs(dir) else {
        return Vec::new();
    };
    space_problems(
        dir,
        st.flags().contains(FsFlags::ST_RDONLY),
        st.blocks_available() as u64 * st.fragment_size() as u64,
        (st.files() > 0).then_some(st.files_available() as u64),
    )
}

/// What statvfs(3)'s figures mean for the agent. `free_inodes`: None on a file system that
/// does not count them (btrfs reports 0 of 0).
pub fn space_problems(
    dir: &Path,
    read_only: bool,
    free_bytes: u64,
    free_inodes: Option<u64>,
) -> Vec<Problem> {
    let shown = dir.display();
    if read_only {
        return vec![Problem::new(format!(
            "the state dir {shown} is on a read-only file system (a disk error often remounts it so): no pass can record anything, so nothing is launched or stopped"
        ))
        .fix(format!(
            "find the cause (`journalctl -k`, `dmesg`), repair the disk, then remount it read-write (`mount -o remount,rw` on the mount point of {shown}) and run `fleetagent doctor` again"
        ))];
    }
    let mut out = Vec::new();
    if free_bytes < MIN_FREE_BYTES {
        out.push(
            Problem::new(format!(
                "the state dir {shown} has {} MiB free (below {} MiB): SQLite fails every write once the file system is full, and no pass can record anything then",
                free_bytes >> 20,
                MIN_FREE_BYTES >> 20
            ))
            .fix(format!("free space on that file system (`df -h {}`)", super::scope::word(dir))),
        );
    }
    if let Some(n) = free_inodes.filter(|n| *n < MIN_FREE_INODES) {
        out.push(
            Problem::new(format!(
                "the state dir {shown} has {n} free inodes (below {MIN_FREE_INODES}): SQLite cannot create its journal files once none is left"
            ))
            .fix(format!("delete files on that file system (`df -i {}`)", super::scope::word(dir))),
        );
    }
    out
}

/// Open the database as the reports do (migrating an older one; read-only on a read-only
/// file system, so a remount after a disk error still shows what was recorded), or the
/// problem, a full or read-only disk named as such. `scoped`: as for [`state_dir`] (a bare
/// `fleetagent init` initialised the default paths: a walkthrough).
pub(super) fn open_database(dir: &Path, now: Millis, scoped: &str) -> Result<Store, Problem> {
    let exists =
        crate::store::database_exists(dir).map_err(|e| Problem::new(crate::error::report(&e)))?;
    if !exists {
        return Err(match crate::store::lost_database(dir) {
            Some(lost) => Problem::new(lost)
                .fix(format!("restore the database, or `{scoped} init --install-id ID` (docs/operations.md, \"Recovering the database\")")),
            None => Problem::new(format!("no database in state dir {}", dir.display()))
                .fix(format!("run `{scoped} init` (or run doctor with the right --state-dir or --config)")),
        });
    }
    Store::open_for_report(dir, now).map_err(|e| {
        let e = crate::paths::name_storage_fault(e, dir);
        let mut line = format!("database: {}", crate::error::report(&e));
        // A schema this build does not read (older, before its migration) is still checked
        // for damage: the migration would meet it, and the line would say go ahead.
        let older = line.contains("is older than this fleetagent's");
        if let Some(damage) = older
            .then(|| {
                Store::open_read_only_as_is(dir)
                    .and_then(|s| crate::store::health::edge_check(&s.conn))
                    .err()
            })
            .flatten()
        {
            line.push_str(&format!(
                "; and its structure check failed: {}",
                crate::error::report(&damage)
            ));
        }
        Problem::new(line)
    })
}

/// Database files that their owner or group may not write (fleetagent makes them 0660): every
/// run fails "attempt to write a readonly database", and no check of the passes says why
/// (judged by the mode, not by access(2): doctor often runs as root, who may write anyway).
pub(super) fn unwritable_database(dir: &Path) -> Vec<Problem> {
    use std::os::unix::fs::PermissionsExt;
    let files = crate::store::database_files(dir);
    let unwritable: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let mode = std::fs::metadata(f).ok()?.permissions().mode() & 0o7777;
            (mode & 0o220 != 0o220).then(|| format!("{} (mode {mode:04o})", f.display()))
        })
        .collect();
    let mut out = Vec::new();
    if !unwritable.is_empty() {
        out.push(Problem::new(format!(
            "the database cannot be written by its owner and group: {}; every run fails \"attempt to write a readonly database\"",
            unwritable.join(", ")
        ))
        .fix(format!(
            "chmod 0660 {}/fleetagent.db* (and chown them to the service user, e.g. fleetagent:fleetagent)",
            super::scope::word(dir)
        )));
    }
    out.extend(foreign_owned(dir));
    out.extend(write_probe(dir, WRITE_PROBE_WAIT));
    out
}

/// How long `doctor` waits for the database's write lock before it names whoever holds it.
const WRITE_PROBE_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// What the mode cannot show (a drill and a fuzz walkthrough saw `doctor` green through
/// both, every run failing): the file (or its `-wal`, `-shm`) immutable, append-only or on a
/// read-only mount (an open for writing says so even to root; access(2) misses append-only),
/// and a write lock another process holds past `wait` (a pass holds it for
/// milliseconds; every `run`, `poll` and `trigger` waits 30 s for it, then fails). The lock
/// is probed with `BEGIN IMMEDIATE` and given back at once (nothing is written); a user who
/// may not write the file skips that part.
pub(super) fn write_probe(dir: &Path, wait: std::time::Duration) -> Vec<Problem> {
    use nix::errno::Errno;
    use rusqlite::OpenFlags;
    let [db, wal, shm] = crate::store::database_files(dir);
    // The database and its side files (a re-test made the -wal immutable: every run failed,
    // doctor green); a side file that is not there is made by the next writer. A link
    // planted in the state dir is never opened (`links` names it).
    for file in [&db, &wal, &shm] {
        let shown = file.display();
        match crate::paths::write_open_error(file).map(Errno::from_raw) {
            None => {}
            Some(Errno::EROFS) => {
                return vec![Problem::new(format!(
                    "the database file {shown} is on a read-only mount: every run fails \"attempt to write a readonly database\""
                ))
                .fix(format!("mount it read-write (`findmnt -T {}` names the mount)", super::scope::word(file)))]
            }
            Some(Errno::EPERM) => {
                return vec![Problem::new(format!(
                    "the database file {shown} is immutable or append-only (`lsattr` shows `i` or `a`): every run fails \"attempt to write a readonly database\""
                ))
                .fix(format!("chattr -i -a {}", super::scope::word(file)))]
            }
            Some(_) if file == &db => return Vec::new(),
            Some(_) => {}
        }
    }
    let Ok(conn) = Connection::open_with_flags(
        &db,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    ) else {
        return Vec::new();
    };
    if conn.busy_timeout(wait).is_err() {
        return Vec::new();
    }
    match conn.execute_batch("BEGIN IMMEDIATE; ROLLBACK;") {
        Err(rusqlite::Error::SqliteFailure(e, _))
            if e.code == rusqlite::ErrorCode::DatabaseBusy =>
        {
            vec![Problem::new(format!(
                "another process has held the database's write lock for {} s or more: every run, poll and trigger waits {} s for it, then fails (their events are not recorded)",
                wait.as_secs(),
                crate::store::busy_timeout().as_secs()
            ))
            .fix(format!(
                "find it with `fuser -v {}` (a `sqlite3` shell left in a transaction, a backup tool) and end it",
                super::scope::word(&db)
            ))]
        }
        _ => Vec::new(),
    }
}

/// State files that neither the state dir's owner nor its group owns (`init` run as root
/// before `units install` gave the dir to the service user, a restore with `install -o`
/// another user): the service, which runs as the dir's owner, cannot open them ("unable to
/// open database file", SQLite code 14), though root's `doctor` could.
fn foreign_owned(dir: &Path) -> Vec<Problem> {
    use std::os::unix::fs::MetadataExt;
    let Ok(d) = std::fs::metadata(dir) else {
        return Vec::new();
    };
    let others: Vec<(String, String)> = crate::paths::STATE_FILES
        .iter()
        .map(|f| dir.join(f))
        .filter_map(|f| {
            let m = std::fs::symlink_metadata(&f).ok()?;
            (m.uid() != d.uid() && m.gid() != d.gid()).then(|| {
                let path = f.display().to_string();
                (format!("{path} ({}:{})", m.uid(), m.gid()), path)
            })
        })
        .collect();
    if others.is_empty() {
        return Vec::new();
    }
    let (named, paths): (Vec<String>, Vec<String>) = others.into_iter().unzip();
    vec![Problem::new(format!(
        "state files owned by neither the state dir's owner nor its group ({}:{}): {}; the service, which runs as the dir's owner, cannot open them",
        d.uid(),
        d.gid(),
        named.join(", ")
    ))
    .fix(format!(
        "chown --reference={} {}",
        super::scope::word(dir),
        paths
            .iter()
            .map(|p| super::scope::word(Path::new(p)))
            .collect::<Vec<_>>()
            .join(" ")
    ))]
}

/// A database `sim --state-dir` left (its `sim_config` row): not an install's, so every other
/// check would judge a finished simulation by this host's clock and config (a "last run"
/// months ago). Said as a problem: an install pointed at it is misconfigured.
pub(super) fn simulation(conn: &rusqlite::Connection, dir: &Path) -> Vec<Problem> {
    match crate::store::sim_config::read(conn) {
        Ok(Some(sim)) => vec![Problem::new(format!(
            "{} is a simulation's database (scenario {}, seed {}, written by `fleetagent sim --state-dir`), not an install's: the other checks judge it by this host's clock and config",
            dir.join(crate::store::DB_FILE).display(),
            sim.scenario,
            sim.seed
        ))
        .fix("point --state-dir (or the config's state_dir) at the install's state dir; `fleetagent inspect --state-dir` reads a simulation's database as of its last pass")],
        Ok(None) => Vec::new(),
        Err(e) => vec![Problem::new(format!(
            "cannot read the simulation marker (sim_config): {}",
            crate::error::report(&e)
        ))],
    }
}

/// Each unit systemd reports failed, rate limited or inactive, with the command that clears it;
/// and a service that runs another state dir than `state_dir` (units installed again for
/// another one: nothing runs passes for this database, whose fleet bills on).
pub(super) fn units(
    units: Option<&Value>,
    state_dir: &Path,
    config: &Config,
    config_path: Option<&Path>,
) -> Vec<Problem> {
    let shown = units;
    let Some(units) = units.and_then(|u| u.as_object()) else {
        return Vec::new();
    };
    let service = units
        .get(crate::units::SERVICE)
        .filter(|u| u.get("load_state").and_then(Value::as_str) == Some("loaded"));
    let field = |k: &str| service.and_then(|u| u.get(k).and_then(Value::as_str));
    // The fixes in the units' own scope and with their config (a re-test followed one as
    // root, which wrote system units for user ones; and paired their state dir with
    // doctor's config).
    let user = if field("manager") == Some("user") {
        " --user"
    } else {
        ""
    };
    // This doctor's own config, spelled out: a fix without it installed units that ran the
    // default config path, which did not exist (a re-test followed it literally).
    let install = super::scope::units_install(shown, config_path, state_dir);
    let elsewhere = super::scope::units_elsewhere(shown, state_dir).map(|(d, theirs)| {
            // No database here: this doctor looks at the wrong dir (a plain doctor by a user
            // whose default is elsewhere); moving the units here would leave their install's
            // billing fleet watched by nothing (the second re-test followed it).
            if !crate::store::database_exists(state_dir).unwrap_or(true) {
                return Problem::new(format!(
                    "the installed {} runs state dir {d}, not this one ({}), which holds no database: this doctor looks at another dir than the install",
                    crate::units::SERVICE,
                    state_dir.display()
                ))
                .fix(format!("look at the install the units run (`{theirs}`)"));
            }
            Problem::new(format!(
                "the installed {} runs state dir {d}, not this one ({}): no pass runs for this database, and the fleet it knows is watched by nothing",
                crate::units::SERVICE,
                state_dir.display()
            ))
            .fix(format!(
                "install the units for this state dir (`{install}`), or look at the one they run (`{theirs}`); retiring this install: docs/operations.md, \"Retiring an install\""
            ))
        });
    // The same state dir under another config: the passes decide by a config this doctor
    // does not judge.
    let other_config = match (field("config"), config_path) {
        (Some(theirs), Some(mine))
            if elsewhere.is_none() && !crate::paths::same_path(Path::new(theirs), mine) =>
        {
            Some(
                Problem::new(format!(
                    "the installed {} runs config {theirs}, not this doctor's ({}): the passes decide by a config these checks do not read",
                    crate::units::SERVICE,
                    mine.display()
                ))
                .fix(format!(
                    "run doctor with `--config {theirs}`, or install the units for this config (`{install}`)"
                )),
            )
        }
        _ => None,
    };
    // `TimeoutStartSec=` is written by `units install` from `run.deadline_secs`: a deadline
    // raised since is cut short by systemd, whose kill says nothing of the lock's holder, and
    // the path unit starts the run again (a walkthrough).
    let wanted = config
        .run
        .deadline_secs
        .saturating_add(crate::units::TIMEOUT_MARGIN_SECS);
    let short = service
        .filter(|_| elsewhere.is_none())
        .and_then(|u| u.get("timeout_start_secs").and_then(Value::as_u64))
        .filter(|t| *t < wanted)
        .map(|t| {
            // A drop-in's TimeoutStartSec= outlives `units install` (a re-test followed the
            // fix for ever): named when systemd reads one.
            let fix = match field("drop_ins") {
                Some(d) => format!(
                    "the unit's drop-in(s) {d} may set it: edit or remove TimeoutStartSec= there; else `{install}` again; then `systemctl{user} daemon-reload`"
                ),
                None => format!("`{install}` again, then `systemctl{user} daemon-reload`"),
            };
            Problem::new(format!(
                "the installed {} is stopped by systemd after {t} s (TimeoutStartSec=), under run.deadline_secs + {} s = {wanted} s: a pass that runs to its deadline is killed without saying why, and the doorbell starts it again",
                crate::units::SERVICE,
                crate::units::TIMEOUT_MARGIN_SECS
            ))
            .fix(fix)
        });
    // The binary ExecStart= runs is gone (moved by an upgrade, a build dir cleaned), or is
    // there without an execute bit (copied without +x: the re-test): every start fails, and
    // clearing the units' failures trips the limit again at once (a walkthrough looped on it).
    let unusable = field("exec_path")
        .and_then(|p| super::exec::unusable(Path::new(p), field("user")).map(|why| (p, why)));
    let gone = unusable.as_ref().map(|(p, _)| *p);
    let missing = unusable.map(|(p, why)| {
        // `units install` writes the path of the binary that runs it into ExecStart=.
        let install = match std::env::current_exe() {
            Ok(me) if me.exists() && !crate::paths::same_path(&me, Path::new(p)) => install
                .replacen("fleetagent", &super::scope::word(&me), 1),
            _ => install.clone(),
        };
        Problem::new(format!(
            "the installed {} runs {p}, which {why}: every start fails, and the doorbell's start limit trips again as soon as it is cleared",
            crate::units::SERVICE
        ))
        .fix(format!(
            "put the fleetagent binary (executable) back at {p}, or install the units from the binary to run (`{install}`: ExecStart= gets the path of the binary that runs it, then `systemctl{user} daemon-reload`); then clear the units' failures"
        ))
    });
    let first = gone.map_or(String::new(), |p| {
        format!("once {p} is there again, executable: ")
    });
    elsewhere
        .into_iter()
        .chain(other_config)
        .chain(short)
        .chain(missing)
        .chain(units.iter().filter_map(|(name, u)| {
            let problem = u.get("problem").and_then(|p| p.as_str())?;
            let fix = u.get("fix").and_then(|f| f.as_str()).unwrap_or("");
            // systemd refuses the start again within the limit's interval of the failure.
            let wait = match problem {
                "trigger-limit-hit" | "unit-start-limit-hit" => {
                    " (30 s after the failure at the earliest, TriggerLimitIntervalSec=: sooner it fails again)"
                }
                _ => "",
            };
            Some(Problem::new(format!("unit {name}: {problem}")).fix(format!("{first}{fix}{wait}")))
        }))
        .collect()
}

/// The metrics textfile (when `[metrics] textfile` is set): the last write's failure as the
/// run recorded it, and whether its dir exists and may be written (access(2)).
/// `install`: the install this host speaks for (`doctor::speaks_for`; None: not known, and the
/// textfile's is not compared). `units_install`: the `units install` command of this install
/// (`scope::units_install`: a bare one wrote system units for the default config).
pub(super) fn metrics(
    conn: &Connection,
    config: &Config,
    now: Millis,
    install: Option<&str>,
    units_install: &str,
) -> Vec<Problem> {
    let Some(path) = &config.metrics.textfile else {
        return Vec::new();
    };
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    // The file system the dir is (or would be made) on: its nearest existing ancestor's.
    let read_only = crate::paths::fs_state(dir).is_some_and(|f| f.read_only);
    let dir_problem = if dir.exists() && !dir.is_dir() {
        Some(format!("{} is not a directory", dir.display()))
    } else if !dir.is_dir() && read_only {
        Some(format!(
            "its dir {} does not exist, on a read-only file system",
            dir.display()
        ))
    } else if !dir.is_dir() {
        Some(format!("its dir {} does not exist", dir.display()))
    } else if read_only {
        Some(format!(
            "its dir {} is on a read-only file system",
            dir.display()
        ))
    } else if !crate::paths::writable(dir) {
        Some(format!(
            "its dir {} is not writable by uid {}",
            dir.display(),
            nix::unistd::geteuid()
        ))
    } else {
        None
    };
    let fix = if dir.exists() {
        format!("run `{units_install}` again (it lets the services write there, and names the chown or chmod a dir they may not write needs), or set [metrics] textfile to a dir the service user may write")
    } else {
        format!("run `{units_install}` again (it creates the missing dir {} and lets the services write there; or create it yourself, writable by the service user: `mkdir -p {}`), or set [metrics] textfile to a dir the service user may write", dir.display(), super::scope::word(dir))
    };
    // No install helps a read-only file system (a re-test saw `units install` advised).
    const READ_ONLY_FIX: &str =
        "mount that file system read-write, or set [metrics] textfile to a dir on a writable one";
    let recorded = match crate::store::ops::metrics_error(conn) {
        Ok(r) => r,
        Err(e) => return vec![unreadable("the metrics textfile's last error", &e)],
    };
    let shown = path.display();
    match (recorded, dir_problem) {
        (Some((error, at)), dir) => {
            // A full disk there is not the dir's permissions (a drill saw the wrong fix).
            let fix = if read_only {
                READ_ONLY_FIX.to_string()
            } else if dir.is_none()
                && (error.contains("No space left") || error.contains("os error 28"))
            {
                format!(
                    "free space on the file system of {} (`df -h` there)",
                    path.display()
                )
            } else {
                fix
            };
            vec![Problem::new(format!(
                "the metrics textfile {shown} could not be written (failing since {} ago): {}{}: its figures are stale, so monitoring reads an old state",
                human_duration(now - at),
                crate::text::clip(&error, 300),
                dir.map(|d| format!("; {d}")).unwrap_or_default()
            ))
            .fix(fix)
            .since(Some(at))]
        }
        (None, Some(problem)) => vec![Problem::new(format!(
            "the metrics textfile {shown}: {problem}: the next run cannot write it"
        ))
        .fix(if read_only {
            READ_ONLY_FIX.to_string()
        } else if dir.exists() && !dir.is_dir() {
            format!(
                "set [metrics] textfile to a file in a directory ({} is a file)",
                dir.display()
            )
        } else {
            fix
        })],
        (None, None) => shared_textfile(path, install),
    }
}

/// The textfile another install wrote last (its `fleetagent_install_info`): two installs
/// given one `[metrics] textfile` overwrite each other's figures, and monitoring reads
/// whichever ran last (a walkthrough: one install's `max_instances` read as the other's).
fn shared_textfile(path: &Path, ours: Option<&str>) -> Vec<Problem> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    let theirs = text.lines().find_map(|l| {
        let rest = l.strip_prefix("fleetagent_install_info{")?;
        let at = rest.find("install_id=\"")? + "install_id=\"".len();
        rest[at..].split('"').next().map(str::to_string)
    });
    match (theirs, ours) {
        (Some(theirs), Some(ours)) if theirs != ours => vec![Problem::new(format!(
            "the metrics textfile {} was last written by install {theirs}, not this one ({ours}): two installs share it, and each overwrites the other's figures",
            path.display()
        ))
        .fix("give each install its own [metrics] textfile (node_exporter reads every *.prom in its dir)")],
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A textfile another install wrote last (two installs given one `[metrics] textfile`):
    /// named; this install's own, or one with no install line (an older build's), is not.
    #[test]
    fn a_metrics_textfile_another_install_wrote_is_named() {
        let (dir, s) = crate::store::test_store(0);
        let ours = crate::store::ops::install_id(&s.conn).unwrap();
        let prom = dir.path().join("fleetagent.prom");
        let mut config = Config::default();
        config.metrics.textfile = Some(prom.clone());
        let write = |id: &str| {
            std::fs::write(&prom, format!("# HELP x\nfleetagent_install_info{{install_id=\"{id}\"}} 1\nfleetagent_max_instances 1\n")).unwrap()
        };
        assert!(
            metrics(&s.conn, &config, 0, Some(&ours), "").is_empty(),
            "no file yet"
        );
        write(&ours);
        assert!(metrics(&s.conn, &config, 0, Some(&ours), "").is_empty());
        std::fs::write(&prom, "fleetagent_max_instances 1\n").unwrap();
        assert!(metrics(&s.conn, &config, 0, Some(&ours), "").is_empty());
        write("zz9plu");
        let p = metrics(&s.conn, &config, 0, Some(&ours), "");
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(
            p[0].line(),
            format!("the metrics textfile {} was last written by install zz9plu, not this one ({ours}): two installs share it, and each overwrites the other's figures; fix: give each install its own [metrics] textfile (node_exporter reads every *.prom in its dir)", prom.display())
        );
    }

    /// A metrics dir on a read-only file system is said so, with a fix that can help (where
    /// this user may mount one: root, as CI runs).
    #[test]
    fn a_metrics_dir_on_a_read_only_file_system_is_named() {
        let (dir, s) = crate::store::test_store(0);
        let ro = dir.path().join("ro");
        std::fs::create_dir(&ro).unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "ro,size=64k", "tmpfs"])
            .arg(&ro)
            .status()
            .is_ok_and(|st| st.success());
        if !mounted {
            return;
        }
        let mut config = Config::default();
        config.metrics.textfile = Some(ro.join("fleetagent.prom"));
        let p = metrics(&s.conn, &config, 0, None, "");
        // A dir still to be made there: `units install` could not make it either.
        config.metrics.textfile = Some(ro.join("sub/fleetagent.prom"));
        let missing = metrics(&s.conn, &config, 0, None, "");
        let _ = std::process::Command::new("umount").arg(&ro).status();
        assert!(missing[0]
            .detail
            .contains("does not exist, on a read-only file system"));
        assert!(missing[0]
            .fix
            .as_deref()
            .unwrap()
            .starts_with("mount that file system"));
        assert!(
            p[0].detail.contains("is on a read-only file system"),
            "{p:?}"
        );
        assert!(p[0]
            .fix
            .as_deref()
            .unwrap()
            .starts_with("mount that file system read-write"));
    }

    /// A world-writable state dir's fix is in the problem's own field (`doctor --json`).
    #[test]
    fn a_world_writable_state_dir_has_its_fix_apart() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let p = state_dir(dir.path(), false, "fleetagent");
        assert!(p[0].detail.contains("world-writable"), "{p:?}");
        assert_eq!(
            p[0].fix.as_deref(),
            Some(format!("chmod o-w {} (fleetagent wants 2770)", dir.path().display()).as_str())
        );
    }

    /// Units that run another state dir than doctor's own are named (installed again for
    /// another one: this database's fleet is watched by nothing); the same dir, or a unit
    /// that names none, is not.
    #[test]
    fn units_that_run_another_state_dir_are_named() {
        let here = tempfile::tempdir().unwrap();
        // A dir without a database: this doctor looks at the wrong dir, and the fix points
        // at the units' install alone (the second re-test moved the units to an empty dir).
        let lone = serde_json::json!({ crate::units::SERVICE: {
            "load_state": "loaded", "active_state": "inactive", "state_dir": "/srv/other" } });
        let p = units(Some(&lone), here.path(), &Config::default(), None);
        assert!(
            p[0].detail.ends_with(
                "which holds no database: this doctor looks at another dir than the install"
            ),
            "{p:?}"
        );
        assert_eq!(
            p[0].fix.as_deref(),
            Some("look at the install the units run (`fleetagent --state-dir /srv/other doctor`)")
        );
        crate::store::Store::open(here.path(), crate::store::OpenMode::Create, 0).unwrap();
        let shown = |dir: Option<&str>| {
            let mut svc = serde_json::json!({"load_state": "loaded", "active_state": "inactive"});
            if let Some(d) = dir {
                svc["state_dir"] = d.into();
            }
            serde_json::json!({ crate::units::SERVICE: svc })
        };
        let c = Config::default();
        let p = units(Some(&shown(Some("/srv/other"))), here.path(), &c, None);
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(
            p[0].detail.starts_with(
                "the installed fleetagent.service runs state dir /srv/other, not this one"
            ),
            "{p:?}"
        );
        let same = here.path().to_str().unwrap();
        assert!(units(Some(&shown(Some(same))), here.path(), &c, None).is_empty());
        assert!(units(Some(&shown(None)), here.path(), &c, None).is_empty());
        // User units, with their config: the fixes say `--user` and pair their state dir with
        // their config (a re-test followed the fix as root and wrote system units).
        let mut user = shown(Some("/srv/other"));
        user[crate::units::SERVICE]["manager"] = "user".into();
        user[crate::units::SERVICE]["config"] = "/home/op/b.toml".into();
        let mine = Path::new("/home/op/a.toml");
        let fix = units(Some(&user), here.path(), &c, Some(mine))[0]
            .fix
            .clone()
            .unwrap();
        assert!(
            fix.contains(&format!(
                "`fleetagent --config /home/op/a.toml --state-dir {same} units install --user`"
            )) && fix
                .contains("`fleetagent --config /home/op/b.toml --state-dir /srv/other doctor`"),
            "{fix}"
        );
    }

    /// A `TimeoutStartSec=` under `run.deadline_secs` + 60 (the deadline raised after `units
    /// install`): systemd kills a pass before its deadline says why; named with the fix.
    #[test]
    fn a_unit_timeout_under_the_deadline_is_named() {
        let here = tempfile::tempdir().unwrap();
        let same = here.path().to_str().unwrap();
        let shown = |t: u64| {
            serde_json::json!({ crate::units::SERVICE: {
                "load_state": "loaded", "active_state": "inactive", "manager": "user",
                "state_dir": same, "timeout_start_secs": t }})
        };
        let mut c = Config::default();
        c.run.deadline_secs = 900;
        let p = units(Some(&shown(150)), here.path(), &c, None);
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(
            p[0].line(),
            format!("the installed fleetagent.service is stopped by systemd after 150 s (TimeoutStartSec=), under run.deadline_secs + 60 s = 960 s: a pass that runs to its deadline is killed without saying why, and the doorbell starts it again; fix: `fleetagent --state-dir {same} units install --user` again, then `systemctl --user daemon-reload`")
        );
        assert!(units(Some(&shown(960)), here.path(), &c, None).is_empty());
        // Set by a drop-in, which `units install` leaves: named (a re-test followed the fix
        // for ever).
        let mut dropped = shown(150);
        dropped[crate::units::SERVICE]["drop_ins"] =
            "/etc/systemd/user/fleetagent.service.d/t.conf".into();
        let fix = units(Some(&dropped), here.path(), &c, None)[0]
            .fix
            .clone()
            .unwrap();
        assert!(fix.starts_with("the unit's drop-in(s) /etc/systemd/user/fleetagent.service.d/t.conf may set it: edit or remove TimeoutStartSec= there"), "{fix}");
        assert_eq!(crate::units::time_span_secs("16min"), Some(960));
        assert_eq!(crate::units::time_span_secs("2min 30s"), Some(150));
        assert_eq!(crate::units::time_span_secs("infinity"), None);
        assert_eq!(crate::units::time_span_secs("1h 500ms"), Some(3600));
        // systemd prints a fraction (`TimeoutStartSec=90.5`): it read as infinity.
        assert_eq!(crate::units::time_span_secs("1min 30.500000s"), Some(90));
        assert_eq!(crate::units::time_span_secs("2.5min"), Some(150));
        assert_eq!(crate::units::time_span_secs("1.x5s"), None);
    }

    /// Units of this state dir run under another config than doctor's: named (the passes
    /// decide by a config these checks do not read); the same file is not.
    #[test]
    fn units_under_another_config_are_named() {
        let here = tempfile::tempdir().unwrap();
        let same = here.path().to_str().unwrap();
        let shown = |config: &str| {
            serde_json::json!({ crate::units::SERVICE: {
                "load_state": "loaded", "active_state": "inactive", "manager": "system",
                "state_dir": same, "config": config }})
        };
        let c = Config::default();
        let mine = here.path().join("a.toml");
        let theirs = shown("/etc/fleetagent/config.toml");
        let p = units(Some(&theirs), here.path(), &c, Some(&mine));
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(
            p[0].line().starts_with(&format!("the installed fleetagent.service runs config /etc/fleetagent/config.toml, not this doctor's ({}): the passes decide by a config these checks do not read; fix: run doctor with `--config /etc/fleetagent/config.toml`", mine.display())),
            "{p:?}"
        );
        let ours = shown(mine.to_str().unwrap());
        assert!(units(Some(&ours), here.path(), &c, Some(&mine)).is_empty());
        // The same file by a link: one config (a re-test saw it named another).
        std::fs::write(&mine, "").unwrap();
        let link = here.path().join("link.toml");
        std::os::unix::fs::symlink(&mine, &link).unwrap();
        assert!(units(Some(&ours), here.path(), &c, Some(&link)).is_empty());
    }

    /// Another process's open write transaction is named, and an immutable file (where the
    /// file system lets root set the flag); both were green.
    #[test]
    fn a_held_write_lock_and_an_immutable_file_are_named() {
        let (dir, _s) = crate::store::test_store(0);
        let wait = std::time::Duration::from_millis(100);
        assert!(write_probe(dir.path(), wait).is_empty());
        let holder = Connection::open(dir.path().join(crate::store::DB_FILE)).unwrap();
        holder.execute_batch("BEGIN IMMEDIATE").unwrap();
        let p = write_probe(dir.path(), wait);
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(
            p[0].detail
                .starts_with("another process has held the database's write lock"),
            "{p:?}"
        );
        assert!(
            p[0].fix
                .as_deref()
                .unwrap()
                .starts_with("find it with `fuser -v "),
            "{p:?}"
        );
        holder.execute_batch("ROLLBACK").unwrap();
        assert!(write_probe(dir.path(), wait).is_empty());
        let [db, wal, _] = crate::store::database_files(dir.path());
        if !wal.exists() {
            std::fs::write(&wal, b"").unwrap();
        }
        // The probe's problems with `flag` set on `file` (None where the file system does not
        // let this user set it).
        let flagged = |flag: &str, file: &std::path::Path| {
            let chattr = |sign: &str| {
                std::process::Command::new("chattr")
                    .arg(format!("{sign}{flag}"))
                    .arg(file)
                    .output()
                    .is_ok_and(|o| o.status.success())
            };
            chattr("+").then(|| {
                let p = write_probe(dir.path(), wait);
                assert!(chattr("-"), "chattr -{flag} {}", file.display());
                p
            })
        };
        if let Some(p) = flagged("i", &db) {
            assert!(p[0].detail.contains("is immutable or append-only"), "{p:?}");
            assert_eq!(
                p[0].fix.as_deref(),
                Some(format!("chattr -i -a {}", db.display()).as_str())
            );
            // A side file too.
            let p = flagged("i", &wal).expect("chattr +i on the -wal");
            assert!(p[0].detail.contains("-wal is immutable"), "{p:?}");
            // Append-only, which access(2) does not see.
            let p = flagged("a", &db).expect("chattr +a");
            assert!(p[0].detail.contains("immutable or append-only"), "{p:?}");
        }
    }
}
