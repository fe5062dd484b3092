//! A wall clock that stepped back (NTP, a VM restored from a snapshot): the ledger holds
//! launches dated in the future. They once held the launch window shut until the clock caught
//! up (WORKERS DEAD, an empty fleet, every launch refused for hours), and the create spacing
//! slept a run for the length of the step, past its deadline.

use std::time::Instant;

use crate::common::fake_llm::{FakeLlm, Reply};
use crate::common::fake_vast::{FakeVast, Route};
use crate::suite::agent_e2e::{busy_fleet, dead_fleet, one_instance_is_enough, rig, write_demand};

#[test]
fn launches_dated_after_a_clock_step_back_count_from_now_and_spacing_waits_one_gap() {
    let llm = FakeLlm::start();
    llm.set_default(Reply::text("No action needed."));
    let vast = FakeVast::start_real_time();
    vast.add_offers(4, "RTX 4090", 0.40, 0.99);
    let f = rig(
        &llm,
        &vast,
        "max_dph_total = 10.0\nmax_instances = 20\nlaunch_window_max = 1\nemergency_launch_max = 3",
        "quiet_interval_mins = 0",
    );
    one_instance_is_enough(&f);
    write_demand(f.path(), dead_fleet());
    // Two launches of an earlier pass, dated two hours ahead of this clock (it stepped back
    // since); their instances are gone. WORKERS DEAD: 3 in the window, so one more may go.
    let ahead = chrono::Utc::now().timestamp_millis() + 7_200_000;
    for i in 0..2 {
        f.db()
            .execute(
                "INSERT INTO actions (kind, outcome, actor, label, created_at, finished_at)
                 VALUES ('launch', 'ok', 'floor', ?1, ?2, ?2)",
                rusqlite::params![format!("fleetagent-r0-0a0b0c0{i}"), ahead],
            )
            .unwrap();
    }
    f.cmd(&["trigger", "-p", "1", "-r", "workers died"]).ok();
    let started = Instant::now();
    let out = f.cmd(&["run"]).ok();
    let took = started.elapsed();
    assert!(
        out.stderr
            .contains("the clock is 2h00m behind the ledger: it stepped back"),
        "{}",
        out.stderr
    );
    // The window counted them from now, and the create waited one gap after the last one
    // (dated ahead), not two hours (the bound is loose: a shared machine).
    assert_eq!(vast.count(Route::Create), 1, "{}", out.stderr);
    assert!(took.as_secs() < 60, "{took:?}");
    let dated_ahead: i64 = f.count(&format!(
        "SELECT COUNT(*) FROM actions WHERE created_at > {}",
        ahead - 3_600_000
    ));
    assert_eq!(dated_ahead, 0);

    // Three in the window now; the new instance gone too: refused, retried within the
    // window's 15 minutes, not the two hours of the step.
    for id in vast.instance_ids() {
        vast.remove_instance(id);
    }
    f.cmd(&["trigger", "-p", "1", "-r", "dead again"]).ok();
    f.cmd(&["run"]).ok();
    assert_eq!(vast.count(Route::Create), 1);
    let detail: String = f
        .db()
        .query_row(
            "SELECT detail FROM actions WHERE outcome = 'refused' AND code = 'rate_limited'
              ORDER BY id DESC LIMIT 1",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&detail).unwrap();
    let retry = v["retry_after_secs"].as_u64().unwrap();
    assert!(retry > 0 && retry <= 900, "{v}");
}

/// vast.ai's clock, as the `Date` of its answers, two hours behind this host's.
struct VastBehind;

impl fleetagent::clock::Clock for VastBehind {
    fn now_ms(&self) -> fleetagent::clock::Millis {
        fleetagent::clock::SystemClock.now_ms() - 7_200_000
    }
    fn sleep(&self, d: std::time::Duration) {
        fleetagent::clock::SystemClock.sleep(d)
    }
}

/// This host's clock two hours off vast.ai's: a pass says so at warning (every pass) and to
/// the agent (once, when it begins), and `doctor` names it, so that the step that sets it
/// right (which moves the launch window and the rental protections) is no surprise.
#[test]
fn a_host_clock_off_vast_ais_is_said_and_named_by_doctor() {
    let llm = FakeLlm::start();
    llm.set_default(Reply::text("No action needed."));
    let vast = FakeVast::start(std::sync::Arc::new(VastBehind));
    let f = rig(&llm, &vast, "", "");
    let said = "this host's clock is 2h00m ahead of vast.ai's (the Date of its answers)";
    for _ in 0..2 {
        f.cmd(&["trigger", "-p", "1", "-r", "look"]).ok();
        let out = f.cmd(&["run"]).ok();
        assert!(out.stderr.contains(said), "{}", out.stderr);
    }
    let told: i64 = f.count(
        "SELECT COUNT(*) FROM events WHERE kind = 'lifecycle'
          AND reason LIKE 'this host''s clock is 2h00m ahead of vast.ai''s%'",
    );
    assert_eq!(told, 1, "the agent is told when it begins");
    let doctor = f.cmd(&["doctor"]);
    assert!(doctor.stdout.contains(said), "{}", doctor.stdout);
    let skew: i64 = f.count("SELECT vast_clock_skew_ms FROM agent_state");
    assert!((7_199_000..7_203_000).contains(&skew), "{skew}");
    // Answers without a `Date` measure nothing: the skew stands, and doctor still names it
    // (it was cleared, and a standing alert with it, by a proxy that dropped the header).
    vast.set_dateless(true);
    f.cmd(&["trigger", "-p", "1", "-r", "look"]).ok();
    let out = f.cmd(&["run"]).ok();
    assert!(
        !out.stderr.contains(said),
        "nothing measured: {}",
        out.stderr
    );
    f.cmd(&["poll"]).ok();
    let kept: i64 = f.count("SELECT vast_clock_skew_ms FROM agent_state");
    assert_eq!(kept, skew);
    assert!(f.cmd(&["doctor"]).stdout.contains(said));
}

/// vast.ai's clock at this host's plus an offset the test sets (a host's clock behind
/// vast.ai's by that much, as that host measures it; `ha_own` uses it too).
pub(crate) struct VastAt(pub(crate) std::sync::atomic::AtomicI64);

impl fleetagent::clock::Clock for VastAt {
    fn now_ms(&self) -> fleetagent::clock::Millis {
        fleetagent::clock::SystemClock.now_ms() + self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
    fn sleep(&self, d: std::time::Duration) {
        fleetagent::clock::SystemClock.sleep(d)
    }
}

/// An install whose clock runs two hours behind vast.ai's (`VastAt` two hours ahead, which
/// the test may set right), the rules deciding under `policy`, Curio's demand `demand`,
/// `offers` RTX 4090 offers: its first pass run, which measured the skew.
fn two_hours_behind(
    policy: &str,
    demand: serde_json::Value,
    offers: usize,
) -> (
    std::sync::Arc<VastAt>,
    FakeVast,
    crate::common::fleet::Fleet,
    crate::common::fleet::Run,
) {
    let clock = std::sync::Arc::new(VastAt(std::sync::atomic::AtomicI64::new(7_200_000)));
    let vast = FakeVast::start(clock.clone());
    vast.add_offers(offers, "RTX 4090", 0.40, 0.99);
    let f = crate::common::fleet::Fleet::with_config("").env("VAST_API_KEY", &vast.api_key());
    let path = f.path().join("demand.json");
    f.write_config(&crate::common::config::rules_config(
        &vast.url(),
        &path,
        &[policy],
    ));
    write_demand(f.path(), demand);
    f.cmd(&["init"]).ok();
    let out = f.cmd(&["run"]).ok();
    assert!(
        out.stderr.contains("2h00m behind vast.ai's"),
        "{}",
        out.stderr
    );
    (clock, vast, f, out)
}

/// The drill (2026-12-06): this host's clock ran two hours behind vast.ai's, a pass launched,
/// then the clock was set right (a step forward). What the slow hours dated read two hours
/// older: the launch window let more launches go (8 in 3 minutes against 6 per 15), and idle
/// instances were stopped within policy.min_rental_mins. The first listing that sees the
/// clock agree with vast.ai's again dates the slow hours' rows later by the step.
///
/// A test cannot step this host's clock, so it writes the database a slow clock would have:
/// the pass runs against a vast.ai two hours ahead (it measures the skew and marks where the
/// slow hours begin), then every time it wrote is put two hours back, and vast.ai's clock is
/// made this host's (the clock set right). The drill itself ran the binary under faketime.
#[test]
fn a_clock_set_right_after_running_behind_keeps_the_launch_window_of_its_slow_hours() {
    use std::sync::atomic::Ordering;
    let (clock, vast, f, out) = two_hours_behind(
        "[policy]\ntarget_proofs_per_hour = 100\nproofs_per_hour_per_instance = 100\nmax_dph_total = 4.0\nmax_instances = 6\nlaunch_window_max = 1\nemergency_launch_max = 1",
        dead_fleet(),
        4,
    );
    assert_eq!(vast.count(Route::Create), 1, "{}", out.stderr);

    // What a clock two hours slow would have written.
    let db = f.db();
    for sql in [
        "UPDATE actions SET created_at = created_at - 7200000, finished_at = finished_at - 7200000",
        "UPDATE instances SET created_at = created_at - 7200000, state_since = state_since - 7200000,
                              last_seen_at = last_seen_at - 7200000",
        "UPDATE agent_state SET vast_clock_skew_since_ms = vast_clock_skew_since_ms - 7200000",
    ] {
        assert!(db.execute(sql, []).unwrap() > 0, "{sql}");
    }
    // Set right; the instance is gone, WORKERS DEAD again: the window, one launch in
    // 15 minutes, holds the launch of a minute ago.
    clock.0.store(0, Ordering::SeqCst);
    for id in vast.instance_ids() {
        vast.remove_instance(id);
    }
    f.cmd(&["trigger", "-p", "1", "-r", "dead again"]).ok();
    let out = f.cmd(&["run"]).ok();
    assert!(
        out.stderr
            .contains("fleetagent run: this host's clock stepped forward by 2h00m to vast.ai's"),
        "{}",
        out.stderr
    );
    assert_eq!(vast.count(Route::Create), 1, "{}", out.stderr);
    let old: i64 = f.count(&format!(
        "SELECT COUNT(*) FROM actions WHERE kind = 'launch' AND created_at < {}",
        chrono::Utc::now().timestamp_millis() - 3_600_000
    ));
    assert_eq!(old, 0, "the launch is dated as it happened");
    let told: i64 = f.count(
        "SELECT COUNT(*) FROM events WHERE kind = 'lifecycle'
          AND reason LIKE 'this host''s clock stepped forward by 2h00m%'",
    );
    assert_eq!(told, 1, "the agent is told");
}

/// The soak's repro: a 30-minute wake added while this host's clock ran two hours behind
/// vast.ai's, then the clock set right. The pass that runs first after it must not claim the
/// wake as two hours overdue before its listing sees the clock agree again (it ran at once):
/// while the clock is known behind, a pass lists before it claims.
#[test]
fn a_wake_of_the_slow_hours_is_not_run_early_when_the_clock_is_set_right() {
    use std::sync::atomic::Ordering;
    let (clock, _vast, f, _) =
        two_hours_behind("[policy]\ntarget_proofs_per_hour = 100", busy_fleet(), 0);
    f.cmd(&["wakes", "add", "--in", "30m", "--reason", "look again"])
        .ok();
    // What a clock two hours slow would have written.
    let db = f.db();
    for sql in [
        "UPDATE wakes SET created_at = created_at - 7200000, due_at = due_at - 7200000",
        "UPDATE agent_state SET vast_clock_skew_since_ms = vast_clock_skew_since_ms - 7200000",
    ] {
        assert!(db.execute(sql, []).unwrap() > 0, "{sql}");
    }
    clock.0.store(0, Ordering::SeqCst);
    f.cmd(&["trigger", "-p", "1", "-r", "look"]).ok();
    let out = f.cmd(&["run"]).ok();
    assert!(
        out.stderr.contains("stepped forward by 2h00m to vast.ai's"),
        "{}",
        out.stderr
    );
    let (status, left): (String, i64) = db
        .query_row(
            "SELECT status, due_at - (CAST(strftime('%s','now') AS INTEGER) * 1000) FROM wakes",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(status, "pending", "run early: {}", out.stderr);
    assert!(
        (25 * 60_000..=31 * 60_000).contains(&left),
        "due in {left} ms"
    );
}

/// A clock stepped forward (a walkthrough: +25 h under faketime) ended the operator's pause
/// and emptied the launch window: a pass rented two instances seconds after `pause --for 1h`.
/// While the pass measures its clock ahead of vast.ai's, pauses, the operator's hold and the
/// window are judged on vast.ai's time as well, the stricter winning.
///
/// As above, the test cannot step this host's clock: it dates what the first pass wrote and
/// the pause 25 hours back, and sets vast.ai's clock there.
#[test]
fn a_clock_run_ahead_ends_neither_a_pause_nor_the_launch_window() {
    use std::sync::atomic::Ordering;
    const DAY_AND_HOUR: i64 = 25 * 3_600_000;
    let (clock, vast, f, out) = two_hours_behind(
        "[policy]\ntarget_proofs_per_hour = 100\nproofs_per_hour_per_instance = 100\nmax_dph_total = 4.0\nmax_instances = 6\nlaunch_window_max = 1\nemergency_launch_max = 1",
        dead_fleet(),
        4,
    );
    assert_eq!(vast.count(Route::Create), 1, "{}", out.stderr);
    // The pass and a pause for an hour, as a clock right 25 hours ago wrote them.
    let now = chrono::Utc::now().timestamp_millis();
    let db = f.db();
    for sql in [
        format!("UPDATE actions SET created_at = created_at - {DAY_AND_HOUR}, finished_at = finished_at - {DAY_AND_HOUR}"),
        format!("UPDATE instances SET created_at = created_at - {DAY_AND_HOUR}, state_since = state_since - {DAY_AND_HOUR}, last_seen_at = last_seen_at - {DAY_AND_HOUR}"),
        format!("UPDATE agent_state SET vast_clock_skew_ms = NULL, vast_clock_skew_since_ms = NULL, paused_at = {}, paused_until = {}, paused_reason = 'hands off'", now - DAY_AND_HOUR, now - DAY_AND_HOUR + 3_600_000),
    ] {
        assert!(db.execute(&sql, []).unwrap() > 0, "{sql}");
    }
    // The clock jumps 25 hours ahead; the instance is gone, WORKERS DEAD again.
    clock.0.store(-DAY_AND_HOUR, Ordering::SeqCst);
    for id in vast.instance_ids() {
        vast.remove_instance(id);
    }
    f.cmd(&["trigger", "-p", "1", "-r", "dead again"]).ok();
    let out = f.cmd(&["run"]).ok();
    assert!(
        out.stderr.contains("1d01h ahead of vast.ai's"),
        "{}",
        out.stderr
    );
    assert_eq!(
        vast.count(Route::Create),
        1,
        "the pause holds: {}",
        out.stderr
    );
    assert!(f.inspect()["paused"].is_object());
    // Resumed: the window, one launch in 15 minutes by vast.ai's time, holds the first one.
    f.cmd(&["resume"]).ok();
    let out = f.cmd(&["run"]).ok();
    assert_eq!(
        vast.count(Route::Create),
        1,
        "the window holds: {}",
        out.stderr
    );
    let refused: i64 = f.count(
        "SELECT COUNT(*) FROM actions WHERE kind = 'launch' AND outcome = 'refused'
          AND detail LIKE '%rate_limited%'",
    );
    assert!(refused >= 1, "{}", out.stderr);
    // What the clock dates while ahead is in its own terms: a pause typed now for a second
    // ends after a second (a re-test's `pause --for 5s` lasted the whole skew).
    f.cmd(&["pause", "--for", "1s", "--reason", "a moment"])
        .ok();
    std::thread::sleep(std::time::Duration::from_millis(1200));
    assert!(f.inspect()["paused"].is_null());
}

/// A clock stepped 6 h forward (a walkthrough, under faketime: a bad NTP step) read an
/// instance rented a minute before by vast.ai's clock as `unbooted 6h01m`: it was destroyed
/// and another rented. While the pass measures its clock ahead of vast.ai's, the ages of
/// what it dated before are judged on vast.ai's time too (`clock_step::Ahead`). As above,
/// the test dates what the first pass wrote 6 hours back and sets vast.ai's clock there.
#[test]
fn a_clock_run_ahead_does_not_age_an_instance_still_booting() {
    use std::sync::atomic::Ordering;
    const SIX_HOURS: i64 = 6 * 3_600_000;
    let (clock, vast, f, out) = two_hours_behind(
        "[policy]\ntarget_proofs_per_hour = 100\nproofs_per_hour_per_instance = 100\nmax_dph_total = 4.0\nmax_instances = 1\nlaunch_window_max = 1\nemergency_launch_max = 1",
        dead_fleet(),
        2,
    );
    assert_eq!(vast.count(Route::Create), 1, "{}", out.stderr);
    let db = f.db();
    for sql in [
        format!("UPDATE actions SET created_at = created_at - {SIX_HOURS}, finished_at = finished_at - {SIX_HOURS}"),
        format!("UPDATE instances SET created_at = created_at - {SIX_HOURS}, state_since = state_since - {SIX_HOURS}, last_seen_at = last_seen_at - {SIX_HOURS}"),
        "UPDATE agent_state SET vast_clock_skew_ms = NULL, vast_clock_skew_since_ms = NULL".to_string(),
    ] {
        assert!(db.execute(&sql, []).unwrap() > 0, "{sql}");
    }
    // The clock jumps 6 hours ahead; the instance runs on vast.ai, no worker yet.
    clock.0.store(-SIX_HOURS, Ordering::SeqCst);
    for id in vast.instance_ids() {
        vast.set_actual_status(id, Some("running"));
    }
    f.cmd(&["trigger", "-p", "1", "-r", "look"]).ok();
    let out = f.cmd(&["run"]).ok();
    assert!(
        out.stderr.contains("6h00m ahead of vast.ai's"),
        "{}",
        out.stderr
    );
    assert_eq!(vast.count(Route::Destroy), 0, "{}", out.stderr);
    assert_eq!(vast.instance_ids().len(), 1, "{}", out.stderr);
    assert!(!out.stderr.contains("unbooted"), "{}", out.stderr);
}

/// A clock stepped 6 h forward between two passes (the away walkthrough, under faketime):
/// the pass claimed a wake due 10 minutes after the last one at once, "5h51m late", since it
/// claims before its listing measures the skew. A wake overdue by more than two timer periods
/// now has the pass list first. As above, the test dates what was written 6 hours back.
#[test]
fn a_wake_is_not_run_early_after_a_clock_step_forward_before_any_listing() {
    use std::sync::atomic::Ordering;
    const SIX_HOURS: i64 = 6 * 3_600_000;
    let (clock, vast, f, _) =
        two_hours_behind("[policy]\ntarget_proofs_per_hour = 100", busy_fleet(), 0);
    // The clock set right by a `poll` (no skew), then a wake for 10 minutes on.
    clock.0.store(0, Ordering::SeqCst);
    f.cmd(&["poll"]).ok();
    f.cmd(&["wakes", "add", "--in", "10m", "--reason", "look again"])
        .ok();
    let db = f.db();
    for sql in [
        format!("UPDATE wakes SET created_at = created_at - {SIX_HOURS}, due_at = due_at - {SIX_HOURS}"),
        format!("UPDATE runs SET started_at = started_at - {SIX_HOURS}, finished_at = finished_at - {SIX_HOURS}"),
        format!("UPDATE agent_state SET last_run_finished_at = last_run_finished_at - {SIX_HOURS}"),
    ] {
        assert!(db.execute(&sql, []).unwrap() > 0, "{sql}");
    }
    let skew: Option<i64> = db
        .query_row("SELECT vast_clock_skew_ms FROM agent_state", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert!(skew.is_none_or(|s| s.abs() < 60_000), "{skew:?}");
    // The clock jumps 6 hours ahead: vast.ai's is 6 hours behind it.
    clock.0.store(-SIX_HOURS, Ordering::SeqCst);
    f.cmd(&["trigger", "-p", "1", "-r", "look"]).ok();
    let out = f.cmd(&["run"]).ok();
    assert!(
        out.stderr.contains("6h00m ahead of vast.ai's"),
        "{}",
        out.stderr
    );
    let status: String = db
        .query_row("SELECT status FROM wakes", [], |r| r.get(0))
        .unwrap();
    assert_eq!(status, "pending", "run early: {}", out.stderr);
    // Nor is a step forward an absence: the last run ended a minute before by vast.ai's time
    // (a re-test: "the first pass in 6h01m" beside "6h ahead of vast.ai's").
    assert!(!out.stderr.contains("the first pass in"), "{}", out.stderr);
    // The skew known, the wake (overdue by this clock, not by vast.ai's) costs no second
    // listing a pass (a re-test: two listings a pass for as long as the wake waited).
    vast.clear_requests();
    f.cmd(&["trigger", "-p", "1", "-r", "look"]).ok();
    let out = f.cmd(&["run"]).ok();
    assert_eq!(vast.count(Route::ListV1), 1, "{}", out.stderr);
    let status: String = db
        .query_row("SELECT status FROM wakes", [], |r| r.get(0))
        .unwrap();
    assert_eq!(status, "pending", "run early: {}", out.stderr);
}

/// The host away for 3 days (the away walkthrough): the first pass after said nothing in
/// the journal, neither of the absence nor of an instance of ours that vanished from vast.ai
/// meanwhile (only the model was told), and an old event read as news. Each is said now.
#[test]
fn the_first_pass_after_days_away_says_so_and_names_what_vanished() {
    const THREE_DAYS: i64 = 3 * 86_400_000;
    let vast = FakeVast::start_real_time();
    vast.add_offers(2, "RTX 4090", 0.40, 0.99);
    let f = crate::common::fleet::Fleet::with_config("").env("VAST_API_KEY", &vast.api_key());
    let path = f.path().join("demand.json");
    f.write_config(&crate::common::config::rules_config(
        &vast.url(),
        &path,
        &["[policy]\ntarget_proofs_per_hour = 100\nproofs_per_hour_per_instance = 100\nmax_dph_total = 4.0\nmax_instances = 1\nlaunch_window_max = 1\nemergency_launch_max = 1"],
    ));
    write_demand(f.path(), dead_fleet());
    f.cmd(&["init"]).ok();
    f.cmd(&["run"]).ok();
    assert_eq!(vast.instance_ids().len(), 1);
    f.cmd(&["pause", "--for", "1h", "--reason", "maint"]).ok();
    f.cmd(&["resume"]).ok();
    // Three days pass: the last run was at work then, the pause's event was sent then, and the
    // instance is gone from vast.ai meanwhile.
    let db = f.db();
    for sql in [
        format!(
            "UPDATE runs SET started_at = started_at - {THREE_DAYS}, finished_at = finished_at - {THREE_DAYS}"
        ),
        format!(
            "UPDATE agent_state SET last_run_finished_at = last_run_finished_at - {THREE_DAYS}"
        ),
        format!(
            "UPDATE events SET created_at = created_at - {THREE_DAYS} WHERE claimed_by IS NULL"
        ),
    ] {
        assert!(db.execute(&sql, []).unwrap() > 0, "{sql}");
    }
    for id in vast.instance_ids() {
        vast.remove_instance(id);
    }
    let out = f.cmd(&["run"]).ok();
    assert!(
        out.stderr
            .contains("the first pass in 3d00h (the last run was at work "),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr
            .contains("is gone from the vast.ai listing (was "),
        "{}",
        out.stderr
    );
    let observation = f.last_observation();
    assert!(observation.contains("(sent 3d00h ago)"), "{observation}");
    assert!(
        observation.contains("the first pass in 3d00h"),
        "{observation}"
    );
}
