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

/// Write completions for bash, zsh and fish, `fleetagent.1` and one page for every
/// subcommand at every depth (`fleetagent-run.1`, `fleetagent-wakes-add.1`, ...). Returns the
/// files written.
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
    for (page, text) in man_pages()? {
        write(dirs.man1.join(format!("{page}.1")), &text, &mut out)?;
    }
    Ok(out)
}

/// Every man page: (name, roff). A page's SUBCOMMANDS section names `<page>-<sub>(1)` for
/// each subcommand, so there is a page for every subcommand at every depth. clap's `help`
/// subcommands are left out of the tree (and so out of every page): `--help` says the same.
pub fn man_pages() -> Result<Vec<(String, Vec<u8>)>> {
    fn without_help(cmd: clap::Command) -> clap::Command {
        cmd.disable_help_subcommand(true)
            .mut_subcommands(without_help)
    }
    fn walk(cmd: &clap::Command, out: &mut Vec<(String, Vec<u8>)>) -> Result<()> {
        let mut buf = Vec::new();
        // The footer names the program and version on every page, not `add`.
        clap_mangen::Man::new(cmd.clone())
            .source(concat!("fleetagent ", env!("CARGO_PKG_VERSION")))
            .render(&mut buf)?;
        // After build(), a subcommand's display name is its page's: `fleetagent-wakes-add`.
        let page = cmd.get_display_name().unwrap_or(cmd.get_name()).to_string();
        out.push((page, buf));
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            walk(sub, out)?;
        }
        Ok(())
    }
    let mut cmd = without_help(Cli::command());
    cmd.build();
    let mut out = Vec::new();
    walk(&cmd, &mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every subcommand at every depth, as `fleetagent-wakes-add`, without `help`.
    fn all_pages() -> Vec<String> {
        fn walk(prefix: &str, cmd: &clap::Command, out: &mut Vec<String>) {
            for sub in cmd.get_subcommands() {
                let page = format!("{prefix}-{}", sub.get_name());
                walk(&page, sub, out);
                out.push(page);
            }
        }
        let mut out = vec!["fleetagent".to_string()];
        walk("fleetagent", &Cli::command(), &mut out);
        out.sort();
        out
    }

    /// The `fleetagent-...(1)` names a page refers to (roff writes `-` as `\-`).
    fn references(roff: &str) -> Vec<String> {
        let text = roff.replace("\\-", "-");
        let mut out = Vec::new();
        for (at, _) in text.match_indices("fleetagent-") {
            let rest = &text[at..];
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                .unwrap_or(rest.len());
            if rest[end..].starts_with('(') {
                out.push(rest[..end].to_string());
            }
        }
        out
    }

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
        }
        assert!(man.starts_with(".ie") || man.contains(".TH"), "{man}");
        assert!(read("man/man1/fleetagent-sim.1").contains("scenario"));
        let pages = all_pages();
        for page in &pages {
            assert!(
                dir.path().join(format!("man/man1/{page}.1")).is_file(),
                "no page {page}"
            );
        }
        assert_eq!(files.len(), 3 + pages.len());
    }

    /// Every `fleetagent-*(1)` a page refers to is a page that is installed, and no page is
    /// for `help` (the pages refer to none).
    #[test]
    fn every_page_a_page_refers_to_exists() {
        let dir = tempfile::tempdir().unwrap();
        write_completions_and_man(&DocDirs::under(dir.path())).unwrap();
        let man1 = dir.path().join("man/man1");
        let mut installed: Vec<String> = std::fs::read_dir(&man1)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        installed.sort();
        let mut seen = 0;
        for file in &installed {
            assert!(!file.contains("help"), "a page for help: {file}");
            let text = std::fs::read_to_string(man1.join(file)).unwrap();
            for r in references(&text) {
                seen += 1;
                assert!(
                    installed.contains(&format!("{r}.1")),
                    "{file} refers to {r}(1), which is not installed"
                );
            }
        }
        assert!(seen >= 15, "only {seen} references: the parser is broken");
        let mut expected: Vec<String> = all_pages().iter().map(|p| format!("{p}.1")).collect();
        expected.sort();
        assert_eq!(installed, expected);
    }

    /// The flags of nested subcommands, and the global ones, are in their pages.
    #[test]
    fn nested_flags_are_in_their_pages() {
        let pages: std::collections::BTreeMap<String, String> = man_pages()
            .unwrap()
            .into_iter()
            .map(|(n, t)| (n, String::from_utf8(t).unwrap().replace("\\-", "-")))
            .collect();
        for (page, flags) in [
            (
                "fleetagent-units-install",
                &["--user", "--unit-dir", "--config"][..],
            ),
            (
                "fleetagent-wakes-add",
                &["--in", "--at", "--reason", "--state-dir"],
            ),
            ("fleetagent-instances-stop", &["--force", "--reason"]),
            ("fleetagent-trigger", &["--priority", "--verbose"]),
        ] {
            let text = &pages[page];
            for flag in flags {
                assert!(text.contains(flag), "{flag} missing from {page}:\n{text}");
            }
        }
        // The synopsis is the command line, not the page name.
        assert!(
            pages["fleetagent-wakes-add"].contains("fleetagent wakes add"),
            "{}",
            pages["fleetagent-wakes-add"]
        );
    }
}
