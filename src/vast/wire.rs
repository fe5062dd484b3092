//! The wire shapes of vast.ai's REST API (shared/reference/vastai-api.md): the request
//! bodies and query strings fleetagent sends, and the lenient parsing of what comes back
//! (offers, instances, error bodies). No I/O: the HTTP client (`http.rs`) sends and retries,
//! and vast.ai's rate limits live in [`crate::ratelimit`].

use serde_json::{json, Map, Value};

use super::{CreateRequest, Instance, Offer, OfferQuery};

/// The v1 list serves at most 25 rows a page.
const LIST_PAGE: u32 = 25;
/// Error messages are cut to this many characters; bodies quoted in errors to EXCERPT_CHARS.
const MSG_CHARS: usize = 300;
const EXCERPT_CHARS: usize = 120;

/// One HTTP answer, whatever its status.
#[derive(Debug)]
pub(super) struct Answer {
    /// `METHOD /path/` it answered (set by `send`), for error messages.
    pub(super) route: String,
    pub(super) status: u16,
    pub(super) retry_after: Option<String>,
    /// `X-RateLimit-Reset`, as sent.
    pub(super) rate_reset: Option<String>,
    pub(super) text: String,
    pub(super) json: Option<Value>,
    /// Why `text` is not JSON (serde_json's words, with line and column), when it is not.
    pub(super) json_error: Option<String>,
}

impl Answer {
    pub(super) fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }

    pub(super) fn field(&self, name: &str) -> Option<&Value> {
        self.json.as_ref().and_then(|j| j.get(name))
    }

    /// The `error` code of a JSON error body, or "".
    pub(super) fn code(&self) -> String {
        self.field("error")
            .and_then(Value::as_str)
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    }

    pub(super) fn success_false(&self) -> bool {
        self.field("success") == Some(&Value::Bool(false))
    }

    /// The server's own words: `msg`, `message`, `detail` or `error`, else a body excerpt.
    pub(super) fn msg(&self) -> String {
        for key in ["msg", "message", "detail", "error"] {
            if let Some(s) = self.field(key).and_then(Value::as_str) {
                if !s.trim().is_empty() {
                    return cut(s.trim(), MSG_CHARS);
                }
            }
        }
        if self.text.trim().is_empty() {
            format!("empty body (HTTP {})", self.status)
        } else {
            excerpt(&self.text)
        }
    }
}

/// The body of `POST /api/v0/bundles/`. GPU names use vast.ai's spaces (`RTX 4090`); an
/// underscore spelling (`RTX_4090`) is converted as the official CLI does. RAM goes in MB
/// (GB × 1000); `allocated_storage` prices the disk we will ask for into `dph_total`.
pub(crate) fn offer_query_body(q: &OfferQuery) -> Value {
    let mut body = Map::new();
    if q.verified_only {
        body.insert("verified".into(), json!({"eq": true}));
    }
    body.insert("external".into(), json!({"eq": false}));
    body.insert("rentable".into(), json!({"eq": true}));
    body.insert("rented".into(), json!({"eq": false}));
    let names: Vec<String> = q
        .gpu_names
        .iter()
        .map(|n| n.trim().replace('_', " "))
        .filter(|n| !n.is_empty())
        .collect();
    if !names.is_empty() {
        body.insert("gpu_name".into(), json!({ "in": names }));
    }
    body.insert("num_gpus".into(), json!({"eq": 1}));
    if let Some(gb) = q.min_gpu_ram_gb {
        body.insert("gpu_ram".into(), json!({ "gte": gb * 1000.0 }));
    }
    if let Some(r) = q.min_reliability {
        body.insert("reliability".into(), json!({ "gte": r }));
    }
    if let Some(max) = q.max_dph {
        body.insert("dph_total".into(), json!({ "lte": max }));
    }
    if !q.exclude_machines.is_empty() {
        body.insert("machine_id".into(), json!({ "notin": q.exclude_machines }));
    }
    body.insert(
        "type".into(),
        json!(if q.interruptible { "bid" } else { "on-demand" }),
    );
    body.insert("allocated_storage".into(), json!(q.disk_gb));
    body.insert("order".into(), json!([["dph_total", "asc"]]));
    let limit = if q.limit == 0 { 20 } else { q.limit.min(1000) };
    body.insert("limit".into(), json!(limit));
    Value::Object(body)
}

