//! The simulation report: built here from the database the agent wrote (runs, events, wakes,
//! the action ledger, LLM calls, read through `store::report`) and the world's own tallies,
//! checked against the invariants and the scenario's expectations ([`checks()`]), rendered as a
//! table ([`render_text`]) or as JSON (stable field order and rounding, so the same seed gives the
//! same bytes).

mod checks;
mod economics;
pub mod model;
mod text;

use std::collections::BTreeMap;

use anyhow::Result;
use serde::Serialize;

use super::measure;
use super::oracle::OracleResult;
use super::outside::OutsideTally;
use super::scenario::Scenario;
use super::world::World;
use crate::clock::Millis;
use crate::config::Config;
use crate::store::report as db;
use crate::store::{events, wakes, Store};
pub use checks::checks;
pub use text::render_text;

const HOUR_MS: Millis = 3_600_000;

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
    /// Who decided and how: calls, tool calls, invalid ones, malformed answers, the floor's
    /// actions under it, and with `--llm` the rules' figures beside.
    pub model: model::Model,
    pub events: Events,
    pub wakes: Wakes,
    pub invariants: Invariants,
    pub vast: Vast,
    pub incident: Incident,
    pub oracle: Oracle,
    /// The oracle's controller without look-ahead, inside the launch window: the yardstick.
    pub reactive_bound: ReactiveBound,
    /// The peers (`sim::peers`) on the same world, by name; empty when none ran beside.
    pub peers: BTreeMap<String, PeerResult>,
    /// The economics the checks look at.
    pub economics: Economics,
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
    /// Of those, proofs the market offered within the run (the rest were queued in Curio
    /// before the start: work done, not demand served).
    pub completed_of_offered: u64,
    /// Went to other providers (not pulled within the market's expiry).
    pub expired: u64,
    /// completed_of_offered / wanted.
    pub served_share: f64,
    pub queue_wait_p50_secs: f64,
    pub queue_wait_p95_secs: f64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Money {
    /// Billed for our instances from the start (a fleet rented before it, from the start).
    pub dollars: f64,
    pub dollars_per_proof: f64,
    /// Whether the scenario models a price (`[price]`); without one, revenue and profit are
    /// null: unknown, not zero.
    pub price_modelled: bool,
    /// USD the completed proofs earned, each at the price of its completion time.
    pub revenue: Option<f64>,
    /// revenue - dollars.
    pub profit: Option<f64>,
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
    /// made per simulated day.
    pub per_day: f64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Stops {
    pub made: u64,
    pub failed: u64,
    pub refused: BTreeMap<String, u64>,
    /// made per simulated day.
    pub per_day: f64,
    /// Our rentals (launched within the run) that ended within 30 minutes of their start,
    /// flagged instances aside (dead, exited, outbid, stuck past policy.stuck_loading_mins).
    pub within_30_mins_of_start: u64,
    /// Those that were flagged when they ended.
    pub within_30_mins_of_start_flagged: u64,
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
    /// The first of them (null when none failed).
    pub first_failed_turn: Option<FailedTurn>,
    pub prompt_tokens_max: u64,
    pub prompt_tokens_total: u64,
    pub prompt_tokens_per_tick: f64,
}

/// A pass whose model turn failed: the model was unusable, the fallback decided (or the
/// pass failed with `llm.fallback = "none"`).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FailedTurn {
    pub run_id: i64,
    /// Minutes from the start of the simulation to the pass.
    pub at_mins: f64,
    /// The run's `llm_error`: why the model could not be used.
    pub reason: String,
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
    /// Of those, the launches that reached vast.ai (the create was accepted).
    pub launches_in_first_dead_pass: u64,
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
    /// Its revenue less its dollars (null: no price modelled).
    pub profit: Option<f64>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ReactiveBound {
    pub dollars_per_proof: f64,
    pub hours_below_target: f64,
    pub launches: u64,
    /// null: no price modelled.
    pub profit: Option<f64>,
}

/// A peer's run on the same world: its figures as the report's own.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PeerResult {
    pub dollars_per_proof: f64,
    pub hours_below_target: f64,
    pub launches: u64,
    /// null: no price modelled.
    pub profit: Option<f64>,
}

impl PeerResult {
    pub fn of(r: &Report) -> PeerResult {
        PeerResult {
            dollars_per_proof: r.money.dollars_per_proof,
            hours_below_target: r.hours_below_target,
            launches: r.launches.made,
            profit: r.money.profit,
        }
    }
}

