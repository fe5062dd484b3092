//! The launch plan: every decision of `launch_instance`, as pure steps between the calls
//! the tool makes (src/tools/launch.rs executes them, in this order).
//!
//! 1. [`Ask::new`]: the label and the fleet facts as the call begins.
//! 2. [`gate`], given the ledger's row for that label: already executed, paused by the
//!    operator, not configured, the instance cap, the launch window, the daily cap with the
//!    fleet as it is, dry run.
//! 3. [`no_key`] without a vast.ai client; [`env_refused`] when a worker credential fails.
//! 4. [`search`]: the query, when this pass has no offers yet; [`searched`] with the answer.
//! 5. [`choose`]: the offer (the one asked for, or the best that fits the money), the money
//!    check on it, then the intent, the launching row and the create request.
//! 6. [`after_create`] with vast.ai's answer ([`after_orphan`] once the instance a failed
//!    create made anyway has been destroyed), and [`launched`] for the result of a success.

use std::collections::BTreeMap;

use serde_json::json;

use super::offers::{
    best_offer, check_offer_profit, config_query, is_profitable, matches_config, offer_json,
};
use super::result::ToolResult;
use crate::clock::Millis;
use crate::config::{Config, OfferType};
use crate::fleet::{Snapshot, LAUNCHING};
use crate::policy::guardrails::{self, LaunchFacts, Refusal};
use crate::store::actions::Action;
use crate::store::instances::InstanceRow;
use crate::text::clip;
use crate::vast::{CreateRequest, Offer, OfferQuery, VastError};

/// The worker environment variable that carries the instance's label (the Curio machine
/// name fleetagent matches workers by); set by the launch, never by the config.
pub use crate::config::LABEL_ENV;

/// The worker environment variable the worker image takes its Curio machine name from: the
/// launch sets it to the label, unless `[vast.env]` sets it (the operator's value is kept).
pub use crate::config::NODE_NAME_ENV;

/// How many offers a launch looks at (the cheapest ones matching `[vast.offers]`).
const SEARCH_LIMIT: u32 = 64;

/// The label of a launch: `<prefix>-<install id>-r<run>-<8 hex of the call id's FNV-1a
/// hash>`. The same install, run and call always give the same label, so a repeated call
/// finds its own intent; another install on the same account (same prefix) never takes it
/// for its own (`fleet::owner` reads the id back).
pub fn launch_label(prefix: &str, install_id: &str, run_id: i64, call_id: &str) -> String {
    format!(
        "{prefix}-{install_id}-r{run_id}-{:08x}",
        fnv1a(call_id.as_bytes()) as u32
    )
}

/// [`launch_label`], unless an instance of the snapshot that this run did not launch already
/// carries it: a run id used again (a database restored from a backup, older than the fleet)
/// would give a second instance the label, and the worker name, of one already rented. Then
/// the call id is salted (`call~1`, `call~2`, ...) until the label is free; the same snapshot
/// and call give the same label, so a repeated call still finds its own intent.
fn unused_label(snapshot: &Snapshot, config: &Config, run_id: i64, call_id: &str) -> String {
    let label = |salt: u32| {
        let call = match salt {
            0 => call_id.to_string(),
            n => format!("{call_id}~{n}"),
        };
        launch_label(
            &config.vast.label_prefix,
            &snapshot.install_id,
            run_id,
            &call,
        )
    };
    let taken = |l: &str| {
        snapshot
            .instances
            .iter()
            .any(|r| r.label.split('~').next() == Some(l) && r.launched_run != Some(run_id))
    };
    (0..=snapshot.instances.len() as u32)
        .map(label)
        .find(|l| !taken(l))
        .unwrap_or_else(|| label(0))
}

/// How many more offers a launch without `offer_id` tries when vast.ai answers that the one
/// chosen was taken meanwhile (`no_such_ask`): offers go fast on a busy market, and a launch
/// the fleet needs (WORKERS DEAD among them) would otherwise wait for the next pass.
pub const TAKEN_RETRIES: u32 = 2;

/// The call id of the `attempt`th retry of call `call_id` after a taken offer: a label of its
/// own (the failed attempt keeps the first), the same for the same call and attempt.
pub fn taken_retry_call_id(call_id: &str, attempt: u32) -> String {
    format!("{call_id}+{attempt}")
}

