//! Read-only reports over the store for `inspect` and `doctor`: what the agent did, what
//! waits, and whether anything is stuck. Never takes the run lock (reads /proc/locks).
//!
//! Here the report's shape (`inspect --json`; field names are a contract, docs/inspect.md);
//! `gather.rs` reads it from the store, the state dir and the config; `text.rs` renders it
//! for people.

mod curio;
pub mod economics;
mod gather;
pub mod plot;
mod text;

pub use gather::{build, RECENT_RUNS};
pub use text::render_text;

use serde::Serialize;
use serde_json::Value;

use crate::clock::rfc3339;
use crate::store::{events, runs};

#[derive(Debug, Serialize)]
pub struct RunView {
    pub id: i64,
    pub session_id: i64,
    pub pass: i64,
    pub started_by: runs::StartedBy,
    pub status: runs::Status,
    pub verdict: Option<runs::Verdict>,
    pub decided_by: Option<runs::DecidedBy>,
    pub started_at: String,
    pub finished_at: Option<String>,
    pub events_claimed: i64,
    pub wakes_claimed: i64,
    pub llm_calls: i64,
    pub prompt_tokens_est: Option<i64>,
    pub prompt_tokens_reported: Option<i64>,
    pub error: Option<String>,
    pub llm_error: Option<String>,
    /// The pass's asked-for launches and stops that went through, were refused, failed.
    pub actions_ok: i64,
    pub actions_refused: i64,
    pub actions_failed: i64,
}

impl From<&runs::Run> for RunView {
    fn from(r: &runs::Run) -> Self {
        RunView {
            id: r.id,
            session_id: r.session_id,
            pass: r.pass,
            started_by: r.started_by,
            status: r.status,
            verdict: r.verdict,
            decided_by: r.decided_by,
            started_at: rfc3339(r.started_at),
            finished_at: r.finished_at.map(rfc3339),
            events_claimed: r.events_claimed,
            wakes_claimed: r.wakes_claimed,
            llm_calls: r.llm_calls,
            prompt_tokens_est: r.prompt_tokens_est,
            prompt_tokens_reported: r.prompt_tokens_reported,
            error: r.error.clone(),
            llm_error: r.llm_error.clone(),
            actions_ok: r.actions.ok,
            actions_refused: r.actions.refused,
            actions_failed: r.actions.failed,
        }
    }
}

#[derive(Debug, Serialize)]
pub struct EventView {
    pub id: i64,
    pub priority: u8,
    pub kind: String,
    pub reason: String,
    pub created_at: String,
    pub attempts: i64,
    pub not_before: Option<String>,
    pub failed_at: Option<String>,
    pub last_error: Option<String>,
}

