//! The decisions a pass makes about itself, pure: who decides (the rules, nobody because
//! nothing is new, or the model), what happens when the model is unusable, and the verdict.

use crate::clock::Millis;
use crate::config::{Config, Fallback, Provider};
use crate::demand::Demand;
use crate::fleet::Snapshot;
use crate::store::runs::{ActionCounts, Verdict};

/// Who decides this pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decider {
    /// `provider = "rules"`: the rules alone.
    Rules,
    /// Nothing new and the model was asked recently: no call (verdict `skipped`).
    Skip,
    /// Ask the model.
    Model,
}

/// What the pass knows besides the snapshot when it chooses.
pub struct Facts<'a> {
    pub events: usize,
    pub wakes: usize,
    /// The demand record of the previous pass ([`demand_record`]).
    pub previous_demand: Option<&'a str>,
    pub last_llm_call_at: Option<Millis>,
    /// The operator spoke (`message`, `resume`) since the model's last good call: a pass
    /// the fallback decided took it, and the model has not heard it (a soak saw a message
    /// typed during an outage reach the model 28 minutes after it was back).
    pub operator_unheard: bool,
    pub now: Millis,
}

/// DESIGN.md's step 4: nothing new (no events, no wakes, no fleet change, no emergency,
/// demand steady) and a model call younger than `quiet_interval_mins` means no call.
pub fn decider(config: &Config, facts: &Facts<'_>, snapshot: &Snapshot) -> Decider {
    if config.llm.provider == Provider::Rules {
        return Decider::Rules;
    }
    let nothing_new = facts.events == 0
        && facts.wakes == 0
        && !facts.operator_unheard
        && snapshot.changes.is_empty()
        && !snapshot.workers_dead()
        && demand_steady(facts.previous_demand, snapshot);
    let quiet_ms = config.llm.quiet_interval_mins as i64 * 60_000;
    let recent_call = facts
        .last_llm_call_at
        .is_some_and(|t| facts.now - t < quiet_ms);
    if nothing_new && recent_call {
        Decider::Skip
    } else {
        Decider::Model
    }
}

/// When the model is unusable this pass (`llm.fallback`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnModelFailure {
    /// The pass fails; its events and wakes are handed back.
    FailPass,
    /// The whole floor decides, as under a model that did nothing (`policy::floor`): WORKERS
    /// DEAD and deficit launches in the same pass, flagged instances destroyed after
    /// `policy.floor_flagged_passes`, idle surplus stopped after `policy.floor_idle_mins`.
    /// (DESIGN.md had the fallback launch only; issue 23 overrode it: a stuck loader and
    /// dead instances billed for the rest of the hour while the model was down.)
    Floor,
}

pub fn on_model_failure(config: &Config) -> OnModelFailure {
    match config.llm.fallback {
        Fallback::None => OnModelFailure::FailPass,
        Fallback::Rules => OnModelFailure::Floor,
    }
}

/// `action` when a mutating tool call succeeded, else `no-action`.
pub fn verdict(mutated: bool) -> Verdict {
    if mutated {
        Verdict::Action
    } else {
        Verdict::NoAction
    }
}

/// The verdict once the pass's calls are counted from the ledger (`asked`): any that went
/// through make it `action` (a dry run's answer included); calls asked for that all failed
/// or were refused make it `action-failed` (at least one failed at vast.ai) or
/// `action-refused`, never a plain `no-action`; a pass that asked for none keeps `decided`.
pub fn counted_verdict(decided: Verdict, asked: ActionCounts) -> Verdict {
    if decided == Verdict::Action || asked.ok > 0 {
        Verdict::Action
    } else if asked.failed > 0 {
        Verdict::ActionFailed
    } else if asked.refused > 0 {
        Verdict::ActionRefused
    } else {
        decided
    }
}

/// The vast.ai listing's failure in this pass, unless it is only that no key is configured
/// (which `doctor` reports): the pass holds the fleet and goes on, and the process then
/// exits 1 naming it, so a blind agent never looks green.
pub fn vast_failure(s: &Snapshot) -> Option<&str> {
    crate::fleet::listing_failure(s.listing_error.as_deref())
}

/// The demand reading as recorded for the next pass's "steady" check.
pub fn demand_record(s: &Snapshot) -> String {
    serde_json::json!({ "demand": s.demand, "error": s.demand_error }).to_string()
}

