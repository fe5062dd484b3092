//! Benchmarks that print figures and ratios (run through scripts/bench; never a timed test).
//! Every comparison is measured in the same run, alternating, and reported as a median ratio,
//! because the machines are shared and noisy.
//!
//!   bench trigger   `trigger` whole-process time against /bin/true
//!   bench inspect   `inspect --json` on 1M messages / 100k runs against an empty database
//!   bench doctor    `doctor` on the same 1.1M rows against an empty database (goal <= 1.1x)
//!   bench assemble  prompt assembly with 1M stored messages against 1k
//!   bench tokens    tokens per routine tick against a naive agent that sends the whole history
//!   bench tokenizer tokenizer initialisation cost, and that it happens once per process
//!   bench sim       simulated hours per wall-clock second (steady, a week), and the decision
//!                   quality per scenario over seeds 1-10: the policy against the reactive
//!                   bound and the oracle (issue 17's aims)
//!   bench probe     the harmonydb probe on Curio's real schema with 2M history rows against
//!                   none, and the history statement's plan (index-only)
//!   bench peers-grid the peers' free parameters by a grid on seeds 1-10 of every built-in
//!                   scenario (examples/support/peer_grid.rs; not in `all`: it is long)
//!   bench day       the day-cycle scenario with the day learned against without, seeds 1-10:
//!                   profit, launches, hours below target around the daily rise
//!   bench floor     what the floor keeps of the rules' service under a model that never acts
//!                   (text answers, or unusable), incident/spike/steady over seeds 1-10
#![allow(clippy::disallowed_methods, clippy::disallowed_macros)]

#[path = "support/day_bench.rs"]
mod day_bench;
#[path = "../tests/common/fake_llm.rs"]
#[allow(dead_code)]
mod fake_llm;
#[path = "support/floor_bench.rs"]
mod floor_bench;
#[path = "support/peer_grid.rs"]
mod peer_grid;
#[path = "../tests/common/pg.rs"]
#[allow(dead_code)]
mod pg;
#[path = "support/probe_bench.rs"]
mod probe_bench;
#[path = "support/sim_bench.rs"]
mod sim_bench;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use fleetagent::prompt::context::{self, Fixed, Stored};
use fleetagent::store::history::{to_stored, DbHistory};
use fleetagent::store::{messages, OpenMode, Store};
use rusqlite::params;

fn bin() -> PathBuf {
    std::env::var_os("FLEETAGENT_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target/release/fleetagent"))
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn fleet(dir: &Path, args: &[&str]) -> Command {
    fleet_of(&bin(), dir, args)
}

/// `fleet` with another build of the binary (`BASELINE_BIN`: the previous build, measured
/// alternately in the same run).
fn fleet_of(bin: &Path, dir: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(bin);
    c.arg("--config")
        .arg(dir.join("config.toml"))
        .arg("--state-dir")
        .arg(dir.join("state"))
        .args(args)
        .env_remove("FLEETAGENT_CONFIG")
        .env_remove("STATE_DIRECTORY");
    c
}

fn run_ok(mut c: Command) {
    let out = c.output().expect("spawn");
    assert!(
        out.status.success(),
        "{:?} failed: {}",
        c,
        String::from_utf8_lossy(&out.stderr)
    );
}

fn timed(mut c: Command) -> Duration {
    let t = Instant::now();
    let out = c.output().expect("spawn");
    let d = t.elapsed();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    d
}

fn new_state(config: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.toml"), config).unwrap();
    run_ok(fleet(dir.path(), &["init"]));
    dir
}

const CONFIG: &str = "[llm]\nprovider = \"rules\"\n";