/// FNV-1a of `bytes`, its high half folded into the low one (the label keeps 32 bits).
fn fnv1a(bytes: &[u8]) -> u64 {
    let h = crate::text::fnv1a(bytes);
    h ^ (h >> 32)
}

/// The most of a call's reason the ledger keeps.
pub const REASON_CHARS: usize = 400;

/// The reason a call gives, clipped to [`REASON_CHARS`]; an empty one is refused.
pub fn reason(raw: &str) -> Result<String, ToolResult> {
    // Room for the rules' longest reason behind the floor's prefix: at 200 the over-cap
    // stop lost why that instance was picked (a walkthrough).
    let reason = clip(raw, REASON_CHARS);
    if reason.is_empty() {
        return Err(ToolResult::error(
            "invalid_args",
            json!({"message": "reason must not be empty"}),
        ));
    }
    Ok(reason)
}

/// What a launch knows as it begins: its arguments, its label and the fleet facts of the
/// snapshot (earlier calls of the same pass included).
#[derive(Debug, Clone, PartialEq)]
pub struct Ask {
    pub label: String,
    pub offer_id: Option<u64>,
    pub now: Millis,
    pub run_id: i64,
    pub workers_dead: bool,
    pub fleet_dph: f64,
    pub instances: u32,
    pub unconfirmed: u32,
    pub spent_today: f64,
    pub window: Vec<Millis>,
    /// Learned GPU rates (`Snapshot::measured_rates`) for ranking offers.
    pub measured_rates: crate::fleet::rates::Rates,
    /// ProofShare is switched off in Curio: no launch is made for it.
    pub proofshare_disabled: bool,
    /// The demand probe failed this pass (why): the fleet is held, nothing is launched.
    pub demand_unknown: Option<String>,
    /// An instance of ours Curio runs without PSProve (`Snapshot::taskless`, the first).
    pub taskless: Option<String>,
    /// The boot breaker holds a launch (`Snapshot::boot_wait`): why.
    pub boot_wait: Option<String>,
    /// What a proof earns this pass (None: unknown, the profit check is off).
    pub price: Option<crate::price::Price>,
    /// Our instances that bill and are not bids (for `policy.on_demand_min`).
    pub on_demand: u32,
    /// The operator's pause in force, if any: nothing is launched.
    pub paused: Option<crate::store::ops::Pause>,
    /// With `policy.dry_run`, the stopped instance the real call would start instead of
    /// renting ([`restart_candidate`]), so that the dry run says what the real pass does.
    pub would_restart: Option<i64>,
    /// Left-out hosts vast.ai lists matching offers on (`Snapshot::left_out_offers`): an
    /// empty search is theirs to say.
    pub left_out_hosts: Vec<u64>,
}

impl Ask {
    pub fn new(
        snapshot: &Snapshot,
        config: &Config,
        run_id: i64,
        call_id: &str,
        offer_id: Option<u64>,
        now: Millis,
    ) -> Ask {
        let mut ask = Ask {
            label: unused_label(snapshot, config, run_id, call_id),
            offer_id,
            now,
            run_id,
            workers_dead: snapshot.workers_dead(),
            fleet_dph: snapshot.fleet_dph(),
            instances: snapshot.billing_count(),
            unconfirmed: snapshot.unconfirmed_launches(),
            spent_today: snapshot.spent_today,
            window: snapshot.window_launches.clone(),
            measured_rates: snapshot.measured_rates.clone(),
            proofshare_disabled: snapshot
                .demand
                .as_ref()
                .is_some_and(|d| d.proofshare_disabled()),
            taskless: snapshot.taskless.first().cloned(),
            boot_wait: snapshot.boot_wait(),
            left_out_hosts: snapshot.left_out_offers.clone(),
            demand_unknown: snapshot.demand.is_none().then(|| {
                snapshot
                    .demand_error
                    .clone()
                    .unwrap_or_else(|| "the probe failed".into())
            }),
            price: snapshot.price.clone(),
            on_demand: snapshot
                .instances
                .iter()
                .filter(|r| crate::fleet::is_billing_state(r.state) && !r.is_bid)
                .count() as u32,
            paused: snapshot.paused.clone(),
            would_restart: None,
        };
        if config.policy.dry_run {
            ask.would_restart =
                restart_candidate(&ask, snapshot, config).and_then(|row| row.vast_id);
        }
        ask
    }

