//! The pass's observe step, the I/O around the pure fleet core: one demand probe, one vast.ai
//! listing, reconciliation with the local table and open intents (`fleet::reconcile`), and
//! one write transaction recording what changed as lifecycle events of this pass.

use std::collections::HashSet;

use anyhow::{Context, Result};
use rusqlite::Connection;

use crate::clock::{Clock, Millis};
use crate::config::Config;
use crate::demand::Demand;
use crate::fleet::rates::measure;
use crate::fleet::{
    is_billing_state, reconcile, spend_since, work_waiting_since, ReconcileInput, Reconciled,
    Snapshot, INTENT_GRACE_MS, NO_VAST_KEY,
};
use crate::services::Services;
use crate::store::actions;
use crate::store::bad_hosts;
use crate::store::curio;
use crate::store::instances;
use crate::store::ops;
use crate::store::session::{self, Streaks};
use crate::store::{events, Store};
use crate::text::clip;
use crate::tools::brake::operator_hold;
use crate::vast::Instance;

const DAY_MS: Millis = 86_400_000;

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
    services: &Services,
    clock: &dyn Clock,
    run_id: i64,
) -> Result<Snapshot> {
    let (demand, demand_error) = probe_demand(services, config);
    let listed_at = clock.now_ms();
    let (listing, listing_error) = list_ours(services);
    let (listing, listing_error) =
        super::vanished::confirm(&store.conn, services, listing, listing_error)?;
    let fil_usd = services.fil_usd.as_ref().map(|s| {
        s.fil_usd().map_err(|e| {
            anyhow::anyhow!(crate::secrets::redact_all(
                &format!("{e:#}"),
                &services.secrets
            ))
        })
    });
    let tx = store
        .immediate()
        .context("cannot begin the fleet reconciliation")?;
    // Now, and the skew as of now, once the write lock is held (a `poll` that held it may
    // have repaired a clock set right meanwhile; the skew read then is the clock's as set).
    let now = clock.now_ms();
    let skew = clock_skew(services, listing_error.as_deref(), now);
    // First the skew: a clock set right after it ran behind dates its slow hours' rows later,
    // before anything reads their ages.
    if let Some(skew) = skew {
        record_skew(&tx, run_id, skew, now)?;
    }
    if let Some(r) = crate::store::clock_step::redate_future(&tx, now)? {
        let line = format!(
            "the clock is {} behind the ledger: it stepped back (NTP, a VM restored from a snapshot); {} row(s) of launches, stops and instances dated after now are dated now, so that the launch window and policy.min_rental_mins count them from now; check the host's clock (timedatectl)",
            crate::clock::human_duration(r.ahead_ms),
            r.rows
        );
        crate::journal::eprint(crate::journal::WARNING, &format!("run {run_id}: {line}"));
        events::insert_claimed(&tx, run_id, 1, "lifecycle", &line, now)?;
    }
    record_fil_usd(&tx, config, fil_usd, now)?;
    let listing_at = listing.as_deref().map(|l| (l, listed_at));
    let rec = reconcile_against(&tx, config, listing_at, demand.as_ref(), now)?;
    let install_id = ops::install_id(&tx)?;
    let prefix = &config.vast.label_prefix;
    if let Some(list) = listing.as_deref() {
        // What this listing saw of other installs under our prefix (doctor names them).
        let tracked: Vec<i64> = rec.rows.iter().filter_map(|r| r.vast_id).collect();
        let seen = crate::fleet::seen_elsewhere(list, prefix, &install_id, &tracked);
        ops::set_foreign_installs(&tx, &seen, now)?;
        if let Some((priority, line)) =
            super::lineage::continue_run_ids(&tx, config, list, run_id, now)?
        {
            crate::journal::eprint(priority, &format!("fleetagent: {line}"));
            events::insert_claimed(&tx, run_id, 1, "lifecycle", &line, now)?;
        }
        // Asked only beside another install's instances (the line's only case).
        let own_none = !rec.other_installs.is_empty() && instances::none_ever(&tx)?;
        if let Some(line) = crate::fleet::identity::new_beside_another(
            config,
            &rec.other_installs,
            run_id,
            own_none,
        ) {
            crate::journal::eprint(crate::journal::ERR, &format!("fleetagent: {line}"));
            events::insert_claimed(&tx, run_id, 1, "lifecycle", &line, now)?;
        }
    }
    let copied_before =
        super::lineage::launched_by_a_copy(&tx, prefix, &install_id, 0, Some(run_id), false)?;
    for row in &rec.rows {
        instances::upsert(&tx, row)?;
    }
    let copied: Vec<_> =
        super::lineage::launched_by_a_copy(&tx, prefix, &install_id, 0, Some(run_id), false)?
            .into_iter()
            .filter(|c| !copied_before.iter().any(|b| b.label == c.label))
            .collect();
    if !copied.is_empty() {
        let line = crate::fleet::copies::line(&copied, &install_id);
        crate::journal::eprint(crate::journal::ERR, &format!("fleetagent: {line}"));
        events::insert_claimed(&tx, run_id, 1, "lifecycle", &line, now)?;
    }
    for label in &rec.deleted {
        instances::delete(&tx, label)?;
    }
    for (id, outcome, instance, detail) in &rec.settle {
        actions::settle(&tx, *id, outcome, *instance, Some(detail), None, now)?;
    }
    if listing.is_some() {
        let before = now - crate::store::operator_stops::MARK_SETTLE_MS;
        for (id, kind) in crate::store::operator_stops::settle_lost(&tx, before, now)? {
            let line = format!("instance {id}: the operator's {kind} of it went through and is recorded now: the command ended before it recorded vast.ai's answer (killed, or cut from the shared database)");
            crate::journal::eprint(
                crate::journal::NOTICE_PRIORITY,
                &format!("run {run_id}: {line}"),
            );
            events::insert_claimed(&tx, run_id, 1, "lifecycle", &line, now)?;
        }
        for (id, kind) in crate::store::stops_in_flight::settle(&tx, now)? {
            let line = format!("instance {id}: an earlier pass's {kind} of it went through and is recorded now: that pass ended before it recorded vast.ai's answer");
            crate::journal::eprint(
                crate::journal::NOTICE_PRIORITY,
                &format!("run {run_id}: {line}"),
            );
            events::insert_claimed(&tx, run_id, 1, "lifecycle", &line, now)?;
        }
    }
    let settled: Vec<i64> = rec.settle.iter().map(|s| s.0).collect();
    for line in &rec.changes {
        events::insert_claimed(&tx, run_id, 1, "lifecycle", line, now)?;
    }
    for line in &rec.unexplained {
        crate::journal::eprint(crate::journal::WARNING, &format!("run {run_id}: {line}"));
    }
    if let Some(line) = crate::fleet::identity::rival_line(&rec.rival_fleet) {
        crate::journal::eprint(crate::journal::WARNING, &format!("run {run_id}: {line}"));
    }
    record_curio(&tx, &rec, demand.as_ref(), now)?;
    // vast.ai's health for `doctor` and the metrics. Without a key the listing's error is
    // `NO_VAST_KEY` (`list_ours`): recorded as a failed listing, so `fleetagent_vast_ok` reads
    // 0 (an earlier success must not keep it at 1 after the key was lost).
    crate::store::ops::record_listing(&tx, listing_error.as_deref().map_or(Ok(()), Err), now)?;
    let bad_until = now + (config.vast.offers.bad_host_hours * 3_600_000.0) as Millis;
    for (_, machine, line) in &rec.overbilled {
        crate::journal::eprint(crate::journal::WARNING, &format!("fleetagent: {line}"));
        events::insert_claimed(&tx, run_id, 1, "lifecycle", line, now)?;
        if let Some(m) = machine {
            bad_hosts::mark(&tx, *m, "billed above its offer", bad_until, now)?;
        }
    }
    // Through the logger (warning in the journal and for `run`; a simulation's passes keep
    // them out of its report's stderr, as every pass's action lines).
    for line in rec.above_offer.iter().chain(&rec.bid_changes) {
        log::warn!(target: crate::journal::NOTICE, "run {run_id}: {line}");
    }
    for (rose, line) in &rec.repriced {
        // A rise is money nobody of ours chose (a price that settled above the offer after a
        // first listing without one: a re-test saw it at notice only).
        let line =
            format!("run {run_id}: {line}: today's spend counts each price for its own hours");
        match rose {
            true => log::warn!(target: crate::journal::NOTICE, "{line}"),
            false => crate::notice!("{line}"),
        }
    }
    for (id, machine) in &rec.newly_outbid {
        if let Some(m) = machine {
            let n = bad_hosts::outbid(&tx, *m, bad_until, now)?;
            if n >= bad_hosts::OUTBID_LIMIT {
                let line = format!(
                    "host {m} (instance {id}) has outbid us {n} times: left out of offer searches for {}h",
                    crate::fleet::num(config.vast.offers.bad_host_hours)
                );
                crate::notice!("run {run_id}: {line}");
                events::insert_claimed(&tx, run_id, 1, "lifecycle", &line, now)?;
            }
        }
    }
    // Once per run; `assemble` reads them back into the snapshot.
    advance_streaks(&tx, run_id, demand.as_ref())?;
    let undone = rec.undone.clone();
    let mut snapshot = assemble(
        &tx,
        config,
        rec,
        demand,
        demand_error,
        listing_error,
        run_id,
        now,
    )?;
    snapshot.other_image = crate::fleet::identity::other_image(listing.as_deref(), config);
    // One sample per pass for `inspect --plot`, in this transaction (see `run::sample`).
    super::sample::record(&tx, &snapshot, config)?;
    tx.commit()?;
    // A launch left open by an earlier pass, settled now by the listing: its line at last.
    for id in settled {
        crate::tools::journal_action(&store.conn, id, None);
    }
    // Outside the transaction: vast.ai's answers may take `vast.timeout_secs` each.
    if !undone.is_empty() && !config.policy.dry_run {
        super::undone::send_again(&store.conn, services, run_id, &undone, clock.now_ms())?;
    }
    Ok(snapshot)
}

