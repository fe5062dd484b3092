//! `instances list [--offline] [--json]`: fleetagent's instance table joined with vast.ai's
//! listing; other installs' instances under our prefix shown apart. `instances stop ID
//! [--force] [--reason]`: an operator stop through the same stop tool and protections as the
//! model's (`--force` lifts them), judged on what fleetagent knows and one listing (no demand
//! probe); a refusal exits 1 with one line. `instances stop --all --reason`: the panic button.

use std::collections::HashSet;

use anyhow::{bail, Result};
use serde_json::{json, Value};

use crate::cli::{InstancesCommand, InstancesListArgs, InstancesStopArgs};
use crate::clock::human_duration;
use crate::cmd::App;
use crate::fleet::{self, LABEL_CHARS};
use crate::run::observe;
use crate::services;
use crate::store::{actions, events, instances};
use crate::text::{clip, quote};
use crate::tools::{self, Actor, ToolCtx};
use crate::vast::Instance;

pub fn run(app: &App, command: &InstancesCommand) -> Result<()> {
    match command {
        InstancesCommand::List(a) => list(app, a),
        InstancesCommand::Stop(a) => stop(app, a),
    }
}

fn list(app: &App, args: &InstancesListArgs) -> Result<()> {
    let (loaded, _dir, store) = super::open_for_report_despite_typos(app)?;
    let config = &loaded.config;
    let rows = instances::live(&store.conn)?;
    // A simulation's instances are the simulator's: vast.ai is not asked about them.
    let simulated = crate::store::sim_config::read(&store.conn)?.is_some();
    if simulated && !args.offline {
        crate::journal::eprint(
            crate::journal::NOTICE_PRIORITY,
            "fleetagent: a simulation's database (sim --state-dir): its table only, vast.ai not asked",
        );
    }
    let (listing, listing_error): (Option<Vec<Instance>>, Option<String>) =
        if args.offline || simulated {
            (None, None)
        } else {
            match services::build_vast(config, &app.env, app.clock.clone())? {
                None => (None, Some(fleet::NO_VAST_KEY.to_string())),
                Some(vast) => {
                    crate::output::waiting("vast.ai", services::vast_call_bound(config));
                    match vast.list_instances() {
                        Ok(l) => (Some(l), None),
                        Err(e) => (None, Some(clip(&e.to_string(), 300))),
                    }
                }
            }
        };
    // A simulation's table is read as of its last pass, as `inspect` reads it (its ages
    // read months at the wall clock).
    let now = super::inspect::as_of(app, &store)?;
    let prefix = &config.vast.label_prefix;
    let install_id = crate::store::ops::install_id(&store.conn)?;
    let listed = |id: Option<i64>| -> Option<&Instance> {
        let id = id?;
        listing.as_ref()?.iter().find(|i| i.id as i64 == id)
    };
    let mut out: Vec<Value> = Vec::new();
    let mut seen: HashSet<u64> = HashSet::new();
    for r in &rows {
        let live = listed(r.vast_id);
        if let Some(i) = live {
            seen.insert(i.id);
        }
        let vast_status = match (&listing, live) {
            (None, _) => Value::Null,
            (Some(_), Some(i)) => json!(i.actual_status.as_deref().unwrap_or("null")),
            (Some(_), None) if r.vast_id.is_some() => json!("not listed"),
            (Some(_), None) => json!("not yet listed"),
        };
        out.push(json!({
            "id": r.vast_id,
            "label": r.label,
            "state": r.state,
            "vast_status": vast_status,
            "gpu": r.gpu_name,
            "dph": r.dph,
            // What it bills now: a stopped instance its disk alone.
            // Unknown, not $0, for one vast.ai lists without a price (the caps count it at
            // the most one may cost).
            "bills_dph": (!crate::fleet::money::is_unpriced(r))
                .then(|| crate::fleet::dph_of(std::slice::from_ref(r))),
            "age_secs": (now - r.created_at).max(0) / 1000,
            "curio_machine": r.machine_name,
            "adopted": r.adopted,
            "tracked": true,
        }));
    }
    let mut not_ours = 0;
    let mut others: Vec<Value> = Vec::new();
    for i in listing.iter().flatten() {
        if seen.contains(&i.id) {
            continue;
        }
        let whose = fleet::owner(i.label.as_deref(), prefix, &install_id);
        if let fleet::Owner::OtherInstall(other) = whose {
            others.push(json!({
                "id": i.id,
                "label": i.label,
                "install_id": other,
                "vast_status": i.actual_status.as_deref().unwrap_or("null"),
                "gpu": i.gpu_name,
                "dph": i.dph_total,
            }));
        } else if whose == fleet::Owner::Ours {
            out.push(json!({
                "id": i.id,
                "label": i.label,
                "state": "untracked",
                "vast_status": i.actual_status.as_deref().unwrap_or("null"),
                "gpu": i.gpu_name,
                "dph": i.dph_total,
                "age_secs": i.start_date.map(|s| ((now as f64 / 1000.0) - s).max(0.0) as i64),
                "curio_machine": Value::Null,
                "adopted": false,
                "tracked": false,
            }));
        } else {
            not_ours += 1;
        }
    }

    if args.json {
        let doc = json!({
            "install_id": install_id,
            "instances": out,
            "other_installs": others,
            "not_ours": listing.as_ref().map(|_| not_ours),
            "listing_error": listing_error,
            "offline": args.offline || simulated,
        });
        crate::outln!("{}", serde_json::to_string_pretty(&doc)?);
        super::refused_after_report(&loaded)?;
        return blind(listing_error.as_deref());
    }
    if let Some(note) = follower_note(config, &app.env, &store.conn, &install_id) {
        crate::outln!("{note}");
    }
    // Without the listing, the last line (the error, on stderr) says so.
    if out.is_empty() && listing_error.is_some() {
        crate::outln!("no instances in fleetagent's table (what vast.ai bills is unknown)");
    } else if out.is_empty() {
        crate::outln!("no instances");
    } else {
        crate::outln!(
            "{:<10} {:<32} {:<10} {:<12} {:<12} {:>7} {:>7}  CURIO",
            "ID",
            "LABEL",
            "STATE",
            "VAST",
            "GPU",
            "$/H",
            "AGE"
        );
        for v in &out {
            let s = |k: &str| {
                v[k].as_str()
                    .map(String::from)
                    .unwrap_or_else(|| "-".into())
            };
            crate::outln!(
                "{:<10} {:<32} {:<10} {:<12} {:<12} {:>7} {:>7}  {}",
                v["id"]
                    .as_i64()
                    .map(|i| i.to_string())
                    .unwrap_or_else(|| "-".into()),
                clip(&s("label"), 32),
                s("state"),
                clip(&s("vast_status"), 12),
                clip(&s("gpu"), 12),
                v["bills_dph"]
                    .as_f64()
                    .or_else(|| v["dph"].as_f64())
                    .map(|d| format!("{d:.3}"))
                    .unwrap_or_else(|| "?".into()),
                v["age_secs"]
                    .as_i64()
                    .map(|a| human_duration(a * 1000))
                    .unwrap_or_else(|| "-".into()),
                clip(&s("curio_machine"), LABEL_CHARS),
            );
        }
    }
    if !others.is_empty() {
        crate::outln!(
            "{} instance(s) under our prefix belong to other installs (ours carry install id {install_id}); never counted nor stopped by this one:",
            others.len()
        );
        for o in &others {
            crate::outln!(
                "  {:<10} {:<32} install {}",
                o["id"],
                clip(o["label"].as_str().unwrap_or("-"), 32),
                o["install_id"].as_str().unwrap_or("?")
            );
        }
    }
    if not_ours > 0 {
        crate::outln!(
            "{not_ours} other instance(s) on the account are not ours (not under our label prefix {prefix:?})"
        );
    }
    super::refused_after_report(&loaded)?;
    blind(listing_error.as_deref())
}

