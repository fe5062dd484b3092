//! `poll` with the real binary: it rings on a worker death and writes nothing otherwise.

use super::machine;
use crate::common::fake_vast::{FakeVast, FAKE_API_KEY};
use crate::common::fleet::Fleet;
use crate::common::pg::{self};

/// A fake vast.ai with one instance of ours (its id), Curio's database with its live worker
/// proving, and a fleet pointed at both.
fn one_instance_and_its_worker() -> (FakeVast, pg::TestDb, u64, Fleet) {
    let fake = FakeVast::start_real_time();
    let mut db = pg::fresh_db();
    machine(&mut db, 1, "fleetagent-a", "10.0.0.1:12300", 10, 1);
    let a = fake.add_instance("fleetagent-a");
    let f = Fleet::new()
        .env("VAST_API_KEY", FAKE_API_KEY)
        .env("FLEETAGENT_HARMONYDB_URL", &db.url());
    f.write_config(&format!(
        "{}\n[vast]\nbase_url = \"{}\"\n",
        crate::common::fleet::FAST_CONFIG,
        fake.url()
    ));
    (fake, db, a, f)
}

#[test]
fn poll_rings_on_a_worker_death_and_writes_nothing_otherwise() {
    let (fake, mut db, a, f) = one_instance_and_its_worker();
    let state = |f: &Fleet| -> (Option<String>, Option<i64>, i64) {
        f.db()
            .query_row(
                "SELECT poll_snapshot, poll_at, (SELECT COUNT(*) FROM events) FROM agent_state",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap()
    };

    // The first poll records what it sees; nothing for the agent, and nothing printed
    // unless asked (-vv): a poll a minute must not fill the journal.
    let out = f.cmd(&["-vv", "poll"]).ok();
    assert!(out.stderr.contains("state recorded"), "{}", out.stderr);
    assert_eq!(out.stdout, "");
    let first = state(&f);
    assert!(first.0.as_deref().unwrap().contains("live"), "{first:?}");
    assert_eq!(first.2, 0);
    assert!(!f.doorbell().exists());

    // Nothing changed: nothing written, nothing said.
    let out = f.cmd(&["poll"]).ok();
    assert_eq!((out.stdout.as_str(), out.stderr.as_str()), ("", ""));
    assert_eq!(state(&f), first);
    assert!(!f.doorbell().exists());

    // The worker stops sending heartbeats (its container still runs), and work waits.
    db.exec("UPDATE curio.harmony_machines SET last_contact = now() - interval '10 minutes'");
    let out = f.cmd(&["poll"]).ok();
    assert!(out.stdout.contains("doorbell rung"), "{}", out.stdout);
    let (_, _, events) = state(&f);
    assert_eq!(events, 1);
    let reason: String = f
        .db()
        .query_row(
            "SELECT reason FROM events WHERE kind='poll' AND priority=1",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(
        reason.contains(&format!("instance {a} \"fleetagent-a\": live -> up")),
        "{reason}"
    );
    assert!(reason.contains("WORKERS DEAD: 1 proofs queued"), "{reason}");
    assert!(f.doorbell().exists());

    // Still dead: not a new condition, nothing written.
    let before = state(&f);
    f.cmd(&["poll"]).ok();
    assert_eq!(state(&f), before);

    // vast.ai refuses the listing: the poll fails (exit 1) with one line naming it, as `run`
    // does, so that poll.service is not green while nothing can see the fleet.
    fake.set_api_key(Some("another-key"));
    let out = f.cmd(&["poll"]).code(1);
    let lines: Vec<&str> = out.stderr.trim().lines().collect();
    assert!(
        lines.len() == 1 && lines[0].starts_with("fleetagent: poll: the vast.ai listing failed: "),
        "{}",
        out.stderr
    );
}

/// A listing that leaves out an instance of ours vast.ai still shows: `poll` asks for it as a
/// pass does, and says no change (it said "is gone", and "appeared" a minute later, each a P1
/// pass; the soak walkthrough).
#[test]
fn poll_asks_for_an_instance_the_listing_left_out() {
    use crate::common::fake_vast::{FakeReply, Route};
    let (fake, _db, a, f) = one_instance_and_its_worker();
    f.cmd(&["run"]).ok();
    f.cmd(&["poll"]).ok();
    let events = |f: &Fleet| f.count("SELECT COUNT(*) FROM events WHERE kind = 'poll'");
    let before = events(&f);
    let empty = FakeReply::json(200, serde_json::json!({"instances": []}));
    fake.lose_next_answer(Route::ListV1, 1, empty);
    let out = f.cmd(&["poll"]).ok();
    assert!(
        out.stderr
            .contains(&format!("vast.ai's listing left out instance {a}")),
        "{}",
        out.stderr
    );
    assert!(!out.stdout.contains("is gone"), "{}", out.stdout);
    assert_eq!(events(&f), before, "no change: {}", out.stdout);
    assert_eq!(fake.count(Route::Show), 1);
}
