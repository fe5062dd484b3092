//! Secrets from the environment or systemd credentials, never from the config file.
//!
//! Lookup order for each: the environment variable(s), then the file of that name under
//! `$CREDENTIALS_DIRECTORY` (systemd `LoadCredential=`), or, in an operator's command, the
//! credential store's file the units load ([`credential_file`]). Values are trimmed; an empty value
//! counts as absent. Nothing here prints or logs a value. The module `redact` keeps the
//! passwords of URLs out of what is shown (the demand probes' errors) and tells the config
//! when a URL carries one.

use std::fmt;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};

use crate::env::Env;

pub(crate) mod redact;

/// A secret value whose Debug and Display never show it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// A secret from a value; trimmed, and `None` when empty.
    pub fn new(value: &str) -> Option<Secret> {
        let v = value.trim();
        (!v.is_empty()).then(|| Secret(v.to_string()))
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// One of the secrets fleetagent knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    VastApiKey,
    LlmApiKey,
    HarmonyDbUrl,
    /// The shared database of several management hosts (`[ha]`).
    HaDbUrl,
    /// The registry login of a private worker image (`-u USER -p TOKEN registry`).
    VastImageLogin,
}

impl Kind {
    pub const ALL: [Kind; 5] = [
        Kind::VastApiKey,
        Kind::LlmApiKey,
        Kind::HarmonyDbUrl,
        Kind::HaDbUrl,
        Kind::VastImageLogin,
    ];

    fn env_names(self) -> &'static [&'static str] {
        match self {
            Kind::VastApiKey => &["VAST_API_KEY"],
            Kind::LlmApiKey => &["FLEETAGENT_LLM_API_KEY", "OPENAI_API_KEY"],
            Kind::HarmonyDbUrl => &["FLEETAGENT_HARMONYDB_URL"],
            Kind::HaDbUrl => &["FLEETAGENT_HA_DB_URL"],
            Kind::VastImageLogin => &["VAST_IMAGE_LOGIN"],
        }
    }

    pub fn credential(self) -> &'static str {
        match self {
            Kind::VastApiKey => "vast_api_key",
            Kind::LlmApiKey => "llm_api_key",
            Kind::HarmonyDbUrl => "harmonydb_url",
            Kind::HaDbUrl => "ha_db_url",
            Kind::VastImageLogin => "vast_image_login",
        }
    }

    /// Its environment variable, the fallback in parentheses: `FLEETAGENT_LLM_API_KEY (or
    /// OPENAI_API_KEY)`.
    fn env_list(self) -> String {
        let names = self.env_names();
        names.join(" (or ") + if names.len() > 1 { ")" } else { "" }
    }

    /// The environment variable(s) that set it, for fixes that name the file first.
    pub fn env_hint(self) -> String {
        format!("set {} in the environment", self.env_list())
    }

    /// Where to put it, for messages.
    pub fn hint(self) -> String {
        format!(
            "set {} or the {} credential",
            self.env_list(),
            self.credential()
        )
    }
}

/// The secret, or None when no source has it.
pub fn lookup(env: &Env, kind: Kind) -> Result<Option<Secret>> {
    for name in kind.env_names() {
        if let Some(v) = env.get(name) {
            let v = v.trim();
            if !v.is_empty() {
                return Ok(Some(Secret(v.to_string())));
            }
        }
    }
    credential(env, kind.credential())
}

/// The environment variables of the secrets an operator's probe command (`demand.command`,
/// `price.fil_usd_command`) never needs: removed from its environment, so a script that logs
/// its environment, or fails with it, cannot put a key into an error fleetagent quotes. The
/// HarmonyDB URL stays: a probe of Curio's own may read it.
pub fn env_names_hidden_from_probes() -> impl Iterator<Item = &'static str> {
    Kind::ALL
        .into_iter()
        .filter(|k| *k != Kind::HarmonyDbUrl)
        .flat_map(|k| k.env_names().iter().copied())
}