fn bench_trigger() {
    let dir = new_state(CONFIG);
    // Several hosts (`[ha] enabled`): `trigger` writes the outbox instead; no database is
    // reached (the URL names nothing: a trigger that tried would fail the bench).
    let ha_dir = new_state(&format!(
        "{CONFIG}[ha]\nenabled = true\nhost_id = \"bench\"\n"
    ));
    let mut t_ha = Vec::new();
    let n = 200;
    // The previous build side by side (scripts/bench passes BASELINE_BIN when set), in a state
    // dir of its own that it made itself.
    let baseline = std::env::var_os("BASELINE_BIN").map(PathBuf::from);
    let base_dir = baseline.as_ref().map(|b| {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("config.toml"), CONFIG).unwrap();
        run_ok(fleet_of(b, d.path(), &["init"]));
        d
    });
    let mut t_base = Vec::new();
    // The calibration point: the smallest program doing the same work (scripts/bench passes it).
    let reference = std::env::var_os("REFERENCE_BIN");
    let (ref_db, ref_bell) = (
        dir.path().join("reference.db"),
        dir.path().join("reference.bell"),
    );
    let (mut t_true, mut t_version, mut t_trig, mut t_ref) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..n {
        t_true.push(timed(Command::new("/bin/true")));
        let mut version = Command::new(bin());
        version.arg("--version");
        t_version.push(timed(version));
        t_trig.push(timed(fleet(
            dir.path(),
            &["trigger", "-p", "1", "-r", &format!("bench {i}")],
        )));
        t_ha.push(timed(fleet(
            ha_dir.path(),
            &["trigger", "-p", "1", "-r", &format!("bench {i}")],
        )));
        if let Some(bin) = &reference {
            let mut c = Command::new(bin);
            c.arg(&ref_db).arg(&ref_bell).arg(format!("bench {i}"));
            t_ref.push(timed(c));
        }
        if let (Some(b), Some(d)) = (&baseline, &base_dir) {
            t_base.push(timed(fleet_of(
                b,
                d.path(),
                &["trigger", "-p", "1", "-r", &format!("bench {i}")],
            )));
        }
    }
    let (a, v, b) = (median(t_true), median(t_version), median(t_trig));
    println!(
        "trigger: median {:.2} ms vs /bin/true {:.2} ms over {n} alternating runs -> ratio {:.2}x (goal <= 4x)",
        ms(b),
        ms(a),
        ms(b) / ms(a)
    );
    println!(
        "  of which starting this binary (`--version`): {:.2} ms = {:.2}x /bin/true; the trigger's own work: {:.2} ms",
        ms(v),
        ms(v) / ms(a),
        ms(b) - ms(v)
    );
    let h = median(t_ha);
    println!(
        "  with [ha] enabled (the event to the outbox): median {:.2} ms = {:.2}x /bin/true; HA on / off = {:.3}x",
        ms(h),
        ms(h) / ms(a),
        ms(h) / ms(b)
    );
    if let Some(base) = &baseline {
        let m = median(t_base);
        println!(
            "  the baseline build ({}): median {:.2} ms = {:.2}x /bin/true; this build / baseline = {:.3}x",
            base.display(),
            ms(m),
            ms(m) / ms(a),
            ms(b) / ms(m)
        );
    }
    println!("{}", symbol_order_line(&bin()));
    if !t_ref.is_empty() {
        let r = median(t_ref);
        println!(
            "  the smallest program doing the same (examples/trigger_reference.rs): {:.2} ms = {:.2}x /bin/true; trigger = {:.2}x it",
            ms(r),
            ms(r) / ms(a),
            ms(b) / ms(r)
        );
    }
}

/// How the functions of scripts/trigger.order sit in the binary: how many of them it has, and how
/// many 64 KB windows of text they span (the pages a `trigger` process faults in). Needs `nm`.
fn symbol_order_line(bin: &Path) -> String {
    let list = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/trigger.order"),
    )
    .unwrap_or_default();
    let wanted: std::collections::HashSet<&str> = list.lines().filter(|l| !l.is_empty()).collect();
    let Ok(out) = Command::new("nm").arg("-S").arg(bin).output() else {
        return "  symbol order: not checked (no `nm`)".into();
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let mut windows = std::collections::BTreeSet::new();
    let mut found = std::collections::HashSet::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() != 4 || !wanted.contains(f[3]) {
            continue;
        }
        let (Ok(addr), Ok(size)) = (u64::from_str_radix(f[0], 16), u64::from_str_radix(f[1], 16))
        else {
            continue;
        };
        found.insert(f[3]);
        for w in addr / 65536..=(addr + size.max(1) - 1) / 65536 {
            windows.insert(w);
        }
    }
    format!(
        "  symbol order: {} of the {} functions in scripts/trigger.order are in this binary, spanning {} 64 KB windows of text (scripts/order-symbols regenerates the list)",
        found.len(),
        wanted.len(),
        windows.len()
    )
}

