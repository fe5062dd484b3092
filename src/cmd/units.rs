//! `units install`: write the systemd units for this binary, config and state dir, create the
//! state dir, and print the commands that enable them. Never runs systemctl itself.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::cli::{UnitsCommand, UnitsInstallArgs};
use crate::cmd::App;
use crate::config::{Config, EnvValue};
use crate::error::usage;
use crate::units::{self, Scope, UnitParams};

/// The account the system units run as (`User=`/`Group=` in units/).
const SERVICE_USER: &str = "fleetagent";

pub fn run(app: &App, command: &UnitsCommand) -> Result<()> {
    match command {
        UnitsCommand::Install(args) => install(app, args),
    }
}

/// One file `units install` writes.
struct Artifact {
    path: PathBuf,
    text: String,
    mode: u32,
}

fn install(app: &App, args: &UnitsInstallArgs) -> Result<()> {
    let scope = if args.user {
        Scope::User
    } else {
        Scope::System
    };
    let loaded = app.load_config()?;
    // Every destination is resolved and checked before anything is written: an install that
    // cannot finish does not start.
    let config_path = absolute(&loaded.path)?;
    let state_dir = absolute(&app.state_dir(Some(&loaded.config))?)?;
    let bin = std::env::current_exe().context("cannot find the path of this binary")?;
    let unit_dir = match &args.unit_dir {
        Some(d) => absolute(d)?,
        None => default_unit_dir(scope, app)?,
    };
    // Shell completions and the man pages: beside the units with --unit-dir (packaging),
    // else where the shells and man(1) look for the scope.
    let doc_dirs = match (&args.unit_dir, scope) {
        (Some(_), _) => crate::docs_gen::DocDirs::under(&unit_dir),
        (None, Scope::System) => crate::docs_gen::DocDirs::system(),
        (None, Scope::User) => crate::docs_gen::DocDirs::user(&data_home(app)?),
    };
    let params = UnitParams {
        scope,
        bin,
        config: config_path,
        state_dir,
        deadline_secs: loaded.config.run.deadline_secs,
        extra_write_paths: extra_write_paths(&loaded.config),
        extra_credentials: extra_credentials(&loaded.config)?,
    };
    check_paths(&params)?;
    check_destinations(&params, &unit_dir, &doc_dirs)?;

    crate::paths::ensure_state_dir(&params.state_dir)?;
    let mut notes = Vec::new();
    if scope == Scope::System {
        notes.extend(prepare_system_account(&params)?);
    }
    let metrics_dirs = prepare_metrics_dirs(&params, &mut notes)?;
    if !params.config.exists() {
        notes.push(format!(
            "no config at {} yet: every run fails until it exists; create it with `{} --config {} init`",
            params.config.display(),
            params.bin.display(),
            params.config.display()
        ));
    }

    if let Some(line) = replaced_state_dir(&unit_dir, &params.state_dir) {
        crate::journal::eprint(crate::journal::WARNING, &format!("fleetagent: {line}"));
        notes.push(line);
    }
    let mut artifacts: Vec<Artifact> = units::render_with(&params)
        .into_iter()
        .map(|(name, text)| Artifact {
            path: unit_dir.join(name),
            text,
            mode: 0o644,
        })
        .collect();
    artifacts.sort_by(|a, b| a.path.cmp(&b.path));
    for a in &artifacts {
        write_atomically(a)?;
        crate::outln!("wrote {}", a.path.display());
    }
    let docs = crate::docs_gen::write_completions_and_man(&doc_dirs)?;
    crate::outln!(
        "wrote {} completion and man page files (bash, zsh, fish; {})",
        docs.len(),
        doc_dirs.man1.display()
    );

    let state_mode = fs::metadata(&params.state_dir)
        .with_context(|| format!("state dir {}", params.state_dir.display()))?
        .mode();
    let (line, note) = state_dir_report(
        &params.state_dir,
        state_mode,
        units::state_directory_name(&params).is_some(),
    );
    crate::outln!("{line}");
    notes.extend(note);
    for line in &metrics_dirs {
        crate::outln!("{line}");
    }
    crate::outln!("{}", secrets_hint(&params));
    for n in &notes {
        crate::outln!("note: {n}");
    }
    let sc = scope.systemctl();
    crate::outln!("enable them with:");
    crate::outln!("  {sc} daemon-reload");
    crate::outln!("  {sc} enable --now {}", units::ENABLE.join(" "));
    if scope == Scope::User {
        crate::outln!("  loginctl enable-linger \"$USER\"   # run them without a login session");
    }
    Ok(())
}

