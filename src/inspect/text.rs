//! The human-readable form of the report (`inspect` without `--json`).

use super::{InstanceView, Report};

/// Outside text (an event's or a wake's reason, up to a trigger's whole argument) is shown cut
/// to this many characters, on one line; `inspect --json` has it whole.
const SHOWN_REASON_CHARS: usize = 200;

/// The human-readable form of the report.
/// `price       $0.0400 a proof (0.01 FIL from curio x FIL/USD 4.000 from url, fetched
/// <time>)`, or `price       unknown: <why> (the profit check is off)`.
fn price_line(p: &super::PriceView) -> String {
    match (p.revenue_per_proof, p.proof_fil, p.fil_usd) {
        (Some(rev), Some(fil), Some(usd)) => format!(
            "price       ${rev:.4} a proof ({} FIL from {} x FIL/USD {usd:.3} from {}, as of {})",
            crate::prompt::economics::short_float(fil),
            p.proof_fil_source.unwrap_or("?"),
            p.fil_usd_source.unwrap_or("?"),
            p.fil_usd_at.as_deref().unwrap_or("?")
        ),
        _ => format!(
            "price       price unknown: {} (the profit check is off)",
            p.unknown.as_deref().unwrap_or("no price")
        ),
    }
}

/// `profit      -$0.40/h: the fleet bills $0.40/h, no completion of ours in the last hour
/// (cost per proof unknown); the cluster's other machines completed 12`.
fn profit_line(r: &Report) -> String {
    use crate::prompt::economics::dollars;
    let p = &r.price;
    let head = match (p.profit_per_hour, p.revenue_per_hour) {
        (Some(profit), Some(rev)) => format!(
            "{}/h: revenue {}/h{} against the fleet's ${:.2}/h",
            dollars(profit, 2),
            dollars(rev, 2),
            crate::prompt::economics::paid_text(p.paid_share)
                .map(|t| format!(" ({t})"))
                .unwrap_or_default(),
            r.fleet_dph
        ),
        _ => format!("unknown; {}", fleet_bills(r)),
    };
    let ours = match (p.ours_completed_1h, p.cost_per_proof) {
        (Some(n), Some(c)) => format!("our {n} completions of the last hour (${c:.4}/proof)"),
        (Some(_), None) => {
            "no completion of ours in the last hour (cost per proof unknown)".to_string()
        }
        (None, _) => "which completions are ours is unknown".to_string(),
    };
    let others = p
        .others_completed_1h
        .map(|n| format!("; the cluster's other machines completed {n}"))
        .unwrap_or_default();
    format!("profit      {head}, {ours}{others}")
}

/// `spend       $1.23 today (UTC) of policy.daily_spend_max $10.00; the fleet bills $0.80/h`.
fn spend_line(r: &Report) -> String {
    let cap = match r.daily_spend_max {
        Some(max) => format!(" of policy.daily_spend_max ${max:.2}"),
        None => " (no daily cap)".to_string(),
    };
    format!(
        "spend       ${:.2} today (UTC){cap}; {}",
        r.spend_today,
        fleet_bills(r)
    )
}

/// `the fleet bills $0.80/h`; with outbid bids, which the caps count at their full price
/// while vast.ai bills only their disks, both figures (a bids walkthrough read $1.64/h for a
/// fleet billing $0.92/h).
fn fleet_bills(r: &Report) -> String {
    let outbid: Vec<&InstanceView> = r
        .fleet
        .iter()
        .filter(|i| i.state == crate::fleet::OUTBID)
        .collect();
    if outbid.is_empty() {
        return format!("the fleet bills ${:.2}/h", r.fleet_dph);
    }
    let paused: f64 = outbid.iter().filter_map(|i| i.dph).sum();
    let disks: f64 = outbid.iter().filter_map(|i| i.storage_dph).sum();
    format!(
        "the fleet bills ${:.2}/h ({} outbid bid(s) bill their disks, ${disks:.2}/h; the caps count them at ${paused:.2}/h, the price they resume at, and the fleet at ${:.2}/h)",
        (r.fleet_dph - paused + disks).max(0.0),
        outbid.len(),
        r.fleet_dph
    )
}

