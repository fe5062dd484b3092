//! The Curio side of the report: the last demand reading (`demand`, DESIGN.md's fields), the
//! learned GPU rates beside the configured ones (`rates`), and the worker identity problems
//! (`worker_identity`). Reads only.

use std::collections::BTreeMap;

use anyhow::Result;
use serde::Serialize;

use crate::clock::{rfc3339, Millis};
use crate::config::Config;
use crate::demand::Demand;
use crate::fleet::rates::{gpu_rate, rate_source};
use crate::store::{curio, instances, session, Store};

/// The last reading as `inspect --json` shows it. Figures are those of the last successful
/// reading (null before one), `read_at` its time, `error` the failure of the last attempt
/// (null when it succeeded).
#[derive(Debug, Serialize)]
pub struct DemandView {
    pub backlog: Option<u32>,
    pub pending: Option<u32>,
    pub running: Option<u32>,
    pub running_stale: Option<u32>,
    pub live_workers: Option<u32>,
    pub orphan_tasks: Option<u32>,
    pub completed_1h: Option<u32>,
    pub paid_1h: Option<u32>,
    pub proofshare_enabled: Option<bool>,
    pub request_loop: Option<&'static str>,
    pub ask_price_attofil: Option<String>,
    pub measured_rates: BTreeMap<String, f64>,
    pub read_at: Option<String>,
    pub error: Option<String>,
    /// Not serialised: DESIGN.md names `demand`'s fields; `inspect --json` carries these
    /// beside it as `demand_notes`.
    #[serde(skip)]
    pub notes: Vec<String>,
}

/// One GPU model: the rate learned from our workers beside the configured one, and which
/// of them the agent uses (`pinned` in `policy.gpu_rates`, else `measured`, else `default`).
#[derive(Debug, Serialize)]
pub struct RateView {
    pub gpu_name: String,
    pub measured: Option<f64>,
    pub proofs: Option<i64>,
    pub span_secs: Option<i64>,
    pub measured_at: Option<String>,
    /// How long ago it was measured (the text says when, and that it no longer counts past
    /// `fleet::rates::MEASURED_KEEP_MS`).
    #[serde(skip)]
    pub measured_ago: Option<Millis>,
    pub configured: f64,
    pub used: f64,
    pub source: &'static str,
}

/// What the report's Curio part holds.
pub struct CurioPart {
    pub demand: Option<DemandView>,
    pub rates: Vec<RateView>,
    pub worker_identity: Vec<String>,
}

