//! The launch plan, step by step.

use super::*;
use crate::demand::Demand;
use serde_json::Value;

const NOW: Millis = 1_000_000_000;
const MIN: Millis = 60_000;

fn config() -> Config {
    let mut c = Config::default();
    c.vast.image = Some("img".into());
    c.policy.max_dph_total = Some(10.0);
    c.policy.max_instances = Some(20);
    c
}

fn offer(id: u64, gpu: &str, dph: f64) -> Offer {
    Offer {
        min_bid: Some(0.2),
        ..crate::fleet::fixtures::offer(id, gpu, dph)
    }
}

fn row(id: i64, dph: f64) -> InstanceRow {
    InstanceRow {
        label: format!("fleetagent-{id}"),
        vast_id: Some(id),
        state: crate::fleet::PROVING,
        actual_status: Some("running".into()),
        status_msg: None,
        gpu_name: Some("RTX 4090".into()),
        dph: Some(dph),
        offer_id: None,
        public_ip: None,
        machine_name: None,
        worker_address: None,
        launched_run: None,
        adopted: false,
        created_at: NOW - MIN,
        state_since: NOW - MIN,
        last_seen_at: Some(NOW),
        gone_at: None,
        machine_id: None,
        is_bid: false,
        storage_dph: None,
        paused_spans: Vec::new(),
    }
}

/// A fleet of `n` instances at $1/h each, demand known (workers dead when `dead`).
fn snap(n: i64, dead: bool) -> Snapshot {
    Snapshot {
        now: NOW,
        demand: Some(Demand {
            pending: if dead { 4 } else { 0 },
            ..Default::default()
        }),
        instances: (1..=n).map(|i| row(i, 1.0)).collect(),
        install_id: "qwerty".into(),
        ..Default::default()
    }
}

fn ask(s: &Snapshot, c: &Config, offer_id: Option<u64>) -> Ask {
    Ask::new(s, c, 7, "call_1", offer_id, NOW)
}

fn gate_of(s: &Snapshot, c: &Config, offer_id: Option<u64>) -> Option<Answer> {
    gate(&ask(s, c, offer_id), c, None)
}

fn choose_of(
    s: &Snapshot,
    c: &Config,
    id: Option<u64>,
    o: &[Offer],
) -> Result<Create, Box<Answer>> {
    choose(&ask(s, c, id), c, o, BTreeMap::new())
}

fn refused_with(a: &Answer, code: &str, offer_id: Option<u64>) {
    assert_eq!(a.result.error_code(), Some(code), "{:?}", a.result);
    let e = a.record.as_ref().expect("a refusal is recorded");
    assert_eq!(e.outcome, "refused");
    assert_eq!(e.offer_id, offer_id);
    assert_eq!(e.detail, a.result.content.to_string());
}

#[test]
fn labels_are_stable_short_and_distinct() {
    let a = launch_label("fleetagent", "qwerty", 42, "call_abc");
    assert_eq!(a, launch_label("fleetagent", "qwerty", 42, "call_abc"));
    assert!(a.starts_with("fleetagent-qwerty-r42-"), "{a}");
    assert_eq!(a.len(), "fleetagent-qwerty-r42-".len() + 8);
    assert_ne!(a, launch_label("fleetagent", "qwerty", 42, "call_abd"));
    assert_ne!(a, launch_label("fleetagent", "qwerty", 43, "call_abc"));
    assert_ne!(a, launch_label("fleetagent", "asdfgh", 42, "call_abc"));
    assert!(crate::fleet::is_ours(Some(&a), "fleetagent", "qwerty"));
    // Another install with the same prefix sees it as not its own, and names its id.
    assert_eq!(
        crate::fleet::owner(Some(&a), "fleetagent", "asdfgh"),
        crate::fleet::Owner::OtherInstall("qwerty")
    );
}

#[test]
fn reasons_are_clipped_and_never_empty() {
    assert_eq!(reason("  scale\n up ").unwrap(), "scale up");
    assert_eq!(reason(&"x".repeat(300)).unwrap().chars().count(), 300);
    assert_eq!(
        reason(&"x".repeat(900)).unwrap().chars().count(),
        REASON_CHARS
    );
    let r = reason(" \n").unwrap_err();
    assert_eq!(
        r.content,
        json!({"error": "invalid_args", "message": "reason must not be empty"})
    );
}

