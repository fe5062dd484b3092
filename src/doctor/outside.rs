//! The checks of the world as the last pass saw it: the demand probe, vast.ai's listing, Curio
//! and the workers, the price, the search quota; and the hand-brake and other installs on the
//! account, which leave the fleet without hands.

use rusqlite::Connection;

use super::agent::STALE_PERIODS;
use super::{unreadable, Problem};
use crate::clock::{human_duration, Millis};
use crate::config::{Config, DemandSource};
use crate::demand::{Demand, RequestLoop};
use crate::store::instances::InstanceRow;
use crate::store::session::AgentState;
use crate::store::{curio, health, ops};

const DAY_MS: Millis = 86_400_000;

fn source_name(source: DemandSource) -> &'static str {
    match source {
        DemandSource::Harmonydb => "harmonydb",
        DemandSource::Http => "http",
        DemandSource::Command => "command",
    }
}

fn demand_fix(source: DemandSource) -> &'static str {
    match source {
        DemandSource::Harmonydb => "check that HarmonyDB (Curio's PostgreSQL) answers at the URL of FLEETAGENT_HARMONYDB_URL, the harmonydb_url credential or demand.harmonydb_url, and the role's grants (docs/demand.md); `fleetagent poll` runs the probe once and prints its error",
        DemandSource::Http => "check that demand.http_url answers with a demand reading (`curl -s` it; docs/demand.md); `fleetagent poll` runs the probe once and prints its error",
        DemandSource::Command => "run demand.command by hand: it must print one demand reading as JSON (docs/demand.md); `fleetagent poll` runs the probe once and prints its error",
    }
}

/// The demand probe: the last pass's reading failed (its error is in the demand record the
/// pass keeps), or the last good reading is older than [`STALE_PERIODS`] timer periods. A
/// harmonydb source without a URL is the `secrets` check's, not said twice.
pub(super) fn demand(
    conn: &Connection,
    state: &AgentState,
    config: &Config,
    now: Millis,
    url_missing: bool,
) -> Vec<Problem> {
    let source = config.demand.source;
    let error = state.last_demand_error();
    if url_missing
        && error
            .as_deref()
            .is_some_and(|e| e.starts_with("not_configured"))
    {
        return Vec::new();
    }
    let reading_at = match curio::last_reading(conn) {
        Ok((_, at)) => at,
        Err(e) => return vec![unreadable("the last demand reading", &e)],
    };
    let good = match reading_at {
        Some(at) => format!("the last good reading is {} old", human_duration(now - at)),
        None => "there has been no good reading yet".to_string(),
    };
    let name = source_name(source);
    let period = config.run.timer_period_secs as i64 * 1000;
    match (error, reading_at) {
        (Some(err), _) => {
            let since = match health::first_failed_probe_after(conn, reading_at.unwrap_or(0)) {
                Ok(s) => s,
                Err(e) => return vec![unreadable("samples", &e)],
            };
            vec![Problem::new(format!(
                "the demand probe (demand.source = \"{name}\") failed in the last pass: {}; {good}: demand is unknown, so the fleet is held (nothing is launched or stopped for demand)",
                crate::text::clip(&err, 300)
            ))
            .fix(demand_fix(source))
            .since(since.or(reading_at))]
        }
        (None, Some(at)) if now - at > STALE_PERIODS * period => vec![Problem::new(format!(
            "no demand reading (demand.source = \"{name}\") for {} (more than {STALE_PERIODS} timer periods): demand is unknown",
            human_duration(now - at)
        ))
        .fix("passes are not running (see the last_success check)")
        .since(Some(at))],
        _ => Vec::new(),
    }
}

/// vast.ai's listing as the last pass or poll left it: failing (since the first failure), or
/// the key refused. No key at all is the `secrets` check's.
pub(super) fn vast(conn: &Connection, now: Millis, key_missing: bool) -> Vec<Problem> {
    if key_missing {
        return Vec::new();
    }
    let h = match ops::vast_health(conn) {
        Ok(h) => h,
        Err(e) => return vec![unreadable("vast.ai's health", &e)],
    };
    let Some(error) = h.error else {
        let mut out = key_refused_on_write(conn, now);
        out.extend(clock_skew(&h));
        return out;
    };
    let since = h
        .error_at
        .map(|at| format!(" since {} ago", human_duration(now - at)));
    let last_ok = match h.ok_at {
        Some(at) => format!(
            "the last listing that worked was {} ago",
            human_duration(now - at)
        ),
        None => "no listing has worked yet".into(),
    };
    let error = crate::text::clip(&error, 300);
    let p = if error.starts_with("vast.ai refused the API key") {
        Problem::new(format!(
            "vast.ai refuses the API key{}: {error}; {last_ok}: nothing can be listed, launched or stopped",
            since.unwrap_or_default()
        ))
        .fix("set a valid key in VAST_API_KEY or the vast_api_key credential (vast.ai's console, Account > API keys), then `fleetagent instances list`")
    } else if error.contains("HTTP 403") {
        // Forbidden, not unreachable: a scoped key without the permission (vastai-api.md's
        // status table); a drill saw the network blamed.
        Problem::new(format!(
            "vast.ai forbids this key the listing{} (HTTP 403): {error}; {last_ok}: the fleet is not seen, so nothing is stopped or destroyed",
            since.unwrap_or_default()
        ))
        .fix("give the API key the instance permissions (read and write) in vast.ai's console, Account > API keys, or use an unscoped key; then `fleetagent instances list`")
    } else if error.contains("no vast.ai API key") {
        // The passes had no key while this command has one (else the `secrets` check says
        // so): the units do not load it (a walkthrough saw the network blamed).
        Problem::new(format!(
            "the agent's passes have no vast.ai API key{}, though this command has one: {error}; {last_ok}: nothing can be listed, launched or stopped",
            since.unwrap_or_default()
        ))
        .fix("give the units the key: the vast_api_key credential (`LoadCredential=`, /etc/credstore/fleetagent.vast_api_key) or VAST_API_KEY in a drop-in's `Environment=`/`EnvironmentFile=` (README, Install); then `systemctl start fleetagent.service`")
    } else {
        Problem::new(format!(
            "the vast.ai listing has failed{}: {error}; {last_ok}: the fleet is not seen, so nothing is stopped or destroyed, and launches (WORKERS DEAD's among them) go by fleetagent's own table",
            since.unwrap_or_default()
        ))
        .fix("check vast.ai's status and the network from this host (`fleetagent instances list` asks once); vast.base_url and vast.timeout_secs")
    };
    vec![p.since(h.error_at)]
}

