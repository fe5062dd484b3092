//! The systemd units (templates in `units/`, rendered for one install) and the units' live
//! states as a systemd manager reports them. Never starts, stops or enables a unit.
//!
//! The repo files carry concrete defaults (`/usr/local/bin/fleetagent`,
//! `/etc/fleetagent/config.toml`, `/var/lib/fleetagent`); [`render`] replaces them with the
//! paths of one install and, for a user manager, drops what a user manager cannot do.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Serialize;

/// The concrete defaults the repo's unit files are written with.
pub const DEFAULT_BIN: &str = "/usr/local/bin/fleetagent";
pub const DEFAULT_CONFIG: &str = "/etc/fleetagent/config.toml";
pub const DEFAULT_STATE_DIR: &str = "/var/lib/fleetagent";

/// Where `units install` writes for the system manager.
pub const SYSTEM_UNIT_DIR: &str = "/etc/systemd/system";

/// The time a run may take after its own deadline before systemd stops it.
pub const TIMEOUT_MARGIN_SECS: u64 = 60;

/// The unit files, in the order they are written and reported.
pub const TEMPLATES: [(&str, &str); 5] = [
    (
        "fleetagent.service",
        include_str!("../units/fleetagent.service"),
    ),
    (
        "fleetagent.timer",
        include_str!("../units/fleetagent.timer"),
    ),
    ("fleetagent.path", include_str!("../units/fleetagent.path")),
    (
        "fleetagent-poll.service",
        include_str!("../units/fleetagent-poll.service"),
    ),
    (
        "fleetagent-poll.timer",
        include_str!("../units/fleetagent-poll.timer"),
    ),
];

pub const SERVICE: &str = "fleetagent.service";
pub const PATH_UNIT: &str = "fleetagent.path";
pub const TIMER: &str = "fleetagent.timer";
pub const POLL_SERVICE: &str = "fleetagent-poll.service";
pub const POLL_TIMER: &str = "fleetagent-poll.timer";

/// The units `units install` tells the operator to enable.
pub const ENABLE: [&str; 3] = [TIMER, PATH_UNIT, POLL_TIMER];

/// The credentials every service loads (file names under `$CREDENTIALS_DIRECTORY`).
pub const CREDENTIALS: [&str; 5] = [
    "vast_api_key",
    "llm_api_key",
    "harmonydb_url",
    "vast_image_login",
    "ha_db_url",
];

/// The name a credential is looked up under in the credential store (`/etc/credstore/`, ...).
pub use crate::secrets::credstore_name;

/// Which systemd manager: PID 1 or a per-user one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    System,
    User,
}

impl Scope {
    /// `systemctl` plus `--user` when needed, for the commands we print.
    pub fn systemctl(self) -> &'static str {
        match self {
            Scope::System => "systemctl",
            Scope::User => "systemctl --user",
        }
    }
}

/// Everything one rendering depends on.
#[derive(Debug, Clone)]
pub struct UnitParams {
    pub scope: Scope,
    pub bin: PathBuf,
    pub config: PathBuf,
    pub state_dir: PathBuf,
    pub deadline_secs: u64,
    /// More paths the services write (e.g. the metrics textfile's directory).
    pub extra_write_paths: Vec<PathBuf>,
    /// More credentials to load (named by `{ credential = "..." }` in the config).
    pub extra_credentials: Vec<String>,
}

/// The five unit files for one install: (file name, text).
pub fn render(
    scope: Scope,
    bin: &Path,
    config: &Path,
    state_dir: &Path,
    deadline_secs: u64,
) -> Vec<(String, String)> {
    render_with(&UnitParams {
        scope,
        bin: bin.to_path_buf(),
        config: config.to_path_buf(),
        state_dir: state_dir.to_path_buf(),
        deadline_secs,
        extra_write_paths: Vec::new(),
        extra_credentials: Vec::new(),
    })
}

/// [`render`] with every knob.
pub fn render_with(p: &UnitParams) -> Vec<(String, String)> {
    TEMPLATES
        .iter()
        .map(|(name, text)| (name.to_string(), render_one(name, text, p)))
        .collect()
}

