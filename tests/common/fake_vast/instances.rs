//! Instances: the test's knobs, the status progression, the paginated v1 list, show,
//! stop/label and destroy.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Map, Value};

use super::faults::FakeReply;
use super::offers::{offer_id, priced};
use super::query::{op_matches, parse_query, OPS};
use super::routes::{error, ok};
use super::state::{FakeInstance, State};
use super::FakeVast;

impl FakeVast {
    /// An instance already on the account (not from an offer), `running`; returns its id.
    pub fn add_instance(&self, label: &str) -> u64 {
        let mut s = self.lock();
        let id = s.next_instance_id;
        s.next_instance_id += 1;
        let now = s.clock.now_ms();
        let mut obj = instance_object(id, &json!({"gpu_name": "RTX 4090", "dph_total": 0.4}), 40.0);
        obj.insert("label".into(), json!(label));
        obj.insert("actual_status".into(), json!("running"));
        obj.insert("start_date".into(), json!(now as f64 / 1000.0));
        s.instances.insert(
            id,
            FakeInstance {
                obj,
                env: BTreeMap::new(),
                created_ms: now,
                status_pinned: true,
                offer_id: None,
            },
        );
        id
    }

    /// Set `actual_status` (`None` = JSON null); progression stops for this instance.
    pub fn set_actual_status(&self, id: u64, status: Option<&str>) {
        let mut s = self.lock();
        if let Some(i) = s.instances.get_mut(&id) {
            i.obj.insert("actual_status".into(), json!(status));
            i.status_pinned = true;
        }
    }

    pub fn set_status_msg(&self, id: u64, msg: Option<&str>) {
        self.set_instance_field(id, "status_msg", json!(msg));
    }

    pub fn set_public_ip(&self, id: u64, ip: Option<&str>) {
        self.set_instance_field(id, "public_ipaddr", json!(ip));
    }

    /// Any field of the instance object, as the API will show it.
    pub fn set_instance_field(&self, id: u64, key: &str, value: Value) {
        let mut s = self.lock();
        if let Some(i) = s.instances.get_mut(&id) {
            if key == "actual_status" {
                i.status_pinned = true;
            }
            i.obj.insert(key.into(), value);
        }
    }

    /// Created instances go null → `loading` after `loading_after` → `running` after
    /// `running_after` (by the fake's clock), unless their status was set explicitly.
    /// Off by default: they stay null until a test moves them.
    pub fn set_progression(&self, loading_after: Duration, running_after: Duration) {
        self.lock().progression = Some((
            loading_after.as_millis() as i64,
            running_after.as_millis() as i64,
        ));
    }

    /// The instance object as the API would show it now; `None` once destroyed.
    pub fn instance(&self, id: u64) -> Option<Value> {
        let s = self.lock();
        s.instances.get(&id).map(|i| s.view(i))
    }

    /// The env a create passed (e.g. `FLEETAGENT_LABEL`).
    pub fn instance_env(&self, id: u64) -> Option<BTreeMap<String, String>> {
        self.lock().instances.get(&id).map(|i| i.env.clone())
    }

    pub fn instances(&self) -> Vec<Value> {
        let s = self.lock();
        s.instances.values().map(|i| s.view(i)).collect()
    }

    pub fn instance_ids(&self) -> Vec<u64> {
        self.lock().instances.keys().copied().collect()
    }

    /// The instance is gone from the account (destroyed by someone else, or by vast.ai).
    pub fn remove_instance(&self, id: u64) {
        self.lock().instances.remove(&id);
    }

    /// vast.ai pauses a bid of ours (someone bid more): `actual_status` and `cur_state`
    /// become stopped; `intended_status` and `next_state` stay running (the docs' "resumes
    /// automatically") or, with `all_stopped`, all three turn stopped (what dstack saw).
    pub fn outbid(&self, id: u64, all_stopped: bool) {
        let mut s = self.lock();
        if let Some(i) = s.instances.get_mut(&id) {
            let rest = if all_stopped { "stopped" } else { "running" };
            i.obj.insert("is_bid".into(), json!(true));
            i.obj.insert("actual_status".into(), json!("stopped"));
            i.obj.insert("cur_state".into(), json!("stopped"));
            i.obj.insert("intended_status".into(), json!(rest));
            i.obj.insert("next_state".into(), json!(rest));
            i.obj.insert("ports".into(), Value::Null);
            i.status_pinned = true;
        }
    }

