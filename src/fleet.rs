//! The fleet as one pass sees it: our instances (the local table reconciled with vast.ai's
//! listing, open launch intents and Curio's live machines), the demand reading, the launch
//! window and the money already committed, and the observation line built from them.
//!
//! [`observe`] is the only function here that does I/O (one probe, one listing, one write
//! transaction); reconciliation itself ([`reconcile`]) is pure. Nothing here launches or
//! stops anything: the tools do, through the guardrails, and update the [`Snapshot`].

use std::collections::{BTreeMap, HashMap, HashSet};

use anyhow::{Context, Result};

use crate::clock::{human_duration, Clock, Millis};
use crate::config::Config;
use crate::demand::{Demand, Worker};
use crate::observation::{clip, quote};
use crate::pass::Services;
use crate::store::actions::{self, Action};
use crate::store::instances::{self, InstanceRow};
use crate::store::{events, Store};
use crate::vast::Instance;

/// Lifecycle states of an instance (the `instances.state` column).
pub const LAUNCHING: &str = "launching";
pub const LOADING: &str = "loading";
pub const BOOTED: &str = "booted";
pub const REGISTERED: &str = "registered";
pub const PROVING: &str = "proving";
pub const DEAD: &str = "dead";
pub const STOPPED: &str = "stopped";
pub const GONE: &str = "gone";

/// An open launch intent that has not shown up in a successful listing after this long is
/// settled as failed: a create normally appears in the listing at once, so 10 minutes covers
/// any listing lag while keeping a phantom intent from holding a window slot for long.
pub const INTENT_GRACE_MS: Millis = 10 * 60_000;
/// Outside text (labels, machine names, status messages) is quoted and cut to this length.
pub const LABEL_CHARS: usize = 64;
pub const STATUS_CHARS: usize = 120;
/// At most this many change lines in the observation; the rest are counted.
const MAX_CHANGE_LINES: usize = 12;
const DAY_MS: Millis = 86_400_000;
const HOUR_MS: f64 = 3_600_000.0;

/// The text shown when no vast.ai key is configured.
pub const NO_VAST_KEY: &str = "not_configured: no vast.ai API key";

/// One of our instances that bills and earns nothing (`exited`/`offline`, or loading past
/// `policy.stuck_loading_mins`): it may be destroyed without the stop protections.
#[derive(Debug, Clone, PartialEq)]
pub struct Flag {
    pub vast_id: i64,
    pub label: String,
    /// `exited`, `offline`, or `loading 45m`.
    pub why: String,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    pub now: Millis,
    pub run_id: i64,
    /// None when the probe failed (`demand_error` says why): the fleet is held, never read
    /// as zero demand.
    pub demand: Option<Demand>,
    pub demand_error: Option<String>,
    /// The vast.ai listing failed (or no key): the local table is used as is, nothing is
    /// marked gone and no intent is settled.
    pub listing_error: Option<String>,
    /// Our instances that are not gone, after reconciliation (launching ones included).
    pub instances: Vec<InstanceRow>,
    /// Ids of instances on the account whose label lacks our prefix: never ours to stop.
    pub foreign: Vec<i64>,
    /// Workers Curio still lists as live whose instance we destroyed or stopped (their last
    /// heartbeat is younger than `worker_alive_secs`): not counted as live.
    pub ghost_workers: Vec<String>,
    /// Lifecycle changes found this pass, one line each (outside text quoted).
    pub changes: Vec<String>,
    /// `created_at` of the launches the window counts (succeeded, or open intents, in the
    /// last `launch_window_minutes`), oldest first.
    pub window_launches: Vec<Millis>,
    /// Estimated spend of our instances since 00:00 UTC, in dollars (see [`spend_since`]).
    pub spent_today: f64,
    /// The pass streaks after this reading (advanced once per run by [`observe`]; the
    /// stored ones, unadvanced, in [`view`]).
    pub streaks: crate::store::session::Streaks,
    /// Offers matching `[vast.offers]` found by a launch earlier in this pass (rented ones
    /// removed), so several launches cost one search (vast.ai allows 10 a minute).
    pub offers: Option<Vec<crate::vast::Offer>>,
}

/// What [`reconcile`] decided: rows to write, rows to forget, intents to settle, changes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reconciled {
    /// Every live row after reconciliation, plus rows that just became gone.
    pub rows: Vec<InstanceRow>,
    /// Labels of launching rows whose launch clearly never happened.
    pub deleted: Vec<String>,
    /// (action id, outcome, instance id, detail)
    pub settle: Vec<(i64, &'static str, Option<i64>, String)>,
    pub changes: Vec<String>,
    pub foreign: Vec<i64>,
}

/// Probe demand, list our instances, reconcile them with the local table and open launch
/// intents, and record every change as a P1 `lifecycle` event claimed by `run_id` (which
/// must be a row of `runs`). Then read the launch window and today's spend.
///
/// Failures of the outside services are facts of the snapshot, not errors: a failed probe
/// leaves `demand` None with `demand_error` (never zeros); a failed listing sets
/// `listing_error` and keeps the local table as it is. An `Err` is a database failure.
pub fn observe(
    store: &mut Store,
    config: &Config,
    _env: &crate::app::Env,
    services: &Services,
    clock: &dyn Clock,
    run_id: i64,
) -> Result<Snapshot> {
    let (demand, demand_error) = probe_demand(services, config);
    let (listing, listing_error) = list_ours(services);
    let now = clock.now_ms();

    let tx = store
        .immediate()
        .context("cannot begin the fleet reconciliation")?;
    let rec = reconcile_against(&tx, config, listing.as_deref(), demand.as_ref(), now)?;
    for row in &rec.rows {
        instances::upsert(&tx, row)?;
    }
    for label in &rec.deleted {
        instances::delete(&tx, label)?;
    }
    for (id, outcome, instance, detail) in &rec.settle {
        actions::settle(&tx, *id, outcome, *instance, Some(detail), now)?;
    }
    for line in &rec.changes {
        events::insert_claimed(&tx, run_id, 1, "lifecycle", line, now)?;
    }
    // Once per run; `assemble` reads them back into the snapshot.
    crate::rules::advance_streaks(&tx, run_id, demand.as_ref())?;
    let snapshot = assemble(
        &tx,
        config,
        rec,
        demand,
        demand_error,
        listing_error,
        run_id,
        now,
    )?;
    tx.commit()?;
    Ok(snapshot)
}

