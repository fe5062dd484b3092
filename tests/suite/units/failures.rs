//! Under a real systemd user manager nothing spins: a bad config fails no unit, and a runaway
//! service trips the path unit's trigger limit with a fix that clears it.

use std::time::Duration;

use super::{runs, text, Installed};
use crate::common::systemd::{pause, wait_for};
use fleetagent::units::{self, Scope};

#[test]
fn a_bad_config_does_not_spin_and_leaves_no_unit_failed() {
    let t = Installed::new(5);
    let good = std::fs::read_to_string(&t.config).unwrap();
    std::fs::write(&t.config, format!("{good}\nsurprise = 1\n")).unwrap();
    let bad = t.fa(&["inspect", "--json"]);
    assert_eq!(bad.status.code(), Some(2), "the bad config was accepted");

    // A ring as `trigger` or `poll` leaves it (the event row stays in the database).
    let doorbell = t.state.join("trigger");
    std::fs::write(&doorbell, "bad-config test\n").unwrap();
    wait_for(
        "the agent to start on the doorbell and delete it",
        Duration::from_secs(30),
        || t.sd.starts(units::SERVICE) >= 1 && !doorbell.exists(),
        || t.context(),
    );
    // The doorbell is gone after a start, so nothing may start the agent again but the
    // timer (at most twice in a minute, :00/:05 slots plus a random delay). A loop would
    // restart it within a second of each exit (measured: five starts in under two seconds
    // with the default limits), so 15 s of watching tell a loop from the timer.
    for _ in 0..15 {
        pause(Duration::from_secs(1));
        let starts = t.sd.starts(units::SERVICE);
        assert!(
            starts <= 3,
            "{starts} starts within 15 s: spinning\n{}",
            t.context()
        );
    }
    let starts = t.sd.starts(units::SERVICE);
    println!("bad config: {starts} service starts in about 15 s");
    assert!(!doorbell.exists(), "the early exit left the doorbell");
    let path = t.sd.state(units::PATH_UNIT);
    assert!(
        path.starts_with("active/waiting"),
        "fleetagent.path is {path}"
    );
    let service =
        t.sd.show(units::SERVICE, &["ActiveState", "Result", "ExecMainStatus"]);
    // A config error (exit 2, SuccessExitStatus=2) leaves no unit failed and no start limit;
    // the journal and `doctor` (exit 2) name it.
    assert_eq!(
        (
            service["ActiveState"].as_str(),
            service["Result"].as_str(),
            service["ExecMainStatus"].as_str()
        ),
        ("inactive", "success", "2"),
        "{service:?}"
    );
    // The poll timer as the README enables it (its first poll comes 30 s later).
    t.sd.systemctl_ok(&["start", units::POLL_TIMER]);
    let states = units::unit_states_with_env(&t.sd.env_pairs()).expect("the user manager answers");
    assert!(states.problems().is_empty(), "{states:?}");
    t.assert_no_unit_failed();
    let doc = t.fa(&["doctor"]);
    assert_eq!(
        doc.status.code(),
        Some(2),
        "doctor reports the config error"
    );
    assert!(
        text(&doc.stderr).contains("surprise"),
        "{}",
        text(&doc.stderr)
    );

    // Fixing the config is all it takes: the next ring runs, and the unit is clean again.
    std::fs::write(&t.config, good).unwrap();
    t.trigger("systemd test: config fixed");
    wait_for(
        "a successful run after the fix",
        Duration::from_secs(30),
        || {
            runs(&t.inspect())
                .iter()
                .any(|r| r["started_by"] == "events" && r["status"] == "ok")
        },
        || t.context(),
    );
    t.wait_settled(
        "the ring after the fix to be served",
        Duration::from_secs(30),
    );
    t.assert_no_unit_failed();
}

#[test]
fn a_runaway_service_trips_the_trigger_limit_and_the_fix_clears_it() {
    // A service that never deletes the doorbell (here: ExecStart=/bin/true) is what a broken
    // agent would look like: PathExists= restarts it as soon as it stops.
    let t = Installed::install(5);
    let dropin = t.drop_in(
        units::SERVICE,
        "runaway.conf",
        "[Service]\nExecStart=\nExecStart=/bin/true\n",
    );
    let doorbell = t.state.join("trigger");
    std::fs::write(&doorbell, "runaway\n").unwrap();

    wait_for(
        "fleetagent.path to stop the loop with trigger-limit-hit",
        Duration::from_secs(30),
        || t.sd.state(units::PATH_UNIT) == "failed/failed (trigger-limit-hit)",
        || t.context(),
    );
    let starts = t.sd.starts(units::SERVICE);
    println!("runaway service: stopped after {starts} starts");
    // TriggerLimitBurst=30: the loop ends at the limit, not at systemd's default of 200.
    assert!(
        (2..=31).contains(&starts),
        "{starts} starts\n{}",
        t.context()
    );
    let service = t.sd.state(units::SERVICE);
    assert!(
        !service.starts_with("failed"),
        "fleetagent.service is {service}"
    );

    // inspect and doctor read this through src/units.rs; ask it directly here (the poll
    // timer started as the README enables it: its first poll comes 30 s later).
    t.sd.systemctl_ok(&["start", units::POLL_TIMER]);
    let states = units::unit_states_with_env(&t.sd.env_pairs()).expect("the user manager answers");
    assert_eq!(states.scope, Scope::User);
    let path = &states.units[units::PATH_UNIT];
    assert_eq!(
        path.problem,
        Some(units::Problem::TriggerLimitHit),
        "{states:?}"
    );
    let fix =
        "systemctl --user reset-failed fleetagent.path && systemctl --user start fleetagent.path";
    assert_eq!(path.fix.as_deref(), Some(fix));
    assert_eq!(states.units[units::SERVICE].problem, None, "{states:?}");
    assert_eq!(states.units[units::TIMER].problem, None, "{states:?}");
    // doctor names the problem and the fix, with exit 1.
    let doc = t.fa(&["doctor"]);
    assert_eq!(doc.status.code(), Some(1));
    let said = text(&doc.stdout);
    assert!(
        said.contains("fleetagent.path")
            && said.contains("trigger-limit-hit")
            && said.contains(fix)
            && said.contains("30 s after the failure at the earliest"),
        "{said}"
    );

    // The operator repairs the agent, then runs exactly the command that was named.
    std::fs::remove_dir_all(&dropin).unwrap();
    t.sd.systemctl_ok(&["daemon-reload"]);
    std::fs::remove_file(&doorbell).unwrap();
    let out = t.sd.cmd("sh").args(["-c", fix]).output().unwrap();
    assert!(out.status.success(), "{fix}: {}", text(&out.stderr));
    // Active again: waiting, or for a moment running the service a doorbell started (the
    // poll timer rings it when it sees a change; a loaded CI machine caught it `running`).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut path = t.sd.state(units::PATH_UNIT);
    while !path.starts_with("active/waiting") && std::time::Instant::now() < deadline {
        assert!(
            path.starts_with("active/"),
            "after the fix fleetagent.path is {path}"
        );
        std::thread::sleep(std::time::Duration::from_millis(250));
        path = t.sd.state(units::PATH_UNIT);
    }
    assert!(
        path.starts_with("active/waiting"),
        "after the fix fleetagent.path is {path}"
    );
    let states = units::unit_states_with_env(&t.sd.env_pairs()).unwrap();
    assert!(states.problems().is_empty(), "{:?}", states.problems());
}
