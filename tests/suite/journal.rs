//! What an operator reads, and how long the operator waits: the action lines of a real
//! `run` against the fakes as journald files them (a real journald beside a systemd user
//! manager), the format without the journal, the summary line and the verdicts of passes
//! whose calls failed, and a vast.ai that never answers costing one bounded wait.

use std::fs::File;
use std::io::Read;
use std::net::TcpListener;
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use super::agent_e2e::{busy_fleet, dead_fleet, rig, write_demand, CAPS, LLM_KEY};
use crate::common::config::rules_config;
use crate::common::fake_llm::{FakeLlm, Reply};
use crate::common::fake_vast::{FakeReply, FakeVast, Route};
use crate::common::fleet::{Fleet, Run, BIN};
use crate::common::systemd::UserManager;

/// `args` with stderr written to a file named by `JOURNAL_STREAM`, as systemd connects a
/// service to the journal; returns the outcome with that file's text as stderr.
pub(crate) fn in_journal(f: &Fleet, args: &[&str]) -> Run {
    journal_stream(f, args, false)
}

/// [`in_journal`] with stdout on the same stream, as a systemd service has both: the
/// outcome's stderr is everything the journal got.
fn in_journal_both(f: &Fleet, args: &[&str]) -> Run {
    journal_stream(f, args, true)
}

fn journal_stream(f: &Fleet, args: &[&str], stdout_too: bool) -> Run {
    let path = f.path().join("journal-stream");
    let file = File::create(&path).unwrap();
    let meta = file.metadata().unwrap();
    let mut cmd = f.command(args);
    cmd.env("JOURNAL_STREAM", format!("{}:{}", meta.dev(), meta.ino()));
    if stdout_too {
        cmd.stdout(file.try_clone().unwrap());
    }
    let out = cmd.stderr(file).output().unwrap();
    let mut run = Run::from(out);
    run.stderr = std::fs::read_to_string(&path).unwrap();
    run
}

/// Whether a journal line starts with a syslog priority, `<3>` to `<7>`.
fn prefixed(l: &&str) -> bool {
    let b = l.as_bytes();
    b.len() >= 3 && b[0] == b'<' && (b'3'..=b'7').contains(&b[1]) && b[2] == b'>'
}

/// The first line of `run`'s journal (see [`in_journal`]) that starts with `prefix` and
/// contains `needle`; the test fails showing the whole journal when there is none.
pub(crate) fn journal_line(run: &Run, prefix: &str, needle: &str) -> String {
    run.stderr
        .lines()
        .find(|l| l.starts_with(prefix) && l.contains(needle))
        .unwrap_or_else(|| panic!("no {prefix:?} line with {needle:?} in:\n{}", run.stderr))
        .to_string()
}

/// `inspect` after a pass that finished while its listing failed: the run ok and
/// `action-failed`, the listing's failure named (`vast` in --json, the `vast.ai` line with
/// `error`) and who decided the pass (`decided by WHO`). The JSON report.
fn inspect_after_a_failed_listing(f: &Fleet, error: &str, who: &str) -> serde_json::Value {
    let v = f.inspect();
    assert_eq!(v["runs"][0]["status"], "ok");
    assert_eq!(v["runs"][0]["verdict"], "action-failed");
    assert_eq!(v["vast"]["ok"], false, "{}", v["vast"]);
    assert!(
        v["vast"]["error"]
            .as_str()
            .is_some_and(|e| e.contains(error)),
        "{}",
        v["vast"]
    );
    let text = f.cmd(&["inspect"]).ok().stdout;
    assert!(
        text.lines()
            .any(|l| l.starts_with("vast.ai     the listing FAILS since ")),
        "{text}"
    );
    assert!(text.contains(&format!("decided by {who}")), "{text}");
    v
}

/// The fakes and a pass whose model asks for two launches: the first meets a refused key at
/// the offer search (a create would do the same, but two creates in a pass are spaced 4.5 s
/// apart), the second goes through.
fn one_launched_one_failed(llm: &FakeLlm, vast: &FakeVast) -> Fleet {
    vast.add_offers(3, "RTX 4090", 0.40, 0.99);
    let f = rig(llm, vast, CAPS, "");
    write_demand(f.path(), busy_fleet());
    vast.fail_next(
        Route::Offers,
        1,
        FakeReply::json(
            401,
            json!({"success": false, "error": "auth_error", "msg": "bad key"}),
        ),
    );
    llm.push(Reply::tool_calls(&[LAUNCH, LAUNCH]));
    llm.push(Reply::text("One launched, one failed."));
    f.cmd(&["trigger", "-p", "1", "-r", "backlog"]).ok();
    f
}

