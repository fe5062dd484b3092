//! doctor's `events` and `wakes` checks: a failure is red for a day after it, then shown by
//! `inspect` alone (nothing cleared them: one bad night kept a monitor on `doctor` red for
//! good, blind to every later problem).

use super::*;

#[test]
fn failed_events_and_wakes_are_red_for_a_day_after_the_last() {
    let (_dir, s) = test_store(NOW);
    let c = &s.conn;
    let hour = 60 * MIN;
    c.execute(
        "INSERT INTO events (priority, kind, reason, created_at, attempts, failed_at, last_error)
         VALUES (0, 'message', 'keep two', ?1, 5, ?2, 'the model is down')",
        rusqlite::params![NOW - 30 * hour, NOW - 25 * hour],
    )
    .unwrap();
    c.execute(
        "INSERT INTO wakes (due_at, reason, created_at, created_by, status, attempts, finished_at)
         VALUES (?1, 'look', ?1, 'agent', 'failed', 5, ?2)",
        rusqlite::params![NOW - 30 * hour, NOW - 25 * hour],
    )
    .unwrap();
    assert!(agent::events(c, NOW).is_empty(), "a day and more ago");
    assert!(agent::wakes(c, NOW).is_empty(), "a day and more ago");
    c.execute(
        "UPDATE events SET failed_at = ?1",
        rusqlite::params![NOW - 2 * hour],
    )
    .unwrap();
    c.execute(
        "UPDATE wakes SET finished_at = ?1",
        rusqlite::params![NOW - 2 * hour],
    )
    .unwrap();
    let e = agent::events(c, NOW);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].line().starts_with(
            "1 event(s) failed after 5 attempts in the last 24 h, the newest 2h00m ago"
        ),
        "{}",
        e[0].line()
    );
    let w = agent::wakes(c, NOW);
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].line().contains("the newest 2h00m ago"),
        "{}",
        w[0].line()
    );
}

/// The operator's destroy that failed on an instance still listed: red, naming it, until a
/// stop or destroy of it goes through or it is gone (after the panic button the passes are
/// paused and nothing sent the call again: a walkthrough).
#[test]
fn an_operators_failed_destroy_of_an_instance_still_listed_is_red() {
    use crate::fleet::{fixtures::row, PROVING};
    let (_dir, s) = test_store(NOW);
    let c = &s.conn;
    crate::store::instances::upsert(c, &row("fleetagent-r1-0a0b0c0d", Some(1000), PROVING, 0.4))
        .unwrap();
    let destroy = |outcome: &str, actor: &str, at: Millis| {
        crate::store::actions::insert(
            c,
            &crate::store::actions::NewAction {
                kind: "destroy",
                outcome,
                actor,
                instance_id: Some(1000),
                detail: Some("vast.ai HTTP 500 server_error: boom"),
                ..Default::default()
            },
            at,
        )
        .unwrap()
    };
    assert!(agent::actions(c, NOW).is_empty());
    destroy("failed", "operator", NOW - 10 * MIN);
    let p = agent::actions(c, NOW);
    assert_eq!(p.len(), 1, "{p:?}");
    assert_eq!(
        p[0].line(),
        "the operator's destroy of instance 1000 \"fleetagent-r1-0a0b0c0d\" failed 10m ago and vast.ai still lists it: it bills, and nothing sends the call again: vast.ai HTTP 500 server_error: boom; fix: `fleetagent instances stop 1000 --force --reason ...` (or `instances stop --all` again); `fleetagent instances list` shows what still bills"
    );
    // A later destroy that went through (the rules', here) clears it.
    let ok = destroy("ok", "rules", NOW - 5 * MIN);
    assert!(agent::actions(c, NOW).is_empty());
    // So does the instance's end, whoever destroyed it.
    c.execute("DELETE FROM actions WHERE id = ?1", [ok])
        .unwrap();
    assert_eq!(agent::actions(c, NOW).len(), 1);
    c.execute("UPDATE instances SET state = 'gone'", [])
        .unwrap();
    assert!(agent::actions(c, NOW).is_empty());
}
