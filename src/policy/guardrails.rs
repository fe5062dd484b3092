//! The limits every launch and stop must pass, as pure functions of (ledger and fleet facts,
//! config, now): money ($/h, instance count, daily spend), the launch window counted from
//! the action ledger, the emergency total while WORKERS DEAD, and the stop protections.
//! Refusals come back as values in DESIGN.md's format; nothing here does I/O or reads the
//! clock. docs/guardrails.md states every rule with its key.

use serde_json::{json, Value};

use super::result::ToolResult;
use crate::clock::Millis;
use crate::config::{Config, PolicyConfig};

/// Float slack for money comparisons ($/h and $ are compared to the cent).
const MONEY_EPSILON: f64 = 1e-9;
pub use crate::fleet::money::DAILY_LOOKAHEAD_HOURS;

/// Why a launch or stop is refused. `code()` is DESIGN.md's error code.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    /// A key without a safe default is unset, or a service has no credentials.
    NotConfigured {
        key: Option<String>,
        message: String,
    },
    InstanceCap {
        max: u32,
        count: u32,
        /// Of `count`, launches vast.ai has not confirmed ([`LaunchFacts::unconfirmed`]).
        unconfirmed: u32,
    },
    Budget {
        max: f64,
        fleet: f64,
        offer: f64,
    },
    DailySpend {
        max: f64,
        spent: f64,
        projected: f64,
        /// The fleet's $/h and the instance's (0 for the check before any offer is known).
        fleet: f64,
        offer: f64,
    },
    RateLimited {
        limit: String,
        retry_after_secs: u64,
    },
    Protected {
        message: String,
    },
    /// `proofshare_meta.enabled` is false: no ProofShare work will come, so no instance is
    /// rented for it, whoever asks.
    ProofShareDisabled,
    /// Curio runs an instance of ours without PSProve in its task list (`Snapshot::taskless`,
    /// the first named): another of the same image would not prove either, whoever asks.
    NoPsprove {
        which: String,
    },
    /// The boot breaker holds (`fleet::boot`): rentals in a row never booted a Curio worker,
    /// and one of ours has not had one yet; the next launch waits for it, whoever asks.
    BootFailures {
        message: String,
    },
    /// The demand probe failed this pass (`why`): the fleet is held as it is, whoever asks
    /// (a launch on a stale belief, "workers dead", is how money goes unseen).
    DemandUnknown {
        why: String,
    },
    /// The operator paused the agent (`fleetagent pause`): nobody but the operator launches
    /// or stops until `resume` (or the pause's end).
    Paused(crate::store::ops::Pause),
    /// An operator stop began a hold (`fleet::OperatorHold`) after the rules or the floor
    /// planned this pass: their launches that had not gone yet are not sent.
    OperatorHold(crate::fleet::OperatorHold),
    /// With a known price, the offer's cost per proof leaves less than `policy.min_margin`
    /// of the revenue per proof (`among`: no offer id was asked for, and none of this many
    /// offers is profitable; the offer named is the cheapest per proof).
    Unprofitable(Box<Unprofitable>),
}

/// The figures of an `unprofitable` refusal.
#[derive(Debug, Clone, PartialEq)]
pub struct Unprofitable {
    pub offer_id: u64,
    pub gpu: String,
    /// What the rental bills per hour (the bid for a bid).
    pub dph: f64,
    /// The GPU's proofs/h and where it comes from (`pinned`, `measured`, `default`).
    pub pph: f64,
    pub rate_source: &'static str,
    pub usd_per_proof: f64,
    pub revenue_per_proof: f64,
    pub max_usd_per_proof: f64,
    pub min_margin: f64,
    pub among: Option<usize>,
}

