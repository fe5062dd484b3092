//! The simulation report: built from the database the agent wrote (runs, events, wakes, the
//! action ledger, LLM calls) and the world's own tally, checked against the invariants and
//! the scenario's expectations, rendered as a table or as JSON (stable field order and
//! rounding, so the same seed gives the same bytes).

use std::collections::BTreeMap;

use anyhow::Result;
use serde::Serialize;

use super::oracle::OracleResult;
use super::scenario::{repetitions, ActionKind, Scenario};
use super::world::{World, CAP_BIN_MS};
use super::{outside::OutsideTally, DriverTally};
use crate::clock::Millis;
use crate::config::Config;
use crate::store::report as db;
use crate::store::Store;

const HOUR_MS: Millis = 3_600_000;
/// Live capacity under this share of min(target, the market's rate) is below target.
pub const BELOW_TARGET_SHARE: f64 = 0.9;

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Report {
    pub scenario: String,
    pub description: String,
    pub seed: u64,
    pub hours: f64,
    pub decided_by: String,
    pub target_proofs_per_hour: f64,
    pub proofs: Proofs,
    pub hours_below_target: f64,
    pub money: Money,
    pub launches: Launches,
    pub stops: Stops,
    pub stuck_instances: Stuck,
    pub runs: Runs,
    pub llm: Llm,
    pub events: Events,
    pub wakes: Wakes,
    pub invariants: Invariants,
    pub vast: Vast,
    pub incident: Incident,
    pub oracle: Oracle,
    pub checks: Vec<Check>,
    pub passed: bool,
    pub errors: Vec<String>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Proofs {
    /// Offered by the market over the run.
    pub offered: u64,
    /// Offered, capped by the target hour by hour: what the operator wanted sold.
    pub wanted: u64,
    pub completed: u64,
    /// Went to other providers (not pulled within the market's expiry).
    pub expired: u64,
    pub served_share: f64,
    pub queue_wait_p50_secs: f64,
    pub queue_wait_p95_secs: f64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Money {
    pub dollars: f64,
    pub dollars_per_proof: f64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Launches {
    pub made: u64,
    pub failed: u64,
    pub open_intents: u64,
    /// Refusals by guardrail (`rate_limited`, `instance_cap`, `budget`, ...).
    pub refused: BTreeMap<String, u64>,
    /// Launches the WORKERS DEAD emergency allowed past the normal window.
    pub emergency_bypasses: u64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Stops {
    pub made: u64,
    pub failed: u64,
    pub refused: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Stuck {
    /// Instances that stayed loading past policy.stuck_loading_mins.
    pub seen: u64,
    /// Still there at the end.
    pub unhandled: u64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Runs {
    pub processes: u64,
    pub passes: u64,
    pub failed_passes: u64,
    pub timer_ticks: u64,
    pub ticks_merged: u64,
    pub doorbell_starts: u64,
    pub max_passes_in_an_hour: u64,
    pub by_verdict: BTreeMap<String, u64>,
    pub by_decider: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Llm {
    pub real_model: bool,
    pub calls: u64,
    pub skips: u64,
    pub failed_turns: u64,
    pub prompt_tokens_max: u64,
    pub prompt_tokens_total: u64,
    pub prompt_tokens_per_tick: f64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Events {
    pub inserted: u64,
    pub by_kind: BTreeMap<String, u64>,
    pub claimed: u64,
    pub failed: u64,
    pub waiting_at_end: u64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Wakes {
    pub created: u64,
    pub processed: u64,
    pub cancelled: u64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Invariants {
    pub overlapping_runs: u64,
    pub events_lost: u64,
    pub wakes_processed_twice: u64,
    pub wakes_overdue: u64,
    pub runs_left_running: u64,
    pub foreign_instances_touched: u64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Vast {
    pub creates: u64,
    pub answers_429: u64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Incident {
    /// The first pass that saw WORKERS DEAD, and the launches it asked for.
    pub first_dead_pass: Option<i64>,
    pub launch_requests_in_first_dead_pass: u64,
    pub resets: u64,
    /// The longest time from a reset to the pass that claimed its event.
    pub reset_answered_secs: Option<f64>,
    /// The longest gap between passes after the first reset (or over the run).
    pub max_silence_mins: f64,
    pub fallback_passes: u64,
    pub fallback_stops: u64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Oracle {
    pub dollars_per_proof: f64,
    pub hours_below_target: f64,
    pub launches: u64,
    pub cost_ratio: f64,
    pub hours_below_over_oracle: f64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Check {
    pub name: String,
    pub expected: String,
    pub actual: String,
    pub ok: bool,
    /// What the check is about was not scheduled within the simulated hours (a reset, a 429
    /// window): neither passed nor failed, and not counted (in the JSON only when true).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub not_applicable: bool,
}

pub struct Inputs<'a> {
    pub store: &'a Store,
    pub world: &'a World,
    pub config: &'a Config,
    pub scenario: &'a Scenario,
    pub seed: u64,
    pub hours: f64,
    pub start: Millis,
    pub end: Millis,
    pub driver: &'a DriverTally,
    pub outside: &'a OutsideTally,
    pub doorbell_waiting: bool,
    pub oracle: &'a OracleResult,
    pub llm_real: bool,
}

/// Round for the report: 4 decimals (stable JSON).
pub fn r4(x: f64) -> f64 {
    if x.is_finite() {
        (x * 10_000.0).round() / 10_000.0
    } else {
        0.0
    }
}

fn percentile(sorted: &[f32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i] as f64
}

/// How long (in hours) live capacity stayed under [`BELOW_TARGET_SHARE`] of min(target,
/// market), counted in [`CAP_BIN_MS`] bins: the aim compares it with boot times, which a
/// count of whole hours cannot resolve. A partial last bin counts pro rata.
pub fn hours_below_target(w: &World, target: f64, start: Millis, end: Millis) -> f64 {
    let mut total = 0.0;
    let mut b = 0usize;
    loop {
        let from = start + b as Millis * CAP_BIN_MS;
        if from >= end {
            break;
        }
        let to = (from + CAP_BIN_MS).min(end);
        let span = (to - from) as f64;
        let cap = w.curio.tally.cap_ms.get(b).copied().unwrap_or(0.0) / span;
        // The market's rate at each minute of the bin.
        let points = (CAP_BIN_MS / 60_000) as usize;
        let mut market = 0.0;
        for k in 0..points {
            market += w
                .market
                .rate_at(from + (span as Millis) * k as Millis / points as Millis);
        }
        market /= points as f64;
        let wanted = if target > 0.0 {
            market.min(target)
        } else {
            market
        };
        if wanted > 0.0 && cap < BELOW_TARGET_SHARE * wanted {
            total += span / HOUR_MS as f64;
        }
        b += 1;
    }
    total
}

pub fn build(i: &Inputs<'_>) -> Result<Report> {
    let conn = &i.store.conn;
    let w = i.world;
    let target = i.config.policy.target_proofs_per_hour;

    // Proofs.
    let wanted: u64 = w
        .market
        .tally
        .offered_per_hour
        .iter()
        .map(|n| {
            if target > 0.0 {
                (*n).min(target as u64)
            } else {
                *n
            }
        })
        .sum();
    let mut waits = w.curio.tally.waits.clone();
    waits.sort_by(f32::total_cmp);
    let completed = w.curio.tally.completed;
    let proofs = Proofs {
        offered: w.market.tally.offered,
        wanted,
        completed,
        expired: w.market.tally.expired,
        served_share: r4(if wanted == 0 {
            1.0
        } else {
            (completed as f64 / wanted as f64).min(1.0)
        }),
        queue_wait_p50_secs: r4(percentile(&waits, 0.5)),
        queue_wait_p95_secs: r4(percentile(&waits, 0.95)),
    };
    let dollars = w.vast.spend_ours(i.end);
    let per_proof = if completed == 0 {
        0.0
    } else {
        dollars / completed as f64
    };
    let below = hours_below_target(w, target, i.start, i.end);

    // Runs: one row per pass.
    let rows = db::runs(conn)?;
    let mut overlaps = 0;
    for pair in rows.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        if a.finished_at.unwrap_or(Millis::MAX) > b.started_at {
            overlaps += 1;
        }
    }
    let mut per_hour: BTreeMap<i64, u64> = BTreeMap::new();
    for r in &rows {
        *per_hour
            .entry((r.started_at - i.start) / HOUR_MS)
            .or_insert(0) += 1;
    }
    let counts = db::run_counts(conn)?;
    let runs = Runs {
        processes: i.driver.processes,
        passes: rows.len() as u64,
        failed_passes: rows.iter().filter(|r| r.status == "failed").count() as u64,
        timer_ticks: i.driver.ticks,
        ticks_merged: i.driver.ticks_merged,
        doorbell_starts: i.driver.path_starts,
        max_passes_in_an_hour: per_hour.values().copied().max().unwrap_or(0),
        by_verdict: counts.by_verdict,
        by_decider: counts.ok_by_decider,
    };

    // LLM.
    let totals = db::llm_totals(conn)?;
    let llm = Llm {
        real_model: i.llm_real,
        calls: totals.calls,
        skips: counts.skipped,
        failed_turns: counts.llm_failed,
        prompt_tokens_max: totals.prompt_tokens_max as u64,
        prompt_tokens_total: totals.prompt_tokens_total as u64,
        prompt_tokens_per_tick: r4(totals.prompt_tokens_total as f64 / i.driver.ticks.max(1) as f64),
    };

    // Events: every one inserted is claimed by a pass that finished, failed after its
    // attempts (kept and shown), or still waiting with a doorbell (or deferred to the timer).
    let ev = db::event_counts(conn, i.end)?;
    let lost = ev.claimed_by_not_ok
        + if i.doorbell_waiting {
            0
        } else {
            ev.waiting_ready
        };
    let events = Events {
        inserted: ev.inserted,
        by_kind: ev.by_kind,
        claimed: ev.claimed_by_ok,
        failed: ev.failed,
        waiting_at_end: ev.waiting,
    };

    // Wakes: processed exactly once, by a pass that finished.
    let wk = db::wake_counts(conn, counts.last_ok_start.unwrap_or(i.start))?;
    let wakes = Wakes {
        created: wk.created,
        processed: wk.processed,
        cancelled: wk.cancelled,
    };

    // The ledger.
    let window_ms = i.config.policy.launch_window_minutes as Millis * 60_000;
    let launches_ok = db::launch_times(conn)?;
    let mut bypasses = 0;
    for (k, (t, emergency)) in launches_ok.iter().enumerate() {
        let before = launches_ok[..k]
            .iter()
            .filter(|(u, _)| *u > t - window_ms)
            .count() as u32;
        if *emergency && before >= i.config.policy.launch_window_max {
            bypasses += 1;
        }
    }
    let seeded = i.scenario.start.loading as u64;
    let ledger = db::ledger_counts(conn)?;
    let launches = Launches {
        made: ledger.launches_ok.saturating_sub(seeded),
        failed: ledger.launches_failed,
        open_intents: ledger.launch_intents,
        refused: ledger.launch_refusals,
        emergency_bypasses: bypasses,
    };
    let stops = Stops {
        made: ledger.stops_ok,
        failed: ledger.stops_failed,
        refused: ledger.stop_refusals,
    };

    // Incident facts.
    let first_dead = rows
        .iter()
        .find(|r| r.status == "ok" && r.emergency)
        .map(|r| r.id);
    let dead_launches = match first_dead {
        Some(id) => db::launches_in_run(conn, id)?,
        None => 0,
    };
    let mut answered: Option<f64> = None;
    let mut all_answered = true;
    for (t, event) in &i.outside.resets {
        match db::claimed_by_ok_run_at(conn, *event)? {
            Some(st) => {
                let secs = (st - t) as f64 / 1000.0;
                answered = Some(answered.map_or(secs, |a: f64| a.max(secs)));
            }
            None => all_answered = false,
        }
    }
    if !all_answered {
        answered = None;
    }
    let from = i.outside.resets.first().map(|(t, _)| *t).unwrap_or(i.start);
    let mut starts: Vec<i64> = rows
        .iter()
        .filter(|r| r.status == "ok" && r.started_at >= from)
        .map(|r| r.started_at)
        .collect();
    starts.insert(0, from);
    starts.push(i.end);
    let silence = starts.windows(2).map(|p| p[1] - p[0]).max().unwrap_or(0);
    let incident = Incident {
        first_dead_pass: first_dead,
        launch_requests_in_first_dead_pass: dead_launches,
        resets: i.outside.resets.len() as u64,
        reset_answered_secs: answered.map(r4),
        max_silence_mins: r4(silence as f64 / 60_000.0),
        fallback_passes: counts.fallback,
        fallback_stops: ledger.fallback_stops,
    };

    let invariants = Invariants {
        overlapping_runs: overlaps,
        events_lost: lost,
        wakes_processed_twice: counts.wakes_claimed_by_ok.saturating_sub(wk.processed)
            + wk.processed_by_not_ok,
        wakes_overdue: wk.overdue,
        runs_left_running: rows.iter().filter(|r| r.status == "running").count() as u64,
        foreign_instances_touched: w.vast.tally.foreign_touched,
    };
    let o = i.oracle;
    let oracle = Oracle {
        dollars_per_proof: r4(o.dollars_per_proof()),
        hours_below_target: r4(o.hours_below_target),
        launches: o.launches,
        cost_ratio: r4(if o.dollars_per_proof() > 0.0 {
            per_proof / o.dollars_per_proof()
        } else {
            0.0
        }),
        hours_below_over_oracle: r4(below - o.hours_below_target),
    };
    let decided_by = if i.llm_real {
        format!("llm ({})", i.config.llm.model)
    } else if i.config.llm.provider == crate::config::Provider::Openai {
        "llm (simulated outage) with fallback".to_string()
    } else {
        "rules".to_string()
    };
    let mut report = Report {
        scenario: i.scenario.name.clone(),
        description: i.scenario.description.clone(),
        seed: i.seed,
        hours: r4(i.hours),
        decided_by,
        target_proofs_per_hour: r4(target),
        proofs,
        hours_below_target: r4(below),
        money: Money {
            dollars: r4(dollars),
            dollars_per_proof: r4(per_proof),
        },
        launches,
        stops,
        stuck_instances: Stuck {
            seen: w.stuck_ever(i.end),
            unhandled: w.stuck_now(i.end).len() as u64,
        },
        runs,
        llm,
        events,
        wakes,
        invariants,
        vast: Vast {
            creates: w.vast.tally.create_calls,
            answers_429: w.vast.tally.calls_429,
        },
        incident,
        oracle,
        checks: Vec::new(),
        passed: false,
        errors: i.driver.errors.clone(),
    };
    report.checks = checks(&report, i.scenario, i.hours);
    report.passed = report.checks.iter().all(|c| c.ok || c.not_applicable);
    Ok(report)
}

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

fn fmt(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        format!("{:.4}", x).trim_end_matches('0').to_string()
    }
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
    if let Some(v) = e.max_dollars_per_proof {
        c.push(at_most("dollars per proof", r.money.dollars_per_proof, v));
    }
    if let Some(v) = e.max_cost_ratio_to_oracle {
        c.push(at_most("$/proof over the oracle's", r.oracle.cost_ratio, v));
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
        let ok = r.incident.first_dead_pass.is_some()
            && r.incident.launch_requests_in_first_dead_pass > 0;
        c.push(Check {
            name: "launch requested in the first WORKERS DEAD pass".into(),
            expected: "yes".into(),
            actual: match r.incident.first_dead_pass {
                Some(id) => format!(
                    "run {id}: {} launch request(s)",
                    r.incident.launch_requests_in_first_dead_pass
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
    if e.fallback_never_stops == Some(true) {
        c.push(at_most(
            "stops by the fallback rules",
            r.incident.fallback_stops as f64,
            0.0,
        ));
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
    if let Some(v) = e.max_stuck_unhandled {
        c.push(at_most(
            "stuck instances left at the end",
            r.stuck_instances.unhandled as f64,
            v as f64,
        ));
    }
    c
}

fn map_line(m: &BTreeMap<String, u64>) -> String {
    if m.is_empty() {
        return "none".into();
    }
    m.iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
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
            "{} completed of {} wanted ({:.1}%), {} offered, {} went elsewhere",
            p.completed,
            p.wanted,
            p.served_share * 100.0,
            p.offered,
            p.expired
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
        format!(
            "${:.2}, ${:.4}/proof",
            r.money.dollars, r.money.dollars_per_proof
        ),
    );
    row(
        "oracle",
        format!(
            "${:.4}/proof ({:.2}x), {} h below target (+{}), {} launches",
            r.oracle.dollars_per_proof,
            r.oracle.cost_ratio,
            fmt(r.oracle.hours_below_target),
            fmt(r.oracle.hours_below_over_oracle),
            r.oracle.launches
        ),
    );
    let l = &r.launches;
    row(
        "launches",
        format!(
            "{} made, {} failed, {} emergency bypasses; refused: {}",
            l.made,
            l.failed,
            l.emergency_bypasses,
            map_line(&l.refused)
        ),
    );
    row(
        "stops",
        format!(
            "{} made, {} failed; refused: {}",
            r.stops.made,
            r.stops.failed,
            map_line(&r.stops.refused)
        ),
    );
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
            "first WORKERS DEAD pass {} asked {} launch(es); {} reset(s) answered in {}; longest gap {} min; fallback passes {}, fallback stops {}",
            inc.first_dead_pass.map_or("-".into(), |x| x.to_string()),
            inc.launch_requests_in_first_dead_pass,
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
            n => format!(
                " ({n} not applicable: not reached within {} h)",
                fmt(r.hours)
            ),
        }
    ));
    out
}
