//! The operator's hand at the moment a launch could go, not at the pass's observation: a
//! pause (or `instances stop --all`) pressed, or an operator stop made, while a pass runs
//! holds the launches it has not sent yet. The launch tool asks before its first step,
//! before each create, and the vast.ai client asks again once the create spacing or a 429's
//! wait has passed (`VastClient::create_instance_unless`).

use anyhow::Result;
use rusqlite::Connection;

use super::Actor;
use crate::clock::Millis;
use crate::config::Config;
use crate::fleet::OperatorHold;
use crate::policy::guardrails::Refusal;
use crate::store::{actions, events, ops};

/// The operator hold in force at `now` (`fleet::OperatorHold`): the operator's latest stop
/// of one of ours within `policy.operator_hold_mins` (recorded, or typed and awaiting
/// vast.ai's answer), with no `resume` nor operator `message` since.
pub fn operator_hold(
    conn: &Connection,
    config: &Config,
    now: Millis,
) -> Result<Option<OperatorHold>> {
    if config.policy.operator_hold_mins == 0 {
        return Ok(None);
    }
    if let Some(hold) = hold_at(conn, config, now, now)? {
        return Ok(Some(hold));
    }
    // A clock run ahead of vast.ai's does not end early the hold of a stop made before
    // (`clock_step::Ahead`); the operator's word since the stop still ends it, whenever this
    // clock dated it.
    match crate::store::clock_step::ahead(conn)? {
        None => Ok(None),
        Some(a) => Ok(hold_at(conn, config, now - a.ms, now)?.filter(|h| h.stopped_at < a.since)),
    }
}

/// The hold in force at `at`, the operator's word counted up to `now`.
fn hold_at(
    conn: &Connection,
    config: &Config,
    at: Millis,
    now: Millis,
) -> Result<Option<OperatorHold>> {
    let mins = config.policy.operator_hold_mins;
    let since = at - (mins as Millis).saturating_mul(60_000);
    // The latest of a stop recorded and one typed whose answer from vast.ai is awaited.
    let stop = match (
        actions::last_operator_stop_since(conn, since)?,
        actions::operator_stop_in_flight(conn, since)?,
    ) {
        (Some(done), Some(typed)) if typed.at > done.at => Some(typed),
        (done, typed) => done.or(typed),
    };
    let spoke = match &stop {
        Some(s) => {
            events::operator_spoke_since(conn, s.at, now + crate::store::clock_step::CLOCK_STEP_MS)?
        }
        None => false,
    };
    Ok(OperatorHold::in_force(stop, spoke, mins, at))
}

/// Why `actor` may not launch at `now`, read from the database: the pause binds everyone but
/// the operator; the operator hold binds the rules, the floor and the fallback (the model
/// reads it in its observation and is not bound).
pub fn launch_held(
    conn: &Connection,
    config: &Config,
    actor: Actor,
    now: Millis,
) -> Result<Option<Refusal>> {
    if actor == Actor::Operator {
        return Ok(None);
    }
    if let Some(p) = ops::paused(conn, now)? {
        return Ok(Some(Refusal::Paused(p)));
    }
    if matches!(actor, Actor::Rules | Actor::Floor | Actor::Fallback) {
        if let Some(h) = operator_hold(conn, config, now)? {
            return Ok(Some(Refusal::OperatorHold(h)));
        }
    }
    Ok(None)
}