const LAUNCH: (&str, &str) = ("launch_instance", r#"{"reason": "backlog of 59"}"#);

/// DESIGN.md's proof for the journal: `run` as a systemd service beside a real journald;
/// `journalctl -p warning` finds the failed launch and only it, `-p notice` the launch with
/// its label, offer and $/h.
#[test]
fn journalctl_finds_a_failed_launch_at_warning_and_a_launch_at_notice() {
    let llm = FakeLlm::start();
    let vast = FakeVast::start_real_time();
    let f = one_launched_one_failed(&llm, &vast);
    let sd = UserManager::start_with_journald(f.path());
    let out = sd
        .cmd("systemd-run")
        .args([
            "--user",
            "--wait",
            "--quiet",
            "--unit",
            "fleetagent-journal-test",
        ])
        .arg(format!("--setenv=VAST_API_KEY={}", vast.api_key()))
        .arg(format!("--setenv=FLEETAGENT_LLM_API_KEY={LLM_KEY}"))
        .arg(BIN)
        .arg("--config")
        .arg(&f.config)
        .arg("--state-dir")
        .arg(&f.state)
        .arg("run")
        .output()
        .unwrap();
    let everything = sd.journalctl(&["--identifier", "fleetagent"]);
    assert!(out.status.success(), "{out:?}\n{everything}");
    let warnings = sd.journalctl(&["--priority", "warning"]);
    let failed: Vec<&str> = warnings.lines().filter(|l| l.starts_with("run ")).collect();
    assert_eq!(failed.len(), 1, "{warnings}");
    assert!(
        failed[0].contains("launch (best offer) failed: vast.ai refused the API key: HTTP 401")
            && failed[0].contains("asked by llm: backlog of 59"),
        "{warnings}"
    );
    let (label, offer): (String, i64) = f
        .db()
        .query_row(
            "SELECT label, offer_id FROM actions WHERE outcome = 'ok' AND kind = 'launch'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    let notices = sd.journalctl(&["--priority", "notice"]);
    let launched = notices
        .lines()
        .find(|l| l.contains(" launched "))
        .unwrap_or_else(|| panic!("no launch line:\n{everything}"));
    for part in [
        label.as_str(),
        &format!("offer {offer}"),
        "RTX 4090",
        "$0.400/h",
        "by llm: backlog of 59",
    ] {
        assert!(launched.contains(part), "{part:?} missing: {launched}");
    }
    // The prefixes were read, not kept; the summary line (stdout, info) names both.
    assert!(
        !everything.contains("<5>") && !everything.contains("<4>"),
        "{everything}"
    );
    assert!(
        everything.contains(&format!("-> action: launched {label}; failed 1 launch (")),
        "{everything}"
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
}

/// Without the journal the lines keep env_logger's format; a pass whose listing meets a
/// refused key goes on blind (recorded, its events consumed, its launch failed) and the
/// process exits 1 naming vast.ai; with `JOURNAL_STREAM` naming stderr every line has its
/// priority, the final error 3.
#[test]
fn a_blind_run_exits_1_in_either_format() {
    let llm = FakeLlm::start();
    let vast = FakeVast::start_real_time();
    vast.add_offers(1, "RTX 4090", 0.40, 0.99);
    let f = rig(&llm, &vast, CAPS, "");
    write_demand(f.path(), busy_fleet());
    let key = vast.api_key();
    vast.set_api_key(Some("another-key-entirely"));
    llm.push(Reply::tool_calls(&[LAUNCH]));
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
    let v = inspect_after_a_failed_listing(&f, "HTTP 401", "llm");
    assert_eq!(v["runs"][0]["actions_failed"], 1);
    assert_eq!(v["unconsumed_events"], 0);

    llm.push(Reply::tool_calls(&[LAUNCH]));
    llm.push(Reply::text("It failed again."));
    f.cmd(&["trigger", "-p", "1", "-r", "once more"]).ok();
    // stdout on the same stream, as under systemd: the summary line has its priority too.
    let out = in_journal_both(&f, &["run"]).code(1);
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert!(lines.iter().all(prefixed), "{}", out.stderr);
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("<6>run ") && l.contains("-> action-failed")),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("[20"), "no timestamp of its own");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("<4>run ") && l.contains("launch (best offer) failed")),
        "{}",
        out.stderr
    );
    let last = lines.last().unwrap_or(&"");
    assert!(
        last.starts_with("<3>fleetagent: run ") && last.contains("vast.ai refused the API key"),
        "{}",
        out.stderr
    );
    // A usage error is clap's, every line of it an error in the journal; a trigger's own
    // line is info.
    let out = in_journal_both(&f, &["trigger", "-p", "9", "-r", "x"]).code(2);
    assert!(out.stderr.starts_with("<3>error: "), "{}", out.stderr);
    assert!(out.stderr.lines().all(|l| prefixed(&l)), "{}", out.stderr);
    let out = in_journal_both(&f, &["trigger", "-p", "1", "-r", "x"]).ok();
    assert!(out.stderr.starts_with("<6>event "), "{}", out.stderr);
    // The key accepted again: the end of the failure is said, at notice, as its start was.
    vast.set_api_key(Some(&key));
    llm.push(Reply::text("All well."));
    let out = in_journal(&f, &["run"]).ok();
    assert!(
        out.stderr.lines().any(|l| l
            .starts_with("<5>vast.ai's listing works again, after failing for")
            && l.contains("vast.ai refused the API key")),
        "{}",
        out.stderr
    );
}