/// The same view as [`observe`] without writing anything (no events, no table changes):
/// for operator commands outside a pass (`instances stop`). `run_id` is 0.
pub fn view(
    store: &Store,
    config: &Config,
    services: &Services,
    clock: &dyn Clock,
) -> Result<Snapshot> {
    let (demand, demand_error) = probe_demand(services, config);
    let (listing, listing_error) = list_ours(services);
    let now = clock.now_ms();
    let rec = reconcile_against(
        &store.conn,
        config,
        listing.as_deref(),
        demand.as_ref(),
        now,
    )?;
    assemble(
        &store.conn,
        config,
        rec,
        demand,
        demand_error,
        listing_error,
        0,
        now,
    )
}

/// Read what reconciliation needs from the table and reconcile (pure from here on).
fn reconcile_against(
    conn: &rusqlite::Connection,
    config: &Config,
    listing: Option<&[Instance]>,
    demand: Option<&Demand>,
    now: Millis,
) -> Result<Reconciled> {
    let mut local = instances::live(conn)?;
    let mut taken = HashSet::new();
    if let Some(list) = listing {
        for inst in list {
            // Rows marked gone that the listing still shows (a destroy that did not take,
            // or a lagging listing) come back: they bill, so they must be seen.
            let known = local.iter().any(|r| r.vast_id == Some(inst.id as i64));
            if !known {
                if let Some(row) = instances::by_vast_id(conn, inst.id as i64)? {
                    local.push(row);
                }
            }
            if let Some(label) = inst.label.as_deref().map(str::trim) {
                if let Some(row) = instances::by_label(conn, label)? {
                    if row.gone_at.is_some() && row.vast_id != Some(inst.id as i64) {
                        taken.insert(row.label);
                    }
                }
            }
        }
    }
    let intents = actions::open_intents(conn)?;
    Ok(reconcile(
        &ReconcileInput {
            local,
            taken_labels: taken,
            intents,
            listing,
            demand,
            prefix: &config.vast.label_prefix,
            now,
        },
        INTENT_GRACE_MS,
    ))
}

#[allow(clippy::too_many_arguments)]
fn assemble(
    conn: &rusqlite::Connection,
    config: &Config,
    rec: Reconciled,
    demand: Option<Demand>,
    demand_error: Option<String>,
    listing_error: Option<String>,
    run_id: i64,
    now: Millis,
) -> Result<Snapshot> {
    let window_ms = config.policy.launch_window_minutes as i64 * 60_000;
    let window_launches = actions::launches_since(conn, now - window_ms)?
        .iter()
        .map(|a| a.created_at)
        .collect();
    let day_start = now - now.rem_euclid(DAY_MS);
    let mut alive = instances::alive_since(conn, day_start)?;
    // Rows this reconciliation changed count as they are now.
    for r in &rec.rows {
        match alive.iter_mut().find(|a| a.label == r.label) {
            Some(a) => *a = r.clone(),
            None => alive.push(r.clone()),
        }
    }
    alive.retain(|a| !rec.deleted.contains(&a.label));
    let spent_today = spend_since(&alive, day_start, now);
    let mut demand = demand;
    let ghost_workers = match demand.as_mut() {
        Some(d) => drop_ghost_workers(conn, d)?,
        None => Vec::new(),
    };
    Ok(Snapshot {
        now,
        run_id,
        demand,
        ghost_workers,
        demand_error,
        listing_error,
        instances: rec
            .rows
            .into_iter()
            .filter(|r| r.gone_at.is_none())
            .collect(),
        foreign: rec.foreign,
        changes: rec.changes,
        window_launches,
        spent_today,
        streaks: crate::store::session::streaks(conn)?.0,
        offers: None,
    })
}

/// Take out of `d.workers` the machines named after instances of ours that are destroyed or
/// stopped, and return their names. Curio keeps such a worker live until its heartbeat is
/// `worker_alive_secs` old; counted, it would let a second stop take the last real worker
/// while work is queued, and hide WORKERS DEAD for as long. Matching is by label only (an
/// address can belong to another host by now).
fn drop_ghost_workers(conn: &rusqlite::Connection, d: &mut Demand) -> Result<Vec<String>> {
    let mut ghosts = Vec::new();
    let mut keep = Vec::with_capacity(d.workers.len());
    for w in std::mem::take(&mut d.workers) {
        let ghost = match instances::by_label(conn, w.machine_name.trim())? {
            Some(row) => row.gone_at.is_some() || !is_billing_state(&row.state),
            None => false,
        };
        if ghost {
            ghosts.push(w.machine_name);
        } else {
            keep.push(w);
        }
    }
    d.workers = keep;
    Ok(ghosts)
}

/// One demand reading: `(Some, None)` or `(None, why)`; a failure is never zeros.
pub fn probe_demand(services: &Services, config: &Config) -> (Option<Demand>, Option<String>) {
    match &services.demand {
        None => (None, Some(no_demand_source(config))),
        Some(probe) => match probe.probe() {
            Ok(d) => (Some(d), None),
            Err(e) => (None, Some(clip(&format!("{e:#}"), 300))),
        },
    }
}

/// Why there is no demand probe, naming the key to set.
pub fn no_demand_source(config: &Config) -> String {
    use crate::config::DemandSource;
    match config.demand.source {
        DemandSource::Harmonydb => "not_configured: no HarmonyDB URL (set FLEETAGENT_HARMONYDB_URL, the harmonydb_url credential, or demand.harmonydb_url)".into(),
        DemandSource::Http => "not_configured: demand.source is \"http\" but demand.http_url is unset".into(),
        DemandSource::Command => "not_configured: demand.source is \"command\" but demand.command is unset".into(),
    }
}

/// Every instance on the account (ours are picked by label later), or why not.
pub fn list_ours(services: &Services) -> (Option<Vec<Instance>>, Option<String>) {
    match &services.vast {
        None => (None, Some(NO_VAST_KEY.into())),
        Some(vast) => match vast.list_instances() {
            Ok(list) => (Some(list), None),
            Err(e) => (None, Some(clip(&e.to_string(), 300))),
        },
    }
}

/// Is this label one of ours? Ours are `<prefix>-...`.
pub fn is_ours(label: Option<&str>, prefix: &str) -> bool {
    label
        .map(str::trim)
        .and_then(|l| l.strip_prefix(prefix))
        .is_some_and(|rest| rest.starts_with('-') && rest.len() > 1)
}

/// The lifecycle state of a listed instance from vast.ai's `actual_status` and the live
/// Curio worker matched to it (if any).
pub fn classify(actual_status: Option<&str>, worker: Option<&Worker>) -> &'static str {
    let status = actual_status.map(|s| s.trim().to_ascii_lowercase());
    match status.as_deref() {
        Some("stopped") => return STOPPED,
        Some("exited" | "offline" | "frozen") => return DEAD,
        _ => {}
    }
    if let Some(w) = worker {
        return if w.running > 0 { PROVING } else { REGISTERED };
    }
    match status.as_deref() {
        Some("running") => BOOTED,
        Some("unknown") => DEAD,
        // null (provisioning), loading, created, rebooting, restarting, anything new.
        _ => LOADING,
    }
}