/// This host's clock more than a minute off vast.ai's, as the last listing that worked
/// measured it.
fn clock_skew(h: &ops::VastHealth) -> Option<Problem> {
    let line = crate::store::clock_step::skew_line(h.clock_skew_ms?)?;
    Some(
        Problem::new(line)
            .fix("`timedatectl` shows whether the clock is synchronised; `timedatectl set-ntp true` (or chrony) sets it right; the next pass measures it again")
            .since(h.ok_at),
    )
}

/// The listing works, but vast.ai refused the key on a launch, stop or destroy (within a day,
/// nothing of ours through since): a key that may read but not write.
fn key_refused_on_write(conn: &Connection, now: Millis) -> Vec<Problem> {
    match crate::store::actions::key_refused_since(conn, now - 86_400_000) {
        Ok(Some((kind, at))) => vec![Problem::new(format!(
            "vast.ai refused the API key on a {kind} {} ago, while the listing works: a key that may read but not write (scoped without instance_write?); nothing can be launched or stopped",
            human_duration(now - at)
        ))
        .fix("give the key write permission, or set one that has it, in VAST_API_KEY or the vast_api_key credential (vast.ai's console, Account > API keys)")
        .since(Some(at))],
        Ok(None) => Vec::new(),
        Err(e) => vec![unreadable("actions", &e)],
    }
}

/// Stops and destroys of ours that vast.ai acknowledged while the listing still shows the
/// instance billing (`run::undone` sends them again each pass).
pub(super) fn undone(conn: &Connection, now: Millis) -> Vec<Problem> {
    let grace = crate::fleet::reconcile::UNDONE_GRACE_MS;
    let (rows, orphans) = match (
        crate::store::actions::undone_ends(conn, now - 86_400_000, grace),
        crate::store::actions::open_orphans(conn),
    ) {
        (Ok(rows), Ok(orphans)) => (rows, orphans),
        (Err(e), _) | (_, Err(e)) => return vec![unreadable("actions", &e)],
    };
    let mut out: Vec<Problem> = orphans
        .iter()
        .map(|(note, at)| {
            Problem::new(format!(
                "a launch {} ago: {}",
                human_duration(now - at),
                crate::text::clip(note, 300)
            ))
            .fix("each pass that lists it destroys it again; else destroy it in vast.ai's console (Instances)")
            .since(Some(*at))
        })
        .collect();
    if rows.is_empty() {
        return out;
    }
    let first = rows.iter().map(|r| r.at).min();
    let names = rows.iter().map(|r| {
        format!(
            "instance {} {} ({} acknowledged {} ago)",
            r.vast_id,
            crate::text::quote(&r.label, crate::fleet::LABEL_CHARS),
            r.kind,
            human_duration(now - r.at)
        )
    });
    out.push(Problem::new(format!(
        "vast.ai acknowledged the stop or destroy of {} instance(s) of ours but still lists them: {}; they bill, and each pass sends the call again",
        rows.len(),
        crate::text::first_and_more(names, 3)
    ))
    .fix("check them in vast.ai's console (Instances) and destroy them there; `fleetagent instances list` shows what vast.ai lists")
    .since(first));
    out
}

/// A pause in force: nobody launches or stops. Louder when the last reading said WORKERS
/// DEAD: work is queued, no worker proves it, and nothing will be launched.
/// The last good demand reading says WORKERS DEAD (work queued, no live worker): the pause
/// and the operator hold are loud then.
fn workers_dead(conn: &Connection) -> bool {
    matches!(
        curio::last_reading(conn),
        Ok((Some(json), Some(_))) if serde_json::from_str::<Demand>(&json).is_ok_and(|d| d.workers_dead())
    )
}

