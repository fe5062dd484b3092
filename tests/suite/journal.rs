//! What an operator reads, and how long the operator waits: the journal's priority prefixes
//! and the action lines of a real `run` against the fakes, the summary line and the
//! verdicts of passes whose calls failed, and a vast.ai that never answers costing one
//! bounded wait.

use std::fs::File;
use std::io::Read;
use std::net::TcpListener;
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use super::agent_e2e::{busy_fleet, dead_fleet, rig, write_demand, CAPS};
use crate::common::fake_llm::{FakeLlm, Reply};
use crate::common::fake_vast::{FakeReply, FakeVast, Route};
use crate::common::fleet::{Fleet, Run};

/// `args` with stderr written to a file named by `JOURNAL_STREAM`, as systemd connects a
/// service to the journal; returns the outcome with that file's text as stderr.
fn in_journal(f: &Fleet, args: &[&str]) -> Run {
    let path = f.path().join("journal-stream");
    let file = File::create(&path).unwrap();
    let meta = file.metadata().unwrap();
    let out = f
        .command(args)
        .env("JOURNAL_STREAM", format!("{}:{}", meta.dev(), meta.ino()))
        .stderr(file)
        .output()
        .unwrap();
    let mut run = Run::from(out);
    run.stderr = std::fs::read_to_string(&path).unwrap();
    run
}

#[test]
fn action_lines_carry_their_priority_in_the_journal_and_the_old_format_elsewhere() {
    let llm = FakeLlm::start();
    let vast = FakeVast::start_real_time();
    vast.add_offers(3, "RTX 4090", 0.40, 0.99);
    let f = rig(&llm, &vast, CAPS, "");
    write_demand(f.path(), busy_fleet());
    // Two launches: the first meets a refused key at the offer search (a create would do
    // the same, but two creates in a pass are spaced 4.5 s apart), the second goes through.
    vast.fail_next(
        Route::Offers,
        1,
        FakeReply::json(
            401,
            json!({"success": false, "error": "auth_error", "msg": "bad key"}),
        ),
    );
    let launch = ("launch_instance", r#"{"reason": "backlog of 59"}"#);
    llm.push(Reply::tool_calls(&[launch, launch]));
    llm.push(Reply::text("One launched, one failed."));
    f.cmd(&["trigger", "-p", "1", "-r", "backlog"]).ok();
    let out = in_journal(&f, &["run"]).ok();
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert!(
        lines.iter().all(|l| l.len() > 3
            && l.starts_with('<')
            && l[1..].starts_with(|c: char| ('3'..='7').contains(&c))
            && &l[2..3] == ">"),
        "every line has its priority:\n{}",
        out.stderr
    );
    let failed = lines
        .iter()
        .find(|l| l.contains("launch") && l.contains("failed"))
        .unwrap_or_else(|| panic!("no failed launch line:\n{}", out.stderr));
    assert!(failed.starts_with("<4>"), "{failed}");
    assert!(failed.contains("401"), "{failed}");
    let (label, offer): (String, i64) = f
        .db()
        .query_row(
            "SELECT label, offer_id FROM actions WHERE outcome = 'ok' AND kind = 'launch'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    let launched = lines
        .iter()
        .find(|l| l.contains("launched"))
        .unwrap_or_else(|| panic!("no launch line:\n{}", out.stderr));
    assert!(launched.starts_with("<5>"), "{launched}");
    for part in [
        label.as_str(),
        &format!("offer {offer}"),
        "RTX 4090",
        "$0.400/h",
        "by llm: backlog of 59",
    ] {
        assert!(launched.contains(part), "{part:?} missing: {launched}");
    }
    assert!(!out.stderr.contains("[20"), "no timestamp of its own");
    // The summary line names what the pass did and what failed.
    assert!(
        out.stdout
            .contains(&format!("-> action: launched {label}; failed 1 launch (")),
        "{}",
        out.stdout
    );
    let run = &f.inspect()["runs"][0];
    assert_eq!(
        (
            &run["actions_ok"],
            &run["actions_refused"],
            &run["actions_failed"]
        ),
        (&json!(1), &json!(0), &json!(1))
    );

    // The key is refused now: the pass goes on blind (recorded, its events consumed, its
    // launch failed), and the process exits 1 naming vast.ai. Without JOURNAL_STREAM the
    // lines keep env_logger's format.
    vast.set_api_key(Some("another-key-entirely"));
    llm.push(Reply::tool_calls(&[launch]));
    llm.push(Reply::text("It failed."));
    f.cmd(&["trigger", "-p", "1", "-r", "again"]).ok();
    let out = f.cmd(&["run"]).code(1);
    let first = out.stderr.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("[20") && first.contains("WARN") && first.contains("failed"),
        "{}",
        out.stderr
    );
    let last = out.stderr.trim_end().lines().last().unwrap_or_default();
    assert!(
        last.starts_with("fleetagent: run ")
            && last.contains("the vast.ai listing failed: vast.ai refused the API key"),
        "{}",
        out.stderr
    );
    assert!(
        out.stdout.contains("-> action-failed: failed 1 launch ("),
        "{}",
        out.stdout
    );
    let v = f.inspect();
    assert_eq!(v["runs"][0]["status"], "ok");
    assert_eq!(v["runs"][0]["verdict"], "action-failed");
    assert_eq!(v["unconsumed_events"], 0);

    // In the journal the final error is priority 3.
    f.cmd(&["trigger", "-p", "1", "-r", "once more"]).ok();
    let out = in_journal(&f, &["run"]).code(1);
    let last = out.stderr.trim_end().lines().last().unwrap_or_default();
    assert!(
        last.starts_with("<3>fleetagent: run ") && last.contains("vast.ai"),
        "{}",
        out.stderr
    );
}

/// A server that accepts every connection and reads what it is sent, and never answers.
/// Returns its URL and how many connections it accepted.
fn hung_server() -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            count.fetch_add(1, Ordering::SeqCst);
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while matches!(conn.read(&mut buf), Ok(n) if n > 0) {}
            });
        }
    });
    (url, accepted)
}

