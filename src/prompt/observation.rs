//! The observation the model reads: the one line built from the [`Snapshot`] (DESIGN.md's
//! example) and the lines that follow it (what Curio says beyond the queue: `prompt::curio`;
//! lifecycle changes, flagged instances, open launches). Pure; outside text is quoted.

use crate::clock::{short, Millis};
use crate::config::Config;
use crate::fleet::state::*;
use crate::fleet::{num, Snapshot, LABEL_CHARS};
use crate::store::actions::Action;
use crate::store::events::Event;
use crate::store::instances::InstanceRow;
use crate::store::wakes::Wake;
use crate::text::quote;

use super::events::events_line;
use crate::wakes::wakes_line;

/// At most this many change lines in the observation; the rest are counted.
const MAX_CHANGE_LINES: usize = 12;
/// The whole observation a pass stores for the model: the observation line, the lifecycle
/// lines, this pass's folded events and wakes, and which run and pass this is.
pub fn pass_text(snapshot: &Snapshot, config: &Config, woke: &Woke<'_>, now: Millis) -> String {
    let mut lines = vec![snapshot.observation_line(config)];
    lines.extend(snapshot.operator_lines());
    lines.push(super::economics::economics_line(snapshot, config));
    lines.extend(snapshot.demand.as_ref().and_then(super::curio::curio_line));
    lines.extend(snapshot.lifecycle_lines(config));
    lines.extend(floor_line(woke.floor_before));
    lines.extend(events_line(woke.events));
    lines.extend(wakes_line(woke.wakes, now));
    lines.push(format!(
        "({})",
        run_line(woke.run_id, woke.pass_no, woke.started_by, now)
    ));
    lines.join("\n")
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

/// What the floor did in the previous pass, so the model knows it was overruled and why.
pub fn floor_line(actions: &[Action]) -> Option<String> {
    if actions.is_empty() {
        return None;
    }
    let items: Vec<String> = actions
        .iter()
        .take(6)
        .map(|a| {
            let what = match (a.instance_id, a.label.as_deref()) {
                (Some(id), _) => format!("instance {id}"),
                (None, Some(l)) => quote(l, LABEL_CHARS),
                (None, None) => "-".into(),
            };
            let why = a
                .reason
                .as_deref()
                .map(|r| quote(r, 160))
                .unwrap_or_default();
            format!("{} {what} {}: {why}", a.kind, a.outcome)
        })
        .collect();
    let more = match actions.len().saturating_sub(6) {
        0 => String::new(),
        n => format!("; +{n} more"),
    };
    Some(format!(
        "Floor in the last pass (what you left undone, done by the rules): {}{more}.",
        items.join("; ")
    ))
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
    /// Launch window: 3/3 used, emergency bypass ON.`
    ///
    /// `active` = PSProve work is being proven (tasks running now or completions in the last
    /// 15 minutes). A failed probe says so and that the fleet is held.
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
                parts.push(format!("Demand: active={active}, {who}{ghosts}."));
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
                    "Demand: UNKNOWN, the probe failed: {}; the fleet is held (no launches or stops on missing data).",
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
        let mut fleet = format!(
            "Fleet: {} running ({} p/h), {} loading",
            running.len(),
            num(running_pph),
            self.count_in(&[LAUNCHING, LOADING])
        );
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
        parts.push(format!(
            "Projected: {} p/h.",
            num(self.projected_pph(config))
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
    /// operator hold, and other installs' instances under our prefix. The pinned state block
    /// repeats them.
    pub fn operator_lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        if let Some(p) = &self.paused {
            let until = match p.until {
                Some(u) => format!("until {} UTC", short(u)),
                None => "until the operator resumes".into(),
            };
            lines.push(format!(
                "PAUSED by the operator since {} UTC, {until}: {}. Nothing is launched or stopped but by the operator: launch_instance and stop_instance answer `paused`; observe and report, do not retry.",
                short(p.since),
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
                "Operator hold: the operator stopped {what} at {} UTC; the rules and the floor launch nothing until {} UTC unless the operator resumes or writes to you. Do not put it back unless the operator asks.",
                short(h.stopped_at),
                short(h.until)
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
            let items: Vec<String> = flagged
                .iter()
                .take(MAX_CHANGE_LINES)
                .map(|f| {
                    format!(
                        "instance {} {} {}",
                        f.vast_id,
                        quote(&f.label, LABEL_CHARS),
                        f.why
                    )
                })
                .collect();
            lines.push(format!(
                "Flagged (bill, earn nothing; may be destroyed): {}.",
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
        let open: Vec<&InstanceRow> = self
            .instances
            .iter()
            .filter(|r| r.state == LAUNCHING)
            .collect();
        if !open.is_empty() {
            let labels: Vec<String> = open
                .iter()
                .take(6)
                .map(|r| quote(&r.label, LABEL_CHARS))
                .collect();
            lines.push(format!(
                "Open launches not yet in the listing: {} ({}).",
                open.len(),
                labels.join(", ")
            ));
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::demand::Demand;
    use crate::fleet::fixtures::*;
    use crate::fleet::NO_VAST_KEY;

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
                row("fleetagent-c", None, LAUNCHING, 0.44),
            ],
            window_launches: vec![NOW - 10 * MIN, NOW - 5 * MIN, NOW - MIN],
            ..Default::default()
        };
        assert_eq!(
            s.observation_line(&config()),
            "Demand: active=false, WORKERS DEAD. Queue: PSProve 59p/0r. Throughput: 0/h (1h), 0 (15m). \
             Fleet: 0 running (0 p/h), 3 loading. Projected: 150 p/h. $1.33/h. Target: 500 p/h. \
             Budget headroom: $8.67/h, 17 slots. Launch window: 3/3 used, emergency bypass ON."
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
            lines[0].starts_with("PAUSED by the operator since ")
                && lines[0].contains("until the operator resumes: \"swapping \\\"disks\\\"\"")
                && lines[0].contains("answer `paused`"),
            "{}",
            lines[0]
        );
        assert!(
            lines[1].starts_with(
                "Operator hold: the operator stopped instance 7 \"fleetagent-qwerty-r3-0a0b0c0d\" at "
            ) && lines[1].contains("the rules and the floor launch nothing until "),
            "{}",
            lines[1]
        );
        assert!(
            lines[2].contains("2 instance(s) (2 of install zxcvbn); ours carry install id qwerty"),
            "{}",
            lines[2]
        );
        assert!(lines.iter().all(|l| !l.contains('\n')));
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
}