/// The body of `PUT /api/v0/asks/{id}/`.
///
/// runtype `args`: the worker is the container's main process, started by the image's own
/// entrypoint (or `/bin/sh -c onstart` when an onstart command is set: in `args` mode vast.ai
/// takes `onstart` as the entrypoint, so the command goes in `args`). The ssh runtypes would
/// put vast.ai's sshd in front as the main process, which keeps a container "running" after
/// the worker died and needs an SSH key on the account; fleetagent never logs in, and wants
/// a dead worker to show up as `exited`.
///
/// `image_login` (a private image's registry login) only when set: it is a secret, so the
/// body is never logged.
///
/// `cancel_unavail: true` always: an offer that cannot start now is refused (410
/// `no_such_ask`) instead of becoming a stopped instance; vast.ai's default for bids is false.
pub(crate) fn create_body(req: &CreateRequest) -> Value {
    let mut body = json!({
        "client_id": "me",
        "image": req.image,
        "disk": req.disk_gb,
        "label": req.label,
        "env": req.env,
        "runtype": "args",
        "price": req.bid_price,
        "cancel_unavail": true,
    });
    if let Some(login) = &req.image_login {
        body["image_login"] = json!(login.expose());
    }
    if let Some(cmd) = req.onstart.as_deref().filter(|c| !c.trim().is_empty()) {
        body["onstart"] = json!("/bin/sh");
        body["args"] = json!(["-c", cmd]);
    }
    body
}

/// The query string of one v1 list page. Non-string values are JSON-encoded; the opaque
/// `after_token` goes as it is (the official client's rule); everything form-encoded.
pub(crate) fn list_query(after_token: Option<&str>) -> String {
    let order = json!([{"col": "id", "dir": "asc"}]).to_string();
    let mut q = format!(
        "limit={}&order_by={}",
        form_encode(&LIST_PAGE.to_string()),
        form_encode(&order)
    );
    if let Some(t) = after_token {
        q.push_str("&after_token=");
        q.push_str(&form_encode(t));
    }
    q
}

/// How many instances a listing page counts (`instances_found`: a number, or a string of
/// digits); 0 when it does not say.
pub(crate) fn instances_found(page: &serde_json::Map<String, Value>) -> u64 {
    // `2`, `2.0`, `"2"`, `"2.0"`; past 64 bits it is no count of a fleet: the most.
    let count = |f: f64| (f.is_finite() && f >= 0.0).then(|| f.ceil().min(u64::MAX as f64) as u64);
    match page.get("instances_found") {
        Some(Value::String(s)) => s.trim().parse::<f64>().ok().and_then(count).unwrap_or(0),
        Some(v) => v
            .as_u64()
            .or_else(|| v.as_f64().and_then(count))
            .unwrap_or(0),
        None => 0,
    }
}

/// `application/x-www-form-urlencoded` as Python's `quote_plus`: space becomes `+`.
pub(crate) fn form_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// The last `n` lines of a log.
pub fn last_lines(text: &str, n: u32) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let from = lines.len().saturating_sub(n as usize);
    let mut out = lines[from..].join("\n");
    if !out.is_empty() && text.ends_with('\n') {
        out.push('\n');
    }
    out
}

/// At most `max` characters of `s`, with an ellipsis when cut.
pub(super) fn cut(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &s[..at]),
        None => s.to_string(),
    }
}

/// A short single-line quote of a body, for error texts.
pub(super) fn excerpt(text: &str) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.is_empty() {
        "(empty body)".into()
    } else {
        format!("{:?}", cut(&flat, EXCERPT_CHARS))
    }
}

/// A number as f64: JSON ints, floats, or numeric strings (some SDKs send strings).
fn num(v: Option<&Value>) -> Option<f64> {
    let n = match v? {
        Value::Number(n) => n.as_f64()?,
        Value::String(s) => s.trim().parse().ok()?,
        _ => return None,
    };
    n.is_finite().then_some(n)
}

/// The most an instance may bill per hour before its figure is taken for garbage (a whole
/// 8-GPU machine rents for tens of dollars).
pub const DPH_MAX: f64 = 10_000.0;

/// The least a rented instance bills per hour: vast.ai's smallest bid. A listed `dph_total`
/// below it (0, `1e-300`) would count a billing instance as free.
pub const DPH_MIN: f64 = 0.001;

/// A price in $/h from a listing, from `least` (a `dph_total` from [`DPH_MIN`], a disk's
/// `storage_total_cost` from 0) up to [`DPH_MAX`]. Anything else (negative, zero for
/// the instance, `1e308`, text) is no price, said at warning: a negative or zero one would
/// open false headroom under `policy.max_dph_total`, an absurd one would fill every figure
/// with 300 digits. An instance with no price counts at the worst case
/// (`Snapshot::unpriced_dph`).
fn price(id: u64, field: &str, least: f64, v: Option<&Value>) -> Option<f64> {
    let v = v.filter(|v| !v.is_null())?;
    match num(Some(v)) {
        Some(n) if (least..=DPH_MAX).contains(&n) => return Some(n),
        _ => {}
    }
    log::warn!(
        "vast.ai listed instance {id} with {field} = {}, no price an instance bills: taken as unknown",
        excerpt(&v.to_string())
    );
    None
}

