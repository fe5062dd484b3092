//! Health checks for monitoring: every check in [`CHECKS`] by its stable name, passing or with
//! one line per problem naming what is wrong and what to do (docs/operations.md, "Health",
//! lists them). Never takes the lock, never writes (writability is checked with access(2) and
//! statvfs(3)); every query is indexed or bounded, so a database of a million rows answers as
//! fast as an empty one (`scripts/bench doctor`).

#[cfg(test)]
mod advice_tests;
mod agent;
mod exec;
mod host;
mod outside;
mod scope;
mod setup;
#[cfg(test)]
mod tests;

use std::path::Path;

use rusqlite::Connection;
use serde_json::{json, Value};

use crate::clock::Millis;
use crate::config::Config;
use crate::store::Store;

pub use host::{MIN_FREE_BYTES, MIN_FREE_INODES};

/// Every check, in the order `doctor` reports them. The names are stable: monitoring keys on
/// them (`doctor --json`), and docs/operations.md documents each.
pub const CHECKS: &[&str] = &[
    "state_dir",
    "disk",
    "database",
    "units",
    "config",
    "secrets",
    "last_success",
    "runs",
    "lock",
    "demand",
    "vast",
    "actions",
    "pause",
    "foreign_installs",
    "metrics",
    "llm",
    "floor",
    "calibration",
    "tools_in_prompt",
    "curio",
    "worker_identity",
    "price",
    "events",
    "wakes",
    "silent_destroys",
    "boot_failures",
    "search_quota",
    "ha",
];

/// One problem: what is wrong, what to do about it, and since when (when known).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub detail: String,
    pub fix: Option<String>,
    pub since: Option<Millis>,
}

impl Problem {
    pub fn new(detail: impl Into<String>) -> Problem {
        Problem {
            detail: detail.into(),
            fix: None,
            since: None,
        }
    }

    pub fn fix(mut self, fix: impl Into<String>) -> Problem {
        self.fix = Some(fix.into());
        self
    }

    pub fn since(mut self, at: Option<Millis>) -> Problem {
        self.since = at;
        self
    }

    /// The line `doctor` prints: the detail, then the fix.
    pub fn line(&self) -> String {
        match &self.fix {
            Some(fix) => format!("{}; fix: {fix}", self.detail),
            None => self.detail.clone(),
        }
    }
}

/// A read of the database that failed inside a check: a problem of that check (a damaged
/// database says so, with the recovery hint).
fn unreadable(what: &str, e: &anyhow::Error) -> Problem {
    Problem::new(format!(
        "database: cannot read {what}: {}",
        crate::error::report(e)
    ))
}

/// One named check's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub name: &'static str,
    pub problems: Vec<Problem>,
    /// Why the check could not run (the database or the state dir it reads is unusable).
    pub not_checked: Option<String>,
    /// Several hosts: this host follows, and the check is the leader's (`HOST leads (epoch
    /// N)`): it passes here, and says so.
    pub leader: Option<String>,
}

/// The checks of this host itself: on a follower only these are judged; the rest, of what the
/// passes do and see, are the leader's (its copy of them is stale, or it never led).
pub const HOST_CHECKS: &[&str] = &[
    "state_dir",
    "disk",
    "database",
    "units",
    "config",
    "secrets",
    "lock",
    "metrics",
    "ha",
];

impl Check {
    pub fn ok(&self) -> bool {
        self.problems.is_empty() && self.not_checked.is_none()
    }

    /// `{"name", "ok", "since", "detail", "fix"}`: several problems of one check join their
    /// details (and fixes) with "; ", `since` is the earliest (RFC 3339 UTC).
    pub fn json(&self) -> Value {
        let join = |parts: Vec<&str>| -> Value {
            let mut seen: Vec<&str> = Vec::new();
            for p in parts {
                if !seen.contains(&p) {
                    seen.push(p);
                }
            }
            if seen.is_empty() {
                Value::Null
            } else {
                Value::String(seen.join("; "))
            }
        };
        let detail = match (&self.not_checked, &self.leader) {
            (Some(why), _) => Value::String(format!("not checked: {why}")),
            (None, Some(leader)) => Value::String(format!(
                "the leader's to judge: this host follows ({leader}); run doctor there"
            )),
            (None, None) => join(self.problems.iter().map(|p| p.detail.as_str()).collect()),
        };
        json!({
            "name": self.name,
            "ok": self.ok(),
            "since": self.problems.iter().filter_map(|p| p.since).min().map(crate::clock::rfc3339),
            "detail": detail,
            "fix": join(self.problems.iter().filter_map(|p| p.fix.as_deref()).collect()),
        })
    }
}

