//! The checks of a report: the invariants, always, then the scenario's own expectations.

use super::{fmt, r4, Check, Report};
use crate::sim::scenario::{repetitions, ActionKind, Scenario};

fn at_most(name: &str, actual: f64, max: f64) -> Check {
    Check {
        name: name.into(),
        expected: format!("<= {}", fmt(max)),
        actual: fmt(actual),
        ok: actual <= max + 1e-9,
        not_applicable: false,
    }
}

fn at_least(name: &str, actual: f64, min: f64) -> Check {
    Check {
        name: name.into(),
        expected: format!(">= {}", fmt(min)),
        actual: fmt(actual),
        ok: actual + 1e-9 >= min,
        not_applicable: false,
    }
}

/// Whether `c` is a [`not_reached`] check: n/a because what it judges did not happen within
/// the run's hours (the text report's summary says so), not n/a for another reason.
pub fn is_not_reached(c: &Check) -> bool {
    c.not_applicable && c.actual.starts_with("no ") && c.actual.contains(" within ")
}

/// A check about something the scenario did not schedule within the simulated hours.
fn not_reached(name: &str, expected: String, what: &str, hours: f64) -> Check {
    Check {
        name: name.into(),
        expected,
        actual: format!("no {what} within {} h", fmt(hours)),
        ok: false,
        not_applicable: true,
    }
}