impl Refusal {
    pub fn code(&self) -> &'static str {
        match self {
            Refusal::NotConfigured { .. } => "not_configured",
            Refusal::InstanceCap { .. } => "instance_cap",
            Refusal::Budget { .. } => "budget",
            Refusal::DailySpend { .. } => "daily_spend",
            Refusal::RateLimited { .. } => "rate_limited",
            Refusal::Protected { .. } => "protected",
            Refusal::ProofShareDisabled => "proofshare_disabled",
            Refusal::NoPsprove { .. } => "no_psprove",
            Refusal::BootFailures { .. } => "boot_failures",
            Refusal::DemandUnknown { .. } => "demand_unknown",
            Refusal::Unprofitable(_) => "unprofitable",
            Refusal::Paused(_) => "paused",
            Refusal::OperatorHold(_) => "operator_hold",
        }
    }

    /// The details that follow `"error": code` in the result.
    pub fn details(&self) -> Value {
        match self {
            Refusal::NotConfigured { key, message } => match key {
                Some(k) => json!({"key": k, "message": message}),
                None => json!({"message": message}),
            },
            // Slots held by creates that may never have happened were read as instances
            // booting (a walkthrough): said, with when they are settled.
            Refusal::InstanceCap {
                max,
                count,
                unconfirmed,
            } => {
                let mut v = json!({"limit": format!("{max} instances"), "instances": count});
                if *unconfirmed > 0 {
                    v["unconfirmed"] = json!(unconfirmed);
                    v["message"] = json!(format!("{count} instances take the {max} slot(s), {unconfirmed} of them launches vast.ai has not confirmed (a create with no answer, not listed since): a listing settles them within 10 minutes"));
                }
                v
            }
            Refusal::Budget { max, fleet, offer } => json!({
                "limit": format!("${max:.2}/h"),
                "fleet_dph": round4(*fleet),
                "offer_dph": round4(*offer),
                "message": format!("fleet ${fleet:.2}/h + this instance ${offer:.2}/h would exceed ${max:.2}/h"),
            }),
            Refusal::DailySpend {
                max,
                spent,
                projected,
                fleet,
                offer,
            } => json!({
                "limit": format!("${max:.2}/day"),
                "spent_today": round4(*spent),
                "message": if *offer > 0.0 {
                    format!(
                        "${spent:.2} spent today + {DAILY_LOOKAHEAD_HOURS:.0} h of the fleet with this instance (${fleet:.2}/h + ${offer:.2}/h) = ${projected:.2}, over ${max:.2}"
                    )
                } else {
                    format!(
                        "${spent:.2} spent today + {DAILY_LOOKAHEAD_HOURS:.0} h of the fleet as it is (${fleet:.2}/h) = ${projected:.2}, over ${max:.2}: no instance fits"
                    )
                },
            }),
            Refusal::RateLimited {
                limit,
                retry_after_secs,
            } => json!({"limit": limit, "retry_after_secs": retry_after_secs}),
            Refusal::Protected { message } => json!({"message": message}),
            Refusal::Paused(p) => {
                let until = match p.until {
                    Some(u) => format!("until {}", crate::clock::rfc3339(u)),
                    None => "until the operator runs `fleetagent resume`".into(),
                };
                json!({
                    "since": crate::clock::rfc3339(p.since),
                    "until": p.until.map(crate::clock::rfc3339),
                    "reason": p.reason,
                    "message": format!(
                        "the operator paused fleetagent since {} {until} ({}): nothing is launched or stopped but by the operator; do not retry, report what you see",
                        crate::clock::rfc3339(p.since),
                        crate::text::quote(&p.reason, 200)
                    ),
                })
            }
            Refusal::OperatorHold(h) => json!({
                "stopped_at": crate::clock::rfc3339(h.stopped_at),
                "instance_id": h.instance_id,
                "until": crate::clock::rfc3339(h.until),
                "message": format!(
                    "the operator stopped instance {} at {}, after this pass planned its launches: the rules and the floor launch nothing until {} (policy.operator_hold_mins) unless the operator resumes or sends a message",
                    h.instance_id.map_or("-".to_string(), |i| i.to_string()),
                    crate::clock::rfc3339(h.stopped_at),
                    crate::clock::rfc3339(h.until)
                ),
            }),
            Refusal::DemandUnknown { why } => json!({
                "message": format!("demand is unknown ({why}): the fleet is held as it is; nothing is launched until the probe reads Curio again"),
            }),
            Refusal::NoPsprove { which } => json!({
                "message": format!("{which}: nothing is launched until the worker image's layers are fixed (the operator's to do); do not retry, report it"),
            }),
            Refusal::BootFailures { message } => json!({
                "message": format!("{message}; do not retry before then, report it"),
            }),
            Refusal::ProofShareDisabled => json!({
                "message": "ProofShare is disabled in Curio (proofshare_meta.enabled is false): no work will come, so nothing is launched for it; enable it in Curio's web UI first",
            }),
            Refusal::Unprofitable(u) => {
                let head = match u.among {
                    Some(n) => format!(
                        "none of the {n} offers is profitable; the cheapest per proof, offer {}",
                        u.offer_id
                    ),
                    None => format!("offer {}", u.offer_id),
                };
                let mut v = json!({
                    "offer_id": u.offer_id,
                    "usd_per_proof": round6(u.usd_per_proof),
                    "revenue_per_proof": round6(u.revenue_per_proof),
                    "max_usd_per_proof": round6(u.max_usd_per_proof),
                    "offer_dph": round4(u.dph),
                    "pph": round2(u.pph),
                    "rate_source": u.rate_source,
                    "message": format!(
                        "{head} ({} ${:.4}/h over {} proofs/h, {} rate) costs ${:.4} per proof; a proof earns ${:.4}, and policy.min_margin {} allows at most ${:.4}",
                        crate::text::clip(&u.gpu, 40),
                        u.dph,
                        crate::fleet::num(u.pph),
                        u.rate_source,
                        u.usd_per_proof,
                        u.revenue_per_proof,
                        u.min_margin,
                        u.max_usd_per_proof
                    ),
                });
                if let Some(n) = u.among {
                    v["offers_checked"] = json!(n);
                }
                v
            }
        }
    }

    pub fn to_result(&self) -> ToolResult {
        ToolResult::error(self.code(), self.details())
    }

    /// One line for an operator (`instances stop`).
    pub fn one_line(&self) -> String {
        let d = self.details();
        let text = d
            .get("message")
            .and_then(Value::as_str)
            .map(String::from)
            .or_else(|| {
                d.get("limit")
                    .and_then(Value::as_str)
                    .map(|l| format!("limit {l}"))
            })
            .unwrap_or_default();
        format!("{}: {text}", self.code())
    }
}

