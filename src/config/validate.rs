//! The checks serde cannot make: ranges, formats, secrets kept out of the file, and the rules
//! between keys. One function per section, in the order the sections are checked; the first
//! error found is the one reported, so the order is part of the behaviour (a rule between
//! keys is checked where it always was: within its section, or after the keys it compares).

use std::borrow::Cow;

use super::{
    Config, CredentialRef, DebounceConfig, DemandConfig, DemandSource, EnvValue, HaConfig,
    LlmConfig, MetricsConfig, PolicyConfig, PriceConfig, RunConfig, VastConfig, LABEL_ENV,
};
use crate::secrets::redact::secrets_of;

/// (the key blamed, what is wrong, another key the rule relates it to): the error names the
/// blamed key's line, else the other key's when only that one is in the file. The key blamed
/// is a dotted key, down to an entry of a table of names (`vast.env.FOO`,
/// `policy.gpu_rates.RTX 4090`), so that the error names the entry's own line.
pub(super) type Invalid = (Cow<'static, str>, String, Option<&'static str>);

const DAY_SECS: u64 = 86_400;
const WEEK_MINS: u64 = 7 * 24 * 60;

pub(super) fn validate(c: &Config) -> Result<(), Invalid> {
    state_dir(c)?;
    run(&c.run)?;
    llm(&c.llm)?;
    vast(&c.vast)?;
    demand(&c.demand)?;
    policy(&c.policy)?;
    price(&c.price)?;
    debounce(&c.debounce, &c.run)?;
    metrics(&c.metrics)?;
    ha(&c.ha, &c.vast)
}

// Every integer has an upper bound too: the code turns them into milliseconds and
// instants, and an absurd value must be an error here, not an overflow later.
fn within(key: &'static str, v: u64, min: u64, max: u64) -> Result<(), Invalid> {
    if v < min || v > max {
        return Err((
            key.into(),
            format!("must be between {min} and {max}, got {v}"),
            None,
        ));
    }
    Ok(())
}

// Every number has an upper bound too, far past any real fleet: hours and dollars become
// milliseconds and sums, and `bad_host_hours = 1e13` panicked every pass on an overflow.
fn non_negative(key: &'static str, v: f64, max: f64) -> Result<(), Invalid> {
    if !v.is_finite() || v < 0.0 || v > max {
        return Err((
            key.into(),
            format!("must be a number between 0 and {max}, got {v}"),
            None,
        ));
    }
    Ok(())
}

fn positive(key: &'static str, v: f64, max: f64) -> Result<(), Invalid> {
    if !v.is_finite() || v <= 0.0 || v > max {
        return Err((
            key.into(),
            format!("must be a number > 0 and at most {max}, got {v}"),
            None,
        ));
    }
    Ok(())
}

/// A refused value as an error quotes it: cut to 120 characters (a 100 KB value pasted into
/// a key made a 100 KB error line).
fn short(v: &str) -> String {
    crate::text::clip(v, 120)
}

/// A year, the most any hours key may say.
const YEAR_HOURS: f64 = 8_760.0;

/// The most proofs an hour a GPU's rate may say (`proofs_per_hour_per_instance`, each of
/// `gpu_rates`).
const RATE_MAX: f64 = 100_000.0;

fn url(key: &'static str, v: &str) -> Result<(), Invalid> {
    if !(v.starts_with("http://") || v.starts_with("https://")) {
        return Err((
            key.into(),
            format!(
                "must be an http:// or https:// URL, got {}",
                super::locate::shown_value(v)
            ),
            None,
        ));
    }
    Ok(())
}

/// The top-level `state_dir`.
fn state_dir(c: &Config) -> Result<(), Invalid> {
    if let Some(dir) = &c.state_dir {
        if !dir.is_absolute() {
            return Err((
                "state_dir".into(),
                format!(
                    "must be an absolute path, got {:?}",
                    short(&dir.to_string_lossy())
                ),
                None,
            ));
        }
    }
    Ok(())
}

/// `[run]`.
fn run(r: &RunConfig) -> Result<(), Invalid> {
    within("run.deadline_secs", r.deadline_secs, 10, DAY_SECS)?;
    within("run.max_passes", r.max_passes.into(), 1, 100)?;
    within("run.timer_period_secs", r.timer_period_secs, 10, DAY_SECS)?;
    within("run.retention_days", r.retention_days, 0, 3650)
}