pub(super) fn pause(conn: &Connection, now: Millis) -> Vec<Problem> {
    let p = match ops::paused(conn, now) {
        Ok(Some(p)) => p,
        Ok(None) => return Vec::new(),
        Err(e) => return vec![unreadable("the pause", &e)],
    };
    let until = match p.until {
        Some(u) => format!("for {} more", human_duration(u - now)),
        None => "until `fleetagent resume`".to_string(),
    };
    let dead = workers_dead(conn);
    let reason = crate::text::clip(&p.reason, 200);
    let ago = human_duration(now - p.since);
    let problem = if dead {
        Problem::new(format!(
            "PAUSED WHILE WORKERS DEAD: the fleet is unattended: work is queued and no worker is live, and nothing is launched while paused (since {ago} ago, {until}: {reason:?})"
        ))
        .fix("`fleetagent resume` now, or launch by hand")
    } else {
        Problem::new(format!(
            "paused since {ago} ago, {until}: {reason:?}: nothing is launched or stopped but by hand"
        ))
        .fix("`fleetagent resume` when the work is done")
    };
    vec![problem.since(Some(p.since))]
}

/// An operator hold (`tools::brake::operator_hold`: an operator's stop within
/// `policy.operator_hold_mins`, no resume or message since) while the last reading says
/// WORKERS DEAD: the rules and the floor launch nothing, WORKERS DEAD's included, and no
/// other check said so (doctor was ok with 9 proofs queued and no worker; the soak
/// walkthrough). A hold with workers alive is what the operator asked for: not named.
pub(super) fn hold(conn: &Connection, config: &Config, now: Millis) -> Vec<Problem> {
    let hold = match crate::tools::brake::operator_hold(conn, config, now) {
        Ok(Some(h)) => h,
        Ok(None) => return Vec::new(),
        Err(e) => return vec![unreadable("the operator hold", &e)],
    };
    let dead = workers_dead(conn);
    if !dead || matches!(ops::paused(conn, now), Ok(Some(_))) {
        return Vec::new();
    }
    let what = match (hold.instance_id, &hold.label) {
        (Some(id), _) => format!("instance {id}"),
        (None, Some(l)) => crate::text::quote(l, crate::fleet::LABEL_CHARS),
        (None, None) => "an instance".to_string(),
    };
    vec![Problem::new(format!(
        "OPERATOR HOLD WHILE WORKERS DEAD: the operator stopped {what} {} ago, so the rules and the floor launch nothing for {} more (policy.operator_hold_mins), WORKERS DEAD's launches included, while work is queued and no worker is live",
        human_duration(now - hold.stopped_at),
        human_duration(hold.until - now)
    ))
    .fix("`fleetagent resume` (or `fleetagent message ...`) ends the hold and the next pass launches; or launch by hand")
    .since(Some(hold.stopped_at))]
}

/// Instances under our label prefix that carry another install's id (the last listing saw
/// them): two installs share a vast.ai account and prefix.
pub(super) fn foreign_installs(conn: &Connection, config: &Config, now: Millis) -> Vec<Problem> {
    let (list, at) = match ops::foreign_installs(conn) {
        Ok(f) => f,
        Err(e) => return vec![unreadable("other installs' instances", &e)],
    };
    let ours = ops::install_id(conn).unwrap_or_else(|_| "?".into());
    let (mine, list): (Vec<_>, Vec<_>) = list.into_iter().partition(|f| f.install_id == ours);
    let mut out = ours_elsewhere(&mine, config, at);
    if list.is_empty() {
        return out;
    }
    let ids = ops::install_ids_of(&list);
    let labels = labelled(&list);
    let seen = at
        .map(|t| format!(" (seen {} ago)", human_duration(now - t)))
        .unwrap_or_default();
    out.push(Problem::new(format!(
        "{} instance(s) under vast.label_prefix {:?} belong to another install ({}; this one is {ours}){seen}: {labels}; they are never adopted, counted or stopped here, and each install spends under its own caps on one account",
        list.len(),
        config.vast.label_prefix,
        ids.join(", "),
    ))
    .fix(format!(
        "give each install its own vast.label_prefix (or its own vast.ai account), none of them this one's followed by a word: labels of an install whose prefix is {:?} read here as install {:?}; or stop the other install if it is a stray copy of this state dir; if they are this install's own fleet under a state dir that was lost, stop fleetagent here, move this state dir aside and take them back with `fleetagent init --install-id ID` on an empty one (else they bill unmanaged)",
        format!("{}-{}", config.vast.label_prefix, ids.first().unwrap_or(&"")),
        ids.first().unwrap_or(&""),
    ))
    .since(at));
    out
}

/// The first five of `list` as `"label" (instance N)`, and how many more.
fn labelled(list: &[ops::ForeignInstance]) -> String {
    crate::text::first_and_more(
        list.iter().map(|f| {
            let label = crate::text::quote(&f.label, crate::fleet::LABEL_CHARS);
            format!("{label} (instance {})", f.vast_id)
        }),
        5,
    )
}

