//! The binary a service's `ExecStart=` runs: there, a file, and executable by the unit's
//! `User=` through every directory on its path. A start that cannot run it fails (203/EXEC,
//! 217/USER), and clearing the units' failures trips the doorbell's start limit again at
//! once: walkthroughs looped on doctor's reset-failed fix for a binary gone, one copied
//! without +x, one root's alone, one in a directory the user may not enter, and a `User=`
//! that no longer exists.

use std::path::Path;

use nix::unistd::{Gid, User};

/// Why the service cannot run `path` as `user` (None: it can, or that cannot be told).
pub(super) fn unusable(path: &Path, user: Option<&str>) -> Option<String> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let m = match std::fs::metadata(path) {
        Err(_) => return Some("does not exist".into()),
        Ok(m) => m,
    };
    let mode = m.permissions().mode();
    if !m.is_file() {
        return Some("is not a file".into());
    }
    if mode & 0o111 == 0 {
        return Some("is not executable (no x bit: `chmod 0755` it)".into());
    }
    let name = user?;
    let Some(u) = lookup(name) else {
        return Some(format!(
            "runs as User={name}, which this host does not know (systemd fails every start: 217/USER; create the user, or `units install` again)"
        ));
    };
    let groups = groups_of(&u);
    if !may_execute(&m, &u, &groups) {
        return Some(format!(
            "User={name} may not execute (mode {:o}, owner uid {}: `chmod 0755` it)",
            mode & 0o7777,
            m.uid()
        ));
    }
    // Every directory on the way must let the user through (x), or exec fails as if the
    // binary were not there.
    path.ancestors().skip(1).find_map(|dir| {
        let d = std::fs::metadata(dir).ok()?;
        (d.is_dir() && !may_execute(&d, &u, &groups)).then(|| {
            format!(
                "User={name} may not enter its directory {} (mode {:o}: `chmod o+x` it, or put the binary elsewhere)",
                dir.display(),
                d.permissions().mode() & 0o7777
            )
        })
    })
}

/// The unit's `User=`, by name or number (None: unknown to this host).
fn lookup(user: &str) -> Option<User> {
    match user.parse::<u32>() {
        Ok(uid) => User::from_uid(nix::unistd::Uid::from_raw(uid)).ok()?,
        Err(_) => User::from_name(user).ok()?,
    }
}

/// The user's groups, its primary one among them (read once: the file and each directory
/// above it are judged by them).
fn groups_of(u: &User) -> Vec<Gid> {
    std::ffi::CString::new(u.name.as_str())
        .ok()
        .and_then(|c| nix::unistd::getgrouplist(&c, u.gid).ok())
        .unwrap_or_else(|| vec![u.gid])
}

/// Does this file's (or directory's) mode let `u` execute it (enter it): the owner's x bit,
/// else its group's (`groups`: the user's), else the others'; root where any x bit is set.
/// A re-test's `install -m 0700` binary owned by root failed every start of a
/// `User=fleetagent` service while doctor advised reset-failed.
fn may_execute(m: &std::fs::Metadata, u: &User, groups: &[Gid]) -> bool {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let mode = m.permissions().mode();
    if u.uid.is_root() {
        mode & 0o111 != 0
    } else if m.uid() == u.uid.as_raw() {
        mode & 0o100 != 0
    } else if groups.iter().any(|g| g.as_raw() == m.gid()) {
        mode & 0o010 != 0
    } else {
        mode & 0o001 != 0
    }
}
