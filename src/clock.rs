//! Time as a value: the one place that reads the wall clock or sleeps for real.
//!
//! Every decision (debounce, wakes, rate limits, compaction) takes `now` from a
//! [`Clock`] passed in, so tests and `sim` can run the same code on their own time.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use chrono::{DateTime, TimeZone, Utc};

/// Unix time in milliseconds, the unit every timestamp in the database uses.
pub type Millis = i64;

pub trait Clock: Send + Sync {
    /// Current time, Unix milliseconds.
    fn now_ms(&self) -> Millis;
    /// Block for `d` (a simulated clock advances instead).
    fn sleep(&self, d: Duration);
}

/// The real clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[allow(clippy::disallowed_methods)]
    fn now_ms(&self) -> Millis {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as Millis)
            .unwrap_or(0)
    }

    #[allow(clippy::disallowed_methods)]
    fn sleep(&self, d: Duration) {
        std::thread::sleep(d)
    }
}

/// A clock that moves only when told to, or when someone sleeps on it.
#[derive(Debug)]
pub struct ManualClock {
    now: AtomicI64,
}

impl ManualClock {
    pub fn new(now_ms: Millis) -> Self {
        ManualClock {
            now: AtomicI64::new(now_ms),
        }
    }

    pub fn set(&self, now_ms: Millis) {
        self.now.store(now_ms, Ordering::SeqCst);
    }

    pub fn advance(&self, d: Duration) {
        self.now.fetch_add(d.as_millis() as i64, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> Millis {
        self.now.load(Ordering::SeqCst)
    }

    fn sleep(&self, d: Duration) {
        self.advance(d);
    }
}

/// Milliseconds of a `SystemTime` (a file's mtime, say), on the same scale as [`Clock::now_ms`].
pub fn system_time_ms(t: SystemTime) -> Millis {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_millis() as Millis,
        Err(e) => -(e.duration().as_millis() as Millis),
    }
}

/// RFC 3339 UTC with second precision, the format of every time `inspect --json` prints.
pub fn rfc3339(ms: Millis) -> String {
    to_datetime(ms).to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// A short UTC time for the observation line and tables (`2026-11-29 18:05`).
pub fn short(ms: Millis) -> String {
    to_datetime(ms).format("%Y-%m-%d %H:%M").to_string()
}

pub fn to_datetime(ms: Millis) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(ms)
        .single()
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// Human duration such as `45s`, `12m`, `3h05m`, `2d04h`.
pub fn human_duration(ms: Millis) -> String {
    let s = (ms.max(0) + 500) / 1000;
    if s < 60 {
        format!("{s}s")
    } else if s < 3600 {
        format!("{}m", s / 60)
    } else if s < 86_400 {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    } else {
        format!("{}d{:02}h", s / 86_400, (s % 86_400) / 3600)
    }
}

/// The units a duration may use: seconds, minutes, hours and days, lower case. humantime
/// reads more (`M` is months, `ms` milliseconds), which an operator typing `10M` for ten
/// minutes must not get.
const DURATION_UNITS: &[&str] = &[
    "s", "sec", "secs", "second", "seconds", "m", "min", "mins", "minute", "minutes", "h", "hr",
    "hrs", "hour", "hours", "d", "day", "days",
];

/// Parse a duration as `humantime` reads it (`90s`, `15m`, `1h30m`, `2d`, `1h 30min`) in
/// seconds, minutes, hours and days only ([`DURATION_UNITS`]), or a bare number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    if t.is_empty() {
        return Err("empty duration".into());
    }
    if let Ok(secs) = t.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    let units = t
        .split(|c: char| !c.is_alphabetic())
        .filter(|u| !u.is_empty());
    for unit in units {
        if !DURATION_UNITS.contains(&unit) {
            return Err(format!(
                "bad duration {t:?}: unit {unit:?} is not one of s, m, h, d (e.g. 90s, 15m, 1h30m, 2d){}",
                if unit == "M" { "; M would be months" } else { "" }
            ));
        }
    }
    // humantime's own hints name units refused above ("for example 30sec or 30ms").
    humantime::parse_duration(t).map_err(|e| match e {
        humantime::DurationError::UnknownUnit { .. } => format!(
            "bad duration {t:?}: every number needs a unit, one of s, m, h, d (e.g. 90s, 15m, 1h30m, 2d)"
        ),
        e => format!("bad duration {t:?}: {e} (e.g. 90s, 15m, 1h30m, 2d)"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_sleep_advances() {
        let c = ManualClock::new(1_000);
        c.sleep(Duration::from_millis(2_500));
        assert_eq!(c.now_ms(), 3_500);
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("90").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("15m").unwrap(), Duration::from_secs(900));
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("2d").unwrap(), Duration::from_secs(172_800));
        assert!(parse_duration("5x").is_err());
        assert!(parse_duration("h").is_err());
        // Every hint names only units that are accepted (humantime's said "30ms").
        for bad in ["1h5", "1h30", "5x", "1 h x", "h", "-5m"] {
            let err = parse_duration(bad).unwrap_err();
            assert!(err.contains("e.g. 90s, 15m"), "{bad}: {err}");
            assert!(!err.contains("ms"), "{bad}: {err}");
        }
        assert!(parse_duration("").is_err());
        assert_eq!(
            parse_duration("1h 30min").unwrap(),
            Duration::from_secs(5400)
        );
        // Months, milliseconds, weeks and upper case are refused, never read as something else.
        let err = parse_duration("10M").unwrap_err();
        assert!(
            err.contains("unit \"M\"") && err.contains("months"),
            "{err}"
        );
        for bad in ["500ms", "1ns", "2w", "1y", "1H", "2D", "5 months"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn formats() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(human_duration(3_723_000), "1h02m");
        assert_eq!(human_duration(59_400), "59s");
    }
}