    /// Its priority came back: the paused bid runs again.
    pub fn resume(&self, id: u64) {
        let mut s = self.lock();
        if let Some(i) = s.instances.get_mut(&id) {
            for k in [
                "actual_status",
                "intended_status",
                "cur_state",
                "next_state",
            ] {
                i.obj.insert(k.into(), json!("running"));
            }
            i.status_pinned = true;
        }
    }

    /// The bid a create or a change-bid set, if any.
    pub fn bid_price(&self, id: u64) -> Option<f64> {
        self.lock()
            .instances
            .get(&id)
            .and_then(|i| i.obj.get("bid_price").and_then(Value::as_f64))
    }

    /// Answer an unknown id on show with 404 `no_such_instance` instead of
    /// `{"instances": null}` (both are seen).
    pub fn set_show_missing_404(&self, on: bool) {
        self.lock().show_missing_404 = on;
    }
}

impl State {
    pub(super) fn view(&self, i: &FakeInstance) -> Value {
        let mut obj = i.obj.clone();
        if let (false, Some((loading, running))) = (i.status_pinned, self.progression) {
            let age = self.clock.now_ms() - i.created_ms;
            let status = if age >= running {
                json!("running")
            } else if age >= loading {
                json!("loading")
            } else {
                Value::Null
            };
            obj.insert("actual_status".into(), status);
        }
        Value::Object(obj)
    }

    pub(super) fn list(&mut self, query: &str) -> FakeReply {
        let params = parse_query(query);
        let json_param = |name: &str| -> Result<Option<Value>, FakeReply> {
            match params.get(name) {
                None => Ok(None),
                Some(s) => serde_json::from_str(s)
                    .map(Some)
                    .map_err(|_| error(400, "invalid_args", &format!("{name} is not JSON"))),
            }
        };
        let limit = match json_param("limit") {
            Ok(None) => 25,
            Ok(Some(v)) => match v.as_i64() {
                Some(n) if n <= 0 => 5,
                Some(n) => n.min(25) as usize,
                None => return error(400, "invalid_args", "limit must be an integer"),
            },
            Err(e) => return e,
        };
        let mut desc = false;
        match json_param("order_by") {
            Ok(None) => {}
            Ok(Some(Value::Array(cols))) => {
                for c in cols {
                    match (
                        c.get("col").and_then(Value::as_str),
                        c.get("dir").and_then(Value::as_str),
                    ) {
                        (Some("id"), Some("asc") | None) => desc = false,
                        (Some("id"), Some("desc")) => desc = true,
                        _ => return error(400, "invalid_args", "the fake orders by id only"),
                    }
                }
            }
            Ok(Some(_)) => return error(400, "invalid_args", "order_by must be a list"),
            Err(e) => return e,
        }
        let mut filters: Vec<(String, String, Value)> = Vec::new();
        match json_param("select_filters") {
            Ok(None) => {}
            Ok(Some(Value::Object(m))) => {
                for (col, ops) in m {
                    if !LIST_FILTER_COLS.contains(&col.as_str()) {
                        return error(400, "invalid_args", &format!("cannot filter on {col}"));
                    }
                    let Some(ops) = ops.as_object() else {
                        return error(400, "invalid_args", "bad filter");
                    };
                    for (op, arg) in ops {
                        if !OPS.contains(&op.as_str()) {
                            return error(400, "invalid_args", &format!("unknown operator {op}"));
                        }
                        filters.push((col.clone(), op.clone(), arg.clone()));
                    }
                }
            }
            Ok(Some(_)) => return error(400, "invalid_args", "select_filters must be an object"),
            Err(e) => return e,
        }
        let cols: Option<Vec<String>> = match json_param("select_cols") {
            Ok(None) => None,
            Ok(Some(Value::Array(c))) => {
                let names: Vec<String> = c
                    .iter()
                    .filter_map(|v| v.as_str().map(String::from))
                    .collect();
                (!names.iter().any(|n| n == "*")).then_some(names)
            }
            Ok(Some(_)) => return error(400, "invalid_args", "select_cols must be a list"),
            Err(e) => return e,
        };
        let after = match params.get("after_token") {
            None => None,
            Some(t) => match self.tokens.get(t) {
                Some(&(last, d)) if d == desc => Some(last),
                _ => return error(400, "invalid_token", "invalid after_token"),
            },
        };
        let total = self.instances.len();
        let mut rows: Vec<(u64, Value)> = self
            .instances
            .iter()
            .map(|(id, i)| (*id, self.view(i)))
            .filter(|(_, v)| {
                filters
                    .iter()
                    .all(|(f, op, arg)| op_matches(v.get(f).unwrap_or(&Value::Null), op, arg))
            })
            .collect();
        if desc {
            rows.reverse();
        }
        let found = rows.len();
        let mut label_counts: BTreeMap<String, u64> = BTreeMap::new();
        for (_, v) in &rows {
            if let Some(l) = v.get("label").and_then(Value::as_str) {
                *label_counts.entry(l.to_string()).or_default() += 1;
            }
        }
        let rest: Vec<(u64, Value)> = rows
            .into_iter()
            .filter(|(id, _)| match after {
                None => true,
                Some(last) if desc => *id < last,
                Some(last) => *id > last,
            })
            .collect();
        let more = rest.len() > limit;
        let page: Vec<(u64, Value)> = rest.into_iter().take(limit).collect();
        let next_token = match (more, page.last()) {
            (true, Some((last, _))) => {
                self.counter += 1;
                // Opaque, and with characters that need URL encoding.
                let token = format!("c{:06x}+{last:x}/q==", self.counter);
                self.tokens.insert(token.clone(), (*last, desc));
                json!(token)
            }
            _ => Value::Null,
        };
        let instances: Vec<Value> = page
            .into_iter()
            .map(|(_, v)| match &cols {
                None => v,
                Some(cols) => Value::Object(
                    cols.iter()
                        .map(|c| (c.clone(), v.get(c).cloned().unwrap_or(Value::Null)))
                        .collect(),
                ),
            })
            .collect();
        ok(json!({
            "success": true,
            "instances_found": found,
            "total_instances": total,
            "label_counts": label_counts,
            "next_token": next_token,
            "instances": instances,
        }))
    }

