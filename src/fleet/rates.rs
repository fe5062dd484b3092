//! Learned rates, pure: proofs per hour measured per GPU model from Curio's per-worker
//! history (`Demand::history`, keyed on `host_and_port`) matched to our instances, and the
//! rate a GPU is reckoned at: pinned in `policy.gpu_rates`, else measured, else
//! `policy.proofs_per_hour_per_instance`. The same history, matched the same way, tells
//! which of the cluster's completions are ours ([`completions_1h`]: profit is ours).

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::config::Config;
use crate::demand::Demand;
use crate::store::instances::InstanceRow;

use super::workers::host_of;

/// GPU model -> measured proofs/h (`Snapshot::measured_rates`, the `measured_rates` table).
pub type Rates = BTreeMap<String, f64>;

/// A worker's history counts once it holds this many proofs...
pub const MIN_PROOFS: u32 = 3;
/// ...over at least this long between its first and its last (a shorter span is noise: two
/// proofs a minute apart say nothing of the hour).
pub const MIN_SPAN_SECS: u64 = 600;

/// A measured rate counts this long after it was last measured: Curio's task history (the
/// six hours a measurement reads) no longer holds a worker of that GPU by then. Kept for
/// ever, one slow host's measurement refused every later rental of its GPU `unprofitable`,
/// WORKERS DEAD's too, and nothing could run to measure it again (a walkthrough: 26 hours
/// after that host was gone). Past it, the GPU is reckoned at its configured rate again.
pub const MEASURED_KEEP_MS: crate::clock::Millis = 6 * 3_600_000;

/// One GPU model's measurement this pass.
#[derive(Debug, Clone, PartialEq)]
pub struct Measured {
    pub gpu_name: String,
    pub proofs_per_hour: f64,
    /// Proofs behind it (the weights), and the longest worker span among them.
    pub proofs: u32,
    pub span_secs: u64,
}

/// Measure proofs/h per GPU model from `demand.history`: each worker history is matched to
/// the one instance of ours whose recorded worker address (`worker_address`, set by
/// reconciliation from the matched Curio worker) is its `host_and_port` (an address two of
/// ours share says nothing about either and is skipped). A worker's rate, once it has
/// [`MIN_PROOFS`] over [`MIN_SPAN_SECS`], is proofs / the seconds spent proving them
/// (`busy_secs`, Curio's `work_end - work_start`) where read, else (proofs - 1) / (first -
/// last end), which counts the idle time between proofs too and so reads low on a fleet
/// that is not saturated; a GPU model's is the proofs-weighted mean of its workers'.
pub fn measure(instances: &[InstanceRow], demand: &Demand) -> Vec<Measured> {
    let mut by_address: HashMap<&str, Vec<&InstanceRow>> = HashMap::new();
    for r in instances.iter().filter(|r| r.gone_at.is_none()) {
        if let Some(a) = r.worker_address.as_deref().map(str::trim) {
            by_address.entry(a).or_default().push(r);
        }
    }
    // gpu -> (sum of rate x proofs, proofs, longest span)
    let mut acc: BTreeMap<String, (f64, u32, u64)> = BTreeMap::new();
    for h in &demand.history {
        let span = h.first_end_secs_ago.saturating_sub(h.last_end_secs_ago);
        if h.proofs < MIN_PROOFS || span < MIN_SPAN_SECS {
            continue;
        }
        let Some([row]) = by_address.get(h.host_and_port.trim()).map(Vec::as_slice) else {
            continue;
        };
        let Some(gpu) = row
            .gpu_name
            .as_deref()
            .map(str::trim)
            .filter(|g| !g.is_empty())
        else {
            continue;
        };
        let rate = match h.busy_secs.filter(|b| *b > 0) {
            Some(busy) => h.proofs as f64 * 3600.0 / busy as f64,
            None => (h.proofs - 1) as f64 * 3600.0 / span as f64,
        };
        let e = acc.entry(gpu.to_string()).or_default();
        e.0 += rate * h.proofs as f64;
        e.1 = e.1.saturating_add(h.proofs);
        e.2 = e.2.max(span);
    }
    acc.into_iter()
        .map(|(gpu_name, (weighted, proofs, span_secs))| Measured {
            gpu_name,
            proofs_per_hour: weighted / proofs as f64,
            proofs,
            span_secs,
        })
        .collect()
}