/// Instances that carry this install's id under another prefix than `vast.label_prefix`
/// (rented before it was changed, and not in the table: a restored backup): they bill, and
/// nothing here counts, stops or destroys them (`fleet::ours_elsewhere`).
fn ours_elsewhere(
    mine: &[ops::ForeignInstance],
    config: &Config,
    at: Option<Millis>,
) -> Vec<Problem> {
    let Some(first) = mine.first() else {
        return Vec::new();
    };
    let labels = labelled(mine);
    let old = crate::fleet::prefix_with_id(&first.label, &first.install_id).unwrap_or("?");
    vec![Problem::new(format!(
        "{} instance(s) carry this install's id ({}) under another prefix than vast.label_prefix {:?}: {labels}; rented before the prefix was changed, they are not counted against the caps, stopped or destroyed here (`instances stop --all` too leaves them), and they bill",
        mine.len(),
        first.install_id,
        config.vast.label_prefix
    ))
    .fix(format!(
        "set vast.label_prefix back to {old:?} until they are gone, or destroy each with `fleetagent instances stop ID --force` (or on vast.ai's console)"
    ))
    .since(at)]
}

/// How long an instance a copy of this database rented keeps the check red: a day of
/// journal and dashboards to be seen in, and it clears by itself once the copy is stopped.
const COPY_WINDOW_MS: Millis = 24 * 3_600_000;

/// Instances a copy of this state dir rented in the last day (`store::copies`): two agents
/// under one install id, each renting for the same need.
pub(super) fn copies(conn: &Connection, config: &Config, now: Millis) -> Vec<Problem> {
    let install_id = match ops::install_id(conn) {
        Ok(id) => id,
        Err(e) => return vec![unreadable("the install id", &e)],
    };
    let prefix = &config.vast.label_prefix;
    match crate::run::lineage::launched_by_a_copy(
        conn,
        prefix,
        &install_id,
        now - COPY_WINDOW_MS,
        None,
        true,
    )
    {
        Err(e) => vec![unreadable("the instances table", &e)],
        Ok(copied) if copied.is_empty() => Vec::new(),
        Ok(copied) => vec![Problem::new(crate::fleet::copies::line(&copied, &install_id))
            .fix("find the other host running this state dir (the journal's `launched` lines there name these labels) and stop and disable its fleetagent units; moving an install: docs/operations.md, \"Moving an install to another host\"; the instances it rented are ours here: stop those not needed (`fleetagent instances stop ID`); this check clears a day after its last rental")
            .since(copied.iter().map(|c| c.rented_at).min())],
    }
}

/// What the last Curio reading says is wrong outside fleetagent: ProofShare switched off
/// while instances of ours bill, a stalled request loop, and the parts that could not be
/// read (a missing grant). `age_ms`: how old the reading is.
pub(super) fn curio_problems(d: &Demand, rows: &[InstanceRow], age_ms: Millis) -> Vec<Problem> {
    let ago = human_duration(age_ms);
    let mut out = Vec::new();
    let billing = rows
        .iter()
        .filter(|r| crate::fleet::is_billing_state(r.state))
        .count();
    if d.proofshare_disabled() && billing > 0 {
        out.push(Problem::new(format!(
            "Curio: ProofShare is disabled (proofshare_meta.enabled is false, read {ago} ago) while {billing} instance(s) of ours bill: no work will come for them"
        )).fix("enable it in Curio's web UI, or stop them"));
    }
    if d.request_loop == Some(RequestLoop::Stalled) {
        out.push(Problem::new(format!(
            "Curio: the ProofShare request loop is stalled (proofshare_meta.request_task_id points at a bg:PShareRequest task with no live owner, read {ago} ago): Curio asks the market for no work"
        )).fix("restart a Curio node with ProofShare enabled (the one that ran bg:PShareRequest, or any other), so that one takes the task"));
    }
    // What the reading could not read; not the GPU-less nodes it rightly left out (every
    // ProofShare cluster has one: `inspect` and the agent see that note).
    let faults = d
        .notes
        .iter()
        .filter(|n| !n.starts_with(crate::demand::harmonydb::NO_GPU_NOTE));
    for note in faults {
        out.push(Problem::new(format!(
            "Curio reading (read {ago} ago): {}",
            crate::text::clip(note, 300)
        )));
    }
    out
}

/// The `curio` and `worker_identity` checks, which read the same table of our instances.
pub(super) fn curio_and_identity(
    conn: &Connection,
    config: &Config,
    now: Millis,
) -> (Vec<Problem>, Vec<Problem>) {
    let rows = match crate::store::instances::live(conn) {
        Ok(rows) => rows,
        Err(e) => {
            let p = unreadable("instances", &e);
            return (vec![p.clone()], vec![p]);
        }
    };
    let (mut workers, mut taskless) = (Vec::new(), Vec::new());
    let curio = match curio::last_reading(conn) {
        Ok((Some(json), Some(at))) => match serde_json::from_str::<Demand>(&json) {
            Ok(d) => {
                let problems = curio_problems(&d, &rows, now - at);
                workers = d.workers;
                taskless = d.taskless;
                problems
            }
            Err(e) => vec![Problem::new(format!(
                "database: agent_state.last_reading is not a demand reading: {e}"
            ))],
        },
        Ok(_) => Vec::new(),
        Err(e) => vec![unreadable("the last demand reading", &e)],
    };
    let all = crate::fleet::identity::problems(&rows, &workers, &taskless, config, now);
    // One line an instance buried the line that mattered under 100 of them, 35 KB that
    // monitoring would mail (the scale walkthrough): the first few, then a count.
    let more = all.len().saturating_sub(IDENTITY_LINES_MAX);
    let mut identity: Vec<Problem> = all
        .into_iter()
        .take(IDENTITY_LINES_MAX)
        .map(Problem::new)
        .collect();
    if more > 0 {
        identity.push(Problem::new(format!(
            "{more} more instance(s) of ours with a worker problem like those above: `fleetagent inspect` names each (its worker identity lines)"
        )));
    }
    (curio, identity)
}