#[test]
fn the_ask_reads_the_fleet_facts() {
    let mut s = snap(2, true);
    s.spent_today = 3.5;
    s.window_launches = vec![NOW - MIN];
    let a = ask(&s, &config(), Some(9));
    assert_eq!(a.label, launch_label("fleetagent", "qwerty", 7, "call_1"));
    assert_eq!((a.instances, a.fleet_dph, a.spent_today), (2, 2.0, 3.5));
    assert_eq!(
        (a.window, a.workers_dead, a.offer_id),
        (vec![NOW - MIN], true, Some(9))
    );
}

#[test]
fn a_repeated_call_is_answered_from_the_ledger() {
    let c = config();
    let s = snap(0, false);
    let a = ask(&s, &c, None);
    let prev = Action {
        id: 1,
        run_id: Some(7),
        kind: "launch".into(),
        outcome: "ok".into(),
        actor: "llm".into(),
        instance_id: Some(4242),
        label: Some(a.label.clone()),
        offer_id: Some(5),
        dph: Some(0.4),
        emergency: false,
        reason: None,
        detail: None,
        created_at: NOW - MIN,
    };
    let ans = gate(&a, &c, Some(&prev)).unwrap();
    assert_eq!((ans.record, ans.result.mutated), (None, false));
    assert_eq!(
        ans.result.content,
        json!({"ok": true, "already": "ok", "label": a.label, "instance_id": 4242,
               "message": "this call was already executed; nothing new was sent to vast.ai"})
    );
    assert_eq!(ans.result.gist, format!("launch {} already ok", a.label));
}

#[test]
fn unset_keys_refuse_before_anything() {
    let c = Config::default();
    let s = snap(0, false);
    let ans = gate_of(&s, &c, Some(3)).unwrap();
    refused_with(&ans, "not_configured", Some(3));
    assert_eq!(ans.result.content["key"], "vast.image");
}

#[test]
fn a_pause_refuses_even_an_emergency_and_is_recorded() {
    let c = config();
    let mut s = snap(0, true);
    s.paused = Some(crate::store::ops::Pause {
        since: NOW - MIN,
        until: None,
        reason: "maintenance".into(),
    });
    let ans = gate_of(&s, &c, None).unwrap();
    refused_with(&ans, "paused", None);
    assert_eq!(ans.result.content["reason"], "maintenance");
    assert!(
        ans.record.unwrap().emergency,
        "WORKERS DEAD, refused all the same"
    );
}

/// A failed probe holds the fleet for everyone: a model that launches on a belief of the
/// last pass ("workers dead") is refused, naming why demand is unknown (a walkthrough saw
/// such launches go through while the journal and doctor said nothing was launched).
#[test]
fn unknown_demand_refuses_every_launch() {
    let c = config();
    let mut s = snap(0, false);
    s.demand = None;
    s.demand_error = Some("demand command exited 3".into());
    let ans = gate_of(&s, &c, Some(5)).unwrap();
    refused_with(&ans, "demand_unknown", Some(5));
    let message = ans.result.content["message"].as_str().unwrap();
    assert!(message.contains("demand command exited 3"), "{message}");
    s.demand_error = None;
    refused_with(&gate_of(&s, &c, None).unwrap(), "demand_unknown", None);
}

#[test]
fn the_instance_cap_refuses() {
    let mut c = config();
    c.policy.max_instances = Some(2);
    let s = snap(2, false);
    let ans = gate_of(&s, &c, None).unwrap();
    refused_with(&ans, "instance_cap", None);
    assert_eq!(ans.result.content["instances"], 2);
}

#[test]
fn a_full_window_refuses_unless_workers_are_dead() {
    let c = config();
    let mut s = snap(0, false);
    s.window_launches = vec![NOW - 10 * MIN, NOW - 5 * MIN, NOW - MIN];
    let ans = gate_of(&s, &c, None).unwrap();
    refused_with(&ans, "rate_limited", None);
    assert_eq!(ans.result.content["retry_after_secs"], 300);
    // WORKERS DEAD: the emergency total (6) applies.
    let mut dead = snap(0, true);
    dead.window_launches = s.window_launches.clone();
    assert_eq!(gate_of(&dead, &c, None), None);
    dead.window_launches.extend([NOW, NOW, NOW]);
    let ans = gate_of(&dead, &c, None).unwrap();
    refused_with(&ans, "rate_limited", None);
    assert!(ans.record.unwrap().emergency);
}