/// What the checks read besides the database.
pub struct Inputs<'a> {
    pub config: &'a Config,
    /// Where the config was looked for.
    pub config_path: &'a Path,
    /// Whether a file was read there: only the default path may be missing, every key then
    /// has its default, and the `config` check says so.
    pub config_found: bool,
    pub env: &'a crate::env::Env,
    pub state_dir: &'a Path,
    pub now: Millis,
    /// `units::unit_states_json()`: None when no service manager answers.
    pub units: Option<&'a Value>,
}

/// Checks found so far, by name.
#[derive(Default)]
struct Found(Vec<(&'static str, Vec<Problem>)>);

impl Found {
    fn add(&mut self, name: &'static str, problems: Vec<Problem>) {
        debug_assert!(CHECKS.contains(&name), "{name} is not in CHECKS");
        self.0.push((name, problems));
    }

    /// More problems for a check already added (one that reads the database besides).
    fn extend(&mut self, name: &'static str, problems: Vec<Problem>) {
        match self.0.iter_mut().find(|(n, _)| *n == name) {
            Some((_, found)) => found.extend(problems),
            None => self.add(name, problems),
        }
    }
}

/// Where the installed units run another state dir than this doctor's (a plain `doctor` by
/// a user whose default is elsewhere, a `state_dir` written into the config since), a fix
/// that would `init` here points at theirs first: followed, it made a second install that no
/// unit runs, beside the first one's billing fleet (a re-test).
fn units_elsewhere(i: &Inputs<'_>, problems: Vec<Problem>) -> Vec<Problem> {
    let Some((theirs, doctor)) = scope::units_elsewhere(i.units, i.state_dir) else {
        return problems;
    };
    problems
        .into_iter()
        .map(|p| match &p.fix {
            Some(f) if f.contains(" init") => {
                let fix = format!("the installed units run state dir {theirs}: look at that install first (`{doctor}`); `init` here would make a second install that no unit runs");
                p.fix(fix)
            }
            _ => p,
        })
        .collect()
}

/// Run every check. Those that need the database report `not_checked` when it cannot be
/// read (the `database` check says why). Also the install this host speaks for, when its
/// database was read ([`speaks_for`]).
pub fn checks(i: &Inputs<'_>) -> (Vec<Check>, Option<String>) {
    let mut found = Found::default();
    let disk = host::disk(i.state_dir);
    let read_only = disk.iter().any(|p| p.detail.contains("read-only"));
    // `init` with the config doctor read: it writes a commented one there when none exists.
    let scoped = scope::fleetagent(Some(i.config_path), i.state_dir);
    found.add(
        "state_dir",
        units_elsewhere(i, host::state_dir(i.state_dir, read_only, &scoped)),
    );
    found.add("disk", disk);
    let read = i.config_found.then_some(i.config_path);
    found.add("units", host::units(i.units, i.state_dir, i.config, read));
    let missing = (!i.config_found).then_some(i.config_path);
    found.add("config", setup::config(i.config, missing));
    let mut secrets = setup::secrets(i.config, i.env);
    let (ha, follows, shared_install) = outside::ha(i.config, i.env, i.state_dir, i.now);
    let ha_on = matches!(crate::ha::node::Settings::of(i.config, i.env), Ok(Some(_)));
    let mut install = None;
    found.add("ha", ha);
    let skipped = match host::open_database(i.state_dir, i.now, &scoped) {
        Err(p) => {
            found.add("secrets", secrets.problems.clone());
            found.add("database", units_elsewhere(i, vec![p]));
            "the database cannot be read (see the database check)"
        }
        Ok(store) => match crate::store::health::edge_check(&store.conn) {
            Err(e) => {
                found.add("secrets", secrets.problems.clone());
                found.add(
                    "database",
                    vec![Problem::new(format!(
                        "database {} structure check failed: {}",
                        store.path.display(),
                        crate::error::report(&e)
                    ))
                    .fix("stop the fleetagent units and follow docs/operations.md, \"Recovering the database\" (scripts/recover-db, or the newest `fleetagent backup`)")],
                );
                "the database is damaged (see the database check)"
            }
            Ok(()) => {
                let simulation = host::simulation(&store.conn, i.state_dir);
                // What this host's passes recorded lately vouches for the service's keys;
                // not a follower's copy (its passes do not list) nor a simulation's.
                if follows.is_none() && simulation.is_empty() {
                    secrets.leave_out_used(|kind| {
                        agent::service_used(&store.conn, i.config, kind, i.now)
                    });
                }
                found.add("secrets", secrets.problems.clone());
                found.extend(
                    "ha",
                    outside::foreign_state(&store.conn, shared_install.as_deref()),
                );
                found.add("database", simulation);
                found.extend("database", host::unwritable_database(i.state_dir));
                install = speaks_for(&store.conn, ha_on, shared_install.as_deref());
                from_store(&store, i, &secrets, install.as_deref(), &mut found);
                ""
            }
        },
    };
    for (_, problems) in &mut found.0 {
        for p in problems.iter_mut() {
            p.fix = p
                .fix
                .take()
                .map(|f| scope::sim_with_config(&f, i.config_path));
        }
    }
    if installed_for_a_user(i.units) {
        for (_, problems) in &mut found.0 {
            for p in problems.iter_mut() {
                p.fix = p.fix.take().map(|f| for_the_user_manager(&f));
            }
        }
    }
    let list = CHECKS
        .iter()
        .map(|&name| {
            // A follower's copy of what the passes write is stale: those checks are the
            // leader's to pass or fail.
            if let Some(leader) = follows.as_ref().filter(|_| !HOST_CHECKS.contains(&name)) {
                return Check {
                    name,
                    problems: Vec::new(),
                    not_checked: None,
                    leader: Some(leader.clone()),
                };
            }
            match found.0.iter().position(|(n, _)| *n == name) {
                Some(at) => Check {
                    name,
                    problems: found.0.swap_remove(at).1,
                    not_checked: None,
                    leader: None,
                },
                None => Check {
                    name,
                    problems: Vec::new(),
                    not_checked: Some(skipped.to_string()),
                    leader: None,
                },
            }
        })
        .collect();
    (list, install)
}

/// The install this host speaks for: its own; with several hosts the shared state's (a
/// follower that never led holds its own `init`'s, never used: a walkthrough saw one HA
/// install named as one per host), unless this copy holds another install's state
/// (`ha::mirror::foreign_state`: it must not be named as the shared one, a re-test), and
/// None while the shared state cannot be read.
fn speaks_for(conn: &Connection, ha_on: bool, shared: Option<&str>) -> Option<String> {
    match (ha_on, shared) {
        (false, _) => crate::store::ops::install_id(conn).ok(),
        (true, Some(shared)) => crate::ha::mirror::install_shown(conn, Some(shared)).ok(),
        (true, None) => None,
    }
}

/// Whether the units answer from a user manager (`units install --user`), as
/// `units::unit_states_json()` says.
fn installed_for_a_user(units: Option<&Value>) -> bool {
    units
        .and_then(Value::as_object)
        .is_some_and(|m| m.values().any(|u| u["manager"] == "user"))
}

/// A fix's `journalctl` and `systemctl` commands as a user manager's units need them: the
/// system's journal and manager know nothing of a `--user` install. `--user-unit`, not
/// `--user -u`: a user manager of root logs to the system journal, where `--user` looks for
/// no file (a walkthrough); `--user-unit` reads every journal file the caller may read and
/// matches the caller's own user units, so it finds the lines for root's manager and, run as
/// that user, for another user's (the units' user runs doctor: a re-test).
fn for_the_user_manager(fix: &str) -> String {
    fix.replace("`journalctl -u ", "`journalctl --user-unit ")
        .replace("`systemctl list-timers ", "`systemctl --user list-timers ")
}

/// The checks that read the database.
fn from_store(
    store: &Store,
    i: &Inputs<'_>,
    secrets: &setup::Secrets,
    install: Option<&str>,
    found: &mut Found,
) {
    let conn: &Connection = &store.conn;
    let (config, now) = (i.config, i.now);
    let state = crate::store::session::state(conn);
    let lock_holder = crate::lock::holder_probed(&i.state_dir.join(crate::paths::LOCK_FILE));
    match &state {
        Ok(state) => {
            found.add("last_success", agent::last_success(state, config, now));
            found.add("llm", agent::llm(conn, state, config, now));
            found.add(
                "demand",
                outside::demand(conn, state, config, now, secrets.harmonydb_url_missing),
            );
        }
        Err(e) => {
            for name in ["last_success", "llm", "demand"] {
                found.add(name, vec![unreadable("agent_state", e)]);
            }
        }
    }
    let held = if crate::store::ops::paused(conn, now).is_ok_and(|p| p.is_some()) {
        Some("the operator's pause holds the fleet (see the pause check)")
    } else if state
        .as_ref()
        .is_ok_and(|s| s.last_demand_error().is_some())
    {
        Some("the last pass's demand probe failed: the fleet is held (see the demand check)")
    } else {
        None
    };
    found.extend("config", setup::fleet_over_caps(conn, config, held));
    found.extend("config", setup::daily_spend_reached(conn, config, now));
    found.add("runs", agent::runs(conn, lock_holder, now));
    found.add(
        "lock",
        agent::lock(i.state_dir, lock_holder.pid(), config, now),
    );
    found.add("vast", outside::vast(conn, now, secrets.vast_key_missing));
    found.extend("vast", outside::unpriced(conn, config));
    found.extend("vast", outside::undone(conn, now));
    found.add("actions", agent::actions(conn, now));
    found.add("pause", outside::pause(conn, now));
    found.extend("pause", outside::hold(conn, config, now));
    found.add(
        "foreign_installs",
        outside::foreign_installs(conn, config, now),
    );
    found.extend("foreign_installs", outside::copies(conn, config, now));
    let read = i.config_found.then_some(i.config_path);
    let units_install = scope::units_install(i.units, read, i.state_dir);
    found.add(
        "metrics",
        host::metrics(conn, config, now, install, &units_install),
    );
    found.add("floor", agent::floor(conn, now));
    found.add("calibration", agent::calibration(conn, config));
    found.add("tools_in_prompt", agent::tools_in_prompt(conn, config));
    let (curio, identity) = outside::curio_and_identity(conn, config, now);
    found.add("curio", curio);
    found.add("worker_identity", identity);
    found.add("price", outside::price(conn, config, now));
    found.add("events", agent::events(conn, now));
    found.add("wakes", agent::wakes(conn, now));
    found.add("silent_destroys", agent::silent_destroys(conn, now));
    found.add("boot_failures", agent::boot_failures(conn, now));
    found.add("search_quota", outside::search_quota(conn, now));
}

/// Every check when the config cannot be read: `config` fails with the error, the rest are
/// not checked.
pub fn config_unreadable(e: &anyhow::Error) -> Vec<Check> {
    CHECKS
        .iter()
        .map(|&name| Check {
            name,
            problems: if name == "config" {
                vec![Problem::new(crate::error::one_line(e)).fix(config_fix(e))]
            } else {
                Vec::new()
            },
            not_checked: (name != "config").then(|| "the config cannot be read".to_string()),
            leader: None,
        })
        .collect()
}

/// What fixes a config that cannot be read, by what the error says.
pub(super) fn config_fix(e: &anyhow::Error) -> &'static str {
    let text = crate::error::one_line(e);
    if text.contains("world-writable") || text.contains("which every user may write") {
        "run the chmod the line names (anyone could replace the config meanwhile)"
    } else if text.contains("cannot read config") {
        "name a readable config file with --config or $FLEETAGENT_CONFIG (`fleetagent init` writes a commented one)"
    } else {
        "correct the config file (the line and key are named)"
    }
}

/// The problems as `doctor` prints them: one line each, in check order.
pub fn lines(checks: &[Check]) -> Vec<String> {
    checks
        .iter()
        .flat_map(|c| c.problems.iter().map(Problem::line))
        .collect()
}

/// `doctor --json`: `{"ok": bool, "checks": [...]}` with every check, passing ones too.
pub fn json(checks: &[Check]) -> Value {
    json!({
        "ok": checks.iter().all(Check::ok),
        "checks": checks.iter().map(Check::json).collect::<Vec<_>>(),
    })
}

/// Facts `doctor` states that are not problems, one line each: whether the private image's
/// registry login (`vast_image_login`) is set (never its value). One that cannot be read is
/// a problem of the `secrets` check, not a note.
pub fn notes(env: &crate::env::Env) -> Vec<String> {
    use crate::secrets::{lookup, Kind};
    let login = match lookup(env, Kind::VastImageLogin) {
        Ok(Some(_)) => "set: sent as image_login on every create",
        Ok(None) => "not set (the worker image must be public)",
        Err(_) => return Vec::new(),
    };
    vec![format!("vast_image_login: {login}")]
}