/// The state dir the service unit already in `unit_dir` runs, when it is another one that
/// holds a database: the units about to be written leave that install's fleet unwatched (a
/// walkthrough saw a second install rent beside it, the first one's `doctor` still green).
fn replaced_state_dir(unit_dir: &Path, state_dir: &Path) -> Option<String> {
    let text = fs::read_to_string(unit_dir.join(units::TEMPLATES[0].0)).ok()?;
    let old = units::exec_state_dir(&text)?;
    if crate::paths::same_path(&old, state_dir) || !old.join(crate::store::DB_FILE).exists() {
        return None;
    }
    Some(format!(
        "the units in {} ran state dir {}, which holds a database; they now run {}: nothing watches the fleet that database knows (its instances bill on). If that was not meant, install again with `--state-dir {}`; else move the install (docs/operations.md, \"Moving an install to another host\") or retire it (\"Retiring an install\")",
        unit_dir.display(),
        old.display(),
        state_dir.display(),
        old.display()
    ))
}

/// `$XDG_DATA_HOME`, else `~/.local/share` (a relative value is an error naming it).
fn data_home(app: &App) -> Result<PathBuf> {
    crate::paths::base_dir(&|k| app.env.get(k), "XDG_DATA_HOME", ".local/share")?.ok_or_else(|| {
        usage(
            "cannot choose where completions and man pages go: neither XDG_DATA_HOME nor HOME is set; pass --unit-dir",
        )
    })
}

fn absolute(p: &Path) -> Result<PathBuf> {
    if p.is_absolute() {
        return Ok(p.to_path_buf());
    }
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    Ok(cwd.join(p))
}

/// `$XDG_CONFIG_HOME/systemd/user` (default `~/.config/systemd/user`; a relative value is an
/// error naming it) or /etc/systemd/system.
fn default_unit_dir(scope: Scope, app: &App) -> Result<PathBuf> {
    if scope == Scope::System {
        return Ok(PathBuf::from(units::SYSTEM_UNIT_DIR));
    }
    match crate::paths::base_dir(&|k| app.env.get(k), "XDG_CONFIG_HOME", ".config")? {
        Some(dir) => Ok(dir.join("systemd/user")),
        None => Err(usage(
            "cannot choose the user unit dir: neither XDG_CONFIG_HOME nor HOME is set; pass --unit-dir",
        )),
    }
}

/// Every dir `install` writes into must be absolute, and a directory where it exists.
fn check_destinations(
    p: &UnitParams,
    unit_dir: &Path,
    docs: &crate::docs_gen::DocDirs,
) -> Result<()> {
    let mut all = vec![
        ("state dir", p.state_dir.as_path()),
        ("unit dir", unit_dir),
        ("bash completion dir", &docs.bash),
        ("zsh completion dir", &docs.zsh),
        ("fish completion dir", &docs.fish),
        ("man page dir", &docs.man1),
    ];
    all.extend(
        p.extra_write_paths
            .iter()
            .map(|d| ("metrics dir", d.as_path())),
    );
    for (what, dir) in all {
        if !dir.is_absolute() {
            return Err(usage(format!(
                "{what} {} is not an absolute path",
                dir.display()
            )));
        }
        // The first part of it that exists must be a directory.
        if let Some(meta) = dir.ancestors().find_map(|d| fs::metadata(d).ok()) {
            if !meta.is_dir() {
                return Err(usage(format!(
                    "cannot install into {what} {}: a file is in the way",
                    dir.display()
                )));
            }
        }
    }
    Ok(())
}

/// The metrics textfile is written next to itself (atomic rename): its dir must be writable.
fn extra_write_paths(config: &Config) -> Vec<PathBuf> {
    config
        .metrics
        .textfile
        .as_deref()
        .and_then(Path::parent)
        .filter(|d| d.is_absolute())
        .map(Path::to_path_buf)
        .into_iter()
        .collect()
}

/// Worker environment values that name a credential must be loaded by the unit too.
fn extra_credentials(config: &Config) -> Result<Vec<String>> {
    let mut out: Vec<String> = Vec::new();
    for value in config.vast.env.values() {
        if let EnvValue::Credential(crate::config::CredentialRef { credential }) = value {
            let ok = !credential.is_empty()
                && credential
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
            if !ok {
                return Err(usage(format!(
                    "credential name {credential:?} (in [vast.env]) cannot go into a unit file: use letters, digits, _ - ."
                )));
            }
            if !units::CREDENTIALS.contains(&credential.as_str()) && !out.contains(credential) {
                out.push(credential.clone());
            }
        }
    }
    Ok(out)
}