/// `day         believed: why; next hour 300/h; UTC 00 120 | 01 118 | ...`: the day profile
/// (`fleet::day`), each hour of the day it knows with its proofs/h (`*`: saturated on a day,
/// demand was at least that).
fn day_line(d: &super::DayView) -> String {
    let hours: Vec<String> = d
        .hours
        .iter()
        .map(|h| {
            format!(
                "{:02} {}{}",
                h.hour,
                crate::fleet::num(h.pph),
                if h.saturated_days > 0 { "*" } else { "" }
            )
        })
        .collect();
    format!(
        "day         {}: {}; next hour {}; {} h of history{}{}",
        if d.trusted {
            "believed"
        } else {
            "not believed"
        },
        d.why,
        d.next_hour_pph
            .map_or("unknown".into(), |v| format!("{}/h", crate::fleet::num(v))),
        crate::fleet::num(d.history_hours),
        if hours.is_empty() { "" } else { "; UTC " },
        hours.join(" | ")
    )
}

/// `floor       deficit since T, UNANSWERED: why; surplus since T; flagged: instance 7 left 1
/// pass`: the floor's clocks (docs/guardrails.md, "The floor").
fn floor_line(f: &super::FloorView) -> String {
    let mut parts = Vec::new();
    if let Some(since) = &f.deficit_since {
        parts.push(match &f.unanswered {
            Some(why) => format!("deficit since {since}, UNANSWERED in the last pass: {why}"),
            None => format!("deficit since {since}, answered"),
        });
    }
    if let Some(since) = &f.surplus_since {
        parts.push(format!("idle surplus since {since}"));
    }
    if !f.flagged.is_empty() {
        let each: Vec<String> = f
            .flagged
            .iter()
            .map(|x| {
                format!(
                    "instance {} left {} pass{}",
                    x.instance_id,
                    x.passes,
                    if x.passes == 1 { "" } else { "es" }
                )
            })
            .collect();
        parts.push(format!("flagged: {}", each.join(", ")));
    }
    format!("floor       {}", parts.join("; "))
}

/// `config`: the file this report judges, and on a simulation's database whose config that
/// is: the simulation's own (kept in the database), or this host's (none kept, or unreadable).
fn config_line(r: &Report) -> String {
    let missing = if r.config_found {
        ""
    } else {
        " (not found: every key has its default)"
    };
    let Some(sim) = &r.sim else {
        return format!("config      {}{missing}", r.config_path);
    };
    if sim.config == "simulation" {
        let peer = sim
            .peer
            .as_ref()
            .map_or(String::new(), |p| format!(", peer {p}"));
        return format!(
            "config      the simulation's own: scenario {}, seed {}{peer} (kept in {}; [vast.env] not kept)",
            sim.scenario.as_deref().unwrap_or("?"),
            sim.seed.map_or("?".into(), |s| s.to_string()),
            r.config_path,
        );
    }
    format!(
        "config      {}{missing}; this host's, not the one the simulation ran with ({})",
        r.config_path,
        sim.config_error.as_deref().unwrap_or("none kept"),
    )
}

