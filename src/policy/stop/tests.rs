//! The stop plan, step by step.

use super::*;
use crate::demand::{Demand, Worker};
use crate::fleet::State;
use crate::fleet::{LOADING, PROVING, REGISTERED};

const NOW: Millis = 1_000_000_000;
const MIN: Millis = 60_000;

fn config() -> Config {
    Config::default()
}

fn row(id: i64, state: State, machine: Option<&str>) -> InstanceRow {
    InstanceRow {
        label: format!("fleetagent-{id}"),
        vast_id: Some(id),
        state,
        actual_status: Some("running".into()),
        status_msg: None,
        gpu_name: Some("RTX 4090".into()),
        dph: Some(0.5),
        offer_id: None,
        public_ip: None,
        machine_name: machine.map(String::from),
        worker_address: None,
        launched_run: None,
        adopted: false,
        created_at: NOW - 120 * MIN,
        state_since: NOW - MIN,
        last_seen_at: Some(NOW),
        gone_at: None,
        machine_id: None,
        is_bid: false,
        storage_dph: None,
        paused_spans: Vec::new(),
    }
}

fn worker(name: &str) -> Worker {
    Worker {
        machine_name: name.into(),
        host_and_port: "10.0.0.1:12300".into(),
        running: 1,
        cordoned: false,
    }
}

/// Instance 7 registered as worker w7, the only live worker, 4 proofs pending.
fn snap() -> Snapshot {
    Snapshot {
        now: NOW,
        demand: Some(Demand {
            pending: 4,
            workers: vec![worker("w7")],
            ..Default::default()
        }),
        instances: vec![row(7, REGISTERED, Some("w7")), row(8, REGISTERED, None)],
        foreign: vec![99],
        ..Default::default()
    }
}

fn ask(c: &Config, id: i64) -> Ask {
    Ask::new(c, id, false, false)
}

fn answer(g: Gate) -> Answer {
    match g {
        Gate::Answer(a) => a,
        other => panic!("not an answer: {other:?}"),
    }
}

fn go(g: Gate) -> Target {
    match g {
        Gate::Go(t) => *t,
        other => panic!("not a go: {other:?}"),
    }
}

fn protected(a: &Answer, label: Option<&str>, says: &str) {
    assert_eq!(a.result.error_code(), Some("protected"), "{:?}", a.result);
    let m = a.result.content["message"].as_str().unwrap();
    assert!(m.contains(says), "{m}");
    let e = a.record.as_ref().unwrap();
    assert_eq!((e.outcome, e.label.as_deref()), ("refused", label));
    assert_eq!(e.detail, a.result.content.to_string());
}

#[test]
fn the_ask_takes_the_stop_mode_and_force_only_from_the_operator() {
    let mut c = config();
    assert_eq!(Ask::new(&c, 7, true, false).kind, "destroy");
    assert!(!Ask::new(&c, 7, true, false).forced);
    assert!(Ask::new(&c, 7, true, true).forced);
    c.vast.stop_mode = StopMode::Stop;
    assert_eq!(ask(&c, 7).kind, "stop");
}

#[test]
fn an_id_nobody_knows_is_looked_up_then_refused_even_forced() {
    let c = config();
    let mut s = snap();
    assert_eq!(gate(&ask(&c, 5), &s, &c), Gate::LookUp);
    let gone = unknown(&ask(&c, 5), Some("fleetagent-5".into()), &s);
    assert_eq!(
        gone.content,
        json!({"ok": true, "instance_id": 5, "label": "fleetagent-5", "already": "gone"})
    );
    assert_eq!(
        (gone.mutated, gone.gist.as_str()),
        (false, "5 already gone")
    );
    let r = unknown(&ask(&c, 5), None, &s);
    assert_eq!(
        r.content,
        json!({"error": "invalid_args", "message": "instance 5 is not one of ours (list_instances shows them)"})
    );
    s.listing_error = Some("HTTP 500".into());
    let forced = Ask::new(&c, 5, true, true);
    assert_eq!(gate(&forced, &s, &c), Gate::LookUp);
    let r = unknown(&forced, None, &s);
    assert!(
        r.content["message"]
            .as_str()
            .unwrap()
            .contains("the vast.ai listing failed (HTTP 500)"),
        "{}",
        r.content
    );
    // Unforced too (an operator's or the model's stop): never "not one of ours" unchecked.
    for unforced in [Ask::new(&c, 5, false, true), ask(&c, 5)] {
        let message = unknown(&unforced, None, &s).content["message"].to_string();
        assert!(
            message.contains("the vast.ai listing failed (HTTP 500)")
                && !message.contains("not one of ours"),
            "{message}"
        );
    }
}

