//! Race testing: randomised (seeded) interleavings of `trigger`, `message`, `run`,
//! `reset-session` and `wakes add`, each a separate process of the real binary (provider
//! rules, no outside service), some of them held at a persistence point for a random while
//! so that rings land during claims, passes and last looks. Once every process has ended:
//! zero overlapping runs, run ids strictly increasing, zero lost events, zero stranded events;
//! then one more run serves everything, each wake once.
//!
//! `FLEETAGENT_RACE_SEED` and `FLEETAGENT_RACE_ROUNDS` scale it up (scripts/race).

use crate::common::rng::Rng;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::run_rows;
use crate::common::fleet::Fleet;

/// The normal suite's size; scripts/race runs hundreds.
const DEFAULT_ROUNDS: u64 = 4;
const DEFAULT_SEED: u64 = 20_260_601;

const RACE_CONFIG: &str = r#"
[run]
deadline_secs = 60
max_passes = 3
[debounce]
p0_secs = 0
p1_secs = 0
p2_secs = 0
max_wait_secs = 1
[llm]
provider = "rules"
"#;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Trigger,
    Message,
    Run,
    Reset,
    WakeAdd,
}

#[derive(Debug, Clone)]
struct Step {
    kind: Kind,
    args: Vec<String>,
    delay_ms: u64,
    pause: Option<String>,
}

fn plan(rng: &mut Rng) -> Vec<Step> {
    let n = 6 + rng.below(7);
    (0..n)
        .map(|i| {
            let kind = match rng.below(100) {
                0..=29 => Kind::Trigger,
                30..=41 => Kind::Message,
                42..=71 => Kind::Run,
                72..=79 => Kind::Reset,
                _ => Kind::WakeAdd,
            };
            let ms = 20 + rng.below(200);
            let (args, pause): (Vec<String>, Option<String>) = match kind {
                Kind::Trigger => (
                    vec![
                        "trigger".into(),
                        "-p".into(),
                        rng.below(3).to_string(),
                        "-r".into(),
                        format!("race {i}"),
                    ],
                    (rng.below(3) == 0).then(|| format!("trigger-after-insert:{ms}")),
                ),
                Kind::Message => (
                    vec!["message".into(), format!("operator note {i}")],
                    (rng.below(3) == 0).then(|| format!("trigger-after-insert:{ms}")),
                ),
                Kind::Run => {
                    let points = [
                        "run-after-lock",
                        "run-after-claim",
                        "run-after-observe",
                        "run-before-finish",
                        "run-end-check",
                        "run-after-last-look",
                    ];
                    let pause = match rng.below(points.len() as u64 + 2) as usize {
                        k if k < points.len() => Some(format!("{}:{ms}", points[k])),
                        _ => None,
                    };
                    (vec!["run".into()], pause)
                }
                Kind::Reset => {
                    let mut a = vec!["reset-session".to_string()];
                    if rng.below(2) == 0 {
                        a.push("--keep-wakes".into());
                    }
                    (
                        a,
                        (rng.below(3) == 0).then(|| format!("trigger-after-insert:{ms}")),
                    )
                }
                Kind::WakeAdd => {
                    let when = if rng.below(2) == 0 { "0s" } else { "2h" };
                    (
                        vec![
                            "wakes".into(),
                            "add".into(),
                            "--in".into(),
                            when.into(),
                            "--reason".into(),
                            format!("wake {i}"),
                        ],
                        None,
                    )
                }
            };
            Step {
                kind,
                args,
                delay_ms: rng.below(300),
                pause,
            }
        })
        .collect()
}

#[derive(Debug)]
struct Done {
    kind: Kind,
    code: i32,
    stderr: String,
}