/// A pass blind to demand (the probe fails) holds the fleet, and must not read as a calm
/// one: a warning in the journal names the probe's failure, and the summary line says the
/// fleet is held. A pass the fallback decided says so too.
#[test]
fn a_pass_blind_to_demand_or_without_its_model_says_so_at_warning() {
    let vast = FakeVast::start_real_time();
    let f = Fleet::with_config("").env("VAST_API_KEY", &vast.api_key());
    let probe = format!(
        "[policy]\n{CAPS}\n[demand]\nsource = \"command\"\ncommand = \"echo 'connection refused' >&2; exit 3\"\n"
    );
    f.write_config(&rules_config(
        &vast.url(),
        &f.path().join("demand.json"),
        &[&probe],
    ));
    f.cmd(&["init"]).ok();
    let out = in_journal(&f, &["run"]).ok();
    let warning = journal_line(&out, "<4>run ", "");
    assert!(
        warning.contains("demand unknown, the probe failed: demand command exited with status 3: connection refused")
            && warning.contains("the fleet is held"),
        "{warning}"
    );
    assert!(
        out.stdout.contains("-> no-action; demand unknown (the probe failed: demand command exited with status 3: connection refused), the fleet held"),
        "{}",
        out.stdout
    );

    // The model unusable (its server answers 503), the fallback decides: said at warning.
    let llm = FakeLlm::start();
    let f = rig(&llm, &vast, CAPS, "");
    write_demand(f.path(), busy_fleet());
    llm.set_default(Reply::server_error(503));
    f.cmd(&["trigger", "-p", "1", "-r", "backlog"]).ok();
    let out = in_journal(&f, &["run"]);
    assert!(
        out.stderr
            .lines()
            .any(|l| l.starts_with("<4>run ") && l.contains("the LLM is unusable")),
        "{}",
        out.stderr
    );
    assert!(
        out.stdout
            .contains("; the LLM was unusable, the fallback decided"),
        "{}",
        out.stdout
    );
    // A server's message of several lines (a traceback, a proxy's pasted upstream body) is
    // one entry: each of its lines was an entry of its own, server text at any priority.
    llm.set_default(Reply::openai_error(
        400,
        "bad request\n<0>fleetagent: injected\nTraceback (most recent call last):",
        "invalid_request_error",
        None,
    ));
    f.cmd(&["trigger", "-p", "1", "-r", "backlog"]).ok();
    let out = in_journal(&f, &["run"]);
    let warning = journal_line(&out, "<4>run ", "the LLM is unusable");
    assert!(
        warning.contains("bad request <0>fleetagent: injected Traceback"),
        "{warning}"
    );
    assert!(
        out.stderr
            .lines()
            .all(|l| !l.contains("Traceback") || l == warning),
        "{}",
        out.stderr
    );
    // It answers again: said at notice.
    llm.set_default(Reply::text("No action needed."));
    f.cmd(&["trigger", "-p", "1", "-r", "again"]).ok();
    let out = in_journal(&f, &["run"]).ok();
    assert!(
        out.stderr
            .lines()
            .any(|l| l.starts_with("<5>the model answers again")),
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
    let own = format!(
        "[run]\ndeadline_secs = 20\n[vast]\ntimeout_secs = 1\n[policy]\ntarget_proofs_per_hour = 50\nproofs_per_hour_per_instance = 50\n{CAPS}"
    );
    f.write_config(&rules_config(&url, &f.path().join("demand.json"), &[&own]));
    f.cmd(&["init"]).ok();

    // Both at once (each makes exactly two connections, so four in all): `run` and
    // `instances list` at a terminal (script(1) gives it one).
    f.cmd(&["trigger", "-p", "0", "-r", "workers died"]).ok();
    let started = Instant::now();
    let run = f.spawn(&["run"]);
    let list = f.command(&["instances", "list"]);
    let line: Vec<String> = std::iter::once(list.get_program())
        .chain(list.get_args())
        .map(|a| format!("'{}'", a.to_string_lossy()))
        .collect();
    let mut at_terminal = std::process::Command::new("script");
    at_terminal.args(["-qefc", &line.join(" "), "/dev/null"]);
    crate::common::fleet::clean_env(&mut at_terminal);
    at_terminal.env("VAST_API_KEY", "k-0123456789");
    // script(1) -e passes the exit status on: 1, the listing failed.
    let listed = Run::from(at_terminal.output().unwrap()).code(1);
    let list_took = started.elapsed();
    let out = Run::from(run.wait_with_output().unwrap()).code(1);
    let run_took = started.elapsed();
    println!("against a hung vast.ai: instances list {list_took:?}, run {run_took:?}");

    // `instances list` says what it waits for and how long at most; the listing is tried
    // twice (each bounded by the timeout), then the table is shown without it; well within
    // 3x vast.timeout_secs.
    assert!(
        list_took < Duration::from_millis(3_000 + 1_500),
        "{list_took:?}"
    );
    let shown = &listed.stdout;
    assert!(
        shown.contains("waiting for vast.ai (up to 3s)..."),
        "{shown}"
    );
    assert!(shown.contains("vast.ai's listing failed"), "{shown}");
    assert!(shown.contains("no answer within 1s"), "{shown}");

    // `run`: the listing waits once; the rules' emergency launch then fails at once, without
    // another connection; the pass is recorded and the process exits 1 naming vast.ai, well
    // within deadline_secs / 2.
    assert!(run_took < Duration::from_secs(10), "{run_took:?}");
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        4,
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
    let v = inspect_after_a_failed_listing(&f, "no answer within 1s", "rules");
    assert_eq!(v["unconsumed_events"], 0);
    // `doctor`, right after: vast.ai does not answer, and the pass's launch failed.
    let doc = f.cmd(&["doctor"]).code(1);
    assert!(
        doc.stdout.contains("vast.ai") && doc.stdout.contains("no answer within 1s"),
        "{}",
        doc.stdout
    );

    // An operator's forced stop of an instance of ours (as the last pass left the table):
    // one listing, bounded, then the destroy is still sent (the operator asked for it) and
    // bounded too; one line, within twice 3x the timeout.
    {
        let db = f.db();
        db.execute(
            "INSERT INTO instances (label, vast_id, state, gpu_name, dph, created_at, state_since)
             VALUES ('fleetagent-r1-0badc0de', 4242, 'proving', 'RTX 4090', 0.4, 0, 0)",
            [],
        )
        .unwrap();
    }
    let started = Instant::now();
    let before = accepted.load(Ordering::SeqCst);
    let stop = f.cmd(&["instances", "stop", "4242", "--force"]).code(1);
    let stop_took = started.elapsed();
    println!("against a hung vast.ai: instances stop --force {stop_took:?}");
    assert!(
        stop_took < Duration::from_millis(2 * 3_000 + 1_500),
        "{stop_took:?}"
    );
    assert!(
        accepted.load(Ordering::SeqCst) >= before + 2,
        "the listing and the destroy were both sent"
    );
    assert_eq!(stop.stderr.trim().lines().count(), 1, "{}", stop.stderr);
    assert!(stop.stderr.contains("vast.ai"), "{}", stop.stderr);
    // The operator's listing under systemd: its warning carries a priority like every line.
    let listed = in_journal(&f, &["instances", "list"]);
    assert!(
        listed
            .stderr
            .contains("<3>fleetagent: vast.ai's listing failed"),
        "{}",
        listed.stderr
    );
    assert!(
        listed.stderr.lines().all(|l| l.starts_with('<')),
        "{}",
        listed.stderr
    );
}

/// A pass whose hands are held says so at warning each pass, as a blind one does: paused
/// (nothing launched or stopped but by the operator), and WORKERS DEAD with what its calls
/// came to (here every launch refused by max_instances = 0: the fleet stays dead).
#[test]
fn a_paused_pass_and_workers_dead_say_so_at_warning() {
    let vast = FakeVast::start_real_time();
    let f = Fleet::with_config("").env("VAST_API_KEY", &vast.api_key());
    let caps = "[policy]\nmax_dph_total = 10.0\nmax_instances = 0\n";
    f.write_config(&rules_config(
        &vast.url(),
        &f.path().join("demand.json"),
        &[caps],
    ));
    write_demand(f.path(), dead_fleet());
    f.cmd(&["init"]).ok();
    let dead = journal_line(&in_journal(&f, &["run"]).ok(), "<4>run ", "WORKERS DEAD");
    assert!(
        dead.contains(": WORKERS DEAD: 59 proofs queued and no live worker; this pass's calls: ok 0, refused "),
        "{dead}"
    );
    // inspect says each refusal as the journal did, with its guardrail and figures (it
    // showed the asker's reason alone).
    let shown = f.cmd(&["inspect"]).ok().stdout;
    let refused = shown
        .lines()
        .find(|l| l.contains(" refused launch "))
        .unwrap_or_else(|| panic!("{shown}"));
    assert!(
        refused.contains("(instance_cap: 0 instances), asked by rules: "),
        "{refused}"
    );
    // So does `history --run`, with the guardrail's whole answer (the notes cut it short).
    let run = f.cmd(&["history", "--run", "1"]).ok().stdout;
    assert!(run.contains("--- the ledger of run 1 ("), "{run}");
    assert!(
        run.contains("refused launch (instance_cap: 0 instances), asked by rules: ")
            && run.contains(r#"{"error":"instance_cap""#),
        "{run}"
    );
    f.cmd(&["pause", "--reason", "swapping the Curio disk"])
        .ok();
    let paused = journal_line(&in_journal(&f, &["run"]).ok(), "<4>run ", "paused since");
    assert!(
        paused.contains("(until `fleetagent resume`; \"swapping the Curio disk\"): nothing is launched or stopped but by the operator"),
        "{paused}"
    );
}

/// WORKERS DEAD with an instance of ours booting that covers the work: the pass asks for
/// nothing, and its warning says why (it said "ok 0, refused 0, failed 0" alone).
#[test]
fn workers_dead_with_an_instance_coming_says_why_nothing_was_asked() {
    let vast = FakeVast::start_real_time();
    vast.add_offers(2, "RTX 4090", 0.40, 0.99);
    let f = Fleet::with_config("").env("VAST_API_KEY", &vast.api_key());
    f.write_config(&rules_config(
        &vast.url(),
        &f.path().join("demand.json"),
        &["[policy]\ntarget_proofs_per_hour = 50\nproofs_per_hour_per_instance = 100\nmax_dph_total = 10.0\nmax_instances = 4\n"],
    ));
    write_demand(f.path(), dead_fleet());
    f.cmd(&["init"]).ok();
    f.cmd(&["run"]).ok();
    assert_eq!(vast.count(Route::Create), 1);
    for id in vast.instance_ids() {
        vast.set_actual_status(id, Some("loading"));
    }
    f.cmd(&["trigger", "-p", "1", "-r", "still dead"]).ok();
    let out = in_journal(&f, &["run"]).ok();
    let dead = journal_line(&out, "<4>run 2", "WORKERS DEAD");
    assert!(
        dead.ends_with("this pass's calls: ok 0, refused 0, failed 0; nothing asked: the instances of ours coming cover the work"),
        "{dead}"
    );
    assert_eq!(vast.count(Route::Create), 1);
}

/// No vast.ai key: the pass exits 0 (no call failed; `doctor` names the key), but it can
/// neither list, launch nor stop, and says so at warning each pass (a missing credential
/// file left a green service with nothing at warning: a walkthrough).
#[test]
fn a_pass_without_a_vast_ai_key_says_so_at_warning() {
    let f = Fleet::with_config("");
    f.write_config(&rules_config(
        "http://127.0.0.1:9",
        &f.path().join("demand.json"),
        &[],
    ));
    write_demand(f.path(), busy_fleet());
    f.cmd(&["init"]).ok();
    let run = in_journal(&f, &["run"]).ok();
    let line = journal_line(&run, "<4>run 1: ", "no vast.ai API key");
    assert!(
        line.contains("nothing of the fleet can be listed, launched or stopped (set VAST_API_KEY or the vast_api_key credential"),
        "{line}"
    );
}