#[test]
fn the_operator_reads_commands_and_the_model_its_tools() {
    let c = config();
    let s = snap();
    let message = |a: &Answer| a.result.content["message"].as_str().unwrap().to_string();
    let operator = |id| Ask::new(&c, id, false, true);
    let tools = [
        "list_instances",
        "stop_instance",
        "search_offers",
        "instance_logs",
    ];
    // An id that is not ours.
    let model = unknown(&ask(&c, 5), None, &s).content["message"].to_string();
    assert!(model.contains("(list_instances shows them)"), "{model}");
    let op = unknown(&operator(5), None, &s).content["message"].to_string();
    assert!(
        op.contains("(`fleetagent instances list` shows ours)"),
        "{op}"
    );
    // A protection: the operator is told how to stop it anyway, the model is not.
    let a = answer(gate(&operator(7), &s, &c));
    protected(
        &a,
        Some("fleetagent-7"),
        "last live worker while 4 proofs are queued; `fleetagent instances stop 7 --force` stops it anyway",
    );
    let model = message(&answer(gate(&ask(&c, 7), &s, &c)));
    assert!(!model.contains("fleetagent instances"), "{model}");
    // Someone else's instance: the command is named once, for both.
    for a in [operator(99), ask(&c, 99)] {
        let m = message(&answer(gate(&a, &s, &c)));
        assert!(
            m.ends_with("with `fleetagent instances stop 99 --force`"),
            "{m}"
        );
    }
    // Within policy.min_rental_mins.
    let mut young = snap();
    young.instances[1].created_at = NOW - MIN;
    let a = answer(gate(&operator(8), &young, &c));
    protected(&a, Some("fleetagent-8"), "stops it anyway");
    for m in [op, message(&a)] {
        assert!(!tools.iter().any(|t| m.contains(t)), "{m}");
    }
}

#[test]
fn a_foreign_instance_goes_only_by_force() {
    let c = config();
    let a = answer(gate(&ask(&c, 99), &snap(), &c));
    protected(&a, None, "is not ours");
    let t = go(gate(&Ask::new(&c, 99, true, true), &snap(), &c));
    assert_eq!((t.vast_id(), t.forced, t.row), (99, true, None));
}

#[test]
fn another_installs_instance_is_refused_even_to_a_forced_operator() {
    let c = config();
    let mut s = snap();
    s.other_installs = vec![crate::store::ops::ForeignInstance {
        install_id: "zxcvbn".into(),
        label: "fleetagent-zxcvbn-r3-0a0b0c0d".into(),
        vast_id: 42,
    }];
    for a in [ask(&c, 42), Ask::new(&c, 42, true, true).destroying()] {
        let ans = answer(gate(&a, &s, &c));
        protected(&ans, None, "belongs to another fleetagent install");
        let m = ans.result.content["message"].as_str().unwrap();
        assert!(
            m.contains("install zxcvbn") && m.contains("--force or not"),
            "{m}"
        );
    }
}