    pub(super) fn show(&self, id: u64) -> FakeReply {
        match self.instances.get(&id) {
            Some(i) => ok(json!({ "instances": self.view(i) })),
            None if self.show_missing_404 => error(
                404,
                "no_such_instance",
                &format!("Instance {id} not found."),
            ),
            None => ok(json!({ "instances": null })),
        }
    }

    pub(super) fn manage(&mut self, id: u64, body: &str) -> FakeReply {
        let Ok(Value::Object(b)) = serde_json::from_str::<Value>(body) else {
            return error(400, "invalid_args", "the body must be a JSON object");
        };
        let Some(inst) = self.instances.get_mut(&id) else {
            return error(
                404,
                "no_such_instance",
                &format!("Instance {id} not found."),
            );
        };
        let mut changed = false;
        if let Some(state) = b.get("state") {
            match state.as_str() {
                Some("stopped") => {
                    for k in [
                        "actual_status",
                        "intended_status",
                        "cur_state",
                        "next_state",
                    ] {
                        inst.obj.insert(k.into(), json!("stopped"));
                    }
                    inst.obj.insert("ports".into(), Value::Null);
                }
                Some("running") => {
                    for k in [
                        "actual_status",
                        "intended_status",
                        "cur_state",
                        "next_state",
                    ] {
                        inst.obj.insert(k.into(), json!("running"));
                    }
                }
                _ => return error(400, "invalid_args", "state must be running or stopped"),
            }
            inst.status_pinned = true;
            changed = true;
        }
        if let Some(label) = b.get("label") {
            match label.as_str() {
                Some(l) if l.chars().count() <= 1024 => {
                    inst.obj.insert("label".into(), json!(l));
                }
                Some(_) => return error(400, "label_too_long", "label is too long"),
                None => return error(400, "invalid_args", "label must be a string"),
            }
            changed = true;
        }
        if !changed {
            return error(400, "invalid_args", "nothing to change");
        }
        ok(json!({"success": true}))
    }