#[test]
fn the_daily_cap_refuses_before_the_search_when_the_fleet_alone_breaks_it() {
    let mut c = config();
    c.policy.daily_spend_max = Some(30.0);
    let mut s = snap(2, false);
    s.spent_today = 28.5;
    // 28.5 + 2.0 * 1 h > 30: no offer could fit.
    let ans = gate_of(&s, &c, None).unwrap();
    refused_with(&ans, "daily_spend", None);
    // Within it, the budget (which depends on the offer) waits for the offer.
    s.spent_today = 20.0;
    c.policy.max_dph_total = Some(1.0);
    assert_eq!(gate_of(&s, &c, None), None);
}

#[test]
fn dry_run_records_and_sends_nothing() {
    let mut c = config();
    c.policy.dry_run = true;
    let mut s = snap(1, false);
    s.window_launches = vec![NOW - MIN];
    let ans = gate_of(&s, &c, Some(5)).unwrap();
    assert_eq!(
        ans.record,
        Some(Entry {
            outcome: "dry_run",
            offer_id: Some(5),
            emergency: false,
            detail: "dry_run: would search offers and launch one".into(),
        })
    );
    assert_eq!(ans.result.error_code(), Some("dry_run"));
    assert_eq!(ans.result.content["window"], "1/3 used");
    assert_eq!(ans.result.content["offer_id"], 5);
}

#[test]
fn a_dry_run_with_stop_mode_stop_names_the_instance_the_real_call_would_start() {
    let mut c = config();
    c.policy.dry_run = true;
    c.vast.stop_mode = crate::config::StopMode::Stop;
    let mut s = snap(1, false);
    let mut stopped = row(2, 0.8);
    stopped.state = crate::fleet::STOPPED;
    stopped.storage_dph = Some(0.05);
    s.instances.push(stopped);
    let ans = gate_of(&s, &c, None).unwrap();
    assert_eq!(
        ans.record.as_ref().map(|e| e.detail.as_str()),
        Some("dry_run: would start stopped instance 2 (stop_mode = \"stop\") instead of renting")
    );
    assert_eq!(ans.result.content["restart"], 2);
    // An offer named by the model is rented, as the real call does.
    let ans = gate_of(&s, &c, Some(5)).unwrap();
    assert_eq!(
        ans.record.map(|e| e.detail),
        Some("dry_run: would search offers and launch one".into())
    );
    // On a host the operator just took an instance off: not started again (the re-test saw
    // the one stopped "host looks bad" started ten seconds later).
    s.instances[1].machine_id = Some(30_000);
    s.operator_hosts = vec![30_000];
    let ans = gate_of(&s, &c, None).unwrap();
    assert_eq!(
        ans.record.map(|e| e.detail),
        Some("dry_run: would search offers and launch one".into())
    );
}

