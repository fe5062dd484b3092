//! The report as a table, for the terminal.

use std::collections::BTreeMap;

use super::{fmt, model, Report};

fn map_line(m: &BTreeMap<String, u64>) -> String {
    if m.is_empty() {
        return "none".into();
    }
    m.iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Dollars, or `unknown` (no price modelled).
/// Dollars as `inspect` writes them: `-$0.70`, not `$-0.70`.
fn usd(v: f64) -> String {
    crate::prompt::economics::dollars(v, 2)
}

fn money(x: Option<f64>) -> String {
    x.map_or("unknown".into(), usd)
}

/// The report as a table.
pub fn render_text(r: &Report) -> String {
    let mut rows: Vec<(String, String)> = Vec::new();
    let mut row = |k: &str, v: String| rows.push((k.to_string(), v));
    let p = &r.proofs;
    row(
        "scenario",
        format!(
            "{} ({}h, seed {}, {})",
            r.scenario,
            fmt(r.hours),
            r.seed,
            r.decided_by
        ),
    );
    row(
        "proofs",
        format!(
            "{} completed of {} wanted ({:.1}%), {} offered, {} went elsewhere{}",
            p.completed_of_offered,
            p.wanted,
            p.served_share * 100.0,
            p.offered,
            p.expired,
            match p.completed - p.completed_of_offered {
                0 => String::new(),
                n => format!("; {n} more queued before the start"),
            }
        ),
    );
    row(
        "queue wait",
        format!(
            "p50 {:.0}s, p95 {:.0}s",
            p.queue_wait_p50_secs, p.queue_wait_p95_secs
        ),
    );
    row(
        "hours below target",
        format!(
            "{} (target {} p/h)",
            fmt(r.hours_below_target),
            fmt(r.target_proofs_per_hour)
        ),
    );
    row(
        "spend",
        if r.proofs.completed == 0 {
            // No proof: a cost per proof is undefined, not $0 (the JSON's 0 says none).
            format!("${:.2} from the start, no proof completed", r.money.dollars)
        } else {
            format!(
                "${:.2} from the start, ${:.4}/proof",
                r.money.dollars, r.money.dollars_per_proof
            )
        },
    );
    row(
        "profit",
        match (r.money.revenue, r.money.profit) {
            (Some(rev), Some(p)) => format!(
                "{} (revenue ${rev:.2}, each proof at the price of its completion){}",
                usd(p),
                if r.economics.agent_priced {
                    ""
                } else {
                    "; the agent knew no price"
                }
            ),
            _ => {
                "no price modelled (no [price] in the scenario): revenue and profit unknown".into()
            }
        },
    );
    row(
        "oracle",
        format!(
            "${:.4}/proof ({:.2}x), {} h below target (+{}), {} launches, profit {}",
            r.oracle.dollars_per_proof,
            r.oracle.cost_ratio,
            fmt(r.oracle.hours_below_target),
            fmt(r.oracle.hours_below_over_oracle),
            r.oracle.launches,
            money(r.oracle.profit)
        ),
    );
    let b = &r.reactive_bound;
    row(
        "reactive bound",
        format!(
            "${:.4}/proof, {} h below target, {} launches, profit {}",
            b.dollars_per_proof,
            fmt(b.hours_below_target),
            b.launches,
            money(b.profit)
        ),
    );
    for (name, p) in &r.peers {
        row(
            &format!("peer {name}"),
            format!(
                "${:.4}/proof, {} h below target, {} launches, profit {}",
                p.dollars_per_proof,
                fmt(p.hours_below_target),
                p.launches,
                money(p.profit)
            ),
        );
    }
    let l = &r.launches;
    row(
        "launches",
        format!(
            "{} made ({}/day), {} failed, {} emergency bypasses; refused: {}",
            l.made,
            fmt(l.per_day),
            l.failed,
            l.emergency_bypasses,
            map_line(&l.refused)
        ),
    );
    let st = &r.stops;
    row(
        "stops",
        format!(
            "{} made ({}/day), {} failed; refused: {}; {} rentals ended within 30 min of their start (+{} flagged)",
            st.made,
            fmt(st.per_day),
            st.failed,
            map_line(&st.refused),
            st.within_30_mins_of_start,
            st.within_30_mins_of_start_flagged
        ),
    );
    let ec = &r.economics;
    let mut econ = Vec::new();
    if r.money.price_modelled {
        econ.push(format!(
            "{} launches below the margin, {} instance-hours billed below it ({} at a loss)",
            ec.unprofitable_launches,
            fmt(ec.unprofitable_instance_hours),
            fmt(ec.loss_instance_hours)
        ));
    }
    if ec.most_instances_in_dead_hours > 0 || ec.spend_in_dead_hours > 0.0 {
        econ.push(format!(
            "${:.2} billed while the market was dead (at most {} instances)",
            ec.spend_in_dead_hours, ec.most_instances_in_dead_hours
        ));
    }
    if ec.outbids > 0 {
        econ.push(format!(
            "{} outbid, {} resumed, longest to a replacement {} min",
            ec.outbids,
            ec.resumes,
            ec.outbid_replace_mins_max.map_or("-".into(), fmt)
        ));
    }
    econ.push(format!("{} minutes over a cap", ec.over_cap_minutes));
    row("economics", econ.join("; "));
    row(
        "stuck instances",
        format!(
            "{} seen, {} left",
            r.stuck_instances.seen, r.stuck_instances.unhandled
        ),
    );
    let ru = &r.runs;
    row("runs", format!(
        "{} processes, {} passes ({} failed), {} timer ticks ({} merged), {} doorbell starts, at most {} passes in an hour",
        ru.processes, ru.passes, ru.failed_passes, ru.timer_ticks, ru.ticks_merged, ru.doorbell_starts, ru.max_passes_in_an_hour
    ));
    row("verdicts", map_line(&ru.by_verdict));
    row("decided by", map_line(&ru.by_decider));
    let ll = &r.llm;
    row(
        "llm",
        format!(
            "{} calls, {} skips, {} failed turns; prompt tokens max {}, total {}, {:.1} per tick",
            ll.calls,
            ll.skips,
            ll.failed_turns,
            ll.prompt_tokens_max,
            ll.prompt_tokens_total,
            ll.prompt_tokens_per_tick
        ),
    );
    if let Some(t) = &ll.first_failed_turn {
        row(
            "first failed turn",
            format!(
                "run {} at {} min: {}",
                t.run_id,
                fmt(t.at_mins),
                crate::text::clip(&t.reason, 300)
            ),
        );
    }
    if r.model.name != "rules" {
        row("model", model::line(&r.model));
    }
    if let Some(c) = &r.model.floor_clocks {
        row("floor clocks", model::clocks_line(c));
    }
    if let Some(b) = &r.model.rules {
        row("rules (same seed)", model::rules_line(b));
    }
    let e = &r.events;
    row(
        "events",
        format!(
            "{} inserted ({}), {} claimed, {} failed, {} waiting at the end",
            e.inserted,
            map_line(&e.by_kind),
            e.claimed,
            e.failed,
            e.waiting_at_end
        ),
    );
    row(
        "wakes",
        format!(
            "{} created, {} processed, {} cancelled",
            r.wakes.created, r.wakes.processed, r.wakes.cancelled
        ),
    );
    row(
        "vast.ai",
        format!(
            "{} creates, {} answered 429",
            r.vast.creates, r.vast.answers_429
        ),
    );
    let inc = &r.incident;
    if inc.resets > 0 || inc.first_dead_pass.is_some() || inc.fallback_passes > 0 {
        row("incident", format!(
            "first WORKERS DEAD pass {} asked {} launch(es), {} reached vast.ai; {} reset(s) answered in {}; longest gap {} min; fallback passes {}, fallback stops {}",
            inc.first_dead_pass.map_or("-".into(), |x| x.to_string()),
            inc.launch_requests_in_first_dead_pass,
            inc.launches_in_first_dead_pass,
            inc.resets,
            inc.reset_answered_secs.map_or("-".into(), |s| format!("{}s", fmt(s))),
            fmt(inc.max_silence_mins),
            inc.fallback_passes,
            inc.fallback_stops
        ));
    }
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    let mut out = String::new();
    for (k, v) in &rows {
        out.push_str(&format!("{k:<width$}  {v}\n"));
    }
    out.push_str("\nchecks:\n");
    let cw = r.checks.iter().map(|c| c.name.len()).max().unwrap_or(0);
    for c in &r.checks {
        out.push_str(&format!(
            "  {} {:<cw$}  {} (expected {})\n",
            match (c.ok, c.not_applicable) {
                (_, true) => "n/a ",
                (true, _) => "PASS",
                _ => "FAIL",
            },
            c.name,
            c.actual,
            c.expected
        ));
    }
    for e in &r.errors {
        out.push_str(&format!("  error: {e}\n"));
    }
    // A model that never answered leaves every pass to the fallback: the checks then judge
    // the rules, and a PASSED below would read as the model's (a sim walkthrough saw 108
    // failed turns, no key sent, and PASSED).
    let model_silent = r.model.name != "rules"
        && !r.model.name.ends_with("(simulated outage)")
        && r.llm.failed_turns > 0
        && !r.runs.by_decider.contains_key("llm")
        && !r.runs.by_decider.contains_key("floor");
    if model_silent {
        out.push_str(&format!(
            "\nNOTE: the model gave no usable answer ({} failed turns{}): every pass was decided by the fallback rules, so the checks below judge the rules, not the model\n",
            r.llm.failed_turns,
            r.llm
                .first_failed_turn
                .as_ref()
                .map(|t| format!("; the first: {}", crate::text::clip(&t.reason, 200)))
                .unwrap_or_default()
        ));
    }
    let na = r.checks.iter().filter(|c| c.not_applicable).count();
    out.push_str(&format!(
        "\n{}: {} of {} checks passed{}\n",
        if r.passed { "PASSED" } else { "FAILED" },
        r.checks
            .iter()
            .filter(|c| c.ok && !c.not_applicable)
            .count(),
        r.checks.len() - na,
        match na {
            0 => String::new(),
            n if r
                .checks
                .iter()
                .filter(|c| c.not_applicable)
                .all(super::checks::is_not_reached) =>
            {
                format!(
                    " ({n} not applicable: not reached within {} h)",
                    fmt(r.hours)
                )
            }
            n => format!(" ({n} not applicable: see n/a above)"),
        }
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::usd;

    /// A loss reads as `inspect` writes one; a loss that rounds to nothing is $0.00.
    #[test]
    fn dollars_carry_their_sign_before_the_dollar() {
        assert_eq!(usd(-0.7), "-$0.70");
        assert_eq!(usd(0.7), "$0.70");
        assert_eq!(usd(-0.001), "$0.00");
        assert_eq!(usd(-0.0), "$0.00");
    }
}