/// An id: a non-negative integer, also when sent as `123.0` or `"123"`.
pub(super) fn as_id(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64().or_else(|| {
            let f = n.as_f64()?;
            (f >= 0.0 && f.fract() == 0.0 && f < 1e18).then_some(f as u64)
        }),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// A trimmed string; empty or absent is `None`.
fn text(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.trim().to_string()).filter(|s| !s.is_empty()),
        _ => None,
    }
}

/// One offer row. Skipped (`None`) without an id or a price a host charges ([`DPH_MIN`] to
/// [`DPH_MAX`], as for an instance), said at warning with the figure: an offer priced at
/// nothing would look cheapest to every budget rule, and one at `1e308` was taken as the best
/// and refused twice with a 300-digit figure in the journal.
pub fn parse_offer(v: &Value) -> Option<Offer> {
    let id = v.get("id").and_then(as_id)?;
    let listed = v.get("dph_total");
    let Some(dph_total) = num(listed).filter(|p| (DPH_MIN..=DPH_MAX).contains(p)) else {
        log::warn!(
            "vast.ai offer {id} has no usable dph_total ({}); skipped",
            listed.map_or("absent".to_string(), |v| excerpt(&v.to_string()))
        );
        return None;
    };
    let verified = match v.get("verified") {
        Some(Value::Bool(b)) => *b,
        _ => text(v.get("verification")).is_some_and(|s| s.eq_ignore_ascii_case("verified")),
    };
    Some(Offer {
        id,
        gpu_name: text(v.get("gpu_name")).unwrap_or_default(),
        num_gpus: num(v.get("num_gpus")).map_or(1, |n| n.max(0.0) as u32),
        gpu_ram_mb: num(v.get("gpu_ram")).unwrap_or(0.0),
        dph_total,
        reliability: num(v.get("reliability"))
            .or_else(|| num(v.get("reliability2")))
            .unwrap_or(0.0),
        verified,
        geolocation: text(v.get("geolocation")),
        public_ip: text(v.get("public_ipaddr")),
        min_bid: num(v.get("min_bid")),
        machine_id: v.get("machine_id").and_then(as_id),
        storage_dph: num(v.get("storage_total_cost")).filter(|c| c.is_finite() && *c >= 0.0),
    })
}

/// One instance object; `fallback_id` is the id asked for when the row omits its own.
pub fn parse_instance(v: &Value, fallback_id: Option<u64>) -> Option<Instance> {
    let id = v.get("id").and_then(as_id).or(fallback_id)?;
    Some(Instance {
        id,
        label: text(v.get("label")),
        actual_status: text(v.get("actual_status")),
        intended_status: text(v.get("intended_status")),
        cur_state: text(v.get("cur_state")),
        next_state: text(v.get("next_state")),
        is_bid: match v.get("is_bid") {
            Some(Value::Bool(b)) => Some(*b),
            Some(Value::Number(n)) => n.as_f64().map(|f| f != 0.0),
            _ => None,
        },
        machine_id: v.get("machine_id").and_then(as_id),
        storage_dph: price(id, "storage_total_cost", 0.0, v.get("storage_total_cost")),
        status_msg: text(v.get("status_msg")),
        gpu_name: text(v.get("gpu_name")),
        num_gpus: num(v.get("num_gpus")).map(|n| n.max(0.0) as u32),
        dph_total: price(id, "dph_total", DPH_MIN, v.get("dph_total")),
        public_ip: text(v.get("public_ipaddr")),
        start_date: num(v.get("start_date")),
        image_uuid: text(v.get("image_uuid")),
    })
}

/// Whether `base_url` is this host's (a local fake: no proxy from the environment).
pub(super) fn is_loopback(base_url: &str) -> bool {
    let rest = base_url
        .strip_prefix("http://")
        .or_else(|| base_url.strip_prefix("https://"))
        .unwrap_or(base_url);
    let host = rest.split(['/', ':']).next().unwrap_or("");
    matches!(host, "127.0.0.1" | "localhost") || rest.starts_with("[::1]")
}