/// `[llm]`.
fn llm(l: &LlmConfig) -> Result<(), Invalid> {
    url("llm.base_url", &l.base_url)?;
    if !l.base_url.trim_end_matches('/').ends_with("/v1") {
        return Err((
            "llm.base_url".into(),
            format!(
                "must end in /v1 (an OpenAI-compatible root such as https://api.openai.com/v1), got {}",
                super::locate::shown_value(&l.base_url)
            ),
            None,
        ));
    }
    if l.model.trim().is_empty() {
        return Err(("llm.model".into(), "must not be empty".into(), None));
    }
    within("llm.timeout_secs", l.timeout_secs, 1, 3_600)?;
    within("llm.retry_budget_secs", l.retry_budget_secs, 1, 3_600)?;
    within(
        "llm.quiet_interval_mins",
        l.quiet_interval_mins,
        0,
        WEEK_MINS,
    )?;
    within("llm.max_output_tokens", l.max_output_tokens, 16, 65_536)?;
    within(
        "llm.context_budget_tokens",
        l.context_budget_tokens,
        2_000,
        2_000_000,
    )?;
    if let Some(enc) = &l.encoding {
        if enc != "o200k_base" && enc != "cl100k_base" {
            return Err((
                "llm.encoding".into(),
                format!(
                    "must be \"o200k_base\" or \"cl100k_base\", got {:?}",
                    short(enc)
                ),
                None,
            ));
        }
    }
    if !(1..=20).contains(&l.max_tool_rounds) {
        return Err((
            "llm.max_tool_rounds".into(),
            format!("must be between 1 and 20, got {}", l.max_tool_rounds),
            None,
        ));
    }
    timeout_within_retry_budget(l)
}

/// The repository path of an image reference when it has an uppercase letter (docker's
/// grammar allows only lowercase there; the registry's host name and the tag may have
/// capitals): `MyOrg/curio:Latest` gives `MyOrg/curio`.
fn uppercase_repository(image: &str) -> Option<&str> {
    let name = image.split('@').next().unwrap_or(image);
    let name = match name.rfind(':') {
        Some(colon) if !name[colon..].contains('/') => &name[..colon],
        _ => name,
    };
    let path = match name.split_once('/') {
        Some((host, rest)) if host.contains(['.', ':']) || host == "localhost" => rest,
        _ => name,
    };
    path.chars().any(|c| c.is_ascii_uppercase()).then_some(path)
}