/// One interleaving against a fresh state dir. Returns the number of processes, or the
/// violations found.
fn interleaving(seed: u64) -> Result<usize, Vec<String>> {
    let mut rng = Rng(seed);
    let steps = plan(&mut rng);
    let f = Arc::new(Fleet::with_config(RACE_CONFIG));
    f.cmd(&["init"]).ok();
    let done = Arc::new(Mutex::new(Vec::new()));
    let start = Instant::now();
    let threads: Vec<_> = steps
        .iter()
        .cloned()
        .map(|step| {
            let (f, done) = (Arc::clone(&f), Arc::clone(&done));
            std::thread::spawn(move || {
                let wait = Duration::from_millis(step.delay_ms).saturating_sub(start.elapsed());
                std::thread::sleep(wait);
                let args: Vec<&str> = step.args.iter().map(String::as_str).collect();
                let mut c = f.command(&args);
                if let Some(p) = &step.pause {
                    c.env("FLEETAGENT_TEST_PAUSE_AT", p);
                }
                let out = c.output().expect("spawn fleetagent");
                done.lock().unwrap().push(Done {
                    kind: step.kind,
                    code: out.status.code().unwrap_or(-1),
                    stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
                });
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let done = std::mem::take(&mut *done.lock().unwrap());
    let mut bad = Vec::new();
    for d in &done {
        if d.code != 0 {
            bad.push(format!(
                "{:?} exited {}: {}",
                d.kind,
                d.code,
                d.stderr.trim()
            ));
        }
    }
    let ok = |k: Kind| done.iter().filter(|d| d.kind == k && d.code == 0).count() as i64;

    // Every process has ended. Runs never overlapped, their ids increase with time, and the
    // passes of one process are consecutive.
    let db = f.db();
    let rows = run_rows(&db);
    for w in rows.windows(2) {
        let (a, b) = (&w[0], &w[1]);
        match a.4 {
            Some(end) if end <= b.3 => {}
            _ => bad.push(format!("runs {} and {} overlap: {a:?} {b:?}", a.0, b.0)),
        }
        if b.3 < a.3 {
            bad.push(format!("run {} started before run {}", b.0, a.0));
        }
    }
    let mut seen_pids = Vec::new();
    for w in rows.windows(2) {
        if w[0].1 != w[1].1 {
            seen_pids.push(w[0].1);
            if seen_pids.contains(&w[1].1) {
                bad.push(format!(
                    "pid {} ran passes around another process's",
                    w[1].1
                ));
            }
        }
    }
    if let Some(r) = rows.iter().find(|r| r.2 != "ok") {
        bad.push(format!("run {} is {}", r.0, r.2));
    }
    // Zero lost events: one row per successful command that records one.
    let count = |sql: &str| -> i64 { db.query_row(sql, [], |r| r.get(0)).unwrap() };
    for (kind, k) in [
        ("trigger", Kind::Trigger),
        ("message", Kind::Message),
        ("reset", Kind::Reset),
    ] {
        let rows = count(&format!(
            "SELECT COUNT(*) FROM events WHERE kind = '{kind}'"
        ));
        if rows != ok(k) {
            bad.push(format!("{rows} {kind} event(s) for {} command(s)", ok(k)));
        }
    }
    // Zero stranded events: anything ready and unclaimed has a doorbell.
    let now = chrono::Utc::now().timestamp_millis();
    let ready: i64 = db
        .query_row(
            "SELECT COUNT(*) FROM events WHERE claimed_by IS NULL AND failed_at IS NULL
             AND (not_before IS NULL OR not_before <= ?1)",
            [now],
            |r| r.get(0),
        )
        .unwrap();
    if ready > 0 && !f.doorbell().exists() {
        bad.push(format!(
            "{ready} ready event(s) stranded without a doorbell"
        ));
    }
    // One more run (systemd's, for the doorbell or the timer) serves the rest.
    let out = f.cmd(&["run"]);
    if out.code != 0 {
        bad.push(format!("the final run exited {}: {}", out.code, out.stderr));
    }
    let unserved = count(
        "SELECT COUNT(*) FROM events WHERE claimed_by IS NULL
         OR claimed_by NOT IN (SELECT id FROM runs WHERE status = 'ok')",
    );
    if unserved > 0 {
        bad.push(format!("{unserved} event(s) never served"));
    }
    if f.doorbell().exists() {
        bad.push("the doorbell outlived the final run".into());
    }
    // Wakes: each due one processed once, by a finished pass; claims add up.
    let due_pending = count("SELECT COUNT(*) FROM wakes WHERE status = 'pending' AND due_at <= strftime('%s','now') * 1000 - 1000");
    if due_pending > 0 {
        bad.push(format!("{due_pending} due wake(s) still pending"));
    }
    let processed = count("SELECT COUNT(*) FROM wakes WHERE status = 'processed'");
    let claimed = count("SELECT COALESCE(SUM(wakes_claimed), 0) FROM runs");
    if processed != claimed {
        bad.push(format!("{processed} wake(s) processed, {claimed} claims"));
    }
    if bad.is_empty() {
        Ok(steps.len())
    } else {
        bad.push(format!("plan: {steps:?}"));
        Err(bad)
    }
}

#[test]
fn random_interleavings_never_overlap_lose_or_strand() {
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
    let seed = env("FLEETAGENT_RACE_SEED").unwrap_or(DEFAULT_SEED);
    let rounds = env("FLEETAGENT_RACE_ROUNDS").unwrap_or(DEFAULT_ROUNDS);
    let mut processes = 0;
    let mut failures = Vec::new();
    for i in 0..rounds {
        match interleaving(seed + i) {
            Ok(n) => processes += n,
            Err(v) => failures.push(format!(
                "interleaving {} (reproduce: scripts/race {} 1):\n  {}",
                i,
                seed + i,
                v.join("\n  ")
            )),
        }
    }
    println!(
        "race: {rounds} interleavings (seed {seed}), {processes} processes, {} with a violation",
        failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
