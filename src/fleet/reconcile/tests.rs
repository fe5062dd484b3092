//! Reconciliation of the table with the listing, intents and workers.

use super::*;
use crate::fleet::fixtures::*;
use crate::fleet::workers::host_of;
use crate::fleet::Snapshot;

/// The state reconciliation left instance `id` in.
fn state_of(rec: &Reconciled, id: i64) -> State {
    rec.rows
        .iter()
        .find(|r| r.vast_id == Some(id))
        .unwrap()
        .state
}

#[test]
fn lifecycle_over_statuses() {
    let listing = vec![
        inst(1, "fleetagent-null", None),
        inst(2, "fleetagent-loading", Some("loading")),
        inst(3, "fleetagent-running", Some("running")),
        inst(4, "fleetagent-exited", Some("exited")),
        inst(5, "fleetagent-offline", Some("offline")),
        inst(6, "fleetagent-unknown", Some("unknown")),
        inst(7, "fleetagent-proving", Some("running")),
        inst(8, "fleetagent-byip", Some("running")),
        inst(9, "someone-else", Some("running")),
        inst(10, "fleetagent-weird", Some("scheduling")),
    ];
    let mut listing = listing;
    listing[7].public_ip = Some(" 203.0.113.8 ".into());
    let demand = Demand {
        workers: vec![
            worker("fleetagent-proving", "10.0.0.7:12300", 2),
            worker("curio-host-8", "203.0.113.8:12300", 0),
        ],
        ..Default::default()
    };
    let local: Vec<InstanceRow> = listing
        .iter()
        .filter(|i| i.id != 9)
        .map(|i| row(i.label.as_deref().unwrap(), Some(i.id as i64), LOADING, 0.4))
        .collect();
    let rec = reconcile(
        &input(local, vec![], Some(&listing), Some(&demand)),
        INTENT_GRACE_MS,
    );
    let state = |id: i64| {
        rec.rows
            .iter()
            .find(|r| r.vast_id == Some(id))
            .map(|r| r.state)
            .unwrap()
    };
    assert_eq!(state(1), LOADING);
    assert_eq!(state(2), LOADING);
    assert_eq!(state(3), BOOTED);
    assert_eq!(state(4), DEAD);
    assert_eq!(state(5), DEAD);
    assert_eq!(state(6), DEAD);
    assert_eq!(state(7), PROVING);
    assert_eq!(state(8), REGISTERED, "matched by public IP");
    assert_eq!(state(10), LOADING, "unknown status strings stay opaque");
    assert_eq!(rec.foreign, vec![9]);
    assert!(rec.rows.iter().all(|r| r.vast_id != Some(9)));
    let by_ip = rec.rows.iter().find(|r| r.vast_id == Some(8)).unwrap();
    assert_eq!(by_ip.machine_name.as_deref(), Some("curio-host-8"));
    assert!(rec
        .changes
        .contains(&"instance 4 \"fleetagent-exited\": loading -> dead".to_string()));

    let snap = Snapshot {
        now: NOW,
        instances: rec.rows.clone(),
        ..Default::default()
    };
    let mut c = config();
    c.policy.stuck_loading_mins = 4;
    let flags = flags(&snap, &c);
    assert_eq!(
        flags,
        vec![
            (1, "loading 5m".to_string()),
            (2, "loading 5m".to_string()),
            // Exited from loading: a boot that failed (`fleet::boot`).
            (
                4,
                "unbooted: exited before its Curio worker started".to_string()
            ),
            (5, "offline".to_string()),
            (6, "unknown".to_string()),
            (10, "loading 5m".to_string()),
        ]
    );
    c.policy.stuck_loading_mins = 30;
    assert_eq!(snap.flagged(&c).len(), 3);
}

#[test]
fn ip_fallback_only_when_unambiguous() {
    let mut a = inst(1, "fleetagent-a", Some("running"));
    let mut b = inst(2, "fleetagent-b", Some("running"));
    a.public_ip = Some("203.0.113.5".into());
    b.public_ip = Some("203.0.113.5".into());
    let workers = vec![worker("gpu-box", "203.0.113.5:12300", 0)];
    assert!(match_workers(&[&a, &b], &workers).is_empty());
    b.public_ip = Some("203.0.113.6".into());
    assert_eq!(match_workers(&[&a, &b], &workers).get(&1), Some(&0));
    // A name match wins over an IP match, and a worker matches once.
    let workers = vec![worker("fleetagent-b", "203.0.113.5:12300", 1)];
    let m = match_workers(&[&a, &b], &workers);
    assert_eq!(m.get(&2), Some(&0));
    assert!(!m.contains_key(&1));
    assert_eq!(host_of("[::1]:12300"), "::1");
}