#[test]
fn a_vast_ai_that_never_answers_costs_one_bounded_wait() {
    let (url, accepted) = hung_server();
    let f = Fleet::with_config("").env("VAST_API_KEY", "k-0123456789");
    write_demand(f.path(), dead_fleet());
    f.write_config(&format!(
        r#"
[run]
deadline_secs = 20
[debounce]
p0_secs = 0
p1_secs = 0
p2_secs = 0
max_wait_secs = 2
[llm]
provider = "rules"
[vast]
base_url = "{url}"
timeout_secs = 1
image = "ghcr.io/example/curio-psprove:latest"
[demand]
source = "command"
command = "cat {demand}"
[policy]
target_proofs_per_hour = 50
proofs_per_hour_per_instance = 50
{CAPS}
"#,
        demand = f.path().join("demand.json").display()
    ));
    f.cmd(&["init"]).ok();

    // `instances list`: the listing is tried twice (each bounded by the timeout), then the
    // table is shown without it; well within 3x vast.timeout_secs.
    let started = Instant::now();
    let out = f.cmd(&["instances", "list"]).ok();
    let took = started.elapsed();
    println!("instances list against a hung vast.ai: {took:?}");
    assert!(took < Duration::from_millis(3_000 + 1_500), "{took:?}");
    assert!(
        out.stderr.contains("vast.ai listing unavailable"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("no answer within 1s"), "{}", out.stderr);
    assert_eq!(accepted.swap(0, Ordering::SeqCst), 2);

    // `run`: the listing waits once; the rules' emergency launch then fails at once,
    // without another connection; the pass is recorded and the process exits 1 naming
    // vast.ai, well within deadline_secs / 2.
    f.cmd(&["trigger", "-p", "0", "-r", "workers died"]).ok();
    let started = Instant::now();
    let out = f.cmd(&["run"]).code(1);
    let took = started.elapsed();
    println!("run against a hung vast.ai: {took:?}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        2,
        "no call after the unanswered one waits"
    );
    let last = out.stderr.trim_end().lines().last().unwrap_or_default();
    assert!(
        last.starts_with("fleetagent: run ")
            && last.contains("the vast.ai listing failed: vast.ai unreachable")
            && last.contains("no answer within 1s"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr
            .contains("did not answer earlier in this process"),
        "the launch says why it was not sent: {}",
        out.stderr
    );
    let v = f.inspect();
    assert_eq!(v["runs"][0]["status"], "ok");
    assert_eq!(v["runs"][0]["verdict"], "action-failed");
    assert_eq!(v["unconsumed_events"], 0);
}
