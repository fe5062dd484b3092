//! Finding, reading and parsing the config file: the path from `--config`,
//! `$FLEETAGENT_CONFIG` or the default, the file's mode, and the text through the schema and
//! [`validate`](super::validate) with every error laid out by [`locate`](super::locate).

use std::path::{Path, PathBuf};

use super::locate::{at_line, key_line, key_on_line, line_of, toml_error};
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
    /// The errors of the keys [`load_for_brake`] left out (`line N (KEY): ...`; their
    /// defaults apply); empty otherwise.
    pub left_out: Vec<String>,
}

impl LoadedConfig {
    /// [`load_for_brake`] left out a key spelled like `name` ([`spells`]: in any table, or
    /// misspelled), whose default then applies.
    pub fn left_out_like(&self, name: &str) -> bool {
        self.left_out
            .iter()
            .filter_map(|e| left_out_key(e))
            .any(|k| spells(&k, name))
    }

    /// Whether a single stop keeps the disk is not known: keys were left out and one of
    /// them is spelled like `stop_mode`, or the mode read is the default while the file
    /// writes one spelled so with another value (a re-test's `[vats]` header left its whole
    /// table out, `stop_mode = "stop"` in it, and the stop destroyed the disk).
    pub fn stop_mode_unknown(&self) -> bool {
        if self.left_out.is_empty() {
            return false;
        }
        if self.left_out_like("stop_mode") {
            return true;
        }
        if self.config.vast.stop_mode != super::StopMode::Destroy {
            return false;
        }
        let Ok(text) = std::fs::read_to_string(&self.path) else {
            return true;
        };
        text.lines()
            .filter(|l| !l.trim_start().starts_with('#'))
            .filter_map(|l| l.split_once('='))
            .any(|(key, value)| {
                let value = value.split('#').next().unwrap_or_default();
                let value = value.trim().trim_matches(['"', '\'']);
                spells(key.trim(), "stop_mode") && !value.eq_ignore_ascii_case("destroy")
            })
    }
}

/// The dotted `key`'s last part is `name` or within two edits of it (case and `-` aside): a
/// re-test's `stopmode` and `label_prefx` were left out as unknown keys, and their defaults
/// applied.
fn spells(key: &str, name: &str) -> bool {
    let leaf = key.rsplit('.').next().unwrap_or(key).trim_matches('"');
    let leaf = leaf.to_ascii_lowercase().replace('-', "_");
    strsim::damerau_levenshtein(&leaf, name) <= 2
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
    let Some(text) = read_checked(path, origin)? else {
        return Ok(defaults(path));
    };
    let config = parse(&text).map_err(|e| UsageError(format!("config {}: {e}", path.display())))?;
    Ok(LoadedConfig {
        config,
        path: path.to_path_buf(),
        file_found: true,
        left_out: Vec::new(),
    })
}

/// The config for the hand-brake (`pause`, `instances stop`): as [`load`], but a key that the
/// schema or its checks refuse is left out (its default applies) and named in the second
/// value, one error line each, so that a typo never keeps an operator from stopping the fleet.
/// A `key = value` line that TOML cannot read is left out the same way
/// ([`without_unreadable_lines`]). The file's mode and its place are refused as [`load`]
/// refuses them.
pub fn load_for_brake(
    path: &Path,
    origin: ConfigOrigin,
) -> Result<(LoadedConfig, Vec<String>), UsageError> {
    let Some(text) = read_checked(path, origin)? else {
        return Ok((defaults(path), Vec::new()));
    };
    let (config, left_out) = parse_leaving_out(&text)
        .map_err(|e| UsageError(format!("config {}: {e}", path.display())))?;
    let loaded = LoadedConfig {
        config,
        path: path.to_path_buf(),
        file_found: true,
        left_out: left_out.clone(),
    };
    Ok((loaded, left_out))
}