fn round4(x: f64) -> f64 {
    (x * 1e4).round() / 1e4
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

fn round6(x: f64) -> f64 {
    if x.is_finite() {
        (x * 1e6).round() / 1e6
    } else {
        x
    }
}

/// The profit check of one offer billing `dph` $/h at `pph` proofs/h (`rate_source` says
/// where that rate comes from): with a known price its cost per proof must not exceed
/// revenue x (1 - `policy.min_margin`). Off (Ok) while the price is unknown.
#[allow(clippy::too_many_arguments)]
pub fn check_profit(
    price: Option<&crate::price::Price>,
    config: &Config,
    offer_id: u64,
    gpu: &str,
    dph: f64,
    pph: f64,
    rate_source: &'static str,
    among: Option<usize>,
) -> Result<(), Refusal> {
    let Some(p) = price else {
        return Ok(());
    };
    if crate::price::profitable(Some(p), dph, pph, config) {
        return Ok(());
    }
    Err(Refusal::Unprofitable(Box::new(Unprofitable {
        offer_id,
        gpu: gpu.to_string(),
        dph,
        pph,
        rate_source,
        usd_per_proof: crate::price::cost_per_proof(dph, pph),
        revenue_per_proof: p.revenue_per_proof,
        max_usd_per_proof: crate::price::max_cost_per_proof(p, config),
        min_margin: config.policy.min_margin,
        among,
    })))
}

pub use crate::ratelimit::window::{window_state, WindowState};

/// What a launch is checked against: facts of this pass (the snapshot, updated by earlier
/// calls of the same pass) and the ledger.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LaunchFacts<'a> {
    pub now: Millis,
    /// $/h of our instances that bill (launching ones at their offer's price).
    pub fleet_dph: f64,
    /// Our instances that take a slot (all but stopped and gone).
    pub instances: u32,
    /// Of them, launches vast.ai has not confirmed (`Snapshot::unconfirmed_launches`).
    pub unconfirmed: u32,
    pub window_launches: &'a [Millis],
    pub workers_dead: bool,
    /// Estimated dollars spent since 00:00 UTC.
    pub spent_today: f64,
}

/// Keys without a safe default (`vast.image`, `policy.max_dph_total`, `policy.max_instances`)
/// must be set before any launch; the refusal names the first unset one.
pub fn check_configured(config: &Config) -> Result<(), Refusal> {
    let missing = config.policy.missing_launch_keys(&config.vast);
    match missing.first() {
        None => Ok(()),
        Some(key) => Err(Refusal::NotConfigured {
            key: Some((*key).to_string()),
            message: format!(
                "set {} in the config: no launch is possible while {} unset",
                missing.join(", "),
                if missing.len() == 1 {
                    "it is"
                } else {
                    "they are"
                }
            ),
        }),
    }
}