    fn facts(&self) -> LaunchFacts<'_> {
        LaunchFacts {
            now: self.now,
            fleet_dph: self.fleet_dph,
            instances: self.instances,
            unconfirmed: self.unconfirmed,
            window_launches: &self.window,
            workers_dead: self.workers_dead,
            spent_today: self.spent_today,
        }
    }
}

/// One launch row for the action ledger (kind `launch`, no label, no instance); the tool
/// adds the run, the actor, the call id, the reason and the time.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub outcome: &'static str,
    pub offer_id: Option<u64>,
    pub emergency: bool,
    pub detail: String,
}

/// A launch that ends before any create: the ledger row to write, if any, the result, and
/// the code a decision reads of it (the ledger's `code` column: [`Refusal::code`] for a
/// guardrail's refusal, [`failure_code`] for a failure vast.ai's rate limit caused).
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub record: Option<Entry>,
    pub result: ToolResult,
    pub code: Option<&'static str>,
}

impl Answer {
    /// A guardrail's refusal, recorded `refused` with the refusal's JSON as detail.
    pub fn refused(ask: &Ask, r: &Refusal, offer_id: Option<u64>) -> Answer {
        let result = r.to_result();
        Answer {
            record: Some(ask.entry("refused", offer_id, result.content.to_string())),
            result,
            code: Some(r.code()),
        }
    }

    /// vast.ai could not help (a failed search, no offer): recorded `failed`.
    fn failed(ask: &Ask, offer_id: Option<u64>, msg: String, code: Option<&'static str>) -> Answer {
        Answer {
            result: ToolResult::error("vast_error", json!({ "message": msg })),
            record: Some(ask.entry("failed", offer_id, msg)),
            code,
        }
    }
}

/// The code a failed call's ledger row keeps where a decision tells the failure apart:
/// `vast_rate_limited` for vast.ai's rate limit with the retries spent (the floor does not
/// launch after a model whose launch met it: its own would meet it too).
pub fn failure_code(e: &VastError) -> Option<&'static str> {
    matches!(e, VastError::RateLimited(_)).then_some(crate::store::actions::VAST_RATE_LIMITED)
}

/// vast.ai's error codes of a create refused for the account, whatever the offer: the floor's
/// own launch would be refused alike.
const ACCOUNT_REFUSALS: [&str; 6] = [
    "missing_billing",
    "insufficient_credit",
    "invalid_token",
    "auth_error",
    "not_authorized",
    "label_too_long",
];

/// The code of a failed create: [`failure_code`]'s, or one that names the offer as the cause:
/// `offer_taken` (rented by someone else meanwhile) and, for an offer the caller named
/// (`named`), `offer_refused` (a 400, 404 or 409-like refusal but an account's: a host in
/// maintenance). The floor does not launch after a model whose launch failed at vast.ai (its
/// own would fail alike), except on these: its own launch picks its own offer (a re-test: a
/// model naming a host in maintenance pass after pass held the floor's WORKERS DEAD launch
/// while other offers rented fine). 401 and 403 are the key's or the account's; a launch that
/// picked its offer itself would pick it again (a second re-test saw each pass send three
/// failing creates, the floor's two blamed on the model).
pub fn create_failure_code(e: &VastError, named: bool) -> Option<&'static str> {
    match e {
        VastError::NoSuchAsk(_) => Some(crate::store::actions::OFFER_TAKEN),
        VastError::Api { status, code, .. }
            if named
                && (400..500).contains(status)
                && !matches!(status, 401 | 403)
                && !ACCOUNT_REFUSALS.contains(&code.as_str()) =>
        {
            Some(crate::store::actions::OFFER_REFUSED)
        }
        _ => failure_code(e),
    }
}

impl Ask {
    fn entry(&self, outcome: &'static str, offer_id: Option<u64>, detail: String) -> Entry {
        Entry {
            outcome,
            offer_id,
            emergency: self.workers_dead,
            detail,
        }
    }
}