pub fn render_text(r: &Report) -> String {
    let mut out = String::new();
    let mut line = |s: String| {
        out.push_str(&s);
        out.push('\n');
    };
    line(format!(
        "fleetagent {} (commit {}) at {}{}",
        r.version,
        r.commit,
        r.now,
        if crate::store::ops::is_sim(&r.install_id) {
            " (a simulation's database: read as of its last pass)"
        } else {
            ""
        }
    ));
    line(format!("state dir   {}", r.state_dir));
    line(config_line(r));
    line(format!(
        "database    {} ({} bytes, wal {} bytes, schema {})",
        r.database.path, r.database.size_bytes, r.database.wal_bytes, r.database.schema_version
    ));
    line(format!(
        "session     {} (since {}); next run id {}",
        r.session_id, r.session_started_at, r.next_run_id
    ));
    if let Some(ha) = &r.ha {
        line(ha_line(ha));
        // A follower's lines are its copy as of its last lead: a pause ended since, a hold
        // lifted, a fleet at $0.00/h that bills (the HA walkthrough read them as now).
        // Only a follower's: with the database unreadable (a blip, a shell without its
        // URL) the role is unknown, and the leader's own lines are the fleet now (the
        // re-test: every host, the leader too, called its lines stale).
        if ha.role == "follower" {
            let there = match (&ha.holder, ha.lease_left_secs) {
                (Some(h), Some(left)) if left > 0.0 && *h != ha.host_id => {
                    format!("`fleetagent inspect` on {h} shows them now")
                }
                _ => "the next leader's `fleetagent inspect` shows them now".to_string(),
            };
            line(format!(
                "NOT LEADING the lines below are this host's copy as of when it last led (or its init), not the fleet now (pause, holds, instances, spend, price): {there}"
            ));
        }
    }
    line(format!(
        "install     {} (new labels: <vast.label_prefix>-{}-r<run>-<suffix>)",
        r.install_id, r.install_id
    ));
    if let Some(p) = &r.paused {
        line(format!(
            "PAUSED      since {} until {}: {} (nothing is launched or stopped but by the operator; `fleetagent resume` ends it)",
            p.since,
            p.until.as_deref().unwrap_or("`fleetagent resume`"),
            crate::text::quote(&p.reason, 200)
        ));
    }
    if let Some(h) = &r.operator_hold {
        line(format!(
            "hold        the operator stopped {} at {}: the rules and the floor launch nothing until {} (`fleetagent resume` or a `message` ends it)",
            match (h.instance_id, h.label.as_deref()) {
                (Some(id), _) => format!("instance {id}"),
                (None, Some(l)) => l.to_string(),
                (None, None) => "an instance".into(),
            },
            h.stopped_at,
            h.until
        ));
    }
    if let Some(f) = &r.floor {
        line(floor_line(f));
    }
    if let Some(d) = &r.day {
        line(day_line(d));
    }
    // Ours under another prefix (`fleet::ours_elsewhere`) are stored beside them.
    let (mine, others): (Vec<_>, Vec<_>) = r
        .other_installs
        .iter()
        .partition(|o| r.install_id == o.install_id);
    let seen = r.other_installs_at.as_deref().unwrap_or("?");
    let ids = |l: &[&crate::store::ops::ForeignInstance], install: bool| {
        l.iter()
            .take(6)
            .map(|o| match install {
                true => format!("{} (install {})", o.vast_id, o.install_id),
                false => format!("{} {}", o.vast_id, crate::text::quote(&o.label, 80)),
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    if !others.is_empty() {
        line(format!(
            "other installs {} instance(s) under our prefix carry another install's id (seen {seen}): {}",
            others.len(),
            ids(&others, true)
        ));
    }
    if !mine.is_empty() {
        line(format!(
            "old prefix  {} instance(s) carry this install's id under another prefix (seen {seen}): not counted, never stopped here, billing: {}",
            mine.len(),
            ids(&mine, false)
        ));
    }
    if !r.bad_hosts.is_empty() {
        line(format!(
            "bad hosts   {} left out of offer searches: {}",
            r.bad_hosts.len(),
            crate::text::first_and_more(
                r.bad_hosts.iter().map(|b| format!(
                    "{} ({}, until {})",
                    b.machine_id,
                    crate::text::clip(&b.reason, 60),
                    b.until
                )),
                6
            )
        ));
    }
    line(format!(
        "last ok run {}",
        r.last_success_at.as_deref().unwrap_or("never")
    ));
    line(format!(
        "lock        {}",
        match (r.lock_held, r.lock_holder_pid) {
            (Some(true), Some(pid)) => format!(
                "held by pid {pid} since {}",
                r.lock_held_since.as_deref().unwrap_or("?")
            ),
            (None, _) => "unknown: /proc/locks cannot be read here (ProcSubset=pid, a container); run inspect from a shell of the host".into(),
            _ => "free".into(),
        }
    ));
    line(format!(
        "doorbell    {} {}",
        r.doorbell.path,
        if let Some(problem) = &r.doorbell.problem {
            format!("PROBLEM: {problem}")
        } else if r.doorbell.exists {
            format!(
                "EXISTS ({} line(s), modified {})",
                r.doorbell.lines,
                r.doorbell.mtime.as_deref().unwrap_or("?")
            )
        } else {
            "absent".into()
        }
    ));
    line(format!(
        "events      {} waiting ({} deferred), {} failed",
        r.unconsumed_events, r.deferred_events, r.failed_events
    ));
    for e in &r.waiting_events {
        line(format!(
            "  #{} P{} {} {} at {} attempts {}{}",
            e.id,
            e.priority,
            e.kind,
            crate::text::quote(&e.reason, SHOWN_REASON_CHARS),
            e.created_at,
            e.attempts,
            e.not_before
                .as_ref()
                .map(|t| format!(", not before {t}"))
                .unwrap_or_default()
        ));
    }
    for e in &r.failed_event_list {
        line(format!(
            "  FAILED #{} P{} {} {}: {}",
            e.id,
            e.priority,
            e.kind,
            crate::text::quote(&e.reason, SHOWN_REASON_CHARS),
            e.last_error.as_deref().unwrap_or("")
        ));
    }
    line(format!(
        "wakes       {} pending, {} overdue, {} failed",
        r.pending_wakes, r.overdue_wakes, r.failed_wakes
    ));
    for w in &r.wakes {
        line(format!(
            "  #{} due {} {}",
            w["id"],
            w["due_at"].as_str().unwrap_or("?"),
            crate::text::quote(w["reason"].as_str().unwrap_or(""), SHOWN_REASON_CHARS)
        ));
    }
    match r.units.as_ref().and_then(|u| u.as_object()) {
        None => line("units       no systemd manager answered".into()),
        Some(units) => {
            for (name, u) in units {
                let field = |k: &str| u.get(k).and_then(|v| v.as_str()).unwrap_or("?").to_string();
                let mut text = format!(
                    "unit        {name}: {} {}/{} (result {})",
                    field("load_state"),
                    field("active_state"),
                    field("sub_state"),
                    field("result")
                );
                if let Some(p) = u.get("problem").and_then(|v| v.as_str()) {
                    text.push_str(&format!(" PROBLEM {p}; fix: {}", field("fix")));
                }
                line(text);
            }
        }
    }
    line(format!(
        "llm         {} {} ({}), budget {} tokens ({} for the prompt after margin and max_output_tokens); last answered call {}{}",
        r.llm.provider,
        r.llm.model,
        r.llm.encoding,
        r.llm.context_budget_tokens,
        r.llm.effective_budget_tokens,
        r.llm.last_call_at.as_deref().unwrap_or("never"),
        r.llm
            .last_error
            .as_ref()
            .map(|e| format!(
                "; LAST FAILURE at {}: {e}",
                r.llm.last_error_at.as_deref().unwrap_or("?")
            ))
            .unwrap_or_default()
    ));
    if let Some(ratio) = r.llm.reported_to_estimate_ratio {
        line(format!(
            "tokens      provider reported {} vs estimated {} over {} calls (ratio {ratio}, at most {}); largest prompt {}{}{}",
            r.llm.prompt_tokens_reported,
            r.llm.prompt_tokens_estimated,
            r.llm.calls_with_usage,
            r.llm.max_reported_to_estimate_ratio.unwrap_or(ratio),
            r.llm.max_prompt_tokens_estimated.unwrap_or(0),
            r.llm
                .calibrated_ratio
                .map(|c| format!(
                    "; calibrated {c} over {} calls: our estimate held to {} tokens",
                    r.llm.calibration_samples, r.llm.calibrated_budget_tokens
                ))
                .unwrap_or_default(),
            match r.llm.impossible_usage_calls {
                0 => String::new(),
                n => format!("; {n} call(s) reported over 3x our count, no count of the prompt: left out"),
            }
        ));
        line(match r.llm.cache_share {
            Some(share) => format!(
                "cache       {:.1}% of the prompt tokens came from the server's prompt cache ({} of {} calls said)",
                share * 100.0,
                r.llm.calls_with_cache,
                r.llm.calls_with_usage
            ),
            None => "cache       the server reported nothing about a prompt cache".into(),
        });
    }
    if r.llm.malformed_answers > 0 {
        line(format!(
            "answers     {} of the model's last {} wrote a tool call as text: nothing ran (try the model with `fleetagent --config {} sim --llm --scenario incident`)",
            r.llm.malformed_answers, r.llm.recent_answers, r.config_path
        ));
    }
    for o in &r.operator_messages {
        line(format!(
            "operator    {} {} -> {}",
            o.at,
            crate::text::quote(&o.message, 100),
            o.answer
                .as_deref()
                .map(|a| crate::text::quote(a, 200))
                .unwrap_or_else(|| if r.llm.provider == "rules" {
                    "(no answer: llm.provider = \"rules\", and the rules do not answer messages; the message reached the next pass as a P0 event)".into()
                } else {
                    "(no answer yet)".into()
                })
        ));
    }
    if !r.launch_keys_missing.is_empty() {
        line(format!(
            "launches    impossible until set: {}",
            r.launch_keys_missing.join(", ")
        ));
    }
    line(match (&r.vast.error, &r.vast.ok_at) {
        (Some(e), ok_at) => format!(
            "vast.ai     the listing FAILS since {}: {}; last worked {} (the fleet below is fleetagent's table)",
            r.vast.error_since.as_deref().unwrap_or("?"),
            crate::text::clip(e, 200),
            ok_at.as_deref().unwrap_or("never")
        ),
        (None, Some(at)) => format!("vast.ai     the last listing worked, at {at}"),
        (None, None) => "vast.ai     never listed yet".to_string(),
    });
    line(format!(
        "fleet       {} instance(s), ${:.2}/h{}",
        r.fleet.len(),
        r.fleet_dph,
        match r.unpriced {
            0 => String::new(),
            n => format!(
                " ({n} without a price from vast.ai, each counted at the most one may cost, as the money caps count it)"
            ),
        }
    ));
    for i in &r.fleet {
        line(format!(
            "  {} id={} {} (vast {}) {} {}/h since {}",
            crate::text::quote(&i.label, crate::fleet::LABEL_CHARS),
            i.vast_id
                .map(|v| v.to_string())
                .unwrap_or_else(|| "-".into()),
            i.state,
            crate::text::clip(i.actual_status.as_deref().unwrap_or("null"), 40),
            crate::text::clip(i.gpu_name.as_deref().unwrap_or("?"), 40),
            i.dph.map_or("$?".to_string(), |d| format!("${d:.3}")),
            i.state_since
        ));
    }
    for l in super::curio::render(r.demand.as_ref(), &r.gpu_rates, &r.worker_identity) {
        line(l);
    }
    line(price_line(&r.price));
    line(profit_line(r));
    line(spend_line(r));
    if let Some(e) = &r.price.fil_usd_error {
        line(format!("  the last FIL/USD fetch failed: {e}"));
    }
    if !r.recent_actions.is_empty() {
        line("actions     newest first:".into());
        // As the journal said it: a refusal with its guardrail and figures, a failure with
        // vast.ai's error (the reason alone left out why: a walkthrough).
        for a in r.recent_actions.iter().take(10) {
            line(format!("  {} {}", a.at, crate::text::clip(&a.said, 480)));
        }
    }
    let of_run = |run: Option<i64>| run.map(|id| format!(" (run {id})")).unwrap_or_default();
    if let Some(o) = &r.last_observation {
        line(format!(
            "last observation{}:",
            of_run(r.last_observation_run)
        ));
        for l in o.lines() {
            line(format!("  {l}"));
        }
    }
    if let Some(d) = &r.last_decision {
        line(format!("last decision{}:", of_run(r.last_decision_run)));
        for l in d.lines().take(12) {
            line(format!("  {l}"));
        }
    }
    let newest = (r.runs.len() as i64).min(super::gather::RECENT_RUNS) as usize;
    line(match r.runs.len() - newest {
        0 => format!("runs        last {newest}:"),
        older => format!(
            "runs        last {newest}, then {older} older of the last hour that failed, were action-failed or fell back:"
        ),
    });
    for run in &r.runs {
        let acted = run.actions_ok + run.actions_refused + run.actions_failed;
        line(format!(
            "  {:>6} s{} {:<6} {:<7} {:<14} {} ev {} wk {}{}{}{}{}",
            run.id,
            run.session_id,
            run.started_by,
            run.status,
            run.verdict.map_or("-", |v| v.as_str()),
            run.started_at,
            run.events_claimed,
            run.wakes_claimed,
            run.decided_by
                .map(|d| format!("  decided by {}", d.as_str()))
                .unwrap_or_default(),
            run.llm_error
                .as_ref()
                .map(|e| format!("  llm: {}", crate::text::clip(e, 160)))
                .unwrap_or_default(),
            if acted > 0 {
                format!(
                    "  actions: ok {}, refused {}, failed {}",
                    run.actions_ok, run.actions_refused, run.actions_failed
                )
            } else {
                String::new()
            },
            run.error
                .as_ref()
                .map(|e| format!("  error: {e}"))
                .unwrap_or_default()
        ));
    }
    out
}

/// `ha          leader (host a1, epoch 3, lease 142s left; 3 hosts)`.
fn ha_line(ha: &crate::ha::status::Status) -> String {
    let lease = match (&ha.holder, ha.epoch, ha.lease_left_secs) {
        (Some(h), Some(e), Some(left)) if left > 0.0 => {
            format!("{h} leads at epoch {e}, lease {left:.0}s left")
        }
        (Some(h), Some(e), Some(left)) => {
            format!(
                "no leader: {h}'s lease (epoch {e}) expired {:.0}s ago",
                -left
            )
        }
        _ if ha.error.is_some() => {
            "the leader is unknown (the shared database cannot be read)".to_string()
        }
        _ => "no leader yet".to_string(),
    };
    let error = ha
        .error
        .as_deref()
        .map(|e| format!("; {e}"))
        .unwrap_or_default();
    format!(
        "ha          this host {} is {}: {lease}; {} host(s) seen{error}",
        ha.host_id,
        ha.role,
        ha.hosts.len()
    )
}
