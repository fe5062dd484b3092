//! doctor's `actions` check: a WORKERS DEAD pass whose every launch a guardrail refused, and
//! the fix that lifts each refusal.

use super::*;

/// A WORKERS DEAD pass that began 3 minutes ago and ended 2 minutes ago with this verdict and
/// these (ok, refused, failed) counts: its run id.
fn emergency_pass(s: &crate::store::Store, verdict: Verdict, counts: (i64, i64, i64)) -> i64 {
    let run = runs::create(&s.conn, 1, 1, 1, StartedBy::Tick, NOW - 3 * MIN).unwrap();
    let (ok, refused, failed) = counts;
    let o = Outcome {
        verdict,
        actions: ActionCounts {
            ok,
            refused,
            failed,
        },
        ..Outcome::new(true)
    };
    runs::finish_ok(&s.conn, run, &o, NOW - 2 * MIN).unwrap();
    run
}

/// A call of the rules in run `run` as the ledger keeps it: (kind, outcome, refusal code).
fn call(
    s: &crate::store::Store,
    run: i64,
    (kind, outcome, code): (&'static str, &'static str, Option<&'static str>),
    detail: &str,
) {
    crate::store::actions::insert(
        &s.conn,
        &crate::store::actions::NewAction {
            run_id: Some(run),
            kind,
            outcome,
            actor: "rules",
            code,
            detail: Some(detail),
            ..Default::default()
        },
        NOW - 2 * MIN,
    )
    .unwrap();
}

/// A WORKERS DEAD pass whose dead worker's destroy went through and whose replacement failed
/// at vast.ai (credit out: 402) is red, naming the failure: the pass-wide line is silent when
/// any call went through (a money walkthrough's doctor said ok).
#[test]
fn workers_dead_whose_launch_failed_beside_a_destroy_that_went_is_a_problem() {
    let (_dir, s) = test_store(NOW);
    let run = emergency_pass(&s, Verdict::ActionFailed, (1, 0, 1));
    call(&s, run, ("destroy", "ok", None), "{}");
    call(
        &s,
        run,
        ("launch", "failed", None),
        "vast.ai HTTP 402 insufficient_credit",
    );
    let p = agent::actions(&s.conn, NOW);
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(
        p[0].line().starts_with(&format!(
            "WORKERS DEAD and no launch of the last pass (run {run}, 2m ago) went through: 1 failed at vast.ai (the first: vast.ai HTTP 402 insufficient_credit); nothing is on its way"
        )),
        "{p:?}"
    );
    // Every call failed: the pass-wide line says it, once.
    s.conn
        .execute("UPDATE actions SET outcome = 'failed'", [])
        .unwrap();
    let p = agent::actions(&s.conn, NOW);
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(p[0].line().starts_with("the last pass"), "{p:?}");
}

#[test]
fn workers_dead_with_every_launch_refused_is_a_problem() {
    let (_dir, s) = test_store(NOW);
    let run = emergency_pass(&s, Verdict::ActionRefused, (0, 2, 0));
    let refuse = |code: &'static str, actor: &'static str| {
        crate::store::actions::insert(
            &s.conn,
            &crate::store::actions::NewAction {
                run_id: Some(run),
                kind: "launch",
                outcome: "refused",
                actor,
                code: Some(code),
                ..Default::default()
            },
            NOW - 2 * MIN,
        )
        .unwrap()
    };
    refuse("daily_spend", "floor");
    refuse("budget", "llm");
    let p = agent::actions(&s.conn, NOW);
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(
        p[0].line().starts_with(&format!(
            "WORKERS DEAD and every launch of the last pass (run {run}, 2m ago) was refused by a guardrail: budget, daily_spend; nothing is on its way"
        )),
        "{p:?}"
    );
    let fix = p[0].fix.clone().unwrap();
    assert!(
        fix.contains("raise policy.max_dph_total") && fix.contains("raise policy.daily_spend_max"),
        "{fix}"
    );
    // A missing key is not lifted by raising a cap.
    s.conn
        .execute("UPDATE actions SET code = 'not_configured'", [])
        .unwrap();
    let fix = agent::actions(&s.conn, NOW)[0].fix.clone().unwrap();
    assert!(
        fix.contains("set what the refusal names") && !fix.contains("raise"),
        "{fix}"
    );
    // Paused is the pause check's to say; a launch that went through is something on its way.
    s.conn
        .execute("UPDATE actions SET code = 'paused'", [])
        .unwrap();
    assert!(agent::actions(&s.conn, NOW).is_empty());
    s.conn
        .execute("UPDATE actions SET code = 'budget'", [])
        .unwrap();
    crate::store::actions::insert(
        &s.conn,
        &crate::store::actions::NewAction {
            run_id: Some(run),
            kind: "launch",
            outcome: "ok",
            actor: "floor",
            ..Default::default()
        },
        NOW - 2 * MIN,
    )
    .unwrap();
    assert!(agent::actions(&s.conn, NOW).is_empty());
}

/// WORKERS DEAD with every launch refused, in a pass whose destroy of a flagged instance
/// failed: both are said, the failed destroy with its error (the refusal alone hid it, and
/// its fix, raising the cap, is not what frees the slot: a walkthrough).
#[test]
fn a_failed_destroy_beside_a_refused_emergency_launch_is_said_too() {
    let (_dir, s) = test_store(NOW);
    let run = emergency_pass(&s, Verdict::ActionFailed, (0, 1, 1));
    for (kind, outcome, code, detail) in [
        (
            "destroy",
            "failed",
            None,
            "vast.ai HTTP 500 server_error: destroy broke",
        ),
        (
            "launch",
            "refused",
            Some("instance_cap"),
            "instance_cap: 1 instances",
        ),
    ] {
        call(&s, run, (kind, outcome, code), detail);
    }
    let p = agent::actions(&s.conn, NOW);
    assert_eq!(p.len(), 2, "{p:?}");
    assert!(
        p[0].line()
            .starts_with("WORKERS DEAD and every launch of the last pass"),
        "{p:?}"
    );
    assert!(
        p[1].line()
            .contains("the first, a destroy: vast.ai HTTP 500 server_error: destroy broke"),
        "{p:?}"
    );
}