/// What the economic checks count, from the world's own record.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Economics {
    /// Whether the agent knew a price in the run (a static price.fil_usd, or a FIL/USD it
    /// fetched and cached): the profit checks apply only then.
    pub agent_priced: bool,
    /// Our launches whose $/proof at the GPU's true rate left less than policy.min_margin
    /// of the revenue per proof at their time (0 with no price modelled).
    pub unprofitable_launches: u64,
    /// Hours our instances billed while below that margin at the price of the time (one
    /// that stopped paying when the price fell counts until it is shed).
    pub unprofitable_instance_hours: f64,
    /// Of those, the hours billed at a loss (cost per proof above the revenue per proof): an
    /// instance below the margin that still earns more than it costs is kept while no
    /// profitable offer can take its place and the capacity is needed.
    pub loss_instance_hours: f64,
    /// Dollars billed while the market offered nothing, from 90 minutes after it went quiet.
    pub spend_in_dead_hours: f64,
    /// Minutes in which our billing instances were over max_instances or max_dph_total.
    pub over_cap_minutes: u64,
    /// The most of our instances billing at any minute of those dead hours. One is the
    /// floor: Curio pulls work only while a worker of ours lives, so a fleet of none would
    /// never see the work come back.
    pub most_instances_in_dead_hours: u32,
    /// Our bids outbid, and resumes.
    pub outbids: u64,
    pub resumes: u64,
    /// The longest time from an outbid to the launch that replaced it (minutes; null with
    /// no outbid; an outbid left unreplaced counts until the end).
    pub outbid_replace_mins_max: Option<f64>,
    /// profit / the oracle's (null without a price, or when the oracle made none).
    pub profit_share_of_oracle: Option<f64>,
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

/// Counters of the driver (what systemd would have seen).
#[derive(Debug, Clone, Default)]
pub struct DriverTally {
    pub processes: u64,
    pub ticks: u64,
    pub path_starts: u64,
    pub ticks_merged: u64,
    pub early_failures: u64,
    pub pass_failures: u64,
    pub errors: Vec<String>,
}