#[test]
fn adoption_intents_and_gone() {
    let listing = vec![
        inst(11, "fleetagent-r5-aaaa", Some("loading")),
        inst(12, "fleetagent-stray", None),
    ];
    let local = vec![
        row("fleetagent-r5-aaaa", None, LAUNCHING, 0.4),
        row("fleetagent-old", Some(3), PROVING, 0.4),
        row("fleetagent-r5-bbbb", None, LAUNCHING, 0.4),
        row("fleetagent-r5-cccc", None, LAUNCHING, 0.4),
    ];
    let intents = vec![
        intent(1, "fleetagent-r5-aaaa", NOW - MIN),
        intent(2, "fleetagent-r5-bbbb", NOW - MIN),
        intent(3, "fleetagent-r5-cccc", NOW - INTENT_GRACE_MS),
    ];
    let rec = reconcile(
        &input(local, intents, Some(&listing), None),
        INTENT_GRACE_MS,
    );
    let find = |l: &str| rec.rows.iter().find(|r| r.label == l).cloned();
    // The crash case: an open intent whose instance exists is recorded, not re-created.
    let a = find("fleetagent-r5-aaaa").unwrap();
    assert_eq!((a.vast_id, a.state, a.adopted), (Some(11), LOADING, false));
    assert!(rec.settle.contains(&(
        1,
        "ok",
        Some(11),
        "seen in the listing as instance 11".into()
    )));
    // Ours by label, never recorded: adopted.
    let stray = find("fleetagent-stray").unwrap();
    assert!(stray.adopted);
    assert_eq!(stray.vast_id, Some(12));
    // Listed no more: gone.
    let old = find("fleetagent-old").unwrap();
    assert_eq!(old.state, GONE);
    assert_eq!(old.gone_at, Some(NOW));
    // Young intent kept, old one failed and its row dropped.
    assert_eq!(find("fleetagent-r5-bbbb").unwrap().state, LAUNCHING);
    assert!(find("fleetagent-r5-cccc").is_none());
    assert_eq!(rec.deleted, vec!["fleetagent-r5-cccc".to_string()]);
    assert!(rec.settle.iter().any(|s| s.0 == 3 && s.1 == "failed"));
    assert_eq!(rec.changes.len(), 4, "{:?}", rec.changes);
    assert!(rec.changes.iter().any(|c| c.contains("adopted")));
}

#[test]
fn failed_probe_keeps_curio_states() {
    let listing = vec![
        inst(1, "fleetagent-p", Some("running")),
        inst(2, "fleetagent-e", Some("exited")),
    ];
    let mut p = row("fleetagent-p", Some(1), PROVING, 0.4);
    p.machine_name = Some("fleetagent-p".into());
    let e = row("fleetagent-e", Some(2), REGISTERED, 0.4);
    let rec = reconcile(
        &input(vec![p, e], vec![], Some(&listing), None),
        INTENT_GRACE_MS,
    );
    assert_eq!(rec.rows[0].state, PROVING);
    assert_eq!(rec.rows[0].machine_name.as_deref(), Some("fleetagent-p"));
    // vast.ai's own word still counts.
    assert_eq!(rec.rows[1].state, DEAD);
    assert_eq!(rec.changes.len(), 1, "{:?}", rec.changes);
}

/// A listing that leaves out an instance's label (or vast.ai lost it) does not make an
/// instance of our table gone: it is ours by its id, still counted, never foreign; an
/// unlabelled instance we never recorded stays not ours.
#[test]
fn an_unlabelled_listed_instance_of_ours_is_kept_by_its_id() {
    let mut unlabelled = inst(3, "", Some("running"));
    unlabelled.label = None;
    let mut blank = inst(4, "", Some("loading"));
    blank.label = Some("  ".into());
    let mut stranger = inst(5, "", Some("running"));
    stranger.label = None;
    let listing = vec![unlabelled, blank, stranger];
    let local = vec![
        row("fleetagent-old", Some(3), PROVING, 0.4),
        row("fleetagent-r7-dddd", Some(4), LOADING, 0.4),
    ];
    let rec = reconcile(&input(local, vec![], Some(&listing), None), INTENT_GRACE_MS);
    let find = |l: &str| rec.rows.iter().find(|r| r.label == l).cloned();
    let old = find("fleetagent-old").unwrap();
    assert_ne!(old.state, GONE, "{old:?}");
    assert_eq!(old.gone_at, None);
    let young = find("fleetagent-r7-dddd").unwrap();
    assert_eq!((young.state, young.gone_at), (LOADING, None));
    assert_eq!(rec.rows.len(), 2, "{:?}", rec.rows);
    assert_eq!(rec.foreign, vec![5]);
    assert!(
        rec.changes.iter().all(|c| !c.contains("gone")),
        "{:?}",
        rec.changes
    );
}