fn check_paths(p: &UnitParams) -> Result<()> {
    let mut all = vec![
        ("binary", &p.bin),
        ("config", &p.config),
        ("state dir", &p.state_dir),
    ];
    all.extend(p.extra_write_paths.iter().map(|w| ("metrics dir", w)));
    for (what, path) in all {
        units::check_path(what, path).map_err(usage)?;
    }
    Ok(())
}

/// The system units run as `fleetagent`: give it the state dir when the account exists,
/// else say how to create it; warn when it could not reach the binary or read the config.
fn prepare_system_account(p: &UnitParams) -> Result<Vec<String>> {
    let mut notes = Vec::new();
    let user = nix::unistd::User::from_name(SERVICE_USER)
        .with_context(|| format!("cannot look up user {SERVICE_USER}"))?;
    match user {
        None => notes.push(format!(
            "no user {SERVICE_USER} yet: create it with `useradd --system --user-group --home-dir {} --shell /usr/sbin/nologin {SERVICE_USER}`",
            p.state_dir.display()
        )),
        Some(u) => {
            let meta = fs::metadata(&p.state_dir)
                .with_context(|| format!("state dir {}", p.state_dir.display()))?;
            if meta.uid() == 0 {
                nix::unistd::chown(&p.state_dir, Some(u.uid), Some(u.gid)).with_context(|| {
                    format!("cannot chown state dir {} to {SERVICE_USER}", p.state_dir.display())
                })?;
                notes.extend(give_state_files(&p.state_dir, u.uid, u.gid)?);
            }
        }
    }
    if let Some(dir) = p.bin.ancestors().skip(1).find(|d| !others_may_enter(d)) {
        notes.push(format!(
            "the service user cannot reach {} ({} is not world-searchable): install the binary under /usr/local/bin and run `units install` from there",
            p.bin.display(),
            dir.display()
        ));
    }
    if let Ok(meta) = fs::metadata(&p.config) {
        let group_ok = nix::unistd::Group::from_name(SERVICE_USER)
            .ok()
            .flatten()
            .is_some_and(|g| g.gid.as_raw() == meta.gid() && meta.mode() & 0o040 != 0);
        if !group_ok && meta.mode() & 0o004 == 0 {
            notes.push(format!(
                "the service user cannot read {}: run `chgrp {SERVICE_USER} {} && chmod 0640 {}`",
                p.config.display(),
                p.config.display(),
                p.config.display()
            ));
        }
    }
    Ok(notes)
}

/// The state files root left in the state dir it just gave the service user (`init` run as
/// root first: the database, its -wal and -shm, run.lock, the doorbell; `paths::STATE_FILES`):
/// theirs too, or the service cannot open its database (SQLite code 14); systemd's
/// `StateDirectory=` does not descend into a dir whose owner is already right. Regular files
/// only, links never followed; nothing else in the dir is touched.
fn give_state_files(
    dir: &Path,
    uid: nix::unistd::Uid,
    gid: nix::unistd::Gid,
) -> Result<Vec<String>> {
    let mut given = Vec::new();
    for name in crate::paths::STATE_FILES {
        let path = dir.join(name);
        let Ok(meta) = fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.file_type().is_file() && meta.uid() == 0 {
            nix::unistd::chown(&path, Some(uid), Some(gid))
                .with_context(|| format!("cannot chown {} to {SERVICE_USER}", path.display()))?;
            given.push(path.display().to_string());
        }
    }
    Ok(match given.is_empty() {
        true => Vec::new(),
        false => vec![format!(
            "gave {} to {SERVICE_USER} with the state dir (root made them)",
            given.join(", ")
        )],
    })
}

/// What to say about the state dir, from its real mode: a dir `install` (or `init`) created
/// is setgid 2770; one that existed keeps its mode (install never changes it: 0700 -> 2770
/// would give a group access it did not have), and the note says how to fix it, unless
/// systemd applies `StateDirectoryMode=2770` itself at each start.
fn state_dir_report(dir: &Path, mode: u32, systemd_sets_mode: bool) -> (String, Option<String>) {
    let mode = mode & 0o7777;
    let group = "operators who run `fleetagent trigger` join its group";
    if mode == 0o2770 {
        return (
            format!("state dir {} (setgid 2770; {group})", dir.display()),
            None,
        );
    }
    if systemd_sets_mode {
        return (
            format!(
                "state dir {} (mode {mode:04o} now; systemd makes it setgid 2770 at each start of the service, StateDirectoryMode=2770; {group})",
                dir.display()
            ),
            None,
        );
    }
    (
        format!(
            "state dir {} (mode {mode:04o}, left as is: not the designed setgid 2770)",
            dir.display()
        ),
        Some(format!(
            "run `chmod 2770 {}` (and chgrp it to the operators' group) so that its files get its group and {group}",
            dir.display()
        )),
    )
}