/// The checks before any call to vast.ai, given the ledger's launch under this label (a
/// retried tool call). `None`: they all pass.
pub fn gate(ask: &Ask, config: &Config, prev: Option<&Action>) -> Option<Answer> {
    if let Some(prev) = prev {
        return Some(already(ask, prev));
    }
    if let Err(r) = guardrails::check_paused(ask.paused.as_ref(), false) {
        return Some(Answer::refused(ask, &r, ask.offer_id));
    }
    let policy = &config.policy;
    let facts = ask.facts();
    if let Some(why) = &ask.demand_unknown {
        let r = Refusal::DemandUnknown {
            why: clip(why, 200),
        };
        return Some(Answer::refused(ask, &r, ask.offer_id));
    }
    if ask.proofshare_disabled {
        return Some(Answer::refused(
            ask,
            &Refusal::ProofShareDisabled,
            ask.offer_id,
        ));
    }
    if let Some(which) = &ask.taskless {
        let r = Refusal::NoPsprove {
            which: clip(which, 300),
        };
        return Some(Answer::refused(ask, &r, ask.offer_id));
    }
    if let Some(message) = &ask.boot_wait {
        let r = Refusal::BootFailures {
            message: clip(message, 600),
        };
        return Some(Answer::refused(ask, &r, ask.offer_id));
    }
    let slots = guardrails::check_configured(config)
        .and_then(|()| guardrails::check_launch_slots(&facts, policy));
    let slots = match slots {
        Ok(w) => w,
        Err(r) => return Some(Answer::refused(ask, &r, ask.offer_id)),
    };
    // The daily cap with the fleet as it is: no offer could fit.
    if let Err(r) = guardrails::check_launch_money(&facts, 0.0, policy) {
        if r.code() == "daily_spend" {
            return Some(Answer::refused(ask, &r, ask.offer_id));
        }
    }
    if !policy.dry_run {
        return None;
    }
    let (detail, message) = match ask.would_restart {
        Some(id) => (
            format!("dry_run: would start stopped instance {id} (stop_mode = \"stop\") instead of renting"),
            format!("policy.dry_run is on: nothing was sent to vast.ai; the real call would start stopped instance {id} (vast.stop_mode = \"stop\") instead of renting a new one; the caps allow it"),
        ),
        None => (
            "dry_run: would search offers and launch one".to_string(),
            "policy.dry_run is on: nothing was sent to vast.ai; the instance cap, the launch window and the daily cap allow this launch".to_string(),
        ),
    };
    Some(Answer {
        record: Some(ask.entry("dry_run", ask.offer_id, detail)),
        result: ToolResult::error(
            "dry_run",
            json!({
                "would": "launch_instance",
                "offer_id": ask.offer_id,
                "restart": ask.would_restart,
                "window": format!("{}/{} used", slots.used, slots.limit),
                "message": message,
            }),
        ),
        code: None,
    })
}

/// The same call again: answered from the ledger, nothing recorded, never rented twice.
fn already(ask: &Ask, prev: &Action) -> Answer {
    let label = &ask.label;
    Answer {
        record: None,
        result: ToolResult::ok(
            json!({
                "ok": prev.outcome == "ok",
                "already": prev.outcome,
                "label": label,
                "instance_id": prev.instance_id,
                "message": "this call was already executed; nothing new was sent to vast.ai",
            }),
            false,
            format!("launch {label} already {}", prev.outcome),
        ),
        code: None,
    }
}

/// No vast.ai client (no API key).
pub fn no_key(ask: &Ask) -> Answer {
    let r = Refusal::NotConfigured {
        key: None,
        message: "no vast.ai API key: set VAST_API_KEY or the vast_api_key credential".into(),
    };
    Answer::refused(ask, &r, ask.offer_id)
}

/// The credential of worker env variable `name` could not be read (`error`, its whole chain).
pub fn env_refused(ask: &Ask, name: &str, error: &str) -> Answer {
    let r = Refusal::NotConfigured {
        key: Some(format!("vast.env.{name}")),
        message: clip(error, 300),
    };
    Answer::refused(ask, &r, ask.offer_id)
}

/// The search to make: the offers matching `[vast.offers]`, once per pass (`None` when this
/// pass already has them).
pub fn search(snapshot: &Snapshot, config: &Config) -> Option<OfferQuery> {
    snapshot.offers.is_none().then(|| {
        let mut q = config_query(config, None, None, SEARCH_LIMIT);
        q.exclude_machines = bad_hosts(snapshot);
        q
    })
}