/// This host's clock, reading `now`, less vast.ai's, as this process's last answer from
/// vast.ai gave it (`vast::ServerClock::skew_at`), when the listing worked. None when nothing was measured: the listing failed, or no answer
/// carried a `Date` (a proxy that drops it); the last measurement stands then, so that a
/// standing skew is not cleared by an answer that cannot tell.
pub fn clock_skew(services: &Services, listing_error: Option<&str>, now: Millis) -> Option<Millis> {
    let vast = services.vast.as_ref()?;
    if listing_error.is_some() {
        return None;
    }
    vast.server_clock().map(|c| c.skew_at(now))
}

/// Store the skew a listing measured; one beyond `store::clock_step::CLOCK_SKEW_MAX_MS` is
/// said at warning every pass, and to the agent when it begins.
fn record_skew(conn: &Connection, run_id: i64, skew: Millis, now: Millis) -> Result<()> {
    use crate::store::clock_step::{skew_line, store_skew};
    let stored = store_skew(conn, skew, now)?;
    for line in stored.repaired_lines() {
        crate::journal::eprint(crate::journal::WARNING, &format!("run {run_id}: {line}"));
        events::insert_claimed(conn, run_id, 1, "lifecycle", &line, now)?;
    }
    let before = stored.before;
    let Some(line) = skew_line(skew) else {
        return Ok(());
    };
    crate::journal::eprint(crate::journal::WARNING, &format!("run {run_id}: {line}"));
    if before.and_then(skew_line).is_none() {
        events::insert_claimed(conn, run_id, 1, "lifecycle", &line, now)?;
    }
    Ok(())
}

