//! The `Action needed:` line while WORKERS DEAD: the launches the rules would make
//! (`policy::rules::emergency_launches`), said against the money caps, the launch window and
//! the profit check, in words a small model acts on. Pure.

use crate::clock::human_duration;
use crate::config::Config;
use crate::fleet::Snapshot;
use crate::policy::rules::emergency_launches;
use crate::store::instances::InstanceRow;

/// While WORKERS DEAD, what to do in words a small model acts on: how many launches the
/// rules would make on this snapshot (`Action needed: call launch_instance 3 times now`), or
/// that what is coming covers the work. None otherwise, and while the operator's pause or
/// hold (said on their own lines) keeps launches off.
pub fn action_needed_line(s: &Snapshot, config: &Config) -> Option<String> {
    let d = s.demand.as_ref().filter(|d| d.workers_dead())?;
    if s.paused.is_some() || s.hold.is_some() || !s.taskless.is_empty() {
        return None;
    }
    let why = format!(
        "WORKERS DEAD: {} proofs queued, no live worker takes them",
        d.queued_work()
    );
    let asked = emergency_launches(s, config);
    let times = match asked {
        0 => {
            return Some(format!(
                "No launch needed now ({why}; the instances coming cover them): destroy flagged ones, if any."
            ))
        }
        1 => "once".to_string(),
        n => format!("{n} times"),
    };
    // The caps first: a launch they refuse is no action a model can take (the prompt
    // walkthrough: "call launch_instance 3 times now" with $0.20/h left under the caps and
    // offers at $0.40/h, each call refused `budget`, then the floor's three as well).
    // Launches not configured: that line speaks (every launch is refused `not_configured`).
    if !config.policy.missing_launch_keys(&config.vast).is_empty() {
        return None;
    }
    // The slot cap as the money caps: every slot held by an instance of ours that is not
    // flagged leaves no launch to make (the re-test: "call launch_instance once now" under
    // max_instances 1 held by one booting, refused `instance_cap` by the model and the floor).
    if s.headroom_slots(config) == Some(0) {
        let max = config.policy.max_instances.unwrap_or(0);
        return Some(match s.flagged(config).len() {
            0 => format!(
                "No launch can go now ({why}): policy.max_instances ({max}) is reached by instances of ours; every launch is refused until one goes or the operator raises it. Say so in your answer."
            ),
            n => format!(
                "Action needed: destroy the flagged instances first (stop_instance): {n} hold slots under policy.max_instances ({max}) and earn nothing; then launch ({why})."
            ),
        });
    }
    let money = caps_room(s, config, asked);
    if let Some(CapsRoom::None(why_not) | CapsRoom::Short(why_not)) = &money {
        // Flagged instances bill and earn nothing: destroying them frees what they bill, as
        // the money guardrail counts it (a stopped one its disk).
        let flagged = s.flagged(config);
        let rows: Vec<InstanceRow> = s
            .instances
            .iter()
            .filter(|r| flagged.iter().any(|f| r.vast_id == Some(f.vast_id)))
            .cloned()
            .collect();
        let flagged_dph = crate::fleet::dph_of(&rows);
        if flagged_dph > 0.0 {
            return Some(format!(
                "Action needed: destroy the flagged instances first (stop_instance): they bill ${flagged_dph:.2}/h and earn nothing, and {why_not}; then launch ({why})."
            ));
        }
        if matches!(money, Some(CapsRoom::None(_))) {
            return Some(format!(
                "No launch can go now ({why}): {why_not}; every launch is refused until the operator raises a cap (the daily cap's room comes back at midnight UTC). Say so in your answer."
            ));
        }
    }
    let mut note = match &money {
        Some(CapsRoom::Tight(n) | CapsRoom::Short(n)) => format!("; {n}"),
        _ => String::new(),
    };
    // Each launch is checked for profit, WORKERS DEAD's included: where no offer pays at the
    // price every call is refused (the prompt audit: "call launch_instance 2 times now", two
    // refusals `unprofitable`).
    if s.price.is_some() {
        note.push_str("; each launch is checked for profit: if every one is refused `unprofitable`, no offer pays at the price, so say so");
    }
    // The rules ask even when the window is full (so a refusal is on record); the model is
    // told when its call can go through.
    let w = s.window(config);
    Some(if w.used >= w.limit {
        let when = w
            .retry_after_secs
            .map(|secs| format!(" in {}", human_duration(secs as i64 * 1000)))
            .unwrap_or_default();
        format!(
            "Action needed: call launch_instance {times} when the launch window frees{when} ({why}; the emergency allowance is used up until then{note})."
        )
    } else {
        format!("Action needed: call launch_instance {times} now ({why}{note}).")
    })
}