/// An image digest as registries give them: `sha256:` and 64 lowercase hex digits, or
/// `sha512:` and 128.
fn is_digest(digest: &str) -> bool {
    let hex = |h: &str, n: usize| {
        h.len() == n
            && h.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    match digest.split_once(':') {
        Some(("sha256", h)) => hex(h, 64),
        Some(("sha512", h)) => hex(h, 128),
        _ => false,
    }
}

/// `[vast]`, `[vast.env]` and `[vast.offers]`.
fn vast(v: &VastConfig) -> Result<(), Invalid> {
    url("vast.base_url", &v.base_url)?;
    if let Some(image) = &v.image {
        if image.trim().is_empty() {
            return Err((
                "vast.image".into(),
                "must not be empty (leave it out instead)".into(),
                None,
            ));
        }
        if image.chars().any(char::is_whitespace) {
            return Err((
                "vast.image".into(),
                format!(
                    "an image reference has no spaces, got {:?} (every create would be refused)",
                    short(image)
                ),
                None,
            ));
        }
        if let Some((_, digest)) = image.split_once('@') {
            if !is_digest(digest) {
                return Err((
                    "vast.image".into(),
                    format!(
                        "a digest is sha256: and 64 lowercase hex digits (or sha512: and 128), got {:?} in {:?} (docker refuses to pull it)",
                        short(digest),
                        short(image)
                    ),
                    None,
                ));
            }
        }
        if let Some(path) = uppercase_repository(image) {
            return Err((
                "vast.image".into(),
                format!(
                    "an image's repository is lowercase, got {:?} in {:?} (docker refuses \
                     to pull it: every rented instance would stay loading, paid for, until \
                     policy.stuck_loading_mins)",
                    short(path),
                    short(image)
                ),
                None,
            ));
        }
        if let Some(problem) = super::image::problem(image) {
            return Err((
                "vast.image".into(),
                format!(
                    "{problem}, in {:?} (docker refuses to pull it: every rented instance would \
                     stay loading, paid for, until policy.stuck_loading_mins)",
                    short(image)
                ),
                None,
            ));
        }
    }
    positive("vast.disk_gb", v.disk_gb, 100_000.0)?;
    within("vast.timeout_secs", v.timeout_secs, 1, 120)?;
    let prefix = &v.label_prefix;
    if prefix.is_empty()
        || prefix.len() > 40
        || !prefix
            .chars()
            .all(|ch| ch.is_ascii_alphanumeric() || ch == '-' || ch == '_')
    {
        return Err((
            "vast.label_prefix".into(),
            format!(
                "must be 1-40 characters of a-z, 0-9, - or _, got {:?}",
                short(prefix)
            ),
            None,
        ));
    }
    worker_env(v)?;
    let offers = &v.offers;
    if !(0.0..=1.0).contains(&offers.min_reliability) {
        return Err((
            "vast.offers.min_reliability".into(),
            format!("must be between 0 and 1, got {}", offers.min_reliability),
            None,
        ));
    }
    if let Some(v) = offers.max_dph_per_instance {
        positive("vast.offers.max_dph_per_instance", v, 1_000.0)?;
    }
    if offers.gpu_names.iter().any(|g| g.trim().is_empty()) {
        return Err((
            "vast.offers.gpu_names".into(),
            "an empty name matches no offer (leave it out)".into(),
            None,
        ));
    }
    if let Some(g) = offers.gpu_names.iter().find(|g| g.trim() != g.as_str()) {
        return Err((
            "vast.offers.gpu_names".into(),
            format!("{g:?} has spaces around it, which no offer's name has (every offer would be left out)"),
            None,
        ));
    }
    if let Some(v) = offers.min_gpu_ram_gb {
        non_negative("vast.offers.min_gpu_ram_gb", v, 10_000.0)?;
    }
    if !(1.0..=10.0).contains(&offers.bid_factor) {
        return Err((
            "vast.offers.bid_factor".into(),
            format!(
                "must be between 1 and 10 (x the offer's min_bid), got {}",
                offers.bid_factor
            ),
            None,
        ));
    }
    non_negative(
        "vast.offers.bad_host_hours",
        offers.bad_host_hours,
        YEAR_HOURS,
    )?;
    positive("vast.stopped_max_hours", v.stopped_max_hours, YEAR_HOURS)?;
    Ok(())
}

/// `[vast.env]`: variable names, the label fleetagent sets itself, credential names.
fn worker_env(v: &VastConfig) -> Result<(), Invalid> {
    for (name, value) in &v.env {
        let valid_name = name
            .chars()
            .next()
            .is_some_and(|ch| ch.is_ascii_alphabetic() || ch == '_')
            && name
                .chars()
                .all(|ch| ch.is_ascii_alphanumeric() || ch == '_');
        if !valid_name {
            return Err((
                format!("vast.env.{name}").into(),
                format!(
                    "bad variable name {name:?} (letters, digits and _, not starting with a digit)"
                ),
                None,
            ));
        }
        if name == LABEL_ENV {
            return Err((
                format!("vast.env.{name}").into(),
                format!("{name} is set by fleetagent to each instance's label; leave it out"),
                None,
            ));
        }
        if let EnvValue::Credential(CredentialRef { credential }) = value {
            if credential.is_empty() || credential.contains('/') {
                return Err((
                    format!("vast.env.{name}").into(),
                    format!("{name}: bad credential name {credential:?}"),
                    None,
                ));
            }
        }
    }
    Ok(())
}

/// `[demand]`.
fn demand(d: &DemandConfig) -> Result<(), Invalid> {
    if let Some(u) = &d.harmonydb_url {
        if pg_has_password(u) {
            return Err((
                "demand.harmonydb_url".into(),
                "holds a password; secrets never go in the config: put the URL in \
                 FLEETAGENT_HARMONYDB_URL or the harmonydb_url credential"
                    .into(),
                None,
            ));
        }
    }
    if let Some(u) = &d.http_url {
        url("demand.http_url", u)?;
        if url_has_password(u) {
            return Err((
                "demand.http_url".into(),
                "holds a password; secrets never go in the config".into(),
                None,
            ));
        }
    }
    source_has_its_address(d)?;
    if d.task.trim().is_empty() {
        return Err(("demand.task".into(), "must not be empty".into(), None));
    }
    // Curio's task names are one word, matched exactly: "PSProve " read a clean zero (a
    // re-test), and a list is no task.
    if d.task.chars().any(|c| c.is_whitespace() || c == ',') {
        return Err((
            "demand.task".into(),
            format!(
                "{:?} holds a space or a comma: it is one Curio task name, matched exactly (\"PSProve\")",
                short(&d.task)
            ),
            None,
        ));
    }
    within(
        "demand.worker_alive_secs",
        d.worker_alive_secs,
        30,
        DAY_SECS,
    )?;
    within("demand.timeout_secs", d.timeout_secs, 1, 3_600)?;
    within(
        "demand.waiting_max_age_mins",
        d.waiting_max_age_mins,
        1,
        WEEK_MINS,
    )
}

/// `[policy]` and `[policy.gpu_rates]`.
fn policy(p: &PolicyConfig) -> Result<(), Invalid> {
    non_negative(
        "policy.target_proofs_per_hour",
        p.target_proofs_per_hour,
        1_000_000.0,
    )?;
    positive(
        "policy.proofs_per_hour_per_instance",
        p.proofs_per_hour_per_instance,
        RATE_MAX,
    )?;
    for (gpu, rate) in &p.gpu_rates {
        if gpu.trim().is_empty() {
            return Err((
                "policy.gpu_rates".into(),
                "a GPU name must not be empty (it would match no offer)".into(),
                None,
            ));
        }
        if gpu.trim() != gpu.as_str() {
            return Err((
                format!("policy.gpu_rates.{gpu}").into(),
                format!("{gpu:?} has spaces around it, which no offer's name has (the rate would never be used)"),
                None,
            ));
        }
        if !rate.is_finite() || *rate <= 0.0 || *rate > RATE_MAX {
            return Err((
                format!("policy.gpu_rates.{gpu}").into(),
                format!("{gpu}: must be a number > 0 and at most {RATE_MAX}, got {rate}"),
                None,
            ));
        }
    }
    if let Some(v) = p.max_dph_total {
        non_negative("policy.max_dph_total", v, 1_000_000.0)?;
    }
    if let Some(v) = p.daily_spend_max {
        non_negative("policy.daily_spend_max", v, 10_000_000.0)?;
    }
    within(
        "policy.launch_window_minutes",
        p.launch_window_minutes,
        1,
        DAY_SECS / 60,
    )?;
    within(
        "policy.launch_window_max",
        p.launch_window_max.into(),
        0,
        1_000,
    )?;
    within(
        "policy.emergency_launch_max",
        p.emergency_launch_max.into(),
        0,
        1_000,
    )?;
    if let Some(n) = p.max_instances {
        within("policy.max_instances", n.into(), 0, 10_000)?;
    }
    emergency_covers_the_window(p)?;
    within(
        "policy.stuck_loading_mins",
        p.stuck_loading_mins,
        1,
        WEEK_MINS,
    )?;
    within("policy.floor_after_mins", p.floor_after_mins, 1, WEEK_MINS)?;
    within(
        "policy.floor_flagged_passes",
        p.floor_flagged_passes.into(),
        1,
        1_000,
    )?;
    within("policy.floor_idle_mins", p.floor_idle_mins, 1, WEEK_MINS)?;
    within(
        "policy.silent_worker_mins",
        p.silent_worker_mins,
        1,
        WEEK_MINS,
    )?;
    share_below_one("policy.min_margin", p.min_margin)?;
    within("policy.min_rental_mins", p.min_rental_mins, 0, WEEK_MINS)?;
    share_below_one("policy.bid_discount_min", p.bid_discount_min)?;
    within("policy.on_demand_min", p.on_demand_min.into(), 0, 10_000)?;
    within(
        "policy.operator_hold_mins",
        p.operator_hold_mins,
        0,
        WEEK_MINS,
    )
}

/// A share in [0, 1).
fn share_below_one(key: &'static str, v: f64) -> Result<(), Invalid> {
    if !(v.is_finite() && (0.0..1.0).contains(&v)) {
        return Err((
            key.into(),
            format!("must be a number >= 0 and < 1, got {v}"),
            None,
        ));
    }
    Ok(())
}

/// `[price]`: positive prices, one FIL/USD source at most.
fn price(p: &PriceConfig) -> Result<(), Invalid> {
    if let Some(v) = p.proof_price_fil {
        positive("price.proof_price_fil", v, 1_000.0)?;
    }
    if let Some(v) = p.fil_usd {
        positive("price.fil_usd", v, 1_000_000.0)?;
        if v < super::MIN_FIL_USD {
            return Err((
                "price.fil_usd".into(),
                format!(
                    "must be at least {} (USD per FIL: below that it is a unit slip, and every launch would read unprofitable), got {v}",
                    super::MIN_FIL_USD
                ),
                None,
            ));
        }
    }
    if let Some(c) = &p.fil_usd_command {
        if c.trim().is_empty() {
            return Err((
                "price.fil_usd_command".into(),
                "must not be empty".into(),
                None,
            ));
        }
    }
    if let Some(u) = &p.fil_usd_url {
        url("price.fil_usd_url", u)?;
    }
    within("price.max_age_mins", p.max_age_mins, 1, WEEK_MINS)?;
    let set: Vec<&'static str> = [
        ("price.fil_usd", p.fil_usd.is_some()),
        ("price.fil_usd_command", p.fil_usd_command.is_some()),
        ("price.fil_usd_url", p.fil_usd_url.is_some()),
    ]
    .into_iter()
    .filter(|(_, on)| *on)
    .map(|(k, _)| k)
    .collect();
    if set.len() > 1 {
        return Err((
            set[1].into(),
            format!(
                "{} and {} are both set: give one FIL/USD source",
                set[0], set[1]
            ),
            Some(set[0]),
        ));
    }
    Ok(())
}