/// Every secret this process could read, as text to redact from what outside programs say
/// (a probe's stderr, its document, a body): the keys and URLs of [`Kind`] (environment or
/// credentials; of a URL, its password as written inside it and percent-decoded), and the
/// `credentials` named (those a worker env value asks for: `[vast.env]`). Unreadable ones are
/// left out: their lookup fails where they are used.
pub fn known_values<'a>(env: &Env, credentials: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for kind in Kind::ALL {
        if let Ok(Some(s)) = lookup(env, kind) {
            if matches!(kind, Kind::HarmonyDbUrl | Kind::HaDbUrl) {
                // A URL's password is its secret; its role, host and database name are what
                // an error must name (`no SELECT ... TO probe`, `cannot connect to host`),
                // and every piece of the whole URL redacted swallowed them.
                out.extend(redact::secrets_of(s.expose()));
            } else if kind == Kind::VastImageLogin {
                // Its secret is the password; the registry it names is what a failed pull
                // must show (every 10-character piece of `us-docker.pkg.dev` was cut from
                // the hosts' words: the re-test).
                out.push(login_password(s.expose()).unwrap_or(s.expose()).to_string());
            } else {
                out.push(s.0);
            }
        }
    }
    for name in credentials {
        if let Ok(Some(s)) = credential(env, name) {
            out.push(s.0);
        }
    }
    out.retain(|s| !s.is_empty());
    out.sort_by_key(|s| std::cmp::Reverse(s.len()));
    out.dedup();
    out
}

/// The password of a docker login as vast.ai takes it (`-u USER -p PASSWORD REGISTRY`;
/// `--password X`, `-pX`, `--password=X` too), or None when it names none.
pub fn login_password(login: &str) -> Option<&str> {
    let mut words = login.split_whitespace();
    while let Some(w) = words.next() {
        match w {
            "-p" | "--password" => return words.next(),
            _ => {
                if let Some(p) = w.strip_prefix("--password=") {
                    return Some(p);
                }
                if let Some(p) = w.strip_prefix("-p").filter(|p| !p.is_empty()) {
                    return Some(p);
                }
            }
        }
    }
    None
}

/// `text` with every one of `secrets` redacted ([`redact`]): each whole first, then the
/// pieces, so that a piece of one (a URL's password as written, `pw%21x`) does not cut
/// another (the same decoded, `pw!x`) and leave its tail.
pub fn redact_all(text: &str, secrets: &[String]) -> String {
    let whole = secrets
        .iter()
        .filter(|s| s.len() >= 4)
        .fold(text.to_string(), |t, secret| {
            t.replace(secret.as_str(), "[redacted]")
        });
    secrets.iter().fold(whole, |t, secret| redact(&t, secret))
}

/// Pieces of a secret shorter than this are left alone: too short to identify it, and short
/// enough to occur by chance.
pub const REDACT_MIN_CHARS: usize = 10;

/// `text` with the secret, and any piece of it at least [`REDACT_MIN_CHARS`] long, replaced
/// by `[redacted]`: a server that echoes part of a key (an error quoting its first 12
/// characters) must not put that part into a log, a result or the database. For text that is
/// shown; parse a body with only the whole secret taken out (a chance match of a piece must
/// not change a value).
pub fn redact(text: &str, secret: &str) -> String {
    if secret.len() < 4 {
        return text.to_string();
    }
    let text = text.replace(secret, "[redacted]");
    let n = REDACT_MIN_CHARS;
    if !secret.is_ascii() || secret.len() < n || text.len() < n {
        return text;
    }
    let pieces: std::collections::HashSet<&[u8]> = secret.as_bytes().windows(n).collect();
    let bytes = text.as_bytes();
    let mut hit = vec![false; bytes.len()];
    let mut any = false;
    for (i, w) in bytes.windows(n).enumerate() {
        if pieces.contains(w) {
            hit[i..i + n].iter_mut().for_each(|h| *h = true);
            any = true;
        }
    }
    if !any {
        return text;
    }
    // Matched bytes are the secret's own ASCII bytes, so every run of them starts and ends
    // on a character boundary.
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < bytes.len() {
        if hit[i] {
            while i < bytes.len() && hit[i] {
                i += 1;
            }
            out.push_str("[redacted]");
        } else {
            let start = i;
            while i < bytes.len() && !hit[i] {
                i += 1;
            }
            out.push_str(&text[start..i]);
        }
    }
    out
}

/// The name a credential is looked up under in the credential store (`/etc/credstore/`, ...):
/// what the units' `LoadCredential=ID:NAME` load.
pub fn credstore_name(id: &str) -> String {
    format!("fleetagent.{id}")
}

/// systemd's credential store, searched in this order for `LoadCredential=ID:fleetagent.ID`.
pub const CREDSTORE_DIRS: [&str; 3] = ["/etc/credstore", "/run/credstore", "/usr/lib/credstore"];