/// The last hour's completions of the cluster, split into those of our own instances'
/// workers and the rest (on-prem provers, other fleets).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Completions {
    /// Curio's successful completions of the last hour, every machine's.
    pub cluster: u32,
    /// Those of our instances' workers; None when the reading cannot tell (an `http` or
    /// `command` document with completions and no per-machine `history`, or a machine of
    /// ours whose hour is not settled by its history).
    pub ours: Option<u32>,
}

impl Completions {
    /// The cluster's other completions (None while ours are unknown).
    pub fn others(&self) -> Option<u32> {
        self.ours.map(|o| self.cluster.saturating_sub(o))
    }
}

/// The last hour's completions, ours apart: a `demand.history` entry is ours when its
/// `host_and_port` is the worker address recorded for one of our instances that is not
/// gone (set by reconciliation from the worker matched by machine name = label, else by
/// IP: the matching learned rates rely on), else the address of a live worker named after
/// one of ours, else when its host is the public IP of exactly one of ours. Unlike learned
/// rates, an address two of ours share counts (both are ours).
pub fn completions_1h(instances: &[InstanceRow], demand: &Demand) -> Completions {
    let cluster = demand.completed_1h;
    let ours_rows: Vec<&InstanceRow> = instances.iter().filter(|r| r.gone_at.is_none()).collect();
    let mut addresses: HashSet<&str> = ours_rows
        .iter()
        .filter_map(|r| r.worker_address.as_deref().map(str::trim))
        .filter(|a| !a.is_empty())
        .collect();
    let labels: HashSet<&str> = ours_rows.iter().map(|r| r.label.trim()).collect();
    addresses.extend(
        demand
            .workers
            .iter()
            .filter(|w| labels.contains(w.machine_name.trim()))
            .map(|w| w.host_and_port.trim()),
    );
    let mut ip_count: HashMap<&str, usize> = HashMap::new();
    for ip in ours_rows
        .iter()
        .filter_map(|r| r.public_ip.as_deref().map(str::trim))
        .filter(|ip| !ip.is_empty())
    {
        *ip_count.entry(ip).or_default() += 1;
    }
    let is_ours = |host_and_port: &str| {
        let a = host_and_port.trim();
        addresses.contains(a) || ip_count.get(host_of(a)) == Some(&1)
    };
    if demand.history.is_empty() {
        // No per-machine history: nothing of ours completed only if nothing did.
        return Completions {
            cluster,
            ours: (cluster == 0).then_some(0),
        };
    }
    let ours = demand
        .history
        .iter()
        .filter(|h| is_ours(&h.host_and_port))
        .try_fold(0u32, |sum, h| Some(sum.saturating_add(h.hour_count()?)));
    Completions { cluster, ours }
}

/// Is this GPU pinned by the operator in `policy.gpu_rates`?
pub fn pinned(config: &Config, gpu_name: &str) -> Option<f64> {
    config.policy.pinned_rate(gpu_name)
}

/// The usable measured rate of this GPU (names compared as [`pinned`] compares them).
fn measured_rate(measured: &Rates, gpu_name: &str) -> Option<f64> {
    let gpu = gpu_name.replace('_', " ");
    measured
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(gpu.trim()))
        .map(|(_, v)| *v)
        .filter(|v| v.is_finite() && *v > 0.0)
}

/// The proofs/h one instance with this GPU is reckoned at: pinned wins, else measured, else
/// the default rate.
pub fn gpu_rate(config: &Config, measured: &Rates, gpu_name: &str) -> f64 {
    pinned(config, gpu_name)
        .or_else(|| measured_rate(measured, gpu_name))
        .unwrap_or(config.policy.proofs_per_hour_per_instance)
}