/// With `[ha]` enabled, on a host that does not lead: its table is its copy as of its last
/// lead (empty when it never led), and the shared fleet may read as another install's when
/// this copy never led (its own install id is still `init`'s). The line says so, above the
/// list, so that the fleet is not taken for a stray install's.
fn follower_note(
    config: &crate::config::Config,
    env: &crate::env::Env,
    conn: &rusqlite::Connection,
    install_id: &str,
) -> Option<String> {
    let settings = crate::ha::node::Settings::of(config, env).ok()??;
    let status = crate::ha::status::read(&settings);
    if let Some(e) = &status.error {
        return Some(format!(
            "the shared database cannot be read, so whether this host ({}) leads is unknown: {e}",
            settings.host
        ));
    }
    if status.role == "leader" {
        return None;
    }
    if let Ok(Some(line)) = crate::ha::mirror::foreign_state(conn, status.install_id.as_deref()) {
        return Some(format!(
            "this host ({}) does not lead: {line}; it refuses to lead (`fleetagent doctor`)",
            settings.host
        ));
    }
    let leader = match (&status.holder, status.lease_left_secs) {
        (Some(h), Some(left)) if left > 0.0 => format!("{h} leads"),
        _ => "no host leads now".to_string(),
    };
    let shared = match status.install_id.as_deref() {
        Some(shared) if shared != install_id => format!(
            "; the shared fleet is install {shared}'s, listed below as another install's because this host has not led yet"
        ),
        _ => String::new(),
    };
    Some(format!(
        "this host ({}) follows ({leader}): its table is its copy as of its last lead{shared}; `fleetagent instances list` on the leader shows the fleet",
        settings.host
    ))
}