/// The hosts that failed us and those the operator just took an instance off, as the
/// search leaves them out.
pub fn bad_hosts(snapshot: &Snapshot) -> Vec<u64> {
    let mut hosts: Vec<u64> = snapshot
        .bad_hosts
        .iter()
        .chain(&snapshot.operator_hosts)
        .filter_map(|&m| u64::try_from(m).ok())
        .collect();
    hosts.sort_unstable();
    hosts.dedup();
    hosts
}

/// The search's answer: the offers that match `[vast.offers]` (checked here too, whatever
/// the server did), kept for the pass; or the failure, recorded.
pub fn searched(
    ask: &Ask,
    config: &Config,
    bad_hosts: &[u64],
    found: Result<Vec<Offer>, VastError>,
) -> Result<Vec<Offer>, Box<Answer>> {
    match found {
        Ok(o) => Ok(o
            .into_iter()
            .filter(|o| matches_config(o, config))
            .filter(|o| !o.machine_id.is_some_and(|m| bad_hosts.contains(&m)))
            .collect()),
        Err(VastError::SearchQuota { reset }) => {
            let (msg, result) = quota_exhausted(&reset);
            Err(Box::new(Answer {
                result,
                record: Some(ask.entry("failed", ask.offer_id, msg)),
                code: None,
            }))
        }
        Err(e) => {
            let msg = clip(&e.to_string(), 300);
            let code = failure_code(&e);
            Err(Box::new(Answer::failed(ask, ask.offer_id, msg, code)))
        }
    }
}

/// What a launch or a search says once vast.ai's daily search quota is spent (`reset`: its
/// `X-RateLimit-Reset` as sent): the message, and the tool's result carrying it.
pub fn quota_exhausted(reset: &str) -> (String, ToolResult) {
    let until = crate::vast::quota_until(reset);
    let msg = format!(
        "vast.ai search quota exhausted until {until}: no offer can be searched (or rented) \
         before then; do not retry this pass"
    );
    let result = ToolResult::error(
        "vast_error",
        json!({"message": msg, "search_quota_exhausted": true, "until": until}),
    );
    (msg, result)
}

/// A launch that goes out: the intent (committed with the launching row before the create
/// is sent) and the create request.
#[derive(Debug, Clone, PartialEq)]
pub struct Create {
    pub offer: Offer,
    /// The intent's detail.
    pub intent_detail: String,
    /// The launching row (no vast id yet).
    pub row: InstanceRow,
    pub request: CreateRequest,
}

/// The offer to rent among `offers` (this pass's, rented ones removed) and the money check
/// on it; `env` is `[vast.env]` with its credentials resolved.
pub fn choose(
    ask: &Ask,
    config: &Config,
    offers: &[Offer],
    env: BTreeMap<String, String>,
) -> Result<Create, Box<Answer>> {
    let offer = pick(ask, config, offers)?;
    let price = ask.price.as_ref();
    if let Err(r) = check_offer_profit(&offer, config, &ask.measured_rates, price, None) {
        return Err(Box::new(Answer::refused(ask, &r, Some(offer.id))));
    }
    if let Err(r) = guardrails::check_launch_money(&ask.facts(), offer.dph_total, &config.policy) {
        return Err(Box::new(Answer::refused(ask, &r, Some(offer.id))));
    }
    Ok(create(ask, config, offer, env))
}

/// The ledger's and the tool's code of a launch no offer outside the hosts left out could
/// serve ([`Ask::left_out_hosts`]).
pub const BAD_HOSTS: &str = "bad_hosts";