/// At most this many worker-identity lines in doctor; the rest are counted.
const IDENTITY_LINES_MAX: usize = 5;

/// What makes the price known, by why it is unknown and what the config already has: the
/// proof's price in FIL (or Curio's ask) and a FIL/USD source. A fetched FIL/USD that went
/// stale while the proof's price is read is the source's failing: told to set the proof's
/// price, a walkthrough's operator would have left the profit check off.
pub(super) fn price_fix(config: &Config, why: &str) -> String {
    let p = &config.price;
    let source = if p.fil_usd_command.is_some() {
        Some("run price.fil_usd_command by hand")
    } else if p.fil_usd_url.is_some() {
        Some("fetch price.fil_usd_url by hand")
    } else {
        None
    };
    // Only a fetch that failed (a fresh install's "not fetched yet" blamed a command that
    // had never run: the re-test).
    let fil_usd_failing = why.contains("the last fetch failed");
    if source.is_some() && p.fil_usd.is_none() && why.starts_with("FIL/USD not fetched yet") {
        return "no pass has fetched FIL/USD yet: the next pass does (the timer's, or `fleetagent run`); if it stays unknown after that, run the command or fetch the URL by hand".into();
    }
    if let Some(source) = source.filter(|_| p.fil_usd.is_none() && fil_usd_failing) {
        if !why.contains("proof_price_fil is not set") {
            return format!("the FIL/USD source is what fails: {source} and mend it (docs/operations.md, \"Troubleshooting: price unknown\"); until it answers no launch is judged by profit (price.fil_usd pins a static rate meanwhile)");
        }
    }
    let fil_usd = p.fil_usd.is_some() || p.fil_usd_command.is_some() || p.fil_usd_url.is_some();
    match (p.proof_price_fil.is_some(), fil_usd) {
        (true, false) => "set one of price.fil_usd, price.fil_usd_command, price.fil_usd_url (price.proof_price_fil is set)".into(),
        (false, true) => "set price.proof_price_fil, or let Curio's ask price (proofshare_meta.pprice) be read (a FIL/USD source is set)".into(),
        (true, true) => "check the FIL/USD source's answer (`fleetagent inspect` shows the price line)".into(),
        (false, false) => "set price.proof_price_fil (or Curio's ask price, proofshare_meta.pprice) and one of price.fil_usd, price.fil_usd_command, price.fil_usd_url".into(),
    }
}

/// The price as the last pass left it: unknown (why, and the keys that make it known), or
/// known while the FIL/USD fetch fails (the cached value ages towards unknown).
pub(super) fn price(conn: &Connection, config: &Config, now: Millis) -> Vec<Problem> {
    let (price, cache) = match crate::run::observe::stored_price(conn, config, now) {
        Ok(p) => p,
        Err(e) => return vec![unreadable("the price", &e)],
    };
    match (price, &cache.error) {
        (Err(why), _) => vec![Problem::new(format!(
            "price unknown: {why}: the profit check is off, so launches are not judged by profit"
        ))
        .fix(price_fix(config, &why))
        .since(crate::store::samples::price_unknown_since(conn).unwrap_or(None))],
        (Ok(p), Some(e)) if config.price.fil_usd.is_none() => vec![Problem::new(format!(
            "the FIL/USD fetch failed: {e}; the value fetched {} ago is used until it is older than price.max_age_mins ({})",
            human_duration(now - p.fil_usd_at),
            config.price.max_age_mins
        ))
        .fix("run the command or fetch the URL by hand (docs/operations.md, \"Troubleshooting: price unknown\")")],
        (Ok(_), _) => Vec::new(),
    }
}

/// Instances of ours that bill and that vast.ai lists with no price (or one no host charges):
/// the caps count each at the worst case, and every figure of money is short by them.
pub(super) fn unpriced(conn: &Connection, config: &Config) -> Vec<Problem> {
    let rows = match crate::store::instances::live(conn) {
        Ok(r) => r,
        Err(e) => return vec![unreadable("instances", &e)],
    };
    let ids: Vec<String> = rows
        .iter()
        .filter(|r| crate::fleet::money::is_unpriced(r))
        .map(|r| {
            r.vast_id
                .map_or_else(|| r.label.clone(), |id| format!("{id} ({})", r.label))
        })
        .collect();
    if ids.is_empty() {
        return Vec::new();
    }
    let worst = crate::fleet::money::unpriced_dph(config);
    vec![Problem::new(format!(
        "vast.ai lists no price for {} instance(s) of ours that bill: {}; each counts against policy.max_dph_total at {}, and spend, cost and profit leave them out",
        ids.len(),
        ids.join(", "),
        worst.map_or("the whole cap".to_string(), |w| format!("${w:.2}/h"))
    ))
    .fix("look them up in vast.ai's console (what they bill), and stop any that are not meant to run: `fleetagent instances stop ID`")]
}

