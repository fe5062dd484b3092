//! Shell completions (bash, zsh, fish) and man pages generated from the clap definitions in
//! `cli.rs`, for `units install` to put where shells and man look. Writes files only.
//!
//! Wiring (for `units install`): after the units are written, call
//! `write_completions_and_man(&DocDirs::system())` (or `DocDirs::user(data_home)` with
//! `--user`, `DocDirs::under(dir)` with `--unit-dir` for packaging) and print the paths.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::CommandFactory;
use clap_complete::Shell;

use crate::cli::Cli;

/// Where each kind of file goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocDirs {
    pub bash: PathBuf,
    pub zsh: PathBuf,
    pub fish: PathBuf,
    pub man1: PathBuf,
}

impl DocDirs {
    /// System-wide, where distribution shells and man(1) look for local additions.
    pub fn system() -> DocDirs {
        DocDirs {
            bash: "/usr/local/share/bash-completion/completions".into(),
            zsh: "/usr/local/share/zsh/site-functions".into(),
            fish: "/usr/local/share/fish/vendor_completions.d".into(),
            man1: "/usr/local/share/man/man1".into(),
        }
    }

    /// For one user: under `$XDG_DATA_HOME` (`~/.local/share`).
    pub fn user(data_home: &Path) -> DocDirs {
        DocDirs {
            bash: data_home.join("bash-completion/completions"),
            zsh: data_home.join("zsh/site-functions"),
            fish: data_home.join("fish/vendor_completions.d"),
            man1: data_home.join("man/man1"),
        }
    }

    /// Everything under one dir (packaging, tests): `completions/` and `man/man1/`.
    pub fn under(root: &Path) -> DocDirs {
        DocDirs {
            bash: root.join("completions"),
            zsh: root.join("completions"),
            fish: root.join("completions"),
            man1: root.join("man/man1"),
        }
    }
}

/// Write one file 0644 (its missing dirs 0755), whatever the umask: shells source these.
fn write(path: PathBuf, bytes: &[u8], out: &mut Vec<PathBuf>) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    if let Some(dir) = path.parent() {
        crate::paths::create_dirs(dir, 0o755)
            .with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o644)
            .open(&path)?;
        f.set_permissions(std::fs::Permissions::from_mode(0o644))?;
        f.write_all(bytes)
    };
    write().with_context(|| format!("cannot write {}", path.display()))?;
    out.push(path);
    Ok(())
}

/// Write completions for bash, zsh and fish, `fleetagent.1` and one page per subcommand
/// (`fleetagent-run.1`, ...). Returns the files written.
pub fn write_completions_and_man(dirs: &DocDirs) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let name = "fleetagent";
    for (shell, dir, file) in [
        (Shell::Bash, &dirs.bash, name.to_string()),
        (Shell::Zsh, &dirs.zsh, format!("_{name}")),
        (Shell::Fish, &dirs.fish, format!("{name}.fish")),
    ] {
        let mut buf = Vec::new();
        clap_complete::generate(shell, &mut Cli::command(), name, &mut buf);
        let file = if shell == Shell::Bash && dirs.bash == dirs.fish {
            format!("{name}.bash")
        } else {
            file
        };
        write(dir.join(file), &buf, &mut out)?;
    }
    let cmd = Cli::command();
    let mut buf = Vec::new();
    clap_mangen::Man::new(cmd.clone()).render(&mut buf)?;
    write(dirs.man1.join(format!("{name}.1")), &buf, &mut out)?;
    for sub in cmd.get_subcommands() {
        let page = format!("{name}-{}", sub.get_name());
        let mut buf = Vec::new();
        clap_mangen::Man::new(sub.clone().name(page.clone())).render(&mut buf)?;
        write(dirs.man1.join(format!("{page}.1")), &buf, &mut out)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completions_and_pages_name_every_subcommand() {
        let dir = tempfile::tempdir().unwrap();
        let files = write_completions_and_man(&DocDirs::under(dir.path())).unwrap();
        let read = |p: &str| std::fs::read_to_string(dir.path().join(p)).unwrap();
        let bash = read("completions/fleetagent.bash");
        let zsh = read("completions/_fleetagent");
        let fish = read("completions/fleetagent.fish");
        let man = read("man/man1/fleetagent.1");
        for sub in Cli::command().get_subcommands() {
            let n = sub.get_name();
            assert!(
                bash.contains(n) && zsh.contains(n) && fish.contains(n),
                "{n}"
            );
            // roff escapes the hyphen.
            assert!(
                man.contains(&n.replace('-', "\\-")),
                "{n} missing from the man page"
            );
            assert!(dir
                .path()
                .join(format!("man/man1/fleetagent-{n}.1"))
                .exists());
        }
        assert!(man.starts_with(".ie") || man.contains(".TH"), "{man}");
        assert!(read("man/man1/fleetagent-sim.1").contains("scenario"));
        assert_eq!(files.len(), 4 + Cli::command().get_subcommands().count());
    }
}