/// The offer asked for, or the best profitable one within the money headroom, or (none
/// fits) the cheapest profitable one, for the money check to refuse naming the limit it
/// breaks. No profitable offer at all (a known price): refused `unprofitable`.
fn pick(ask: &Ask, config: &Config, offers: &[Offer]) -> Result<Offer, Box<Answer>> {
    if let Some(id) = ask.offer_id {
        return offers.iter().find(|o| o.id == id).cloned().ok_or_else(|| {
            let msg = format!(
                "offer {id} is not among the current offers matching [vast.offers] (unknown, \
                 taken, or outside the configured filters); call search_offers, or omit offer_id"
            );
            Box::new(Answer {
                result: ToolResult::error("invalid_args", json!({ "message": msg })),
                record: Some(ask.entry("refused", Some(id), msg)),
                code: None,
            })
        });
    }
    if offers.is_empty() && !ask.left_out_hosts.is_empty() {
        // Not vast.ai's failing: the hosts left out may be all it has (a soak saw a dead fleet
        // wait a day for them, every line blaming vast.ai).
        let msg = format!(
            "vast.ai lists rentable offers matching [vast.offers] only on {} host(s) left out ({}): hosts that failed us are left out for vast.offers.bad_host_hours, those the operator took an instance off for policy.operator_hold_mins",
            ask.left_out_hosts.len(),
            crate::text::first_and_more(ask.left_out_hosts.iter().map(u64::to_string), 6)
        );
        return Err(Box::new(Answer {
            result: ToolResult::error(BAD_HOSTS, json!({ "message": msg })),
            record: Some(ask.entry("refused", None, msg)),
            code: Some(BAD_HOSTS),
        }));
    }
    if offers.is_empty() {
        let msg = "vast.ai has no rentable offer matching [vast.offers] right now";
        return Err(Box::new(Answer::failed(ask, None, msg.into(), None)));
    }
    let price = ask.price.as_ref();
    let profitable: Vec<Offer> = offers
        .iter()
        .filter(|o| is_profitable(o, config, &ask.measured_rates, price))
        .cloned()
        .collect();
    if profitable.is_empty() {
        let cheapest = best_offer(offers, config, &ask.measured_rates).unwrap_or(&offers[0]);
        let among = Some(offers.len());
        if let Err(r) = check_offer_profit(cheapest, config, &ask.measured_rates, price, among) {
            return Err(Box::new(Answer::refused(ask, &r, Some(cheapest.id))));
        }
        let msg = "no offer passed the profit check";
        return Err(Box::new(Answer::failed(ask, None, msg.into(), None)));
    }
    let offers = &profitable[..];
    let headroom = guardrails::offer_headroom(&ask.facts(), &config.policy);
    let fitting: Vec<Offer> = offers
        .iter()
        .filter(|o| o.dph_total <= headroom + 1e-9)
        .cloned()
        .collect();
    Ok(match best_offer(&fitting, config, &ask.measured_rates) {
        Some(o) => o.clone(),
        None => offers
            .iter()
            .min_by(|a, b| a.dph_total.total_cmp(&b.dph_total))
            .cloned()
            .unwrap_or_else(|| offers[0].clone()),
    })
}

/// How a launch's ledger detail names the bid it placed (`offer 7 RTX 3090 $0.2550/h, a bid
/// at $0.1440/h`): the action's `dph` stays the offer's full price, which the caps count while
/// a bid can resume, and the journal's line shows the bid from here.
pub const BID_AT: &str = ", a bid at $";

fn create(ask: &Ask, config: &Config, offer: Offer, mut env: BTreeMap<String, String>) -> Create {
    env.insert(LABEL_ENV.into(), ask.label.clone());
    env.entry(NODE_NAME_ENV.into())
        .or_insert_with(|| ask.label.clone());
    let row = InstanceRow {
        label: ask.label.clone(),
        vast_id: None,
        state: LAUNCHING,
        actual_status: None,
        status_msg: None,
        gpu_name: Some(offer.gpu_name.clone()),
        dph: Some(offer.dph_total),
        offer_id: Some(offer.id as i64),
        public_ip: None,
        machine_name: None,
        worker_address: None,
        launched_run: (ask.run_id > 0).then_some(ask.run_id),
        adopted: false,
        created_at: ask.now,
        state_since: ask.now,
        last_seen_at: None,
        gone_at: None,
        machine_id: None,
        is_bid: false,
        storage_dph: None,
        paused_spans: Vec::new(),
    };
    let bid_price = match config.vast.offers.offer_type {
        OfferType::OnDemand => None,
        OfferType::Interruptible => bid_or_on_demand(ask, config, &offer),
    };
    let mut row = row;
    row.is_bid = bid_price.is_some();
    let request = CreateRequest {
        offer_id: offer.id,
        image: config.vast.image.clone().unwrap_or_default(),
        disk_gb: config.vast.disk_gb,
        label: ask.label.clone(),
        env,
        onstart: config.vast.onstart.clone(),
        bid_price,
        // Set by the tool from the vast_image_login credential, never kept in the plan.
        image_login: None,
    };
    Create {
        intent_detail: format!(
            "offer {} {} ${:.4}/h{}",
            offer.id,
            offer.gpu_name,
            offer.dph_total,
            request
                .bid_price
                .map(|b| format!("{BID_AT}{b:.4}/h"))
                .unwrap_or_default()
        ),
        offer,
        row,
        request,
    }
}

