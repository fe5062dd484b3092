//! Offers: the test's knobs, the search (filters, order, limit, priced for the disk asked
//! for) and the create that rents one.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::faults::FakeReply;
use super::instances::instance_object;
use super::query::{op_matches, order_values, OPS};
use super::routes::{error, ok};
use super::state::{FakeInstance, OfferRow, State};
use super::FakeVast;

impl FakeVast {
    /// One realistic offer; returns its id. `storage_cost` is 0, `min_bid` 60 % of the price.
    pub fn add_offer(&self, gpu_name: &str, dph_total: f64, reliability: f64) -> u64 {
        let mut s = self.lock();
        let id = s.next_offer_id;
        s.next_offer_id += 1;
        let n = id % 250;
        let offer = json!({
            "id": id, "ask_contract_id": id, "bundle_id": 880_000_000 + id,
            "machine_id": 30_000 + n, "host_id": 90_000 + n,
            "num_gpus": 1, "gpu_name": gpu_name, "gpu_ram": 24564, "gpu_total_ram": 24564,
            "gpu_arch": "nvidia", "compute_cap": 890, "cuda_max_good": 12.4,
            "driver_version": "550.54.14", "cpu_cores": 32, "cpu_cores_effective": 8.0,
            "cpu_ram": 64300, "disk_space": 180.5, "inet_up": 850.3, "inet_down": 910.7,
            "dph_base": dph_total, "storage_cost": 0.0, "storage_total_cost": 0.0,
            "dph_total": dph_total, "min_bid": (dph_total * 0.6 * 1e4).round() / 1e4,
            "is_bid": false, "reliability": reliability, "reliability2": reliability,
            "verification": "verified", "rentable": true, "rented": false, "external": false,
            "geolocation": "Oregon, US", "public_ipaddr": format!("203.0.113.{n}"),
            "start_date": 1_754_000_000.0, "end_date": 1_756_592_000.0, "duration": 2_592_000.0,
        });
        s.offers.push(OfferRow {
            json: offer,
            rented: false,
        });
        id
    }

    pub fn add_offers(
        &self,
        n: usize,
        gpu_name: &str,
        dph_total: f64,
        reliability: f64,
    ) -> Vec<u64> {
        (0..n)
            .map(|_| self.add_offer(gpu_name, dph_total, reliability))
            .collect()
    }

    /// An offer exactly as given (ids, types and whitespace untouched), for parsing tests.
    pub fn add_offer_json(&self, offer: Value) {
        self.lock().offers.push(OfferRow {
            json: offer,
            rented: false,
        });
    }

    pub fn set_offer_field(&self, id: u64, key: &str, value: Value) {
        let mut s = self.lock();
        if let Some(o) = s.offers.iter_mut().find(|o| offer_id(&o.json) == Some(id)) {
            o.json[key] = value;
        }
    }

    /// Someone else rented it: it leaves the search and a create gets `no_such_ask`.
    pub fn take_offer(&self, id: u64) {
        let mut s = self.lock();
        if let Some(o) = s.offers.iter_mut().find(|o| offer_id(&o.json) == Some(id)) {
            o.rented = true;
        }
    }

    /// After `n` more searches, every search gets the daily quota's 429
    /// (`search_quota_exceeded`) with `X-RateLimit-Reset: reset`.
    pub fn set_search_limit(&self, n: u32, reset: &str) {
        self.lock().search_quota = Some((n, reset.into()));
    }

    pub fn offer_rented(&self, id: u64) -> bool {
        self.lock()
            .offers
            .iter()
            .any(|o| offer_id(&o.json) == Some(id) && o.rented)
    }
}