/// Still listed under a label that is not ours (renamed in the console): no longer ours,
/// and said so, not "gone". A launch that never appeared while an unlabelled instance
/// unknown to the table started since: recorded as failed, naming that instance.
#[test]
fn a_relabelled_instance_and_an_unlabelled_stranger_are_named() {
    let mut renamed = inst(3, "my-renamed-box", Some("running"));
    renamed.start_date = Some(0.0);
    let mut stranger = inst(8, "", Some("running"));
    stranger.label = None;
    stranger.start_date = Some(((NOW - INTENT_GRACE_MS) / 1000) as f64);
    let listing = vec![renamed, stranger];
    let local = vec![
        row("fleetagent-old", Some(3), PROVING, 0.4),
        row("fleetagent-r5-cccc", None, LAUNCHING, 0.4),
    ];
    let intents = vec![intent(3, "fleetagent-r5-cccc", NOW - INTENT_GRACE_MS)];
    let rec = reconcile(
        &input(local, intents, Some(&listing), None),
        INTENT_GRACE_MS,
    );
    assert!(
        rec.changes
            .iter()
            .any(|c| c.contains("is listed under another label") && c.contains("my-renamed-box")),
        "{:?}",
        rec.changes
    );
    assert!(
        rec.changes.iter().all(|c| !c.contains("is gone from")),
        "{:?}",
        rec.changes
    );
    let failed = rec.settle.iter().find(|s| s.0 == 3).expect("settled");
    assert_eq!(failed.1, "failed");
    assert!(
        failed.3.contains("instance(s) 8 listed without a label"),
        "{failed:?}"
    );
}

/// `vast.label_prefix` changed with a fleet running: what our table recorded under the
/// old prefix, listed under that same label, is still ours (counted, stoppable, never
/// foreign); a stranger under the old prefix is not, and a console rename still lets go.
#[test]
fn a_changed_prefix_keeps_the_fleet_already_rented() {
    let old = format!("fleetagent-{INSTALL}-r1-5a3528e1");
    let listing = vec![
        inst(3, &old, Some("running")),
        inst(4, "fleetagent-r2-abcdef01", Some("running")),
        inst(5, "my-renamed-box", Some("running")),
    ];
    let local = vec![
        row(&old, Some(3), PROVING, 0.4),
        row("fleetagent-r0-00000000", Some(5), PROVING, 0.4),
    ];
    let mut inp = input(local, vec![], Some(&listing), None);
    inp.prefix = "fa2";
    let rec = reconcile(&inp, INTENT_GRACE_MS);
    let kept = rec.rows.iter().find(|r| r.vast_id == Some(3)).unwrap();
    assert_eq!((kept.state, kept.gone_at), (PROVING, None), "{kept:?}");
    assert_eq!(rec.foreign, vec![4, 5]);
    let renamed = rec.rows.iter().find(|r| r.vast_id == Some(5)).unwrap();
    assert_eq!(renamed.state, GONE);
    assert!(
        rec.changes.iter().all(|c| !c.contains(&old)),
        "{:?}",
        rec.changes
    );
}