/// Fill a database: `runs` runs, `msgs_per_run` messages each, every `action_every`th run an
/// action run (the rest no-action or skipped, which prompts leave out).
fn seed(state: &Path, runs: i64, msgs_per_run: i64, action_every: i64) {
    let mut store = Store::open(state, OpenMode::Existing, 0).unwrap();
    let tx = store.immediate().unwrap();
    {
        let mut run = tx
            .prepare(
                "INSERT INTO runs (session_id, pid, pass, started_by, status, verdict, started_at,
                                   finished_at, in_prompt, llm_calls, prompt_tokens_est)
                 VALUES (1, 1, 1, 'tick', 'ok', ?1, ?2, ?2, ?3, 1, 5000)",
            )
            .unwrap();
        let mut msg = tx
            .prepare(
                "INSERT INTO messages (session_id, run_id, role, kind, content, tokens, tool_calls,
                                       tool_call_id, tool_name, gist, gist_tokens, created_at)
                 VALUES (1, ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            )
            .unwrap();
        let mut call = tx
            .prepare(
                "INSERT INTO llm_calls (run_id, at, round, messages, prompt_tokens_est,
                                        prompt_tokens_reported, completion_tokens, latency_ms, attempts, outcome)
                 VALUES (?1, ?2, 1, 20, 5000, 4800, 50, 900, 1, 'ok')",
            )
            .unwrap();
        let body = "Demand: active=true. Queue: PSProve 4p/3r. Throughput: 40/h (1h), 10 (15m). Fleet: 3 running (120 p/h).";
        let result = format!(
            "{{\"offers\":[{}]}}",
            "{\"id\":1,\"gpu\":\"RTX 4090\",\"dph\":0.4},".repeat(8)
        );
        for r in 1..=runs {
            let action = r % action_every == 0;
            let verdict = if action {
                "action"
            } else if r % 3 == 0 {
                "no-action"
            } else {
                "skipped"
            };
            run.execute(params![verdict, r * 1000, action as i64])
                .unwrap();
            let run_id = tx.last_insert_rowid();
            call.execute(params![run_id, r * 1000]).unwrap();
            for k in 0..msgs_per_run {
                let t = r * 1000 + k;
                match k % 4 {
                    0 => msg.execute(params![run_id, "user", "observation", body, 60, None::<String>, None::<String>, None::<String>, None::<String>, None::<i64>, t]),
                    1 => msg.execute(params![run_id, "assistant", "tool_call", "", 40,
                        Some(format!("[{{\"id\":\"c{run_id}_{k}\",\"name\":\"search_offers\",\"arguments\":\"{{}}\"}}]")),
                        None::<String>, None::<String>, None::<String>, None::<i64>, t]),
                    2 => msg.execute(params![run_id, "tool", "tool_result", result, 400, None::<String>,
                        Some(format!("c{run_id}_{}", k - 1)), Some("search_offers"),
                        Some("[compacted] search_offers: 8 offers"), Some(20), t]),
                    _ => msg.execute(params![run_id, "assistant", "answer", "Nothing to do; demand is steady.", 20,
                        None::<String>, None::<String>, None::<String>, None::<String>, None::<i64>, t]),
                }
                .unwrap();
            }
        }
    }
    tx.commit().unwrap();
}

fn bench_inspect() {
    let empty = new_state(CONFIG);
    let big = new_state(CONFIG);
    let t = Instant::now();
    seed(&big.path().join("state"), 100_000, 10, 10);
    println!(
        "inspect: seeded 100k runs and 1M messages in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..30 {
        a.push(timed(fleet(empty.path(), &["inspect", "--json"])));
        b.push(timed(fleet(big.path(), &["inspect", "--json"])));
    }
    let (a, b) = (median(a), median(b));
    println!(
        "inspect: median {:.2} ms on 1M messages / 100k runs vs {:.2} ms empty -> ratio {:.2}x (goal <= 2x)",
        ms(b),
        ms(a),
        ms(b) / ms(a)
    );
}

/// `doctor` exits 1 on both databases (no pass has succeeded in either): timed all the same,
/// and it must not be a config error (2).
fn timed_doctor(dir: &Path) -> Duration {
    let mut c = fleet(dir, &["doctor"]);
    let t = Instant::now();
    let out = c.output().expect("spawn");
    let d = t.elapsed();
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    d
}

fn bench_doctor() {
    let empty = new_state(CONFIG);
    let big = new_state(CONFIG);
    let t = Instant::now();
    seed(&big.path().join("state"), 100_000, 10, 10);
    println!(
        "doctor: seeded 100k runs, 100k LLM calls and 1M messages in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..40 {
        a.push(timed_doctor(empty.path()));
        b.push(timed_doctor(big.path()));
    }
    let (a, b) = (median(a), median(b));
    println!(
        "doctor: median {:.2} ms on 1M messages / 100k runs vs {:.2} ms empty -> ratio {:.2}x (goal <= 1.1x)",
        ms(b),
        ms(a),
        ms(b) / ms(a)
    );
}