/// Where a credential is read: under `$CREDENTIALS_DIRECTORY` in a service (systemd's
/// `LoadCredential=`); in an operator's command (no `$CREDENTIALS_DIRECTORY`, and not a
/// service: no `$INVOCATION_ID`), the credential store's `fleetagent.NAME` the units load, so
/// that `instances stop --all` and `doctor` at a root shell use the service's keys.
/// `$FLEETAGENT_CREDSTORE` (colon-separated; empty: none) replaces [`CREDSTORE_DIRS`].
/// None: nowhere to look, or no store holds it.
pub fn credential_file(env: &Env, name: &str) -> Option<PathBuf> {
    if let Some(dir) = env.get("CREDENTIALS_DIRECTORY").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir).join(name));
    }
    if env.get("INVOCATION_ID").is_some_and(|v| !v.is_empty()) {
        return None;
    }
    let dirs: Vec<PathBuf> = match env.get("FLEETAGENT_CREDSTORE") {
        Some(list) => list
            .split(':')
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
            .collect(),
        None => CREDSTORE_DIRS.iter().map(PathBuf::from).collect(),
    };
    let file = credstore_name(name);
    dirs.into_iter()
        .map(|d| d.join(&file))
        .find(|p| std::fs::symlink_metadata(p).is_ok())
}

/// Where the operator puts credential `name` so that this process finds it, for the fixes
/// that say it is missing: the file under `$CREDENTIALS_DIRECTORY` a service reads (whose
/// source is the credential store's `fleetagent.NAME`, which `units install` loads), or, in
/// an operator's command, the first directory of the store it searches.
pub fn where_to_put(env: &Env, name: &str) -> String {
    let file = credstore_name(name);
    // The first directory the store is searched in ($FLEETAGENT_CREDSTORE replaces them).
    let dir = env
        .get("FLEETAGENT_CREDSTORE")
        .and_then(|list| list.split(':').find(|d| !d.is_empty()).map(str::to_string))
        .unwrap_or_else(|| CREDSTORE_DIRS[0].to_string());
    let source = format!("{}/{file}", dir.trim_end_matches('/'));
    match env.get("CREDENTIALS_DIRECTORY").filter(|d| !d.is_empty()) {
        Some(dir) => format!(
            "{source} (root's, mode 0600; this service reads it as {}/{name}, loaded by the units that `units install` writes: start the service again after)",
            dir.trim_end_matches('/')
        ),
        None if env.get("INVOCATION_ID").is_some_and(|v| !v.is_empty()) => format!(
            "{source} (this service has no $CREDENTIALS_DIRECTORY: its unit loads no credential; `fleetagent units install` writes LoadCredential={name}:{file})"
        ),
        None if env.get("FLEETAGENT_CREDSTORE").is_some() => format!(
            "{source} (where $FLEETAGENT_CREDSTORE has this command look; the service reads {}/{file}, which the units that `units install` writes load)",
            CREDSTORE_DIRS[0]
        ),
        None => format!("{source} (root's, mode 0600: the units that `units install` writes load it as credential {name})"),
    }
}

/// A named credential: its file under `$CREDENTIALS_DIRECTORY`, or in the credential store for
/// an operator's command ([`credential_file`]). Also used for worker env values.
pub fn credential(env: &Env, name: &str) -> Result<Option<Secret>> {
    let Some(path) = credential_file(env, name) else {
        return Ok(None);
    };
    let in_store = env
        .get("CREDENTIALS_DIRECTORY")
        .is_none_or(|d| d.is_empty());
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let v = text.trim();
            if v.is_empty() {
                // Read as unset, as an empty variable is, but said: a file that exists and
                // holds nothing is an operator's slip, not a choice.
                log::warn!(
                    "credential {name:?} ({}) is empty: read as unset",
                    path.display()
                );
                Ok(None)
            } else {
                Ok(Some(Secret(v.to_string())))
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) if in_store && e.kind() == std::io::ErrorKind::PermissionDenied => {
            // The store is root's: an operator's command without root reads as unset, said.
            log::warn!(
                "credential {name:?}: cannot read {} ({e}); run the command as root to use the service's credential",
                path.display()
            );
            Ok(None)
        }
        Err(e) => Err(e).with_context(|| format!("cannot read credential {}", path.display())),
    }
}

/// The file of a credential when it exists and holds nothing but white space (which reads as
/// unset), for the messages that would otherwise say "not found" or "no key".
pub fn empty_credential_file(env: &Env, name: &str) -> Option<PathBuf> {
    let path = credential_file(env, name)?;
    let text = std::fs::read_to_string(&path).ok()?;
    text.trim().is_empty().then_some(path)
}