/// `StateDirectory=` takes a name under /var/lib (system manager only): the name when the
/// state dir is exactly `/var/lib/<name>`, else None (the dir goes to `ReadWritePaths=`).
pub fn state_directory_name(p: &UnitParams) -> Option<String> {
    if p.scope != Scope::System {
        return None;
    }
    let rest = p.state_dir.strip_prefix("/var/lib").ok()?;
    let name = rest.to_str()?;
    (!name.is_empty() && !name.contains('/')).then(|| name.to_string())
}

fn is_under(path: &Path, roots: &[&str]) -> bool {
    roots.iter().any(|r| path.starts_with(r))
}

/// The paths the services must see, for choosing ProtectHome=/PrivateTmp=.
fn needed_paths(p: &UnitParams) -> Vec<&Path> {
    let mut v = vec![p.bin.as_path(), p.config.as_path(), p.state_dir.as_path()];
    v.extend(p.extra_write_paths.iter().map(PathBuf::as_path));
    v
}

/// How the repo's service units begin the comment that gives their exposure rating (about
/// 1.1, for the system install with the default paths).
const RATED_LINE: &str = "# Hardening: `systemd-analyze security --offline=true` rates";

/// That comment in a rendering that leaves directives out, whose rating is higher.
const LOOSENED_RATING: &str = "\
# Hardening: the repo's set (about 1.1 by `systemd-analyze security --offline=true`) less what
# this install cannot have: a user manager takes no User=/Group=, a path under a home dir needs
# ProtectHome=read-only, one under /tmp no PrivateTmp= (said below where it applies). Measured
# 1.6-1.7 for a user manager's units; rate this file with that command.
";

fn render_one(name: &str, template: &str, p: &UnitParams) -> String {
    let state_directory = state_directory_name(p);
    let needed = needed_paths(p);
    let home = needed
        .iter()
        .copied()
        .find(|x| is_under(x, &["/home", "/root", "/run/user"]));
    let tmp = needed
        .iter()
        .copied()
        .find(|x| is_under(x, &["/tmp", "/var/tmp"]));

    let mut out = String::new();
    out.push_str(&format!(
        "# Written by `fleetagent units install{}`; edit the repo's units/{name} or re-run it.\n",
        if p.scope == Scope::User {
            " --user"
        } else {
            ""
        }
    ));
    let lines: Vec<&str> = template.lines().collect();
    let loosened = p.scope == Scope::User || home.is_some() || tmp.is_some();
    for (i, line) in lines.iter().enumerate() {
        if loosened && line.starts_with(RATED_LINE) {
            out.push_str(LOOSENED_RATING);
            continue;
        }
        let key = directive(line);
        match key {
            Some("User" | "Group" | "SupplementaryGroups") if p.scope == Scope::User => continue,
            // A user manager cannot order against the system's network-online.target.
            Some("Wants" | "After")
                if p.scope == Scope::User && line.contains("network-online.target") =>
            {
                continue
            }
            Some("StateDirectory" | "StateDirectoryMode") if state_directory.is_none() => continue,
            Some("StateDirectory") => {
                out.push_str(&format!(
                    "StateDirectory={}\n",
                    state_directory.as_deref().unwrap_or_default()
                ));
                continue;
            }
            Some("TimeoutStartSec") if name == SERVICE => {
                out.push_str(&format!(
                    "TimeoutStartSec={}\n",
                    p.deadline_secs.saturating_add(TIMEOUT_MARGIN_SECS)
                ));
                continue;
            }
            Some("ProtectHome") => {
                if let Some(h) = home {
                    out.push_str(&format!(
                        "# read-only, not yes: {} is under a home directory\nProtectHome=read-only\n",
                        escape_path(h)
                    ));
                    continue;
                }
            }
            Some("PrivateTmp") => {
                if let Some(t) = tmp {
                    out.push_str(&format!(
                        "# No PrivateTmp=: {} is under /tmp or /var/tmp\n",
                        escape_path(t)
                    ));
                    continue;
                }
            }
            _ => {}
        }
        out.push_str(&substitute(line, p));
        out.push('\n');
        match key {
            Some("UMask") => {
                if state_directory.is_none() {
                    out.push_str(&format!("ReadWritePaths={}\n", escape_path(&p.state_dir)));
                }
                if !p.extra_write_paths.is_empty() {
                    // systemd fails the start (226/NAMESPACE) when a ReadWritePaths= dir is
                    // missing, unless it has the "-" prefix: `units install` creates these,
                    // and should one go later, the run goes on without it (logged).
                    out.push_str("# \"-\": a missing dir does not fail the run (the metrics write is logged)\n");
                }
                for w in &p.extra_write_paths {
                    out.push_str(&format!("ReadWritePaths=-{}\n", escape_path(w)));
                }
            }
            Some("LoadCredential") if directive(lines.get(i + 1).unwrap_or(&"")) != key => {
                for id in &p.extra_credentials {
                    out.push_str(&format!("LoadCredential={id}:{}\n", credstore_name(id)));
                }
            }
            _ => {}
        }
    }
    out
}