/// The list was shown without vast.ai's listing (asked for, not `--offline`): exit 1, so that
/// a script (or an operator reading `$?`) never takes fleetagent's table for the account.
fn blind(listing_error: Option<&str>) -> Result<()> {
    match listing_error {
        Some(e) => anyhow::bail!(
            "vast.ai's listing failed ({e}): what is shown is fleetagent's own table, not what the account bills"
        ),
        None => Ok(()),
    }
}

fn stop(app: &App, args: &InstancesStopArgs) -> Result<()> {
    let Some(id) = args.id.filter(|_| !args.all) else {
        return stop_all(app, args);
    };
    let (loaded, dir, mut store) = super::open_for_brake(app, "instances stop")?;
    // Whether a stop keeps the disk is the operator's word: a `vast.stop_mode` left out would
    // destroy by its default (a walkthrough's `stop_mode = "Stop"` destroyed a disk kept on
    // purpose). `--all` destroys whatever it says.
    if loaded.stop_mode_unknown() {
        return Err(crate::error::usage(format!(
            "config {}: vast.stop_mode cannot be read, or a key spelled like it was left out (the warning above names it), so whether this stop keeps instance {id}'s disk (\"stop\") or destroys it (\"destroy\") is not known: nothing was stopped; fix the key and run this again",
            loaded.path.display()
        )));
    }
    // Typed: a pass running now holds its launches from here, not from vast.ai's answer
    // (a walkthrough saw a replacement rented while the destroy was on its way). Only a live
    // instance of ours is marked (a stop of another id holds nothing): one the table knows
    // now, one the listing shows ours once it is read (`stop_one`).
    let mut typed = Typed {
        id,
        at: app.now(),
        mark: None,
    };
    let ours = instances::by_vast_id(&store.conn, id)?.is_some_and(|r| r.gone_at.is_none());
    if ours {
        typed.mark = Some(mark_in_flight(&store, &loaded.config, typed.at, id)?);
    }
    let result = stop_one(app, args, &mut typed, &loaded, &dir, &mut store);
    // Recorded (dated when typed) or refused: this stop's mark goes, the others' stay.
    let cleared = typed
        .mark
        .map_or(Ok(()), |m| actions::operator_stop_landed(&store.conn, m));
    result?;
    cleared
}

