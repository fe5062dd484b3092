//! The observation the model reads: the one line built from the [`Snapshot`] (DESIGN.md's
//! example), the `Action needed:` line while WORKERS DEAD (the launches the rules would
//! make: `policy::rules::emergency_launches`), and the lines that follow (what Curio says
//! beyond the queue: `prompt::curio`; lifecycle changes, flagged instances, open launches,
//! what the floor did). Pure; outside text is quoted; times are relative to the pass but the
//! run line's.

use crate::clock::{short, Millis};
use crate::config::Config;
use crate::fleet::state::*;
use crate::fleet::{num, Snapshot, LABEL_CHARS};
use crate::store::actions::Action;
use crate::store::events::Event;
use crate::store::instances::InstanceRow;
use crate::store::wakes::Wake;
use crate::text::quote;

use super::actions::{ago, fold};
use super::events::events_line;
use crate::wakes::wakes_line;

/// At most this many change lines in the observation; the rest are counted.
const MAX_CHANGE_LINES: usize = 12;
/// At most this many lines of what the floor did; the rest are counted.
const MAX_FLOOR_LINES: usize = 6;
/// The whole observation a pass stores for the model: the observation line, the action the
/// rules say is needed, the lifecycle lines, this pass's folded events and wakes, and which
/// run and pass this is.
pub fn pass_text(snapshot: &Snapshot, config: &Config, woke: &Woke<'_>, now: Millis) -> String {
    let mut lines = vec![snapshot.observation_line(config)];
    lines.extend(super::action_needed::action_needed_line(snapshot, config));
    lines.extend(snapshot.operator_lines());
    lines.push(super::economics::economics_line(snapshot, config));
    lines.extend(day_line(snapshot));
    lines.extend(snapshot.demand.as_ref().and_then(super::curio::curio_line));
    lines.extend(snapshot.lifecycle_lines(config));
    lines.extend(floor_lines(woke.floor_before));
    lines.extend(events_line(woke.events, now));
    lines.extend(wakes_line(woke.wakes, now));
    lines.push(format!(
        "({})",
        run_line(woke.run_id, woke.pass_no, woke.started_by, now)
    ));
    lines.join("\n")
}

/// Where the day's history is believed (`fleet::day`): what it expects this hour and the
/// next, so that a model can rent ahead of a rise as the rules do. None otherwise (the
/// profile is in `inspect`).
fn day_line(s: &Snapshot) -> Option<String> {
    use crate::fleet::day::{hour_of_day, HOUR_MS};
    let p = s.day.as_ref().filter(|p| p.trusted)?;
    let this = s.now - s.now.rem_euclid(HOUR_MS);
    let at = |t: Millis| {
        let v = p.at(t).map_or("unknown".to_string(), |v| {
            format!("{} p/h", crate::text::num(v))
        });
        format!("{v} at {:02}:00 UTC", hour_of_day(t))
    };
    Some(format!(
        "Day: the history of the days before expects {} and {} ({}).",
        at(this),
        at(this + HOUR_MS),
        p.why
    ))
}

/// What woke this pass: its claimed events and wakes, and which run and pass it is.
pub struct Woke<'a> {
    pub events: &'a [Event],
    pub wakes: &'a [Wake],
    pub run_id: i64,
    pub pass_no: u32,
    pub started_by: &'a str,
    /// What the floor did in the pass before (actions with actor `floor`).
    pub floor_before: &'a [Action],
}

/// What the floor did in the previous pass, so the model knows it was overruled and why: a
/// heading and one line per action (alike calls folded: `launch ok x3`).
pub fn floor_lines(actions: &[Action]) -> Vec<String> {
    let folded = fold(actions);
    if folded.is_empty() {
        return Vec::new();
    }
    let mut lines =
        vec!["Floor in the last pass (what you left undone, done by the rules):".to_string()];
    lines.extend(
        folded
            .iter()
            .take(MAX_FLOOR_LINES)
            .map(|f| format!("- {}", f.text())),
    );
    if folded.len() > MAX_FLOOR_LINES {
        lines.push(format!("- +{} more", folded.len() - MAX_FLOOR_LINES));
    }
    lines
}

/// `run 12, pass 1, started by events, 2026-12-01 20:05 UTC`.
pub fn run_line(run_id: i64, pass_no: u32, started_by: &str, now: Millis) -> String {
    format!(
        "run {run_id}, pass {pass_no}, started by {started_by}, {} UTC",
        short(now)
    )
}

