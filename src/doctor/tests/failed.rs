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