pub struct Inputs<'a> {
    pub store: &'a Store,
    pub world: &'a World,
    pub config: &'a Config,
    pub scenario: &'a Scenario,
    pub seed: u64,
    pub hours: f64,
    pub start: Millis,
    /// When the last pass ended (it may be after `horizon`).
    pub end: Millis,
    /// Where the hours simulated end.
    pub horizon: Millis,
    pub driver: &'a DriverTally,
    pub outside: &'a OutsideTally,
    pub doorbell_waiting: bool,
    pub oracle: &'a OracleResult,
    pub bound: &'a OracleResult,
    pub llm_real: bool,
    /// With `--llm`: the rules' report of the same scenario, seed and config.
    pub rules: Option<&'a Report>,
    /// With `--peer`: the peer that decided in the rules' place.
    pub peer: Option<&'static str>,
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
        .map(|n| measure::wanted_count(*n, target))
        .sum();
    let mut waits = w.curio.tally.waits.clone();
    waits.sort_by(f32::total_cmp);
    let completed = w.curio.tally.completed;
    let served = w.curio.tally.completed_offered;
    let proofs = Proofs {
        offered: w.market.tally.offered,
        wanted,
        completed,
        completed_of_offered: served,
        expired: w.market.tally.expired,
        served_share: r4(if wanted == 0 {
            1.0
        } else {
            (served as f64 / wanted as f64).min(1.0)
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
    // Within the hours simulated: the last pass may end after them (0.0861 h below target
    // of a 0.0834 h run, the sim walkthrough).
    let below = w.hours_below_target(target, i.start, i.end.min(i.horizon));

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
        first_failed_turn: db::first_llm_failure(conn)?.map(|(run_id, at, reason)| FailedTurn {
            run_id,
            at_mins: r4((at - i.start) as f64 / 60_000.0),
            reason,
        }),
        prompt_tokens_max: totals.prompt_tokens_max as u64,
        prompt_tokens_total: totals.prompt_tokens_total as u64,
        prompt_tokens_per_tick: r4(totals.prompt_tokens_total as f64 / i.driver.ticks.max(1) as f64),
    };

    // Events: every one inserted is claimed by a pass that finished, failed after its
    // attempts (kept and shown), or still waiting with a doorbell (or deferred to the timer).
    // Waiting, deferred and failed are the counts inspect, doctor and the metrics read.
    let ev = db::event_history(conn)?;
    let now = events::counts(conn, i.end)?;
    let lost = ev.claimed_by_not_ok
        + if i.doorbell_waiting {
            0
        } else {
            (now.unconsumed - now.deferred) as u64
        };
    let events = Events {
        inserted: ev.inserted,
        by_kind: ev.by_kind,
        claimed: ev.claimed_by_ok,
        failed: now.failed as u64,
        waiting_at_end: now.unconsumed as u64,
    };

    // Wakes: processed exactly once, by a pass that finished.
    let wk = db::wake_history(conn)?;
    // Overdue: still pending though due before the last finished pass started (wakes::counts
    // counts those due at or before its time).
    let overdue = wakes::counts(conn, counts.last_ok_start.unwrap_or(i.start) - 1)?.overdue as u64;
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
    let days = (i.hours / 24.0).max(1e-9);
    let made = ledger.launches_ok.saturating_sub(seeded);
    let launches = Launches {
        made,
        failed: ledger.launches_failed,
        open_intents: ledger.launch_intents,
        refused: ledger.launch_refusals,
        emergency_bypasses: bypasses,
        per_day: r4(made as f64 / days),
    };
    let (short, short_flagged) = economics::short_rentals(w, i.start, i.end);
    let stops = Stops {
        made: ledger.stops_ok,
        failed: ledger.stops_failed,
        refused: ledger.stop_refusals,
        per_day: r4(ledger.stops_ok as f64 / days),
        within_30_mins_of_start: short,
        within_30_mins_of_start_flagged: short_flagged,
    };

    // Incident facts.
    let first_dead = rows
        .iter()
        .find(|r| r.status == "ok" && r.emergency)
        .map(|r| r.id);
    let (dead_asked, dead_launched) = match first_dead {
        Some(id) => (
            db::launches_in_run(conn, id)?,
            db::launches_ok_in_run(conn, id)?,
        ),
        None => (0, 0),
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
        launch_requests_in_first_dead_pass: dead_asked,
        launches_in_first_dead_pass: dead_launched,
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
        wakes_overdue: overdue,
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
        profit: o.profit().map(r4),
    };
    let b = i.bound;
    let reactive_bound = ReactiveBound {
        dollars_per_proof: r4(b.dollars_per_proof()),
        hours_below_target: r4(b.hours_below_target),
        launches: b.launches,
        profit: b.profit().map(r4),
    };
    let price_modelled = i.scenario.price.is_some();
    let revenue = price_modelled.then_some(w.curio.tally.revenue);
    let profit = revenue.map(|r| r - dollars);
    let economics = economics::build(conn, w, i.config, i.start, i.end, profit, o.profit())?;
    let (decided_by, model_name) = if let Some(peer) = i.peer {
        // The run rows say `rules` (a peer decides through the rules' path): the report
        // names the peer, as `--peer` asked.
        (format!("{peer} (peer)"), peer.to_string())
    } else if i.llm_real {
        (
            format!("llm ({})", i.config.llm.model),
            i.config.llm.model.clone(),
        )
    } else if i.config.llm.provider == crate::config::Provider::Openai {
        (
            "llm (simulated outage) with fallback".to_string(),
            format!("{} (simulated outage)", i.config.llm.model),
        )
    } else {
        ("rules".to_string(), "rules".to_string())
    };
    let floor_passes = runs.by_decider.get("floor").copied().unwrap_or(0);
    // The floor plans under a model and as the fallback; never for the rules alone.
    let floor_clocks = match i.config.llm.provider {
        crate::config::Provider::Openai => Some(model::clocks(conn, i.start)?),
        crate::config::Provider::Rules => None,
    };
    let model = model::build(
        conn,
        model_name,
        llm.calls,
        floor_passes,
        floor_clocks,
        i.rules,
    )?;
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
            price_modelled,
            revenue: revenue.map(r4),
            profit: profit.map(r4),
        },
        launches,
        stops,
        stuck_instances: Stuck {
            seen: w.stuck_ever(i.end),
            unhandled: w.stuck_now(i.end).len() as u64,
        },
        runs,
        llm,
        model,
        events,
        wakes,
        invariants,
        vast: Vast {
            creates: w.vast.tally.create_calls,
            answers_429: w.vast.tally.calls_429,
        },
        incident,
        oracle,
        reactive_bound,
        peers: BTreeMap::new(),
        economics,
        checks: Vec::new(),
        passed: false,
        errors: i.driver.errors.clone(),
    };
    report.checks = checks(&report, i.scenario, i.hours);
    report.passed = report.checks.iter().all(|c| c.ok || c.not_applicable);
    Ok(report)
}

/// A number as the report writes it: whole numbers bare, others to 4 decimals at most.
fn fmt(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        format!("{:.4}", x).trim_end_matches('0').to_string()
    }
}