/// The bid for an interruptible offer: `vast.offers.bid_factor` x its `min_bid` (a bid at
/// `min_bid` is outbid by anyone bidding a cent more), never above
/// `vast.offers.max_dph_per_instance`; the offer's `dph_total` when it reports no `min_bid`.
/// Rounded to 0.1 mills, up where rounding would go below the bid (a `min_bid` of 0.266644
/// at `bid_factor = 1.0` bid 0.2666, refused `insufficient_bid` pass after pass: a walkthrough),
/// at least vast.ai's 0.001.
pub fn bid_price(offer: &Offer, config: &Config) -> f64 {
    let o = &config.vast.offers;
    let mut bid = match offer.min_bid.filter(|b| b.is_finite() && *b > 0.0) {
        Some(min) => min * o.bid_factor,
        None => offer.dph_total,
    };
    if let Some(max) = o.max_dph_per_instance {
        bid = bid.min(max);
    }
    let mut rounded = (bid * 1e4).round() / 1e4;
    if rounded + 1e-9 < bid {
        rounded = (bid * 1e4).ceil() / 1e4;
    }
    // Rounded up, never past the cap (a cap with a fifth decimal).
    if let Some(max) = o.max_dph_per_instance {
        rounded = rounded.min(max);
    }
    rounded.max(0.001)
}

/// With `vast.offers.type = "interruptible"`: the bid to place on this offer, or None to rent
/// it on demand. A bid is placed only where its $/proof ([`bid_price`] over the GPU's rate)
/// beats the offer's on-demand $/proof (the offer chosen is the best on-demand one per proof)
/// by `policy.bid_discount_min`, and once `policy.on_demand_min` on-demand instances of ours
/// bill as a base (an outbid bid proves nothing until it resumes). The offer passed the
/// profit check at the cheaper of its bid and on demand ([`crate::policy::offers::rent_dph`]):
/// where its on-demand price would not pass it, the bid is placed whatever else holds (a
/// walkthrough saw an offer judged at its bid rented on demand at a loss on every proof).
pub fn bid_or_on_demand(ask: &Ask, config: &Config, offer: &Offer) -> Option<f64> {
    let rate = crate::fleet::rates::gpu_rate(config, &ask.measured_rates, &offer.gpu_name);
    let bid = bid_price(offer, config);
    if !crate::price::profitable(ask.price.as_ref(), offer.dph_total, rate, config) {
        return Some(bid);
    }
    if ask.on_demand < config.policy.on_demand_min {
        return None;
    }
    let bid_per_proof =
        crate::price::cost_per_proof(crate::policy::offers::bid_dph(offer, config), rate);
    let on_demand_per_proof = crate::price::cost_per_proof(offer.dph_total, rate);
    (bid_per_proof <= on_demand_per_proof * (1.0 - config.policy.bid_discount_min) + 1e-12)
        .then_some(bid)
}

/// What follows vast.ai's answer to the create.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    Settle(Settle),
    /// The create failed and vast.ai made instance `new_contract` anyway (a stopped one, for
    /// a bid too low): it would bill its disk and never prove. Destroy it, then [`after_orphan`].
    DestroyOrphan {
        new_contract: u64,
        error: VastError,
    },
}

/// How the intent ends (or stays open).
#[derive(Debug, Clone, PartialEq)]
pub enum Settle {
    /// Created: settle the intent `ok` with the instance, write `row` (it has its id now),
    /// count it in the snapshot; [`launched`] gives the result.
    Launched {
        instance_id: u64,
        row: Box<InstanceRow>,
    },
    /// The create may have gone through: note `note` on the intent, left open for the next
    /// pass's reconciliation, and count the launching row meanwhile.
    Open { note: String, result: ToolResult },
    /// It did not: settle the intent `failed` with `detail` and delete the launching row.
    Failed { detail: String, result: ToolResult },
}

pub fn after_create(create: &Create, answer: Result<u64, VastError>) -> Next {
    match answer {
        Ok(instance_id) => {
            let mut row = Box::new(create.row.clone());
            row.vast_id = Some(instance_id as i64);
            Next::Settle(Settle::Launched { instance_id, row })
        }
        Err(VastError::CreateFailed { new_contract, msg }) => Next::DestroyOrphan {
            new_contract,
            error: VastError::CreateFailed { new_contract, msg },
        },
        Err(e) => Next::Settle(failure(create, &e)),
    }
}

