//! `poll`: cheap change detection without the LLM or the run lock (`crate::poll`).

use anyhow::Result;

use crate::cmd::App;
use crate::config::Config;
use crate::poll::Polled;

pub fn run(app: &App) -> Result<()> {
    let (loaded, dir, mut store) = super::open_existing(app)?;
    let config = &loaded.config;
    let ha = crate::ha::node::Settings::of(config, &app.env)?;
    if let Some(settings) = &ha {
        let polled = ha_poll(settings, &mut store, &dir, app.now()).inspect_err(|e| {
            // The textfile says the shared database is unreachable now, not at the next run
            // (a follower's file said `fleetagent_ha_database_ok 1`, the leader's also
            // `fleetagent_ha_leader 1`, while every poll failed: a walkthrough).
            let status = crate::ha::status::unconfigured(config, e);
            crate::metrics::after_run(config, &dir, app.now(), Some(&status));
        })?;
        if !polled {
            drop(store);
            follower_checks(settings, app, config);
            crate::metrics::after_role_change(config, &app.env, &dir, app.now());
            return Ok(());
        }
    }
    let services = crate::services::build_services(config, &app.env, app.clock.clone(), false)?;
    let mut problems = crate::poll::Problems::default();
    let polled = crate::poll::poll(
        &store,
        &dir,
        config,
        &services,
        app.clock.as_ref(),
        &mut problems,
    );
    // The listing's failure is the process's error (its last line), the rest warnings.
    let failed = problems.listing_failed().map(str::to_string);
    for e in problems
        .all()
        .filter(|e| Some(e.as_str()) != failed.as_deref())
    {
        let text = format!("fleetagent: poll: {e}");
        crate::journal::eprint(crate::journal::WARNING, &text);
    }
    let polled = polled.inspect_err(|_| {
        if let Some(e) = &failed {
            crate::journal::eprint(crate::journal::WARNING, &format!("fleetagent: poll: {e}"));
        }
    })?;
    store.fence("poll")?;
    ring_for_waiting_events(&store, &dir, app.now());
    let handed_over = match &ha {
        Some(settings) => hand_over_if_blind(settings, &store, config, &dir, app.now()),
        None => false,
    };
    if handed_over {
        drop(store);
        crate::metrics::after_role_change(config, &app.env, &dir, app.now());
    } else {
        // vast.ai's health and the fleet as this poll recorded them, every minute: the
        // textfile agreed with `doctor` only after the next run (up to a timer period).
        crate::metrics::after_operator(config, &dir, app.now());
    }
    // A minute's poll that finds nothing is not worth a journal line (-vv shows it).
    match polled {
        Polled::NoChange => log::debug!("poll: no change"),
        Polled::Recorded => log::debug!("poll: state recorded; nothing for the agent"),
        Polled::Rang { id, reason } => {
            crate::outln!("event {id} (P1) recorded; doorbell rung: {reason}")
        }
    }
    match failed {
        Some(e) => anyhow::bail!("poll: the vast.ai listing failed: {e}"),
        None => Ok(()),
    }
}

/// How young the newest ready event must be for `poll` to ring for it: one or two polls
/// after it was recorded, never more.
const RING_FOR_EVENTS_MS: crate::clock::Millis = 90_000;

/// Ready events with no doorbell: a ringer killed between its commit and its ring, or a pass
/// killed between deleting the doorbell and its commit (a walkthrough widened each window),
/// left them for the timer (up to a period; an operator's message among them). The minute's
/// poll rings for them while the newest is young ([`RING_FOR_EVENTS_MS`]): a `run` that
/// exits before its claim (a missing credential) deletes the doorbell and leaves its events
/// to the timer on purpose (DESIGN), and ringing for them every minute started a failing
/// service every minute (a re-test). Best effort: an extra ring costs at most an empty pass.
fn ring_for_waiting_events(
    store: &crate::store::Store,
    dir: &std::path::Path,
    now: crate::clock::Millis,
) {
    use crate::doorbell::Doorbell;
    let bell = crate::doorbell::FileDoorbell::new(dir);
    if bell.status().is_ok_and(|s| s.exists) {
        return;
    }
    let rung = crate::store::events::newest_ready_at(&store.conn, now).and_then(|newest| {
        if newest.is_none_or(|at| at <= now - RING_FOR_EVENTS_MS) {
            return Ok(None);
        }
        let Some(priority) = crate::store::events::ready_top_priority(&store.conn, now)? else {
            return Ok(None);
        };
        let waiting = crate::store::events::count_ready(&store.conn, now)?;
        let reason =
            format!("{waiting} event(s) waiting with no doorbell (a ringer or a pass was killed before its ring or its claim)");
        crate::trigger::ring_on(&bell, 0, priority, &reason, now)?;
        Ok(Some(reason))
    });
    match rung {
        Ok(Some(reason)) => crate::journal::eprint(
            crate::journal::WARNING,
            &format!("fleetagent: poll: {reason}; doorbell rung"),
        ),
        Ok(None) => {}
        Err(e) => log::warn!(
            "poll: could not ring for waiting events: {}",
            crate::error::one_line(&e)
        ),
    }
}