/// `[debounce]`: rules between its keys and `[run]`'s only.
fn debounce(d: &DebounceConfig, r: &RunConfig) -> Result<(), Invalid> {
    windows_within_max_wait(d)?;
    max_wait_below_deadline(d, r)
}

/// `[metrics]`.
fn metrics(m: &MetricsConfig) -> Result<(), Invalid> {
    if let Some(path) = &m.textfile {
        if !path.is_absolute() {
            return Err((
                "metrics.textfile".into(),
                format!(
                    "must be an absolute path, got {:?}",
                    short(&path.to_string_lossy())
                ),
                None,
            ));
        }
    }
    Ok(())
}

/// `[ha]`: the lease's bounds, and a margin that covers a vast.ai call and leaves the lease
/// room to be renewed.
fn ha(h: &HaConfig, v: &VastConfig) -> Result<(), Invalid> {
    within("ha.lease_ttl_secs", h.lease_ttl_secs, 5, 3_600)?;
    within("ha.fence_margin_secs", h.fence_margin_secs, 1, 3_600)?;
    if let Some(id) = &h.host_id {
        if id.is_empty()
            || id.len() > 64
            || !id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
        {
            return Err((
                "ha.host_id".into(),
                format!(
                    "must be 1-64 letters, digits, '-', '_' or '.', got {:?}",
                    short(id)
                ),
                None,
            ));
        }
    }
    if h.fence_margin_secs >= h.lease_ttl_secs {
        return Err((
            "ha.fence_margin_secs".into(),
            format!(
                "ha.fence_margin_secs ({}) must be below ha.lease_ttl_secs ({}): a fenced step needs that much lease left, so no step could ever run",
                h.fence_margin_secs, h.lease_ttl_secs
            ),
            Some("ha.lease_ttl_secs"),
        ));
    }
    if h.enabled && h.fence_margin_secs <= v.timeout_secs {
        return Err((
            "ha.fence_margin_secs".into(),
            format!(
                "ha.fence_margin_secs ({}) must be above vast.timeout_secs ({}): a vast.ai request sent with the fence passed must end before the lease can move",
                h.fence_margin_secs, v.timeout_secs
            ),
            Some("vast.timeout_secs"),
        ));
    }
    Ok(())
}