/// A launch whose create timed out, then `vast.label_prefix` changed before the instance was
/// listed: the instance that shows up under the launch's label is that launch's (a
/// walkthrough saw it let go, billing, and a replacement rented once the wait ran out).
#[test]
fn a_launch_listed_after_the_prefix_changed_is_still_that_launch() {
    let label = format!("fleetagent-{INSTALL}-r1-5a3528e1");
    let listing = vec![
        inst(7, &label, Some("loading")),
        inst(
            8,
            &format!("fleetagent-{INSTALL}-r1-0badf00d"),
            Some("running"),
        ),
    ];
    let local = vec![row(&label, None, LAUNCHING, 0.4)];
    let intents = vec![intent(1, &label, NOW - MIN)];
    let mut inp = input(local, intents, Some(&listing), None);
    inp.prefix = "fa2";
    let rec = reconcile(&inp, INTENT_GRACE_MS);
    let kept = rec.rows.iter().find(|r| r.label == label).unwrap();
    assert_eq!((kept.vast_id, kept.state), (Some(7), LOADING), "{kept:?}");
    assert!(
        rec.settle.iter().any(|s| s.0 == 1 && s.1 == "ok"),
        "{:?}",
        rec.settle
    );
    // A stranger under the old prefix that no launch of ours recorded is not ours.
    assert_eq!(rec.foreign, vec![8]);
    assert!(Recorded::new(&rec.rows).knows(7));
}

#[test]
fn failed_listing_keeps_the_table() {
    let local = vec![row("fleetagent-x", Some(3), PROVING, 0.4)];
    let intents = vec![intent(1, "fleetagent-y", NOW - 3 * INTENT_GRACE_MS)];
    let rec = reconcile(&input(local.clone(), intents, None, None), INTENT_GRACE_MS);
    assert_eq!(rec.rows, local);
    assert!(rec.settle.is_empty() && rec.changes.is_empty() && rec.deleted.is_empty());
}

/// A container that exited because the instance was meant to stop (vast.ai stops the
/// fleet when the account's credit runs out) is stopped, billing its disk: not a crash, whose
/// host would be left out of searches. One that exited while meant to run is dead.
#[test]
fn an_instance_exited_because_it_was_meant_to_stop_is_stopped_not_dead() {
    let exited = |id: u64, intended: &str| {
        let mut i = inst(id, &format!("fleetagent-{id}"), Some("exited"));
        i.intended_status = Some(intended.into());
        i.cur_state = Some("running".into());
        i.status_msg = Some("Instance stopped: insufficient credit".into());
        i
    };
    // A bid so is stopped too, not outbid (vast.ai lists an outbid bid `stopped`).
    let mut bid = exited(3, "stopped");
    bid.is_bid = Some(true);
    let listing = vec![exited(1, "stopped"), exited(2, "running"), bid];
    let local: Vec<InstanceRow> = (1..=3)
        .map(|i| row(&format!("fleetagent-{i}"), Some(i), PROVING, 0.4))
        .collect();
    let rec = reconcile(&input(local, vec![], Some(&listing), None), INTENT_GRACE_MS);
    let state = |id: i64| state_of(&rec, id);
    assert_eq!((state(1), state(2), state(3)), (STOPPED, DEAD, STOPPED));
    assert!(rec.newly_outbid.is_empty());
}

#[test]
fn a_bid_paused_without_our_asking_is_outbid_in_both_shapes() {
    let stopped = |id: u64, intended: &str, next: Option<&str>| {
        let mut i = inst(id, &format!("fleetagent-{id}"), Some("stopped"));
        i.is_bid = Some(true);
        i.machine_id = Some(500 + id);
        i.intended_status = Some(intended.into());
        i.cur_state = Some("stopped".into());
        i.next_state = next.map(String::from);
        i
    };
    let mut listing = vec![
        // intended_status left running (the docs' "resumes automatically").
        stopped(1, "running", Some("running")),
        // cur_state, intended_status and next_state all stopped (dstack's observation).
        stopped(2, "stopped", Some("stopped")),
        // Stopped by us: a stop of ours is on the ledger.
        stopped(3, "stopped", Some("stopped")),
        // Not a bid: plain stopped.
        stopped(4, "stopped", Some("stopped")),
        // actual_status not (yet) stopped, the three states all stopped: paused too.
        stopped(5, "stopped", Some("stopped")),
    ];
    listing[3].is_bid = Some(false);
    listing[4].actual_status = None;
    let local: Vec<InstanceRow> = (1..=5)
        .map(|i| row(&format!("fleetagent-{i}"), Some(i), PROVING, 0.4))
        .collect();
    let mut inp = input(local, vec![], Some(&listing), None);
    inp.our_stops.insert(3);
    let rec = reconcile(&inp, INTENT_GRACE_MS);
    let state = |id: i64| state_of(&rec, id);
    assert_eq!(
        (state(1), state(2), state(3), state(4), state(5)),
        (OUTBID, OUTBID, STOPPED, STOPPED, OUTBID)
    );
    let mut outbid: Vec<(i64, Option<i64>)> = rec.newly_outbid.clone();
    outbid.sort();
    assert_eq!(outbid, vec![(1, Some(501)), (2, Some(502)), (5, Some(505))]);
    // Each is a change nobody of ours made, for the journal at warning.
    assert_eq!(
        rec.bid_changes
            .iter()
            .filter(|l| l.contains("proving -> outbid"))
            .count(),
        3,
        "{:?}",
        rec.bid_changes
    );
    assert!(rec
        .changes
        .iter()
        .any(|c| c.contains("proving -> outbid") && c.contains("counts against the caps")));
    // Counted in full, flagged, and shown.
    let snap = Snapshot {
        now: NOW,
        instances: rec.rows.clone(),
        ..Default::default()
    };
    assert_eq!(snap.billing_count(), 3);
    let c = config();
    let flags = flags(&snap, &c);
    assert_eq!(
        flags,
        vec![
            (1, "outbid".into()),
            (2, "outbid".into()),
            (5, "outbid".into())
        ]
    );
    // A stopped one of ours past vast.stopped_max_hours is flagged for destroy.
    let mut old = snap.clone();
    old.now = NOW + 25 * 60 * MIN;
    assert!(old
        .flagged(&c)
        .iter()
        .any(|f| f.vast_id == 3 && f.why == "stopped 25h"));
}