/// A credential that must exist (a worker env value naming one).
pub fn require_credential(env: &Env, name: &str) -> Result<Secret> {
    match credential(env, name)? {
        Some(s) => Ok(s),
        None => match empty_credential_file(env, name) {
            Some(path) => bail!(
                "credential {name:?} is empty ({}): write the value into {}",
                path.display(),
                where_to_put(env, name)
            ),
            None => bail!(
                "credential {name:?} not found: write it into {}",
                where_to_put(env, name)
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_then_credentials() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("llm_api_key"), "  from-file\n").unwrap();
        let cred = dir.path().display().to_string();
        let env = Env::from_pairs([("CREDENTIALS_DIRECTORY".to_string(), cred.clone())]);
        assert_eq!(
            lookup(&env, Kind::LlmApiKey).unwrap().unwrap().expose(),
            "from-file"
        );
        let env = Env::from_pairs([
            ("CREDENTIALS_DIRECTORY".to_string(), cred),
            ("OPENAI_API_KEY".to_string(), "from-env".to_string()),
        ]);
        assert_eq!(
            lookup(&env, Kind::LlmApiKey).unwrap().unwrap().expose(),
            "from-env"
        );
        assert!(lookup(&env, Kind::VastApiKey).unwrap().is_none());
        let s = lookup(&env, Kind::LlmApiKey).unwrap().unwrap();
        assert!(!format!("{s:?} {s}").contains("from-env"));
    }

    /// Of a database URL only the password is secret: the role and the host stay in what
    /// is shown (`no SELECT ... TO probe` must name the role), the password goes.
    #[test]
    fn of_a_url_only_its_password_is_a_known_value() {
        let env = Env::from_pairs([
            (
                "FLEETAGENT_HARMONYDB_URL".to_string(),
                "postgresql://fleetprobe:Hunter2-long%21pw@yb-1.internal:5433/yugabyte".to_string(),
            ),
            (
                "VAST_API_KEY".to_string(),
                "vast-key-0123456789".to_string(),
            ),
        ]);
        let known = known_values(&env, []);
        assert!(known.contains(&"Hunter2-long!pw".to_string()), "{known:?}");
        assert!(
            known.contains(&"vast-key-0123456789".to_string()),
            "{known:?}"
        );
        let said = "cannot connect to postgresql://fleetprobe@yb-1.internal:5433/yugabyte: \
                    password authentication failed for user \"fleetprobe\" (pw Hunter2-long!pw)";
        assert_eq!(
            redact_all(said, &known),
            said.replace("Hunter2-long!pw", "[redacted]")
        );
        let url = env.get("FLEETAGENT_HARMONYDB_URL").unwrap();
        assert!(!redact_all(&url, &known).contains("Hunter2"));
    }

    /// Of a registry login only the password is secret: the registry a failed pull names
    /// stays shown (every 10-character piece of it was cut: the re-test).
    #[test]
    fn of_a_registry_login_only_its_password_is_a_known_value() {
        for (login, pw) in [
            (
                "-u acme -p ghp_Tok3nValue99 us-docker.pkg.dev",
                Some("ghp_Tok3nValue99"),
            ),
            (
                "--password=ghp_Tok3nValue99 -u acme r.io",
                Some("ghp_Tok3nValue99"),
            ),
            ("-pghp_Tok3nValue99 -u acme r.io", Some("ghp_Tok3nValue99")),
            ("just-a-token-no-flags", None),
        ] {
            assert_eq!(login_password(login), pw, "{login}");
        }
        let env = Env::from_pairs([(
            "VAST_IMAGE_LOGIN".to_string(),
            "-u acme -p ghp_Tok3nValue99 us-docker.pkg.dev".to_string(),
        )]);
        let known = known_values(&env, []);
        assert_eq!(known, vec!["ghp_Tok3nValue99".to_string()]);
        let said = "failed to resolve reference us-docker.pkg.dev/acme/curio:v1: denied";
        assert_eq!(redact_all(said, &known), said);
    }

    #[test]
    fn missing_credential_names_it() {
        let env = Env::default();
        let err = require_credential(&env, "curio_db_password").unwrap_err();
        assert!(format!("{err}").contains("curio_db_password"));
    }
}

#[cfg(test)]
mod redact_tests {
    use super::redact;

    #[test]
    fn whole_keys_and_pieces_of_them_are_redacted() {
        let key = "SECRET-XYZZY-0123456789abcdef";
        assert_eq!(
            redact(&format!("bad key {key}!"), key),
            "bad key [redacted]!"
        );
        // A server quoting the first 12 characters, or a piece from the middle.
        assert_eq!(
            redact("bad key SECRET-XYZZ...", key),
            "bad key [redacted]..."
        );
        assert_eq!(redact("id 0123456789ab here", key), "id [redacted] here");
        // Nine characters are not a piece; unrelated text and non-ASCII text are untouched.
        assert_eq!(redact("SECRET-XY and more", key), "SECRET-XY and more");
        assert_eq!(
            redact("héllo wörld, nothing here", key),
            "héllo wörld, nothing here"
        );
        assert_eq!(redact("é0123456789é", key), "é[redacted]é");
    }
}