/// vast.ai's daily search quota, spent within the last day.
pub(super) fn search_quota(conn: &Connection, now: Millis) -> Vec<Problem> {
    match crate::store::bad_hosts::search_quota(conn) {
        Ok(Some((reset, at))) if now - at < DAY_MS => {
            let until = crate::vast::quota_until(&reset);
            vec![Problem::new(format!(
                "vast.ai search quota exhausted until {until} (said {} ago): no launch can search offers before then",
                human_duration(now - at)
            ))
            .fix(format!("wait for the reset. Searches are spent by launches, not by passes or the timer: one per pass that launches past the guardrails (a second when the hosts left out leave no offer) and the model's search_offers calls (up to {} a pass); fewer come from mending what makes launches fail and be asked again each pass (`fleetagent history` shows them), a lower policy.launch_window_max, or llm.provider = \"rules\" (which never calls search_offers)", crate::tools::search::MAX_SEARCHES_PER_PASS))
            .since(Some(at))]
        }
        Ok(_) => Vec::new(),
        Err(e) => vec![unreadable("the search quota", &e)],
    }
}

/// A host of the shared `hosts` table silent this long is left out of the config comparison.
const RETIRED_AFTER_SECS: f64 = 86_400.0;

/// On a follower: the leader holds the lease (its `poll` renews it) while none of its passes
/// has succeeded for longer than `last_success`'s bound. No other host takes over, and the
/// follower's own pass checks are the leader's to judge: its `doctor` said ok.
fn leader_stale(
    config: &crate::config::Config,
    status: &crate::ha::status::Status,
    leader: &str,
    now: Millis,
) -> Option<Problem> {
    let period = config.run.timer_period_secs as i64 * 1000;
    let stale = super::agent::STALE_PERIODS * period;
    let fix = "run `fleetagent doctor` and `journalctl -u fleetagent` on the leader; `fleetagent ha release` there (or stopping its units) hands the lease to another host";
    // Its last success, or (none at all, or older than the lease) since it took the lease.
    let held_ms = status.held_secs.map(|s| (s * 1000.0) as Millis);
    if let Some((error, since)) = &status.vast_error {
        // Its passes go on without the listing (recorded ok): its last success says nothing.
        if now - since > stale {
            return Some(
                Problem::new(format!(
                    "ha: {leader}, and its vast.ai listing has failed for {} (more than {} timer periods): {}; it holds the lease without seeing the fleet, so no other host acts",
                    human_duration(now - since),
                    super::agent::STALE_PERIODS,
                    crate::text::clip(error, 200)
                ))
                .fix(if crate::vast::is_account_wide(error) {
                    "vast.ai limits or fails this account (the same key on every host), so no other host would see more: it clears when vast.ai answers again; `fleetagent instances list` here lists vast.ai now and shows whether it still fails"
                } else {
                    "the leader's poll hands the lease over once another host's poll lists vast.ai (docs/ha.md, \"A leader blind to vast.ai\"): if it has not, vast.ai fails from every host too (`fleetagent instances list` here lists vast.ai now and shows it), or the leader's poll timer is not running; `fleetagent ha release` on the leader hands it over by hand"
                })
                .since(Some(*since)),
            );
        }
    }
    match (status.last_success_at, held_ms) {
        (Some(t), _) if now - t > stale => Some(
            Problem::new(format!(
                "ha: {leader}, and its last successful pass was {} ago (more than {} timer periods): it keeps the lease while its passes fail, so no other host acts",
                human_duration(now - t),
                super::agent::STALE_PERIODS
            ))
            .fix(fix)
            .since(Some(t)),
        ),
        (None, Some(held)) if held > stale => Some(
            Problem::new(format!(
                "ha: {leader}, and no pass has succeeded since it took the lease {} ago (more than {} timer periods): it keeps the lease while its passes fail, so no other host acts",
                human_duration(held),
                super::agent::STALE_PERIODS
            ))
            .fix(fix)
            .since(Some(now - held)),
        ),
        _ => None,
    }
}

/// `HOST VALUE, ...` of every host, when the hosts' `value` differ (None when they agree).
fn differ(
    hosts: &[&crate::ha::status::HostStatus],
    value: impl Fn(&crate::ha::status::HostStatus) -> &String,
) -> Option<String> {
    let distinct: std::collections::BTreeSet<&String> = hosts.iter().map(|h| value(h)).collect();
    (distinct.len() > 1).then(|| {
        let each: Vec<String> = hosts
            .iter()
            .map(|h| format!("{} {}", h.host_id, value(h)))
            .collect();
        each.join(", ")
    })
}