#[test]
fn a_pause_holds_every_stop_but_the_operators() {
    let mut c = config();
    c.vast.stop_mode = StopMode::Stop;
    let mut s = snap();
    s.paused = Some(crate::store::ops::Pause {
        since: NOW - MIN,
        until: Some(NOW + 60 * MIN),
        reason: "maintenance".into(),
    });
    s.instances[1].state = crate::fleet::DEAD;
    s.instances[1].actual_status = Some("exited".into());
    // Flagged, and still held: a pause is hands off.
    let a = answer(gate(&ask(&c, 8), &s, &c));
    assert_eq!(a.result.error_code(), Some("paused"));
    let e = a.record.unwrap();
    assert_eq!(
        (e.outcome, e.label.as_deref()),
        ("refused", Some("fleetagent-8"))
    );
    // The operator's own stop goes through; `--all` destroys whatever stop_mode says.
    let op = Ask::new(&c, 8, false, true);
    assert_eq!(go(gate(&op, &s, &c)).kind, "stop");
    assert_eq!(go(gate(&op.destroying(), &s, &c)).kind, "destroy");
}

#[test]
fn stopped_already_under_stop_mode_stop() {
    let mut c = config();
    c.vast.stop_mode = StopMode::Stop;
    let mut s = snap();
    s.instances[1].state = STOPPED;
    let a = answer(gate(&ask(&c, 8), &s, &c));
    assert_eq!(a.record, None);
    assert_eq!(
        a.result.content,
        json!({"ok": true, "instance_id": 8, "already": "stopped"})
    );
    // The operator's stop of a stopped instance destroys it: the one way to end a disk
    // kept stopped.
    assert!(go(gate(&Ask::new(&c, 8, false, true), &s, &c)).destroys());
    // A destroy of a stopped instance goes out.
    let c = config();
    assert!(go(gate(&ask(&c, 8), &s, &c)).destroys());
}

#[test]
fn what_the_operator_stopped_is_never_flagged_as_stopped_too_long() {
    let mut c = config();
    c.vast.stop_mode = StopMode::Stop;
    let mut s = snap();
    s.instances[1].state = STOPPED;
    s.instances[1].state_since = s.now - 30 * 3_600_000;
    assert!(s.is_flagged(&c, 8), "stopped 30h by the agent");
    s.operator_stopped = vec![8];
    assert!(!s.is_flagged(&c, 8), "kept stopped by the operator");
    let a = answer(gate(&ask(&c, 8), &s, &c));
    assert_eq!(
        a.result.content["already"], "stopped",
        "the model cannot end it"
    );
}

#[test]
fn the_protections_hold_proving_the_last_live_worker_and_unknown_demand() {
    let c = config();
    let mut s = snap();
    let a = answer(gate(&ask(&c, 7), &s, &c));
    protected(
        &a,
        Some("fleetagent-7"),
        "last live worker while 4 proofs are queued",
    );
    // Instance 8 has no worker: it may go.
    let t = go(gate(&ask(&c, 8), &s, &c));
    assert_eq!(
        t.row.as_ref().map(|r| r.label.as_str()),
        Some("fleetagent-8")
    );
    assert!(!t.flagged && !t.forced);
    s.instances[1].state = PROVING;
    protected(
        &answer(gate(&ask(&c, 8), &s, &c)),
        Some("fleetagent-8"),
        "is proving",
    );
    s.demand = None;
    protected(
        &answer(gate(&ask(&c, 8), &s, &c)),
        Some("fleetagent-8"),
        "demand is unknown",
    );
    // Forced, the operator may.
    assert!(go(gate(&Ask::new(&c, 7, true, true), &snap(), &c)).forced);
}

#[test]
fn flagged_instances_may_always_go() {
    let c = config();
    let mut s = snap();
    s.instances[1].state = PROVING;
    s.instances[1].actual_status = Some("exited".into());
    s.demand = None;
    assert!(go(gate(&ask(&c, 8), &s, &c)).flagged);
    // Stuck loading past stuck_loading_mins.
    let mut s = snap();
    s.instances[0].state = LOADING;
    s.instances[0].created_at = NOW - 31 * MIN;
    assert!(go(gate(&ask(&c, 7), &s, &c)).flagged);
}