/// The metrics textfile's dir (a `ReadWritePaths=` of the services) must exist, or systemd
/// would fail every start with 226/NAMESPACE without the "-" prefix, and with it the textfile
/// would never be written. Create it when missing: 0755 whatever the umask, not the state
/// dir's 2770, because node_exporter (another user) reads it; for the system units, owned
/// by the service user when that account exists. Dirs that exist are left as they are, with
/// a note when the service user cannot write them. Returns one line per dir to print.
fn prepare_metrics_dirs(p: &UnitParams, notes: &mut Vec<String>) -> Result<Vec<String>> {
    let mut said = Vec::new();
    for dir in &p.extra_write_paths {
        let created = crate::paths::create_dirs(dir, 0o755)
            .with_context(|| format!("cannot create metrics dir {}", dir.display()))?;
        let account = match p.scope {
            Scope::System => nix::unistd::User::from_name(SERVICE_USER)
                .with_context(|| format!("cannot look up user {SERVICE_USER}"))?,
            Scope::User => None,
        };
        if !created.is_empty() {
            if let Some(u) = &account {
                nix::unistd::chown(dir, Some(u.uid), Some(u.gid)).with_context(|| {
                    format!(
                        "cannot chown metrics dir {} to {SERVICE_USER}",
                        dir.display()
                    )
                })?;
            }
        }
        let meta = fs::metadata(dir).with_context(|| format!("metrics dir {}", dir.display()))?;
        if !meta.is_dir() {
            return Err(usage(format!(
                "metrics.textfile: {} is not a directory",
                dir.display()
            )));
        }
        let chown_hint = format!("chown {SERVICE_USER}:{SERVICE_USER} {}", dir.display());
        let writable = match (p.scope, &account) {
            (Scope::User, _) => crate::paths::writable(dir),
            (Scope::System, Some(u)) => user_may_write(&meta, u),
            (Scope::System, None) => {
                notes.push(format!(
                    "the metrics dir {} must be writable by user {SERVICE_USER}: once the account exists, run `{chown_hint}`",
                    dir.display()
                ));
                true
            }
        };
        if !writable {
            notes.push(format!(
                "the service cannot write the metrics dir {} (owner {}:{}, mode {:04o}), so the textfile will not be written: run `{}`",
                dir.display(),
                meta.uid(),
                meta.gid(),
                meta.mode() & 0o7777,
                match p.scope {
                    Scope::System => chown_hint.clone(),
                    Scope::User => format!("chmod u+w {}", dir.display()),
                }
            ));
        }
        said.push(format!(
            "metrics dir {} ({}mode {:04o}, owner {}:{})",
            dir.display(),
            if created.is_empty() { "" } else { "created, " },
            meta.mode() & 0o7777,
            meta.uid(),
            meta.gid()
        ));
    }
    Ok(said)
}

/// May this account create files in a dir with this owner and mode (mode bits only; an ACL
/// is not read)? Its groups are those initgroups(3) gives it, as systemd does for `User=`.
fn user_may_write(meta: &fs::Metadata, u: &nix::unistd::User) -> bool {
    let groups: Vec<u32> = std::ffi::CString::new(u.name.as_str())
        .ok()
        .and_then(|name| nix::unistd::getgrouplist(&name, u.gid).ok())
        .unwrap_or_default()
        .iter()
        .map(|g| g.as_raw())
        .chain([u.gid.as_raw()])
        .collect();
    may_write(meta.uid(), meta.gid(), meta.mode(), u.uid.as_raw(), &groups)
}

/// The permission check of a dir's mode bits for a process with this uid and these groups
/// (not root): write and search in the owner, group or other class that applies.
fn may_write(owner: u32, group: u32, mode: u32, uid: u32, groups: &[u32]) -> bool {
    if owner == uid {
        mode & 0o300 == 0o300
    } else if groups.contains(&group) {
        mode & 0o030 == 0o030
    } else {
        mode & 0o003 == 0o003
    }
}

fn others_may_enter(dir: &Path) -> bool {
    fs::metadata(dir).is_ok_and(|m| m.permissions().mode() & 0o001 != 0)
}