impl Snapshot {
    /// DESIGN.md's observation line, e.g. `Demand: active=false, WORKERS DEAD. Queue:
    /// PSProve 59p/0r. Throughput: 0/h (1h), 0 (15m). Fleet: 0 running (0 p/h), 3 loading.
    /// Projected: 150 p/h. $1.33/h. Target: 500 p/h. Budget headroom: $8.67/h, 17 slots.
    /// Launch window: 3/3 used, emergency bypass ON.` (here without `active=false`: work waits)
    ///
    /// `active` = PSProve work is being proven (tasks running now or completions in the last
    /// 15 minutes); `active=false` is left out while work waits (beside WORKERS DEAD small
    /// models read it as "no demand"). A failed probe says so and that the fleet is held.
    pub fn observation_line(&self, config: &Config) -> String {
        let mut parts: Vec<String> = Vec::new();
        let task = &config.demand.task;
        match &self.demand {
            Some(d) => {
                let active = d.running > 0 || d.completed_15m > 0;
                let who = if d.workers_dead() {
                    "WORKERS DEAD".to_string()
                } else {
                    format!(
                        "{} live workers ({} idle)",
                        d.live_workers(),
                        d.idle_workers()
                    )
                };
                let ghosts = match self.ghost_workers.len() {
                    0 => String::new(),
                    n => {
                        format!(" ({n} more listed by Curio are instances we stopped: not counted)")
                    }
                };
                if active || d.queued_work() == 0 {
                    parts.push(format!("Demand: active={active}, {who}{ghosts}."));
                } else {
                    parts.push(format!("Demand: {who}{ghosts}."));
                }
                let mut q = format!("Queue: {task} {}p/{}r", d.pending, d.running);
                if d.running_stale > 0 {
                    q.push_str(&format!(", {} held by dead owners", d.running_stale));
                }
                if let Some(w) = d.ps_waiting.filter(|w| *w > 0) {
                    q.push_str(&format!(", ProofShare {w} waiting"));
                }
                parts.push(format!("{q}."));
                parts.push(format!(
                    "Throughput: {}/h (1h), {} (15m).",
                    d.completed_1h, d.completed_15m
                ));
            }
            None => {
                let why = self.demand_error.as_deref().unwrap_or("no reading");
                parts.push(format!(
                    "Demand: UNKNOWN, the probe failed: {}; the fleet is held (no launches or stops on missing data; a flagged instance, if one is listed, may still be destroyed: it bills and earns nothing).",
                    quote(why, 200)
                ));
            }
        }

        let running: Vec<&InstanceRow> = self
            .instances
            .iter()
            .filter(|r| is_running_state(r.state))
            .collect();
        let running_pph: f64 = running.iter().map(|r| self.rate_of(r, config)).sum();
        // A create vast.ai never confirmed is not loading (a walkthrough read "2 loading"
        // with nothing at vast.ai).
        let unconfirmed = self.unconfirmed_launches();
        let mut fleet = format!(
            "Fleet: {} running ({} p/h), {} loading",
            running.len(),
            num(running_pph),
            self.count_in(&[LAUNCHING, LOADING]) - unconfirmed
        );
        if unconfirmed > 0 {
            fleet.push_str(&format!(
                ", {unconfirmed} unconfirmed (creates with no answer, not listed since: they may never come; they hold their slots until a listing settles them)"
            ));
        }
        for (state, n) in [
            (DEAD, self.count_in(&[DEAD])),
            (STOPPED, self.count_in(&[STOPPED])),
            (OUTBID, self.count_in(&[OUTBID])),
        ] {
            if n > 0 {
                fleet.push_str(&format!(", {n} {state}"));
            }
        }
        if let Some(e) = &self.listing_error {
            fleet.push_str(&format!(
                " (vast.ai listing failed: {}; local table as last seen)",
                quote(e, 160)
            ));
        }
        parts.push(format!("{fleet}."));
        // Unconfirmed launches are no capacity coming (a re-test read "Projected: 20 p/h"
        // beside "they may never come"); the guardrails still count their slots.
        let unconfirmed_pph: f64 = self
            .instances
            .iter()
            .filter(|r| self.is_unconfirmed(r))
            .map(|r| self.rate_of(r, config))
            .sum();
        parts.push(format!(
            "Projected: {} p/h.",
            num(self.projected_pph(config) - unconfirmed_pph)
        ));
        parts.push(format!("${:.2}/h.", self.fleet_dph()));
        let target = config.policy.target_proofs_per_hour;
        if target > 0.0 {
            parts.push(format!("Target: {} p/h.", num(target)));
        } else {
            parts.push("Target: none (follow the backlog).".into());
        }

        let missing = config.policy.missing_launch_keys(&config.vast);
        if missing.is_empty() {
            let mut b = format!(
                "Budget headroom: ${:.2}/h, {} slots",
                self.headroom_dph(config).unwrap_or(0.0),
                self.headroom_slots(config).unwrap_or(0)
            );
            if let Some(max) = config.policy.daily_spend_max {
                b.push_str(&format!(
                    ", ${:.2} of ${max:.2} spent today",
                    self.spent_today
                ));
            }
            parts.push(format!("{b}."));
        } else {
            parts.push(format!(
                "Launches not configured: set {}.",
                missing.join(", ")
            ));
        }

        let w = self.window(config);
        let mut lw = format!(
            "Launch window: {}/{} used",
            w.used, config.policy.launch_window_max
        );
        if w.emergency {
            lw.push_str(", emergency bypass ON");
            if w.used >= w.limit {
                lw.push_str(&format!(" ({}/{} emergency total used)", w.used, w.limit));
            }
        }
        if let Some(secs) = w.retry_after_secs {
            lw.push_str(&format!(", next slot in {secs}s"));
        }
        if config.policy.dry_run {
            lw.push_str("; DRY RUN: nothing is sent to vast.ai");
        }
        parts.push(format!("{lw}."));
        parts.join(" ")
    }