/// `Key` of a `Key=value` line; None for comments, sections and blank lines.
fn directive(line: &str) -> Option<&str> {
    let t = line.trim_start();
    if t.is_empty() || t.starts_with('#') || t.starts_with(';') || t.starts_with('[') {
        return None;
    }
    t.split_once('=').map(|(k, _)| k.trim())
}

/// Replace the template's default paths with this install's (comments included).
fn substitute(line: &str, p: &UnitParams) -> String {
    let exec = directive(line).is_some_and(|k| k.starts_with("Exec"));
    let path = |x: &Path| {
        if exec {
            escape_exec_path(x)
        } else {
            escape_path(x)
        }
    };
    line.replace(
        "deadline_secs; 600 s here",
        &format!("deadline_secs; {} s here", p.deadline_secs),
    )
    .replace(DEFAULT_BIN, &path(&p.bin))
    .replace(DEFAULT_CONFIG, &path(&p.config))
    .replace(DEFAULT_STATE_DIR, &path(&p.state_dir))
}

/// The word after `flag` in an `ExecStart` as `systemctl show` gives it
/// (`{ path=... ; argv[]=BIN --config C --state-dir D run ; ... }`, specifiers resolved).
fn exec_show_arg(exec: &str, flag: &str) -> Option<String> {
    arg_after(exec_show_part(exec, "argv[]=")?, flag).map(String::from)
}

/// One `key=value` part of an `ExecStart` as `systemctl show` gives it (`{ path=... ;
/// argv[]=... ; ... }`): `path=` the binary, `argv[]=` the command line.
fn exec_show_part<'a>(exec: &'a str, key: &str) -> Option<&'a str> {
    exec.split(key).nth(1)?.split(" ;").next()
}

/// The word after `--state-dir` in a command line.
fn state_dir_arg(command: &str) -> Option<&str> {
    arg_after(command, "--state-dir")
}

fn arg_after<'a>(command: &'a str, flag: &str) -> Option<&'a str> {
    let mut words = command.split_whitespace();
    words.find(|w| *w == flag)?;
    words.next()
}

/// A time span as `systemctl show` prints it (`2min 30s`, `1h`, `500ms`, `1min 30.500000s`),
/// in whole seconds, rounded down; None for `infinity` or anything else.
pub fn time_span_secs(text: &str) -> Option<u64> {
    let mut total_us: u128 = 0;
    for word in text.split_whitespace() {
        let split = word.find(|c: char| !c.is_ascii_digit() && c != '.')?;
        let (n, unit) = word.split_at(split);
        let (whole, frac) = n.split_once('.').unwrap_or((n, ""));
        let whole: u128 = whole.parse().ok()?;
        // The fraction in millionths of the unit (systemd prints at most 6 digits).
        let digits: String = frac.chars().chain(std::iter::repeat('0')).take(6).collect();
        let frac: u128 = if frac.is_empty() {
            0
        } else {
            digits.parse().ok()?
        };
        let us: u128 = match unit {
            "us" | "usec" => 1,
            "ms" | "msec" => 1_000,
            "s" | "sec" => 1_000_000,
            "min" | "m" => 60_000_000,
            "h" | "hr" => 3_600_000_000,
            "d" => 86_400_000_000,
            "w" => 604_800_000_000,
            _ => return None,
        };
        let part = whole
            .checked_mul(us)?
            .checked_add(frac.checked_mul(us)? / 1_000_000)?;
        total_us = total_us.checked_add(part)?;
    }
    (total_us > 0).then(|| u64::try_from(total_us / 1_000_000).unwrap_or(u64::MAX))
}