impl State {
    pub(super) fn search(&self, body: &str) -> FakeReply {
        let Ok(Value::Object(q)) = serde_json::from_str::<Value>(body) else {
            return error(400, "invalid_args", "the query must be a JSON object");
        };
        let mut filters: Vec<(String, String, Value)> = Vec::new();
        let mut order: Vec<(String, bool)> = Vec::new();
        let mut limit = 64usize;
        let mut storage_gb: Option<f64> = None;
        for (key, value) in &q {
            match key.as_str() {
                "order" => {
                    let Some(pairs) = value.as_array() else {
                        return error(400, "invalid_args", "order must be a list");
                    };
                    for p in pairs {
                        match (
                            p.get(0).and_then(Value::as_str),
                            p.get(1).and_then(Value::as_str),
                        ) {
                            (Some(f), Some("asc")) => order.push((f.into(), false)),
                            (Some(f), Some("desc")) => order.push((f.into(), true)),
                            _ => return error(400, "invalid_args", "bad order pair"),
                        }
                    }
                }
                "limit" => match value.as_u64() {
                    Some(n) => limit = n as usize,
                    None => return error(400, "invalid_args", "limit must be an integer"),
                },
                "type" => {
                    if !matches!(
                        value.as_str(),
                        Some("on-demand" | "ondemand" | "bid" | "reserved")
                    ) {
                        return error(400, "invalid_args", "unknown offer type");
                    }
                }
                "allocated_storage" => storage_gb = value.as_f64(),
                "disable_bundling" => {}
                field => {
                    let Some(ops) = value.as_object() else {
                        return error(400, "invalid_args", &format!("bad filter on {field}"));
                    };
                    for (op, arg) in ops {
                        if !OPS.contains(&op.as_str()) {
                            return error(400, "invalid_args", &format!("unknown operator {op}"));
                        }
                        if matches!(op.as_str(), "in" | "notin") && !arg.is_array() {
                            return error(400, "invalid_args", &format!("{op} takes a list"));
                        }
                        filters.push((field.into(), op.clone(), arg.clone()));
                    }
                }
            }
        }
        let mut rows: Vec<Value> = self
            .offers
            .iter()
            .filter(|o| !o.rented)
            .map(|o| priced(&o.json, storage_gb))
            .filter(|o| {
                filters
                    .iter()
                    .all(|(f, op, arg)| op_matches(&offer_field(o, f), op, arg))
            })
            .collect();
        rows.sort_by(|a, b| {
            for (field, desc) in &order {
                let ord = order_values(a.get(field), b.get(field), *desc);
                if ord != std::cmp::Ordering::Equal {
                    return ord;
                }
            }
            std::cmp::Ordering::Equal
        });
        rows.truncate(limit);
        ok(json!({ "offers": rows }))
    }