/// An operator's stop as typed: the instance, when, and its mark in flight (if marked).
struct Typed {
    id: i64,
    at: crate::clock::Millis,
    mark: Option<i64>,
}

/// Mark an operator's stop of `id` in flight, typed at `typed`; its row.
fn mark_in_flight(
    store: &crate::store::Store,
    config: &crate::config::Config,
    typed: crate::clock::Millis,
    id: i64,
) -> Result<i64> {
    // Kept past the hold until a pass could settle it (`operator_stops::settle_lost`: with a
    // hold under half an hour, a second stop dropped the first's unsettled mark, and a kept
    // disk was destroyed as stopped too long: a re-test).
    let hold_ms = (config.policy.operator_hold_mins as i64).saturating_mul(60_000);
    let keep_ms = hold_ms.max(2 * actions::MARK_SETTLE_MS);
    actions::operator_stop_typed(&store.conn, typed, id, typed - keep_ms)
}

/// [`stop`] of one instance, with the store opened and the stop marked in flight.
fn stop_one(
    app: &App,
    args: &InstancesStopArgs,
    typed: &mut Typed,
    loaded: &crate::config::LoadedConfig,
    dir: &std::path::Path,
    store: &mut crate::store::Store,
) -> Result<()> {
    let id = typed.id;
    let reason = args.reason.as_deref().unwrap_or("operator request");
    let config = &loaded.config;
    let services = vast_only(app, config)?;
    if services.vast.is_none() && !config.policy.dry_run {
        bail!("no vast.ai API key: set VAST_API_KEY or provide the vast_api_key credential");
    }
    // What fleetagent knows and one listing: no demand probe (a slow Curio must not hold an
    // operator's stop).
    if services.vast.is_some() {
        crate::output::waiting("vast.ai", services::vast_call_bound(config));
    }
    let mut snapshot = observe::stop_view(store, config, &services, app.clock.as_ref())?;
    if typed.mark.is_none() && snapshot.instances.iter().any(|r| r.vast_id == Some(id)) {
        // Ours by the listing, not yet in the table (a re-test): marked before the stop goes,
        // at the time read now (a clock repaired during the listing dated the other marks;
        // one dated by the slow clock read hours old).
        typed.mark = Some(mark_in_flight(store, config, app.now(), id)?);
    }
    // The operator's destroy is sent even when the listing went unanswered.
    ask_again(&services);
    let now = app.now();
    let call_id = format!("operator-{now}");
    let result = {
        let mut ctx = operator_ctx(
            app,
            config,
            &services,
            store,
            &mut snapshot,
            call_id.clone(),
        );
        tools::stop::stop(&mut ctx, id, reason, args.force)?
    };
    // The hold, and a `resume` or `message` after the stop, count from when it was typed
    // (one typed while the stop was on its way was outlived by the hold: a re-test).
    // From the mark, which a clock repair meanwhile dated with the rest (dated by the slow
    // clock it was typed on, a stop that landed after the repair read hours old: a re-test).
    if let Some(m) = typed.mark {
        actions::date_operator_stop(&store.conn, &call_id, m)?;
    }
    if let Some(code) = result.error_code() {
        let message = message_of(&result);
        let hint = if code == "protected" && !args.force && !message.contains("--force") {
            " (`--force` lifts the protections)"
        } else {
            ""
        };
        // vast.ai's failure is no guardrail's refusal.
        let what = if code == "vast_error" {
            "failed at vast.ai"
        } else {
            "refused"
        };
        bail!("{what} ({code}): {message}{hint}");
    }
    if let Some(already) = result.content["already"].as_str() {
        // Nothing changed: nothing for the agent to hear of.
        crate::outln!("instance {id} already {already}");
        return Ok(());
    }
    let done = result.content["done"].as_str().unwrap_or("stopped");
    let reason = format!(
        "operator {done} instance {id}{}",
        if args.force { " (forced)" } else { "" }
    );
    // The agent hears of it on its next pass, like any other change.
    let event = events::insert(&store.conn, 1, "operator", &reason, None, now)?;
    store.fence("instances stop")?;
    crate::trigger::ring(dir, event, 1, &reason, now)?;
    // Said once the listing agrees: "destroyed" printed before "NOT done: vast.ai still lists
    // it running" read as both (a stop vast.ai answered no_such_instance: a walkthrough).
    let already = result.content["note"].is_string();
    // Said where it begins: the soak walkthrough's operator did not know of the hold. Only
    // a hold recorded: a stop of an instance not in our table (another prefix's) holds
    // nothing, and the next pass launched beside the line that said it would not.
    if let Some(hold) = crate::tools::brake::operator_hold(&store.conn, config, now)? {
        let mins = ((hold.until - now).max(0) + 59_999) / 60_000;
        crate::outln!(
            "operator hold: the rules and the floor launch nothing for {mins} min (policy.operator_hold_mins), WORKERS DEAD's launches included; `fleetagent resume` or a message ends it"
        );
    }
    crate::metrics::after_operator(config, dir, now);
    let stopped = (done == "stopped").then_some(id);
    let left = still_listed(
        &services,
        app.clock.as_ref(),
        &[id],
        stopped,
        config.policy.dry_run,
    );
    if left > 0 {
        return Err(crate::error::Quiet(crate::error::EXIT_RUNTIME).into());
    }
    if already {
        crate::outln!("instance {id} {done}: vast.ai answered that it was already gone");
    } else {
        crate::outln!("instance {id} {done}");
    }
    Ok(())
}