/// The `--state-dir` a rendered service unit's `ExecStart=` names (unescaped), if any.
pub fn exec_state_dir(unit: &str) -> Option<PathBuf> {
    let exec = unit
        .lines()
        .find_map(|l| l.trim().strip_prefix("ExecStart="))?;
    let dir = state_dir_arg(exec)?.replace("$$", "$").replace("%%", "%");
    Some(PathBuf::from(dir))
}

/// A path in a unit file: `%` starts a specifier, so it is doubled. Paths with whitespace,
/// quotes or backslashes are refused before rendering (see [`check_path`]).
fn escape_path(p: &Path) -> String {
    p.to_string_lossy().replace('%', "%%")
}

/// A path in `Exec*=`: also `$` (variable expansion) is doubled.
fn escape_exec_path(p: &Path) -> String {
    escape_path(p).replace('$', "$$")
}

/// Can this path be written into a unit file as is? It must be absolute UTF-8 without
/// whitespace, quotes, backslashes or control characters (systemd would split or unquote it).
pub fn check_path(what: &str, p: &Path) -> Result<(), String> {
    let Some(s) = p.to_str() else {
        return Err(format!("{what} {} is not UTF-8", p.display()));
    };
    if !p.is_absolute() {
        return Err(format!("{what} {s} is not an absolute path"));
    }
    if let Some(c) = s
        .chars()
        .find(|c| c.is_whitespace() || c.is_control() || matches!(c, '"' | '\'' | '\\'))
    {
        return Err(format!(
            "{what} {s:?} contains {c:?}, which a unit file cannot hold unquoted; choose another path"
        ));
    }
    Ok(())
}

// --- live states --------------------------------------------------------------------------

/// What is wrong with a unit, as systemd reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Problem {
    /// Failed for another reason (a run that exited non-zero, a timeout, a signal).
    Failed,
    /// The service was started too often (start limit).
    StartLimitHit,
    /// The path unit fired too often (TriggerLimitIntervalSec=/TriggerLimitBurst=).
    TriggerLimitHit,
    /// The path or timer gave up because the service hit its start limit.
    UnitStartLimitHit,
    /// The doorbell or the timer is loaded but not active: nothing starts the agent.
    Inactive,
}

impl Problem {
    /// The name in `inspect --json` (`"trigger-limit-hit"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Problem::Failed => "failed",
            Problem::StartLimitHit => "start-limit-hit",
            Problem::TriggerLimitHit => "trigger-limit-hit",
            Problem::UnitStartLimitHit => "unit-start-limit-hit",
            Problem::Inactive => "inactive",
        }
    }
}

/// One unit's state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UnitState {
    pub load_state: String,
    pub active_state: String,
    pub sub_state: String,
    pub result: String,
    /// "system" or "user".
    pub manager: Scope,
    pub problem: Option<Problem>,
    /// The exact command that clears the problem.
    pub fix: Option<String>,
    /// The services' `--state-dir`, as systemd runs them (their `ExecStart`): `doctor` names
    /// units that run another state dir than its own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_dir: Option<String>,
    /// The services' `--config`, as systemd runs them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config: Option<String>,
    /// The binary the services' `ExecStart` runs (its `path=`): `doctor` names one that is
    /// gone (every start fails, and the path unit hits its trigger limit again).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exec_path: Option<String>,
    /// `User=` the service runs as (None: unset, the manager's user): `doctor` checks the
    /// binary is executable by it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// `TimeoutStartSec=` in seconds as systemd holds it, rounded down (None: infinity, or
    /// not read).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_start_secs: Option<u64>,
    /// The unit's drop-in files (systemd's `DropInPaths`), space-separated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drop_ins: Option<String>,
}

/// The five units' states in one manager, keyed by unit name (serialized as that map).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UnitStates {
    #[serde(skip)]
    pub scope: Scope,
    #[serde(flatten)]
    pub units: BTreeMap<String, UnitState>,
}