/// Spares never started again in place of a rental: one on a host that failed us (an exited
/// one the rules had just stopped was started again by the same pass, every pass), one made
/// with another image than `vast.image`, one whose GPU or $/h `[vast.offers]` no longer rents.
#[test]
fn a_spare_that_failed_or_no_longer_matches_the_config_is_not_started_again() {
    let mut c = config();
    c.vast.stop_mode = crate::config::StopMode::Stop;
    let mut s = snap(1, true);
    let mut spare = row(2, 0.8);
    spare.state = crate::fleet::STOPPED;
    spare.machine_id = Some(40_000);
    s.instances.push(spare);
    let started = |s: &Snapshot, c: &Config| {
        restart_candidate(&ask(s, c, None), s, c).and_then(|r| r.vast_id)
    };
    assert_eq!(started(&s, &c), Some(2));
    let mut failed = s.clone();
    failed.bad_hosts = vec![40_000];
    assert_eq!(started(&failed, &c), None, "on a host that failed us");
    let mut old_image = s.clone();
    old_image.other_image = vec![2];
    assert_eq!(started(&old_image, &c), None, "made with another image");
    let mut gpus = c.clone();
    gpus.vast.offers.gpu_names = vec!["H100".into()];
    assert_eq!(started(&s, &gpus), None, "a GPU no longer asked for");
    gpus.vast.offers.gpu_names.push("rtx_4090".into());
    assert_eq!(
        started(&s, &gpus),
        Some(2),
        "as offers match: `_` and any case"
    );
    let mut dear = c.clone();
    dear.vast.offers.max_dph_per_instance = Some(0.5);
    assert_eq!(started(&s, &dear), None, "dearer than max_dph_per_instance");
    // Its GPU part, $0.80/h over 20 proofs/h, is $0.04 a proof: it pays at $0.06 a proof
    // (at most $0.048 at a 20 % margin), not at $0.04 (the walkthrough saw it started in
    // the pass whose rental at the same $/h was refused `unprofitable`).
    let mut priced = s.clone();
    priced.price = Some(price(0.06));
    assert_eq!(started(&priced, &c), Some(2));
    priced.price = Some(price(0.04));
    assert_eq!(started(&priced, &c), None, "it would lose on every proof");
    // Its disk bills while stopped anyway: only the GPU part counts.
    priced.instances[1].storage_dph = Some(0.2);
    assert_eq!(started(&priced, &c), Some(2), "$0.60/h is $0.03 a proof");
}

/// A price at `usd` a proof.
fn price(usd: f64) -> crate::price::Price {
    crate::price::Price {
        revenue_per_proof: usd,
        proof_fil: usd / 5.0,
        proof_fil_source: "config",
        fil_usd: 5.0,
        fil_usd_source: "config",
        fil_usd_at: NOW,
    }
}

#[test]
fn no_key_and_a_missing_credential_are_not_configured() {
    let c = config();
    let s = snap(0, false);
    let a = ask(&s, &c, None);
    let ans = no_key(&a);
    refused_with(&ans, "not_configured", None);
    assert!(ans.result.content.get("key").is_none());
    let ans = env_refused(
        &a,
        "CURIO_TOKEN",
        &format!("credential {}", "x".repeat(400)),
    );
    refused_with(&ans, "not_configured", None);
    assert_eq!(ans.result.content["key"], "vast.env.CURIO_TOKEN");
    let msg = ans.result.content["message"].as_str().unwrap();
    assert_eq!(msg.chars().count(), 300);
}

#[test]
fn offers_are_searched_once_per_pass_and_filtered_here_too() {
    let c = config();
    let mut s = snap(0, false);
    let q = search(&s, &c).unwrap();
    assert_eq!(q.limit, 64);
    assert_eq!(q, config_query(&c, None, None, 64));
    s.offers = Some(vec![]);
    assert_eq!(search(&s, &c), None);

    let a = ask(&s, &c, None);
    let mut unverified = offer(2, "RTX 4090", 0.3);
    unverified.verified = false;
    let found = searched(&a, &c, &[], Ok(vec![offer(1, "RTX 4090", 0.4), unverified])).unwrap();
    assert_eq!(found.iter().map(|o| o.id).collect::<Vec<_>>(), vec![1]);

    let ans = searched(&a, &c, &[], Err(VastError::Transport("timeout".into()))).unwrap_err();
    assert_eq!(
        ans.result.content,
        json!({"error": "vast_error", "message": "vast.ai unreachable: timeout"})
    );
    let e = ans.record.unwrap();
    assert_eq!(
        (e.outcome, e.detail.as_str()),
        ("failed", "vast.ai unreachable: timeout")
    );
}

#[test]
fn an_offer_asked_for_must_be_among_the_current_ones() {
    let c = config();
    let s = snap(0, false);
    let ans = choose_of(&s, &c, Some(99), &[offer(1, "RTX 4090", 0.4)]).unwrap_err();
    assert_eq!(ans.result.error_code(), Some("invalid_args"));
    let msg = ans.result.content["message"].as_str().unwrap().to_string();
    assert!(msg.starts_with("offer 99 is not among"), "{msg}");
    let e = ans.record.unwrap();
    assert_eq!(
        (e.outcome, e.offer_id, e.detail),
        ("refused", Some(99), msg)
    );
    // Present: taken, whatever the best would be.
    let offers = [offer(1, "RTX 4090", 0.4), offer(2, "RTX 4090", 0.3)];
    let cr = choose_of(&s, &c, Some(1), &offers).unwrap();
    assert_eq!(cr.offer.id, 1);
}

