//! Prometheus metrics for node_exporter's textfile collector: after every real `run`, when
//! `[metrics] textfile` is set, the agent's state is written in the text exposition format to
//! a temp file in the same dir and renamed over the target (atomic: the collector never reads
//! half a file). Everything comes from the database; nothing here talks to the outside.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

use anyhow::{Context, Result};
use rusqlite::Connection;

use crate::clock::Millis;
use crate::store::{events, instances, llm_calls, runs, session, tally};

#[cfg(test)]
use crate::fleet::day::DAY_MS;

/// One metric family: name, type, help, and its samples (labels, value).
struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    samples: Vec<(Vec<(&'static str, String)>, f64)>,
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn render(families: &[Family]) -> String {
    let mut out = String::new();
    for f in families {
        let _ = writeln!(out, "# HELP {} {}", f.name, f.help);
        let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind);
        for (labels, value) in &f.samples {
            let labels = if labels.is_empty() {
                String::new()
            } else {
                let inner: Vec<String> = labels
                    .iter()
                    .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
                    .collect();
                format!("{{{}}}", inner.join(","))
            };
            let _ = writeln!(out, "{}{labels} {}", f.name, number(*value));
        }
    }
    out
}

fn number(v: f64) -> String {
    if v.is_finite() && v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else if v.is_finite() && v.abs() < 1e6 {
        // To a nanounit: sums of dollars read 1.4700000000000002 (the float's noise).
        let r = (v * 1e9).round() / 1e9;
        format!("{}", r + 0.0)
    } else if v.is_finite() {
        format!("{v}")
    } else {
        "NaN".into()
    }
}

fn one(name: &'static str, kind: &'static str, help: &'static str, value: f64) -> Family {
    Family {
        name,
        kind,
        help,
        samples: vec![(Vec::new(), value)],
    }
}

/// Every verdict of `runs`, zero until a pass has it (a rule on a label never seen has no
/// series to watch).
const VERDICTS: &[&str] = &[
    "action",
    "no-action",
    "skipped",
    "failed",
    "action-failed",
    "action-refused",
];
const DECIDERS: &[&str] = &["llm", "rules", "fallback-rules", "floor"];
const LIVE_STATES: [crate::fleet::State; 8] = {
    use crate::fleet::{BOOTED, DEAD, LAUNCHING, LOADING, OUTBID, PROVING, REGISTERED, STOPPED};
    [
        LAUNCHING, LOADING, BOOTED, REGISTERED, PROVING, DEAD, STOPPED, OUTBID,
    ]
};

fn zeroed(keys: &[&str]) -> BTreeMap<String, f64> {
    keys.iter().map(|k| (k.to_string(), 0.0)).collect()
}

fn labelled(
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    label: &'static str,
    values: BTreeMap<String, f64>,
) -> Family {
    Family {
        name,
        kind,
        help,
        samples: values
            .into_iter()
            .map(|(k, v)| (vec![(label, k)], v))
            .collect(),
    }
}

/// A figure with no sample when it is unknown or unset (never a NaN or a made-up 0).
fn maybe(name: &'static str, kind: &'static str, help: &'static str, v: Option<f64>) -> Family {
    Family {
        name,
        kind,
        help,
        samples: v
            .filter(|x| x.is_finite())
            .map(|x| (Vec::new(), x))
            .into_iter()
            .collect(),
    }
}

/// What operations watch (docs/monitoring/): the hand-brake, vast.ai's health, the demand
/// reading's age, the day's spend and the caps. An unset cap has no sample: the alert rules
/// compare against it by vector matching, which an absent cap leaves empty (never a cap of 0).
fn operations(
    conn: &Connection,
    config: &crate::config::Config,
    now: Millis,
    f: &mut Vec<Family>,
) -> Result<()> {
    use crate::store::ops;
    f.push(one(
        "fleetagent_paused",
        "gauge",
        "1 while `fleetagent pause` is in force (nobody launches or stops but the operator).",
        ops::paused(conn, now)?.is_some() as u8 as f64,
    ));
    f.push(one(
        "fleetagent_vast_ok",
        "gauge",
        "1 when the last vast.ai listing succeeded, 0 when it failed (or none has been made: no key).",
        ops::vast_health(conn)?.ok() as u8 as f64,
    ));
    f.push(maybe(
        "fleetagent_clock_skew_seconds",
        "gauge",
        "This host's clock less vast.ai's (the Date of its answers) as the last listing that worked measured it (seconds; positive: this host ahead); no sample before one measured it.",
        ops::vast_health(conn)?
            .clock_skew_ms
            .map(|ms| ms as f64 / 1000.0),
    ));
    let (_, reading_at) = crate::store::curio::last_reading(conn)?;
    f.push(maybe(
        "fleetagent_demand_age_seconds",
        "gauge",
        "Age of the last good demand reading when this file was written (seconds); no sample before the first.",
        reading_at.map(|at| (now - at).max(0) as f64 / 1000.0),
    ));
    f.push(one(
        "fleetagent_spend_today_dollars",
        "gauge",
        "What our instances have cost since 00:00 UTC (dollars), as the daily cap counts it.",
        spend_today(conn, config, now)?,
    ));
    let p = &config.policy;
    f.push(maybe(
        "fleetagent_daily_spend_max_dollars",
        "gauge",
        "policy.daily_spend_max (dollars per UTC day); no sample when unset (no daily cap).",
        p.daily_spend_max,
    ));
    f.push(maybe(
        "fleetagent_max_instances",
        "gauge",
        "policy.max_instances; no sample when unset (then no launch is possible).",
        p.max_instances.map(f64::from),
    ));
    f.push(maybe(
        "fleetagent_max_dph_total_dollars",
        "gauge",
        "policy.max_dph_total (dollars per hour); no sample when unset (then no launch is possible).",
        p.max_dph_total,
    ));
    Ok(())
}

/// The metrics text for the database behind `conn` (`config` prices a proof and rates the
/// GPUs, as the passes do).
pub fn collect(conn: &Connection, config: &crate::config::Config, now: Millis) -> Result<String> {
    let mut f = Vec::new();

    let mut by_verdict = zeroed(VERDICTS);
    // Tallied (store::tally): the tables grow with the install's age, and every pass and
    // every `poll` writes this file.
    for (k, v) in tally::counts(conn, &tally::RUNS_BY_VERDICT)? {
        by_verdict.insert(k, v as f64);
    }
    f.push(labelled(
        "fleetagent_runs_total",
        "counter",
        "Agent passes by verdict (failed = the pass failed; action-failed = calls asked for, none changed the fleet, one failed at vast.ai; action-refused = every call refused by a guardrail).",
        "verdict",
        by_verdict,
    ));
    let mut by_decider = zeroed(DECIDERS);
    for (k, v) in tally::counts(conn, &tally::RUNS_BY_DECIDER)? {
        by_decider.insert(k, v as f64);
    }
    f.push(labelled(
        "fleetagent_runs_decided_total",
        "counter",
        "Passes that finished ok by who decided them (floor = the floor overruled the model).",
        "decided_by",
        by_decider,
    ));
    f.push(one(
        "fleetagent_timer_period_seconds",
        "gauge",
        "run.timer_period_secs: a pass at least this often (the alert rules count in periods).",
        config.run.timer_period_secs as f64,
    ));
    operations(conn, config, now, &mut f)?;

    let state = session::state(conn)?;
    f.push(one(
        "fleetagent_last_success_timestamp_seconds",
        "gauge",
        "When the last pass finished ok (Unix seconds; 0 = never).",
        state.last_success_at.unwrap_or(0) as f64 / 1000.0,
    ));
    // Since when a pass could have succeeded: FleetagentNoPassYet counts timer periods from
    // it (a fixed 20 minutes paged a healthy install whose timer period is an hour).
    let created: Option<Millis> =
        conn.query_row("SELECT MIN(started_at) FROM sessions", [], |r| r.get(0))?;
    f.push(one(
        "fleetagent_database_created_timestamp_seconds",
        "gauge",
        "When this database was made (Unix seconds; its first session).",
        created.unwrap_or(0) as f64 / 1000.0,
    ));
    f.push(install_info(conn, None)?);
    f.push(one(
        "fleetagent_metrics_timestamp_seconds",
        "gauge",
        "When this file was written (Unix seconds).",
        now as f64 / 1000.0,
    ));

    let calls = tally::counts(conn, &tally::LLM_CALLS)?;
    let calls = |k: &str| calls.get(k).copied().unwrap_or(0) as f64;
    f.push(one(
        "fleetagent_prompt_tokens_last",
        "gauge",
        "Estimated prompt tokens of the last LLM request.",
        llm_calls::last_estimated(conn)?.unwrap_or(0) as f64,
    ));
    f.push(one(
        "fleetagent_prompt_tokens_total",
        "counter",
        "Estimated prompt tokens of every LLM request.",
        calls("estimated"),
    ));
    f.push(one(
        "fleetagent_llm_requests_total",
        "counter",
        "LLM requests sent.",
        calls("calls"),
    ));

    let mut by_state = zeroed(&LIVE_STATES.map(crate::fleet::State::as_str));
    for (k, v) in instances::count_by_state(conn)? {
        by_state.insert(k, v as f64);
    }
    // A launch a good listing a minute after its create did not show is not on its way: apart
    // from `launching`, so that WORKERS DEAD with every create failing 5xx is not read as
    // "something is booting" for the 10 minutes each intent waits to be settled.
    let listed_ok_at = crate::store::ops::vast_health(conn)?.ok_at;
    let unconfirmed = instances::unconfirmed_launches(conn, listed_ok_at)? as f64;
    if let Some(n) = by_state.get_mut(crate::fleet::LAUNCHING.as_str()) {
        *n = (*n - unconfirmed).max(0.0);
    }
    f.push(labelled(
        "fleetagent_fleet_instances",
        "gauge",
        "Our instances by lifecycle state (launching, loading, booted, registered, proving, dead, stopped, outbid); launching leaves out the unconfirmed launches.",
        "state",
        by_state,
    ));
    f.push(one(
        "fleetagent_launches_unconfirmed",
        "gauge",
        "Launches whose create may not have happened (no vast.ai id) and that a good listing a minute later did not show: counted against the caps until settled, not on their way.",
        unconfirmed,
    ));
    // As the caps count it: an instance listed without a price at the most one may cost.
    let dph = crate::fleet::money::caps_dph(
        &instances::live(conn)?,
        crate::fleet::money::unpriced_dph(config).unwrap_or(0.0),
    );
    f.push(one(
        "fleetagent_fleet_dollars_per_hour",
        "gauge",
        "What our billing instances cost per hour (dollars), as the caps count it: unconfirmed launches included.",
        dph,
    ));

    let demand = state
        .last_demand
        .as_deref()
        .and_then(|d| serde_json::from_str::<serde_json::Value>(d).ok())
        .map(|v| v["demand"].clone())
        .filter(|d| d.is_object());
    // A pass whose probe failed read no queue: the figures are the last good reading's (no
    // sample before the first), never a made-up 0 that would clear a WORKERS DEAD alert.
    let last_good: Option<crate::demand::Demand> = crate::store::curio::last_reading(conn)?
        .0
        .and_then(|j| serde_json::from_str(&j).ok());
    let queue = demand.clone().or_else(|| {
        last_good
            .as_ref()
            .and_then(|d| serde_json::to_value(d).ok())
    });
    let field = |k: &str| {
        queue
            .as_ref()
            .and_then(|d| d.get(k))
            .and_then(|v| v.as_f64())
    };
    f.push(Family {
        name: "fleetagent_queue_proofs",
        kind: "gauge",
        help: "PSProve proofs at the last good reading, by state (none before the first): tasks pending, running and held by a dead owner (stale); Curio's own backlog and the ProofShare rows waiting that count as work, where read.",
        samples: [
            ("pending", "pending"),
            ("running", "running"),
            ("stale", "running_stale"),
            ("backlog", "backlog"),
            ("waiting", "ps_waiting"),
        ]
        .into_iter()
        .filter_map(|(state, k)| Some((vec![("state", state.into())], field(k)?)))
        .collect(),
    });
    f.push(one(
        "fleetagent_demand_known",
        "gauge",
        "1 when the last pass read the demand, 0 when the probe failed or never ran.",
        demand.is_some() as u8 as f64,
    ));
    economics(conn, config, now, &mut f)?;
    // Blind passes do not clear it: WORKERS DEAD as the last good reading showed it.
    let emergency = match (&demand, &last_good) {
        (None, Some(d)) => Some(d.workers_dead()),
        _ => runs::last_ok_emergency(conn).ok().flatten(),
    };
    f.push(one(
        "fleetagent_emergency",
        "gauge",
        "1 while the last good demand reading showed WORKERS DEAD (work queued, no live worker).",
        emergency.unwrap_or(false) as u8 as f64,
    ));

    // The guardrails a refusal most often names start at 0: a counter that appears already
    // at N is a jump `increase()` cannot see, and the first burst is the one to see.
    let mut refusals: BTreeMap<String, f64> = REFUSALS_AT_ZERO
        .iter()
        .map(|(kind, code)| (format!("{kind}\u{0}{code}"), 0.0))
        .collect();
    for (key, n) in tally::counts(conn, &tally::REFUSALS)? {
        let (kind, code) = key.split_once(' ').unwrap_or((&key, ""));
        let code = if code.is_empty() { "other" } else { code };
        *refusals.entry(format!("{kind}\u{0}{code}")).or_insert(0.0) += n as f64;
    }
    f.push(Family {
        name: "fleetagent_guardrail_refusals_total",
        kind: "counter",
        help: "Tool calls refused by a guardrail, by action and guardrail.",
        samples: refusals
            .into_iter()
            .map(|(k, v)| {
                let (kind, code) = k.split_once('\u{0}').unwrap_or((&k, ""));
                (
                    vec![
                        ("action", kind.to_string()),
                        ("guardrail", code.to_string()),
                    ],
                    v,
                )
            })
            .collect(),
    });
    let ev = events::counts(conn, now)?;
    f.push(Family {
        name: "fleetagent_events",
        kind: "gauge",
        help: "Events not yet claimed by a pass, and events failed after their attempts.",
        samples: vec![
            (vec![("state", "waiting".into())], ev.unconsumed as f64),
            (vec![("state", "failed".into())], ev.failed as f64),
        ],
    });
    Ok(render(&f))
}

/// Revenue per proof, the fleet's cost per proof and its revenue and profit per hour, as
/// the observation states them: over the last hour's completions of our own instances'
/// workers, the cluster's others apart. A figure that is unknown (no price; completions
/// that cannot be told apart; a fleet that proved nothing has no cost per proof) has no
/// sample, never a NaN or a 0; `fleetagent_price_known` says whether the price is known.
fn economics(
    conn: &Connection,
    config: &crate::config::Config,
    now: Millis,
    f: &mut Vec<Family>,
) -> Result<()> {
    let stored = crate::inspect::economics::stored(conn, config, now)?;
    let e = stored.economics;
    let price = stored.price.ok();
    f.push(one(
        "fleetagent_price_known",
        "gauge",
        "1 when the price of a proof is known (ask price and a fresh FIL/USD), 0 when unknown (the profit check is off).",
        price.is_some() as u8 as f64,
    ));
    let sample = |v: Option<f64>| v.filter(|x| x.is_finite()).map(|x| (Vec::new(), x));
    let gauge = |name, help, v: Option<f64>| Family {
        name,
        kind: "gauge",
        help,
        samples: sample(v).into_iter().collect(),
    };
    f.push(gauge(
        "fleetagent_revenue_per_proof_dollars",
        "Dollars one proof earns (ask price in FIL x FIL/USD); no sample while the price is unknown.",
        price.as_ref().map(|p| p.revenue_per_proof),
    ));
    f.push(Family {
        name: "fleetagent_proofs_completed_last_hour",
        kind: "gauge",
        help: "Curio's successful PSProve completions of the last hour: whose=\"ours\" by our instances' workers, whose=\"others\" by the rest of the cluster; no sample while the last reading failed or cannot tell them apart.",
        samples: [("ours", e.ours_completed_1h), ("others", e.others_completed_1h)]
            .into_iter()
            .filter_map(|(whose, n)| Some((vec![("whose", whose.to_string())], f64::from(n?))))
            .collect(),
    });
    f.push(gauge(
        "fleetagent_fleet_cost_per_proof_dollars",
        "The fleet's $/h over our completions of the last hour; no sample while we completed none (or that is unknown).",
        e.cost_per_proof,
    ));
    f.push(gauge(
        "fleetagent_revenue_dollars_per_hour",
        "Our completions of the last hour x the revenue per proof x the share of the cluster's completions Curio paid; no sample while either is unknown.",
        e.revenue_per_hour,
    ));
    f.push(gauge(
        "fleetagent_profit_dollars_per_hour",
        "Revenue per hour (ours) less the fleet's $/h: negative for a fleet that bills and proves nothing; no sample while unknown.",
        e.profit_per_hour,
    ));
    Ok(())
}

/// Write `text` to `path` atomically: a temp file in the same dir (0644, readable by the
/// node_exporter user), flushed, then renamed over the target.
pub fn write_textfile(path: &Path, text: &str) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "fleetagent.prom".into());
    // node_exporter reads only *.prom: the temp name must not end in .prom.
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let result = (|| -> Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(crate::paths::no_follow())
            .mode(0o644)
            .open(&tmp)
            .with_context(|| format!("cannot create {}", tmp.display()))?;
        // Explicitly: the units' UMask=0007 would leave it 0640, which node_exporter (another
        // user) cannot read.
        use std::os::unix::fs::PermissionsExt;
        f.set_permissions(std::fs::Permissions::from_mode(0o644))?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
            .with_context(|| format!("cannot rename {} to {}", tmp.display(), path.display()))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// With `[ha] enabled`: this host's role and the lease as the shared database showed them.
pub fn ha_families(s: &crate::ha::status::Status) -> String {
    render(&[
        one(
            "fleetagent_ha_leader",
            "gauge",
            "1 when this host holds the lease (several hosts, [ha]).",
            f64::from(u8::from(s.role == "leader")),
        ),
        one(
            "fleetagent_ha_database_ok",
            "gauge",
            "1 when the shared database answered this host's last run; 0: unreachable (role unknown).",
            f64::from(u8::from(s.error.is_none())),
        ),
        maybe(
            "fleetagent_ha_epoch",
            "gauge",
            "The lease's epoch (it rises on every change of holder).",
            s.epoch.map(|e| e as f64),
        ),
        maybe(
            "fleetagent_ha_lease_seconds_left",
            "gauge",
            "Seconds the lease has left in database time; negative: expired that long ago.",
            s.lease_left_secs,
        ),
    ])
}

/// Whose file this is: doctor names a textfile another install wrote last.
/// `shared`: with several hosts, the shared state's install id, which a follower that never
/// led does not hold yet (its own `init`'s is never used: a walkthrough saw one HA install
/// shown as one install per host).
fn install_info(conn: &Connection, shared: Option<&str>) -> Result<Family> {
    let id = crate::ha::mirror::install_shown(conn, shared)?;
    Ok(Family {
        name: "fleetagent_install_info",
        kind: "gauge",
        help: "Always 1; its install_id label names the install that wrote this file.",
        samples: vec![(vec![("install_id", id)], 1.0)],
    })
}

/// A follower's textfile before its HA families: whose it is, when it was written and the
/// timer period (a follower's file without the install line shared a textfile unseen: a
/// re-test).
fn follower_text(
    conn: &Connection,
    config: &crate::config::Config,
    now: Millis,
    shared: Option<&str>,
) -> Result<String> {
    Ok(render(&[
        install_info(conn, shared)?,
        one(
            "fleetagent_timer_period_seconds",
            "gauge",
            "run.timer_period_secs: a pass at least this often (the alert rules count in periods).",
            config.run.timer_period_secs as f64,
        ),
        one(
            "fleetagent_metrics_timestamp_seconds",
            "gauge",
            "When this file was written (Unix seconds).",
            now as f64 / 1000.0,
        ),
    ]))
}

/// After a `run`: write the textfile when `[metrics] textfile` is set. Failures are logged
/// and recorded for `doctor` (`store::ops::set_metrics_error`; a success clears it), never
/// fatal: metrics must not stop the agent.
pub fn after_run(
    config: &crate::config::Config,
    state_dir: &Path,
    now: Millis,
    ha: Option<&crate::ha::status::Status>,
) {
    let Some(path) = &config.metrics.textfile else {
        return;
    };
    let store = match crate::store::Store::open(state_dir, crate::store::OpenMode::Existing, now) {
        Ok(s) => s,
        Err(e) => {
            log::warn!("metrics textfile {}: {e:#}", path.display());
            return;
        }
    };
    let result = match ha.filter(|s| s.role != "leader") {
        // A follower (or a host that cannot tell) writes no figure of the fleet, its runs or
        // the demand: its copy of them is stale, and the leader's file has them. Its own
        // would double the fleet on a dashboard and fire the leader's alerts on every host.
        Some(s) => follower_text(&store.conn, config, now, s.install_id.as_deref())
            .map(|t| t + &ha_families(s)),
        None => collect(&store.conn, config, now)
            .map(|text| text + &ha.map(ha_families).unwrap_or_default()),
    }
    .and_then(|text| write_textfile(path, &text));
    let recorded = match &result {
        Ok(()) => match crate::store::ops::metrics_error(&store.conn) {
            Ok(None) => Ok(()),
            _ => crate::store::ops::set_metrics_error(&store.conn, None, now),
        },
        Err(e) => {
            log::warn!("metrics textfile {}: {e:#}", path.display());
            crate::store::ops::set_metrics_error(&store.conn, Some(&format!("{e:#}")), now)
        }
    };
    if let Err(e) = recorded {
        log::warn!("cannot record the metrics textfile's state: {e:#}");
    }
}

/// With `[ha]` enabled, after a command that may have changed this host's role without a
/// pass (`poll` as a follower, `ha release`): the textfile as the role now is. A host that
/// stopped leading kept the leader's families (`fleetagent_ha_leader 1`, the fleet) until its
/// next `run`: two leaders on a dashboard, the fleet counted twice, and the leader's alerts
/// on a host whose units were stopped after a release, for good.
pub fn after_role_change(
    config: &crate::config::Config,
    env: &crate::env::Env,
    state_dir: &Path,
    now: Millis,
) {
    if config.metrics.textfile.is_none() {
        return;
    }
    if let Ok(Some(settings)) = crate::ha::node::Settings::of(config, env) {
        let status = crate::ha::status::read(&settings);
        after_run(config, state_dir, now, Some(&status));
    }
}

/// After an operator's command that changes what the file says (`pause`, `resume`, `instances
/// stop`), and after each `poll` (vast.ai's health, the fleet): rewrite it now rather than at
/// the next pass, up to a timer period later (a
/// paused flag or the fleet's $/h would lie meanwhile). With `[ha]` enabled the leader's
/// passes write it (a follower's own file holds no figure of the fleet).
pub fn after_operator(config: &crate::config::Config, state_dir: &Path, now: Millis) {
    if !config.ha.enabled {
        after_run(config, state_dir, now, None);
    }
}

/// The (action, guardrail) pairs of `fleetagent_guardrail_refusals_total` written from 0.
/// A refused stop is recorded under the call it was (`destroy` with the default
/// `vast.stop_mode`).
const REFUSALS_AT_ZERO: [(&str, &str); 14] = [
    ("destroy", "paused"),
    ("destroy", "protected"),
    ("launch", "budget"),
    ("launch", "daily_spend"),
    ("launch", "demand_unknown"),
    ("launch", "instance_cap"),
    ("launch", "no_psprove"),
    ("launch", "not_configured"),
    ("launch", "paused"),
    ("launch", "proofshare_disabled"),
    ("launch", "rate_limited"),
    ("launch", "unprofitable"),
    ("stop", "paused"),
    ("stop", "protected"),
];

pub use crate::inspect::economics::spend_today;

#[cfg(test)]
mod tests;