impl UnitStates {
    /// One line per problem: `fleetagent.path failed (trigger-limit-hit): run ...`.
    pub fn problems(&self) -> Vec<String> {
        self.units
            .iter()
            .filter_map(|(name, u)| {
                Some(format!(
                    "{name} {} (result {}): run `{}`",
                    u.problem?.as_str(),
                    u.result,
                    u.fix.as_deref().unwrap_or("")
                ))
            })
            .collect()
    }

    /// Whether any of our units is loaded in this manager.
    pub fn any_loaded(&self) -> bool {
        self.units.values().any(|u| u.load_state == "loaded")
    }
}

/// The units' states from the system manager when they are loaded there, else from the
/// user manager (`systemctl --user`); None when no manager answers. One `systemctl show`
/// call per manager asked.
pub fn unit_states() -> Option<UnitStates> {
    unit_states_with_env(&[])
}

/// [`unit_states`] as JSON, for `inspect --json` and `doctor` (null when no manager answers).
pub fn unit_states_json() -> Option<serde_json::Value> {
    unit_states().and_then(|s| serde_json::to_value(s).ok())
}

/// [`unit_states`] with more environment for `systemctl` (e.g. another `XDG_RUNTIME_DIR`).
pub fn unit_states_with_env(env: &[(String, String)]) -> Option<UnitStates> {
    let system = if Path::new("/run/systemd/system").exists() {
        show(Scope::System, env)
    } else {
        None
    };
    if let Some(s) = &system {
        if s.any_loaded() {
            return system;
        }
    }
    match show(Scope::User, env) {
        Some(u) if u.any_loaded() || system.is_none() => Some(u),
        _ => system,
    }
}

fn show(scope: Scope, env: &[(String, String)]) -> Option<UnitStates> {
    let mut cmd = Command::new("systemctl");
    if scope == Scope::User {
        cmd.arg("--user");
    }
    cmd.args([
        "show",
        "--no-pager",
        "-p",
        "Id,LoadState,ActiveState,SubState,Result,ExecStart,TimeoutStartUSec,DropInPaths,User",
    ]);
    cmd.args(TEMPLATES.iter().map(|(n, _)| *n));
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    let out = cmd.stderr(std::process::Stdio::null()).output().ok()?;
    if !out.status.success() {
        return None;
    }
    parse_show(&String::from_utf8_lossy(&out.stdout), scope)
}

/// Parse `systemctl show -p Id,LoadState,ActiveState,SubState,Result UNIT...` output (one
/// block of `Key=value` lines per unit, blocks separated by a blank line) and work out each
/// unit's problem and the command that clears it. None when a unit is missing.
pub fn parse_show(text: &str, scope: Scope) -> Option<UnitStates> {
    let mut blocks: BTreeMap<String, BTreeMap<&str, &str>> = BTreeMap::new();
    for block in text.split("\n\n") {
        let props: BTreeMap<&str, &str> = block.lines().filter_map(|l| l.split_once('=')).collect();
        if let Some(id) = props.get("Id") {
            blocks.insert(id.to_string(), props);
        }
    }
    let mut units = BTreeMap::new();
    for (name, _) in TEMPLATES {
        let props = blocks.get(name)?;
        let get = |k: &str| props.get(k).copied().unwrap_or("").to_string();
        let (load_state, active_state, result) =
            (get("LoadState"), get("ActiveState"), get("Result"));
        let problem = if active_state == "failed" {
            Some(match result.as_str() {
                "start-limit-hit" => Problem::StartLimitHit,
                "trigger-limit-hit" => Problem::TriggerLimitHit,
                "unit-start-limit-hit" => Problem::UnitStartLimitHit,
                _ => Problem::Failed,
            })
        } else if load_state == "loaded"
            && active_state == "inactive"
            && (name == PATH_UNIT || name == TIMER || name == POLL_TIMER)
        {
            Some(Problem::Inactive)
        } else {
            None
        };
        units.insert(
            name.to_string(),
            UnitState {
                load_state,
                active_state,
                sub_state: get("SubState"),
                result,
                manager: scope,
                problem,
                fix: None,
                state_dir: props
                    .get("ExecStart")
                    .and_then(|e| exec_show_arg(e, "--state-dir")),
                config: props
                    .get("ExecStart")
                    .and_then(|e| exec_show_arg(e, "--config")),
                exec_path: props
                    .get("ExecStart")
                    .and_then(|e| exec_show_part(e, "path="))
                    .map(str::trim)
                    .filter(|p| !p.is_empty())
                    .map(String::from),
                user: props
                    .get("User")
                    .map(|u| u.trim())
                    .filter(|u| !u.is_empty())
                    .map(String::from),
                timeout_start_secs: props
                    .get("TimeoutStartUSec")
                    .and_then(|t| time_span_secs(t)),
                drop_ins: props
                    .get("DropInPaths")
                    .map(|d| d.trim())
                    .filter(|d| !d.is_empty())
                    .map(String::from),
            },
        );
    }
    let fix = fix_command(&units, scope);
    for u in units.values_mut() {
        if u.problem.is_some() {
            u.fix = fix.clone();
        }
    }
    Some(UnitStates { scope, units })
}