/// How long `instances stop` waits before it lists again an instance vast.ai still showed
/// right after acknowledging its stop or destroy (its listing lags its answers by seconds).
const LISTING_LAG: std::time::Duration = std::time::Duration::from_secs(3);

/// After the operator's acknowledged stops and destroys: list once (and once more after
/// [`LISTING_LAG`]), and name each instance vast.ai still lists as billing: acknowledged is
/// not done (a destroy that did not take, seen on a misbehaving API), and an operator who
/// pressed the panic button must not read "destroyed" while it bills. `stopped`: the one
/// that was stopped, not destroyed (listed stopped is then fine). Each one left is said on
/// stdout and at error; how many were left (the caller exits 1 for any).
fn still_listed(
    services: &services::Services,
    clock: &dyn crate::clock::Clock,
    ids: &[i64],
    stopped: Option<i64>,
    dry_run: bool,
) -> usize {
    if dry_run || ids.is_empty() {
        return 0;
    }
    let listed = || -> Option<Vec<(i64, String)>> {
        ask_again(services);
        let list = observe::list_ours(services).0?;
        Some(
            list.iter()
                .filter(|i| ids.contains(&(i.id as i64)))
                .filter_map(|i| {
                    let status = i.actual_status.as_deref().unwrap_or("(no status)").trim();
                    let fine = crate::fleet::reconcile::being_destroyed(i)
                        || (stopped == Some(i.id as i64) && status.eq_ignore_ascii_case("stopped"));
                    (!fine).then(|| (i.id as i64, clip(status, 40)))
                })
                .collect(),
        )
    };
    let Some(mut left) = listed() else {
        return 0;
    };
    if !left.is_empty() {
        clock.sleep(LISTING_LAG);
        left = listed().unwrap_or(left);
    }
    for (id, status) in &left {
        let line = format!(
            "instance {id}: NOT done: vast.ai acknowledged it, but still lists it {}: it bills; a pass sends the call again once vast.ai has had 2 minutes to act; check vast.ai's console",
            quote(status, 40)
        );
        crate::outln!("{line}");
        crate::journal::eprint(crate::journal::ERR, &format!("fleetagent: {line}"));
    }
    left.len()
}