/// The dotted key a left-out key's error names (`line N (KEY): ...`, or `KEY: ...` where no
/// line is known).
fn left_out_key(said: &str) -> Option<String> {
    named_key(said).or_else(|| {
        said.split_once(": ")
            .map(|(k, _)| k.to_string())
            .filter(|k| !k.is_empty() && !k.contains(' '))
    })
}

fn defaults(path: &Path) -> LoadedConfig {
    LoadedConfig {
        config: Config::default(),
        left_out: Vec::new(),
        path: path.to_path_buf(),
        file_found: false,
    }
}

/// The config's text, once its mode and its directory pass; None when the default path does
/// not exist (every default applies).
fn read_checked(path: &Path, origin: ConfigOrigin) -> Result<Option<String>, UsageError> {
    use std::os::unix::fs::PermissionsExt;
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && origin == ConfigOrigin::Default => {
            return Ok(None);
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
    let bytes = std::fs::read(path)
        .map_err(|e| UsageError(format!("cannot read config {}: {e}", path.display())))?;
    String::from_utf8(bytes).map(Some).map_err(|e| {
        // Where, as for every other config error (a walkthrough got no line).
        let at = e.utf8_error().valid_up_to();
        let line = 1 + e.as_bytes()[..at].iter().filter(|&&b| b == b'\n').count();
        UsageError(format!(
            "config {}: line {line}: not UTF-8 (byte {at}); TOML is UTF-8 text",
            path.display()
        ))
    })
}

/// [`parse`], leaving out each key an error names (`line N (KEY): ...`) until the rest
/// parses: the config and the errors of the keys left out, their lines those of `text`. An
/// error that names no key of the file (a TOML syntax error, a check between keys that
/// are not both there) is the error.
fn parse_leaving_out(text: &str) -> Result<(Config, Vec<String>), String> {
    let err = match parse(text) {
        Ok(c) => return Ok((c, Vec::new())),
        Err(e) => e,
    };
    // Whatever was left out, each key of the file's text that decides whose the fleet is
    // keeps a value of its own: an inline table spanning lines (TOML 1.1) swallowed
    // `label_prefix` once a broken line of it was blanked, and the unknown key it then made
    // was left out on the path below, which did not check (the second re-test: `instances
    // stop --all` destroyed another fleet's instance under the default prefix).
    match leave_out(text, err.clone()) {
        Ok((c, left_out)) if whose_kept(text, &c) => Ok((c, left_out)),
        Ok(_) => Err(err),
        Err(e) => Err(e),
    }
}

/// [`parse_leaving_out`]'s steps: unreadable lines, then refused keys, left out (what decides
/// whose is checked by the caller, on every path).
fn leave_out(text: &str, mut err: String) -> Result<(Config, Vec<String>), String> {
    let Ok((text, mut left_out)) = without_unreadable_lines(text) else {
        return Err(err);
    };
    let text = text.as_str();
    if !left_out.is_empty() {
        match parse(text) {
            Ok(c) => return Ok((c, left_out)),
            Err(e) => err = e,
        }
    }
    let Ok(mut table) = text.parse::<toml::Table>() else {
        return Err(err);
    };
    // Every key of the file at most once; a bound in case an error names one that stays.
    for _ in 0..64 {
        let Some(key) = named_key(&err) else {
            return Err(err);
        };
        // A top-level value other than `state_dir` may be `state_dir` misspelled: left
        // out, the default state dir is another install's (a re-test saw `trigger` record
        // and `pause` pause there).
        let top_level_value = !key.contains('.')
            && table
                .get(&key)
                .is_some_and(|v| !matches!(v, toml::Value::Table(_)));
        if decides_whose(&key) || top_level_value || !remove_dotted(&mut table, &key) {
            return Err(err);
        }
        // Lines as the operator's file has them (the rest is parsed from the table's text).
        let msg = err.split_once("): ").map_or(err.as_str(), |(_, m)| m);
        left_out.push(at_line(key_line(text, &key), &key, msg));
        let rest = toml::to_string(&table).map_err(|e| e.to_string())?;
        match parse(&rest) {
            Ok(c) => return Ok((c, left_out)),
            Err(e) => err = e,
        }
    }
    Err(err)
}

/// The text with each `key = value` line that TOML cannot read blanked (its line number kept),
/// and those lines' errors: a typo on one line must not keep an operator from stopping the
/// fleet, nor drop the event a `trigger` was given (the walkthrough's "a syntax error drops
/// the event"). Never left out: a line that is not `key = value` (a broken `[table]` header
/// would move the keys below it; a `key "value"` without `=` may be one that decides whose),
/// nor one that sets or may set a key that decides whose the fleet is ([`decides_whose`],
/// [`may_decide_whose`]): the error stays, as for every other command.
fn without_unreadable_lines(text: &str) -> Result<(String, Vec<String>), ()> {
    let mut lines: Vec<&str> = text.split('\n').collect();
    let mut left_out = Vec::new();
    // Bounded: every try blanks a line, and a text of garbage is refused long before.
    for _ in 0..64 {
        let current = lines.join("\n");
        let Err(e) = current.parse::<toml::Table>() else {
            return Ok((current, left_out));
        };
        let line = e.span().map(|s| line_of(&current, s.start)).ok_or(())?;
        let key = key_on_line(&current, line).ok_or(())?;
        if decides_whose(&key) || line > lines.len() || may_decide_whose(lines[line - 1]) {
            return Err(());
        }
        let mut said = toml_error(&current, &e);
        if said.contains("duplicate") {
            // Blanking the repeat keeps the first: not the default the warning speaks of.
            said.push_str(" (the first one is kept)");
        }
        left_out.push(said);
        lines[line - 1] = "";
    }
    Err(())
}

/// Whether a line TOML cannot read may set a key that decides whose the fleet is, read from
/// its text alone: the table a line belongs to cannot be told for sure from a text TOML
/// refuses (a multi-line string whose script has a line starting with `[` read as a header,
/// a quoted header, an inline table: the re-test had `instances stop --all` destroy another
/// fleet's instances under the default prefix). Any such name anywhere on the line, or a key
/// (an inline table) named `vast` or `ha`.
fn may_decide_whose(line: &str) -> bool {
    // A multi-line string's delimiter: blanked, every later line is read another way (the
    // second re-test: an onstart closed with `''' x` swallowed `label_prefix` once blanked).
    if line.contains("'''") || line.contains("\"\"\"") {
        return true;
    }
    const NAMES: &[&str] = &[
        "state_dir",
        "label_prefix",
        "enabled",
        "host_id",
        "lease_ttl_secs",
        "fence_margin_secs",
    ];
    let key = line.split('=').next().unwrap_or_default();
    NAMES.iter().any(|n| words(line).any(|w| w == *n))
        || words(key).any(|w| w == "vast" || w == "ha")
}

/// The words of a text as TOML keys are spelled (letters, digits, `_`).
fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
}