pub use crate::fleet::reconcile::{orphan_of, ORPHAN_NOTE};

/// The create failed with `error` (a `CreateFailed`) and the destroy of the instance it made
/// answered `destroyed`. Were the destroy to fail, the intent stays open with an
/// [`ORPHAN_NOTE`], and the next pass that lists the instance destroys it.
pub fn after_orphan(
    create: &Create,
    error: &VastError,
    destroyed: Result<(), &VastError>,
) -> Settle {
    if let (VastError::CreateFailed { new_contract, msg }, Err(e)) = (error, destroyed) {
        if !matches!(e, VastError::NoSuchInstance(_)) {
            let note = clip(
                &format!(
                    "{ORPHAN_NOTE}{new_contract}: create failed ({msg}), vast.ai made the instance anyway, and its destroy failed ({e}): the next pass that lists it destroys it"
                ),
                300,
            );
            return Settle::Open {
                result: ToolResult::error(
                    "vast_error",
                    json!({
                        "message": note,
                        "label": create.row.label,
                        "instance_id": new_contract,
                        "note": "not launched: the instance vast.ai made is destroyed by the next pass; do not launch again for it before that",
                    }),
                ),
                note,
            };
        }
    }
    match (error, destroyed) {
        (
            VastError::CreateFailed { new_contract, msg },
            Ok(()) | Err(VastError::NoSuchInstance(_)),
        ) => {
            let msg = clip(
                &format!(
                    "create failed ({msg}); vast.ai made instance {new_contract} anyway, destroyed"
                ),
                300,
            );
            Settle::Failed {
                result: ToolResult::error(
                    "vast_error",
                    json!({ "message": msg, "offer_id": create.offer.id, "destroyed": new_contract }),
                ),
                detail: msg,
            }
        }
        _ => failure(create, error),
    }
}

/// A create whose answer says nothing sure (`message` why): its intent is left open for the
/// next listing to settle by the label, and the result says not to launch again for it.
pub fn left_open(create: &Create, message: String) -> Settle {
    Settle::Open {
        result: ToolResult::error(
            "vast_error",
            json!({
                "message": message,
                "label": create.row.label,
                "may_have_created": true,
                "note": "the create may have gone through: it is kept as an open launch and the next pass checks the listing for its label; do not launch again for it",
            }),
        ),
        note: message,
    }
}

fn failure(create: &Create, e: &VastError) -> Settle {
    let msg = clip(&e.to_string(), 300);
    if e.may_have_created() {
        return left_open(create, msg);
    }
    let mut details = json!({ "message": msg, "offer_id": create.offer.id });
    if matches!(e, VastError::NoSuchAsk(_)) {
        details["note"] = json!(
            "the offer was taken meanwhile; launch again for another (without offer_id, the next best offers are tried in turn)"
        );
    }
    Settle::Failed {
        detail: msg,
        result: ToolResult::error("vast_error", details),
    }
}

/// The result of a launch that went through, from the snapshot that counts it, at `after`.
pub fn launched(
    ask: &Ask,
    config: &Config,
    create: &Create,
    instance_id: u64,
    snapshot: &Snapshot,
    after: Millis,
) -> ToolResult {
    let offer = &create.offer;
    let w = guardrails::window_state(
        &snapshot.window_launches,
        after,
        &config.policy,
        ask.workers_dead,
    );
    ToolResult::ok(
        json!({
            "ok": true,
            "instance_id": instance_id,
            "label": ask.label,
            "offer": offer_json(offer, config, &ask.measured_rates),
            "fleet_dph": round2(snapshot.fleet_dph()),
            "window": format!("{}/{} used{}", w.used, w.limit, if w.emergency { " (emergency)" } else { "" }),
        }),
        true,
        format!(
            "launched {instance_id} ({} ${:.2}/h){}",
            offer.gpu_name,
            offer.dph_total,
            if ask.workers_dead { " emergency" } else { "" }
        ),
    )
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

mod restart;
pub use restart::{after_start, restart_candidate};

#[cfg(test)]
mod tests;

#[cfg(test)]
mod profit_tests;