/// Where a GPU's rate comes from, for `inspect`: `pinned`, `measured` or `default` (the same
/// lookups as [`gpu_rate`]).
pub fn rate_source(config: &Config, measured: &Rates, gpu_name: &str) -> &'static str {
    if pinned(config, gpu_name).is_some() {
        "pinned"
    } else if measured_rate(measured, gpu_name).is_some() {
        "measured"
    } else {
        "default"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::demand::WorkerHistory;
    use crate::fleet::fixtures::*;
    use crate::fleet::PROVING;

    fn ours(label: &str, gpu: &str, address: &str) -> InstanceRow {
        let mut r = row(label, Some(1), PROVING, 0.4);
        r.gpu_name = Some(gpu.into());
        r.worker_address = Some(address.into());
        r
    }

    fn hist(address: &str, proofs: u32, first: u64, last: u64) -> WorkerHistory {
        WorkerHistory {
            host_and_port: address.into(),
            proofs,
            first_end_secs_ago: first,
            last_end_secs_ago: last,
            busy_secs: None,
            completed_1h: None,
        }
    }

    /// Counts at the bound the demand document allows (32 bits) saturate; a walkthrough's
    /// `proofs = 4294967295` on two machines of one GPU panicked `run`.
    #[test]
    fn counts_at_their_bound_saturate() {
        let rows = vec![
            ours("fleetagent-a", "RTX 4090", "1.1.1.1:12300"),
            ours("fleetagent-b", "RTX 4090", "1.1.1.2:12300"),
        ];
        let history = vec![
            hist("1.1.1.1:12300", u32::MAX, 20_000, 0),
            hist("1.1.1.2:12300", u32::MAX, 20_000, 0),
        ];
        let m = measure(
            &rows,
            &Demand {
                history,
                ..Default::default()
            },
        );
        assert_eq!(m[0].proofs, u32::MAX);
        assert!(m[0].proofs_per_hour.is_finite(), "{m:?}");
    }

    /// A worker idle half the time: the span reads half its rate, the proving time the true one.
    #[test]
    fn the_time_spent_proving_leaves_the_idle_time_out() {
        let rows = vec![ours("fleetagent-a", "RTX 4090", "1.1.1.1:12300")];
        // 20 proofs of 90 s each, one every 180 s: 40/h when busy, 20/h by the span.
        let mut h = hist("1.1.1.1:12300", 20, 19 * 180, 0);
        let by_span = measure(
            &rows,
            &Demand {
                history: vec![h.clone()],
                ..Default::default()
            },
        );
        assert!(
            (by_span[0].proofs_per_hour - 20.0).abs() < 1e-9,
            "{by_span:?}"
        );
        h.busy_secs = Some(20 * 90);
        let busy = measure(
            &rows,
            &Demand {
                history: vec![h.clone()],
                ..Default::default()
            },
        );
        assert!((busy[0].proofs_per_hour - 40.0).abs() < 1e-9, "{busy:?}");
        // A zero proving time (a database clock oddity) falls back to the span.
        h.busy_secs = Some(0);
        let zero = measure(
            &rows,
            &Demand {
                history: vec![h],
                ..Default::default()
            },
        );
        assert_eq!(zero, by_span);
    }

    #[test]
    fn rates_are_measured_per_gpu_weighted_by_proofs() {
        let rows = vec![
            ours("fleetagent-a", "RTX 4090", "1.1.1.1:12300"),
            ours("fleetagent-b", "RTX 4090", "2.2.2.2:12300"),
            ours("fleetagent-c", "RTX 3090", "3.3.3.3:12300"),
            // Two of ours on one address: neither is measured.
            ours("fleetagent-d", "RTX 3090", "4.4.4.4:12300"),
            ours("fleetagent-e", "RTX 3090", "4.4.4.4:12300"),
        ];
        let demand = Demand {
            history: vec![
                // 40 proofs over 39 intervals of 90 s: 40/h.
                hist("1.1.1.1:12300", 40, 39 * 90 + 60, 60),
                // 10 proofs over 9 intervals of 180 s: 20/h.
                hist("2.2.2.2:12300", 10, 9 * 180, 0),
                // Too few proofs, too short a span, an address that is not ours, a shared one.
                hist("3.3.3.3:12300", 2, 3600, 0),
                hist("3.3.3.3:12301", 50, 3600, 0),
                hist("4.4.4.4:12300", 50, 3600, 0),
                hist("9.9.9.9:12300", 50, 3600, 0),
            ],
            ..Default::default()
        };
        let m = measure(&rows, &demand);
        assert_eq!(m.len(), 1, "{m:?}");
        assert_eq!(m[0].gpu_name, "RTX 4090");
        assert_eq!(m[0].proofs, 50);
        let want = (40.0 * 40.0 + 20.0 * 10.0) / 50.0;
        assert!((m[0].proofs_per_hour - want).abs() < 1e-9, "{m:?}");
        // A span under ten minutes is not a measurement.
        let short = Demand {
            history: vec![hist("3.3.3.3:12300", 5, 599, 0)],
            ..Default::default()
        };
        assert!(measure(&rows, &short).is_empty());
    }

    #[test]
    fn pinned_wins_then_measured_then_the_default() {
        let mut c = config();
        c.policy.proofs_per_hour_per_instance = 20.0;
        c.policy.gpu_rates.insert("RTX 4090".into(), 50.0);
        let measured: Rates = [
            ("RTX 4090".to_string(), 41.0),
            ("RTX 3090".to_string(), 23.5),
        ]
        .into_iter()
        .collect();
        assert_eq!(gpu_rate(&c, &measured, "rtx 4090"), 50.0);
        assert_eq!(gpu_rate(&c, &measured, "RTX_3090"), 23.5);
        assert_eq!(gpu_rate(&c, &measured, "A100"), 20.0);
        assert_eq!(rate_source(&c, &measured, "RTX 4090"), "pinned");
        assert_eq!(rate_source(&c, &measured, "RTX 3090"), "measured");
        assert_eq!(rate_source(&c, &measured, "A100"), "default");
    }

    fn in_hour(address: &str, n: u32) -> WorkerHistory {
        WorkerHistory {
            completed_1h: Some(n),
            ..hist(address, n, 3000, 60)
        }
    }

    #[test]
    fn our_completions_are_those_of_our_workers_and_the_rest_are_the_clusters() {
        let mut by_address = ours("fleetagent-a", "RTX 4090", "172.17.0.2:12300");
        by_address.public_ip = Some("203.0.113.5".into());
        // No address recorded yet: its live worker is named after its label.
        let mut by_name = row("fleetagent-b", Some(2), PROVING, 0.4);
        by_name.worker_address = None;
        // Neither: its worker registered with the instance's public IP.
        let mut by_ip = row("fleetagent-c", Some(3), PROVING, 0.4);
        by_ip.public_ip = Some("198.51.100.7".into());
        let mut gone = ours("fleetagent-d", "RTX 4090", "172.17.0.9:12300");
        gone.gone_at = Some(NOW);
        let rows = vec![by_address, by_name, by_ip, gone];
        let demand = Demand {
            completed_1h: 4 + 5 + 6 + 7 + 30,
            workers: vec![crate::demand::Worker {
                machine_name: "fleetagent-b".into(),
                host_and_port: "10.9.0.2:12300".into(),
                running: 1,
                cordoned: false,
            }],
            history: vec![
                in_hour("172.17.0.2:12300", 4),
                in_hour("10.9.0.2:12300", 5),
                in_hour("198.51.100.7:12300", 6),
                // A gone instance's worker, and an on-prem prover: not ours.
                in_hour("172.17.0.9:12300", 7),
                in_hour("10.0.0.1:12300", 30),
            ],
            ..Default::default()
        };
        let c = completions_1h(&rows, &demand);
        assert_eq!((c.cluster, c.ours, c.others()), (52, Some(15), Some(37)));
    }

    #[test]
    fn a_rented_instance_proving_nothing_beside_an_on_prem_prover_has_no_completions() {
        let rows = vec![ours("fleetagent-a", "RTX 4090", "172.17.0.2:12300")];
        let demand = Demand {
            completed_1h: 40,
            history: vec![in_hour("10.0.0.1:12300", 40)],
            ..Default::default()
        };
        let c = completions_1h(&rows, &demand);
        assert_eq!((c.ours, c.others()), (Some(0), Some(40)));
        // Nothing rented at all: the same.
        assert_eq!(completions_1h(&[], &demand).ours, Some(0));
    }

    #[test]
    fn an_hour_the_history_does_not_settle_is_unknown_never_guessed() {
        let rows = vec![ours("fleetagent-a", "RTX 4090", "1.1.1.1:12300")];
        let with = |history: Vec<WorkerHistory>, completed_1h| Demand {
            completed_1h,
            history,
            ..Default::default()
        };
        // Without `completed_1h`: every proof within the hour, or none of them, is settled.
        let all_in = hist("1.1.1.1:12300", 6, 3000, 60);
        let none_in = hist("1.1.1.1:12300", 6, 9000, 4000);
        let straddles = hist("1.1.1.1:12300", 6, 9000, 60);
        assert_eq!(completions_1h(&rows, &with(vec![all_in], 6)).ours, Some(6));
        assert_eq!(completions_1h(&rows, &with(vec![none_in], 0)).ours, Some(0));
        assert_eq!(completions_1h(&rows, &with(vec![straddles], 3)).ours, None);
        // A document with completions and no per-machine history cannot tell.
        assert_eq!(completions_1h(&rows, &with(vec![], 3)).ours, None);
        assert_eq!(completions_1h(&rows, &with(vec![], 0)).ours, Some(0));
        // Completions of ours beyond the cluster's figure (a source that disagrees with
        // itself): the others are 0, never negative.
        let c = completions_1h(&rows, &with(vec![in_hour("1.1.1.1:12300", 9)], 5));
        assert_eq!((c.ours, c.others()), (Some(9), Some(0)));
    }
}