#[test]
fn no_offer_at_all_is_a_failure() {
    let c = config();
    let s = snap(0, false);
    let ans = choose_of(&s, &c, None, &[]).unwrap_err();
    assert_eq!(
        ans.result.content,
        json!({"error": "vast_error", "message": "vast.ai has no rentable offer matching [vast.offers] right now"})
    );
    let e = ans.record.unwrap();
    assert_eq!((e.outcome, e.offer_id), ("failed", None));
    // With hosts left out of the search, an empty one may be theirs: refused `bad_hosts`,
    // naming them, not vast.ai's failure (a soak).
    let mut s = snap(0, false);
    s.bad_hosts = vec![41, 42, 43];
    let ans = choose_of(&s, &c, None, &[]).unwrap_err();
    assert_eq!(ans.result.error_code(), Some("vast_error"), "none anywhere");
    s.left_out_offers = vec![41, 42];
    let ans = choose_of(&s, &c, None, &[]).unwrap_err();
    assert_eq!(ans.result.error_code(), Some("bad_hosts"));
    let msg = ans.result.content["message"].as_str().unwrap();
    assert!(msg.contains("only on 2 host(s) left out (41, 42)"), "{msg}");
    assert_eq!(ans.code, Some("bad_hosts"));
    assert_eq!(ans.record.unwrap().outcome, "refused");
}

#[test]
fn the_best_offer_that_fits_the_money_is_taken() {
    let mut c = config();
    c.policy.gpu_rates.insert("RTX 4090".into(), 50.0);
    // Fleet $9.0/h of $10: headroom $1.0/h. Offer 2 is the best per proof but too dear.
    let s = snap(9, false);
    let offers = [
        offer(1, "RTX 3090", 0.9),
        offer(2, "RTX 4090", 1.5),
        offer(3, "RTX 3090", 0.95),
    ];
    let cr = choose_of(&s, &c, None, &offers).unwrap();
    assert_eq!(cr.offer.id, 1);
    // With room for it, offer 2 wins.
    let s = snap(1, false);
    let cr = choose_of(&s, &c, None, &offers).unwrap();
    assert_eq!(cr.offer.id, 2);
}

#[test]
fn nothing_fitting_refuses_on_the_cheapest_naming_the_limit() {
    let mut c = config();
    let s = snap(9, false);
    let offers = [offer(1, "RTX 4090", 1.5), offer(2, "RTX 4090", 1.2)];
    let ans = choose_of(&s, &c, None, &offers).unwrap_err();
    refused_with(&ans, "budget", Some(2));
    assert_eq!(ans.result.content["offer_dph"], 1.2);
    // The daily cap, with this offer.
    c.policy.max_dph_total = Some(100.0);
    c.policy.daily_spend_max = Some(10.2);
    let ans = choose_of(&s, &c, Some(1), &offers).unwrap_err();
    refused_with(&ans, "daily_spend", Some(1));
}