/// A stopped spare started again (by us or in the console) boots a new worker: the address
/// its old one had is dropped, so it reads as booting, not as one that lost its worker (a
/// re-test saw a rental made beside a restarted spare, and it would be flagged silent).
#[test]
fn a_spare_started_again_forgets_its_old_workers_address() {
    let mut spare = row("fleetagent-s", Some(6), STOPPED, 0.4);
    spare.worker_address = Some("172.17.0.6:12300".into());
    let listing = vec![inst(6, "fleetagent-s", Some("running"))];
    let rec = reconcile(
        &input(vec![spare], vec![], Some(&listing), None),
        INTENT_GRACE_MS,
    );
    assert_eq!(rec.rows[0].state, BOOTED);
    assert_eq!(rec.rows[0].worker_address, None);
}

/// Ours by install id under the prefix used before `vast.label_prefix` changed: found by
/// `ours_elsewhere` (stored for doctor), in the exact shape only, never another install's.
#[test]
fn ours_under_an_old_prefix_are_found_by_their_install_id() {
    let listing = vec![
        inst(1, "team-a-qwerty-r3-0a0b0c0d", Some("running")),
        inst(2, "fleetagent-qwerty-r4-0a0b0c0d", Some("running")),
        inst(3, "team-a-zxcvbn-r3-0a0b0c0d", Some("running")),
        inst(4, "team-a-qwerty-spare", Some("running")),
        inst(5, "fleetagent-zxcvbn-r3-0a0b0c0d", Some("running")),
    ];
    let found: Vec<(i64, String)> = ours_elsewhere(&listing, "fleetagent", "qwerty", &[])
        .into_iter()
        .map(|f| (f.vast_id, f.install_id))
        .collect();
    assert_eq!(found, vec![(1, "qwerty".to_string())]);
    let seen: Vec<i64> = seen_elsewhere(&listing, "fleetagent", "qwerty", &[])
        .iter()
        .map(|f| f.vast_id)
        .collect();
    assert_eq!(
        seen,
        vec![5, 1],
        "other installs first, then ours elsewhere"
    );
    // One the table holds (a plain prefix change: still managed) is not named.
    assert!(ours_elsewhere(&listing, "fleetagent", "qwerty", &[1]).is_empty());
}

