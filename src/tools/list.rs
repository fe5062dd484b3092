//! `list_instances {}`: our instances as this pass sees them (the snapshot, updated by
//! earlier calls), compact: state, vast.ai status, GPU, $/h, age, Curio machine, flag.
//! Sends nothing to vast.ai.

use anyhow::Result;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{parse_args, Tool, ToolCtx, ToolResult};
use crate::fleet::LABEL_CHARS;
use crate::text::clip;

/// At most this many instances in one result (the rest are counted).
pub const MAX_LISTED: usize = 40;

pub struct ListInstances;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {}

impl Tool for ListInstances {
    fn name(&self) -> &'static str {
        "list_instances"
    }

    fn description(&self) -> &'static str {
        "Our instances one by one: id, state, vast.ai status, GPU, $/h, proofs/h, age, Curio \
         machine, and a flag for those that bill and earn nothing."
    }

    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {}, "additionalProperties": false})
    }

    fn mutating(&self) -> bool {
        false
    }

    fn call(&self, ctx: &mut ToolCtx<'_>, args: Value) -> Result<ToolResult> {
        if let Err(r) = parse_args::<Args>(args) {
            return Ok(r);
        }
        let snap = &*ctx.snapshot;
        let flags = snap.flagged(ctx.config);
        let rows: Vec<Value> = snap
            .instances
            .iter()
            .take(MAX_LISTED)
            .map(|r| {
                let flag = r
                    .vast_id
                    .and_then(|id| flags.iter().find(|f| f.vast_id == id))
                    .map(|f| f.why.clone());
                json!({
                    "id": r.vast_id,
                    "label": clip(&r.label, LABEL_CHARS),
                    "state": r.state,
                    "status": r.actual_status.as_deref().map(|s| clip(s, 24)),
                    "gpu": r.gpu_name.as_deref().map(|g| clip(g, 40)),
                    "dph": r.dph.map(|d| (d * 1e4).round() / 1e4),
                    "pph": snap.rate_of(r, ctx.config),
                    "age_min": (snap.now - r.created_at).max(0) / 60_000,
                    "curio": r.machine_name.as_deref().map(|m| clip(m, LABEL_CHARS)),
                    "flag": flag,
                })
            })
            .collect();
        let mut out = json!({
            "instances": rows,
            "count": snap.instances.len(),
            "fleet_dph": (snap.fleet_dph() * 100.0).round() / 100.0,
            "not_ours_on_account": snap.foreign.len() + snap.other_installs.len(),
        });
        if snap.instances.len() > MAX_LISTED {
            out["more"] = json!(snap.instances.len() - MAX_LISTED);
        }
        if let Some(e) = &snap.listing_error {
            out["listing_error"] = json!(clip(e, 200));
        }
        let gist = format!(
            "{} instances, ${:.2}/h, {} flagged",
            snap.instances.len(),
            snap.fleet_dph(),
            flags.len()
        );
        Ok(ToolResult::ok(out, false, gist))
    }
}