#[test]
fn dry_run_records_and_sends_nothing() {
    let mut c = config();
    c.policy.dry_run = true;
    let a = answer(gate(&ask(&c, 8), &snap(), &c));
    assert_eq!(
        a.record,
        Some(Entry {
            outcome: "dry_run",
            label: Some("fleetagent-8".into()),
            dph: None,
            detail: "dry_run".into(),
            kind: Some("destroy"),
        })
    );
    assert_eq!(a.result.error_code(), Some("dry_run"));
    assert_eq!(a.result.content["would"], "destroy instance 8");
    // With stop_mode = "stop", an outbid bid is destroyed all the same: the dry run's
    // ledger row says what the real pass would do, not the ask's "stop".
    c.vast.stop_mode = crate::config::StopMode::Stop;
    let mut s = snap();
    let r = s
        .instances
        .iter_mut()
        .find(|r| r.vast_id == Some(8))
        .unwrap();
    r.state = crate::fleet::OUTBID;
    let a = answer(gate(&ask(&c, 8), &s, &c));
    assert_eq!(a.record.unwrap().kind, Some("destroy"));
    assert_eq!(a.result.content["would"], "destroy instance 8");
}

#[test]
fn no_key_is_not_configured() {
    let c = config();
    let t = go(gate(&ask(&c, 8), &snap(), &c));
    let a = no_key(&t);
    assert_eq!(a.result.error_code(), Some("not_configured"));
    let e = a.record.unwrap();
    assert_eq!(
        (e.outcome, e.label.as_deref()),
        ("refused", Some("fleetagent-8"))
    );
}

fn stopped_of(d: Done) -> Stopped {
    match d {
        Done::Stopped(s) => *s,
        Done::Failed(a) => panic!("failed: {a:?}"),
    }
}

#[test]
fn a_destroy_makes_the_row_gone() {
    let c = config();
    let t = go(gate(&ask(&c, 8), &snap(), &c));
    let s = stopped_of(after_call(&t, Ok(()), NOW + 5));
    assert_eq!(
        s.entry,
        Entry {
            outcome: "ok",
            label: Some("fleetagent-8".into()),
            dph: Some(0.5),
            detail: "ok".into(),
            kind: Some("destroy"),
        }
    );
    let r = s.row.as_ref().unwrap();
    assert_eq!(
        (r.state, r.gone_at, r.state_since),
        (GONE, Some(NOW + 5), NOW + 5)
    );
    assert!(s.gone && !s.already_gone);
    let mut after = snap();
    after.record_stop(8, s.gone);
    let res = stopped(&t, &s, &after);
    assert!(res.mutated);
    assert_eq!(res.gist, "destroyed 8");
    assert_eq!(
        res.content,
        json!({"ok": true, "instance_id": 8, "done": "destroyed", "note": null, "fleet_dph": 0.5})
    );
}

#[test]
fn a_stop_keeps_the_row_stopped_unless_it_was_gone() {
    let mut c = config();
    c.vast.stop_mode = StopMode::Stop;
    let mut s = snap();
    s.instances[1].machine_name = Some("w8".into());
    let t = go(gate(&ask(&c, 8), &s, &c));
    assert!(!t.destroys());
    let st = stopped_of(after_call(&t, Ok(()), NOW + 5));
    let r = st.row.as_ref().unwrap();
    assert_eq!(
        (r.state, r.machine_name.as_deref(), r.gone_at),
        (STOPPED, None, None)
    );
    assert!(!st.gone);
    assert_eq!(stopped(&t, &st, &s).gist, "stopped 8");
    // vast.ai no longer has it: gone, and said so.
    let st = stopped_of(after_call(&t, Err(&VastError::NoSuchInstance(8)), NOW + 5));
    assert!(st.gone && st.already_gone);
    assert_eq!(st.entry.detail, "already gone on vast.ai");
    assert_eq!(st.row.unwrap().state, GONE);
    let res = stopped(
        &t,
        &stopped_of(after_call(&t, Err(&VastError::NoSuchInstance(8)), 0)),
        &s,
    );
    assert_eq!(res.content["note"], "it was already gone");
    assert_eq!(res.content["done"], "destroyed");
}

