//! With `vast.stop_mode = "stop"`: a stopped spare of ours started again instead of a
//! rental.

use serde_json::json;

use super::*;

/// With `vast.stop_mode = "stop"`, a stopped instance of ours (stopped by us, not flagged as
/// stopped too long) is started again before a new one is rented: the cheapest first; not on
/// a host that failed us (a walkthrough saw an exited one stopped and started again by one
/// pass, every pass), nor made with another image than `vast.image`, nor one `[vast.offers]`
/// no longer rents. The money and profit checks are on the $/h starting it adds (its disk
/// bills while stopped); `None` when there is none, or no fit.
pub fn restart_candidate(ask: &Ask, snapshot: &Snapshot, config: &Config) -> Option<InstanceRow> {
    if config.vast.stop_mode != crate::config::StopMode::Stop || ask.offer_id.is_some() {
        return None;
    }
    let flagged = snapshot.flagged(config);
    let mut stopped: Vec<&InstanceRow> = snapshot
        .instances
        .iter()
        .filter(|r| r.state == crate::fleet::STOPPED)
        .filter(|r| {
            r.vast_id
                .is_some_and(|id| !flagged.iter().any(|f| f.vast_id == id))
        })
        // Not on a host the operator just took an instance off (the one stopped "host looks
        // bad" was started again ten seconds later: the re-test).
        .filter(|r| {
            !r.machine_id.is_some_and(|m| {
                snapshot.operator_hosts.contains(&m) || snapshot.bad_hosts.contains(&m)
            })
        })
        .filter(|r| {
            r.vast_id
                .is_some_and(|id| !snapshot.other_image.contains(&id))
        })
        .filter(|r| still_rentable(r, &config.vast.offers))
        .collect();
    stopped.sort_by(|a, b| {
        a.dph
            .unwrap_or(f64::MAX)
            .total_cmp(&b.dph.unwrap_or(f64::MAX))
            .then(a.vast_id.cmp(&b.vast_id))
    });
    let row = stopped.first()?;
    // Its disk already bills: starting it adds the GPU part.
    let extra = (row.dph.unwrap_or(0.0) - row.storage_dph.unwrap_or(0.0)).max(0.0);
    guardrails::check_launch_money(&ask.facts(), extra, &config.policy).ok()?;
    // Started again, it proves at its GPU's rate for that part: a spare that would lose money
    // on every proof stays stopped (a walkthrough saw one started in the pass whose rental of
    // the same GPU at the same $/h was refused `unprofitable`).
    if let Some(gpu) = row.gpu_name.as_deref() {
        let id = row.offer_id.unwrap_or(0).max(0) as u64;
        let (measured, price) = (&ask.measured_rates, ask.price.as_ref());
        crate::policy::offers::check_gpu_profit((id, gpu, extra), config, measured, price, None)
            .ok()?;
    }
    Some((*row).clone())
}

/// A stopped spare `[vast.offers]` would still rent: its GPU among `gpu_names` (when set),
/// its $/h within `max_dph_per_instance` (when set). What the row does not know passes.
fn still_rentable(r: &InstanceRow, offers: &crate::config::OffersConfig) -> bool {
    use crate::policy::offers::{gpu_asked, within_max_dph};
    r.gpu_name.as_deref().is_none_or(|g| gpu_asked(offers, g))
        && r.dph.is_none_or(|d| within_max_dph(offers, d))
}

/// The start of a stopped instance answered `answer` at `after`: the row (loading again) to
/// write and the result, or the failure's detail (the launch goes on to rent).
pub fn after_start(
    row: &InstanceRow,
    answer: Result<(), &VastError>,
    after: Millis,
) -> Result<(InstanceRow, ToolResult), String> {
    let id = row.vast_id.unwrap_or(0);
    match answer {
        Ok(()) => {
            let mut r = row.clone();
            r.state = crate::fleet::LOADING;
            r.state_since = after;
            // Its next worker boots afresh: not one it lost (`fleet::reconcile` too).
            r.worker_address = None;
            Ok((
                r,
                ToolResult::ok(
                    json!({
                        "ok": true,
                        "started": id,
                        "label": row.label,
                        "message": format!("restarted stopped instance {id} (stop_mode = \"stop\") instead of renting a new one; it may sit scheduling until its GPU is free"),
                    }),
                    true,
                    format!("started stopped instance {id}"),
                ),
            ))
        }
        Err(e) => Err(clip(
            &format!("start of stopped instance {id} failed: {e}"),
            300,
        )),
    }
}