impl From<&events::WaitingEvent> for EventView {
    fn from(e: &events::WaitingEvent) -> Self {
        EventView {
            id: e.id,
            priority: e.priority,
            kind: e.kind.clone(),
            reason: e.reason.clone(),
            created_at: rfc3339(e.created_at),
            attempts: e.attempts,
            not_before: e.not_before.map(rfc3339),
            failed_at: e.failed_at.map(rfc3339),
            last_error: e.last_error.clone(),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct DoorbellView {
    pub path: String,
    pub exists: bool,
    pub mtime: Option<String>,
    pub lines: usize,
    /// A link or not a regular file: what is wrong (absent when it is a plain file or gone).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct DatabaseView {
    pub path: String,
    pub size_bytes: u64,
    pub wal_bytes: u64,
    pub schema_version: i64,
}

/// Everything `inspect --json` prints. Field names are a contract (docs/inspect.md).
#[derive(Debug, Serialize)]
pub struct Report {
    pub now: String,
    pub version: &'static str,
    /// The commit this build was made from (`unknown` outside a git checkout).
    pub commit: &'static str,
    pub state_dir: String,
    pub config_path: String,
    /// False when the config file does not exist (only possible for the default path):
    /// every key has its default.
    pub config_found: bool,
    pub session_id: i64,
    pub session_started_at: String,
    pub next_run_id: i64,
    pub last_run_finished_at: Option<String>,
    pub last_success_at: Option<String>,
    pub runs: Vec<RunView>,
    pub unconsumed_events: i64,
    pub deferred_events: i64,
    pub failed_events: i64,
    pub waiting_events: Vec<EventView>,
    pub failed_event_list: Vec<EventView>,
    pub pending_wakes: i64,
    pub overdue_wakes: i64,
    pub failed_wakes: i64,
    pub wakes: Vec<Value>,
    pub doorbell: DoorbellView,
    /// Null when /proc/locks cannot be read (the units' `ProcSubset=pid`, a container).
    pub lock_held: Option<bool>,
    pub lock_holder_pid: Option<u32>,
    pub lock_held_since: Option<String>,
    pub database: DatabaseView,
    pub units: Option<Value>,
    pub launch_keys_missing: Vec<&'static str>,
    pub llm: LlmView,
    pub operator_messages: Vec<OperatorView>,
    /// Our instances as the local table knows them (inspect never calls vast.ai).
    pub fleet: Vec<InstanceView>,
    pub fleet_dph: f64,
    /// What our instances have cost since 00:00 UTC, as the daily cap counts it (the
    /// `fleetagent_spend_today_dollars` metric's figure).
    pub spend_today: f64,
    /// `policy.daily_spend_max` (null: no daily cap).
    pub daily_spend_max: Option<f64>,
    /// Of the fleet, instances vast.ai lists without a price: `fleet_dph` counts each at the
    /// most one may cost, as the money guardrail does.
    pub unpriced: usize,
    /// The action ledger, newest first: what was launched, stopped or refused, and why.
    pub recent_actions: Vec<ActionView>,
    /// What the last pass saw, and what was decided (the model's answer or the rules' note).
    pub last_observation: Option<String>,
    /// The run that wrote `last_observation` (null: none, or written outside a run).
    pub last_observation_run: Option<i64>,
    pub last_decision: Option<String>,
    /// The run that wrote `last_decision`: older than the last run when a pass decided
    /// nothing new (skipped, failed, or an answer without text).
    pub last_decision_run: Option<i64>,
    /// The last demand reading (DESIGN.md's fields; null before any attempt).
    pub demand: Option<curio::DemandView>,
    /// What the last successful reading could not read or left out, and why (`Demand::notes`:
    /// a missing grant, a column of a later Curio, a node without a GPU that lists PSProve).
    pub demand_notes: Vec<String>,
    /// Per GPU model: the learned proofs/h beside the configured, and which is used.
    pub gpu_rates: Vec<curio::RateView>,
    /// Two of our instances behind one Curio machine; one running with no worker.
    pub worker_identity: Vec<String>,
    /// What a proof earns as the store knows it (docs/inspect.md).
    pub price: PriceView,
    /// This install's id: new labels are `<label_prefix>-<install_id>-r<run>-<suffix>`.
    pub install_id: String,
    /// The operator's pause in force (`fleetagent pause`), or null.
    pub paused: Option<PauseView>,
    /// vast.ai's listing as the passes (and polls) last met it.
    pub vast: VastView,
    /// An operator stop the rules and the floor do not undo yet, or null.
    pub operator_hold: Option<HoldView>,
    /// Instances under our label prefix with another install's id, as the last listing saw
    /// them (never ours).
    pub other_installs: Vec<crate::store::ops::ForeignInstance>,
    pub other_installs_at: Option<String>,
    /// Hosts left out of offer searches now: `{machine_id, reason, until}` (failed us, or
    /// outbid us too often), soonest back first.
    pub bad_hosts: Vec<crate::store::bad_hosts::BadHost>,
    /// The floor's clocks as the last pass left them, or null when none runs.
    pub floor: Option<FloorView>,
    /// How demand moves with the hour of the day as the next pass would learn it
    /// (`fleet::day`), or null while `policy.learn_day` is off.
    pub day: Option<DayView>,
    /// Several hosts (DESIGN.md, "Several hosts"): null while HA is disabled, which every
    /// install is until the shared state lands (docs/ha.md: only the lease exists yet).
    pub ha: Option<crate::ha::status::Status>,
    /// A database `sim` wrote (`sim --state-dir`): the run that wrote it and which config
    /// this report judges. Null for an install's database.
    pub sim: Option<SimView>,
}

/// `vast`: whether the last listing worked, when one last did, and since when and why the
/// listings fail (null while they work).
#[derive(Debug, Clone, Serialize)]
pub struct VastView {
    pub ok: bool,
    pub ok_at: Option<String>,
    pub error: Option<String>,
    pub error_since: Option<String>,
}

/// `sim`: the simulation behind the database, and whether the config the report judges is
/// the one it ran with (kept in the database since schema 10) or this host's.
#[derive(Debug, Clone, Serialize)]
pub struct SimView {
    /// Null for a database `sim` wrote before it kept its config.
    pub scenario: Option<String>,
    pub seed: Option<u64>,
    /// The peer that decided in the rules' place (`sim --peer`); null: the rules or the model.
    pub peer: Option<String>,
    /// `simulation` (its own config, `[vast.env]` left out) or `host` (none kept, or the kept
    /// one unreadable by this version: `config_error` says why).
    pub config: &'static str,
    pub config_error: Option<String>,
}

/// `floor`: since when a deficit is open (and why the last pass left it unanswered), since
/// when idle surplus waits, and the passes each flagged instance has been left
/// (docs/guardrails.md, "The floor").
#[derive(Debug, Serialize, PartialEq)]
pub struct FloorView {
    pub deficit_since: Option<String>,
    pub unanswered: Option<String>,
    pub surplus_since: Option<String>,
    pub flagged: Vec<FlaggedView>,
}

#[derive(Debug, Serialize, PartialEq)]
pub struct FlaggedView {
    pub instance_id: i64,
    pub passes: u32,
}

impl FloorView {
    /// None when no clock runs.
    pub fn of(m: &crate::policy::floor::Memory) -> Option<FloorView> {
        m.running().then(|| FloorView {
            deficit_since: m.deficit_since.map(rfc3339),
            unanswered: m.unanswered.clone(),
            surplus_since: m.surplus_since.map(rfc3339),
            flagged: m
                .flagged_passes
                .iter()
                .map(|(id, n)| FlaggedView {
                    instance_id: *id,
                    passes: *n,
                })
                .collect(),
        })
    }
}

/// `day`: the day profile learned from the samples (docs/inspect.md): whether the rules
/// believe it and why, its error over the last hours, the hours of history it spans, what it
/// expects for the coming hour, and each hour of the day it knows.
#[derive(Debug, Serialize, PartialEq)]
pub struct DayView {
    pub trusted: bool,
    pub why: String,
    pub error: Option<f64>,
    pub history_hours: f64,
    /// Proofs/h it shows for the hour after now (null: that hour not known).
    pub next_hour_pph: Option<f64>,
    pub hours: Vec<crate::fleet::day::Hour>,
}

impl DayView {
    pub fn of(p: &crate::fleet::day::DayProfile) -> DayView {
        let r2 = |v: f64| (v * 100.0).round() / 100.0;
        DayView {
            trusted: p.trusted,
            why: p.why.clone(),
            error: p.error.map(r2),
            history_hours: r2(p.history_hours),
            next_hour_pph: p.at(p.now + crate::fleet::day::HOUR_MS).map(r2),
            hours: p
                .hours
                .iter()
                .map(|h| crate::fleet::day::Hour {
                    pph: r2(h.pph),
                    ..*h
                })
                .collect(),
        }
    }
}

/// `paused`: since when, until when (null: until `fleetagent resume`) and why.
#[derive(Debug, Serialize, PartialEq)]
pub struct PauseView {
    pub since: String,
    pub until: Option<String>,
    pub reason: String,
}

/// `operator_hold`: the operator's stop and until when nothing is launched by the rules or
/// the floor.
#[derive(Debug, Serialize, PartialEq)]
pub struct HoldView {
    pub stopped_at: String,
    pub instance_id: Option<i64>,
    pub label: Option<String>,
    pub until: String,
}

/// The price of a proof: every figure null and `unknown` saying why while it is unknown;
/// and what the fleet earns at it over the last hour's completions of our own instances'
/// workers, the cluster's others apart (null where unknown).
#[derive(Debug, Serialize, PartialEq)]
pub struct PriceView {
    pub revenue_per_proof: Option<f64>,
    pub proof_fil: Option<f64>,
    pub proof_fil_source: Option<&'static str>,
    pub fil_usd: Option<f64>,
    pub fil_usd_source: Option<&'static str>,
    pub fil_usd_at: Option<String>,
    /// The last FIL/USD fetch's failure (null after a success, or with no command or URL).
    pub fil_usd_error: Option<String>,
    pub unknown: Option<String>,
    pub ours_completed_1h: Option<u32>,
    pub others_completed_1h: Option<u32>,
    pub cost_per_proof: Option<f64>,
    /// Of the cluster's completions of the last hour, the share Curio paid (null: not read);
    /// the revenue counts ours at it.
    pub paid_share: Option<f64>,
    pub revenue_per_hour: Option<f64>,
    pub profit_per_hour: Option<f64>,
}

impl PriceView {
    pub fn of(stored: &economics::Stored) -> Self {
        let e = &stored.economics;
        let p = stored.price.as_ref().ok();
        let round = |x: f64| (x * 1e6).round() / 1e6 + 0.0;
        PriceView {
            revenue_per_proof: p.map(|p| p.revenue_per_proof),
            proof_fil: p.map(|p| p.proof_fil),
            proof_fil_source: p.map(|p| p.proof_fil_source),
            fil_usd: p.map(|p| p.fil_usd),
            fil_usd_source: p.map(|p| p.fil_usd_source),
            fil_usd_at: p.map(|p| rfc3339(p.fil_usd_at)),
            fil_usd_error: stored.fetch_error.clone(),
            unknown: stored.price.as_ref().err().cloned(),
            ours_completed_1h: e.ours_completed_1h,
            others_completed_1h: e.others_completed_1h,
            cost_per_proof: e.cost_per_proof.map(round),
            paid_share: e.paid_share.map(round),
            revenue_per_hour: e.revenue_per_hour.map(round),
            profit_per_hour: e.profit_per_hour.map(round),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct InstanceView {
    pub label: String,
    pub vast_id: Option<i64>,
    pub state: crate::fleet::State,
    pub actual_status: Option<String>,
    pub gpu_name: Option<String>,
    pub dph: Option<f64>,
    pub state_since: String,
    pub last_seen_at: Option<String>,
    pub machine_name: Option<String>,
    pub adopted: bool,
    /// A bid (interruptible) instance; `state` is `outbid` while vast.ai has paused it.
    pub is_bid: bool,
    /// The vast.ai host it runs on.
    pub machine_id: Option<i64>,
    /// $/h its disk bills (also while stopped).
    pub storage_dph: Option<f64>,
}

#[derive(Debug, Serialize)]
pub struct ActionView {
    pub at: String,
    pub run_id: Option<i64>,
    pub kind: String,
    pub outcome: String,
    pub actor: String,
    pub label: Option<String>,
    pub instance_id: Option<i64>,
    pub emergency: bool,
    pub reason: Option<String>,
    pub detail: Option<String>,
    /// The journal's line of it (`policy::action_lines`): what was done or refused, with the
    /// guardrail's code and figures or vast.ai's error, and why. The text view prints it.
    #[serde(skip)]
    pub said: String,
}

/// The model's side: configuration, the last failure, and how our token estimate compares
/// with what the provider reported.
#[derive(Debug, Serialize)]
pub struct LlmView {
    pub provider: &'static str,
    pub model: String,
    pub encoding: String,
    pub context_budget_tokens: u64,
    pub effective_budget_tokens: u64,
    pub last_call_at: Option<String>,
    pub last_error: Option<String>,
    pub last_error_at: Option<String>,
    /// Over the last 100 calls that reported usage.
    pub calls_with_usage: i64,
    pub prompt_tokens_estimated: i64,
    pub prompt_tokens_reported: i64,
    /// reported / estimated (below 1.0: the estimate over-counts, as intended).
    pub reported_to_estimate_ratio: Option<f64>,
    pub max_prompt_tokens_estimated: Option<i64>,
    /// The largest reported / estimated of a single call among them.
    pub max_reported_to_estimate_ratio: Option<f64>,
    /// Calls whose server reported a prompt count over 3x our estimate (no count of the
    /// prompt): left out of the figures above and of the calibration.
    pub impossible_usage_calls: i64,
    /// Among them, the calls whose server said how much of the prompt came from its prompt
    /// cache, and the share it did (cached / reported prompt tokens; null when none said).
    pub calls_with_cache: i64,
    pub prompt_tokens_cached: i64,
    pub cache_share: Option<f64>,
    /// What the budget is divided by for this model (`token_calibration`; null before its
    /// first call that reported usage), over how many calls, and the budget that leaves for
    /// our raw estimate.
    pub calibrated_ratio: Option<f64>,
    pub calibration_samples: i64,
    pub calibrated_budget_tokens: u64,
    /// The model's newest turns in this session (at most 100), and how many of them wrote a
    /// tool call as text (nothing ran: `prompt::answer::tool_call_as_text`, the sim report's
    /// rule).
    pub recent_answers: i64,
    pub malformed_answers: i64,
}

/// An operator message and the model's answer, if any came after it.
#[derive(Debug, Serialize)]
pub struct OperatorView {
    pub run_id: Option<i64>,
    pub at: String,
    pub message: String,
    pub answer: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::store::{test_store, wakes};

    /// Outbid bids: the caps count them at the price they resume at, vast.ai bills their
    /// disks; the spend line says both (a bids walkthrough read the caps' figure as the bill).
    #[test]
    fn the_spend_line_says_what_outbid_bids_bill_beside_what_the_caps_count() {
        use crate::fleet::fixtures::row;
        let (dir, s) = test_store(1_000);
        crate::store::instances::upsert(
            &s.conn,
            &row("fa-1", Some(1), crate::fleet::PROVING, 0.41),
        )
        .unwrap();
        let mut paused = row("fa-2", Some(2), crate::fleet::OUTBID, 0.41);
        (paused.is_bid, paused.storage_dph) = (true, Some(0.05));
        crate::store::instances::upsert(&s.conn, &paused).unwrap();
        let path = std::path::Path::new("/etc/fleetagent/config.toml");
        let r = build(&s, dir.path(), &Config::default(), path, 100_000, None).unwrap();
        assert!((r.fleet_dph - 0.82).abs() < 1e-9, "{}", r.fleet_dph);
        let text = render_text(&r);
        assert!(
            text.contains("the fleet bills $0.46/h (1 outbid bid(s) bill their disks, $0.05/h; the caps count them at $0.41/h, the price they resume at, and the fleet at $0.82/h)"),
            "{text}"
        );
    }

    #[test]
    fn a_fresh_database_reports_and_renders() {
        let (dir, s) = test_store(1_000);
        wakes::add(&s.conn, 80_000, "check fleet", "agent", None, 1_000).unwrap();
        let config = Config::default();
        let path = std::path::Path::new("/etc/fleetagent/config.toml");
        let r = build(&s, dir.path(), &config, path, 100_000, None).unwrap();
        assert_eq!(r.session_id, 1);
        assert_eq!(r.next_run_id, 1);
        assert_eq!((r.pending_wakes, r.overdue_wakes), (1, 1));
        assert_eq!(r.wakes[0]["reason"], "check fleet");
        assert!(r.runs.is_empty() && r.operator_messages.is_empty());
        assert_eq!(r.last_decision, None);
        let text = render_text(&r);
        let first = format!(
            "fleetagent {} (commit {}) at 1970-01-01T00:01:40Z\n",
            env!("CARGO_PKG_VERSION"),
            env!("FLEETAGENT_COMMIT")
        );
        assert!(text.starts_with(&first), "{text}");
        for want in [
            "\nconfig      /etc/fleetagent/config.toml\n",
            "\nlast ok run never\n",
            "\nwakes       1 pending, 1 overdue, 0 failed\n  #1 due 1970-01-01T00:01:20Z \"check fleet\"\n",
            "\nunits       no systemd manager answered\n",
            "\nfleet       0 instance(s), $0.00/h\n",
            "\nruns        last 0:\n",
            "\nprice       price unknown: no ask price read from Curio and price.proof_price_fil is not set (the profit check is off)\n",
        ] {
            assert!(text.contains(want), "{want:?} missing from:\n{text}");
        }
    }

    #[test]
    fn the_prompt_cache_share_is_shown_when_the_server_reports_it() {
        use crate::store::llm_calls::{insert, Call};
        let (dir, s) = test_store(1_000);
        let config = Config::default();
        let path = std::path::Path::new("/etc/fleetagent/config.toml");
        let run = runs::create(&s.conn, 1, 1, 1, runs::StartedBy::Tick, 0).unwrap();
        let call = |reported: i64, cached: Option<i64>| {
            insert(
                &s.conn,
                &Call {
                    run_id: run,
                    estimate: reported as u64,
                    usage: Some((reported, 20)),
                    cached,
                    ..Call::default()
                },
            )
            .unwrap()
        };
        call(2_000, None);
        let r = build(&s, dir.path(), &config, path, 100_000, None).unwrap();
        assert_eq!((r.llm.calls_with_cache, r.llm.cache_share), (0, None));
        assert!(render_text(&r)
            .contains("\ncache       the server reported nothing about a prompt cache\n"));
        call(3_000, Some(0));
        call(3_100, Some(2_900));
        let r = build(&s, dir.path(), &config, path, 100_000, None).unwrap();
        let v = serde_json::to_value(&r.llm).unwrap();
        assert_eq!(
            (
                &v["calls_with_cache"],
                &v["prompt_tokens_cached"],
                &v["cache_share"]
            ),
            (
                &serde_json::json!(2),
                &serde_json::json!(2_900),
                &serde_json::json!(0.475)
            )
        );
        let text = render_text(&r);
        assert!(
            text.contains("\ncache       47.5% of the prompt tokens came from the server's prompt cache (2 of 3 calls said)\n"),
            "{text}"
        );
    }

    #[test]
    fn the_install_id_and_a_pause_are_shown() {
        let (dir, s) = test_store(1_000);
        crate::store::ops::set_install_id(&s.conn, "qwerty").unwrap();
        let config = Config::default();
        let path = std::path::Path::new("/etc/fleetagent/config.toml");
        let r = build(&s, dir.path(), &config, path, 100_000, None).unwrap();
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(
            (&v["install_id"], &v["paused"]),
            (&serde_json::json!("qwerty"), &Value::Null)
        );
        assert!(!render_text(&r).contains("PAUSED"));
        // The contract's `ha` key, null on a single-host install (DESIGN.md, "Several hosts").
        assert!(v.as_object().unwrap().contains_key("ha") && v["ha"].is_null());
        crate::store::ops::set_pause(
            &s.conn,
            &crate::store::ops::Pause {
                since: 60_000,
                until: None,
                reason: "disk swap".into(),
            },
        )
        .unwrap();
        let r = build(&s, dir.path(), &config, path, 100_000, None).unwrap();
        assert_eq!(
            serde_json::to_value(&r).unwrap()["paused"],
            serde_json::json!({"since": "1970-01-01T00:01:00Z", "until": null, "reason": "disk swap"})
        );
        let text = render_text(&r);
        assert!(
            text.contains(
                "\ninstall     qwerty (new labels: <vast.label_prefix>-qwerty-r<run>-<suffix>)\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "\nPAUSED      since 1970-01-01T00:01:00Z until `fleetagent resume`: \"disk swap\""
            ),
            "{text}"
        );
    }

    #[test]
    fn the_floors_clocks_are_named_when_a_pass_left_a_deficit_unanswered() {
        let (dir, s) = test_store(1_000);
        let config = Config::default();
        let path = std::path::Path::new("/etc/fleetagent/config.toml");
        let r = build(&s, dir.path(), &config, path, 100_000, None).unwrap();
        assert_eq!(serde_json::to_value(&r).unwrap()["floor"], Value::Null);
        assert!(!render_text(&r).contains("\nfloor "));
        let memory = crate::policy::floor::Memory {
            deficit_since: Some(60_000),
            unanswered: Some(
                "the launch window is spent (3 of 3 in policy.launch_window_minutes)".into(),
            ),
            flagged_passes: [(7, 1)].into_iter().collect(),
            ..Default::default()
        };
        crate::store::session::set_floor_memory(&s.conn, &serde_json::to_string(&memory).unwrap())
            .unwrap();
        let r = build(&s, dir.path(), &config, path, 100_000, None).unwrap();
        assert_eq!(
            serde_json::to_value(&r).unwrap()["floor"],
            serde_json::json!({
                "deficit_since": "1970-01-01T00:01:00Z",
                "unanswered": "the launch window is spent (3 of 3 in policy.launch_window_minutes)",
                "surplus_since": null,
                "flagged": [{"instance_id": 7, "passes": 1}]
            })
        );
        let text = render_text(&r);
        assert!(
            text.contains("\nfloor       deficit since 1970-01-01T00:01:00Z, UNANSWERED in the last pass: the launch window is spent (3 of 3 in policy.launch_window_minutes); flagged: instance 7 left 1 pass\n"),
            "{text}"
        );
    }

    #[test]
    fn a_known_price_is_shown_with_its_sources() {
        let (dir, s) = test_store(1_000);
        crate::store::price::set_fetched(&s.conn, 4.0, 60_000).unwrap();
        let mut config = Config::default();
        config.price.proof_price_fil = Some(0.005);
        config.price.fil_usd_url = Some("http://127.0.0.1:9/p".into());
        let path = std::path::Path::new("/etc/fleetagent/config.toml");
        let r = build(&s, dir.path(), &config, path, 100_000, None).unwrap();
        let v = serde_json::to_value(&r.price).unwrap();
        assert_eq!(v["revenue_per_proof"], 0.02);
        assert_eq!(
            (v["proof_fil_source"].as_str(), v["fil_usd_source"].as_str()),
            (Some("config"), Some("url"))
        );
        assert_eq!(v["fil_usd_at"], "1970-01-01T00:01:00Z");
        assert_eq!(v["unknown"], serde_json::Value::Null);
        let text = render_text(&r);
        assert!(
            text.contains("\nprice       $0.0200 a proof (0.005 FIL from config x FIL/USD 4.000 from url, as of 1970-01-01T00:01:00Z)\n"),
            "{text}"
        );
    }
}