/// States that count as a live container (booted or better).
pub fn is_running_state(state: &str) -> bool {
    matches!(state, BOOTED | REGISTERED | PROVING)
}

/// States that count toward slots and $/h: everything not stopped or gone (dead ones bill).
pub fn is_billing_state(state: &str) -> bool {
    !matches!(state, STOPPED | GONE)
}

/// $/h of the rows that bill by the hour (stopped and gone ones do not), as the money
/// guardrail counts it.
pub fn dph_of(rows: &[InstanceRow]) -> f64 {
    rows.iter()
        .filter(|i| is_billing_state(&i.state))
        .filter_map(|i| i.dph)
        .sum::<f64>()
        // An empty float sum is -0.0.
        + 0.0
}

/// The host part of Curio's `host_and_port` (`10.0.0.1:12300`, `[::1]:12300`).
fn host_of(host_and_port: &str) -> &str {
    let s = host_and_port.trim();
    if let Some(rest) = s.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match s.rsplit_once(':') {
        Some((h, p)) if p.bytes().all(|b| b.is_ascii_digit()) && !h.contains(':') => h,
        _ => s,
    }
}

/// Match listed instances to live Curio workers: by machine name == label first, then by
/// public IP == the host of `host_and_port` (only where the IP is unambiguous: vast.ai puts
/// several instances of one machine behind the same IP). Each worker matches at most once.
/// Returns instance id -> index into `workers`.
pub fn match_workers(listed: &[&Instance], workers: &[Worker]) -> HashMap<u64, usize> {
    let mut out = HashMap::new();
    let mut used = HashSet::new();
    for inst in listed {
        let Some(label) = inst.label.as_deref().map(str::trim) else {
            continue;
        };
        if let Some((i, _)) = workers
            .iter()
            .enumerate()
            .find(|(i, w)| !used.contains(i) && w.machine_name.trim() == label)
        {
            used.insert(i);
            out.insert(inst.id, i);
        }
    }
    let mut ip_count: HashMap<&str, usize> = HashMap::new();
    for inst in listed {
        if let Some(ip) = inst
            .public_ip
            .as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty())
        {
            *ip_count.entry(ip).or_default() += 1;
        }
    }
    for inst in listed {
        if out.contains_key(&inst.id) {
            continue;
        }
        let Some(ip) = inst
            .public_ip
            .as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty())
        else {
            continue;
        };
        if ip_count.get(ip).copied() != Some(1) {
            continue;
        }
        let candidates: Vec<usize> = workers
            .iter()
            .enumerate()
            .filter(|(i, w)| !used.contains(i) && host_of(&w.host_and_port) == ip)
            .map(|(i, _)| i)
            .collect();
        if let [only] = candidates[..] {
            used.insert(only);
            out.insert(inst.id, only);
        }
    }
    out
}

pub struct ReconcileInput<'a> {
    /// Live rows of the local table (plus gone rows the listing still shows).
    pub local: Vec<InstanceRow>,
    /// Labels already used by a gone row of another instance (a new one gets a suffix).
    pub taken_labels: HashSet<String>,
    pub intents: Vec<Action>,
    /// None when the listing failed.
    pub listing: Option<&'a [Instance]>,
    pub demand: Option<&'a Demand>,
    pub prefix: &'a str,
    pub now: Millis,
}