/// The limits that do not depend on the offer: the instance cap, then the launch window.
pub fn check_launch_slots(
    facts: &LaunchFacts<'_>,
    policy: &PolicyConfig,
) -> Result<WindowState, Refusal> {
    let max = policy.max_instances.unwrap_or(0);
    if facts.instances + 1 > max {
        return Err(Refusal::InstanceCap {
            max,
            count: facts.instances,
            unconfirmed: facts.unconfirmed,
        });
    }
    let w = window_state(facts.window_launches, facts.now, policy, facts.workers_dead);
    if let Some(retry_after_secs) = w.retry_after_secs {
        let mut limit = format!(
            "{} launches per {} min",
            w.limit, policy.launch_window_minutes
        );
        if w.emergency {
            limit.push_str(" (emergency total while WORKERS DEAD)");
        }
        return Err(Refusal::RateLimited {
            limit,
            retry_after_secs,
        });
    }
    Ok(w)
}

/// The money limits for an instance at `offer_dph`: the fleet's $/h after the launch must not
/// exceed `max_dph_total`, and (when `daily_spend_max` is set) the spend so far today plus one
/// hour of the fleet after the launch must not exceed `daily_spend_max`.
pub fn check_launch_money(
    facts: &LaunchFacts<'_>,
    offer_dph: f64,
    policy: &PolicyConfig,
) -> Result<(), Refusal> {
    let max = policy.max_dph_total.unwrap_or(0.0);
    let after = facts.fleet_dph + offer_dph;
    if after > max + MONEY_EPSILON {
        return Err(Refusal::Budget {
            max,
            fleet: facts.fleet_dph,
            offer: offer_dph,
        });
    }
    if let Some(daily) = policy.daily_spend_max {
        let projected = facts.spent_today + after * DAILY_LOOKAHEAD_HOURS;
        if projected > daily + MONEY_EPSILON {
            return Err(Refusal::DailySpend {
                max: daily,
                spent: facts.spent_today,
                projected,
                fleet: facts.fleet_dph,
                offer: offer_dph,
            });
        }
    }
    Ok(())
}

/// The most $/h one more instance may cost under both money limits (may be <= 0).
pub fn offer_headroom(facts: &LaunchFacts<'_>, policy: &PolicyConfig) -> f64 {
    crate::fleet::money::dph_room(policy, facts.fleet_dph, facts.spent_today)
}

/// What a stop is checked against.
#[derive(Debug, Clone, PartialEq)]
pub struct StopFacts {
    pub instance_id: i64,
    /// The label carries our prefix (it is in our table).
    pub ours: bool,
    /// Exited/offline or stuck loading: it earns nothing, the protections do not apply.
    pub flagged: bool,
    /// The instance's lifecycle state (`proving`, `registered`, ...).
    pub state: Option<crate::fleet::State>,
    /// It is matched to a live, schedulable Curio worker.
    pub live_worker: bool,
    /// Live, schedulable PSProve workers in the whole cluster (ours or not).
    pub live_workers: u32,
    /// PSProve work waiting: pending + held by dead owners + ProofShare waiting.
    pub queued: u32,
    /// False when the demand probe failed this pass (or, for an operator's stop outside a
    /// pass, no recent reading is stored); `demand_error` says why.
    pub demand_known: bool,
    pub demand_error: Option<String>,
    /// `fleetagent instances stop --force` by the operator.
    pub forced: bool,
}

/// The hand-brake: while the operator's pause is in force, nobody but the operator
/// launches or stops (the operator's own `instances stop` goes through).
pub fn check_paused(
    paused: Option<&crate::store::ops::Pause>,
    by_operator: bool,
) -> Result<(), Refusal> {
    match paused {
        Some(p) if !by_operator => Err(Refusal::Paused(p.clone())),
        _ => Ok(()),
    }
}