/// With `[ha] enabled`, every minute on every host: this host recorded, its outbox forwarded,
/// the lease renewed or taken (a leader's keeper lives only while its `run` does, so `poll`
/// renews between runs). On the leader, events in the shared inbox ring its doorbell, and the
/// poll goes on (`true`); a follower does nothing else (`false`).
fn ha_poll(
    settings: &crate::ha::node::Settings,
    store: &mut crate::store::Store,
    dir: &std::path::Path,
    now: crate::clock::Millis,
) -> Result<bool> {
    let started = crate::ha::node::start(settings, store, now, None)?;
    let crate::ha::node::Start::Leader { epoch, .. } = &started else {
        if let Some(line) = started.not_leading(&settings.host) {
            log::debug!("poll: {line}");
        }
        return Ok(false);
    };
    let waiting = match store.shared.as_mut() {
        Some(link) => link.inbox_waiting(&store.conn)?,
        None => 0,
    };
    if waiting > 0 {
        let reason = format!("{waiting} event(s) in the shared inbox");
        crate::trigger::ring_on(&crate::doorbell::FileDoorbell::new(dir), 0, 1, &reason, now)?;
        log::info!("poll: leader (epoch {epoch}): {reason}; doorbell rung");
    }
    Ok(true)
}

/// A follower's checks of what it would need to lead ([`follower_lists_vast`],
/// [`follower_reads_demand`]) over one connection to the shared database, the services built
/// once and only when one of them is due.
fn follower_checks(settings: &crate::ha::node::Settings, app: &App, config: &Config) {
    let mut db = settings.connect().map_err(|e| crate::error::one_line(&e));
    let cell = std::cell::OnceCell::new();
    let services = || {
        cell.get_or_init(|| {
            crate::services::build_services(config, &app.env, app.clock.clone(), false)
                .map_err(|e| crate::error::one_line(&e))
        })
    };
    follower_lists_vast(settings, &mut db, config, &services);
    follower_reads_demand(settings, &mut db, config, &services);
}

/// A follower's poll lists vast.ai once a timer period, and every minute while the shared
/// state says the leader's listing fails, and records how it went (`ha::handover`: the
/// leader hands the lease only to a host that can act; every doctor names a follower that
/// cannot list, which would lead blind). Best effort: a failure here is logged, and the
/// follower's poll goes on as before.
fn follower_lists_vast<'a>(
    settings: &crate::ha::node::Settings,
    db: &mut Result<crate::ha::SharedDb, String>,
    config: &Config,
    services: &dyn Fn() -> &'a Result<crate::services::Services, String>,
) {
    use crate::ha::handover::{follower_lists, FollowerListing};
    let mut probe = || -> Result<Option<(FollowerListing, Option<String>)>> {
        let db = db.as_mut().map_err(|e| anyhow::anyhow!("{e}"))?;
        let period = config.run.timer_period_secs as f64;
        let Some(why) = follower_lists(db, settings, period)? else {
            return Ok(None);
        };
        let error = match services() {
            Ok(services) => match crate::run::observe::list_ours(services) {
                (Some(_), _) => None,
                (None, error) => Some(error.unwrap_or_else(|| "no listing".into())),
            },
            Err(e) => Some(e.clone()),
        };
        crate::ha::hosts::record_vast(db, &settings.host, error.as_deref())?;
        Ok(Some((why, error)))
    };
    match probe() {
        Ok(Some((FollowerListing::LeaderBlind, None))) => log::info!(
            target: "fleetagent::notice",
            "poll: follower: the leader's vast.ai listing fails; this host's works (recorded: the leader hands the lease over once it has failed for 3 timer periods)"
        ),
        Ok(Some((FollowerListing::LeaderBlind, Some(e)))) => log::warn!(
            "poll: follower: the leader's vast.ai listing fails, and so does this host's: {e}"
        ),
        Ok(Some((FollowerListing::Due, Some(e)))) => log::warn!(
            "poll: follower: this host cannot list vast.ai ({e}): were it to lead, it could not see the fleet nor launch or stop (every host's doctor names it)"
        ),
        Ok(Some((FollowerListing::Due, None))) => log::debug!("poll: follower: vast.ai listed"),
        Ok(None) => {}
        Err(e) => log::warn!(
            "poll: follower: could not look at vast.ai: {}",
            crate::error::one_line(&e)
        ),
    }
}