/// With lines left out: each key that decides whose the fleet is and that the text sets (a
/// word before a line's `=`, comments aside: docs/ha.md's `# host_id = ...` refused every
/// recovery, the third re-test) still has a value of its own (not its default), however the
/// rest of the text was read. A belt to [`may_decide_whose`]'s braces: what a blanked line
/// does to the lines after it cannot be told from that line alone.
///
/// A key every line of which writes its default (`label_prefix = "fleetagent"`, `enabled =
/// false`, spelled out by an operator) keeps it: the brake refused every recovery of such a
/// config. One line writing anything else (a script's text, a swallowed line) still refuses.
fn whose_kept(text: &str, c: &Config) -> bool {
    let setting = |name: &str| {
        text.lines()
            .filter(|l| !l.trim_start().starts_with('#'))
            .filter_map(|l| l.split_once('='))
            .filter(|(key, _)| words(key).any(|w| w == name))
            .map(|(_, value)| value.to_string())
            .collect::<Vec<String>>()
    };
    // Also inside a line, as an inline table sets it (`vast = { label_prefix = "ours", ...`):
    // the word followed by `=`.
    let inline = |name: &str| {
        text.lines()
            .filter(|l| !l.trim_start().starts_with('#'))
            .any(|l| {
                l.match_indices(name).any(|(at, _)| {
                    let before = l[..at].chars().next_back();
                    let after = l[at + name.len()..].trim_start();
                    !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
                        && after.starts_with('=')
                })
            })
    };
    let named = |name: &str| !setting(name).is_empty() || inline(name);
    let written_default = |name: &str, default: toml::Value| {
        let values = setting(name);
        // Every place the text sets it is a `name = value` line of its own.
        let lines = text
            .lines()
            .filter(|l| !l.trim_start().starts_with('#') && l.contains(name))
            .count();
        !values.is_empty()
            && values.len() == lines
            && values.iter().all(|v| {
                format!("v = {v}")
                    .parse::<toml::Table>()
                    .is_ok_and(|t| t.get("v") == Some(&default))
            })
    };
    let prefix = Config::default().vast.label_prefix;
    !(named("state_dir") && c.state_dir.is_none()
        || named("label_prefix")
            && c.vast.label_prefix == prefix
            && !written_default("label_prefix", toml::Value::String(prefix.clone()))
        || named("enabled") && !c.ha.enabled && !written_default("enabled", false.into())
        || named("host_id") && c.ha.host_id.is_none())
}