/// Reconcile the local table with the listing, open intents and Curio's live workers.
/// Pure: the caller writes the result.
pub fn reconcile(input: &ReconcileInput<'_>, grace_ms: Millis) -> Reconciled {
    let now = input.now;
    let mut out = Reconciled::default();
    let Some(listing) = input.listing else {
        // The local table as is; intents stay open until a listing can answer for them.
        out.rows = input.local.clone();
        return out;
    };
    let ours: Vec<&Instance> = listing
        .iter()
        .filter(|i| is_ours(i.label.as_deref(), input.prefix))
        .collect();
    out.foreign = listing
        .iter()
        .filter(|i| !is_ours(i.label.as_deref(), input.prefix))
        .map(|i| i.id as i64)
        .collect();
    let workers: &[Worker] = input.demand.map(|d| d.workers.as_slice()).unwrap_or(&[]);
    let matched = match_workers(&ours, workers);
    let intents_by_label: HashMap<&str, &Action> = input
        .intents
        .iter()
        .filter_map(|a| a.label.as_deref().map(|l| (l, a)))
        .collect();

    let mut local: Vec<Option<InstanceRow>> = input.local.iter().cloned().map(Some).collect();
    let mut used_labels: HashSet<String> = input.local.iter().map(|r| r.label.clone()).collect();
    used_labels.extend(input.taken_labels.iter().cloned());
    let mut settled: HashSet<i64> = HashSet::new();

    for inst in &ours {
        let label = inst.label.as_deref().unwrap_or("").trim().to_string();
        let by_id = local.iter().position(|r| {
            r.as_ref()
                .is_some_and(|r| r.vast_id == Some(inst.id as i64))
        });
        let by_label = || {
            local.iter().position(|r| {
                r.as_ref()
                    .is_some_and(|r| r.vast_id.is_none() && r.label == label)
            })
        };
        let slot = by_id.or_else(by_label);
        let worker = matched.get(&inst.id).map(|&i| &workers[i]);
        let mut state = classify(inst.actual_status.as_deref(), worker);
        let intent = intents_by_label.get(label.as_str()).copied();
        // Without a demand reading Curio's side is unknown, not empty: a running instance
        // that was registered or proving stays so (no false "worker lost" events).
        let kept_curio = match slot.and_then(|i| local[i].as_ref()) {
            Some(prev)
                if input.demand.is_none()
                    && state == BOOTED
                    && matches!(&prev.state[..], REGISTERED | PROVING) =>
            {
                state = if prev.state == PROVING {
                    PROVING
                } else {
                    REGISTERED
                };
                Some(prev.machine_name.clone())
            }
            _ => None,
        };

        let mut created_here = false;
        let mut row = match slot.and_then(|i| local[i].take()) {
            Some(row) => row,
            None => {
                created_here = true;
                let key = if used_labels.contains(&label) {
                    // Two instances with one label: keep both visible, never merge them.
                    format!("{label}~{}", inst.id)
                } else {
                    label.clone()
                };
                used_labels.insert(key.clone());
                let created_at = intent.map(|a| a.created_at).unwrap_or_else(|| {
                    inst.start_date
                        .map(|s| (s * 1000.0) as Millis)
                        .filter(|t| *t > 0 && *t <= now)
                        .unwrap_or(now)
                });
                InstanceRow {
                    label: key,
                    vast_id: None,
                    state: LAUNCHING.into(),
                    actual_status: None,
                    status_msg: None,
                    gpu_name: None,
                    dph: intent.and_then(|a| a.dph),
                    offer_id: intent.and_then(|a| a.offer_id),
                    public_ip: None,
                    machine_name: None,
                    launched_run: intent.and_then(|a| a.run_id),
                    adopted: intent.is_none(),
                    created_at,
                    state_since: now,
                    last_seen_at: None,
                    gone_at: None,
                }
            }
        };
        let was_new = row.vast_id.is_none();
        let was_gone = row.gone_at.is_some();
        let before = row.state.clone();
        row.vast_id = Some(inst.id as i64);
        row.actual_status = inst.actual_status.clone();
        row.status_msg = inst.status_msg.as_deref().map(|m| clip(m, 300));
        row.gpu_name = inst.gpu_name.clone().or(row.gpu_name);
        row.dph = inst.dph_total.or(row.dph);
        row.public_ip = inst.public_ip.clone();
        row.machine_name = match kept_curio {
            Some(name) => name,
            None => worker.map(|w| w.machine_name.clone()),
        };
        row.last_seen_at = Some(now);
        row.gone_at = None;
        if row.state != state {
            row.state = state.into();
            row.state_since = now;
        }
        let name = describe(&row);
        if let Some(a) = intent {
            if settled.insert(a.id) {
                out.settle.push((
                    a.id,
                    "ok",
                    Some(inst.id as i64),
                    format!("seen in the listing as instance {}", inst.id),
                ));
            }
        }
        if was_gone {
            out.changes.push(format!(
                "{name} is listed again after it was marked gone: {state}"
            ));
        } else if was_new && intent.is_some() {
            out.changes.push(format!(
                "{name} found in the listing for an open launch intent (the create went through; now recorded): {state}"
            ));
        } else if created_here {
            let dup = if row.label != label {
                " (its label is already used by another instance)"
            } else {
                ""
            };
            out.changes.push(format!(
                "{name} adopted: ours by label but not in fleetagent's table (a create that was not recorded){dup}: {state}"
            ));
        } else if significant(&before, state) {
            out.changes
                .push(format!("{name}: {before} -> {state}{}", status_note(&row)));
        }
        out.rows.push(row);
    }

    for row in local.into_iter().flatten() {
        let mut row = row;
        if row.gone_at.is_some() {
            continue;
        }
        match row.vast_id {
            Some(_) => {
                let name = describe(&row);
                out.changes.push(format!(
                    "{name} is gone from the vast.ai listing (was {})",
                    row.state
                ));
                row.state = GONE.into();
                row.state_since = now;
                row.gone_at = Some(now);
                out.rows.push(row);
            }
            None => {
                let intent = intents_by_label.get(row.label.as_str()).copied();
                match intent {
                    Some(a) if now - a.created_at >= grace_ms => {
                        if settled.insert(a.id) {
                            out.settle.push((
                                a.id,
                                "failed",
                                None,
                                format!(
                                    "never appeared in the vast.ai listing within {}",
                                    human_duration(grace_ms)
                                ),
                            ));
                        }
                        out.changes.push(format!(
                            "launch {} never appeared in the vast.ai listing within {}: recorded as failed",
                            quote(&row.label, LABEL_CHARS),
                            human_duration(grace_ms)
                        ));
                        out.deleted.push(row.label.clone());
                    }
                    // Still within the grace period: it may yet appear.
                    Some(_) => out.rows.push(row),
                    // No open intent behind a row that never got an id: the launch was
                    // settled (refused or failed) without its row being removed.
                    None => out.deleted.push(row.label.clone()),
                }
            }
        }
    }

    // Intents with no row at all (written by an older build, or a row lost): settle those
    // past the grace period; show younger ones as launching so they count.
    let labels: HashSet<&str> = out.rows.iter().map(|r| r.label.as_str()).collect();
    let mut extra = Vec::new();
    for a in &input.intents {
        let Some(label) = a.label.as_deref() else {
            continue;
        };
        if settled.contains(&a.id)
            || labels.contains(label)
            || out.deleted.iter().any(|d| d == label)
        {
            continue;
        }
        if now - a.created_at >= grace_ms {
            settled.insert(a.id);
            out.settle.push((
                a.id,
                "failed",
                None,
                format!(
                    "never appeared in the vast.ai listing within {}",
                    human_duration(grace_ms)
                ),
            ));
            out.changes.push(format!(
                "launch {} never appeared in the vast.ai listing within {}: recorded as failed",
                quote(label, LABEL_CHARS),
                human_duration(grace_ms)
            ));
        } else {
            extra.push(InstanceRow {
                label: label.to_string(),
                vast_id: None,
                state: LAUNCHING.into(),
                actual_status: None,
                status_msg: None,
                gpu_name: None,
                dph: a.dph,
                offer_id: a.offer_id,
                public_ip: None,
                machine_name: None,
                launched_run: a.run_id,
                adopted: false,
                created_at: a.created_at,
                state_since: a.created_at,
                last_seen_at: None,
                gone_at: None,
            });
        }
    }
    out.rows.extend(extra);
    out
}

/// Transitions worth an event. registered <-> proving flips with every proof: the table
/// follows it, the event stream does not.
fn significant(before: &str, after: &str) -> bool {
    before != after
        && !matches!(
            (before, after),
            (REGISTERED, PROVING) | (PROVING, REGISTERED)
        )
}

/// `instance 123 "label"` (or `launch "label"` before it has an id).
pub fn describe(row: &InstanceRow) -> String {
    match row.vast_id {
        Some(id) => format!("instance {id} {}", quote(&row.label, LABEL_CHARS)),
        None => format!("launch {}", quote(&row.label, LABEL_CHARS)),
    }
}

fn status_note(row: &InstanceRow) -> String {
    match (&row.state[..], row.status_msg.as_deref()) {
        (DEAD | STOPPED, Some(msg)) if !msg.trim().is_empty() => {
            format!(" ({})", quote(msg, STATUS_CHARS))
        }
        _ => String::new(),
    }
}

