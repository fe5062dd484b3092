//! Finding, reading and parsing the config file: the path from `--config`,
//! `$FLEETAGENT_CONFIG` or the default, the file's mode, and the text through the schema and
//! [`validate`](super::validate) with every error laid out by [`locate`](super::locate).

use std::path::{Path, PathBuf};

use super::locate::{at_line, key_line, toml_error};
use super::validate::validate;
use super::{Config, DEFAULT_CONFIG_PATH};
use crate::error::UsageError;

/// Where the config was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigOrigin {
    /// `--config` or `$FLEETAGENT_CONFIG`: the file must exist.
    Explicit,
    /// The default path; a missing file means every default.
    Default,
}

#[derive(Debug, Clone)]
pub struct LoadedConfig {
    pub config: Config,
    pub path: PathBuf,
    /// False when the default path did not exist and every default applies.
    pub file_found: bool,
}

/// Pick the config path: `--config`, else `$FLEETAGENT_CONFIG`, else the default.
pub fn resolve_path(flag: Option<&Path>, env_value: Option<&str>) -> (PathBuf, ConfigOrigin) {
    if let Some(p) = flag {
        return (p.to_path_buf(), ConfigOrigin::Explicit);
    }
    if let Some(v) = env_value.filter(|v| !v.is_empty()) {
        return (PathBuf::from(v), ConfigOrigin::Explicit);
    }
    (PathBuf::from(DEFAULT_CONFIG_PATH), ConfigOrigin::Default)
}

/// Read, parse and validate the config. Errors are [`UsageError`]s (exit 2) naming the file,
/// the line and the key.
pub fn load(path: &Path, origin: ConfigOrigin) -> Result<LoadedConfig, UsageError> {
    use std::os::unix::fs::PermissionsExt;
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && origin == ConfigOrigin::Default => {
            return Ok(LoadedConfig {
                config: Config::default(),
                path: path.to_path_buf(),
                file_found: false,
            });
        }
        Err(e) => {
            return Err(UsageError(format!(
                "cannot read config {}: {e}",
                path.display()
            )))
        }
    };
    if meta.permissions().mode() & 0o002 != 0 {
        return Err(UsageError(format!(
            "config {} is world-writable (mode {:o}); refusing it: run chmod o-w {}",
            path.display(),
            meta.permissions().mode() & 0o7777,
            path.display()
        )));
    }
    if let Some((dir, mode)) = replaceable_by_anyone(path) {
        return Err(UsageError(format!(
            "config {} is in {}, which every user may write (mode {mode:o}, no sticky bit): anyone \
             could put another config in its place; refusing it: run chmod o-w {} (or keep the \
             config elsewhere)",
            path.display(),
            dir.display(),
            dir.display()
        )));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| UsageError(format!("cannot read config {}: {e}", path.display())))?;
    let config = parse(&text).map_err(|e| UsageError(format!("config {}: {e}", path.display())))?;
    Ok(LoadedConfig {
        config,
        path: path.to_path_buf(),
        file_found: true,
    })
}

/// The first directory above the config (as named, and as its links resolve) that every user
/// may write and that has no sticky bit, with its mode: there anyone can rename another file
/// over the config (or over a link to it), as sshd's StrictModes reasons. `/tmp` (sticky)
/// passes.
fn replaceable_by_anyone(path: &Path) -> Option<(PathBuf, u32)> {
    use std::os::unix::fs::PermissionsExt;
    let named = std::path::absolute(path).ok()?;
    let real = std::fs::canonicalize(path).ok();
    [Some(named), real]
        .into_iter()
        .flatten()
        .flat_map(|p| {
            p.ancestors()
                .skip(1)
                .map(Path::to_path_buf)
                .collect::<Vec<_>>()
        })
        .find_map(|dir| {
            let mode = std::fs::metadata(&dir).ok()?.permissions().mode() & 0o7777;
            (mode & 0o002 != 0 && mode & 0o1000 == 0).then_some((dir, mode))
        })
}

/// Parse and validate config text. The error is one line: `line N (key): what is wrong`.
pub fn parse(text: &str) -> Result<Config, String> {
    let config: Config = toml::from_str(text).map_err(|e| toml_error(text, &e))?;
    validate(&config).map_err(|(key, msg, other)| {
        // The blamed key's line, else the other key's when only that one is in the file.
        let key = key.as_ref();
        let (line, named) = match key_line(text, key) {
            Some(line) => (Some(line), key),
            None => other
                .and_then(|o| key_line(text, o).map(|line| (Some(line), o)))
                .unwrap_or((None, key)),
        };
        at_line(line, named, &msg)
    })?;
    Ok(config)
}
