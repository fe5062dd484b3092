//! `poll`: cheap change detection, every minute, without the LLM or the run lock. Lists our
//! instances and reads the demand, compares with what the last poll saw
//! (`agent_state.poll_snapshot`), and on a lifecycle change or a NEW WORKERS DEAD records a
//! P1 event (kind `poll`) and rings the doorbell, exactly as `trigger` does. With nothing
//! changed it writes nothing.

use std::collections::BTreeMap;

use anyhow::{Context, Result};

use crate::config::Config;
use crate::fleet::State;
use crate::run::observe::{list_ours, probe_demand};
use crate::store::Store;
use serde::{Deserialize, Serialize};

use crate::fleet::{self, BOOTED, DEAD, LOADING, PROVING, REGISTERED, STOPPED};
use crate::services::Services;
use crate::store::{events, ops, session};
use crate::text::{clip, quote};
use crate::vast::Instance;

/// What a poll remembers. A part that could not be read this time keeps its last value.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PollState {
    /// Our instances by vast.ai id: their coarse state and label.
    #[serde(default)]
    pub instances: Option<BTreeMap<u64, (String, String)>>,
    #[serde(default)]
    pub workers_dead: Option<bool>,
    /// Proofs queued when WORKERS DEAD was last seen (for the message only).
    #[serde(default)]
    pub queued: Option<u32>,
}

/// States coarse enough not to flip with every proof: registered and proving are both `live`.
pub fn coarse(state: State) -> &'static str {
    match state {
        LOADING => "loading",
        BOOTED => "up",
        REGISTERED | PROVING => "live",
        DEAD => "dead",
        STOPPED => "stopped",
        _ => "other",
    }
}

/// Our instances' coarse states from a listing and the live Curio workers (ours: our
/// prefix, and our install id or none; or what our table recorded, `fleet::Recorded`).
pub fn instance_states(
    listing: &[Instance],
    workers: &[crate::demand::Worker],
    (prefix, install_id): (&str, &str),
    recorded: &fleet::Recorded<'_>,
) -> BTreeMap<u64, (String, String)> {
    let ours: Vec<&Instance> = listing
        .iter()
        .filter(|i| fleet::is_ours(i.label.as_deref(), prefix, install_id) || recorded.holds(i))
        .collect();
    let matched = fleet::match_workers(&ours, workers);
    ours.iter()
        .map(|i| {
            let w = matched.get(&i.id).map(|&k| &workers[k]);
            let state = fleet::classify(i.actual_status.as_deref(), w);
            (
                i.id,
                (
                    coarse(state).to_string(),
                    i.label.clone().unwrap_or_default(),
                ),
            )
        })
        .collect()
}

/// States read from the listing alone: an instance that vast.ai shows running reads "up"
/// without Curio, so one that was "live" stays "live" (unknown is not a change).
pub fn without_curio(
    mut states: BTreeMap<u64, (String, String)>,
    before: Option<&BTreeMap<u64, (String, String)>>,
) -> BTreeMap<u64, (String, String)> {
    for (id, (state, _)) in states.iter_mut() {
        if state == "up"
            && before
                .and_then(|b| b.get(id))
                .is_some_and(|(old, _)| old == "live")
        {
            *state = "live".to_string();
        }
    }
    states
}

/// The change lines between two polls, and the state to store (unknown parts carried over).
pub fn compare(prev: &PollState, cur: &PollState) -> (Vec<String>, PollState) {
    let mut lines = Vec::new();
    if let (Some(before), Some(now)) = (&prev.instances, &cur.instances) {
        for (id, (state, label)) in now {
            let name = format!("instance {id} {}", quote(label, fleet::LABEL_CHARS));
            match before.get(id) {
                None => lines.push(format!("{name} appeared: {state}")),
                Some((old, _)) if old != state => lines.push(format!("{name}: {old} -> {state}")),
                Some(_) => {}
            }
        }
        for (id, (state, label)) in before {
            if !now.contains_key(id) {
                lines.push(format!(
                    "instance {id} {} is gone (was {state})",
                    quote(label, fleet::LABEL_CHARS)
                ));
            }
        }
    }
    if cur.workers_dead == Some(true) && prev.workers_dead != Some(true) {
        lines.push(format!(
            "WORKERS DEAD: {} proofs queued and no live worker",
            cur.queued.unwrap_or(0)
        ));
    }
    let merged = PollState {
        instances: cur.instances.clone().or_else(|| prev.instances.clone()),
        workers_dead: cur.workers_dead.or(prev.workers_dead),
        queued: if cur.workers_dead.is_some() {
            cur.queued
        } else {
            prev.queued
        },
    };
    (lines, merged)
}