/// What the money caps leave for launches, when it binds.
enum CapsRoom {
    /// No launch fits: why, in words.
    None(String),
    /// Fewer instances than asked fit at what one costs here (or only one): the note.
    Tight(String),
    /// None fits at what one costs here, but that is no offer's price: a cheaper one may.
    Short(String),
}

/// The room the $/h and daily caps leave (`Snapshot::headroom_dph`, the guardrail's own)
/// for `asked` launches, against the mean $/h of our instances that bill (what an instance
/// costs here; none: the room is said, as launches past it are refused). None when it does
/// not bind.
fn caps_room(s: &Snapshot, config: &Config, asked: u32) -> Option<CapsRoom> {
    let room = s.headroom_dph(config)?;
    let caps = "policy.max_dph_total and policy.daily_spend_max";
    if room < 0.01 {
        return Some(CapsRoom::None(format!("{caps} leave $0.00/h")));
    }
    let cheapest = s
        .offers
        .iter()
        .flatten()
        .map(|o| o.dph_total)
        .filter(|d| *d > 0.0)
        .min_by(f64::total_cmp);
    let mean = s.mean_instance_dph();
    // What an instance costs, from the surest to the roughest: the cheapest offer this pass
    // searched (nothing cheaper can be rented), our billing instances' mean, at most
    // vast.offers.max_dph_per_instance. Only the first says that no launch fits: under the
    // others a cheaper offer may (the re-test: "no launch can go" while one at $0.25/h fit
    // a $0.30/h room, judged at our $0.80/h).
    let (e, at, sure) = match (cheapest, mean, config.vast.offers.max_dph_per_instance) {
        (Some(c), _, _) => (c, "the cheapest offer", true),
        (None, Some(m), _) => (m, "our instances' mean", false),
        (None, None, Some(m)) => (m, "at most, vast.offers.max_dph_per_instance", false),
        // Nothing tells what one costs: the room is said, for the model to weigh against
        // the offers it searches.
        (None, None, None) if asked > 1 => {
            return Some(CapsRoom::Tight(format!(
                "{caps} leave ${room:.2}/h for them all: launches past it are refused"
            )))
        }
        (None, None, None) => return None,
    };
    let fit = (room / e + 1e-9).floor() as u32;
    match fit {
        0 if sure => Some(CapsRoom::None(format!(
            "{caps} leave ${room:.2}/h, less than the cheapest offer (${e:.2}/h)"
        ))),
        0 => Some(CapsRoom::Short(format!(
            "{caps} leave ${room:.2}/h, less than an instance costs here (${e:.2}/h, {at}): only a cheaper offer fits, and launches past the room are refused"
        ))),
        fit if fit < asked.max(2) && (fit < asked || asked <= 1) => {
            let what = if fit == 1 {
                "one instance".to_string()
            } else {
                format!("{fit} instances")
            };
            Some(CapsRoom::Tight(format!(
                "{caps} leave ${room:.2}/h, about {what} at ${e:.2}/h ({at}): launches past it are refused"
            )))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::demand::Demand;
    use crate::fleet::fixtures::*;
    use crate::fleet::LOADING;

    #[test]
    fn workers_dead_says_the_launches_the_rules_would_make() {
        let c = config();
        let planned = |s: &Snapshot| {
            crate::policy::rules::decide(s, &c, 0, crate::policy::rules::Mode::Full)
                .iter()
                .filter(|p| p.tool == "launch_instance")
                .count()
        };
        // Target 500 p/h at 50 each, capped by the emergency allowance (6).
        let mut s = dead_fleet(0);
        assert_eq!(planned(&s), 6);
        assert_eq!(
            action_needed_line(&s, &c).unwrap(),
            "Action needed: call launch_instance 6 times now (WORKERS DEAD: 59 proofs queued, no live worker takes them; policy.max_dph_total and policy.daily_spend_max leave $10.00/h for them all: launches past it are refused)."
        );
        // No instance of ours bills: the room is judged at the cheapest offer, or at most
        // max_dph_per_instance (it said 6 launches under a $1.00/h cap: the prompt audit).
        let mut tight = c.clone();
        tight.policy.max_dph_total = Some(1.0);
        tight.vast.offers.max_dph_per_instance = Some(0.40);
        assert_eq!(
            action_needed_line(&s, &tight).unwrap(),
            "Action needed: call launch_instance 6 times now (WORKERS DEAD: 59 proofs queued, no live worker takes them; policy.max_dph_total and policy.daily_spend_max leave $1.00/h, about 2 instances at $0.40/h (at most, vast.offers.max_dph_per_instance): launches past it are refused)."
        );
        // Under the most an instance may cost a cheaper offer may still fit: said so, the
        // launches asked; under the cheapest offer searched none can.
        tight.policy.max_dph_total = Some(0.30);
        assert!(action_needed_line(&s, &tight)
            .unwrap()
            .ends_with("leave $0.30/h, less than an instance costs here ($0.40/h, at most, vast.offers.max_dph_per_instance): only a cheaper offer fits, and launches past the room are refused)."));
        let mut searched = s.clone();
        searched.offers = Some(vec![offer(1, "RTX 4090", 0.35)]);
        assert!(action_needed_line(&searched, &tight)
            .unwrap()
            .starts_with("No launch can go now (WORKERS DEAD: 59 proofs queued, no live worker takes them): policy.max_dph_total and policy.daily_spend_max leave $0.30/h, less than the cheapest offer ($0.35/h)"));
        searched.offers.as_mut().unwrap()[0].dph_total = 0.25;
        assert!(action_needed_line(&searched, &tight)
            .unwrap()
            .ends_with("leave $0.30/h, about one instance at $0.25/h (the cheapest offer): launches past it are refused)."));
        // With a price, each launch is checked for profit: said.
        let mut priced = s.clone();
        priced.price = Some(crate::price::Price {
            revenue_per_proof: 0.02,
            proof_fil: 0.004,
            proof_fil_source: "config",
            fil_usd: 5.0,
            fil_usd_source: "config",
            fil_usd_at: NOW,
        });
        assert!(action_needed_line(&priced, &c)
            .unwrap()
            .contains("each launch is checked for profit: if every one is refused `unprofitable`, no offer pays at the price, so say so)."));
        // Three already spent in the window: three left.
        s.window_launches = vec![NOW - 10 * MIN, NOW - 5 * MIN, NOW - MIN];
        assert_eq!(planned(&s), 3);
        assert!(action_needed_line(&s, &c)
            .unwrap()
            .starts_with("Action needed: call launch_instance 3 times now (WORKERS DEAD"));
        // All six spent: the rules still ask once (for the record); the model is told when.
        s.window_launches = vec![NOW - 12 * MIN; 6];
        assert_eq!(planned(&s), 1);
        assert_eq!(
            action_needed_line(&s, &c).unwrap(),
            "Action needed: call launch_instance once when the launch window frees in 3m (WORKERS DEAD: 59 proofs queued, no live worker takes them; the emergency allowance is used up until then)."
        );
        // Ten loading cover the target: nothing to launch, and the line says so.
        let s = dead_fleet(10);
        assert_eq!(planned(&s), 0);
        assert_eq!(
            action_needed_line(&s, &c).unwrap(),
            "No launch needed now (WORKERS DEAD: 59 proofs queued, no live worker takes them; the instances coming cover them): destroy flagged ones, if any."
        );
        // Nine cover all but one.
        let s = dead_fleet(9);
        assert!(action_needed_line(&s, &c)
            .unwrap()
            .starts_with("Action needed: call launch_instance once now"));
        // Paused: the pause line speaks; live workers: no emergency.
        let mut s = dead_fleet(0);
        s.paused = Some(crate::store::ops::Pause {
            since: NOW,
            until: None,
            reason: "r".into(),
        });
        assert_eq!(action_needed_line(&s, &c), None);
        let mut s = dead_fleet(0);
        s.demand.as_mut().unwrap().workers = vec![worker("m", "10.0.0.1:1", 1)];
        assert_eq!(action_needed_line(&s, &c), None);
        // Work waits: `active=false` is left out; with none waiting it is said.
        assert!(s
            .observation_line(&c)
            .starts_with("Demand: 1 live workers (0 idle). "));
        s.demand.as_mut().unwrap().pending = 0;
        assert!(s
            .observation_line(&c)
            .starts_with("Demand: active=false, 1 live workers (0 idle). "));
    }

    fn dead_fleet(loading: usize) -> Snapshot {
        Snapshot {
            now: NOW,
            demand: Some(Demand {
                pending: 59,
                ..Default::default()
            }),
            instances: (0..loading)
                .map(|i| {
                    row(
                        &format!("fleetagent-l{i}"),
                        Some(i as i64 + 1),
                        LOADING,
                        0.4,
                    )
                })
                .collect(),
            ..Default::default()
        }
    }

    /// The caps leave less than our instances cost: only a cheaper offer fits, and the line
    /// says so (it asked for launches each refused `budget`: the prompt walkthrough; then it
    /// said no launch could go while a $0.25/h offer fit: the re-test); about one: it says
    /// what is left.
    #[test]
    fn workers_dead_says_when_the_caps_leave_no_launch() {
        let mut c = config();
        let s = dead_fleet(2); // two booting at $0.40/h
        c.policy.max_dph_total = Some(1.0);
        let line = action_needed_line(&s, &c).unwrap();
        assert_eq!(
            line,
            "Action needed: call launch_instance 6 times now (WORKERS DEAD: 59 proofs queued, no live worker takes them; policy.max_dph_total and policy.daily_spend_max leave $0.20/h, less than an instance costs here ($0.40/h, our instances' mean): only a cheaper offer fits, and launches past the room are refused)."
        );
        c.policy.max_dph_total = Some(1.5);
        let line = action_needed_line(&s, &c).unwrap();
        assert!(
            line.starts_with("Action needed: call launch_instance ")
                && line.ends_with("; policy.max_dph_total and policy.daily_spend_max leave $0.70/h, about one instance at $0.40/h (our instances' mean): launches past it are refused)."),
            "{line}"
        );
        c.policy.max_dph_total = Some(10.0);
        assert!(!action_needed_line(&s, &c).unwrap().contains("leave $"));
        // A flagged instance bills and earns nothing: destroying it comes first (the re-test:
        // "no launch can go" while the floor freed the room a pass later).
        let mut s = dead_fleet(2);
        let mut dead = row("fleetagent-dead", Some(9), crate::fleet::DEAD, 0.4);
        dead.actual_status = Some("exited".into());
        s.instances.push(dead);
        c.policy.max_dph_total = Some(1.3);
        assert!(
            action_needed_line(&s, &c).unwrap().starts_with(
                "Action needed: destroy the flagged instances first (stop_instance): they bill $0.40/h and earn nothing"
            ),
            "{:?}",
            action_needed_line(&s, &c)
        );
        // Launches not configured: that line speaks.
        c.vast.image = None;
        assert_eq!(action_needed_line(&s, &c), None);
    }

    /// Every slot under max_instances held by an instance of ours that is not flagged: no
    /// launch can go, said (it asked one, refused `instance_cap` twice: the re-test).
    #[test]
    fn workers_dead_says_when_max_instances_leaves_no_launch() {
        let mut c = config();
        c.policy.max_instances = Some(2);
        let s = dead_fleet(2);
        assert!(action_needed_line(&s, &c).unwrap().starts_with(
            "No launch can go now (WORKERS DEAD: 59 proofs queued, no live worker takes them): policy.max_instances (2) is reached by instances of ours"
        ));
        // One of them flagged: it goes first.
        let mut f = s.clone();
        f.instances[0].state = crate::fleet::DEAD;
        f.instances[0].actual_status = Some("exited".into());
        assert!(action_needed_line(&f, &c).unwrap().starts_with(
            "Action needed: destroy the flagged instances first (stop_instance): 1 hold slots under policy.max_instances (2)"
        ));
        c.policy.max_instances = Some(3);
        assert!(action_needed_line(&s, &c)
            .unwrap()
            .starts_with("Action needed: call launch_instance"));
    }
}