/// Estimated dollars spent by these instances between `since` and `now`: each row's `dph`
/// times the hours it was alive in that span (from `created_at` to `gone_at`, or to
/// `state_since` when stopped, or to `now`). Stopped disks and bandwidth are not counted.
pub fn spend_since(rows: &[InstanceRow], since: Millis, now: Millis) -> f64 {
    rows.iter()
        .map(|r| {
            let start = r.created_at.max(since);
            let mut end = r.gone_at.unwrap_or(now).min(now);
            if r.state == STOPPED {
                end = end.min(r.state_since);
            }
            let hours = (end - start).max(0) as f64 / HOUR_MS;
            r.dph.unwrap_or(0.0) * hours
        })
        .sum::<f64>()
        // An empty float sum is -0.0, which prints as "$-0.00".
        + 0.0
}

/// Proofs per hour of one instance of ours: its GPU's rate, else the default rate.
pub fn rate_of(row: &InstanceRow, config: &Config) -> f64 {
    match row.gpu_name.as_deref() {
        Some(gpu) => config.policy.rate_for(gpu),
        None => config.policy.proofs_per_hour_per_instance,
    }
}

impl Snapshot {
    /// Work is queued and no live worker can take it.
    pub fn workers_dead(&self) -> bool {
        self.demand.as_ref().is_some_and(|d| d.workers_dead())
    }

    /// $/h of every instance of ours that bills (everything but stopped ones; launching ones
    /// at the price of their offer).
    pub fn fleet_dph(&self) -> f64 {
        dph_of(&self.instances)
    }

    /// Instances that take a slot under `max_instances` (all but stopped ones).
    pub fn billing_count(&self) -> u32 {
        self.instances
            .iter()
            .filter(|i| is_billing_state(&i.state))
            .count() as u32
    }

    /// $/h left under `policy.max_dph_total` (None while it is unset).
    pub fn headroom_dph(&self, config: &Config) -> Option<f64> {
        config
            .policy
            .max_dph_total
            .map(|max| (max - self.fleet_dph()).max(0.0))
    }

    /// Instances left under `policy.max_instances` (None while it is unset).
    pub fn headroom_slots(&self, config: &Config) -> Option<u32> {
        config
            .policy
            .max_instances
            .map(|max| max.saturating_sub(self.billing_count()))
    }

    /// The launch window as the guardrails see it now.
    pub fn window(&self, config: &Config) -> crate::guardrails::WindowState {
        crate::guardrails::window_state(
            &self.window_launches,
            self.now,
            &config.policy,
            self.workers_dead(),
        )
    }

    /// Ours that bill and earn nothing, with why.
    pub fn flagged(&self, config: &Config) -> Vec<Flag> {
        let stuck_ms = config.policy.stuck_loading_mins as i64 * 60_000;
        self.instances
            .iter()
            .filter_map(|r| {
                let id = r.vast_id?;
                let status = r
                    .actual_status
                    .as_deref()
                    .map(|s| s.trim().to_ascii_lowercase());
                let why = match status.as_deref() {
                    Some(s @ ("exited" | "offline")) => s.to_string(),
                    _ if r.state == LOADING && self.now - r.created_at > stuck_ms => {
                        format!("loading {}", human_duration(self.now - r.created_at))
                    }
                    _ => return None,
                };
                Some(Flag {
                    vast_id: id,
                    label: r.label.clone(),
                    why,
                })
            })
            .collect()
    }

    pub fn is_flagged(&self, config: &Config, vast_id: i64) -> bool {
        self.flagged(config).iter().any(|f| f.vast_id == vast_id)
    }

    /// Nominal proofs/h of instances that can or soon will prove (launching, loading,
    /// booted, registered, proving), flagged ones left out.
    pub fn projected_pph(&self, config: &Config) -> f64 {
        let flagged: HashSet<i64> = self.flagged(config).iter().map(|f| f.vast_id).collect();
        self.instances
            .iter()
            .filter(|r| {
                matches!(
                    &r.state[..],
                    LAUNCHING | LOADING | BOOTED | REGISTERED | PROVING
                ) && !r.vast_id.is_some_and(|id| flagged.contains(&id))
            })
            .map(|r| rate_of(r, config))
            .sum()
    }

    /// Instances of ours in a state, counted.
    pub fn count_in(&self, states: &[&str]) -> u32 {
        self.instances
            .iter()
            .filter(|r| states.contains(&r.state.as_str()))
            .count() as u32
    }

    pub fn find(&self, vast_id: i64) -> Option<&InstanceRow> {
        self.instances.iter().find(|r| r.vast_id == Some(vast_id))
    }

    /// A launch went out: later calls of this pass see its slot, its money and its window use.
    pub fn record_launch(&mut self, row: InstanceRow, at: Millis) {
        self.instances.push(row);
        self.window_launches.push(at);
    }

    /// A stop or destroy went through: the instance leaves the fleet (or becomes stopped),
    /// and the Curio worker matched to it no longer counts as live.
    pub fn record_stop(&mut self, vast_id: i64, destroyed: bool) {
        let Some(pos) = self
            .instances
            .iter()
            .position(|r| r.vast_id == Some(vast_id))
        else {
            return;
        };
        let machine = self.instances[pos].machine_name.clone();
        if destroyed {
            self.instances.remove(pos);
        } else {
            let row = &mut self.instances[pos];
            row.state = STOPPED.into();
            row.state_since = self.now;
            row.machine_name = None;
        }
        if let (Some(machine), Some(d)) = (machine, self.demand.as_mut()) {
            if let Some(i) = d.workers.iter().position(|w| w.machine_name == machine) {
                d.workers.remove(i);
            }
        }
    }