fn assemble_once(store: &Store, budget: u64) -> (Duration, usize) {
    let current_run: i64 = store
        .conn
        .query_row("SELECT MAX(id) FROM runs", [], |r| r.get(0))
        .unwrap();
    let t = Instant::now();
    let current: Vec<Stored> = messages::of_run(&store.conn, current_run)
        .unwrap()
        .iter()
        .map(to_stored)
        .collect();
    let fixed = Fixed {
        system: "system",
        system_tokens: 1100,
        tools_tokens: 700,
        state: "state",
        state_tokens: 400,
        current: &current,
        interrupted_tokens: 12,
        history: Default::default(),
    };
    let mut source = DbHistory::new(&store.conn, 1, current_run);
    let a = context::assemble(&fixed, &mut source, budget).unwrap();
    (t.elapsed(), a.messages.len())
}

fn bench_assemble() {
    let small = new_state(CONFIG);
    let big = new_state(CONFIG);
    // Both histories are larger than the budget, so both prompts are full: the comparison
    // shows what the size of the stored history costs, not the size of the prompt.
    seed(&small.path().join("state"), 100, 10, 1);
    seed(&big.path().join("state"), 100_000, 10, 10);
    let s = Store::open(&small.path().join("state"), OpenMode::Existing, 0).unwrap();
    let b = Store::open(&big.path().join("state"), OpenMode::Existing, 0).unwrap();
    let (mut ta, mut tb) = (Vec::new(), Vec::new());
    let (mut na, mut nb) = (0, 0);
    for _ in 0..200 {
        let (d, n) = assemble_once(&s, 28_500);
        ta.push(d);
        na = n;
        let (d, n) = assemble_once(&b, 28_500);
        tb.push(d);
        nb = n;
    }
    let (a, b) = (median(ta), median(tb));
    println!(
        "assemble: median {:.3} ms with 1M stored messages ({nb} in the prompt) vs {:.3} ms with 1k ({na} in the prompt) -> ratio {:.2}x (goal <= 1.1x)",
        ms(b),
        ms(a),
        ms(b) / ms(a)
    );
}

fn bench_tokenizer() {
    use fleetagent::tokens::{Encoding, Tokenizer};
    for enc in [Encoding::Cl100kBase, Encoding::O200kBase] {
        let tk = Tokenizer::new(enc);
        let t = Instant::now();
        tk.count_text("warm up");
        let first = t.elapsed();
        let t = Instant::now();
        tk.count_text("second");
        let second = t.elapsed();
        println!(
            "tokenizer: {} first count (initialisation) {:.1} ms, next count {:.3} ms",
            enc.name(),
            ms(first),
            ms(second)
        );
    }
    println!(
        "tokenizer: loads in this process: {} (one per encoding used)",
        fleetagent::faults::stats::TOKENIZER_LOADS.load(std::sync::atomic::Ordering::Relaxed)
    );
}

/// 100 routine ticks with the model answering "no action" and quiet_interval 0 (the model is
/// asked every tick, our worst case); the naive agent sends every stored message every tick.
fn bench_tokens() {
    let llm = fake_llm::FakeLlm::start();
    let config = format!(
        "[llm]\nbase_url = \"{}\"\nquiet_interval_mins = 0\n[debounce]\np0_secs = 0\np1_secs = 0\np2_secs = 0\nmax_wait_secs = 1\n",
        llm.base_url()
    );
    let dir = new_state(&config);
    let ticks = 100;
    for _ in 0..ticks {
        let mut c = fleet(dir.path(), &["run"]);
        c.env("FLEETAGENT_LLM_API_KEY", "sk-bench");
        run_ok(c);
    }
    let store = Store::open(&dir.path().join("state"), OpenMode::Existing, 0).unwrap();
    let t = token_totals(&store);
    let (ours, naive) = (t.ours, t.naive);
    println!(
        "tokens: {ticks} routine ticks: {:.0} prompt tokens per tick (fleetagent) vs {:.0} (naive, whole history) -> ratio {:.3} ({:.1}x fewer); requests rejected: {}",
        ours as f64 / ticks as f64,
        naive as f64 / ticks as f64,
        ours as f64 / naive as f64,
        naive as f64 / ours as f64,
        llm.rejected_count()
    );
}

/// A model that always answers "nothing to do" at once (no HTTP, no cost): what matters here
/// is what fleetagent sends, counted by its own estimate.
struct QuietModel;