/// The headers of every request: JSON, and the key when `auth` has it.
pub(super) fn headers<B>(
    rb: ureq::RequestBuilder<B>,
    auth: Option<&str>,
) -> ureq::RequestBuilder<B> {
    let rb = rb.header("Accept", "application/json");
    match auth {
        Some(a) => rb.header("Authorization", a),
        None => rb,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn query() -> OfferQuery {
        OfferQuery {
            gpu_names: vec!["RTX_4090".into(), " RTX 3090 ".into()],
            max_dph: Some(0.6),
            min_reliability: Some(0.98),
            min_gpu_ram_gb: Some(20.0),
            verified_only: true,
            interruptible: false,
            disk_gb: 40.0,
            limit: 10,
            exclude_machines: vec![31337, 42],
        }
    }
    #[test]
    fn offer_query_has_defaults_units_and_order() {
        let b = offer_query_body(&query());
        assert_eq!(b["verified"], json!({"eq": true}));
        assert_eq!(b["external"], json!({"eq": false}));
        assert_eq!(b["rentable"], json!({"eq": true}));
        assert_eq!(b["rented"], json!({"eq": false}));
        assert_eq!(b["gpu_name"], json!({"in": ["RTX 4090", "RTX 3090"]}));
        assert_eq!(b["num_gpus"], json!({"eq": 1}));
        assert_eq!(b["gpu_ram"]["gte"].as_f64(), Some(20_000.0));
        assert_eq!(b["reliability"], json!({"gte": 0.98}));
        assert_eq!(b["dph_total"], json!({"lte": 0.6}));
        assert_eq!(b["type"], "on-demand");
        assert_eq!(b["allocated_storage"].as_f64(), Some(40.0));
        assert_eq!(b["order"], json!([["dph_total", "asc"]]));
        assert_eq!(b["limit"], 10);
        assert_eq!(b["machine_id"], json!({"notin": [31337, 42]}));
    }

    #[test]
    fn offer_query_leaves_out_unset_filters() {
        let q = OfferQuery {
            interruptible: true,
            disk_gb: 20.0,
            ..OfferQuery::default()
        };
        let b = offer_query_body(&q);
        for key in [
            "verified",
            "gpu_name",
            "gpu_ram",
            "reliability",
            "dph_total",
            "machine_id",
        ] {
            assert!(b.get(key).is_none(), "{key} should be absent: {b}");
        }
        assert_eq!(b["type"], "bid");
        assert_eq!(b["limit"], 20, "limit 0 means the default");
    }

    #[test]
    fn create_body_uses_args_runtype_and_env_object() {
        let mut env = BTreeMap::new();
        env.insert("FLEETAGENT_LABEL".to_string(), "fleetagent-7-a".to_string());
        let mut req = CreateRequest {
            offer_id: 5,
            image: "img:1".into(),
            disk_gb: 40.0,
            label: "fleetagent-7-a".into(),
            env,
            onstart: None,
            bid_price: None,
            image_login: None,
        };
        let b = create_body(&req);
        assert_eq!(b["client_id"], "me");
        assert_eq!(b["runtype"], "args");
        assert_eq!(b["env"], json!({"FLEETAGENT_LABEL": "fleetagent-7-a"}));
        assert_eq!(b["price"], Value::Null);
        assert_eq!(b["cancel_unavail"], true);
        assert!(b.get("onstart").is_none() && b.get("args").is_none());

        req.onstart = Some("/opt/start-worker.sh".into());
        req.bid_price = Some(0.25);
        let b = create_body(&req);
        assert_eq!(b["onstart"], "/bin/sh");
        assert_eq!(b["args"], json!(["-c", "/opt/start-worker.sh"]));
        assert_eq!(b["price"], json!(0.25));
        assert_eq!(b["cancel_unavail"], true, "a bid too");
        assert!(b.get("image_login").is_none());
        req.image_login = crate::secrets::Secret::new("-u me -p tok registry.example");
        assert_eq!(
            create_body(&req)["image_login"],
            "-u me -p tok registry.example"
        );
    }

    #[test]
    fn the_count_a_listing_page_gives_in_any_shape() {
        let page = |v: Value| json!({ "instances_found": v }).as_object().unwrap().clone();
        for (v, n) in [
            (json!(2), 2),
            (json!(2.0), 2),
            (json!("2"), 2),
            (json!(" 2.0 "), 2),
            (json!(1e30), u64::MAX),
            (json!(-1), 0),
            (json!("x"), 0),
            (Value::Null, 0),
        ] {
            assert_eq!(instances_found(&page(v.clone())), n, "{v}");
        }
        assert_eq!(instances_found(&serde_json::Map::new()), 0);
    }

    #[test]
    fn list_query_encodes_json_and_keeps_token_raw() {
        assert_eq!(
            list_query(None),
            "limit=25&order_by=%5B%7B%22col%22%3A%22id%22%2C%22dir%22%3A%22asc%22%7D%5D"
        );
        assert!(list_query(Some("a+b/c= d")).ends_with("&after_token=a%2Bb%2Fc%3D+d"));
    }

    #[test]
    fn offers_parse_leniently() {
        let rows = json!([
            {"id": 1, "gpu_name": " RTX 4090 ", "dph_total": 1, "gpu_ram": 24564.0,
             "reliability2": "0.99", "verification": "verified", "public_ipaddr": "1.2.3.4 \n",
             "num_gpus": 1.0, "min_bid": null, "something_new": {"x": 1}},
            {"id": 2.0, "gpu_name": "A100", "dph_total": "0.5", "reliability": 0.97,
             "verified": false, "geolocation": "  ", "storage_total_cost": 0.125},
            {"gpu_name": "no id", "dph_total": 0.1},
            {"id": 4, "gpu_name": "no price", "dph_total": null},
            // Prices no host charges: none is an offer.
            {"id": 5, "gpu_name": "free", "dph_total": 0.0},
            {"id": 6, "gpu_name": "absurd", "dph_total": 1e308},
            {"id": 7, "gpu_name": "negative", "dph_total": -1},
        ]);
        let offers: Vec<Offer> = rows
            .as_array()
            .unwrap()
            .iter()
            .filter_map(parse_offer)
            .collect();
        assert_eq!(offers.len(), 2);
        let a = &offers[0];
        assert_eq!(
            (a.id, a.gpu_name.as_str(), a.dph_total),
            (1, "RTX 4090", 1.0)
        );
        assert_eq!((a.reliability, a.verified, a.num_gpus), (0.99, true, 1));
        assert_eq!(a.public_ip.as_deref(), Some("1.2.3.4"));
        assert_eq!((a.min_bid, a.storage_dph), (None, None));
        let b = &offers[1];
        assert_eq!((b.id, b.dph_total, b.verified), (2, 0.5, false));
        assert_eq!(b.storage_dph, Some(0.125));
        assert_eq!(b.geolocation, None);
    }

    #[test]
    fn instance_statuses_stay_opaque() {
        let i = parse_instance(
            &json!({"actual_status": " scheduling ", "label": "x ", "num_gpus": "2"}),
            Some(9),
        )
        .unwrap();
        assert_eq!(i.id, 9);
        assert_eq!(i.actual_status.as_deref(), Some("scheduling"));
        assert_eq!(i.label.as_deref(), Some("x"));
        assert_eq!(i.num_gpus, Some(2));
        assert!(parse_instance(&json!({"actual_status": null}), None).is_none());
    }

    /// A price no host charges is no price: a negative one opened false headroom under the
    /// $/h cap, `1e308` filled doctor's line with 300 digits (a hostile walkthrough).
    #[test]
    fn a_price_no_host_charges_is_unknown() {
        let dph = |v: Value| {
            parse_instance(
                &json!({"id": 1, "dph_total": v, "storage_total_cost": v}),
                None,
            )
            .map(|i| (i.dph_total, i.storage_dph))
            .unwrap()
        };
        assert_eq!(dph(json!(0.4)), (Some(0.4), Some(0.4)));
        assert_eq!(dph(json!("0.4")), (Some(0.4), Some(0.4)));
        // A disk may cost nothing; a rented instance never does.
        assert_eq!(dph(json!(0)), (None, Some(0.0)));
        assert_eq!(dph(json!(1e-300)), (None, Some(1e-300)));
        assert_eq!(dph(json!("abc")), (None, None));
        assert_eq!(dph(json!(-5)), (None, None));
        assert_eq!(dph(json!(1e308)), (None, None));
        assert_eq!(dph(json!(DPH_MAX + 1.0)), (None, None));
    }

    #[test]
    fn helpers_cut_and_quote() {
        assert_eq!(last_lines("a\nb\nc\n", 2), "b\nc\n");
        assert_eq!(last_lines("a\nb", 5), "a\nb");
        assert_eq!(last_lines("", 3), "");
        assert_eq!(cut("héllo", 2), "hé…");
        assert_eq!(
            excerpt("<html>\n  <b>x</b>\n</html>"),
            "\"<html> <b>x</b> </html>\""
        );
        assert!(excerpt(&"x".repeat(1000)).chars().count() < EXCERPT_CHARS + 5);
    }
}