fn secrets_hint(p: &UnitParams) -> String {
    let names: Vec<String> = units::CREDENTIALS
        .iter()
        .map(|s| s.to_string())
        .chain(p.extra_credentials.iter().cloned())
        .map(|id| units::credstore_name(&id))
        .collect();
    match p.scope {
        Scope::System => format!(
            "secrets (each optional; root-owned, mode 0600): /etc/credstore/{{{}}}",
            names.join(",")
        ),
        Scope::User => format!(
            "secrets: a user manager on systemd 252 finds credentials ({}) only in its own credentials and the root-owned /etc/credstore/; \
             without root, set VAST_API_KEY, FLEETAGENT_LLM_API_KEY, FLEETAGENT_HARMONYDB_URL (and FLEETAGENT_HA_DB_URL with [ha]) with a drop-in \
             (`systemctl --user edit fleetagent.service fleetagent-poll.service`: EnvironmentFile= a 0600 file)",
            names.join(", ")
        ),
    }
}

/// Write next to the target and rename over it, so systemd never reads half a unit.
fn write_atomically(a: &Artifact) -> Result<()> {
    let dir = a.path.parent().unwrap_or(Path::new("/"));
    crate::paths::create_dirs(dir, 0o755)
        .with_context(|| format!("cannot create {}", dir.display()))?;
    let tmp = a.path.with_extension(format!(
        "{}.tmp",
        a.path.extension().and_then(|e| e.to_str()).unwrap_or("")
    ));
    let write = || -> std::io::Result<()> {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(a.mode)
            .open(&tmp)?;
        f.set_permissions(fs::Permissions::from_mode(a.mode))?;
        f.write_all(a.text.as_bytes())?;
        f.sync_all()?;
        fs::rename(&tmp, &a.path)
    };
    write().with_context(|| format!("cannot write {}", a.path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_dir_report_says_the_real_mode() {
        let dir = Path::new("/srv/fa");
        let (line, note) = state_dir_report(dir, 0o42770, false);
        assert!(
            line.starts_with("state dir /srv/fa (setgid 2770; "),
            "{line}"
        );
        assert_eq!(note, None);
        let (line, note) = state_dir_report(dir, 0o40755, false);
        assert!(
            line.starts_with("state dir /srv/fa (mode 0755, left as is"),
            "{line}"
        );
        assert!(!line.contains("(setgid 2770"), "{line}");
        assert!(note.unwrap().starts_with("run `chmod 2770 /srv/fa`"));
        // /var/lib/fleetagent with StateDirectory=: systemd applies the mode at each start.
        let (line, note) = state_dir_report(Path::new("/var/lib/fleetagent"), 0o40755, true);
        assert!(
            line.contains("mode 0755 now; systemd makes it setgid 2770"),
            "{line}"
        );
        assert_eq!(note, None);
    }

    /// `init` as root, then `units install`: the files root made in the state dir go to the
    /// service user with the dir (regular files only; a link is never followed). The suite
    /// runs as root, as CI does.
    #[test]
    fn the_state_files_root_made_go_with_the_dir() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("fleetagent.db");
        fs::write(&db, b"").unwrap();
        let elsewhere = dir.path().join("sub");
        fs::create_dir(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, dir.path().join("link")).unwrap();
        let (uid, gid) = (
            nix::unistd::Uid::from_raw(4242),
            nix::unistd::Gid::from_raw(4243),
        );
        let notes = give_state_files(dir.path(), uid, gid).unwrap();
        let db_meta = fs::metadata(&db).unwrap();
        assert_eq!((db_meta.uid(), db_meta.gid()), (4242, 4243));
        assert_eq!(fs::metadata(&elsewhere).unwrap().uid(), 0);
        assert_eq!(
            fs::symlink_metadata(dir.path().join("link")).unwrap().uid(),
            0
        );
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].contains("fleetagent.db") && !notes[0].contains("link"));
        // Given once: nothing left to give.
        assert!(give_state_files(dir.path(), uid, gid).unwrap().is_empty());
    }

    #[test]
    fn may_write_uses_the_class_that_applies() {
        // Owner 0755: the owner writes, its group and others do not.
        assert!(may_write(900, 900, 0o40755, 900, &[900]));
        assert!(!may_write(0, 900, 0o755, 900, &[900]));
        // Group-writable, setgid: a member writes, others do not.
        assert!(may_write(0, 900, 0o2775, 901, &[5, 900]));
        assert!(!may_write(0, 900, 0o2775, 901, &[5]));
        // The owner class applies even when the group class would allow more.
        assert!(!may_write(901, 900, 0o575, 901, &[900]));
        assert!(may_write(0, 0, 0o1777, 901, &[901]));
    }
}