/// Keys the hand-brake never leaves out: they decide which database and which instances are
/// this install's, and where the shared state lives. Their defaults would act on another
/// fleet: a refused `vast.label_prefix` made `instances stop --all` destroy instances under
/// the default prefix, a refused `ha.enabled` paused this host alone.
///
/// In any table, or misspelled ([`spells`]): a `label_prefx` left out as unknown applied the
/// default prefix, and `instances list` showed another install's fleet as under ours.
fn decides_whose(key: &str) -> bool {
    key == "ha"
        || key.starts_with("ha.")
        || ["state_dir", "label_prefix", "host_id"]
            .iter()
            .any(|name| spells(key, name))
}

/// The dotted key of a `line N (KEY): ...` error.
fn named_key(err: &str) -> Option<String> {
    let rest = err.strip_prefix("line ")?;
    let (_, rest) = rest.split_once(" (")?;
    let (key, _) = rest.split_once("): ")?;
    Some(key.to_string())
}

/// Remove `a.b.c` from nested tables; false when it is not there. Quoted parts are matched
/// as written unquoted.
fn remove_dotted(table: &mut toml::Table, dotted: &str) -> bool {
    let parts: Vec<String> = dotted
        .split('.')
        .map(|p| p.trim_matches('"').to_string())
        .collect();
    let Some((last, path)) = parts.split_last() else {
        return false;
    };
    let mut at = table;
    for p in path {
        match at.get_mut(p) {
            Some(toml::Value::Table(t)) => at = t,
            _ => return false,
        }
    }
    at.remove(last).is_some()
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A config that is not UTF-8 is named with its line, as every other config error.
    #[test]
    fn a_config_that_is_not_utf8_names_its_line() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o750)).unwrap();
        let path = dir.path().join("config.toml");
        std::fs::write(&path, b"[llm]\n\nmodel = \"a\xff\"\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        let err = load(&path, ConfigOrigin::Explicit).unwrap_err().0;
        assert!(
            err.ends_with("line 3: not UTF-8 (byte 17); TOML is UTF-8 text"),
            "{err}"
        );
    }

    /// The hand-brake's config: every key the checks refuse is left out and named with its
    /// line in the operator's file; what parses stays as written.
    #[test]
    fn the_brake_leaves_out_each_refused_key_and_keeps_the_rest() {
        let text = "state_dir = \"/srv/fa\"\n\n[vast]\nlabel_prefix = \"ours\"\n\
                    timeout_secs = 500\n\n[policy]\nmax_instance = 3\nmax_instances = 4\n";
        assert!(parse(text).is_err());
        let (config, left_out) = parse_leaving_out(text).unwrap();
        assert_eq!(config.state_dir.as_deref(), Some(Path::new("/srv/fa")));
        assert_eq!(config.vast.label_prefix, "ours");
        assert_eq!(config.policy.max_instances, Some(4));
        assert_eq!(
            config.vast.timeout_secs,
            Config::default().vast.timeout_secs
        );
        assert_eq!(left_out.len(), 2, "{left_out:?}");
        assert!(left_out
            .iter()
            .any(|l| l.starts_with("line 8 (policy.max_instance): ")));
        assert!(left_out
            .iter()
            .any(|l| l.starts_with("line 5 (vast.timeout_secs): ")));
        // A good config leaves nothing out; a TOML syntax error is the error.
        assert_eq!(
            parse_leaving_out("[vast]\nlabel_prefix = \"ours\"\n")
                .unwrap()
                .1
                .len(),
            0
        );
        // A top-level value refused (`state_dir` misspelled) is never left out.
        assert!(parse_leaving_out("state_dirx = \"/srv/fa\"\n").is_err());
        assert_eq!(parse_leaving_out("[polcy]\nx = 1\n").unwrap().1.len(), 1);
        let broken = "[vast\nlabel_prefix = 1\n";
        assert_eq!(
            parse_leaving_out(broken).unwrap_err(),
            parse(broken).unwrap_err()
        );
        // What decides whose the fleet is is never left out: its default is another fleet's.
        for text in [
            "[vast]\nlabel_prefix = \"team A\"\n",
            "[ha]\nenabled = \"yes\"\n",
            "state_dir = 7\n",
            // Misspelled or in another table (a re-test: the default prefix applied).
            "[vast]\nlabel_prefx = \"ours\"\n",
            "[policy]\nlabel_prefix = \"ours\"\n",
            "[run]\nstate_dir = \"/srv/fa\"\n",
        ] {
            assert!(parse(text).is_err(), "{text}");
            assert_eq!(
                parse_leaving_out(text).unwrap_err(),
                parse(text).unwrap_err()
            );
        }
    }

    /// A key left out is found by the name it was meant to have: misspelled, in another
    /// table, or refused as written.
    #[test]
    fn a_key_left_out_is_found_by_the_name_it_was_meant_to_have() {
        for text in [
            "[vast]\nstop_mode = \"Stop\"\n",
            "[vast]\nstopmode = \"stop\"\n",
            "[policy]\nstop_mode = \"stop\"\n",
        ] {
            let (config, left_out) = parse_leaving_out(text).unwrap();
            let loaded = LoadedConfig {
                config,
                path: PathBuf::from("/etc/fleetagent/config.toml"),
                file_found: true,
                left_out,
            };
            assert!(loaded.left_out_like("stop_mode"), "{text}");
            assert!(!loaded.left_out_like("label_prefix"), "{text}");
        }
        // A table left out whole under a misspelled header: its stop_mode is unknown; one
        // written `destroy`, or none written, is the default said.
        let dir = tempfile::tempdir().unwrap();
        for (text, unknown) in [
            ("[vats]\nstop_mode = \"stop\"\n", true),
            ("[vats]\nstop_mode = \"destroy\" # the default\n", false),
            ("[vats]\ntimeout_secs = 30\n", false),
        ] {
            let path = dir.path().join("config.toml");
            std::fs::write(&path, text).unwrap();
            let (loaded, _) = load_for_brake(&path, ConfigOrigin::Explicit).unwrap();
            assert!(!loaded.left_out.is_empty(), "{text}");
            assert_eq!(loaded.stop_mode_unknown(), unknown, "{text}");
        }
    }

    /// A line TOML cannot read is left out of the hand-brake's config like a refused key,
    /// named with its line; never a header, a line without `=`, nor a key that decides whose.
    #[test]
    fn the_brake_leaves_out_a_line_toml_cannot_read() {
        let text = "state_dir = \"/srv/fa\"\n[llm]\nmodel = \"a\" \"b\"\n\
                    [vast]\nlabel_prefix = \"ours\"\ntimeout_secs = 5 5\n";
        assert!(parse(text).unwrap_err().starts_with("line 3 (llm.model): "));
        let (config, left_out) = parse_leaving_out(text).unwrap();
        assert_eq!(config.state_dir.as_deref(), Some(Path::new("/srv/fa")));
        assert_eq!(config.vast.label_prefix, "ours");
        assert_eq!(config.llm.model, Config::default().llm.model);
        assert_eq!(left_out.len(), 2, "{left_out:?}");
        assert!(
            left_out[0].starts_with("line 3 (llm.model): "),
            "{left_out:?}"
        );
        assert!(
            left_out[1].starts_with("line 6 (vast.timeout_secs): "),
            "{left_out:?}"
        );
        // A syntax error and a refused key together: both named, lines as in the file.
        let (_, left_out) =
            parse_leaving_out("[llm]\nmodel = = 1\n[policy]\nmax_instance = 3\n").unwrap();
        assert_eq!(left_out.len(), 2, "{left_out:?}");
        assert!(
            left_out[1].starts_with("line 4 (policy.max_instance): "),
            "{left_out:?}"
        );
        // A default spelled out is kept: the brake refused every recovery of such a config.
        let (config, left_out) = parse_leaving_out(
            "[vast]\nlabel_prefix = \"fleetagent\" # ours\ndisk_gb = 50 GB\n[ha]\nenabled = false\n",
        )
        .unwrap();
        assert_eq!(left_out.len(), 1, "{left_out:?}");
        assert_eq!(config.vast.label_prefix, "fleetagent");
        // An inline table's broken line blanked, the prefix it sets on another line kept.
        let (config, _) = parse_leaving_out(
            "vast = { label_prefix = \"ours\",\n image = \"x\" x,\n disk_gb = 5 }\n",
        )
        .unwrap();
        assert_eq!(config.vast.label_prefix, "ours");
        // A comment naming a key that decides whose does not keep the recovery off.
        let (config, left_out) =
            parse_leaving_out("[vast]\ndisk_gb = 50 GB\n[ha]\n# host_id = \"mgmt-1\"\n").unwrap();
        assert_eq!(left_out.len(), 1, "{left_out:?}");
        assert_eq!(config.vast.disk_gb, Config::default().vast.disk_gb);
        for text in [
            "[vast]\nonstart = '''\nMODE=fast''' x\nlabel_prefix = \"ours\"\n[demand]\ncommand = '''\nFOO=1 cat'''\n",
            "[vast]\nonstart = \"\"\"\n[ -d /data ] || mkdir /data\n\"\"\"\nlabel_prefix = \"ours\n",
            "[\"vast\"]\nlabel_prefix = \"ours\n",
            "vast = { label_prefix = \"ours\", image = \"x\" x }\n",
            "[ \"ha\" ]\nenabled = true true\n",
            "[vast]\nlabel_prefix = \"ours\" x\n",
            "[vast]\nlabel_prefix \"ours\"\n",
            "[ha]\nenabled = true true\n",
            "state_dir = \"/srv/fa\" 2\n",
            "[vast\nimage = \"x\"\n",
            // An inline table over lines (TOML 1.1): its broken line blanked, it swallows
            // label_prefix and makes an unknown key, left out on the refused-keys path.
            "[vast]\nextra = { a = 1,\n  b = 2 } oops\nlabel_prefix = \"ours\"\n}\n",
            "extra = { a = 1,\n  b = 2 } oops\nstate_dir = \"/srv/fa\"\n}\n",
            // The default written, and another value in a line swallowed by a string.
            "[vast]\nonstart = '''\nlabel_prefix = \"fleetagent\"''' x\nlabel_prefix = \"ours\"\n",
        ] {
            assert_eq!(
                parse_leaving_out(text).unwrap_err(),
                parse(text).unwrap_err(),
                "{text}"
            );
        }
    }
}