    /// `PUT /api/v0/instances/bid_price/{id}/ {"client_id": "me", "price": p}`: bids only;
    /// a paused bid whose new price reaches its `min_bid` runs again.
    pub(super) fn change_bid(&mut self, id: u64, body: &str) -> FakeReply {
        let Ok(Value::Object(b)) = serde_json::from_str::<Value>(body) else {
            return error(400, "invalid_args", "the body must be a JSON object");
        };
        if b.get("client_id").and_then(Value::as_str) != Some("me") {
            return error(400, "invalid_args", "client_id must be \"me\"");
        }
        let price = match b.get("price").and_then(Value::as_f64) {
            Some(p) if (0.001..=128.0).contains(&p) => p,
            _ => return error(400, "invalid_price", "price must be within 0.001..128"),
        };
        let Some(inst) = self.instances.get_mut(&id) else {
            return error(
                404,
                "no_such_instance",
                &format!("Instance {id} not found."),
            );
        };
        if inst.obj.get("is_bid") != Some(&json!(true)) {
            return error(400, "invalid_args", "not an interruptible instance");
        }
        inst.obj.insert("bid_price".into(), json!(price));
        let min_bid = inst
            .obj
            .get("min_bid")
            .and_then(Value::as_f64)
            .unwrap_or(0.0);
        let paused = inst.obj.get("actual_status") == Some(&json!("stopped"))
            && inst.obj.get("intended_status") == Some(&json!("running"));
        if paused && price >= min_bid {
            for k in ["actual_status", "cur_state", "next_state"] {
                inst.obj.insert(k.into(), json!("running"));
            }
        }
        ok(json!({"success": true}))
    }

    pub(super) fn destroy(&mut self, id: u64) -> FakeReply {
        let Some(inst) = self.instances.remove(&id) else {
            return error(
                404,
                "no_such_instance",
                &format!("Instance {id} not found."),
            );
        };
        // The machine is free again.
        if let Some(offer) = inst.offer_id {
            if let Some(o) = self
                .offers
                .iter_mut()
                .find(|o| offer_id(&o.json) == Some(offer))
            {
                o.rented = false;
            }
        }
        ok(json!({"success": true}))
    }
}

const LIST_FILTER_COLS: &[&str] = &[
    "actual_status",
    "intended_status",
    "cur_state",
    "label",
    "id",
    "gpu_name",
    "verification",
];

/// A new instance object from an offer, priced for `disk_gb`.
pub(super) fn instance_object(id: u64, offer: &Value, disk_gb: f64) -> Map<String, Value> {
    let priced = priced(offer, Some(disk_gb));
    let pick = |k: &str| priced.get(k).cloned().unwrap_or(Value::Null);
    let mut obj = Map::new();
    obj.insert("id".into(), json!(id));
    for k in [
        "machine_id",
        "host_id",
        "num_gpus",
        "gpu_name",
        "gpu_ram",
        "gpu_arch",
        "cuda_max_good",
        "driver_version",
        "cpu_cores_effective",
        "cpu_ram",
        "dph_base",
        "storage_cost",
        "storage_total_cost",
        "dph_total",
        "min_bid",
        "verification",
        "geolocation",
        "public_ipaddr",
        "end_date",
    ] {
        obj.insert(k.into(), pick(k));
    }
    obj.insert("reliability2".into(), pick("reliability"));
    obj.insert("actual_status".into(), Value::Null);
    obj.insert("intended_status".into(), json!("running"));
    obj.insert("cur_state".into(), json!("running"));
    obj.insert("next_state".into(), json!("running"));
    obj.insert("status_msg".into(), Value::Null);
    obj.insert("label".into(), Value::Null);
    obj.insert("disk_space".into(), json!(disk_gb));
    obj.insert("ssh_host".into(), json!(format!("ssh{}.vast.ai", id % 9)));
    obj.insert("ssh_port".into(), json!(10_000 + id % 50_000));
    obj.insert("ports".into(), Value::Null);
    obj.insert("time_remaining".into(), json!(""));
    obj
}