/// `ha` (several hosts), on every host: the shared database unreachable (no host can act),
/// no leader for longer than the lease, hosts whose config hashes differ (a failover would
/// change the caps), a host id used from two places, a leader whose passes fail
/// ([`leader_stale`]). Nothing while `[ha] enabled = false`. Also, when this host follows a
/// live leader, who leads: the passes' checks are the leader's then (all but
/// [`super::HOST_CHECKS`]); and the shared state's install id, for [`foreign_state`].
pub(super) fn ha(
    config: &crate::config::Config,
    env: &crate::env::Env,
    state_dir: &std::path::Path,
    now: Millis,
) -> (Vec<Problem>, Option<String>, Option<String>) {
    let settings = match crate::ha::node::Settings::of(config, env) {
        Ok(Some(s)) => s,
        Ok(None) => return (Vec::new(), None, None),
        Err(e) => {
            return (
                vec![Problem::new(format!("ha: {}", crate::error::one_line(&e)))
                    .fix("give the shared database's URL (docs/ha.md, \"Setting it up\")")],
                None,
                None,
            )
        }
    };
    let status = crate::ha::status::read(&settings);
    if let Some(e) = &status.error {
        return (
            vec![Problem::new(format!(
                "ha: this host cannot reach the shared database, so it cannot act (another host that reaches it may lead); what this copy shows may be old: {e}"
            ))
            .fix("check the database and ha_db_url from this host (`fleetagent ha status`), and `fleetagent ha status` on the other hosts: one that reaches the database leads")],
            None,
            None,
        );
    }
    let follows = match (&status.holder, status.epoch, status.lease_left_secs) {
        (Some(h), Some(e), Some(left)) if left > 0.0 && *h != settings.host => {
            Some(format!("{h} leads (epoch {e})"))
        }
        _ => None,
    };
    let mut problems = Vec::new();
    if let Some(leader) = &follows {
        problems.extend(leader_stale(config, &status, leader, now));
    }
    if !status.cannot_write.is_empty() {
        problems.push(
            Problem::new(format!(
                "ha: this host's database role cannot write the shared tables ({}): every run here fails",
                status.cannot_write.join(", ")
            ))
            .fix("use a role that owns the schema fleetagent (docs/ha.md, \"Setting it up\"), never the demand probe's read-only one"),
        );
    }
    let ttl = config.ha.lease_ttl_secs as f64;
    if let (Some(holder), Some(left)) = (&status.holder, status.lease_left_secs) {
        if left < -ttl {
            problems.push(
                Problem::new(format!(
                    "ha: no leader for {:.0}s, longer than the lease ({}s): {holder}'s lease (epoch {}) expired and no host took it",
                    -left,
                    config.ha.lease_ttl_secs,
                    status.epoch.unwrap_or(0)
                ))
                .fix("check that fleetagent-poll.timer and fleetagent.timer run on the hosts (`journalctl -u fleetagent`)"),
            );
        }
    }
    let place = crate::ha::hosts::place_of(state_dir);
    let twin = status
        .hosts
        .iter()
        .filter(|h| h.host_id == settings.host)
        .flat_map(|h| h.other_places(&place))
        .next();
    if let Some((other, ago)) = twin {
        problems.push(
            Problem::new(format!(
                "ha: host id {} is also used by another host ({other}, {ago:.0}s ago; this one is {place}): two hosts under one id would both lead, so neither acts",
                settings.host,
            ))
            .fix(format!(
                "give each host its own ha.host_id (the default, /etc/machine-id, is the same on cloned machines); once the other host's id is changed or it is stopped, this host acts again {:.0}s from now (15 minutes after the other's last run under this id)",
                (crate::ha::hosts::TWIN_WINDOW_SECS - ago).max(0.0)
            )),
        );
    }
    // A host not heard from for a day is retired (renamed, rebuilt, taken out): its config
    // is not one a failover could bring back, and it must not keep doctor red for ever.
    let current: Vec<&crate::ha::status::HostStatus> = status
        .hosts
        .iter()
        .filter(|h| h.seen_secs_ago < RETIRED_AFTER_SECS)
        .collect();
    if let Some(each) = differ(&current, |h| &h.config_hash) {
        let keys = crate::ha::node::keys_that_differ(
            current.iter().filter_map(|h| h.config_keys.as_deref()),
        );
        let named = match keys.len() {
            // Hosts on a build before the keys were recorded cannot be told apart key by key.
            0 => String::new(),
            n if n <= 8 => format!(" in {}", keys.join(", ")),
            n => format!(" in {} and {} more key(s)", keys[..8].join(", "), n - 8),
        };
        problems.push(
            Problem::new(format!(
                "ha: the hosts' configs differ ({each}){named}: a failover would change the caps"
            ))
            .fix("give every host the same config (host_id and state_dir aside), then let each run once"),
        );
    }
    // A rolling upgrade left half done: a failover hands the fleet to another build (a
    // walkthrough: a newer leader's stop in flight made an older one that took the lease fail
    // every pass, holding it, and nothing said a host was left behind).
    if let Some(each) = differ(&current, |h| &h.version) {
        problems.push(
            Problem::new(format!(
                "ha: the hosts run different builds ({each}): a failover hands the fleet to another build, and an older one may not read what a newer one left"
            ))
            .fix("finish the upgrade on every host (docs/ha.md), or go back one host at a time, the leader last (docs/ha.md, \"Mixed builds\"); each host's next run records its build"),
        );
    }
    problems.extend(current.iter().filter_map(|h| off_clock(h, &settings.host)));
    let holder = status.holder.as_deref();
    problems.extend(
        current
            .iter()
            .filter_map(|h| cannot_list_vast(h, &settings.host, holder, config)),
    );
    problems.extend(
        current
            .iter()
            .filter_map(|h| cannot_read_demand(h, &settings.host, holder, config)),
    );
    (problems, follows, status.install_id)
}