/// What one poll could not read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Problems {
    /// The demand probe's failure.
    pub demand: Option<String>,
    /// The vast.ai listing's failure ([`crate::fleet::NO_VAST_KEY`] without a key).
    pub listing: Option<String>,
}

impl Problems {
    /// Every failure, for the warnings.
    pub fn all(&self) -> impl Iterator<Item = &String> {
        self.demand.iter().chain(&self.listing)
    }

    /// The listing failed (a key is set): the process exits 1, as `run` does, so that a poll
    /// that cannot see the fleet never looks green.
    pub fn listing_failed(&self) -> Option<&str> {
        crate::fleet::listing_failure(self.listing.as_deref())
    }
}

/// What one poll found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Polled {
    /// Nothing changed since the last poll.
    NoChange,
    /// The state was recorded; nothing for the agent.
    Recorded,
    /// A change: event `id` recorded (P1) and the doorbell rung.
    Rang { id: i64, reason: String },
}

/// One poll: list our instances, read the demand, compare with what the last poll saw, and
/// on a change record a P1 `poll` event and ring the doorbell in `dir`. `problems` gets the
/// probe's and the listing's failures (the caller shows them, and fails on the listing's); a listing that starts or stops
/// failing is recorded for `doctor` and the metrics (`store::ops::listing_changes`).
pub fn poll(
    store: &Store,
    dir: &std::path::Path,
    config: &Config,
    services: &Services,
    clock: &dyn crate::clock::Clock,
    problems: &mut Problems,
) -> Result<Polled> {
    let (demand, demand_error) = probe_demand(services, config);
    let (listing, listing_error) = list_ours(services);
    // Ours that the listing left out are asked about one by one, as a pass does: one still
    // there is no change (poll said "is gone", then "appeared" a minute later, each a P1
    // pass; the soak walkthrough).
    let (listing, listing_error) =
        crate::run::vanished::confirm(&store.conn, services, listing, listing_error)?;
    if services.vast.is_some() {
        use crate::store::ops;
        let result = listing_error.as_deref().map_or(Ok(()), Err);
        let health = ops::vast_health(&store.conn)?;
        if ops::listing_changes(&health, result) {
            ops::record_listing(&store.conn, result, clock.now_ms())?;
        }
        if listing_error.is_none() {
            use crate::store::clock_step::store_skew;
            // One transaction, IMMEDIATE: a pass and a poll that both see the clock set right
            // must not both date the slow hours later (a re-test read the code so). The skew
            // is taken once the lock is held, as of that moment.
            let tx = rusqlite::Transaction::new_unchecked(
                &store.conn,
                rusqlite::TransactionBehavior::Immediate,
            )?;
            let now = clock.now_ms();
            let stored = match crate::run::observe::clock_skew(services, None, now) {
                Some(skew) => Some(store_skew(&tx, skew, now)?),
                None => None,
            };
            tx.commit()?;
            for line in stored.map(|s| s.repaired_lines()).unwrap_or_default() {
                crate::journal::eprint(
                    crate::journal::WARNING,
                    &format!("fleetagent poll: {line}"),
                );
            }
        }
    }
    problems.demand = demand_error;
    problems.listing = listing_error;
    let workers = demand
        .as_ref()
        .map(|d| d.workers.clone())
        .unwrap_or_default();
    let install_id = ops::install_id(&store.conn)?;
    let prefix = &config.vast.label_prefix;
    let table = crate::store::instances::live(&store.conn)?;
    if let Some(l) = &listing {
        // Other installs' instances under our prefix, for doctor: written when the list
        // changes (a poll with nothing new writes nothing; every pass refreshes it anyway).
        let tracked: Vec<i64> = table.iter().filter_map(|r| r.vast_id).collect();
        let others = fleet::seen_elsewhere(l, prefix, &install_id, &tracked);
        if ops::foreign_installs(&store.conn)?.0 != others {
            ops::set_foreign_installs(&store.conn, &others, clock.now_ms())?;
        }
    }
    let recorded = fleet::Recorded::new(&table);
    let ours = (prefix.as_str(), install_id.as_str());
    let stored = session::state(&store.conn)?.poll_snapshot;
    let prev: PollState = stored
        .as_deref()
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or_default();
    let cur = PollState {
        // A failed probe leaves Curio's side unknown, not vast.ai's: what the listing alone
        // tells (appeared, gone, loading, stopped, exited) is still a change; only "live"
        // needs Curio and keeps its last value. With no demand source at all, nothing is
        // ever "live".
        instances: match (&listing, demand.is_some() || services.demand.is_none()) {
            (Some(l), true) => Some(instance_states(l, &workers, ours, &recorded)),
            (Some(l), false) => Some(without_curio(
                instance_states(l, &[], ours, &recorded),
                prev.instances.as_ref(),
            )),
            _ => None,
        },
        workers_dead: demand.as_ref().map(|d| d.workers_dead()),
        queued: demand.as_ref().map(|d| d.queued_work()),
    };
    let (lines, merged) = compare(&prev, &cur);
    let now = clock.now_ms();
    if lines.is_empty() && merged == prev && stored.is_some() {
        return Ok(Polled::NoChange);
    }
    let text = serde_json::to_string(&merged)?;
    if lines.is_empty() {
        session::set_poll_snapshot(&store.conn, &text, now)?;
        return Ok(Polled::Recorded);
    }
    let reason = clip(&format!("poll: {}", lines.join("; ")), 400);
    let id = {
        let tx = store.conn.unchecked_transaction()?;
        let id = events::insert(&tx, 1, "poll", &reason, None, now)?;
        session::set_poll_snapshot(&tx, &text, now)?;
        tx.commit().context("cannot record the poll event")?;
        id
    };
    crate::trigger::ring(dir, id, 1, &reason, now)?;
    Ok(Polled::Rang { id, reason })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(items: &[(u64, &str)], dead: Option<bool>) -> PollState {
        PollState {
            instances: Some(
                items
                    .iter()
                    .map(|(id, s)| (*id, (s.to_string(), format!("fleetagent-{id}"))))
                    .collect(),
            ),
            workers_dead: dead,
            queued: dead.map(|_| 3),
        }
    }

    #[test]
    fn a_failed_probe_still_sees_what_the_listing_tells() {
        let prev = state(&[(1, "live"), (2, "live"), (3, "loading")], Some(false));
        // The listing alone: 1 runs (reads "up" without Curio), 2 exited, 3 is gone, 4 new.
        let listing_only = state(&[(1, "up"), (2, "dead"), (4, "loading")], None);
        let cur = PollState {
            instances: Some(without_curio(
                listing_only.instances.unwrap(),
                prev.instances.as_ref(),
            )),
            workers_dead: None,
            queued: None,
        };
        let (lines, merged) = compare(&prev, &cur);
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(lines
            .iter()
            .any(|l| l.contains("instance 2") && l.contains("live -> dead")));
        assert!(lines
            .iter()
            .any(|l| l.contains("instance 3") && l.contains("gone")));
        assert!(lines
            .iter()
            .any(|l| l.contains("instance 4") && l.contains("appeared")));
        // 1 is still "live" (unknown is not a change), and WORKERS DEAD keeps its last value.
        assert_eq!(merged.instances.as_ref().unwrap()[&1].0, "live");
        assert_eq!(merged.workers_dead, Some(false));
    }

    #[test]
    fn worker_death_is_a_change_and_steady_is_not() {
        let a = state(&[(1, "live"), (2, "loading")], Some(false));
        assert_eq!(compare(&a, &a), (vec![], a.clone()));
        let b = state(&[(1, "up"), (2, "loading")], Some(false));
        let (lines, _) = compare(&a, &b);
        assert_eq!(lines, vec!["instance 1 \"fleetagent-1\": live -> up"]);
        let gone = state(&[(2, "loading")], Some(true));
        let (lines, _) = compare(&a, &gone);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines[1].starts_with("WORKERS DEAD"));
    }

    #[test]
    fn dead_only_once_and_unknown_parts_carried() {
        let dead = state(&[], Some(true));
        let (lines, merged) = compare(&dead, &dead);
        assert!(lines.is_empty());
        let unknown = PollState::default();
        let (lines, merged2) = compare(&merged, &unknown);
        assert!(lines.is_empty());
        assert_eq!(merged2, merged);
        assert_eq!(coarse(PROVING), coarse(REGISTERED));
    }
}