    /// DESIGN.md's observation line, e.g. `Demand: active=false, WORKERS DEAD. Queue:
    /// PSProve 59p/0r. Throughput: 0/h (1h), 0 (15m). Fleet: 0 running (0 p/h), 3 loading.
    /// Projected: 150 p/h. $1.33/h. Target: 500 p/h. Budget headroom: $8.67/h, 17 slots.
    /// Launch window: 3/3 used, emergency bypass ON.`
    ///
    /// `active` = PSProve work is being proven (tasks running now or completions in the last
    /// 15 minutes). A failed probe says so and that the fleet is held.
    pub fn observation_line(&self, config: &Config) -> String {
        let mut parts: Vec<String> = Vec::new();
        let task = &config.demand.task;
        match &self.demand {
            Some(d) => {
                let active = d.running > 0 || d.completed_15m > 0;
                let who = if d.workers_dead() {
                    "WORKERS DEAD".to_string()
                } else {
                    format!(
                        "{} live workers ({} idle)",
                        d.live_workers(),
                        d.idle_workers()
                    )
                };
                let ghosts = match self.ghost_workers.len() {
                    0 => String::new(),
                    n => {
                        format!(" ({n} more listed by Curio are instances we stopped: not counted)")
                    }
                };
                parts.push(format!("Demand: active={active}, {who}{ghosts}."));
                let mut q = format!("Queue: {task} {}p/{}r", d.pending, d.running);
                if d.running_stale > 0 {
                    q.push_str(&format!(", {} held by dead owners", d.running_stale));
                }
                if let Some(w) = d.ps_waiting.filter(|w| *w > 0) {
                    q.push_str(&format!(", ProofShare {w} waiting"));
                }
                parts.push(format!("{q}."));
                parts.push(format!(
                    "Throughput: {}/h (1h), {} (15m).",
                    d.completed_1h, d.completed_15m
                ));
            }
            None => {
                let why = self.demand_error.as_deref().unwrap_or("no reading");
                parts.push(format!(
                    "Demand: UNKNOWN, the probe failed: {}; the fleet is held (no launches or stops on missing data).",
                    quote(why, 200)
                ));
            }
        }

        let running: Vec<&InstanceRow> = self
            .instances
            .iter()
            .filter(|r| is_running_state(&r.state))
            .collect();
        let running_pph: f64 = running.iter().map(|r| rate_of(r, config)).sum();
        let mut fleet = format!(
            "Fleet: {} running ({} p/h), {} loading",
            running.len(),
            num(running_pph),
            self.count_in(&[LAUNCHING, LOADING])
        );
        for (state, n) in [
            (DEAD, self.count_in(&[DEAD])),
            (STOPPED, self.count_in(&[STOPPED])),
        ] {
            if n > 0 {
                fleet.push_str(&format!(", {n} {state}"));
            }
        }
        if let Some(e) = &self.listing_error {
            fleet.push_str(&format!(
                " (vast.ai listing failed: {}; local table as last seen)",
                quote(e, 160)
            ));
        }
        parts.push(format!("{fleet}."));
        parts.push(format!(
            "Projected: {} p/h.",
            num(self.projected_pph(config))
        ));
        parts.push(format!("${:.2}/h.", self.fleet_dph()));
        let target = config.policy.target_proofs_per_hour;
        if target > 0.0 {
            parts.push(format!("Target: {} p/h.", num(target)));
        } else {
            parts.push("Target: none (follow the backlog).".into());
        }

        let missing = config.policy.missing_launch_keys(&config.vast);
        if missing.is_empty() {
            let mut b = format!(
                "Budget headroom: ${:.2}/h, {} slots",
                self.headroom_dph(config).unwrap_or(0.0),
                self.headroom_slots(config).unwrap_or(0)
            );
            if let Some(max) = config.policy.daily_spend_max {
                b.push_str(&format!(
                    ", ${:.2} of ${max:.2} spent today",
                    self.spent_today
                ));
            }
            parts.push(format!("{b}."));
        } else {
            parts.push(format!(
                "Launches not configured: set {}.",
                missing.join(", ")
            ));
        }

        let w = self.window(config);
        let mut lw = format!(
            "Launch window: {}/{} used",
            w.used, config.policy.launch_window_max
        );
        if w.emergency {
            lw.push_str(", emergency bypass ON");
            if w.used >= w.limit {
                lw.push_str(&format!(" ({}/{} emergency total used)", w.used, w.limit));
            }
        }
        if let Some(secs) = w.retry_after_secs {
            lw.push_str(&format!(", next slot in {secs}s"));
        }
        if config.policy.dry_run {
            lw.push_str("; DRY RUN: nothing is sent to vast.ai");
        }
        parts.push(format!("{lw}."));
        parts.join(" ")
    }

    /// The lines that follow the observation line: this pass's lifecycle changes and the
    /// flagged instances (outside text quoted). Empty when there is nothing to say.
    pub fn lifecycle_lines(&self, config: &Config) -> Vec<String> {
        let mut lines = Vec::new();
        if !self.changes.is_empty() {
            let mut shown: Vec<String> = self
                .changes
                .iter()
                .take(MAX_CHANGE_LINES)
                .cloned()
                .collect();
            if self.changes.len() > MAX_CHANGE_LINES {
                shown.push(format!("+{} more", self.changes.len() - MAX_CHANGE_LINES));
            }
            lines.push(format!("Fleet changes: {}.", shown.join("; ")));
        }
        let flagged = self.flagged(config);
        if !flagged.is_empty() {
            let items: Vec<String> = flagged
                .iter()
                .take(MAX_CHANGE_LINES)
                .map(|f| {
                    format!(
                        "instance {} {} {}",
                        f.vast_id,
                        quote(&f.label, LABEL_CHARS),
                        f.why
                    )
                })
                .collect();
            lines.push(format!(
                "Flagged (bill, earn nothing; may be destroyed): {}.",
                items.join("; ")
            ));
        }
        let open: Vec<&InstanceRow> = self
            .instances
            .iter()
            .filter(|r| r.state == LAUNCHING)
            .collect();
        if !open.is_empty() {
            let labels: Vec<String> = open
                .iter()
                .take(6)
                .map(|r| quote(&r.label, LABEL_CHARS))
                .collect();
            lines.push(format!(
                "Open launches not yet in the listing: {} ({}).",
                open.len(),
                labels.join(", ")
            ));
        }
        lines
    }

    /// A compact per-state count, for `inspect` and logs.
    pub fn state_counts(&self) -> BTreeMap<String, u32> {
        let mut m = BTreeMap::new();
        for r in &self.instances {
            *m.entry(r.state.clone()).or_default() += 1;
        }
        m
    }
}

