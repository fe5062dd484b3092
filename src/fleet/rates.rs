//! Learned rates, pure: proofs per hour measured per GPU model from Curio's per-worker
//! history (`Demand::history`, keyed on `host_and_port`) matched to our instances, and the
//! rate a GPU is reckoned at: pinned in `policy.gpu_rates`, else measured, else
//! `policy.proofs_per_hour_per_instance`.

use std::collections::{BTreeMap, HashMap};

use crate::config::Config;
use crate::demand::Demand;
use crate::store::instances::InstanceRow;

/// GPU model -> measured proofs/h (`Snapshot::measured_rates`, the `measured_rates` table).
pub type Rates = BTreeMap<String, f64>;

/// A worker's history counts once it holds this many proofs...
pub const MIN_PROOFS: u32 = 3;
/// ...over at least this long between its first and its last (a shorter span is noise: two
/// proofs a minute apart say nothing of the hour).
pub const MIN_SPAN_SECS: u64 = 600;

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
        e.1 += h.proofs;
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
        }
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
}