/// One command for every problem at once: `reset-failed` the failed units (the service
/// first), then start the doorbell and timers that are down.
fn fix_command(units: &BTreeMap<String, UnitState>, scope: Scope) -> Option<String> {
    let order = [SERVICE, PATH_UNIT, TIMER, POLL_SERVICE, POLL_TIMER];
    let with = |p: &dyn Fn(&UnitState) -> bool| -> Vec<&str> {
        order
            .iter()
            .copied()
            .filter(|n| units.get(*n).is_some_and(p))
            .collect()
    };
    let failed = with(&|u| u.active_state == "failed");
    let start = with(&|u| u.problem.is_some() && !u.load_state.is_empty())
        .into_iter()
        .filter(|n| !n.ends_with(".service"))
        .collect::<Vec<_>>();
    let sc = scope.systemctl();
    let mut parts = Vec::new();
    if !failed.is_empty() {
        parts.push(format!("{sc} reset-failed {}", failed.join(" ")));
    }
    if !start.is_empty() {
        parts.push(format!("{sc} start {}", start.join(" ")));
    }
    (!parts.is_empty()).then(|| parts.join(" && "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults(scope: Scope) -> Vec<(String, String)> {
        render(
            scope,
            Path::new(DEFAULT_BIN),
            Path::new(DEFAULT_CONFIG),
            Path::new(DEFAULT_STATE_DIR),
            600,
        )
    }

    fn file<'a>(files: &'a [(String, String)], name: &str) -> &'a str {
        &files.iter().find(|(n, _)| n == name).unwrap().1
    }

    /// The repo files are exactly the system rendering of the defaults (plus the header).
    #[test]
    fn system_defaults_render_the_repo_files() {
        let files = defaults(Scope::System);
        assert_eq!(files.len(), 5);
        for ((name, text), (tname, template)) in files.iter().zip(TEMPLATES) {
            assert_eq!(name, tname);
            let body = text.split_once('\n').unwrap().1;
            assert_eq!(body, template, "{name}");
        }
    }

    #[test]
    fn user_scope_drops_what_a_user_manager_cannot_do() {
        let files = render(
            Scope::User,
            Path::new("/home/op/.cargo/bin/fleetagent"),
            Path::new("/home/op/.config/fleetagent/config.toml"),
            Path::new("/home/op/.local/state/fleetagent"),
            120,
        );
        let svc = file(&files, SERVICE);
        for gone in [
            "\nUser=",
            "\nGroup=",
            "\nStateDirectory",
            "network-online",
            "ProtectHome=yes",
        ] {
            assert!(!svc.contains(gone), "{gone} left in:\n{svc}");
        }
        assert!(svc.contains(
            "ExecStart=/home/op/.cargo/bin/fleetagent --config /home/op/.config/fleetagent/config.toml --state-dir /home/op/.local/state/fleetagent run\n"
        ));
        assert!(svc.contains("\nReadWritePaths=/home/op/.local/state/fleetagent\n"));
        assert!(svc.contains("\nProtectHome=read-only\n"));
        assert!(svc.contains("\nTimeoutStartSec=180\n"));
        assert!(
            svc.contains("deadline_secs; 120 s here) plus 60 s"),
            "{svc}"
        );
        assert!(svc.contains("\nPrivateTmp=yes\n"));
        assert!(svc.contains(LOOSENED_RATING) && !svc.contains("rates this unit about 1.1"));
        let path = file(&files, PATH_UNIT);
        assert!(path.contains("\nPathExists=/home/op/.local/state/fleetagent/trigger\n"));
        let poll = file(&files, POLL_SERVICE);
        assert!(poll.contains(" poll\n") && poll.contains("\nTimeoutStartSec=120\n"));
    }

    #[test]
    fn system_scope_with_another_state_dir_and_tmp_paths() {
        let files = render_with(&UnitParams {
            scope: Scope::System,
            bin: "/opt/fa/bin/fleetagent".into(),
            config: "/tmp/x/config.toml".into(),
            state_dir: "/srv/fleet%agent".into(),
            deadline_secs: 600,
            extra_write_paths: vec!["/var/lib/prometheus/node-exporter".into()],
            extra_credentials: vec!["curio_db_password".into()],
        });
        let svc = file(&files, SERVICE);
        assert!(!svc.contains("StateDirectory"));
        assert!(svc.contains("\nUser=fleetagent\n"));
        assert!(svc.contains("--state-dir /srv/fleet%%agent run"));
        assert_eq!(exec_state_dir(svc), Some(PathBuf::from("/srv/fleet%agent")));
        assert_eq!(exec_state_dir("ExecStart=/bin/fleetagent run\n"), None);
        assert!(svc.contains(
            "\nReadWritePaths=/srv/fleet%%agent\n# \"-\": a missing dir does not fail the run (the metrics write is logged)\nReadWritePaths=-/var/lib/prometheus/node-exporter\n"
        ));
        assert!(!svc.contains("PrivateTmp=yes"));
        assert!(svc.contains(
            "LoadCredential=ha_db_url:fleetagent.ha_db_url\nLoadCredential=curio_db_password:fleetagent.curio_db_password\n"
        ));
        // Both services reach the shared database of [ha] (`poll` renews the lease).
        for unit in [SERVICE, POLL_SERVICE] {
            assert!(
                file(&files, unit).contains("\nLoadCredential=ha_db_url:fleetagent.ha_db_url\n"),
                "{unit}"
            );
        }
        assert!(file(&files, PATH_UNIT).contains("PathExists=/srv/fleet%%agent/trigger\n"));
    }

    #[test]
    fn exec_paths_escape_dollar() {
        assert_eq!(escape_exec_path(Path::new("/a$b%c")), "/a$$b%%c");
        assert!(check_path("binary", Path::new("/a b")).is_err());
        assert!(check_path("binary", Path::new("rel/x")).is_err());
        assert!(check_path("binary", Path::new("/usr/bin/fleetagent")).is_ok());
    }

    fn show_text(states: &[(&str, &str, &str, &str)]) -> String {
        states
            .iter()
            .map(|(id, active, sub, result)| {
                format!(
                    "Id={id}\nLoadState=loaded\nActiveState={active}\nSubState={sub}\nResult={result}\n"
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn healthy_units_have_no_problem() {
        let text = show_text(&[
            (SERVICE, "inactive", "dead", "success"),
            (TIMER, "active", "waiting", "success"),
            (PATH_UNIT, "active", "waiting", "success"),
            (POLL_SERVICE, "inactive", "dead", "success"),
            (POLL_TIMER, "active", "waiting", "success"),
        ]);
        let s = parse_show(&text, Scope::System).unwrap();
        assert!(s.problems().is_empty(), "{:?}", s.problems());
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json[PATH_UNIT]["active_state"], "active");
        assert_eq!(json[PATH_UNIT]["sub_state"], "waiting");
        assert_eq!(json[PATH_UNIT]["problem"], serde_json::Value::Null);
        assert_eq!(json.as_object().unwrap().len(), 5);
        assert!(
            json[SERVICE].get("state_dir").is_none(),
            "not said: not shown"
        );
        // The services' state dir, from `ExecStart` as `systemctl show` gives it.
        let with_exec = text.replacen(
            "Id=fleetagent.service\n",
            "Id=fleetagent.service\nExecStart={ path=/usr/local/bin/fleetagent ; argv[]=/usr/local/bin/fleetagent --config /etc/fleetagent/config.toml --state-dir /srv/fleet%agent run ; ignore_errors=no ; start_time=[n/a] ; pid=0 ; code=(null) ; status=0/0 }\n",
            1,
        );
        let s = parse_show(&with_exec, Scope::System).unwrap();
        assert_eq!(
            s.units[SERVICE].state_dir.as_deref(),
            Some("/srv/fleet%agent")
        );
        assert_eq!(
            s.units[SERVICE].exec_path.as_deref(),
            Some("/usr/local/bin/fleetagent")
        );
        assert_eq!(s.units[TIMER].state_dir, None);
    }

    #[test]
    fn start_limit_names_the_command_that_clears_it() {
        let text = show_text(&[
            (SERVICE, "failed", "failed", "start-limit-hit"),
            (TIMER, "active", "waiting", "success"),
            (PATH_UNIT, "failed", "failed", "unit-start-limit-hit"),
            (POLL_SERVICE, "inactive", "dead", "success"),
            (POLL_TIMER, "active", "waiting", "success"),
        ]);
        let s = parse_show(&text, Scope::User).unwrap();
        let fix = "systemctl --user reset-failed fleetagent.service fleetagent.path && systemctl --user start fleetagent.path";
        assert_eq!(s.units[SERVICE].problem, Some(Problem::StartLimitHit));
        assert_eq!(s.units[PATH_UNIT].problem, Some(Problem::UnitStartLimitHit));
        assert_eq!(s.units[PATH_UNIT].fix.as_deref(), Some(fix));
        assert_eq!(s.units[TIMER].fix, None);
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json[PATH_UNIT]["problem"], "unit-start-limit-hit");
        assert_eq!(json[PATH_UNIT]["fix"], fix);
        assert_eq!(s.problems().len(), 2);
        for p in [
            Problem::Failed,
            Problem::StartLimitHit,
            Problem::TriggerLimitHit,
            Problem::UnitStartLimitHit,
            Problem::Inactive,
        ] {
            assert_eq!(serde_json::to_value(p).unwrap(), p.as_str());
        }
    }

    #[test]
    fn trigger_limit_and_inactive_timer() {
        let text = show_text(&[
            (SERVICE, "inactive", "dead", "success"),
            (TIMER, "inactive", "dead", "success"),
            (PATH_UNIT, "failed", "failed", "trigger-limit-hit"),
            (POLL_SERVICE, "failed", "failed", "exit-code"),
            (POLL_TIMER, "active", "waiting", "success"),
        ]);
        let s = parse_show(&text, Scope::System).unwrap();
        assert_eq!(s.units[PATH_UNIT].problem, Some(Problem::TriggerLimitHit));
        // The poll timer stopped: change detection is off, the agent only hears the timer.
        let stopped_poll = text.replace(
            "Id=fleetagent-poll.timer\nLoadState=loaded\nActiveState=active\nSubState=waiting",
            "Id=fleetagent-poll.timer\nLoadState=loaded\nActiveState=inactive\nSubState=dead",
        );
        assert_ne!(stopped_poll, text);
        let p = parse_show(&stopped_poll, Scope::System).unwrap();
        assert_eq!(p.units[POLL_TIMER].problem, Some(Problem::Inactive));
        assert!(p.units[POLL_TIMER].fix.as_deref().is_some_and(
            |f| f.ends_with("start fleetagent.path fleetagent.timer fleetagent-poll.timer")
        ));
        assert_eq!(s.units[TIMER].problem, Some(Problem::Inactive));
        assert_eq!(s.units[POLL_SERVICE].problem, Some(Problem::Failed));
        assert_eq!(
            s.units[TIMER].fix.as_deref(),
            Some("systemctl reset-failed fleetagent.path fleetagent-poll.service && systemctl start fleetagent.path fleetagent.timer")
        );
    }

    #[test]
    fn not_installed_units_are_not_loaded() {
        let text = [SERVICE, TIMER, PATH_UNIT, POLL_SERVICE, POLL_TIMER]
            .map(|id| {
                format!("Id={id}\nLoadState=not-found\nActiveState=inactive\nSubState=dead\nResult=success\n")
            })
            .join("\n");
        let s = parse_show(&text, Scope::System).unwrap();
        assert!(!s.any_loaded());
        assert!(s.problems().is_empty());
        assert!(parse_show("Id=fleetagent.service\n", Scope::System).is_none());
    }
}