/// A follower whose last listing of vast.ai failed (it lists once a timer period): were it
/// to lead, it would see nothing and act on nothing, and it could hold the lease meanwhile
/// (the walkthrough: its doctor was green until it led). The leader's own listing is the
/// `vast` check's.
fn cannot_list_vast(
    h: &crate::ha::status::HostStatus,
    this: &str,
    holder: Option<&str>,
    config: &crate::config::Config,
) -> Option<Problem> {
    let (error, ago) = h.vast_failing.as_ref()?;
    if holder == Some(h.host_id.as_str()) {
        return None;
    }
    let which = this_host(h, this);
    // A follower lists once a timer period: this stays until then, fixed or not (the
    // re-test read "the next poll" and saw it red for minutes).
    let next = (config.run.timer_period_secs as f64 - ago).max(0.0).round();
    let again = format!("its poll lists again {next}s from now, a timer period after its last try");
    // A rate limit or vast.ai failing is the account's, not this host's (the re-test: every
    // doctor told the operator to fix keys and routes during a 429).
    let account_wide = crate::vast::is_account_wide(error);
    let fix = if account_wide {
        format!("vast.ai limits or fails this account, not this host alone: it clears when vast.ai answers again; {again}")
    } else if h.host_id == this {
        format!("`fleetagent instances list` here shows the error; give this host's units the vast.ai key (the vast_api_key credential or VAST_API_KEY) and a route to vast.base_url; {again}")
    } else {
        format!("on {}: `fleetagent instances list` shows the error; give its units the vast.ai key and a route to vast.base_url; {again}", h.host_id)
    };
    Some(
        Problem::new(format!(
            "ha: {}{which} cannot list vast.ai ({}s ago: {}): were it to lead, it would not see the fleet nor launch or stop",
            h.host_id,
            ago.round(),
            crate::text::clip(error, 200)
        ))
        .fix(fix),
    )
}

/// A follower whose last reading of demand or FIL/USD failed (it reads them once a timer
/// period): were it to lead, it would hold the fleet (no launch, no stop, WORKERS DEAD
/// unseen) or judge launches without a price once the last one aged (the HA walkthrough:
/// every doctor was green until it led). The leader's own readings are the `demand` and
/// `price` checks'.
fn cannot_read_demand(
    h: &crate::ha::status::HostStatus,
    this: &str,
    holder: Option<&str>,
    config: &crate::config::Config,
) -> Option<Problem> {
    let (error, ago) = h.probe_failing.as_ref()?;
    if holder == Some(h.host_id.as_str()) {
        return None;
    }
    let which = this_host(h, this);
    let next = (config.run.timer_period_secs as f64 - ago).max(0.0).round();
    let where_ = if h.host_id == this {
        "here".to_string()
    } else {
        format!("on {}", h.host_id)
    };
    Some(
        Problem::new(format!(
            "ha: {}{which} cannot read what a pass reads ({}s ago: {}): were it to lead, it would hold the fleet (nothing launched or stopped for demand) or judge launches without a price",
            h.host_id,
            ago.round(),
            crate::text::clip(error, 300)
        ))
        .fix(format!(
            "{where_}: give its units what the leader's have (the demand source's credential or route, demand.* and price.* as on the leader; `fleetagent doctor` there names the keys that differ); its poll reads again {next}s from now, a timer period after its last try"
        )),
    )
}

/// ` (this host)` after a host's id when it is this one, for the `ha` check's lines.
fn this_host(h: &crate::ha::status::HostStatus, this: &str) -> &'static str {
    if h.host_id == this {
        " (this host)"
    } else {
        ""
    }
}

/// A host whose clock was more than a minute off the shared database's at its last contact:
/// the rows it writes carry its clock, which the other hosts read (the HA re-test: a right
/// host's doctor blamed a slow leader's "failing" passes, a slow follower's message did not
/// end an operator hold).
fn off_clock(h: &crate::ha::status::HostStatus, this: &str) -> Option<Problem> {
    let ahead = h
        .clock_ahead_ms
        .filter(|a| a.abs() > crate::store::clock_step::CLOCK_SKEW_MAX_MS)?;
    let by = crate::store::clock_step::to_the_minute(ahead);
    let side = if ahead > 0 { "ahead of" } else { "behind" };
    let which = this_host(h, this);
    Some(
        Problem::new(format!(
            "ha: {}{which}'s clock is {by} {side} the shared database's (at its last contact): the times it writes into the shared state (its runs, a pause, wakes, launches, the messages it forwards) read {by} off on the other hosts (a leader's passes look that much older or newer; a message may not end an operator hold)",
            h.host_id
        ))
        .fix(format!(
            "set {}'s clock right (timedatectl; an NTP client such as systemd-timesyncd or chrony)",
            h.host_id
        )),
    )
}

/// A host whose own install's state would be replaced by another install's shared state
/// were it to lead (`ha::mirror::foreign_state`): its runs refuse to lead, and say so only in
/// the journal.
pub(super) fn foreign_state(conn: &Connection, shared: Option<&str>) -> Vec<Problem> {
    match crate::ha::mirror::foreign_state(conn, shared) {
        Ok(None) => Vec::new(),
        Ok(Some(line)) => vec![
            Problem::new(format!("ha: {line}; every run here refuses to lead"))
                .fix(crate::ha::mirror::FOREIGN_STATE_FIX),
        ],
        Err(e) => vec![unreadable("this host's state against the shared one", &e)],
    }
}