#[test]
fn the_detail_says_flagged_or_forced() {
    let c = config();
    let mut s = snap();
    s.instances[1].actual_status = Some("offline".into());
    let t = go(gate(&ask(&c, 8), &s, &c));
    assert_eq!(
        stopped_of(after_call(&t, Ok(()), NOW)).entry.detail,
        "flagged (offline): earned nothing"
    );
    let t = go(gate(&Ask::new(&c, 7, true, true), &snap(), &c));
    assert_eq!(
        stopped_of(after_call(&t, Ok(()), NOW)).entry.detail,
        "forced by the operator"
    );
    // A foreign instance forced: no row to write, no dph.
    let t = go(gate(&Ask::new(&c, 99, true, true), &snap(), &c));
    let st = stopped_of(after_call(&t, Ok(()), NOW));
    assert_eq!((st.row, st.entry.label, st.entry.dph), (None, None, None));
}

#[test]
fn a_failed_call_is_recorded_failed() {
    let c = config();
    let t = go(gate(&ask(&c, 8), &snap(), &c));
    let e = VastError::RateLimited("slow down".into());
    let Done::Failed(a) = after_call(&t, Err(&e), NOW) else {
        panic!("not failed")
    };
    assert_eq!(
        a.result.content,
        json!({"error": "vast_error", "message": "vast.ai rate limit: slow down", "instance_id": 8})
    );
    assert_eq!(
        a.record,
        Some(Entry {
            outcome: "failed",
            label: Some("fleetagent-8".into()),
            dph: None,
            detail: "vast.ai rate limit: slow down".into(),
            kind: None,
        })
    );
}

#[test]
fn min_rental_holds_a_young_instance_unless_flagged_forced_or_over_a_cap() {
    let mut c = config();
    c.policy.max_instances = Some(5);
    let mut s = snap();
    // Instance 8 (no worker, idle) started 12 minutes ago: held until 30 minutes.
    s.instances[1].created_at = NOW - 12 * MIN;
    let a = answer(gate(&ask(&c, 8), &s, &c));
    protected(
        &a,
        Some("fleetagent-8"),
        "policy.min_rental_mins = 30 keeps it until",
    );
    assert_eq!(a.result.content["key"], "policy.min_rental_mins");
    assert_eq!(
        a.result.content["may_stop_at"],
        crate::clock::rfc3339(NOW + 18 * MIN)
    );
    assert!(a.result.content["message"]
        .as_str()
        .unwrap()
        .contains("(in 18m)"));
    // Past the minimum it goes.
    s.instances[1].created_at = NOW - 30 * MIN;
    assert_eq!(go(gate(&ask(&c, 8), &s, &c)).instance_id, 8);
    s.instances[1].created_at = NOW - 12 * MIN;
    // The operator's --force lifts it.
    let forced = Ask::new(&c, 8, true, true);
    assert!(go(gate(&forced, &s, &c)).forced);
    // A flagged one (exited) goes at once.
    let mut flagged = s.clone();
    flagged.instances[1].actual_status = Some("exited".into());
    assert!(go(gate(&ask(&c, 8), &flagged, &c)).flagged);
    // Over max_instances (a bid resumed): the stop that brings the fleet back goes through.
    c.policy.max_instances = Some(1);
    assert_eq!(go(gate(&ask(&c, 8), &s, &c)).instance_id, 8);
    // min_rental_mins = 0: nothing is held.
    c.policy.max_instances = Some(5);
    c.policy.min_rental_mins = 0;
    assert_eq!(go(gate(&ask(&c, 8), &s, &c)).instance_id, 8);
}