/// `150`, `37.5`: whole numbers without decimals.
pub fn num(x: f64) -> String {
    // An empty f64 sum is -0.0; show it as 0.
    let x = x + 0.0;
    if (x - x.round()).abs() < 0.05 {
        format!("{:.0}", x.round())
    } else {
        format!("{x:.1}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: Millis = 1_800_000_000_000;
    const MIN: Millis = 60_000;

    fn config() -> Config {
        let mut c = Config::default();
        c.vast.image = Some("img".into());
        c.policy.max_dph_total = Some(10.0);
        c.policy.max_instances = Some(20);
        c.policy.target_proofs_per_hour = 500.0;
        c.policy.proofs_per_hour_per_instance = 50.0;
        c
    }

    fn row(label: &str, id: Option<i64>, state: &str, dph: f64) -> InstanceRow {
        InstanceRow {
            label: label.into(),
            vast_id: id,
            state: state.into(),
            actual_status: None,
            status_msg: None,
            gpu_name: Some("RTX 4090".into()),
            dph: Some(dph),
            offer_id: None,
            public_ip: None,
            machine_name: None,
            launched_run: None,
            adopted: false,
            created_at: NOW - 5 * MIN,
            state_since: NOW - 5 * MIN,
            last_seen_at: None,
            gone_at: None,
        }
    }

    fn inst(id: u64, label: &str, status: Option<&str>) -> Instance {
        Instance {
            id,
            label: Some(label.into()),
            actual_status: status.map(String::from),
            gpu_name: Some("RTX 4090".into()),
            dph_total: Some(0.4),
            ..Default::default()
        }
    }

    fn worker(name: &str, host: &str, running: u32) -> Worker {
        Worker {
            machine_name: name.into(),
            host_and_port: host.into(),
            running,
            cordoned: false,
        }
    }

    fn intent(id: i64, label: &str, at: Millis) -> Action {
        Action {
            id,
            run_id: Some(1),
            kind: "launch".into(),
            outcome: "intent".into(),
            actor: "llm".into(),
            instance_id: None,
            label: Some(label.into()),
            offer_id: Some(77),
            dph: Some(0.4),
            emergency: false,
            reason: None,
            detail: None,
            created_at: at,
        }
    }

    fn input<'a>(
        local: Vec<InstanceRow>,
        intents: Vec<Action>,
        listing: Option<&'a [Instance]>,
        demand: Option<&'a Demand>,
    ) -> ReconcileInput<'a> {
        ReconcileInput {
            local,
            taken_labels: HashSet::new(),
            intents,
            listing,
            demand,
            prefix: "fleetagent",
            now: NOW,
        }
    }

    #[test]
    fn nothing_spent_is_zero_not_minus_zero() {
        let spent = spend_since(&[], 0, NOW);
        assert!(spent == 0.0 && spent.is_sign_positive(), "{spent}");
        assert_eq!(format!("${spent:.2}"), "$0.00");
    }

    #[test]
    fn design_example_line() {
        let s = Snapshot {
            now: NOW,
            demand: Some(Demand {
                pending: 59,
                ..Default::default()
            }),
            instances: vec![
                row("fleetagent-a", Some(1), LOADING, 0.45),
                row("fleetagent-b", Some(2), LOADING, 0.44),
                row("fleetagent-c", None, LAUNCHING, 0.44),
            ],
            window_launches: vec![NOW - 10 * MIN, NOW - 5 * MIN, NOW - MIN],
            ..Default::default()
        };
        assert_eq!(
            s.observation_line(&config()),
            "Demand: active=false, WORKERS DEAD. Queue: PSProve 59p/0r. Throughput: 0/h (1h), 0 (15m). \
             Fleet: 0 running (0 p/h), 3 loading. Projected: 150 p/h. $1.33/h. Target: 500 p/h. \
             Budget headroom: $8.67/h, 17 slots. Launch window: 3/3 used, emergency bypass ON."
        );
    }

    #[test]
    fn failed_probe_and_listing_said_plainly() {
        let s = Snapshot {
            now: NOW,
            demand_error: Some("connection refused \"x\"\nnext".into()),
            listing_error: Some(NO_VAST_KEY.into()),
            window_launches: vec![NOW - 14 * MIN, NOW - MIN, NOW - MIN],
            ..Default::default()
        };
        let line = s.observation_line(&Config::default());
        assert!(
            line.starts_with("Demand: UNKNOWN, the probe failed: \"connection refused \\\"x\\\" next\"; the fleet is held"),
            "{line}"
        );
        assert!(
            line.contains("vast.ai listing failed: \"not_configured: no vast.ai API key\""),
            "{line}"
        );
        assert!(line.contains("Launches not configured: set vast.image, policy.max_dph_total, policy.max_instances."), "{line}");
        assert!(
            line.ends_with("Launch window: 3/3 used, next slot in 60s."),
            "{line}"
        );
        assert!(!line.contains('\n'));
    }

    #[test]
    fn lifecycle_over_statuses() {
        let listing = vec![
            inst(1, "fleetagent-null", None),
            inst(2, "fleetagent-loading", Some("loading")),
            inst(3, "fleetagent-running", Some("running")),
            inst(4, "fleetagent-exited", Some("exited")),
            inst(5, "fleetagent-offline", Some("offline")),
            inst(6, "fleetagent-unknown", Some("unknown")),
            inst(7, "fleetagent-proving", Some("running")),
            inst(8, "fleetagent-byip", Some("running")),
            inst(9, "someone-else", Some("running")),
            inst(10, "fleetagent-weird", Some("scheduling")),
        ];
        let mut listing = listing;
        listing[7].public_ip = Some(" 203.0.113.8 ".into());
        let demand = Demand {
            workers: vec![
                worker("fleetagent-proving", "10.0.0.7:12300", 2),
                worker("curio-host-8", "203.0.113.8:12300", 0),
            ],
            ..Default::default()
        };
        let local: Vec<InstanceRow> = listing
            .iter()
            .filter(|i| i.id != 9)
            .map(|i| row(i.label.as_deref().unwrap(), Some(i.id as i64), LOADING, 0.4))
            .collect();
        let rec = reconcile(
            &input(local, vec![], Some(&listing), Some(&demand)),
            INTENT_GRACE_MS,
        );
        let state = |id: i64| {
            rec.rows
                .iter()
                .find(|r| r.vast_id == Some(id))
                .map(|r| r.state.clone())
                .unwrap()
        };
        assert_eq!(state(1), LOADING);
        assert_eq!(state(2), LOADING);
        assert_eq!(state(3), BOOTED);
        assert_eq!(state(4), DEAD);
        assert_eq!(state(5), DEAD);
        assert_eq!(state(6), DEAD);
        assert_eq!(state(7), PROVING);
        assert_eq!(state(8), REGISTERED, "matched by public IP");
        assert_eq!(state(10), LOADING, "unknown status strings stay opaque");
        assert_eq!(rec.foreign, vec![9]);
        assert!(rec.rows.iter().all(|r| r.vast_id != Some(9)));
        let by_ip = rec.rows.iter().find(|r| r.vast_id == Some(8)).unwrap();
        assert_eq!(by_ip.machine_name.as_deref(), Some("curio-host-8"));
        assert!(rec
            .changes
            .contains(&"instance 4 \"fleetagent-exited\": loading -> dead".to_string()));

        let snap = Snapshot {
            now: NOW,
            instances: rec.rows.clone(),
            ..Default::default()
        };
        let mut c = config();
        c.policy.stuck_loading_mins = 4;
        let flags: Vec<(i64, String)> = snap
            .flagged(&c)
            .into_iter()
            .map(|f| (f.vast_id, f.why))
            .collect();
        assert_eq!(
            flags,
            vec![
                (1, "loading 5m".to_string()),
                (2, "loading 5m".to_string()),
                (4, "exited".to_string()),
                (5, "offline".to_string()),
                (10, "loading 5m".to_string()),
            ]
        );
        c.policy.stuck_loading_mins = 30;
        assert_eq!(snap.flagged(&c).len(), 2);
    }

    #[test]
    fn ip_fallback_only_when_unambiguous() {
        let mut a = inst(1, "fleetagent-a", Some("running"));
        let mut b = inst(2, "fleetagent-b", Some("running"));
        a.public_ip = Some("203.0.113.5".into());
        b.public_ip = Some("203.0.113.5".into());
        let workers = vec![worker("gpu-box", "203.0.113.5:12300", 0)];
        assert!(match_workers(&[&a, &b], &workers).is_empty());
        b.public_ip = Some("203.0.113.6".into());
        assert_eq!(match_workers(&[&a, &b], &workers).get(&1), Some(&0));
        // A name match wins over an IP match, and a worker matches once.
        let workers = vec![worker("fleetagent-b", "203.0.113.5:12300", 1)];
        let m = match_workers(&[&a, &b], &workers);
        assert_eq!(m.get(&2), Some(&0));
        assert!(!m.contains_key(&1));
        assert_eq!(host_of("[::1]:12300"), "::1");
    }

    #[test]
    fn adoption_intents_and_gone() {
        let listing = vec![
            inst(11, "fleetagent-r5-aaaa", Some("loading")),
            inst(12, "fleetagent-stray", None),
        ];
        let local = vec![
            row("fleetagent-r5-aaaa", None, LAUNCHING, 0.4),
            row("fleetagent-old", Some(3), PROVING, 0.4),
            row("fleetagent-r5-bbbb", None, LAUNCHING, 0.4),
            row("fleetagent-r5-cccc", None, LAUNCHING, 0.4),
        ];
        let intents = vec![
            intent(1, "fleetagent-r5-aaaa", NOW - MIN),
            intent(2, "fleetagent-r5-bbbb", NOW - MIN),
            intent(3, "fleetagent-r5-cccc", NOW - INTENT_GRACE_MS),
        ];
        let rec = reconcile(
            &input(local, intents, Some(&listing), None),
            INTENT_GRACE_MS,
        );
        let find = |l: &str| rec.rows.iter().find(|r| r.label == l).cloned();
        // The crash case: an open intent whose instance exists is recorded, not re-created.
        let a = find("fleetagent-r5-aaaa").unwrap();
        assert_eq!(
            (a.vast_id, a.state.as_str(), a.adopted),
            (Some(11), LOADING, false)
        );
        assert!(rec.settle.contains(&(
            1,
            "ok",
            Some(11),
            "seen in the listing as instance 11".into()
        )));
        // Ours by label, never recorded: adopted.
        let stray = find("fleetagent-stray").unwrap();
        assert!(stray.adopted);
        assert_eq!(stray.vast_id, Some(12));
        // Listed no more: gone.
        let old = find("fleetagent-old").unwrap();
        assert_eq!(old.state, GONE);
        assert_eq!(old.gone_at, Some(NOW));
        // Young intent kept, old one failed and its row dropped.
        assert_eq!(find("fleetagent-r5-bbbb").unwrap().state, LAUNCHING);
        assert!(find("fleetagent-r5-cccc").is_none());
        assert_eq!(rec.deleted, vec!["fleetagent-r5-cccc".to_string()]);
        assert!(rec.settle.iter().any(|s| s.0 == 3 && s.1 == "failed"));
        assert_eq!(rec.changes.len(), 4, "{:?}", rec.changes);
        assert!(rec.changes.iter().any(|c| c.contains("adopted")));
    }

    #[test]
    fn failed_probe_keeps_curio_states() {
        let listing = vec![
            inst(1, "fleetagent-p", Some("running")),
            inst(2, "fleetagent-e", Some("exited")),
        ];
        let mut p = row("fleetagent-p", Some(1), PROVING, 0.4);
        p.machine_name = Some("fleetagent-p".into());
        let e = row("fleetagent-e", Some(2), REGISTERED, 0.4);
        let rec = reconcile(
            &input(vec![p, e], vec![], Some(&listing), None),
            INTENT_GRACE_MS,
        );
        assert_eq!(rec.rows[0].state, PROVING);
        assert_eq!(rec.rows[0].machine_name.as_deref(), Some("fleetagent-p"));
        // vast.ai's own word still counts.
        assert_eq!(rec.rows[1].state, DEAD);
        assert_eq!(rec.changes.len(), 1, "{:?}", rec.changes);
    }

    #[test]
    fn failed_listing_keeps_the_table() {
        let local = vec![row("fleetagent-x", Some(3), PROVING, 0.4)];
        let intents = vec![intent(1, "fleetagent-y", NOW - 3 * INTENT_GRACE_MS)];
        let rec = reconcile(&input(local.clone(), intents, None, None), INTENT_GRACE_MS);
        assert_eq!(rec.rows, local);
        assert!(rec.settle.is_empty() && rec.changes.is_empty() && rec.deleted.is_empty());
    }

    #[test]
    fn duplicate_labels_both_kept() {
        let listing = vec![
            inst(1, "fleetagent-dup", Some("running")),
            inst(2, "fleetagent-dup", Some("running")),
        ];
        let rec = reconcile(
            &input(vec![], vec![], Some(&listing), None),
            INTENT_GRACE_MS,
        );
        let labels: Vec<&str> = rec.rows.iter().map(|r| r.label.as_str()).collect();
        assert_eq!(labels, vec!["fleetagent-dup", "fleetagent-dup~2"]);
    }

    #[test]
    fn spend_counts_hours_alive_today() {
        let day = NOW - NOW.rem_euclid(DAY_MS);
        let mut a = row("a", Some(1), PROVING, 1.0);
        a.created_at = day - 5 * 60 * MIN; // yesterday: only today's part counts
        let mut b = row("b", Some(2), GONE, 2.0);
        b.created_at = day;
        b.gone_at = Some(day + 30 * MIN);
        let now = day + 2 * 60 * MIN;
        let spent = spend_since(&[a, b], day, now);
        assert!((spent - 3.0).abs() < 1e-9, "{spent}");
    }

    #[test]
    fn ours_by_prefix_and_dash() {
        assert!(is_ours(Some("fleetagent-r1-abc"), "fleetagent"));
        assert!(!is_ours(Some("fleetagent2-x"), "fleetagent"));
        assert!(!is_ours(Some("fleetagent-"), "fleetagent"));
        assert!(!is_ours(None, "fleetagent"));
    }
}