    pub(super) fn create(&mut self, offer: u64, body: &str, now: i64) -> FakeReply {
        let Ok(Value::Object(b)) = serde_json::from_str::<Value>(body) else {
            return error(400, "invalid_args", "the body must be a JSON object");
        };
        let image = b.get("image").and_then(Value::as_str).unwrap_or("");
        if image.trim().is_empty() {
            return error(400, "invalid_args", "image is required");
        }
        let env = match b.get("env") {
            None | Some(Value::Null) => BTreeMap::new(),
            Some(Value::Object(m)) if m.values().all(Value::is_string) => m
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                .collect(),
            Some(_) => return error(400, "invalid_args", "env must be an object of strings"),
        };
        let runtype = b.get("runtype").and_then(Value::as_str).unwrap_or("ssh");
        if !runtype.split_whitespace().all(|t| RUNTYPES.contains(&t)) {
            return error(400, "invalid_args", &format!("unknown runtype {runtype:?}"));
        }
        let label = match b.get("label") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.chars().count() <= 256 => Some(s.clone()),
            Some(_) => return error(400, "label_too_long", "label must be a string of <= 256"),
        };
        let disk = match b.get("disk") {
            None => 8.0,
            Some(d) => match d.as_f64() {
                Some(d) if d > 0.0 => d,
                _ => return error(400, "invalid_args", "disk must be a positive number"),
            },
        };
        let price = match b.get("price") {
            None | Some(Value::Null) => None,
            Some(p) => match p.as_f64() {
                Some(p) if (0.001..=128.0).contains(&p) => Some(p),
                _ => return error(400, "invalid_price", "price must be within 0.001..128"),
            },
        };
        let Some(row) = self
            .offers
            .iter_mut()
            .find(|o| offer_id(&o.json) == Some(offer) && !o.rented)
        else {
            return FakeReply::json(
                404,
                json!({"success": false, "error": "no_such_ask",
                       "msg": format!("Instance type by id {offer} is not available."),
                       "ask_id": offer}),
            );
        };
        row.rented = true;
        let offer_json = row.json.clone();
        let id = self.next_instance_id;
        self.next_instance_id += 1;
        let mut obj = instance_object(id, &offer_json, disk);
        obj.insert("label".into(), json!(label));
        obj.insert("image_uuid".into(), json!(image));
        obj.insert("image_runtype".into(), json!(runtype));
        obj.insert(
            "image_args".into(),
            b.get("args").cloned().unwrap_or(json!([])),
        );
        obj.insert(
            "extra_env".into(),
            json!(env.iter().map(|(k, v)| json!([k, v])).collect::<Vec<_>>()),
        );
        obj.insert(
            "onstart".into(),
            b.get("onstart").cloned().unwrap_or(Value::Null),
        );
        obj.insert("start_date".into(), json!(now as f64 / 1000.0));
        obj.insert("is_bid".into(), json!(price.is_some()));
        if let Some(p) = price {
            // A bid bills its price (plus the disk), not the on-demand one.
            let storage = obj
                .get("storage_total_cost")
                .and_then(Value::as_f64)
                .unwrap_or(0.0);
            obj.insert("bid_price".into(), json!(p));
            obj.insert("dph_total".into(), json!(p + storage));
        }
        if let Some(login) = b.get("image_login") {
            if !(login.is_null() || login.is_string()) {
                return error(400, "invalid_args", "image_login must be a string");
            }
        }
        let min_bid = offer_json.get("min_bid").and_then(Value::as_f64);
        let outbid = matches!((price, min_bid), (Some(p), Some(m)) if p < m);
        if outbid {
            for k in [
                "actual_status",
                "intended_status",
                "cur_state",
                "next_state",
            ] {
                obj.insert(k.into(), json!("stopped"));
            }
        }
        self.instances.insert(
            id,
            FakeInstance {
                obj,
                env,
                created_ms: now,
                status_pinned: outbid,
                offer_id: Some(offer),
            },
        );
        if outbid {
            return ok(json!({"success": false, "error": "insufficient_bid",
                             "msg": "bid is below the current minimum; the instance was created stopped",
                             "new_contract": id}));
        }
        ok(json!({"success": true, "new_contract": id,
                  "instance_api_key": format!("fake-instance-key-{id}")}))
    }
}

const RUNTYPES: &[&str] = &[
    "args",
    "ssh",
    "ssh_proxy",
    "ssh_direct",
    "ssh_direc",
    "jupyter",
    "jupyter_proxy",
    "jupyter_direct",
    "jupyter_direc",
];

pub(super) fn offer_id(v: &Value) -> Option<u64> {
    v.get("id").and_then(Value::as_u64)
}

/// The offer priced for `storage_gb` of disk: dph_total = dph_base + GB × $/GB/month / 720.
pub(super) fn priced(offer: &Value, storage_gb: Option<f64>) -> Value {
    let mut o = offer.clone();
    let base = o.get("dph_base").and_then(Value::as_f64);
    let cost = o.get("storage_cost").and_then(Value::as_f64);
    if let (Some(gb), Some(base), Some(cost)) = (storage_gb, base, cost) {
        let storage = gb * cost / 720.0;
        o["storage_total_cost"] = json!(storage);
        o["dph_total"] = json!(base + storage);
    }
    if o.is_object() {
        o["rented"] = json!(false);
    }
    o
}

/// A field of an offer as a filter sees it (`verified` is derived from `verification`).
pub(super) fn offer_field(o: &Value, field: &str) -> Value {
    match (field, o.get(field)) {
        (_, Some(v)) => v.clone(),
        ("verified", None) => {
            json!(o.get("verification").and_then(Value::as_str) == Some("verified"))
        }
        ("external", None) => json!(false),
        ("rentable", None) => json!(true),
        _ => Value::Null,
    }
}