/// The invariants, always; then the scenario's own bounds. A bound about something not
/// scheduled within `hours` (the simulated hours) is not applicable.
pub fn checks(r: &Report, s: &Scenario, hours: f64) -> Vec<Check> {
    let inv = &r.invariants;
    let mut c = vec![
        at_most("overlapping runs", inv.overlapping_runs as f64, 0.0),
        at_most("events lost", inv.events_lost as f64, 0.0),
        at_most(
            "wakes processed twice",
            inv.wakes_processed_twice as f64,
            0.0,
        ),
        at_most(
            "wakes overdue and unprocessed",
            inv.wakes_overdue as f64,
            0.0,
        ),
        at_most("runs left running", inv.runs_left_running as f64, 0.0),
        at_most(
            "foreign instances touched",
            inv.foreign_instances_touched as f64,
            0.0,
        ),
    ];
    let e = &s.expect;
    if let Some(v) = e.max_hours_below_target {
        c.push(at_most("hours below target", r.hours_below_target, v));
    }
    if let Some(v) = e.max_hours_below_target_over_oracle {
        c.push(at_most(
            "hours below target over the oracle's",
            r.oracle.hours_below_over_oracle,
            v,
        ));
    }
    if let Some(v) = e.min_served_share {
        c.push(at_least(
            "share of wanted proofs served",
            r.proofs.served_share,
            v,
        ));
    }
    // With no proof done a cost per proof is not 0 but undefined: the check fails (a sim
    // walkthrough saw $0.58 spent on nothing pass `max_dollars_per_proof = 0.0001`).
    let per_proof = |name: &str, actual: f64, max: f64| match r.proofs.completed {
        0 => Check {
            name: name.into(),
            expected: format!("<= {}", fmt(max)),
            actual: "no proof completed".into(),
            ok: false,
            not_applicable: false,
        },
        _ => at_most(name, actual, max),
    };
    if let Some(v) = e.max_dollars_per_proof {
        c.push(per_proof("dollars per proof", r.money.dollars_per_proof, v));
    }
    if let Some(v) = e.max_cost_ratio_to_oracle {
        c.push(per_proof(
            "$/proof over the oracle's",
            r.oracle.cost_ratio,
            v,
        ));
    }
    if let Some(v) = e.min_launches {
        c.push(at_least("launches made", r.launches.made as f64, v as f64));
    }
    if let Some(v) = e.max_launches {
        c.push(at_most("launches made", r.launches.made as f64, v as f64));
    }
    if let Some(v) = e.min_stops {
        c.push(at_least("stops made", r.stops.made as f64, v as f64));
    }
    if let Some(v) = e.min_emergency_bypasses {
        c.push(at_least(
            "emergency bypasses",
            r.launches.emergency_bypasses as f64,
            v as f64,
        ));
    }
    if e.first_launch_in_first_dead_pass == Some(true) {
        // Launches that reached vast.ai, not requests: a request the guardrails or vast.ai
        // refused launches nothing.
        let inc = &r.incident;
        let ok = inc.first_dead_pass.is_some() && inc.launches_in_first_dead_pass > 0;
        c.push(Check {
            name: "launch made in the first WORKERS DEAD pass".into(),
            expected: "yes".into(),
            actual: match inc.first_dead_pass {
                Some(id) => format!(
                    "run {id}: {} launch(es) reached vast.ai, of {} requested",
                    inc.launches_in_first_dead_pass, inc.launch_requests_in_first_dead_pass
                ),
                None => "no pass saw WORKERS DEAD".into(),
            },
            ok,
            not_applicable: false,
        });
    }
    if let Some(v) = e.reset_answered_within_secs {
        let actual = r.incident.reset_answered_secs;
        let name = "reset answered by a pass";
        let expected = format!("within {}s", fmt(v));
        let scheduled = s
            .events
            .iter()
            .any(|a| a.kind == ActionKind::ResetSession && repetitions(a, hours) > 0);
        c.push(if scheduled {
            Check {
                name: name.into(),
                expected,
                actual: actual.map_or("never".into(), |a| format!("{}s", fmt(a))),
                ok: r.incident.resets > 0 && actual.is_some_and(|a| a <= v),
                not_applicable: false,
            }
        } else {
            not_reached(name, expected, "reset", hours)
        });
    }
    if let Some(v) = e.max_silence_mins {
        c.push(at_most(
            "longest gap between passes (min)",
            r.incident.max_silence_mins,
            v,
        ));
    }
    if let Some(v) = e.max_failed_passes {
        c.push(at_most(
            "failed passes",
            r.runs.failed_passes as f64,
            v as f64,
        ));
    }
    if let Some(v) = e.min_fallback_passes {
        c.push(at_least(
            "passes decided by the fallback rules",
            r.incident.fallback_passes as f64,
            v as f64,
        ));
    }
    if let Some(v) = e.min_fallback_share {
        let ok_passes = r.runs.passes - r.runs.failed_passes;
        let share = if ok_passes == 0 {
            0.0
        } else {
            r.incident.fallback_passes as f64 / ok_passes as f64
        };
        c.push(at_least(
            "share of passes decided by the fallback rules",
            r4(share),
            v,
        ));
    }
    if let Some(v) = e.max_flagged_passes {
        let name = "most passes a flagged instance was left";
        c.push(match &r.model.floor_clocks {
            Some(f) => at_most(name, f.flagged_passes_max as f64, v as f64),
            None => Check {
                name: name.into(),
                expected: format!("<= {v}"),
                actual: "no floor (the rules decide every pass)".into(),
                ok: false,
                not_applicable: true,
            },
        });
    }
    if let Some(v) = e.max_passes_per_hour {
        c.push(at_most(
            "most passes in one hour",
            r.runs.max_passes_in_an_hour as f64,
            v,
        ));
    }
    if let Some(v) = e.min_rate_limited_calls {
        let name = "vast.ai 429 answers";
        c.push(if s.vast_429.iter().any(|w| w.at_hours < hours) {
            at_least(name, r.vast.answers_429 as f64, v as f64)
        } else {
            not_reached(name, format!(">= {v}"), "[[vast_429]] window", hours)
        });
    }
    let ec = &r.economics;
    // At most `v` of a figure judged by the price the agent knew: n/a while it knew none.
    let priced_at_most = |name: &str, actual: f64, v: f64| {
        if ec.agent_priced {
            at_most(name, actual, v)
        } else {
            Check {
                name: name.into(),
                expected: format!("<= {}", fmt(v)),
                actual: format!(
                    "{} (the agent knew no price: no FIL/USD fetched)",
                    fmt(actual)
                ),
                ok: false,
                not_applicable: true,
            }
        }
    };
    if let Some(v) = e.max_unprofitable_launches {
        c.push(priced_at_most(
            "launches below the margin (true rates)",
            ec.unprofitable_launches as f64,
            v as f64,
        ));
    }
    if let Some(v) = e.max_loss_instance_hours {
        c.push(priced_at_most(
            "instance-hours billed at a loss",
            ec.loss_instance_hours,
            v,
        ));
    }
    if let Some(v) = e.max_unprofitable_instance_hours {
        c.push(priced_at_most(
            "instance-hours billed below the margin",
            ec.unprofitable_instance_hours,
            v,
        ));
    }
    if let Some(v) = e.max_spend_in_dead_hours {
        c.push(at_most(
            "$ billed while the market was dead",
            ec.spend_in_dead_hours,
            v,
        ));
    }
    if let Some(v) = e.max_instances_in_dead_hours {
        c.push(at_most(
            "most instances billing while the market was dead",
            ec.most_instances_in_dead_hours as f64,
            v as f64,
        ));
    }
    if let Some(v) = e.min_profit_share_of_oracle {
        let name = "profit over the oracle's";
        c.push(match ec.profit_share_of_oracle {
            Some(share) if ec.agent_priced => at_least(name, share, v),
            _ => Check {
                name: name.into(),
                expected: format!(">= {}", fmt(v)),
                actual: if ec.agent_priced {
                    "the oracle made no profit".into()
                } else {
                    "the agent knew no price: no FIL/USD fetched".into()
                },
                ok: false,
                not_applicable: true,
            },
        });
    }
    if let Some(v) = e.max_over_cap_minutes {
        c.push(at_most(
            "minutes over max_instances or max_dph_total",
            ec.over_cap_minutes as f64,
            v as f64,
        ));
    }
    if let Some(v) = e.max_outbid_replace_mins {
        let name = "longest outbid to its replacement (min)";
        c.push(match ec.outbid_replace_mins_max {
            Some(m) => at_most(name, m, v),
            None => not_reached(name, format!("<= {}", fmt(v)), "outbid", hours),
        });
    }
    if let Some(v) = e.max_short_rentals {
        c.push(at_most(
            "rentals ended within 30 min of their start (unflagged)",
            r.stops.within_30_mins_of_start as f64,
            v as f64,
        ));
    }
    if let Some(v) = e.max_stuck_unhandled {
        c.push(at_most(
            "stuck instances left at the end",
            r.stuck_instances.unhandled as f64,
            v as f64,
        ));
    }
    c
}