/// What an operator's `instances stop` judges a stop on, outside a pass and without writing
/// anything: the local table as the last pass left it and the last successful demand
/// reading (unknown when older than [`STOP_READING_PERIODS`] timer periods), reconciled
/// with one vast.ai listing. No demand probe and no FIL/USD fetch: a slow Curio or price
/// source never delays an operator's stop. `run_id` is 0.
pub fn stop_view(
    store: &Store,
    config: &Config,
    services: &Services,
    clock: &dyn Clock,
) -> Result<Snapshot> {
    let (demand, demand_error) = last_reading(&store.conn, config, clock.now_ms())?;
    view(store, config, services, clock, demand, demand_error)
}

/// The view [`observe`] would give with this demand reading, without writing anything (no
/// events, no table changes, no probe): one listing (`services.vast`) reconciled with the
/// local table. `run_id` is 0.
pub fn view(
    store: &Store,
    config: &Config,
    services: &Services,
    clock: &dyn Clock,
    demand: Option<Demand>,
    demand_error: Option<String>,
) -> Result<Snapshot> {
    let listed_at = clock.now_ms();
    let (listing, listing_error) = list_ours(services);
    let now = clock.now_ms();
    let rec = reconcile_against(
        &store.conn,
        config,
        listing.as_deref().map(|l| (l, listed_at)),
        demand.as_ref(),
        now,
    )?;
    let mut snapshot = assemble(
        &store.conn,
        config,
        rec,
        demand,
        demand_error,
        listing_error,
        0,
        now,
    )?;
    snapshot.other_image = crate::fleet::identity::other_image(listing.as_deref(), config);
    Ok(snapshot)
}