#[test]
fn another_installs_instances_are_never_adopted_and_leave_our_table() {
    let listing = vec![
        inst(1, "fleetagent-qwerty-r3-0a0b0c0d", Some("running")),
        inst(2, "fleetagent-zxcvbn-r3-0a0b0c0d", Some("running")),
        inst(3, "fleetagent-r2-11223344", Some("running")),
        inst(4, "someone-else", Some("running")),
        // In our table from before (an older build adopted it): not ours any more.
        inst(5, "fleetagent-zxcvbn-r1-55667788", Some("running")),
    ];
    let local = vec![row(
        "fleetagent-zxcvbn-r1-55667788",
        Some(5),
        REGISTERED,
        0.4,
    )];
    let rec = reconcile(
        &input(local.clone(), vec![], Some(&listing), None),
        INTENT_GRACE_MS,
    );
    let ids: Vec<Option<i64>> = rec.rows.iter().map(|r| r.vast_id).collect();
    assert_eq!(ids, vec![Some(1), Some(3)], "ours: our id, and no id");
    assert_eq!(rec.foreign, vec![4]);
    let other: Vec<(i64, &str)> = rec
        .other_installs
        .iter()
        .map(|f| (f.vast_id, f.install_id.as_str()))
        .collect();
    assert_eq!(other, vec![(2, "zxcvbn"), (5, "zxcvbn")]);
    assert_eq!(
        rec.deleted,
        vec!["fleetagent-zxcvbn-r1-55667788".to_string()]
    );
    assert!(
        rec.changes.iter().any(|c| c.starts_with(
            "instance 5 \"fleetagent-zxcvbn-r1-55667788\" carries install zxcvbn's id"
        )),
        "{:?}",
        rec.changes
    );
    // A failed listing keeps our table, never the other install's row.
    let rec = reconcile(&input(local, vec![], None, None), INTENT_GRACE_MS);
    assert!(rec.rows.is_empty());
    assert_eq!(rec.deleted.len(), 1);
}

#[test]
fn duplicate_labels_both_kept() {
    let listing = vec![
        inst(1, "fleetagent-dup", Some("running")),
        inst(2, "fleetagent-dup", Some("running")),
    ];
    let rec = reconcile(
        &input(vec![], vec![], Some(&listing), None),
        INTENT_GRACE_MS,
    );
    let labels: Vec<&str> = rec.rows.iter().map(|r| r.label.as_str()).collect();
    assert_eq!(labels, vec!["fleetagent-dup", "fleetagent-dup~2"]);
}

/// A launch first listed well above the offer's price it was rented at is named, with its
/// host, for the pass to leave that host out; one listed near its price is not.
#[test]
fn a_launch_billed_well_above_its_offer_is_named_with_its_host() {
    let priced = |id: u64, label: &str, status: &str, dph: f64| {
        let mut i = inst(id, label, Some(status));
        i.dph_total = Some(dph);
        i
    };
    let mut dear = priced(5, "fleetagent-r1-aaaa", "loading", 2.0);
    dear.machine_id = Some(31_337);
    // Above by a fifth: its host is not blamed, but what it bills past the launch's check
    // is said (a walkthrough's broke max_dph_total unsaid).
    let listing = vec![
        dear,
        priced(6, "fleetagent-r1-bbbb", "loading", 0.45),
        priced(7, "fleetagent-r1-cccc", "loading", 0.48),
    ];
    let local = vec![
        row("fleetagent-r1-aaaa", None, LAUNCHING, 0.4),
        row("fleetagent-r1-bbbb", None, LAUNCHING, 0.4),
        row("fleetagent-r1-cccc", None, LAUNCHING, 0.4),
    ];
    let intents = vec![
        intent(1, "fleetagent-r1-aaaa", NOW - 60_000),
        intent(2, "fleetagent-r1-bbbb", NOW - 60_000),
        intent(3, "fleetagent-r1-cccc", NOW - 60_000),
    ];
    let rec = reconcile(
        &input(local, intents, Some(&listing), None),
        INTENT_GRACE_MS,
    );
    assert_eq!(rec.overbilled.len(), 1, "{:?}", rec.overbilled);
    let (id, host, line) = &rec.overbilled[0];
    assert_eq!((*id, *host), (5, Some(31_337)));
    assert!(
        line.starts_with("instance 5 is billed $2/h, 5.0x the $0.4/h offer it was rented at"),
        "{line}"
    );
    let counted = rec.rows.iter().find(|r| r.vast_id == Some(5)).unwrap();
    assert_eq!(counted.dph, Some(2.0), "the caps count what it bills");
    assert_eq!(
        rec.above_offer,
        vec!["instance 7 is billed $0.480/h, 20 % above the $0.400/h offer it was rented at: the caps count what it bills, above what its launch was checked at".to_string()]
    );
    // Creates that vast.ai answered (no open intent: the row holds the offer's price until
    // its first listing) are judged alike; once listed, a later move is a repricing.
    let mut answered_dear = priced(8, "fleetagent-r1-dddd", "loading", 0.8);
    answered_dear.machine_id = Some(808);
    let listing = vec![
        answered_dear,
        priced(9, "fleetagent-r1-eeee", "loading", 0.48),
        priced(10, "fleetagent-r1-ffff", "running", 0.8),
    ];
    let mut seen = row("fleetagent-r1-ffff", Some(10), BOOTED, 0.4);
    seen.last_seen_at = Some(NOW - 60_000);
    let local = vec![
        row("fleetagent-r1-dddd", Some(8), LAUNCHING, 0.4),
        row("fleetagent-r1-eeee", Some(9), LAUNCHING, 0.4),
        seen,
    ];
    let rec = reconcile(&input(local, vec![], Some(&listing), None), INTENT_GRACE_MS);
    let blamed: Vec<(i64, Option<i64>)> = rec.overbilled.iter().map(|o| (o.0, o.1)).collect();
    assert_eq!(blamed, vec![(8, Some(808))]);
    assert_eq!(rec.above_offer.len(), 1, "{:?}", rec.above_offer);
    assert!(rec.above_offer[0].starts_with("instance 9 is billed $0.480/h"));
    assert_eq!(rec.repriced.len(), 1, "{:?}", rec.repriced);
}

