//! `poll`: cheap change detection without the LLM or the run lock (`crate::poll`).

use anyhow::Result;

use crate::cmd::App;
use crate::poll::Polled;

pub fn run(app: &App) -> Result<()> {
    let (loaded, dir, mut store) = super::open_existing(app)?;
    let config = &loaded.config;
    if let Some(settings) = crate::ha::node::Settings::of(config, &app.env)? {
        if !ha_poll(&settings, &mut store, &dir, app.now())? {
            drop(store);
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
    // vast.ai's health and the fleet as this poll recorded them, every minute: the textfile
    // agreed with `doctor` only after the next run (up to a timer period).
    crate::metrics::after_operator(config, &dir, app.now());
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
    let started = crate::ha::node::start(settings, store, now, false)?;
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