impl fleetagent::llm::LlmClient for QuietModel {
    fn chat(
        &self,
        _req: &fleetagent::llm::ChatRequest,
    ) -> Result<fleetagent::llm::ChatResponse, fleetagent::llm::LlmError> {
        Ok(fleetagent::llm::ChatResponse {
            content: Some("Demand is steady; nothing to do.".into()),
            attempts: 1,
            ..Default::default()
        })
    }
}

/// A simulated day of the steady scenario with the model deciding (skips included), against
/// the naive agent that sends the whole session's history on every pass.
fn bench_tokens_sim() {
    use fleetagent::sim;
    let dir = tempfile::tempdir().unwrap();
    let mut opts = sim_options("steady", Some(24.0));
    opts.llm = Some(std::sync::Arc::new(QuietModel));
    opts.state_dir = Some(dir.path().to_path_buf());
    let run = sim::run(&opts).unwrap();
    let store = Store::open(dir.path(), OpenMode::Existing, 0).unwrap();
    let t = token_totals(&store);
    let (calls, ours, naive) = (t.calls, t.ours, t.naive);
    let ticks = 24 * 12;
    println!(
        "tokens (sim steady, 24 h, model deciding): {} passes, {calls} model calls, {} skipped; {:.0} prompt tokens per timer tick vs {:.0} for the naive agent -> ratio {:.4} ({:.0}x fewer)",
        t.passes,
        run.report.llm.skips,
        ours as f64 / ticks as f64,
        naive as f64 / ticks as f64,
        ours as f64 / naive as f64,
        naive as f64 / ours.max(1) as f64
    );
}

/// Prompt tokens fleetagent sent (its own estimates), and what the naive agent would have
/// sent: at each pass, the fixed part (the smallest prompt sent) plus every message stored
/// before it.
struct TokenTotals {
    calls: i64,
    ours: i64,
    naive: i64,
    passes: usize,
}

fn token_totals(store: &Store) -> TokenTotals {
    let (calls, ours, fixed): (i64, i64, i64) = store
        .conn
        .query_row(
            "SELECT COUNT(*), COALESCE(SUM(prompt_tokens_est), 0), COALESCE(MIN(prompt_tokens_est), 0)
               FROM llm_calls",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    let per_run: Vec<i64> = store
        .conn
        .prepare("SELECT COALESCE((SELECT SUM(tokens) FROM messages m WHERE m.run_id = r.id), 0) FROM runs r ORDER BY r.id")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<Vec<i64>, _>>()
        .unwrap();
    let (mut naive, mut history) = (0i64, 0i64);
    for t in &per_run {
        naive += fixed + history;
        history += t;
    }
    TokenTotals {
        calls,
        ours,
        naive,
        passes: per_run.len(),
    }
}

fn main() {
    let which = std::env::args().nth(1).unwrap_or_else(|| "all".into());
    let all = which == "all";
    if all || which == "trigger" {
        bench_trigger();
    }
    if all || which == "tokenizer" {
        bench_tokenizer();
    }
    if all || which == "assemble" {
        bench_assemble();
    }
    if all || which == "inspect" {
        bench_inspect();
    }
    if all || which == "doctor" {
        bench_doctor();
    }
    if all || which == "tokens" {
        bench_tokens();
        bench_tokens_sim();
    }
    if all || which == "sim" {
        bench_sim();
    }
    if all || which == "probe" {
        probe_bench::bench_probe();
    }
    if all || which == "floor" {
        floor_bench::bench_floor();
    }
    if all || which == "day" {
        day_bench::bench_day();
    }
    if which == "peers-grid" {
        peer_grid::bench_peers_grid();
    }
}

fn sim_options(name: &str, hours: Option<f64>) -> fleetagent::sim::Options {
    fleetagent::sim::Options {
        hours,
        with_peers: true,
        ..fleetagent::sim::Options::new(fleetagent::sim::scenario::load(name).unwrap(), 1)
    }
}

/// Simulation speed on the steady scenario, then the policy against the reactive bound and the
/// oracle, scenario by scenario over seeds 1-10 (examples/support/sim_bench.rs).
fn bench_sim() {
    use fleetagent::sim;
    let t = Instant::now();
    let week = sim::run(&sim_options("steady", Some(168.0))).unwrap();
    let secs = t.elapsed().as_secs_f64();
    println!(
        "sim: steady, a simulated week (168 h, {} passes, {} processes) in {:.1} s wall -> {:.1} simulated hours per second (goal: a week in under 20 s on 2 cores)",
        week.report.runs.passes,
        week.report.runs.processes,
        secs,
        168.0 / secs
    );
    sim_bench::bench_over_seeds(week.report);
}
