//! The commands doctor's fixes name, scoped to the install doctor read: a bare `fleetagent
//! init` or `fleetagent units install` works on the default config and state dir (and, for
//! `units install`, the system manager), not on this install's (a walkthrough followed each
//! literally: the one initialised /etc/fleetagent, the other wrote system units for it).

use std::path::Path;

use serde_json::Value;

/// A path as one shell word, quoted where it must be (a space, a quote: a re-test pasted a
/// fix whose unquoted `o'brien` swallowed `--state-dir`, and `init` ran on the default dir).
pub(super) fn word(p: &Path) -> String {
    let text = p.display().to_string();
    match shlex::try_quote(&text) {
        Ok(q) => q.into_owned(),
        // A NUL cannot be in a path; shown as it is.
        Err(_) => text,
    }
}

/// A path made absolute (as given where it cannot be).
fn absolute(p: &Path) -> std::path::PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

/// `fleetagent [--config C] --state-dir D`, both absolute: reaches this doctor's install
/// from any directory and whatever `$FLEETAGENT_CONFIG` says.
pub(super) fn fleetagent(config: Option<&Path>, state_dir: &Path) -> String {
    let config = config.map_or(String::new(), |c| {
        format!(" --config {}", word(&absolute(c)))
    });
    format!(
        "fleetagent{config} --state-dir {}",
        word(&absolute(state_dir))
    )
}

/// A fix's `fleetagent sim --llm` with the config doctor read: `sim` reads only an explicit
/// `--config` (never `$FLEETAGENT_CONFIG` or the default path), and `--llm` exits 2 without
/// one (a walkthrough ran the advice as printed); on the 6-hour incident scenario (a pass
/// every 5 minutes and each trigger), not the default week (a re-test's ran 1,284 model
/// calls, 3.6M prompt tokens).
pub(super) fn sim_with_config(fix: &str, config: &Path) -> String {
    let config = absolute(config);
    fix.replace(
        "`fleetagent sim --llm`",
        &format!(
            "`fleetagent --config {} sim --llm --scenario incident`",
            word(&config)
        ),
    )
}

/// `fleetagent [--config C] --state-dir D units install [--user]`: `--user` when the
/// installed service answers from a user manager (`units::unit_states_json()`), or when no
/// manager answered and this user is not root (who alone may write system units).
pub(super) fn units_install(
    units: Option<&Value>,
    config: Option<&Path>,
    state_dir: &Path,
) -> String {
    let service = units.and_then(|u| u.get(crate::units::SERVICE));
    let user = match service {
        Some(s) => s.get("manager").and_then(Value::as_str) == Some("user"),
        None => units.is_none() && !nix::unistd::geteuid().is_root(),
    };
    format!(
        "{} units install{}",
        fleetagent(config, state_dir),
        if user { " --user" } else { "" }
    )
}

/// The state dir the installed service runs where it is not `state_dir` (`units::
/// unit_states_json()`), with the command that looks at that install (`fleetagent [--config
/// C] --state-dir D doctor`, as the service runs it).
pub(super) fn units_elsewhere<'a>(
    units: Option<&'a Value>,
    state_dir: &Path,
) -> Option<(&'a str, String)> {
    let service = units?.get(crate::units::SERVICE)?;
    let field = |name: &str| service.get(name).and_then(Value::as_str);
    let theirs =
        field("state_dir").filter(|d| !crate::paths::same_path(Path::new(d), state_dir))?;
    let doctor = fleetagent(field("config").map(Path::new), Path::new(theirs));
    Some((theirs, format!("{doctor} doctor")))
}