#[test]
fn a_launch_carries_its_intent_row_and_request() {
    let mut c = config();
    c.vast.onstart = Some("run".into());
    let s = snap(0, false);
    let a = ask(&s, &c, None);
    let env = BTreeMap::from([("A".to_string(), "1".to_string())]);
    let cr = choose(&a, &c, &[offer(4, "RTX 4090", 0.4)], env).unwrap();
    assert_eq!(cr.intent_detail, "offer 4 RTX 4090 $0.4000/h");
    assert_eq!(cr.row.label, a.label);
    assert_eq!(cr.row.state, LAUNCHING);
    assert_eq!(
        (cr.row.vast_id, cr.row.offer_id, cr.row.dph),
        (None, Some(4), Some(0.4))
    );
    assert_eq!((cr.row.created_at, cr.row.launched_run), (NOW, Some(7)));
    let r = &cr.request;
    assert_eq!((r.offer_id, r.image.as_str(), r.disk_gb), (4, "img", 40.0));
    assert_eq!(r.env.get("A").map(String::as_str), Some("1"));
    assert_eq!(r.env.get(LABEL_ENV), Some(&a.label));
    assert_eq!(r.env.get(NODE_NAME_ENV), Some(&a.label));
    assert_eq!((r.onstart.as_deref(), r.bid_price), (Some("run"), None));
    // Interruptible: a bid at bid_factor (1.2) x the offer's min_bid; outside any pass, no run.
    c.vast.offers.offer_type = OfferType::Interruptible;
    let a = Ask::new(&s, &c, 0, "call_1", None, NOW);
    let cr = choose(&a, &c, &[offer(4, "RTX 4090", 0.4)], BTreeMap::new()).unwrap();
    assert_eq!(
        (cr.request.bid_price, cr.row.launched_run),
        (Some(0.24), None)
    );
    // Never above max_dph_per_instance; an offer without min_bid bids its dph_total.
    c.vast.offers.max_dph_per_instance = Some(0.22);
    assert_eq!(bid_price(&offer(4, "RTX 4090", 0.2), &c), 0.22);
    let mut no_min = offer(5, "RTX 4090", 0.21);
    no_min.min_bid = None;
    assert_eq!(bid_price(&no_min, &c), 0.21);
    c.vast.offers.max_dph_per_instance = None;
    // Rounded up where rounding would bid below the minimum (vast.ai's min_bids carry many
    // decimals: 0.2666 was refused insufficient_bid for ever); a round figure stays.
    c.vast.offers.bid_factor = 1.0;
    let mut fine = offer(6, "RTX 4090", 0.4);
    fine.min_bid = Some(0.266644);
    assert_eq!(bid_price(&fine, &c), 0.2667);
    fine.min_bid = Some(0.3);
    assert_eq!(bid_price(&fine, &c), 0.3);
    fine.min_bid = Some(0.266644);
    c.vast.offers.max_dph_per_instance = Some(0.26665);
    assert_eq!(bid_price(&fine, &c), 0.26665);
    c.vast.offers.max_dph_per_instance = None;
    fine.min_bid = Some(0.3);
    c.vast.offers.bid_factor = 1.2;
    assert_eq!(bid_price(&fine, &c), 0.36);
    // CURIO_NODE_NAME from [vast.env] is the operator's: kept.
    let env = BTreeMap::from([(NODE_NAME_ENV.to_string(), "pool".to_string())]);
    let cr = choose(&a, &c, &[offer(4, "RTX 4090", 0.4)], env).unwrap();
    assert_eq!(cr.request.env[NODE_NAME_ENV], "pool");
    assert_eq!(cr.request.env[LABEL_ENV], a.label);
}

fn a_create() -> (Ask, Config, Create) {
    let c = config();
    let s = snap(1, true);
    let a = ask(&s, &c, None);
    let cr = choose(&a, &c, &[offer(4, "RTX 4090", 0.4)], BTreeMap::new()).unwrap();
    (a, c, cr)
}

fn failed(s: Settle) -> (String, Value) {
    match s {
        Settle::Failed { detail, result } => (detail, result.content),
        other => panic!("not failed: {other:?}"),
    }
}

#[test]
fn a_create_that_answers_is_settled_ok() {
    let (_, _, cr) = a_create();
    let Next::Settle(Settle::Launched { instance_id, row }) = after_create(&cr, Ok(555)) else {
        panic!("not launched")
    };
    assert_eq!((instance_id, row.vast_id), (555, Some(555)));
    assert_eq!(row.label, cr.row.label);
}

#[test]
fn a_create_that_may_have_happened_stays_open() {
    let (a, _, cr) = a_create();
    for e in [
        VastError::Transport("reset".into()),
        VastError::Decode("junk".into()),
        VastError::Api {
            status: 502,
            code: "bad_gateway".into(),
            msg: "upstream".into(),
        },
    ] {
        let Next::Settle(Settle::Open { note, result }) = after_create(&cr, Err(e.clone())) else {
            panic!("not open for {e:?}")
        };
        assert_eq!(note, e.to_string());
        assert_eq!(result.content["may_have_created"], true);
        assert_eq!(result.content["label"], json!(a.label));
    }
}

