//! Our instances that a listing left out, asked about one by one before they stop counting.
//!
//! A listing that works but leaves out instances that still bill (vast.ai answering
//! `"instances": []` or `null`, or dropping rows) would let the reconciliation mark them gone:
//! they stop counting against `max_instances` and `max_dph_total`, and every pass rents past
//! the caps (a walkthrough saw 6 instances rented under `max_instances = 2`). So each tracked
//! instance of ours missing from the listing is asked for (`GET /api/v0/instances/{id}/`, at
//! most [`ASK_MAX`] a pass): one still there goes back into the listing, one vast.ai cannot
//! answer for makes the listing this pass's failure (the fleet is held, as on any failed
//! listing), and one confirmed gone is gone.

use anyhow::Result;
use rusqlite::Connection;

use crate::services::Services;
use crate::store::instances;
use crate::text::clip;
use crate::vast::Instance;

/// Instances one pass asks about; more missing than this, and one asked about still there,
/// makes the listing a failure (it is incomplete). Missing ones not asked about this pass
/// are kept as last seen, still counted, and asked about next pass (those confirmed gone
/// leave the line, so each pass gets further).
pub const ASK_MAX: usize = 5;

/// The listing with our missing instances asked about (see the module doc), or the failure
/// that replaces it. A listing that failed is returned as it came.
pub fn confirm(
    conn: &Connection,
    services: &Services,
    listing: Option<Vec<Instance>>,
    listing_error: Option<String>,
) -> Result<(Option<Vec<Instance>>, Option<String>)> {
    let (Some(mut list), Some(vast)) = (listing, services.vast.as_ref()) else {
        return Ok((None, listing_error));
    };
    let listed: std::collections::HashSet<u64> = list.iter().map(|i| i.id).collect();
    let missing: Vec<(u64, instances::InstanceRow)> = instances::live(conn)?
        .into_iter()
        .filter_map(|r| Some((u64::try_from(r.vast_id?).ok()?, r)))
        .filter(|(id, _)| !listed.contains(id))
        .collect();
    let mut found = 0;
    for (id, row) in missing.iter().take(ASK_MAX) {
        let label = &row.label;
        match vast.show_instance(*id) {
            Ok(Some(inst)) => {
                crate::journal::eprint(
                    crate::journal::WARNING,
                    &format!(
                        "fleetagent: vast.ai's listing left out instance {id} ({}), which vast.ai still shows: kept and counted against the caps",
                        clip(label, 80)
                    ),
                );
                list.push(inst);
                found += 1;
            }
            Ok(None) => {}
            Err(e) => {
                return Ok((
                    None,
                    Some(clip(
                        &format!(
                            "the listing left out instance {id} of ours and asking vast.ai for it failed ({e}): the fleet is held as it was"
                        ),
                        300,
                    )),
                ))
            }
        }
    }
    if found > 0 && missing.len() > ASK_MAX {
        return Ok((
            None,
            Some(format!(
                "the listing left out {} instances of ours, and those asked about are still there: it is incomplete; the fleet is held as it was",
                missing.len()
            )),
        ));
    }
    // Those asked about are gone; the rest wait their turn, counted as last seen (a re-test
    // saw them marked gone unasked while they billed, and a launch in their place).
    let unasked = &missing[missing.len().min(ASK_MAX)..];
    if !unasked.is_empty() {
        crate::journal::eprint(
            crate::journal::WARNING,
            &format!(
                "fleetagent: vast.ai's listing left out {} instances of ours; the {ASK_MAX} asked about are gone, the other {} are kept as last seen and asked about next pass",
                missing.len(),
                unasked.len()
            ),
        );
        list.extend(unasked.iter().map(|(id, r)| as_last_seen(*id, r)));
    }
    Ok((Some(list), None))
}

/// A tracked instance as the listing last showed it, for a pass that could not ask about it.
fn as_last_seen(id: u64, r: &instances::InstanceRow) -> Instance {
    Instance {
        id,
        label: Some(r.label.clone()),
        actual_status: r.actual_status.clone(),
        intended_status: None,
        cur_state: None,
        next_state: None,
        is_bid: Some(r.is_bid),
        machine_id: r.machine_id.and_then(|m| u64::try_from(m).ok()),
        storage_dph: r.storage_dph,
        status_msg: r.status_msg.clone(),
        gpu_name: r.gpu_name.clone(),
        num_gpus: None,
        dph_total: r.dph,
        public_ip: r.public_ip.clone(),
        start_date: None,
        image_uuid: None,
    }
}