// The rules between keys: each error names both keys, and is laid out at the first one's
// line, else the second one's.

/// `demand.source` names a probe whose address is set.
fn source_has_its_address(d: &DemandConfig) -> Result<(), Invalid> {
    match d.source {
        DemandSource::Http if d.http_url.is_none() => Err((
            "demand.http_url".into(),
            "demand.http_url must be set when demand.source = \"http\"".into(),
            Some("demand.source"),
        )),
        DemandSource::Command if d.command.as_deref().is_none_or(|s| s.trim().is_empty()) => Err((
            "demand.command".into(),
            "demand.command must be set when demand.source = \"command\"".into(),
            Some("demand.source"),
        )),
        _ => Ok(()),
    }
}

/// One request's timeout fits the budget of every attempt of a model turn together: above
/// it, the budget would cut every request short and the timeout would mean nothing.
fn timeout_within_retry_budget(l: &LlmConfig) -> Result<(), Invalid> {
    if l.timeout_secs > l.retry_budget_secs {
        return Err((
            "llm.timeout_secs".into(),
            format!(
                "llm.timeout_secs ({}) must not exceed llm.retry_budget_secs ({}): the budget bounds all attempts of a model turn together, so no request could wait its timeout; raise llm.retry_budget_secs or lower llm.timeout_secs",
                l.timeout_secs, l.retry_budget_secs
            ),
            Some("llm.retry_budget_secs"),
        ));
    }
    Ok(())
}