#[test]
fn a_clear_refusal_fails_the_launch() {
    let (_, _, cr) = a_create();
    let Next::Settle(s) = after_create(&cr, Err(VastError::NoSuchAsk(4))) else {
        panic!()
    };
    let (detail, content) = failed(s);
    assert_eq!(detail, "offer 4 is no longer available");
    assert_eq!(
        content,
        json!({"error": "vast_error", "message": detail, "offer_id": 4,
               "note": "the offer was taken meanwhile; launch again for another (without offer_id, the next best offers are tried in turn)"})
    );
    let e = VastError::Api {
        status: 400,
        code: "bad_request".into(),
        msg: "no".into(),
    };
    let Next::Settle(s) = after_create(&cr, Err(e)) else {
        panic!()
    };
    let (_, content) = failed(s);
    assert!(content.get("note").is_none());
}

#[test]
fn an_instance_made_by_a_failed_create_is_destroyed() {
    let (_, _, cr) = a_create();
    let e = VastError::CreateFailed {
        new_contract: 777,
        msg: "bid too low".into(),
    };
    let Next::DestroyOrphan {
        new_contract,
        error,
    } = after_create(&cr, Err(e.clone()))
    else {
        panic!("no destroy")
    };
    assert_eq!((new_contract, &error), (777, &e));
    for destroyed in [Ok(()), Err(&VastError::NoSuchInstance(777))] {
        let (detail, content) = failed(after_orphan(&cr, &error, destroyed));
        assert_eq!(
            detail,
            "create failed (bid too low); vast.ai made instance 777 anyway, destroyed"
        );
        assert_eq!(
            content,
            json!({"error": "vast_error", "message": detail, "offer_id": 4, "destroyed": 777})
        );
    }
    // The destroy failed: the intent stays open, its note naming the instance, and the next
    // pass that lists it destroys it (never adopts it as launched).
    let s = after_orphan(&cr, &error, Err(&VastError::Transport("down".into())));
    let Settle::Open { note, result } = s else {
        panic!("not open")
    };
    assert!(note.starts_with("orphan instance 777: create failed (bid too low), vast.ai made the instance anyway, and its destroy failed ("), "{note}");
    assert_eq!(orphan_of(&note), Some(777));
    assert_eq!(result.content["instance_id"], 777);
    assert_eq!(orphan_of("create failed"), None);
}

#[test]
fn a_launch_reports_the_fleet_and_the_window_after_it() {
    let (a, c, cr) = a_create();
    let mut s = snap(1, true);
    let Next::Settle(Settle::Launched { row, .. }) = after_create(&cr, Ok(555)) else {
        panic!()
    };
    s.record_launch(*row, NOW);
    let r = launched(&a, &c, &cr, 555, &s, NOW + 1_000);
    assert!(r.mutated);
    assert_eq!(r.gist, "launched 555 (RTX 4090 $0.40/h) emergency");
    assert_eq!(r.content["fleet_dph"], 1.4);
    assert_eq!(r.content["window"], "1/6 used (emergency)");
    assert_eq!(
        r.content["offer"],
        offer_json(&cr.offer, &c, &Default::default())
    );
    assert_eq!(r.content["label"], json!(a.label));
}

/// The model too is refused while Curio runs one of ours without PSProve (the rules and the
/// floor plan no launch then; a re-test saw the model's go through).
#[test]
fn nothing_is_launched_while_ours_run_without_psprove() {
    let c = config();
    let mut s = snap(0, true);
    s.taskless = vec!["instance 5 runs Curio machine \"x\" without PSProve".into()];
    let a = gate_of(&s, &c, None).expect("refused");
    refused_with(&a, "no_psprove", None);
    let message = a.result.content["message"].as_str().unwrap();
    assert!(
        message.starts_with("instance 5 runs Curio machine"),
        "{message}"
    );
    s.taskless.clear();
    assert!(gate_of(&s, &c, None).is_none());
}

#[test]
fn nothing_is_launched_while_proofshare_is_disabled() {
    let c = config();
    let mut s = snap(0, true);
    s.demand.as_mut().unwrap().proofshare_enabled = Some(false);
    let a = gate_of(&s, &c, None).expect("refused");
    refused_with(&a, "proofshare_disabled", None);
    assert!(
        a.result.content["message"]
            .as_str()
            .unwrap()
            .contains("no work will come"),
        "{:?}",
        a.result
    );
    // Enabled (or not read): the gate lets it through.
    s.demand.as_mut().unwrap().proofshare_enabled = Some(true);
    assert!(gate_of(&s, &c, None).is_none());
}

