//! A leader blind to vast.ai hands the lease over (docs/ha.md, "What happens when": "A leader
//! blind to vast.ai"). A leader whose listing fails goes on passing (recorded ok) without seeing the
//! fleet or acting on it, and no other host acts while it holds the lease. So:
//! - a follower's `poll`, while the shared state says the leader's listing fails, lists
//!   vast.ai once (the caller, every minute; else once a timer period: [`follower_lists`])
//!   and records how that went (`hosts::record_vast`, `hosts.vast_ok_at`);
//! - the leader's `poll`, once its own listing has failed for [`BLIND_PERIODS`] timer periods
//!   while it led and another host reached vast.ai since then, within
//!   [`REACHED_WITHIN_SECS`], releases the lease as `ha release` does (it leaves it to the
//!   others for one lease period; [`hand_over_if_blind`]); the next host to poll takes it.
//!
//! When vast.ai is down for every host, nobody reaches it after the leader went blind and the
//! lease stays where it is: it does not go round the hosts, each start a fresh session. A
//! follower's listing just before the outage reached the leader can move it once; the new
//! leader's blindness counts from its own lease, and nobody lists after it.

use anyhow::Result;

use super::node::Settings;
use crate::clock::{human_duration, Millis};
use crate::store::ops::VastHealth;

/// The leader's listing failing this many timer periods (doctor's `ha` check names it from
/// then on) before it hands the lease over.
pub const BLIND_PERIODS: i64 = 3;

/// A follower's listing this recent (database time) vouches that it can act: three of its
/// minute polls.
pub const REACHED_WITHIN_SECS: f64 = 180.0;

/// Why a follower's poll lists vast.ai, if it does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FollowerListing {
    /// The shared state says the leader's listing fails for a reason of its host (not a
    /// rate limit, vast.ai failing or the search quota, which every host meets): every
    /// minute.
    LeaderBlind,
    /// Once a timer period, so that a host that could not act if it led is known (every
    /// doctor names it) before it leads.
    Due,
}

/// Whether this follower lists vast.ai at this poll, and why (`period_secs`: the timer
/// period).
pub fn follower_lists(
    db: &mut super::db::SharedDb,
    settings: &Settings,
    period_secs: f64,
) -> Result<Option<FollowerListing>> {
    let shared = super::mirror::shared_agent_state(db)?;
    // A 429 to the leader is the account's: followers listing every minute on the same key
    // only added to it.
    let leader_error = shared.as_ref().and_then(|v| v["vast_error"].as_str());
    if leader_error.is_some_and(|e| !crate::vast::is_account_wide(e)) {
        return Ok(Some(FollowerListing::LeaderBlind));
    }
    let due = super::hosts::vast_listing_due(db, &settings.host, period_secs)?;
    Ok(due.then_some(FollowerListing::Due))
}

/// On the leader's `poll`, with its vast.ai health as recorded (`health`): release the lease
/// when the listing has failed for [`BLIND_PERIODS`] timer periods (`period_ms`) while this
/// host led, and another host reached vast.ai since, within [`REACHED_WITHIN_SECS`]. Not while a `run` of this host is
/// going (`run_going`: its pass would be cut at its next fence; the next minute's poll asks
/// again). The line to say when it released.
pub fn hand_over_if_blind(
    settings: &Settings,
    health: &VastHealth,
    period_ms: Millis,
    run_going: bool,
    now: Millis,
) -> Result<Option<String>> {
    let Some(error) = &health.error else {
        return Ok(None);
    };
    let since = health.error_at.unwrap_or(now);
    let need_secs = (BLIND_PERIODS * period_ms) as f64 / 1000.0;
    if run_going || ((now - since) as f64 / 1000.0) < need_secs {
        return Ok(None);
    }
    let mut db = settings.connect()?;
    // Blind as the leader: the failures a new leader's copy of the shared state carries from
    // the host that led before do not count (vast.ai down for every host sent the lease
    // round them, each releasing at its first poll).
    let Some((holder, _, _, held_secs)) = super::status::lease_row(&mut db)? else {
        return Ok(None);
    };
    let blind_secs = ((now - since) as f64 / 1000.0).min(held_secs);
    if holder != settings.host || blind_secs < need_secs {
        return Ok(None);
    }
    // A host that listed vast.ai since this one went blind, and lately: one that listed
    // before the outage began says nothing of now.
    let able = super::hosts::list(&mut db)?
        .into_iter()
        .filter(|h| h.host_id != settings.host)
        .filter_map(|h| Some((h.vast_ok_secs_ago?, h.host_id)))
        .filter(|(ago, _)| *ago < REACHED_WITHIN_SECS && *ago < blind_secs)
        .min_by(|a, b| a.0.total_cmp(&b.0));
    let Some((ago, other)) = able else {
        return Ok(None);
    };
    let Some(epoch) = super::status::release(settings)? else {
        return Ok(None);
    };
    Ok(Some(format!(
        "ha: this host ({}) hands the lease over (epoch {epoch}): its vast.ai listing has failed for {} ({}), while {other} listed vast.ai {}s ago; it leaves the lease to the other hosts for one lease period, and the next to poll leads",
        settings.host,
        human_duration((blind_secs * 1000.0) as Millis),
        crate::text::clip(error, 200),
        ago.round()
    )))
}