/// Demand steady: pending, running and live-worker counts as in the last pass and 1 h
/// throughput within 20 %; or the probe failing the same way again.
pub fn demand_steady(previous: Option<&str>, s: &Snapshot) -> bool {
    let Some(prev) = previous.and_then(|p| serde_json::from_str::<serde_json::Value>(p).ok())
    else {
        return false;
    };
    let prev_demand: Option<Demand> = serde_json::from_value(prev["demand"].clone()).ok();
    match (prev_demand, &s.demand) {
        (Some(a), Some(b)) => {
            let (x, y) = (a.completed_1h as f64, b.completed_1h as f64);
            a.pending == b.pending
                && a.running == b.running
                && a.live_workers() == b.live_workers()
                && (x - y).abs() <= 0.2 * x.max(y)
        }
        (None, None) => prev["error"].as_str() == s.demand_error.as_deref(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn demand(pending: u32, completed_1h: u32) -> Demand {
        Demand {
            pending,
            completed_1h,
            ..Default::default()
        }
    }

    fn snapshot(d: Option<Demand>) -> Snapshot {
        Snapshot {
            demand: d,
            ..Default::default()
        }
    }

    fn facts(previous: Option<&str>, last_call: Option<Millis>) -> Facts<'_> {
        Facts {
            events: 0,
            wakes: 0,
            previous_demand: previous,
            last_llm_call_at: last_call,
            operator_unheard: false,
            now: 10 * 60_000,
        }
    }

    #[test]
    fn nothing_new_and_a_recent_call_skips_the_model() {
        let c = Config::default();
        let s = snapshot(Some(demand(0, 100)));
        let prev = demand_record(&snapshot(Some(demand(0, 110))));
        assert_eq!(decider(&c, &facts(Some(&prev), Some(0)), &s), Decider::Skip);
        // The operator spoke since the model last answered (its message went to a fallback
        // pass): the model is asked.
        let unheard = Facts {
            operator_unheard: true,
            ..facts(Some(&prev), Some(0))
        };
        assert_eq!(decider(&c, &unheard, &s), Decider::Model);
        // No call yet, or one older than quiet_interval_mins: ask.
        assert_eq!(decider(&c, &facts(Some(&prev), None), &s), Decider::Model);
        let mut old = facts(Some(&prev), Some(0));
        old.now = 31 * 60_000;
        assert_eq!(decider(&c, &old, &s), Decider::Model);
        // An event, or throughput that moved more than 20 %: ask.
        let mut ev = facts(Some(&prev), Some(0));
        ev.events = 1;
        assert_eq!(decider(&c, &ev, &s), Decider::Model);
        let moved = demand_record(&snapshot(Some(demand(0, 130))));
        assert_eq!(
            decider(&c, &facts(Some(&moved), Some(0)), &s),
            Decider::Model
        );
    }

    #[test]
    fn a_probe_failing_the_same_way_is_steady() {
        let mut s = snapshot(None);
        s.demand_error = Some("timeout".into());
        assert!(demand_steady(Some(&demand_record(&s)), &s));
        let mut other = s.clone();
        other.demand_error = Some("refused".into());
        assert!(!demand_steady(Some(&demand_record(&other)), &s));
        assert!(!demand_steady(None, &s));
    }

    #[test]
    fn the_provider_and_the_fallback_choose() {
        let mut c = Config::default();
        c.llm.provider = Provider::Rules;
        assert_eq!(
            decider(&c, &facts(None, None), &snapshot(None)),
            Decider::Rules
        );
        assert_eq!(on_model_failure(&c), OnModelFailure::Floor);
        c.llm.fallback = Fallback::None;
        assert_eq!(on_model_failure(&c), OnModelFailure::FailPass);
        assert_eq!(verdict(true), Verdict::Action);
        assert_eq!(verdict(false).as_str(), "no-action");
    }

    #[test]
    fn asked_for_calls_that_all_failed_or_were_refused_are_never_no_action() {
        let n = |ok, refused, failed| ActionCounts {
            ok,
            refused,
            failed,
        };
        let v = counted_verdict;
        assert_eq!(v(Verdict::NoAction, n(0, 0, 0)), Verdict::NoAction);
        assert_eq!(v(Verdict::Skipped, n(0, 0, 0)), Verdict::Skipped);
        assert_eq!(v(Verdict::NoAction, n(0, 3, 0)), Verdict::ActionRefused);
        assert_eq!(v(Verdict::Skipped, n(0, 2, 1)), Verdict::ActionFailed);
        assert_eq!(v(Verdict::NoAction, n(1, 2, 1)), Verdict::Action);
        assert_eq!(v(Verdict::Action, n(0, 0, 1)), Verdict::Action);
    }

    #[test]
    fn only_a_listing_that_failed_with_a_key_is_a_vast_failure() {
        let mut s = snapshot(None);
        assert_eq!(vast_failure(&s), None);
        s.listing_error = Some(crate::fleet::NO_VAST_KEY.into());
        assert_eq!(vast_failure(&s), None);
        s.listing_error = Some("vast.ai HTTP 500 server_error: boom".into());
        assert_eq!(
            vast_failure(&s),
            Some("vast.ai HTTP 500 server_error: boom")
        );
    }
}