    /// What the operator's hand holds, one line each (empty when nothing): the pause, an
    /// operator hold, our instances Curio runs without PSProve (the operator's to fix), and
    /// other installs' instances under our prefix.
    pub fn operator_lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        if let Some(p) = &self.paused {
            let until = match p.until {
                Some(u) => format!("ending {}", ago(self.now, u)),
                None => "until the operator resumes".into(),
            };
            lines.push(format!(
                "PAUSED by the operator {}, {until}: {}. Nothing is launched or stopped but by the operator: launch_instance and stop_instance answer `paused`; observe and report, do not retry.",
                ago(self.now, p.since),
                quote(&p.reason, 200)
            ));
        }
        if let Some(h) = &self.hold {
            let what = match (h.instance_id, h.label.as_deref()) {
                (Some(id), Some(l)) => format!("instance {id} {}", quote(l, LABEL_CHARS)),
                (Some(id), None) => format!("instance {id}"),
                (None, Some(l)) => quote(l, LABEL_CHARS),
                (None, None) => "an instance".into(),
            };
            lines.push(format!(
                "Operator hold: the operator stopped {what} {}; the rules and the floor launch nothing for {} more unless the operator resumes or writes to you. Do not put it back unless the operator asks.",
                ago(self.now, h.stopped_at),
                crate::clock::human_duration(h.until - self.now)
            ));
        }
        for line in &self.taskless {
            lines.push(format!(
                "WITHOUT PSProve: {line}. Do not launch (another of this image would not prove either); tell the operator."
            ));
        }
        if let Some(line) = crate::fleet::identity::rival_line(&self.rival_fleet) {
            lines.push(format!(
                "Another fleet: {line}. Its workers count among the cluster's other machines; tell the operator."
            ));
        }
        if !self.other_installs.is_empty() {
            let mut by_install: std::collections::BTreeMap<&str, usize> = Default::default();
            for o in &self.other_installs {
                *by_install.entry(o.install_id.as_str()).or_default() += 1;
            }
            let items: Vec<String> = by_install
                .iter()
                .map(|(id, n)| format!("{n} of install {id}"))
                .collect();
            lines.push(format!(
                "Other installs on this vast.ai account under our label prefix (not ours: never counted nor stopped): {} instance(s) ({}); ours carry install id {}.",
                self.other_installs.len(),
                items.join(", "),
                self.install_id
            ));
        }
        lines
    }

    /// The lines that follow the observation line: this pass's lifecycle changes and the
    /// flagged instances (outside text quoted). Empty when there is nothing to say.
    pub fn lifecycle_lines(&self, config: &Config) -> Vec<String> {
        let mut lines = Vec::new();
        if !self.changes.is_empty() {
            let mut shown: Vec<String> = self
                .changes
                .iter()
                .take(MAX_CHANGE_LINES)
                .cloned()
                .collect();
            if self.changes.len() > MAX_CHANGE_LINES {
                shown.push(format!("+{} more", self.changes.len() - MAX_CHANGE_LINES));
            }
            lines.push(format!("Fleet changes: {}.", shown.join("; ")));
        }
        let flagged = self.flagged(config);
        if !flagged.is_empty() {
            let mut items: Vec<String> = flagged
                .iter()
                .take(MAX_CHANGE_LINES)
                .map(|f| format!("{} {}", f.vast_id, f.why))
                .collect();
            // The rest are in the state block's lines: said, or a model destroys 12 a pass
            // while the others bill (the scale walkthrough: 30 exited, 12 named).
            if flagged.len() > MAX_CHANGE_LINES {
                items.push(format!(
                    "+{} more, each named FLAGGED among our instances",
                    flagged.len() - MAX_CHANGE_LINES
                ));
            }
            lines.push(format!(
                "Flagged (bill, earn nothing; destroy with stop_instance): {}.",
                items.join("; ")
            ));
        }
        if let Some(reset) = &self.search_quota {
            let until = crate::vast::quota_until(reset);
            lines.push(format!(
                "vast.ai search quota exhausted until {until}: no offer search (so no launch) can succeed before then."
            ));
        }
        if !self.bad_hosts.is_empty() {
            lines.push(format!(
                "Hosts that failed us, left out of offer searches: {}.",
                self.bad_hosts.len()
            ));
        }
        if !self.operator_hosts.is_empty() {
            lines.push(format!(
                "Hosts the operator just took an instance off, left out of offer searches for policy.operator_hold_mins: {}.",
                self.operator_hosts.len()
            ));
        }
        let open = self.count_in(&[LAUNCHING]);
        if open > 0 {
            lines.push(format!("Open launches not yet in the listing: {open}."));
        }
        lines.extend(self.streak_line());
        lines
    }

    /// How long the backlog or low demand has lasted, in passes, beside how long the rules
    /// wait for it: "persists over passes" (the system prompt) is something a model reads
    /// only here (passes that did nothing never enter the prompt; the prompt walkthrough saw
    /// a second backlog pass read as the first). None while WORKERS DEAD (its own line) or
    /// with neither streak.
    fn streak_line(&self) -> Option<String> {
        use crate::policy::rules::{
            BACKLOG_PASSES, BACKLOG_WEAK_PASSES, FALL_LOW_DEMAND_PASSES, FULLY_SATURATED,
            LOW_DEMAND_PASSES,
        };
        let d = self.demand.as_ref().filter(|d| !d.workers_dead())?;
        let times = |n: u32| {
            if n == 1 {
                "1 pass".to_string()
            } else {
                format!("{n} passes")
            }
        };
        let st = &self.streaks;
        if st.backlog_passes > 0 {
            Some(format!(
                "Backlog {} for {} in a row; the rules add capacity once it has lasted {BACKLOG_PASSES} with every live worker busy and throughput under target ({BACKLOG_WEAK_PASSES} while the last hour used less than {:.0} % of the fleet's capacity).",
                d.backlog_signal(),
                times(st.backlog_passes),
                FULLY_SATURATED * 100.0
            ))
        } else if st.low_demand_passes > 0 {
            Some(format!(
                "Low demand (pending near 0, workers idle) for {} in a row; the rules stop idle surplus once it has lasted {LOW_DEMAND_PASSES} ({FALL_LOW_DEMAND_PASSES} where the day's history foretells the fall).",
                times(st.low_demand_passes)
            ))
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::demand::Demand;
    use crate::fleet::fixtures::*;
    use crate::fleet::NO_VAST_KEY;

    /// The streaks the rules wait on are said (a second backlog pass read as the first: the
    /// prompt walkthrough), and the hosts the operator took instances off.
    #[test]
    fn the_backlog_and_low_demand_streaks_are_said() {
        let c = config();
        let live = crate::demand::Worker {
            running: 1,
            ..Default::default()
        };
        let mut s = Snapshot {
            now: NOW,
            demand: Some(Demand {
                pending: 6,
                running: 2,
                workers: vec![live],
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(s.lifecycle_lines(&c).is_empty());
        s.streaks.backlog_passes = 1;
        assert_eq!(
            s.lifecycle_lines(&c),
            vec!["Backlog 6 for 1 pass in a row; the rules add capacity once it has lasted 2 with every live worker busy and throughput under target (6 while the last hour used less than 95 % of the fleet's capacity).".to_string()]
        );
        // The rules' figure, Curio's backlog, not the unclaimed tasks (it said "0 pending"
        // where the Curio line read backlog 6: the prompt audit).
        let d = s.demand.as_mut().unwrap();
        (d.pending, d.backlog) = (0, Some(7));
        assert!(s.lifecycle_lines(&c)[0].starts_with("Backlog 7 for 1 pass"));
        s.streaks = crate::store::session::Streaks {
            low_demand_passes: 3,
            backlog_passes: 0,
        };
        assert!(s.lifecycle_lines(&c)[0]
            .starts_with("Low demand (pending near 0, workers idle) for 3 passes in a row"));
        s.operator_hosts = vec![30_001];
        assert!(s.lifecycle_lines(&c)[0].starts_with("Hosts the operator just took"));
    }

    #[test]
    fn design_example_line() {
        let s = Snapshot {
            now: NOW,
            demand: Some(Demand {
                pending: 59,
                ..Default::default()
            }),
            instances: vec![
                row("fleetagent-a", Some(1), LOADING, 0.45),
                row("fleetagent-b", Some(2), LOADING, 0.44),
                // Its create is under way (no answer yet).
                InstanceRow {
                    created_at: NOW - 20_000,
                    ..row("fleetagent-c", None, LAUNCHING, 0.44)
                },
            ],
            window_launches: vec![NOW - 10 * MIN, NOW - 5 * MIN, NOW - MIN],
            ..Default::default()
        };
        assert_eq!(
            s.observation_line(&config()),
            "Demand: WORKERS DEAD. Queue: PSProve 59p/0r. Throughput: 0/h (1h), 0 (15m). \
             Fleet: 0 running (0 p/h), 3 loading. Projected: 150 p/h. $1.33/h. Target: 500 p/h. \
             Budget headroom: $8.67/h, 17 slots. Launch window: 3/3 used, emergency bypass ON."
        );
        // A create with no answer that a good listing a minute later did not show is not
        // loading: nothing is booting (a walkthrough read "2 loading" with nothing at vast.ai).
        let mut s = s;
        s.instances[2].created_at = NOW - 2 * MIN;
        let line = s.observation_line(&config());
        assert!(
            line.contains("Fleet: 0 running (0 p/h), 2 loading, 1 unconfirmed (creates with no answer, not listed since: they may never come; they hold their slots until a listing settles them). Projected: 100 p/h."),
            "{line}"
        );
    }

    #[test]
    fn the_pause_the_hold_and_other_installs_are_said() {
        let mut s = Snapshot {
            now: NOW,
            install_id: "qwerty".into(),
            ..Default::default()
        };
        assert!(s.operator_lines().is_empty());
        s.paused = Some(crate::store::ops::Pause {
            since: NOW - 10 * MIN,
            until: None,
            reason: "swapping \"disks\"".into(),
        });
        s.hold = Some(crate::fleet::OperatorHold {
            stopped_at: NOW - 5 * MIN,
            instance_id: Some(7),
            label: Some("fleetagent-qwerty-r3-0a0b0c0d".into()),
            until: NOW + 25 * MIN,
        });
        s.other_installs = vec![
            crate::store::ops::ForeignInstance {
                install_id: "zxcvbn".into(),
                label: "fleetagent-zxcvbn-r1-00000001".into(),
                vast_id: 41,
            },
            crate::store::ops::ForeignInstance {
                install_id: "zxcvbn".into(),
                label: "fleetagent-zxcvbn-r1-00000002".into(),
                vast_id: 42,
            },
        ];
        let lines = s.operator_lines();
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(
            lines[0].starts_with(
                "PAUSED by the operator 10m ago, until the operator resumes: \"swapping \\\"disks\\\"\""
            ) && lines[0].contains("answer `paused`"),
            "{}",
            lines[0]
        );
        assert!(
            lines[1].starts_with(
                "Operator hold: the operator stopped instance 7 \"fleetagent-qwerty-r3-0a0b0c0d\" 5m ago; the rules and the floor launch nothing for 25m more "
            ),
            "{}",
            lines[1]
        );
        s.paused.as_mut().unwrap().until = Some(NOW + 50 * MIN);
        assert!(
            s.operator_lines()[0].starts_with("PAUSED by the operator 10m ago, ending in 50m: "),
            "{:?}",
            s.operator_lines()
        );
        assert!(
            lines[2].contains("2 instance(s) (2 of install zxcvbn); ours carry install id qwerty"),
            "{}",
            lines[2]
        );
        assert!(lines.iter().all(|l| !l.contains('\n')));
        s.taskless = vec!["instance 5 runs Curio machine \"x\" without PSProve".into()];
        let lines = s.operator_lines();
        assert!(
            lines[2].starts_with("WITHOUT PSProve: instance 5 runs Curio machine \"x\" without PSProve. Do not launch"),
            "{lines:?}"
        );
    }

    #[test]
    fn failed_probe_and_listing_said_plainly() {
        let s = Snapshot {
            now: NOW,
            demand_error: Some("connection refused \"x\"\nnext".into()),
            listing_error: Some(NO_VAST_KEY.into()),
            window_launches: vec![NOW - 14 * MIN, NOW - MIN, NOW - MIN],
            ..Default::default()
        };
        let line = s.observation_line(&Config::default());
        assert!(
            line.starts_with("Demand: UNKNOWN, the probe failed: \"connection refused \\\"x\\\" next\"; the fleet is held"),
            "{line}"
        );
        assert!(
            line.contains("vast.ai listing failed: \"not_configured: no vast.ai API key\""),
            "{line}"
        );
        assert!(line.contains("Launches not configured: set vast.image, policy.max_dph_total, policy.max_instances."), "{line}");
        assert!(
            line.ends_with("Launch window: 3/3 used, next slot in 60s."),
            "{line}"
        );
        assert!(!line.contains('\n'));
    }

    #[test]
    fn the_floors_actions_are_one_line_each() {
        let act = |kind: &str, id: i64, reason: &str| Action {
            id,
            run_id: Some(9),
            kind: kind.into(),
            outcome: "ok".into(),
            actor: "floor".into(),
            instance_id: Some(id),
            label: Some("fleetagent-qwerty-r9-0a0b0c0d".into()),
            offer_id: None,
            dph: Some(0.4),
            emergency: true,
            reason: Some(reason.into()),
            detail: None,
            created_at: NOW - 5 * MIN,
        };
        let why = "floor: rules: WORKERS DEAD: 59 proofs queued and no live worker; 0 p/h coming";
        let actions = [
            act("launch", 11, &format!("{why} (launch 1 of 2)")),
            act("launch", 12, &format!("{why} (launch 2 of 2)")),
            act(
                "destroy",
                7,
                "floor: rules: instance 7 is exited: it bills and earns nothing",
            ),
        ];
        assert_eq!(
            floor_lines(&actions),
            [
                "Floor in the last pass (what you left undone, done by the rules):",
                "- launch ok x2 (11, 12): \"WORKERS DEAD: 59 proofs queued and no live worker; 0 p/h coming\"",
                "- destroy ok (7): \"instance 7 is exited: it bills and earns nothing\"",
            ]
        );
        assert!(floor_lines(&[]).is_empty());
    }

    #[test]
    fn a_believed_day_is_one_line_for_the_model_and_a_doubted_one_none() {
        use crate::fleet::day::{Cell, DayProfile, HOUR_MS};
        // NOW is on the hour; two days of 100 p/h but 300 at the hour after NOW's.
        let cells: Vec<Cell> = (1..=48i64)
            .rev()
            .map(|k| Cell {
                start: NOW - k * HOUR_MS,
                pph: if (24 - k).rem_euclid(24) == 1 {
                    300.0
                } else {
                    100.0
                },
                samples: 12,
                saturated: false,
            })
            .collect();
        let mut s = Snapshot {
            now: NOW,
            day: Some(DayProfile::learn(&cells, NOW)),
            ..Default::default()
        };
        let line = day_line(&s).unwrap();
        assert!(
            line.starts_with(&format!(
                "Day: the history of the days before expects 100 p/h at {:02}:00 UTC and 300 p/h at {:02}:00 UTC (the last 3 hours came within 0% ",
                crate::fleet::day::hour_of_day(NOW),
                crate::fleet::day::hour_of_day(NOW + HOUR_MS)
            )),
            "{line}"
        );
        s.day.as_mut().unwrap().trusted = false;
        assert_eq!(day_line(&s), None);
        s.day = None;
        assert_eq!(day_line(&s), None);
    }
}