/// A follower's poll reads demand (and FIL/USD, when fetched) once a timer period, as a
/// pass would, and records how it went (`hosts.probe_error`): a host that would lead
/// without demand holds the fleet (no launch, no stop; WORKERS DEAD unseen), and one without
/// FIL/USD turns the profit check off once the last price ages, so every doctor names it
/// before it leads (the HA walkthrough: a follower whose probe failed was green on every
/// host, then led blind). Best effort, as the listing above.
fn follower_reads_demand<'a>(
    settings: &crate::ha::node::Settings,
    db: &mut Result<crate::ha::SharedDb, String>,
    config: &Config,
    services: &dyn Fn() -> &'a Result<crate::services::Services, String>,
) {
    let mut probe = || -> Result<Option<Option<String>>> {
        let db = db.as_mut().map_err(|e| anyhow::anyhow!("{e}"))?;
        let period = config.run.timer_period_secs as f64;
        if !crate::ha::hosts::probes_due(db, &settings.host, period)? {
            return Ok(None);
        }
        let error = match services() {
            Ok(services) => probe_failures(services, config),
            Err(e) => Some(e.clone()),
        };
        crate::ha::hosts::record_probes(db, &settings.host, error.as_deref())?;
        Ok(Some(error))
    };
    match probe() {
        Ok(Some(Some(e))) => log::warn!(
            "poll: follower: this host cannot read what a pass reads ({e}): were it to lead, it would hold the fleet or judge launches without a price (every host's doctor names it)"
        ),
        Ok(Some(None)) => log::debug!("poll: follower: demand read"),
        Ok(None) => {}
        Err(e) => log::warn!(
            "poll: follower: could not read demand: {}",
            crate::error::one_line(&e)
        ),
    }
}

/// What of a pass's readings fails on this host: the demand probe, and the FIL/USD fetch
/// when the price is fetched (None: both read).
fn probe_failures(services: &crate::services::Services, config: &Config) -> Option<String> {
    let mut failed = Vec::new();
    if let (None, Some(why)) = crate::run::observe::probe_demand(services, config) {
        failed.push(format!("demand: {why}"));
    }
    if let Some(Err(e)) = services.fil_usd.as_ref().map(|s| s.fil_usd()) {
        let source =
            crate::price::fetched_source_key(&config.price).unwrap_or("the FIL/USD source");
        let e = crate::secrets::redact_all(&format!("{e:#}"), &services.secrets);
        failed.push(format!(
            "FIL/USD ({source}): {}",
            crate::text::clip(&e, 200)
        ));
    }
    (!failed.is_empty()).then(|| failed.join("; "))
}

/// On the leader, after its poll: hand the lease over when this host has been blind to
/// vast.ai for long and another host reached it (`ha::handover`). True when it released.
fn hand_over_if_blind(
    settings: &crate::ha::node::Settings,
    store: &crate::store::Store,
    config: &Config,
    dir: &std::path::Path,
    now: crate::clock::Millis,
) -> bool {
    let judged = crate::store::ops::vast_health(&store.conn).and_then(|health| {
        // Unknown counts as going: a lease released in the middle of a pass fails its fence.
        let run_going = crate::lock::holder_probed(&dir.join(crate::paths::LOCK_FILE))
            != crate::lock::Holder::Free;
        let period = config.run.timer_period_secs as i64 * 1000;
        crate::ha::handover::hand_over_if_blind(settings, &health, period, run_going, now)
    });
    match judged {
        Ok(Some(line)) => {
            crate::journal::eprint(crate::journal::WARNING, &format!("fleetagent: {line}"));
            true
        }
        Ok(None) => false,
        Err(e) => {
            log::warn!(
                "poll: ha: could not judge a hand-over of the lease: {}",
                crate::error::one_line(&e)
            );
            false
        }
    }
}