/// A stop or destroy of ours that vast.ai acknowledged is undone when the listing still shows
/// the instance billing past the listing's lag: a destroyed one listed at all (a stopped one
/// bills its disk) unless the listing says it is being destroyed; a stopped one listed as
/// anything but stopped.
#[test]
fn acknowledged_ends_that_did_not_take_are_undone() {
    let mut being_destroyed = inst(3, "fleetagent-3", Some("running"));
    being_destroyed.intended_status = Some("destroyed".into());
    let listing = vec![
        inst(1, "fleetagent-1", Some("running")),
        inst(2, "fleetagent-2", Some("stopped")),
        being_destroyed,
        inst(4, "fleetagent-4", Some("running")),
        inst(5, "fleetagent-5", Some("stopped")),
        inst(6, "fleetagent-6", Some("running")),
    ];
    let mut local: Vec<InstanceRow> = (1..=6)
        .map(|i| row(&format!("fleetagent-{i}"), Some(i), GONE, 0.4))
        .collect();
    local
        .iter_mut()
        .for_each(|r| r.gone_at = Some(NOW - 5 * MIN));
    let mut inp = input(local, vec![], Some(&listing), None);
    for (id, kind, ago) in [
        (1, "destroy", 5 * MIN),
        (2, "destroy", 5 * MIN),
        (3, "destroy", 5 * MIN),
        (4, "stop", 5 * MIN),
        (5, "stop", 5 * MIN),
        // Within the listing's lag: not yet.
        (6, "destroy", MIN),
    ] {
        inp.our_ends.insert(id, (kind.to_string(), NOW - ago));
    }
    inp.our_stops.extend([4, 5]);
    let rec = reconcile(&inp, INTENT_GRACE_MS);
    let undone: Vec<(i64, &str)> = rec
        .undone
        .iter()
        .map(|u| (u.vast_id, u.kind.as_str()))
        .collect();
    assert_eq!(undone, vec![(1, "destroy"), (2, "destroy"), (4, "stop")]);
    let one = &rec.undone[0];
    assert_eq!((one.at, one.dph), (NOW - 5 * MIN, Some(0.4)));
}

/// An intent whose create failed while vast.ai made an instance anyway, and whose destroy of
/// it failed: the listing that shows it destroys it (`Undone::orphan`), the intent left open
/// meanwhile (settled failed once the instance is gone, as any unlisted one), never adopted
/// as launched; a destroy that fails again is sent again by the next pass.
#[test]
fn an_orphan_of_a_failed_create_is_destroyed_never_adopted() {
    let mut a = intent(41, "fleetagent-qwerty-r3-0badf00d", NOW - 5 * MIN);
    a.detail = Some("orphan instance 9: create failed (insufficient bid), ...".into());
    let listing = vec![inst(9, "fleetagent-qwerty-r3-0badf00d", Some("stopped"))];
    let mut inp = input(vec![], vec![a], Some(&listing), None);
    inp.install_id = "qwerty";
    let rec = reconcile(&inp, INTENT_GRACE_MS);
    assert!(rec.settle.is_empty(), "{:?}", rec.settle);
    assert_eq!(rec.undone.len(), 1);
    assert!(rec.undone[0].orphan && rec.undone[0].kind == "destroy");
}

