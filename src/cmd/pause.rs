//! `pause [--for DURATION] --reason TEXT` and `resume`: the hand-brake (docs/operations.md,
//! docs/guardrails.md "The hand-brake"). While paused, neither the model, the rules nor the
//! floor launch or stop anything; passes still observe and record.

use anyhow::{Context, Result};

use crate::cli::PauseArgs;
use crate::clock::{human_duration, rfc3339, Millis};
use crate::cmd::App;
use crate::error::usage;
use crate::store::ops::{self, Pause};
use crate::store::{events, Store};
use crate::text::{clip, quote};
use crate::wakes::{too_far_ahead, MAX_OPERATOR_AHEAD_MS};

pub fn pause(app: &App, args: &PauseArgs) -> Result<()> {
    let length = match &args.for_ {
        None => None,
        Some(text) => {
            let d = crate::clock::parse_duration(text).map_err(|e| usage(format!("--for: {e}")))?;
            if d.is_zero() {
                return Err(usage(format!(
                    "--for {:?}: must be longer than 0s",
                    text.trim()
                )));
            }
            if too_far_ahead(d.as_millis() as i128) {
                return Err(usage(format!(
                    "--for {:?}: at most {}; for longer, pause without --for and `fleetagent resume` when done",
                    text.trim(),
                    human_duration(MAX_OPERATOR_AHEAD_MS)
                )));
            }
            Some(d.as_millis() as Millis)
        }
    };
    let reason = args.reason.trim();
    let (loaded, dir, mut store) = super::open_for_brake(app, "pause")?;
    // Dated once the store is open (and, with several hosts, the lease taken): a pull of the
    // shared state starts this host's own clock's hours then (`ha::mirror`).
    let now = app.now();
    let until = length.map(|l| now + l);
    let before = ops::paused(&store.conn, now)?;
    hold(&store, until, reason, "pause", now)?;
    store.fence("pause")?;
    let how_long = match until {
        Some(u) => format!("until {} (in {})", rfc3339(u), human_duration(u - now)),
        None => "until `fleetagent resume`".into(),
    };
    crate::outln!("paused {how_long}: {}", crate::text::clip(reason, 200));
    if let Some(note) =
        until.and_then(|u| crate::wakes::far_ahead_note(u - now, "fleetagent resume"))
    {
        crate::outln!("{note}");
    }
    if let Some(b) = before {
        crate::outln!(
            "(replaces the pause since {}: {})",
            rfc3339(b.since),
            quote(&b.reason, 200)
        );
    }
    crate::outln!(
        "nothing is launched or stopped but by you (`fleetagent instances stop`); passes still observe and record"
    );
    in_flight(&store, now)?;
    crate::metrics::after_operator(&loaded.config, &dir, now);
    Ok(())
}

/// Launches under way (an intent not settled): a create already sent may still rent, though
/// the pause holds every one not sent yet. Said, with what to do.
fn in_flight(store: &Store, now: Millis) -> Result<()> {
    let open = crate::store::actions::open_intents(&store.conn)?;
    if open.is_empty() {
        return Ok(());
    }
    let names = open.iter().map(|a| {
        format!(
            "{} ({} ago)",
            quote(a.label.as_deref().unwrap_or("?"), 80),
            human_duration(now - a.created_at)
        )
    });
    crate::outln!(
        "{} launch(es) under way: {}; those not yet sent are held, but a create already sent may still rent (`fleetagent instances list` shows it within a minute; `fleetagent instances stop --all` destroys what did)",
        open.len(),
        crate::text::first_and_more(names, 3)
    );
    Ok(())
}

pub fn resume(app: &App) -> Result<()> {
    let (loaded, dir, mut store) = super::open_shared(app, "resume")?;
    let now = app.now();
    let hold = crate::tools::brake::operator_hold(&store.conn, &loaded.config, now)?;
    let was = ops::clear_pause(&store.conn)?.filter(|p| p.in_force(now));
    let mut what = Vec::new();
    if let Some(p) = &was {
        what.push(format!(
            "the pause since {} ({}) is over",
            rfc3339(p.since),
            quote(&p.reason, 200)
        ));
    }
    if let Some(h) = &hold {
        what.push(format!(
            "the hold after your stop at {} is lifted",
            rfc3339(h.stopped_at)
        ));
    }
    let reason = match &was {
        Some(p) => format!("operator resumed (was paused: {})", clip(&p.reason, 200)),
        None => "operator resumed".to_string(),
    };
    // P0 and rung: the next pass decides at once. The event also ends an operator hold.
    // The leader records it as its own event: no outbox.
    let id = crate::trigger::record(
        &store,
        &dir,
        crate::trigger::Recorded::Event,
        0,
        "resume",
        &reason,
        None,
        now,
    )?;
    store.fence("resume")?;
    if what.is_empty() {
        crate::outln!(
            "not paused and nothing held; recorded as event {id}: the next pass decides at once"
        );
    } else {
        crate::outln!(
            "resumed: {}; the next pass decides at once (event {id})",
            what.join("; ")
        );
    }
    crate::metrics::after_operator(&loaded.config, &dir, now);
    Ok(())
}

/// Set the pause (`until` None: open-ended) and record a P1 `pause` event for the agent's
/// next pass (`by`: the command that paused). No ring: a paused pass has nothing to do at
/// once, and the timer's next pass reads it.
pub(crate) fn hold(
    store: &Store,
    until: Option<Millis>,
    reason: &str,
    by: &str,
    now: Millis,
) -> Result<Pause> {
    let p = Pause {
        since: now,
        until,
        reason: clip(reason, 500),
    };
    let tx = store
        .conn
        .unchecked_transaction()
        .context("cannot record the pause")?;
    ops::set_pause(&tx, &p)?;
    let line = format!("operator paused fleetagent ({by}): {}", clip(reason, 200));
    events::insert(&tx, 1, "pause", &line, None, now)?;
    tx.commit().context("cannot record the pause")?;
    Ok(p)
}