/// The emergency allowance is at least the ordinary launch window's.
fn emergency_covers_the_window(p: &PolicyConfig) -> Result<(), Invalid> {
    if p.emergency_launch_max < p.launch_window_max {
        return Err((
            "policy.emergency_launch_max".into(),
            format!(
                "policy.emergency_launch_max ({}) must be at least policy.launch_window_max ({})",
                p.emergency_launch_max, p.launch_window_max
            ),
            Some("policy.launch_window_max"),
        ));
    }
    Ok(())
}

/// No priority's quiet window is longer than the longest wait.
fn windows_within_max_wait(d: &DebounceConfig) -> Result<(), Invalid> {
    for (key, v) in [
        ("debounce.p0_secs", d.p0_secs),
        ("debounce.p1_secs", d.p1_secs),
        ("debounce.p2_secs", d.p2_secs),
    ] {
        if v > d.max_wait_secs {
            return Err((
                key.into(),
                format!(
                    "{key} ({v}) must not exceed debounce.max_wait_secs ({})",
                    d.max_wait_secs
                ),
                Some("debounce.max_wait_secs"),
            ));
        }
    }
    Ok(())
}

/// The longest debounce wait leaves the run time to work.
fn max_wait_below_deadline(d: &DebounceConfig, r: &RunConfig) -> Result<(), Invalid> {
    if d.max_wait_secs >= r.deadline_secs {
        return Err((
            "debounce.max_wait_secs".into(),
            format!(
                "debounce.max_wait_secs ({}) must be below run.deadline_secs ({})",
                d.max_wait_secs, r.deadline_secs
            ),
            Some("run.deadline_secs"),
        ));
    }
    Ok(())
}

/// A PostgreSQL URL or key=value string that carries a password, as the `postgres` crate
/// reads it (`user:pw@`, `?password=`, `password = x` with any spacing), or as a plain
/// look at the text when the crate cannot parse it.
fn pg_has_password(u: &str) -> bool {
    match u.parse::<postgres::Config>() {
        Ok(cfg) => cfg.get_password().is_some(),
        Err(_) => url_has_password(u) || !secrets_of(u).is_empty(),
    }
}

/// `scheme://user:password@host` has a password.
fn url_has_password(u: &str) -> bool {
    let Some(rest) = u.split_once("://").map(|(_, r)| r) else {
        return u.contains("password=");
    };
    let authority = rest.split(['/', '?']).next().unwrap_or("");
    let has_userinfo_password = authority
        .rsplit_once('@')
        .is_some_and(|(userinfo, _)| userinfo.contains(':'));
    has_userinfo_password || u.contains("password=")
}
