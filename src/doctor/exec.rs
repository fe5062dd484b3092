//! The binary a service's `ExecStart=` runs: there, a file, and executable by the unit's
//! `User=`. A start that cannot run it fails (203/EXEC), and clearing the units' failures
//! trips the doorbell's start limit again at once: walkthroughs looped on doctor's
//! reset-failed fix for a binary gone, one copied without +x, and one root's alone.

use std::path::Path;

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
    user.filter(|u| !executable_by(&m, u)).map(|u| {
        format!(
            "User={u} may not execute (mode {:o}, owner uid {}: `chmod 0755` it)",
            mode & 0o7777,
            m.uid()
        )
    })
}

/// May `user` (a unit's `User=`) execute this file, by its mode bits: the owner's, else its
/// group's (the user's groups), else the others'. Root may where any x bit is set; an unknown
/// user is not judged (systemd names it). A re-test's `install -m 0700` binary owned by root
/// failed every start of a `User=fleetagent` service while doctor advised reset-failed.
fn executable_by(m: &std::fs::Metadata, user: &str) -> bool {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let mode = m.permissions().mode();
    let Ok(Some(u)) = nix::unistd::User::from_name(user) else {
        return true;
    };
    if u.uid.is_root() {
        return mode & 0o111 != 0;
    }
    if m.uid() == u.uid.as_raw() {
        return mode & 0o100 != 0;
    }
    let groups = std::ffi::CString::new(user)
        .ok()
        .and_then(|c| nix::unistd::getgrouplist(&c, u.gid).ok())
        .unwrap_or_else(|| vec![u.gid]);
    if groups.iter().any(|g| g.as_raw() == m.gid()) {
        return mode & 0o010 != 0;
    }
    mode & 0o001 != 0
}