pub fn gather(store: &Store, config: &Config, now: Millis) -> Result<CurioPart> {
    let conn = &store.conn;
    let stored = curio::rates(conn)?;
    let measured: BTreeMap<String, f64> = stored
        .iter()
        .map(|r| (r.gpu_name.clone(), round2(r.proofs_per_hour)))
        .collect();
    let (reading, read_at) = curio::last_reading(conn)?;
    let reading: Option<Demand> = reading.and_then(|j| serde_json::from_str(&j).ok());
    let last_error = session::state(conn)?
        .last_demand
        .and_then(|j| serde_json::from_str::<serde_json::Value>(&j).ok())
        .and_then(|v| v["error"].as_str().map(String::from));
    let demand = (reading.is_some() || last_error.is_some()).then(|| {
        let d = reading.as_ref();
        DemandView {
            backlog: d.and_then(|d| d.backlog),
            pending: d.map(|d| d.pending),
            running: d.map(|d| d.running),
            running_stale: d.map(|d| d.running_stale),
            live_workers: d.map(|d| d.live_workers()),
            orphan_tasks: d.map(|d| d.orphan_tasks),
            completed_1h: d.map(|d| d.completed_1h),
            paid_1h: d.and_then(|d| d.paid_1h),
            proofshare_enabled: d.and_then(|d| d.proofshare_enabled),
            request_loop: d.and_then(|d| d.request_loop).map(|l| l.as_str()),
            ask_price_attofil: d.and_then(|d| d.ask_price_attofil.clone()),
            measured_rates: measured.clone(),
            read_at: read_at.filter(|_| d.is_some()).map(rfc3339),
            error: last_error,
            notes: d.map(|d| d.notes.clone()).unwrap_or_default(),
        }
    });
    // Every GPU configured, pinned or measured.
    let mut names: Vec<String> = config
        .vast
        .offers
        .gpu_names
        .iter()
        .map(|g| g.replace('_', " "))
        .collect();
    names.extend(config.policy.gpu_rates.keys().cloned());
    names.extend(stored.iter().map(|r| r.gpu_name.clone()));
    let mut seen: Vec<String> = Vec::new();
    names.retain(|n| {
        let k = n.trim().to_ascii_lowercase();
        let new = !seen.contains(&k);
        seen.push(k);
        new
    });
    names.sort();
    let raw = curio::counting(&stored, now - crate::fleet::rates::MEASURED_KEEP_MS);
    let rates = names
        .into_iter()
        .map(|gpu| {
            let m = stored
                .iter()
                .find(|r| r.gpu_name.eq_ignore_ascii_case(gpu.trim()));
            RateView {
                measured: m.map(|m| round2(m.proofs_per_hour)),
                proofs: m.map(|m| m.proofs),
                span_secs: m.map(|m| m.span_secs),
                measured_at: m.map(|m| rfc3339(m.updated_at)),
                measured_ago: m.map(|m| now - m.updated_at),
                configured: config.policy.rate_for(&gpu),
                used: round2(gpu_rate(config, &raw, &gpu)),
                source: rate_source(config, &raw, &gpu),
                gpu_name: gpu,
            }
        })
        .collect();
    let rows = instances::live(conn)?;
    Ok(CurioPart {
        demand,
        rates,
        worker_identity: crate::fleet::identity::problems(
            &rows,
            reading.as_ref().map_or(&[][..], |d| &d.workers),
            reading.as_ref().map_or(&[][..], |d| &d.taskless),
            config,
            now,
        ),
    })
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// The text lines of the Curio part.
pub fn render(demand: Option<&DemandView>, rates: &[RateView], identity: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let n = |v: Option<u32>| v.map_or("-".to_string(), |v| v.to_string());
    match demand {
        None => out.push("demand      no reading yet".into()),
        Some(d) => {
            out.push(format!(
                "demand      backlog {} pending {} running {} (stale {}) live workers {} orphans {} completed/1h {} paid/1h {}, read {}",
                n(d.backlog),
                n(d.pending),
                n(d.running),
                n(d.running_stale),
                n(d.live_workers),
                n(d.orphan_tasks),
                n(d.completed_1h),
                n(d.paid_1h),
                d.read_at.as_deref().unwrap_or("never")
            ));
            out.push(format!(
                "  proofshare {}, request loop {}, ask price {}",
                match d.proofshare_enabled {
                    Some(true) => "enabled",
                    Some(false) => "DISABLED (no work will come)",
                    None => "unknown",
                },
                d.request_loop.unwrap_or("unknown"),
                d.ask_price_attofil
                    .as_deref()
                    .map(|p| {
                        let fil = crate::prompt::curio::fil_of(p)
                            .map(|f| format!(" ({f} FIL)"))
                            .unwrap_or_default();
                        format!("{} attoFIL{fil}", crate::text::clip(p, 40))
                    })
                    .unwrap_or_else(|| "unknown".into())
            ));
            if let Some(e) = &d.error {
                // Room for a list of hosts and the reason of the one that answered (a
                // re-test saw it cut at 200).
                out.push(format!(
                    "  last probe FAILED: {}",
                    crate::text::clip(e, 400)
                ));
            }
            for note in &d.notes {
                out.push(format!("  note: {}", crate::text::clip(note, 200)));
            }
        }
    }
    if !rates.is_empty() {
        out.push("gpu rates   proofs/h: measured (from our workers) against configured".into());
        for r in rates {
            out.push(format!(
                "  {}: measured {} configured {} -> uses {} ({})",
                r.gpu_name,
                match (r.measured, r.proofs) {
                    (Some(m), Some(p)) => format!(
                        "{m} over {p} proofs{}",
                        r.measured_ago
                            .filter(|a| *a > crate::fleet::rates::MEASURED_KEEP_MS)
                            .map(|a| format!(
                                " {} ago (counts for {} after it is measured)",
                                crate::clock::human_duration(a),
                                crate::clock::human_duration(crate::fleet::rates::MEASURED_KEEP_MS)
                            ))
                            .unwrap_or_default()
                    ),
                    _ => "-".into(),
                },
                crate::text::num(r.configured),
                crate::text::num(r.used),
                r.source
            ));
        }
    }
    for line in identity {
        out.push(format!("identity    {line}"));
    }
    out
}