/// `instances stop --all --reason TEXT`, the panic button: pause first (open-ended, with that
/// reason), then destroy every instance of ours (tracked rows, and listed ones under our
/// prefix with our install id or none), protections lifted, whatever `vast.stop_mode` says.
/// One line per instance and a total; exit 1 when one could not be destroyed.
fn stop_all(app: &App, args: &InstancesStopArgs) -> Result<()> {
    let reason = args
        .reason
        .as_deref()
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .ok_or_else(|| crate::error::usage("instances stop --all needs --reason TEXT"))?;
    // Refused before anything was sent (a read-only state dir, a newer schema, an HA
    // follower): the operator must know the bill runs on, and where else to stop it.
    let refused = |e: anyhow::Error| {
        e.context("instances stop --all destroyed nothing and the fleet bills on (vast.ai's console destroys by hand: https://cloud.vast.ai/instances/)")
    };
    let (loaded, dir, mut store) = super::open_for_brake(app, "instances stop").map_err(refused)?;
    let config = &loaded.config;
    let now = app.now();
    // A pause that cannot be written (an immutable database) refuses the button too.
    super::pause::hold(&store, None, reason, "instances stop --all", now).map_err(refused)?;
    crate::outln!("paused until `fleetagent resume`: {reason}");
    let services = vast_only(app, config).map_err(refused)?;
    if services.vast.is_none() && !config.policy.dry_run {
        bail!("no vast.ai API key: nothing was destroyed (the pause stays); set VAST_API_KEY or provide the vast_api_key credential, then run this again");
    }
    if services.vast.is_some() {
        crate::output::waiting("vast.ai", services::vast_call_bound(config));
    }
    let mut snapshot = observe::stop_view(&store, config, &services, app.clock.as_ref())?;
    if let Some(e) = &snapshot.listing_error {
        crate::journal::eprint(
                crate::journal::WARNING,
                &format!(
                    "fleetagent: the vast.ai listing failed ({}): destroying what fleetagent's table knows; run this again once vast.ai answers",
                    clip(e, 200)
                )
            );
    }
    let targets: Vec<(i64, String)> = snapshot
        .instances
        .iter()
        .filter_map(|r| Some((r.vast_id?, r.label.clone())))
        .collect();
    let unlisted: Vec<String> = snapshot
        .instances
        .iter()
        .filter(|r| r.vast_id.is_none())
        .map(|r| r.label.clone())
        .collect();
    let (mut destroyed, mut failed, mut dry) = (0, 0, 0);
    let mut acknowledged = Vec::new();
    for (id, label) in &targets {
        // Each destroy is sent, whatever the listing or the one before it met: the panic
        // button tries every instance (one line each, as they go).
        ask_again(&services);
        // Marked in flight as a single stop is: a button killed after vast.ai destroyed
        // and before the ledger row leaves what a pass settles as the operator's destroy
        // (`operator_stops::settle_lost`), not an instance that vanished.
        let mark = mark_in_flight(&store, config, app.now(), *id)?;
        let result = {
            let call_id = format!("operator-all-{}-{id}", app.now());
            let mut ctx = operator_ctx(app, config, &services, &mut store, &mut snapshot, call_id);
            tools::stop::stop_as(&mut ctx, *id, reason, true, true)?
        };
        actions::operator_stop_landed(&store.conn, mark)?;
        let name = format!("instance {id} {}", quote(label, LABEL_CHARS));
        match (result.error_code(), result.content["already"].as_str()) {
            (Some("dry_run"), _) => {
                dry += 1;
                crate::outln!("{name}: would be destroyed (policy.dry_run)");
            }
            (Some(code), _) => {
                failed += 1;
                crate::outln!("{name}: NOT destroyed ({code}): {}", message_of(&result));
            }
            (None, Some(already)) => crate::outln!("{name}: already {already}"),
            (None, None) => {
                destroyed += 1;
                acknowledged.push(*id);
                crate::outln!("{name}: destroyed");
            }
        }
    }
    for label in &unlisted {
        crate::outln!(
            "launch {}: not on vast.ai's listing yet (no id): run this again in a minute",
            quote(label, LABEL_CHARS)
        );
    }
    // Ours under a prefix changed since (as the last listing stored them): not destroyed by
    // the button, which goes by vast.label_prefix; said, as they bill (a walkthrough).
    let install = crate::store::ops::install_id(&store.conn)?;
    let elsewhere: Vec<_> = crate::store::ops::foreign_installs(&store.conn)?
        .0
        .into_iter()
        .filter(|f| f.install_id == install)
        .collect();
    for f in &elsewhere {
        crate::outln!(
            "instance {} {}: carries this install's id under another prefix than vast.label_prefix: NOT destroyed (`fleetagent instances stop {} --force` destroys it)",
            f.vast_id,
            quote(&f.label, LABEL_CHARS),
            f.vast_id
        );
    }
    // Acknowledged is not done: what vast.ai still lists is not counted as destroyed.
    let left = still_listed(
        &services,
        app.clock.as_ref(),
        &acknowledged,
        None,
        config.policy.dry_run,
    );
    let destroyed = destroyed - left;
    let others = snapshot.other_installs.len();
    crate::outln!(
        "destroyed {destroyed} of {} instance(s) of ours{}{}{}; paused until `fleetagent resume`",
        targets.len(),
        if failed > 0 {
            format!(", {failed} failed")
        } else {
            String::new()
        },
        if left > 0 {
            format!(", {left} acknowledged but still listed")
        } else {
            String::new()
        },
        if others > 0 {
            format!(" ({others} of other installs left alone)")
        } else {
            String::new()
        }
    );
    let line = format!(
        "operator destroyed {destroyed} instance(s) (instances stop --all): {}",
        clip(reason, 200)
    );
    let now = app.now();
    let event = events::insert(&store.conn, 1, "operator", &line, None, now)?;
    store.fence("instances stop --all")?;
    crate::trigger::ring(&dir, event, 1, &line, now)?;
    crate::metrics::after_operator(config, &dir, now);
    let mut short = Vec::new();
    if dry > 0 {
        short.push(format!("{dry} not destroyed: policy.dry_run = true sends nothing to vast.ai (set it to false and run this again, or destroy them in vast.ai's console)"));
    }
    if failed > 0 {
        short.push(format!("{failed} failed"));
    }
    if left > 0 {
        short.push(format!("{left} acknowledged but still listed"));
    }
    if !unlisted.is_empty() {
        short.push(format!("{} launch(es) not listed yet", unlisted.len()));
    }
    if !elsewhere.is_empty() {
        short.push(format!("{} under another prefix left", elsewhere.len()));
    }
    if snapshot.listing_error.is_some() {
        short.push(
            "the listing failed: instances fleetagent's table does not know were not seen".into(),
        );
    }
    if !short.is_empty() {
        // Said where `journalctl -p err` looks: the bill may not have stopped.
        crate::journal::eprint(
            crate::journal::ERR,
            &format!(
                "fleetagent: instances stop --all: instances of ours may still bill ({}); run it again, and check `fleetagent instances list`",
                short.join("; ")
            ),
        );
        return Err(crate::error::Quiet(crate::error::EXIT_RUNTIME).into());
    }
    Ok(())
}

/// Let the next vast.ai call go out even after one of this process went unanswered.
fn ask_again(services: &services::Services) {
    if let Some(vast) = &services.vast {
        vast.ask_again();
    }
}

/// Only the vast.ai client: an operator's stop never probes demand.
fn vast_only(app: &App, config: &crate::config::Config) -> Result<services::Services> {
    Ok(services::Services {
        vast: services::build_vast(config, &app.env, app.clock.clone())?,
        ..Default::default()
    })
}

fn operator_ctx<'a>(
    app: &'a App,
    config: &'a crate::config::Config,
    services: &'a services::Services,
    store: &'a mut crate::store::Store,
    snapshot: &'a mut fleet::Snapshot,
    call_id: String,
) -> ToolCtx<'a> {
    ToolCtx {
        store,
        ctx: crate::services::Ctx {
            config,
            env: &app.env,
            clock: app.clock.as_ref(),
            services,
        },
        snapshot,
        run_id: 0,
        actor: Actor::Operator,
        call_id,
    }
}

fn message_of(result: &tools::ToolResult) -> &str {
    result
        .content
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("")
}