/// Stops never take an instance that is not ours, never the last live workers while work is
/// queued, never an instance that is proving, and nothing on a failed probe (the fleet is
/// held), unless the operator forces it. Ours that are flagged may always go.
pub fn check_stop(f: &StopFacts) -> Result<(), Refusal> {
    let id = f.instance_id;
    if f.forced {
        return Ok(());
    }
    if !f.ours {
        return Err(Refusal::Protected {
            message: format!(
                "instance {id} is not ours (its label lacks our prefix); only the operator can stop it, with `fleetagent instances stop {id} --force`"
            ),
        });
    }
    if f.flagged {
        return Ok(());
    }
    if !f.demand_known {
        let why = match f.demand_error.as_deref() {
            Some(e) => crate::text::clip(e, 200),
            None => "the probe failed".into(),
        };
        return Err(Refusal::Protected {
            message: format!(
                "demand is unknown ({why}): the fleet is held; instance {id} is not flagged"
            ),
        });
    }
    if f.state == Some(crate::fleet::PROVING) {
        return Err(Refusal::Protected {
            message: format!("instance {id} is proving"),
        });
    }
    if f.live_worker && f.queued > 0 && f.live_workers <= 1 {
        return Err(Refusal::Protected {
            message: format!(
                "instance {id} is the last live worker while {} proofs are queued",
                f.queued
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::State;

    const MIN: Millis = 60_000;

    fn policy() -> PolicyConfig {
        PolicyConfig {
            max_dph_total: Some(10.0),
            max_instances: Some(20),
            ..PolicyConfig::default()
        }
    }

    fn facts(window: &[Millis], dead: bool) -> LaunchFacts<'_> {
        LaunchFacts {
            now: 100 * MIN,
            fleet_dph: 1.2,
            instances: 3,
            unconfirmed: 0,
            window_launches: window,
            workers_dead: dead,
            spent_today: 0.0,
        }
    }

    #[test]
    fn window_counts_and_retry_after() {
        let now = 100 * MIN;
        // 3 launches 10, 5 and 1 minutes ago; window 15 min, max 3.
        let w = [now - 10 * MIN, now - 5 * MIN, now - MIN];
        let s = window_state(&w, now, &policy(), false);
        assert_eq!((s.used, s.limit), (3, 3));
        // The oldest ages out in 5 minutes.
        assert_eq!(s.retry_after_secs, Some(300));
        let refusal = check_launch_slots(&facts(&w, false), &policy()).unwrap_err();
        assert_eq!(
            refusal.to_result().content,
            json!({"error": "rate_limited", "limit": "3 launches per 15 min", "retry_after_secs": 300})
        );
        // A launch 15 minutes old no longer counts.
        let s = window_state(&[now - 15 * MIN], now, &policy(), false);
        assert_eq!(s.used, 0);
    }

    #[test]
    fn incident_arithmetic() {
        let now = 100 * MIN;
        let mut w = vec![now - 10 * MIN, now - 5 * MIN, now - MIN];
        let mut launched = 0;
        for _ in 0..4 {
            let f = facts(&w, true);
            if check_launch_slots(&f, &policy()).is_ok() {
                launched += 1;
                w.push(now);
            }
        }
        assert_eq!(launched, 3, "3 spent + WORKERS DEAD + 4 asked = 3 more");
        let r = check_launch_slots(&facts(&w, true), &policy()).unwrap_err();
        assert_eq!(r.code(), "rate_limited");
        assert_eq!(
            r.details()["limit"],
            "6 launches per 15 min (emergency total while WORKERS DEAD)"
        );
        // One slot frees when the oldest launch leaves the window, 5 minutes from now.
        assert_eq!(r.details()["retry_after_secs"], 300);
    }

    /// Slots held by launches vast.ai has not confirmed are said in the refusal (they read as
    /// instances booting: a walkthrough); without any, the refusal is as before.
    #[test]
    fn an_instance_cap_held_by_unconfirmed_launches_says_so() {
        let p = PolicyConfig {
            max_instances: Some(3),
            ..policy()
        };
        let mut f = facts(&[], false);
        let r = check_launch_slots(&f, &p).unwrap_err();
        assert_eq!(r.details(), json!({"limit": "3 instances", "instances": 3}));
        f.unconfirmed = 2;
        let r = check_launch_slots(&f, &p).unwrap_err();
        assert_eq!(
            r.details()["message"],
            "3 instances take the 3 slot(s), 2 of them launches vast.ai has not confirmed (a create with no answer, not listed since): a listing settles them within 10 minutes"
        );
    }

    #[test]
    fn money_limits() {
        let p = PolicyConfig {
            daily_spend_max: Some(30.0),
            ..policy()
        };
        let mut f = facts(&[], false);
        f.fleet_dph = 9.7;
        assert!(check_launch_money(&f, 0.3, &p).is_ok());
        let r = check_launch_money(&f, 0.31, &p).unwrap_err();
        assert_eq!(r.code(), "budget");
        assert_eq!(r.details()["limit"], "$10.00/h");
        f.fleet_dph = 1.0;
        f.spent_today = 28.5;
        // 28.5 + (1.0 + 0.4) * 1 h = 29.9 <= 30
        assert!(check_launch_money(&f, 0.4, &p).is_ok());
        let r = check_launch_money(&f, 0.6, &p).unwrap_err();
        assert_eq!(r.code(), "daily_spend");
        assert_eq!(
            r.details()["message"],
            "$28.50 spent today + 1 h of the fleet with this instance ($1.00/h + $0.60/h) = $30.10, over $30.00"
        );
        assert!((offer_headroom(&f, &p) - 0.5).abs() < 1e-9);
        // The check before any offer is known counts the fleet as it is, and says so.
        f.spent_today = 29.5;
        let r = check_launch_money(&f, 0.0, &p).unwrap_err();
        assert_eq!(
            r.details()["message"],
            "$29.50 spent today + 1 h of the fleet as it is ($1.00/h) = $30.50, over $30.00: no instance fits"
        );
    }

    #[test]
    fn instance_cap_first() {
        let p = PolicyConfig {
            max_instances: Some(3),
            ..policy()
        };
        let r = check_launch_slots(&facts(&[], false), &p).unwrap_err();
        assert_eq!(
            r.to_result().content,
            json!({"error": "instance_cap", "limit": "3 instances", "instances": 3})
        );
    }

    #[test]
    fn unset_keys_named() {
        let c = Config::default();
        let r = check_configured(&c).unwrap_err();
        assert_eq!(r.code(), "not_configured");
        assert_eq!(r.details()["key"], "vast.image");
    }

    #[test]
    fn a_pause_refuses_everyone_but_the_operator() {
        let p = crate::store::ops::Pause {
            since: 1_800_000_000_000,
            until: None,
            reason: "disk swap on the Curio box".into(),
        };
        assert!(check_paused(None, false).is_ok());
        assert!(
            check_paused(Some(&p), true).is_ok(),
            "the operator's own stop"
        );
        let r = check_paused(Some(&p), false).unwrap_err();
        assert_eq!(r.code(), "paused");
        let c = r.to_result().content;
        assert_eq!(c["since"], "2027-01-15T08:00:00Z");
        assert_eq!(c["until"], Value::Null);
        assert_eq!(c["reason"], "disk swap on the Curio box");
        let m = c["message"].as_str().unwrap();
        assert!(
            m.contains("until the operator runs `fleetagent resume`"),
            "{m}"
        );
        let timed = crate::store::ops::Pause {
            until: Some(1_800_000_000_000 + 3_600_000),
            ..p
        };
        let c = check_paused(Some(&timed), false)
            .unwrap_err()
            .to_result()
            .content;
        assert_eq!(c["until"], "2027-01-15T09:00:00Z");
        assert!(c["message"]
            .as_str()
            .unwrap()
            .contains("until 2027-01-15T09:00:00Z"));
    }

    fn stop(state: State) -> StopFacts {
        StopFacts {
            instance_id: 7,
            ours: true,
            flagged: false,
            state: Some(state),
            live_worker: true,
            live_workers: 1,
            queued: 4,
            demand_known: true,
            demand_error: None,
            forced: false,
        }
    }

    #[test]
    fn stop_protections() {
        assert_eq!(
            check_stop(&stop(State::Proving)).unwrap_err().code(),
            "protected"
        );
        let last = check_stop(&stop(State::Registered)).unwrap_err();
        assert!(
            last.one_line().contains("last live worker"),
            "{}",
            last.one_line()
        );
        let mut two = stop(State::Registered);
        two.live_workers = 2;
        assert!(check_stop(&two).is_ok());
        let mut empty_queue = stop(State::Registered);
        empty_queue.queued = 0;
        assert!(check_stop(&empty_queue).is_ok());
        let mut foreign = stop(State::Booted);
        foreign.ours = false;
        assert!(check_stop(&foreign).is_err());
        let mut unknown = stop(State::Booted);
        unknown.demand_known = false;
        assert!(check_stop(&unknown).is_err());
        let mut flagged = stop(State::Proving);
        flagged.flagged = true;
        assert!(check_stop(&flagged).is_ok());
        let mut forced = stop(State::Proving);
        forced.forced = true;
        forced.ours = false;
        assert!(check_stop(&forced).is_ok());
    }
}