/// A stored reading older than this many timer periods does not count for an operator's
/// stop: the protections then hold as on a failed probe (`--force` lifts them).
pub const STOP_READING_PERIODS: i64 = 3;

/// The last successful demand reading as a pass stored it, or why it does not count.
fn last_reading(
    conn: &Connection,
    config: &Config,
    now: Millis,
) -> Result<(Option<Demand>, Option<String>)> {
    let (json, at) = curio::last_reading(conn)?;
    let max_age = STOP_READING_PERIODS * config.run.timer_period_secs as Millis * 1000;
    Ok(match (json, at) {
        (Some(j), Some(at)) if now - at <= max_age => match serde_json::from_str(&j) {
            Ok(d) => (Some(d), None),
            Err(e) => (
                None,
                Some(format!(
                    "the stored demand reading is unreadable ({}): no pass has read Curio since",
                    clip(&e.to_string(), 120)
                )),
            ),
        },
        (Some(_), Some(at)) => (
            None,
            Some(format!(
                "the last demand reading is {} old (older than {} timer periods)",
                crate::clock::human_duration(now - at),
                STOP_READING_PERIODS
            )),
        ),
        _ => (
            None,
            Some("no demand reading yet (no pass has read Curio)".into()),
        ),
    })
}

/// Read what reconciliation needs from the table and reconcile (pure from here on).
/// `listing` comes with when it was asked for.
fn reconcile_against(
    conn: &rusqlite::Connection,
    config: &Config,
    listing: Option<(&[Instance], Millis)>,
    demand: Option<&Demand>,
    now: Millis,
) -> Result<Reconciled> {
    let (listing, listed_at) = match listing {
        Some((l, at)) => (Some(l), at),
        None => (None, now),
    };
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
    let our_stops = actions::stopped_by_us(conn)?;
    let our_ends = actions::acknowledged_ends(conn, now - DAY_MS)?;
    let install_id = ops::install_id(conn)?;
    Ok(reconcile(
        &ReconcileInput {
            local,
            taken_labels: taken,
            intents,
            listing,
            demand,
            prefix: &config.vast.label_prefix,
            install_id: &install_id,
            now,
            listed_at,
            our_stops,
            our_ends,
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
    // A clock run ahead of vast.ai's does not empty the window (`clock_step::Ahead`): the
    // launches it dated before it ran ahead count as recent by this clock as they are by
    // vast.ai's (none later than now).
    let ahead = crate::store::clock_step::ahead(conn)?;
    let window_launches =
        actions::launches_since(conn, now - ahead.map_or(0, |a| a.ms) - window_ms)?
            .iter()
            .map(|a| ahead.map_or(a.created_at, |ahead| ahead.recent(a.created_at, now)))
            .collect();
    let day_start = now - now.rem_euclid(DAY_MS);
    let mut alive = instances::alive_since(conn, day_start)?;
    // Rows this reconciliation changed count as they are now, with the paused spans the
    // write keeps (`instances::upsert`; written already by `observe`, not by `view`).
    for r in &rec.rows {
        match alive.iter_mut().find(|a| a.label == r.label) {
            Some(a) => {
                let spans = instances::paused_spans_after(a, r);
                *a = r.clone();
                a.paused_spans = spans;
            }
            None => alive.push(r.clone()),
        }
    }
    alive.retain(|a| !rec.deleted.contains(&a.label));
    let unpriced = crate::fleet::money::unpriced_dph(config).unwrap_or(0.0);
    let spent_today = spend_since(&alive, day_start, now, unpriced);
    // The stored rates (`observe` stored this pass's measurements already), while they count.
    let measured_rates = curio::rate_map(conn, now - crate::fleet::rates::MEASURED_KEEP_MS)?;
    // Already advanced by this pass (observe), or computed the same way (view): the step
    // is idempotent, and an unknown reading keeps what was stored.
    let work_waiting_since =
        work_waiting_since(curio::work_waiting_since(conn)?, demand.as_ref(), now);
    // The price of a proof, over the FIL/USD cache of a command or URL source (`observe`
    // fetched it this pass; `view` fetches nothing).
    let (price, _) = price_over_cache(
        conn,
        config,
        demand.as_ref().and_then(|d| d.ask_price_attofil.as_deref()),
        now,
    )?;
    let (price, price_unknown) = match price {
        Ok(p) => (Some(p), None),
        Err(why) => (None, Some(why)),
    };
    let hold = operator_hold(conn, config, now)?;
    let taskless = demand
        .as_ref()
        .map(|d| crate::fleet::identity::taskless_ours(&rec.rows, &d.taskless))
        .unwrap_or_default()
        .into_iter()
        .map(|(_, line)| line)
        .collect();
    let boots = super::boots::read(conn, &rec.rows, now)?;
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
        // With the paused spans as the write keeps them (`alive`): a pause that ended in this
        // listing is one (a re-test: a spare started by hand, timed from its rental).
        instances: rec
            .rows
            .into_iter()
            .filter(|r| r.gone_at.is_none())
            .map(|mut r| {
                if let Some(a) = alive.iter().find(|a| a.label == r.label) {
                    r.paused_spans.clone_from(&a.paused_spans);
                }
                if let Some(ahead) = ahead {
                    on_vast_time(&mut r, ahead, now);
                }
                r
            })
            .collect(),
        foreign: rec.foreign,
        other_installs: rec.other_installs,
        rival_fleet: rec.rival_fleet,
        changes: rec.changes,
        window_launches,
        spent_today,
        streaks: crate::store::session::streaks(conn)?.0,
        offers: None,
        searches: 0,
        search_quota_this_pass: false,
        measured_rates,
        work_waiting_since,
        silent_destroys_recent: actions::silent_destroys_since(
            conn,
            now - crate::fleet::SILENT_WINDOW_MS,
        )?,
        boot_failures: boots.row,
        started_again: boots
            .started_again
            .into_iter()
            .map(|(id, at)| (id, ahead.map_or(at, |a| a.recent(at, now))))
            .collect(),
        bad_hosts: bad_hosts::current(conn, now)?,
        operator_hosts: actions::operator_hosts_since(
            conn,
            now - (config.policy.operator_hold_mins as Millis).saturating_mul(60_000),
        )?,
        operator_stopped: actions::operator_stopped(conn)?,
        // Set from the listing by the callers (`other_image`); by a launch's search.
        other_image: Vec::new(),
        left_out_offers: Vec::new(),
        // Said within the last day: the quota is daily.
        search_quota: bad_hosts::search_quota(conn)?
            .filter(|(_, at)| now - at < DAY_MS)
            .map(|(reset, _)| reset),
        price,
        price_unknown,
        unprofitable_refused_at: actions::unprofitable_refused_since(
            conn,
            now - crate::fleet::UNPROFITABLE_RETRY_MS,
        )?,
        rate_limited_owed: actions::rate_limited_owed(
            conn,
            now - config.policy.launch_window_minutes as Millis * 60_000,
        )?,
        install_id: ops::install_id(conn)?,
        paused: ops::paused(conn, now)?,
        hold,
        taskless,
        day: day_profile(conn, config, now)?,
        unpriced_dph: unpriced,
    })
}

/// An instance's rental and state times as vast.ai's clock would have dated them, while this
/// host's clock runs ahead of it (`clock_step::Ahead`): what it dated before it ran ahead
/// would read that much older, and every age timed from them with it (a walkthrough: a +6 h
/// step destroyed a one-minute-old instance as `unbooted 6h01m` and rented another). The
/// snapshot's copy only; today's spend keeps the host's times (it may overcount, never under).
fn on_vast_time(
    r: &mut instances::InstanceRow,
    ahead: crate::store::clock_step::Ahead,
    now: Millis,
) {
    r.created_at = ahead.recent(r.created_at, now);
    r.state_since = ahead.recent(r.state_since, now);
}

/// The day profile at `now` (`fleet::day`), learned from the hours of history of the last
/// `day::PROFILE_DAYS` days (`samples::day_cells`); None while `policy.learn_day` is off.
pub fn day_profile(
    conn: &Connection,
    config: &Config,
    now: Millis,
) -> Result<Option<crate::fleet::day::DayProfile>> {
    if !config.policy.learn_day {
        return Ok(None);
    }
    Ok(Some(
        crate::fleet::day::DayProfile::learn(&day_cells(conn, now)?, now)
            .with_period(config.run.timer_period_secs),
    ))
}

/// The hours of history a day profile at `now` reads.
fn day_cells(conn: &Connection, now: Millis) -> Result<Vec<crate::fleet::day::Cell>> {
    use crate::fleet::day;
    let since = now - day::PROFILE_DAYS * day::DAY_MS - day::HOUR_MS;
    crate::store::samples::day_cells(
        conn,
        since - since.rem_euclid(day::HOUR_MS),
        day::CELL_MIN_SAMPLES,
        crate::policy::rules::BACKLOG_MIN,
    )
}

/// The price of a proof at this ask price over the stored FIL/USD cache (which is returned
/// too), or why it is unknown: what a pass resolves and the readers outside one show.
pub fn price_over_cache(
    conn: &Connection,
    config: &Config,
    ask_attofil: Option<&str>,
    now: Millis,
) -> Result<(
    Result<crate::price::Price, String>,
    crate::store::price::FilUsdCache,
)> {
    let cache = crate::store::price::cache(conn)?;
    let price = crate::price::resolve_cached(
        &config.price,
        ask_attofil,
        cache.value(),
        cache.error.as_deref(),
        now,
    );
    Ok((price, cache))
}

/// The price as the last pass left it (the last successful reading's ask price over the
/// FIL/USD cache), for `inspect`, `doctor` and the metrics file: nothing is fetched.
pub fn stored_price(
    conn: &Connection,
    config: &Config,
    now: Millis,
) -> Result<(
    Result<crate::price::Price, String>,
    crate::store::price::FilUsdCache,
)> {
    let ask = crate::store::price::last_ask_price(conn)?;
    price_over_cache(conn, config, ask.as_deref(), now)
}

/// This pass's FIL/USD fetch (None: no command or URL source): a value replaces the cache,
/// a failure is recorded beside the old value, which ages.
fn record_fil_usd(
    conn: &Connection,
    config: &Config,
    fetched: Option<Result<f64>>,
    now: Millis,
) -> Result<()> {
    match fetched {
        None => Ok(()),
        Some(Ok(v)) => crate::store::price::set_fetched(conn, v, now),
        Some(Err(e)) => {
            let error = clip(&format!("{e:#}"), 300);
            let cache = crate::store::price::cache(conn)?;
            let line = fil_usd_failed_line(config, &error, &cache, now);
            crate::journal::eprint(crate::journal::WARNING, &format!("fleetagent: {line}"));
            crate::store::price::set_error(conn, &error)
        }
    }
}

/// The journal's line for a failed FIL/USD fetch: the error, and what the price is now (the
/// last good value while it is younger than `price.max_age_mins`, else unknown, with the
/// profit check off). A price is a money decision: its loss must be seen where the actions
/// are, not only in `doctor`.
fn fil_usd_failed_line(
    config: &Config,
    error: &str,
    cache: &crate::store::price::FilUsdCache,
    now: Millis,
) -> String {
    let source = crate::price::fetched_source_key(&config.price).unwrap_or("the FIL/USD source");
    let now_what = match (cache.fil_usd, cache.at) {
        (Some(v), Some(at)) if crate::price::fetched_fresh(&config.price, at, now) => format!(
            "the last good value ({} from {} ago) counts until it is price.max_age_mins = {} old",
            crate::text::num(v),
            crate::clock::human_duration(now - at),
            config.price.max_age_mins
        ),
        _ => "no good value younger than price.max_age_mins: the price is unknown and launches are not checked for profit".to_string(),
    };
    format!("the FIL/USD fetch failed ({source}): {error}; {now_what}")
}

/// What a pass keeps of its Curio reading: the rates it measured (a GPU not measured this
/// pass keeps its last rate), since when work has waited, and the reading itself with its
/// time (for `inspect`). A failed probe changes none of them.
fn record_curio(
    conn: &Connection,
    rec: &Reconciled,
    demand: Option<&Demand>,
    now: Millis,
) -> Result<()> {
    let Some(d) = demand else {
        return Ok(());
    };
    for m in measure(&rec.rows, d) {
        curio::set_rate(
            conn,
            &m.gpu_name,
            m.proofs_per_hour,
            m.proofs,
            m.span_secs,
            now,
        )?;
    }
    let prev = curio::work_waiting_since(conn)?;
    curio::set_work_waiting_since(conn, work_waiting_since(prev, Some(d), now))?;
    curio::set_last_reading(conn, &serde_json::to_string(d)?, now)?;
    Ok(())
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
            Some(row) => row.gone_at.is_some() || !is_billing_state(row.state),
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
            Ok(mut d) => {
                // What a probe of the operator's says in words (its notes) is quoted in the
                // prompt, inspect and the database: no secret of ours goes with it.
                for note in &mut d.notes {
                    *note = crate::secrets::redact_all(note, &services.secrets);
                }
                (Some(d), None)
            }
            Err(e) => (
                None,
                Some(clip(
                    &crate::secrets::redact_all(&format!("{e:#}"), &services.secrets),
                    300,
                )),
            ),
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

/// Advance and store the streaks (`agent_state.low_demand_passes`, `backlog_passes`) for
/// run `run_id`, at most once per run: a second call in the same run returns them unchanged.
/// [`observe`] calls it every pass, LLM passes included, so the streaks are current
/// whenever the rules decide.
pub fn advance_streaks(conn: &Connection, run_id: i64, demand: Option<&Demand>) -> Result<Streaks> {
    let (prev, last_run) = session::streaks(conn)?;
    if last_run == Some(run_id) {
        return Ok(prev);
    }
    let next = crate::policy::streaks::next_streaks(prev, demand);
    session::set_streaks(conn, next, run_id)?;
    Ok(next)
}

/// The low-demand streak of this pass, for `rules::decide`. Idempotent per run: [`observe`]
/// has already advanced the streaks, so this only advances them if it did not.
pub fn low_demand_streak(conn: &Connection, snapshot: &Snapshot) -> Result<u32> {
    if snapshot.run_id <= 0 {
        return Ok(snapshot.streaks.low_demand_passes);
    }
    Ok(advance_streaks(conn, snapshot.run_id, snapshot.demand.as_ref())?.low_demand_passes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::actions::NewAction;

    const T: Millis = 1_800_000_000_000;
    const MIN: Millis = 60_000;

    fn stop(conn: &Connection, actor: &str, outcome: &str, id: i64, at: Millis) {
        actions::insert(
            conn,
            &NewAction {
                kind: "destroy",
                outcome,
                actor,
                instance_id: Some(id),
                label: Some("fleetagent-qwerty-r3-0a0b0c0d"),
                ..Default::default()
            },
            at,
        )
        .unwrap();
    }

    #[test]
    fn an_operator_stop_holds_until_its_time_a_resume_or_a_message() {
        let s = Store::open_memory(T).unwrap();
        let c = Config::default();
        let hold = |now| operator_hold(&s.conn, &c, now).unwrap();
        // The model's stops and refused operator stops hold nothing.
        stop(&s.conn, "llm", "ok", 6, T);
        stop(&s.conn, "operator", "refused", 6, T);
        assert_eq!(hold(T + MIN), None);
        stop(&s.conn, "operator", "ok", 7, T);
        let h = hold(T + MIN).expect("in force");
        assert_eq!(
            (h.stopped_at, h.instance_id, h.until),
            (T, Some(7), T + 30 * MIN)
        );
        assert_eq!(
            hold(T + 30 * MIN),
            None,
            "over after policy.operator_hold_mins"
        );
        // A message after the stop ends it; a later stop starts a new one; a resume ends it.
        events::insert(
            &s.conn,
            0,
            "message",
            "operator message: put it back",
            None,
            T + 2 * MIN,
        )
        .unwrap();
        assert_eq!(hold(T + 3 * MIN), None);
        stop(&s.conn, "operator", "ok", 8, T + 4 * MIN);
        assert_eq!(hold(T + 5 * MIN).and_then(|h| h.instance_id), Some(8));
        events::insert(&s.conn, 0, "resume", "operator resumed", None, T + 6 * MIN).unwrap();
        assert_eq!(hold(T + 7 * MIN), None);
        let mut off = Config::default();
        off.policy.operator_hold_mins = 0;
        stop(&s.conn, "operator", "ok", 9, T + 8 * MIN);
        assert!(hold(T + 9 * MIN).is_some());
        assert_eq!(operator_hold(&s.conn, &off, T + 9 * MIN).unwrap(), None);
    }
}
