//! What every rule asks this pass ([`Asks`]), and the one plan made of it ([`combine`]).

use super::{launches, stops, Facts, Launch, PlannedCall, Stop};
use crate::fleet::Snapshot;

/// What each rule asks this pass, by rule.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Asks {
    pub flagged: Vec<Stop>,
    pub over_cap: Vec<Stop>,
    pub workers_dead: Option<Launch>,
    pub deficit: Option<Launch>,
    pub ahead: Option<Launch>,
    pub seed: Option<Launch>,
    pub outbid_replacement: Option<Launch>,
    pub unprofitable_replacement: Option<Launch>,
    pub surplus: Option<Stop>,
}

impl Asks {
    /// The stops for the fleet's health, which come first whatever else is asked: the
    /// flagged instances, then those over a cap.
    pub fn health_stops(&self) -> impl Iterator<Item = &Stop> {
        self.flagged.iter().chain(&self.over_cap)
    }

    /// Ask every rule (each is pure; which of them counts is [`combine`]'s to say).
    pub fn of(s: &Snapshot, f: &Facts) -> Asks {
        Asks {
            flagged: stops::flagged(s, f),
            over_cap: stops::over_cap(s, f),
            workers_dead: launches::workers_dead(s, f),
            deficit: launches::deficit(s, f),
            ahead: launches::ahead(s, f),
            seed: launches::seed(s, f),
            outbid_replacement: launches::outbid_replacement(s, f),
            unprofitable_replacement: launches::unprofitable_replacement(s, f),
            surplus: stops::surplus(s, f),
        }
    }

    /// The launch rules in their precedence (the deficit and the rent ahead of a rise share
    /// a place: the one that asks for more; an outbid replacement that asks for more than
    /// that takes it).
    fn launches(&self) -> [&Option<Launch>; 5] {
        let n = |l: &Option<Launch>| l.as_ref().map_or(0, |l| l.n);
        let mut lead = if n(&self.ahead) > n(&self.deficit) {
            &self.ahead
        } else {
            &self.deficit
        };
        if n(lead) > 0 && n(&self.outbid_replacement) > n(lead) {
            lead = &self.outbid_replacement;
        }
        [
            &self.workers_dead,
            lead,
            &self.seed,
            &self.outbid_replacement,
            &self.unprofitable_replacement,
        ]
    }
}

/// The pass's calls, in the order they are made. The precedence:
///
/// 1. Every destroy of a flagged instance (an outbid bid among them), then every stop that
///    brings the fleet back under a cap: answered in the same pass and before any launch,
///    since a destroy frees the slot a launch takes (`Facts::freed`).
/// 2. The launches of one launch rule: the first of WORKERS DEAD, the deficit or the rent
///    ahead of a rise the day's history shows (whichever asks for more; the outbid
///    replacement instead where it asks for more still: a deficit of one must not leave two
///    destroyed bids unreplaced), the seed, the outbid replacement and the unprofitable
///    replacement that asks for any (a rule that asks for none leaves it to the next). The
///    first three never ask together: WORKERS DEAD has no live worker, the deficit a busy
///    one, the seed none and nothing queued. The deficit already counts the replacement of
///    an unprofitable instance. No more than the launch window (`Facts::window_left`),
///    `max_instances` (`Facts::slots_left`) and the boot breaker (`Facts::boot_left`) allow; a launch asked while the workers are dead
///    asks at least once, so that a refusal is on record.
///    One call per launch, its reason numbered `(launch i of n)`.
/// 3. The surplus stop, one at most, last: it never waits for a launch, nor a launch for it.
///
/// The operator's pause and hold come before all of it ([`super::decide`]).
pub fn combine(f: &Facts, asks: &Asks) -> Vec<PlannedCall> {
    let mut calls: Vec<PlannedCall> = asks
        .health_stops()
        .cloned()
        .map(PlannedCall::stop)
        .collect();
    let launch = asks.launches().into_iter().flatten().find(|l| l.n > 0);
    if let Some(l) = launch {
        let mut n = l.n.min(f.window_left).min(f.slots_left).min(f.boot_left);
        if l.emergency {
            n = n.max(1);
        }
        calls.extend(
            (0..n).map(|i| PlannedCall::launch(l, format!("{} (launch {} of {n})", l.why, i + 1))),
        );
    }
    calls.extend(asks.surplus.clone().map(PlannedCall::stop));
    calls
}