#[test]
fn a_bid_only_where_it_beats_on_demand_by_bid_discount_min_and_past_the_on_demand_base() {
    let mut c = config();
    c.vast.offers.offer_type = OfferType::Interruptible;
    let s = snap(2, false);
    let a = ask(&s, &c, None);
    assert_eq!(a.on_demand, 2);
    // min_bid 0.2 x bid_factor 1.2 = 0.24: against 0.40 on demand a 40 % saving (>= 25 %).
    let bid = |a: &Ask, c: &Config, dph: f64| {
        choose(a, c, &[offer(4, "RTX 4090", dph)], BTreeMap::new())
            .unwrap()
            .request
            .bid_price
    };
    assert_eq!(bid(&a, &c, 0.4), Some(0.24));
    // Against 0.30 on demand: 20 %, under the 25 % asked: rented on demand.
    assert_eq!(bid(&a, &c, 0.30), None);
    let cr = choose(&a, &c, &[offer(4, "RTX 4090", 0.30)], BTreeMap::new()).unwrap();
    assert!(!cr.row.is_bid);
    // Exactly 25 % (0.32): a bid.
    assert_eq!(bid(&a, &c, 0.32), Some(0.24));
    c.policy.bid_discount_min = 0.5;
    assert_eq!(bid(&a, &c, 0.4), None);
    c.policy.bid_discount_min = 0.25;
    // on_demand_min = 3 with 2 on-demand instances billing: this one is on demand; once
    // three bill, bids again. Bids of ours do not count toward the base.
    c.policy.on_demand_min = 3;
    assert_eq!(bid(&a, &c, 0.4), None);
    let mut three = snap(3, false);
    assert_eq!(bid(&ask(&three, &c, None), &c, 0.4), Some(0.24));
    three.instances[2].is_bid = true;
    assert_eq!(bid(&ask(&three, &c, None), &c, 0.4), None);
    // Where the offer pays only at its bid ($0.24/h over 20 proofs/h = $0.012 a proof, under
    // the $0.016 a $0.02 proof leaves at a 20 % margin; $0.40/h on demand is $0.02): the bid,
    // base or not (the walkthrough's offer was judged at its bid and rented on demand).
    three.price = Some(price(0.02));
    let cr = choose(
        &ask(&three, &c, None),
        &c,
        &[offer(4, "RTX 4090", 0.4)],
        BTreeMap::new(),
    );
    assert_eq!(cr.unwrap().request.bid_price, Some(0.24));
    c.policy.bid_discount_min = 0.5;
    assert_eq!(bid(&ask(&three, &c, None), &c, 0.4), Some(0.24));
    c.policy.bid_discount_min = 0.25;
    three.price = None;
    // The disk bills beside a bid: $0.24 + $0.10/h of storage is 15 % under $0.40 on
    // demand, short of the 25 % asked: on demand. And the profit check counts it: at $0.02
    // a proof, $0.34/h over 20/h ($0.017) no longer pays as a bid.
    let mut disk = offer(4, "RTX 4090", 0.4);
    disk.storage_dph = Some(0.1);
    let with_disk = |a: &Ask| choose(a, &c, std::slice::from_ref(&disk), BTreeMap::new());
    assert_eq!(
        with_disk(&ask(&three, &c, None)).unwrap().request.bid_price,
        None
    );
    three.price = Some(price(0.02));
    let refused = with_disk(&ask(&three, &c, None)).unwrap_err();
    assert_eq!(refused.result.error_code(), Some("unprofitable"));
    // An offer without min_bid bids its dph_total, which holds the disk already: judged at
    // $0.30/h ($0.015 a proof, under $0.016), not $0.40 (the re-test saw it counted twice).
    let mut no_min = offer(5, "RTX 4090", 0.3);
    (no_min.min_bid, no_min.storage_dph) = (None, Some(0.1));
    assert!(choose(&ask(&three, &c, None), &c, &[no_min], BTreeMap::new()).is_ok());
    three.price = None;
    // On demand: never a bid.
    c.vast.offers.offer_type = OfferType::OnDemand;
    assert_eq!(bid(&ask(&three, &c, None), &c, 0.4), None);
}
