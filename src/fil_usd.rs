//! FIL/USD from outside (the trait `price::FilUsdSource` names): `price.fil_usd_command` (run with `sh -c`, as the demand command
//! probe runs, with the same timeout and process-group kill) and `price.fil_usd_url` (a GET,
//! as the demand http probe makes). Both answer `{"fil_usd": x}`, x a number > 0; anything
//! else is a one-line error naming the key and what was wrong.

use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use serde_json::Value;

use crate::demand::command::{check_exit, run_sh, MAX_STDOUT_BYTES};
use crate::demand::HttpProbe;
use crate::text::clip;

/// FIL/USD from outside (`price.fil_usd_command`, `price.fil_usd_url`, the simulator's price
/// path). Built by `services::build_services` only when one of those keys is set.
pub trait FilUsdSource: Send + Sync {
    /// The current FIL/USD, or a one-line error naming what was wrong.
    fn fil_usd(&self) -> anyhow::Result<f64>;
}

/// How long a FIL/USD command or URL may take: a price is a small answer.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(15);

pub const COMMAND_KEY: &str = "price.fil_usd_command";
pub const URL_KEY: &str = "price.fil_usd_url";

/// Parse `{"fil_usd": x}`: a JSON object whose `fil_usd` is a finite number > 0 (other keys
/// are ignored). The error says what was wrong, without the key (the caller names it).
pub fn parse_fil_usd(text: &str) -> Result<f64, String> {
    let t = text.trim();
    if t.is_empty() {
        return Err("answered nothing; expected {\"fil_usd\": <number>}".into());
    }
    let v: Value = crate::json::parse(t).map_err(|e| {
        format!(
            "not JSON ({e}): {:?}; expected {{\"fil_usd\": <number>}}",
            clip(t, 80)
        )
    })?;
    let Some(obj) = v.as_object() else {
        return Err(format!(
            "answered {} (not an object); expected {{\"fil_usd\": <number>}}",
            clip(t, 80)
        ));
    };
    let x = match obj.get("fil_usd") {
        None => return Err("the object has no \"fil_usd\" key".into()),
        Some(Value::Number(n)) => n.as_f64(),
        Some(other) => {
            return Err(format!(
                "\"fil_usd\" must be a number, got {}",
                clip(&other.to_string(), 40)
            ))
        }
    };
    match x {
        Some(x) if x.is_finite() && x > MAX_FIL_USD => Err(format!(
            "\"fil_usd\" {x} is past {MAX_FIL_USD} (FIL never traded above $240): taken as a bad reading, not a rate"
        )),
        Some(x) if x.is_finite() && x > 0.0 && x < MIN_FIL_USD => Err(format!(
            "\"fil_usd\" {x} is below {MIN_FIL_USD}: taken as a bad reading (a glitch of the feed, a unit slip), not a rate"
        )),
        Some(x) if x.is_finite() && x > 0.0 => Ok(x),
        _ => Err(format!(
            "\"fil_usd\" must be a number > 0, got {}",
            obj["fil_usd"]
        )),
    }
}

/// A fetched FIL/USD above this is a glitch of the feed, not a rate: taken as a failed fetch
/// (the last good value stays until it is stale), or every offer would look profitable.
pub const MAX_FIL_USD: f64 = 10_000.0;

/// A fetched FIL/USD below this is a glitch of the feed too: the config's floor for
/// `price.fil_usd` ([`crate::config::MIN_FIL_USD`]).
pub use crate::config::MIN_FIL_USD;

/// `price.fil_usd_command`.
#[derive(Debug, Clone)]
pub struct CommandSource {
    command: String,
    timeout: Duration,
}

impl CommandSource {
    pub fn new(command: String, timeout: Duration) -> Self {
        CommandSource { command, timeout }
    }
}

impl FilUsdSource for CommandSource {
    fn fil_usd(&self) -> Result<f64> {
        let (status, stdout, stderr) = run_sh(COMMAND_KEY, &self.command, self.timeout)?;
        check_exit(COMMAND_KEY, status, &stderr)?;
        if stdout.len() > MAX_STDOUT_BYTES {
            bail!("{COMMAND_KEY}: printed more than {MAX_STDOUT_BYTES} bytes; expected {{\"fil_usd\": <number>}}");
        }
        let text = String::from_utf8_lossy(&stdout);
        parse_fil_usd(&text).map_err(|e| {
            anyhow!(crate::secrets::redact::one_line(&format!(
                "{COMMAND_KEY}: {e}"
            )))
        })
    }
}

/// `price.fil_usd_url`.
pub struct UrlSource {
    get: HttpProbe,
}

impl UrlSource {
    pub fn new(url: String, timeout: Duration) -> Self {
        UrlSource {
            get: HttpProbe::new(url, timeout),
        }
    }
}

impl FilUsdSource for UrlSource {
    fn fil_usd(&self) -> Result<f64> {
        self.get.get_parsed(URL_KEY, parse_fil_usd)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_positive_number_under_fil_usd_is_a_rate() {
        assert_eq!(parse_fil_usd(" {\"fil_usd\": 3.25}\n"), Ok(3.25));
        assert_eq!(parse_fil_usd("{\"fil_usd\": 4, \"at\": 1}"), Ok(4.0));
        assert_eq!(parse_fil_usd("{\"fil_usd\": 0.01}"), Ok(0.01));
        for (bad, want) in [
            ("", "answered nothing"),
            ("3.5", "not an object"),
            ("{\"usd\": 3}", "no \"fil_usd\" key"),
            ("{\"fil_usd\": \"3.5\"}", "must be a number, got \"3.5\""),
            ("{\"fil_usd\": 0}", "must be a number > 0, got 0"),
            ("{\"fil_usd\": -2}", "> 0"),
            ("{\"fil_usd\": 1e308}", "is past 10000"),
            ("{\"fil_usd\": 1e-9}", "is below 0.01"),
            ("{\"fil_usd\": null}", "must be a number, got null"),
            ("<html>oops</html>", "not JSON"),
        ] {
            let e = parse_fil_usd(bad).unwrap_err();
            assert!(e.contains(want), "{bad:?}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn a_command_prints_the_rate_or_fails_naming_the_key() {
        let t = Duration::from_secs(5);
        let ok = CommandSource::new("echo '{\"fil_usd\": 2.5}'".into(), t);
        assert_eq!(ok.fil_usd().unwrap(), 2.5);
        let e = CommandSource::new("echo nope; echo boom >&2; exit 3".into(), t)
            .fil_usd()
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("price.fil_usd_command exited with status 3: boom"),
            "{e}"
        );
        let e = CommandSource::new("printf '{\"fil_usd\":\\n0}'".into(), t)
            .fil_usd()
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("price.fil_usd_command: "), "{e}");
        assert!(e.contains("> 0") && !e.contains('\n'), "{e}");
        let e = CommandSource::new("sleep 5".into(), Duration::from_millis(200))
            .fil_usd()
            .unwrap_err()
            .to_string();
        assert!(e.contains("price.fil_usd_command: no answer within"), "{e}");
    }
}
