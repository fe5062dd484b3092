//! `search_offers {gpu_name?, max_dph?, limit? <= 20}`: rentable offers matching
//! `[vast.offers]` (narrowed by the arguments, never widened), best $/proof first. Also the
//! offer helpers the launch tool shares: the query built from the config, the local filter and
//! the best-offer rule (lowest `dph_total` / the GPU's proofs per hour).

use anyhow::Result;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{parse_args, Tool, ToolCtx, ToolResult};
use crate::policy::offers::{
    config_query, is_profitable, matches_config, offer_json, usd_per_proof,
};
use crate::text::clip;
use crate::vast::Offer;

pub const MAX_LIMIT: u32 = 20;
const DEFAULT_LIMIT: u32 = 10;

pub struct SearchOffers;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    #[serde(default)]
    gpu_name: Option<String>,
    #[serde(default)]
    max_dph: Option<f64>,
    #[serde(default)]
    limit: Option<u32>,
}

impl Tool for SearchOffers {
    fn name(&self) -> &'static str {
        "search_offers"
    }

    fn description(&self) -> &'static str {
        "Rentable offers matching the configured filters, cheapest per proof first (with a \
         known price: whether each is profitable). Narrow by gpu_name or max_dph. vast.ai \
         counts searches: a call without filters reuses the pass's results."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "gpu_name": {"type": "string", "description": "e.g. \"RTX 4090\""},
                "max_dph": {"type": "number", "exclusiveMinimum": 0, "description": "highest $/h"},
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "description": "default 10"}
            },
            "additionalProperties": false
        })
    }

    fn mutating(&self) -> bool {
        false
    }

    fn call(&self, ctx: &mut ToolCtx<'_>, args: Value) -> Result<ToolResult> {
        let a: Args = match parse_args(args) {
            Ok(a) => a,
            Err(r) => return Ok(r),
        };
        let limit = a.limit.unwrap_or(DEFAULT_LIMIT);
        if !(1..=MAX_LIMIT).contains(&limit) {
            return Ok(invalid(format!(
                "limit must be 1..{MAX_LIMIT}, got {limit}"
            )));
        }
        if let Some(m) = a.max_dph {
            if !m.is_finite() || m <= 0.0 {
                return Ok(invalid(format!("max_dph must be a number > 0, got {m}")));
            }
        }
        let configured = &ctx.config.vast.offers.gpu_names;
        let gpu = match a.gpu_name.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(g) if configured.is_empty() => Some(g.replace('_', " ")),
            Some(g) => match configured
                .iter()
                .find(|c| same_gpu_name(c, g))
            {
                Some(c) => Some(c.clone()),
                None => {
                    return Ok(invalid(format!(
                        "gpu_name must be one of the configured GPUs {configured:?} ([vast.offers].gpu_names)"
                    )))
                }
            },
        };
        let Some(vast) = ctx.services.vast.clone() else {
            return Ok(ToolResult::error(
                "not_configured",
                json!({"message": "no vast.ai API key: set VAST_API_KEY or the vast_api_key credential"}),
            ));
        };
        // Hosts that failed us are left out here too.
        let exclude = crate::policy::launch::bad_hosts(ctx.snapshot);
        let narrowed = gpu.is_some() || a.max_dph.is_some();
        let spent = ctx.snapshot.search_quota_this_pass;
        let offers = match &ctx.snapshot.offers {
            // This pass's search of every configured offer (a launch's or an earlier call's).
            Some(cached)
                if !narrowed || spent || ctx.snapshot.searches >= MAX_SEARCHES_PER_PASS =>
            {
                cached.clone()
            }
            None if spent => {
                let reset = ctx.snapshot.search_quota.as_deref().unwrap_or_default();
                return Ok(crate::policy::launch::quota_exhausted(reset).1);
            }
            None if ctx.snapshot.searches >= MAX_SEARCHES_PER_PASS => {
                return Ok(ToolResult::error(
                    "rate_limited",
                    json!({"limit": format!("{MAX_SEARCHES_PER_PASS} offer searches per pass"),
                           "message": "vast.ai counts every search against a daily quota; \
                                       launch_instance without offer_id picks the best offer itself"}),
                ));
            }
            _ => {
                // Ask for more than shown: the local filter and the $/proof order may reorder
                // them.
                let mut query = config_query(ctx.config, gpu.as_deref(), a.max_dph, 64);
                query.exclude_machines = exclude.clone();
                let found = vast.search_offers(&query);
                let now = ctx.clock.now_ms();
                super::note_search_quota(ctx, &found, now)?;
                match found {
                    Ok(o) => {
                        let o: Vec<Offer> = o
                            .into_iter()
                            .filter(|o| matches_config(o, ctx.config))
                            .filter(|o| !o.machine_id.is_some_and(|m| exclude.contains(&m)))
                            .collect();
                        if !narrowed {
                            // An empty one with hosts left out: whether vast.ai lists offers
                            // there, for the launches (a re-test: a launch after this call
                            // blamed vast.ai). Met by the quota, nothing is cached: a launch
                            // meets the quota too.
                            let quota = match o.is_empty() && !exclude.is_empty() {
                                true => {
                                    super::launch::left_out_offers(ctx, vast.as_ref(), &query, now)?
                                }
                                false => None,
                            };
                            if quota.is_none() {
                                // A launch later in the pass rents from these.
                                ctx.snapshot.offers = Some(o.clone());
                            }
                        }
                        o
                    }
                    Err(crate::vast::VastError::SearchQuota { reset }) => {
                        return Ok(crate::policy::launch::quota_exhausted(&reset).1)
                    }
                    Err(e) => {
                        return Ok(ToolResult::error(
                            "vast_error",
                            json!({"message": clip(&e.to_string(), 300)}),
                        ))
                    }
                }
            }
        };
        let same_gpu = |o: &Offer| gpu.as_deref().is_none_or(|g| same_gpu_name(&o.gpu_name, g));
        let mut matching: Vec<&Offer> = offers
            .iter()
            .filter(|o| matches_config(o, ctx.config))
            .filter(|o| !o.machine_id.is_some_and(|m| exclude.contains(&m)))
            .filter(|o| same_gpu(o))
            .filter(|o| a.max_dph.is_none_or(|m| o.dph_total <= m + 1e-9))
            .collect();
        matching.sort_by(|x, y| {
            usd_per_proof(x, ctx.config, &ctx.snapshot.measured_rates)
                .total_cmp(&usd_per_proof(y, ctx.config, &ctx.snapshot.measured_rates))
                .then(x.dph_total.total_cmp(&y.dph_total))
        });
        let total = matching.len();
        let rates = &ctx.snapshot.measured_rates;
        let price = ctx.snapshot.price.as_ref();
        let shown: Vec<Value> = matching
            .iter()
            .take(limit as usize)
            .map(|o| {
                let mut v = offer_json(o, ctx.config, rates);
                if price.is_some() {
                    v["profitable"] = json!(is_profitable(o, ctx.config, rates, price));
                }
                v
            })
            .collect();
        let profitable = matching
            .iter()
            .filter(|o| is_profitable(o, ctx.config, rates, price))
            .count();
        let gist = match (matching.first(), price) {
            (Some(best), Some(_)) => format!(
                "{total} offers, {profitable} profitable; best {} {} ${:.2}/h",
                best.id, best.gpu_name, best.dph_total
            ),
            (Some(best), None) => format!(
                "{total} offers; best {} {} ${:.2}/h",
                best.id, best.gpu_name, best.dph_total
            ),
            (None, _) => "no offers".to_string(),
        };
        let mut body = json!({"offers": shown, "matching": total});
        let left_out = &ctx.snapshot.left_out_offers;
        if total == 0 && !left_out.is_empty() {
            // What the launch would meet (`bad_hosts`), said to the model too (a re-test saw
            // "no offers" here and the reason only in the launches after it).
            body["left_out_hosts"] = json!(left_out);
            body["message"] = json!(format!(
                "matching offers exist only on {} host(s) left out (they failed us, or the operator just took an instance off them): launch_instance is refused bad_hosts until they are back",
                left_out.len()
            ));
        } else if total == 0 && ctx.snapshot.search_quota_this_pass {
            body["search_quota_exhausted"] = json!(true);
        }
        match price {
            Some(p) => {
                body["profitable"] = json!(profitable);
                body["revenue_per_proof"] = json!(round6(p.revenue_per_proof));
                body["max_usd_per_proof"] =
                    json!(round6(crate::price::max_cost_per_proof(p, ctx.config)));
            }
            None => {
                let why = ctx.snapshot.price_unknown.as_deref().unwrap_or("no price");
                body["price"] = json!(format!(
                    "price unknown ({}): the profit check is off",
                    clip(why, 200)
                ));
            }
        }
        Ok(ToolResult::ok(body, false, gist))
    }
}

/// vast.ai's searches the model's calls may send in one pass: a small model's loop sent 80 (20
/// calls a turn, 4 turns) and spent the daily quota the floor's WORKERS DEAD launch needed.
/// Past it a narrowed search is answered from the pass's full search when there is one.
pub const MAX_SEARCHES_PER_PASS: u32 = 3;

/// One GPU's name as the model, the config and vast.ai write it: `RTX_4090` is `rtx 4090`.
fn same_gpu_name(a: &str, b: &str) -> bool {
    a.replace('_', " ")
        .eq_ignore_ascii_case(&b.replace('_', " "))
}

fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

fn invalid(message: String) -> ToolResult {
    ToolResult::error("invalid_args", json!({ "message": message }))
}