/// A listing asked for before an operator's destroy or stop that vast.ai acknowledged while
/// the pass listed (the race walkthrough's F5): it still shows the instance running, and that
/// is older than what the ledger knows. The destroyed row stays gone (not revived as booted
/// and counted as capacity), the stopped one stays stopped, neither is undone or foreign. A
/// listing asked for after the end says whether it took, as before; an end dated after now
/// (another host's clock ahead) does not hide an instance.
#[test]
fn an_end_acknowledged_after_the_listing_was_asked_for_outranks_it() {
    let listing = vec![
        inst(1, "fleetagent-1", Some("running")),
        inst(2, "fleetagent-2", Some("running")),
        inst(3, "fleetagent-3", Some("running")),
    ];
    let mut destroyed = row("fleetagent-1", Some(1), GONE, 0.4);
    destroyed.gone_at = Some(NOW - 10_000);
    let stopped = row("fleetagent-2", Some(2), STOPPED, 0.4);
    let mut future = row("fleetagent-3", Some(3), GONE, 0.4);
    future.gone_at = Some(NOW - 10_000);
    let local = vec![destroyed, stopped, future];
    let ends = [
        (1, "destroy", NOW - 10_000),
        (2, "stop", NOW - 10_000),
        (3, "destroy", NOW + 10 * MIN),
    ];
    let run = |listed_at: Millis| {
        let mut inp = input(local.clone(), vec![], Some(&listing), None);
        inp.listed_at = listed_at;
        inp.our_stops.insert(2);
        for (id, kind, at) in ends {
            inp.our_ends.insert(id, (kind.to_string(), at));
        }
        reconcile(&inp, INTENT_GRACE_MS)
    };
    let stale = run(NOW - 30_000);
    let states: Vec<(Option<i64>, State)> =
        stale.rows.iter().map(|r| (r.vast_id, r.state)).collect();
    assert_eq!(states, vec![(Some(3), BOOTED), (Some(2), STOPPED)]);
    assert!(stale.undone.is_empty(), "{:?}", stale.undone.len());
    assert!(stale.foreign.is_empty(), "{:?}", stale.foreign);
    assert!(
        stale.changes.iter().all(|c| !c.contains("instance 1 ")),
        "{:?}",
        stale.changes
    );
    // Asked for after the ends: the listing is the newer word.
    let fresh = run(NOW - 5_000);
    let mut states: Vec<(Option<i64>, State)> =
        fresh.rows.iter().map(|r| (r.vast_id, r.state)).collect();
    states.sort_by_key(|s| s.0);
    assert_eq!(
        states,
        vec![(Some(1), BOOTED), (Some(2), BOOTED), (Some(3), BOOTED)]
    );
}

/// Another agent's fleet proving for this cluster: instances labelled in fleetagent's shape
/// with another install id, under any prefix (ours too), whose labels Curio's workers carry.
/// Not a worker named after its instance by hand, nor ours under an old prefix (a re-test saw
/// both called another fleet).
#[test]
fn another_agents_fleet_is_told_by_its_labels_shape_and_id() {
    let listing = [
        inst(1, "stage-qwerty-r4-0a1b2c3d", Some("running")),
        inst(2, "manual-prover", Some("running")),
        inst(3, "old-seedvs-r7-0a1b2c3d", Some("running")),
        inst(5, "curio-worker-r1-01", Some("running")),
        inst(6, "my-box-r1-a", Some("running")),
    ];
    let workers = [
        worker("stage-qwerty-r4-0a1b2c3d", "10.0.0.1:12300", 1),
        worker("manual-prover", "10.0.0.2:12300", 1),
        worker("old-seedvs-r7-0a1b2c3d", "10.0.0.3:12300", 1),
        worker("curio-worker-r1-01", "10.0.0.5:12300", 1),
        worker("my-box-r1-a", "10.0.0.6:12300", 1),
    ];
    let named = rival_fleet(listing.iter(), &workers, "seedvs");
    assert_eq!(named, vec!["\"stage-qwerty-r4-0a1b2c3d\" (instance 1)"]);
    // Without a worker of its name it proves for another cluster, if any.
    assert!(rival_fleet(listing.iter(), &workers[1..], "seedvs").is_empty());
    // Another install under our own prefix counts too (reconcile passes every instance not
    // ours).
    let ours_prefix = [inst(4, "fleetagent-zzother-r1-0a1b2c3d", Some("running"))];
    let w = [worker(
        "fleetagent-zzother-r1-0a1b2c3d",
        "10.0.0.4:12300",
        1,
    )];
    assert_eq!(rival_fleet(ours_prefix.iter(), &w, "seedvs").len(), 1);
}
