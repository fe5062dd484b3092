//! `scripts/bench floor`: what the floor keeps of the rules' service under a model that never
//! acts (issue 23, must-show 1), on incident, spike and steady over seeds 1-10 at their full
//! length. Two models, in process (no HTTP: each pass's decision is the same as through
//! `sim --llm`):
//! - `text`: answers every turn with a tool call written as JSON text, as Qwen2.5-Coder-0.5B
//!   did on llama-server (nothing runs); the floor decides;
//! - `down`: every turn fails at once (llama-server's final 500), so the fallback decides.
//!
//! Each report carries the rules' run of the same world (`model.rules`): served and $/proof
//! side by side, and how many passes a flagged instance of ours was left billing at most.

use std::sync::Arc;
use std::time::Duration;

use fleetagent::llm::{ChatRequest, ChatResponse, LlmClient, LlmError};
use fleetagent::sim::{self, report::Report, scenario, Options};

const SCENARIOS: &[&str] = &["incident", "spike", "steady"];
const SEEDS: u64 = 10;
/// Served at least this share of what the rules serve.
const SERVED_SHARE: f64 = 0.95;

/// Every turn: a tool call written as text (what the real small model sent).
struct TextOnly;

impl LlmClient for TextOnly {
    fn chat(&self, _req: &ChatRequest) -> Result<ChatResponse, LlmError> {
        Ok(ChatResponse {
            content: Some(
                r#"{"name": "launch_instance", "arguments": {"reason": "workers are dead"}}"#
                    .into(),
            ),
            tool_calls: Vec::new(),
            finish_reason: Some("stop".into()),
            usage: None,
            attempts: 1,
        })
    }
}

/// Every turn refused at once, as llama-server's 500 for a body it cannot parse.
struct Down;

impl LlmClient for Down {
    fn chat(&self, _req: &ChatRequest) -> Result<ChatResponse, LlmError> {
        Err(LlmError::Rejected {
            status: 500,
            message: "Failed to parse tool call arguments as JSON".into(),
        })
    }
}

fn options(name: &str, seed: u64, llm: Arc<dyn LlmClient>) -> Options {
    Options {
        llm: Some(llm),
        llm_latency: Some(Duration::from_secs(3)),
        ..Options::new(scenario::load(name).unwrap(), seed)
    }
}

/// (seed, text model's report, model down's report), seeds on every core.
fn run_seeds(name: &str) -> Vec<(u64, Report, Report)> {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let seeds: Vec<u64> = (1..=SEEDS).collect();
    let chunks: Vec<Vec<u64>> = (0..threads)
        .map(|t| seeds.iter().copied().skip(t).step_by(threads).collect())
        .collect();
    let mut rows = Vec::new();
    std::thread::scope(|scope| {
        let handles: Vec<_> = chunks
            .into_iter()
            .map(|chunk| {
                scope.spawn(move || {
                    chunk
                        .into_iter()
                        .map(|seed| {
                            let text = sim::run(&options(name, seed, Arc::new(TextOnly)));
                            let down = sim::run(&options(name, seed, Arc::new(Down)));
                            (seed, text.unwrap().report, down.unwrap().report)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for h in handles {
            rows.extend(h.join().unwrap());
        }
    });
    rows.sort_by_key(|(s, _, _)| *s);
    rows
}

fn share(model: &Report) -> f64 {
    let rules = model.model.rules.as_ref().map_or(0.0, |b| b.served_share);
    if rules > 0.0 {
        model.proofs.served_share / rules
    } else {
        1.0
    }
}

/// The most passes the floor's clock counted for a flagged instance ("-" before the report
/// carried it).
fn flagged_max(r: &Report) -> String {
    r.model
        .floor_clocks
        .as_ref()
        .map_or("-".into(), |c| c.flagged_passes_max.to_string())
}

pub fn bench_floor() {
    println!();
    println!(
        "the floor under a model that never acts: served against the rules on the same world (full length, seeds 1-{SEEDS})"
    );
    println!("(text = every answer a tool call written as text; down = every turn fails, the fallback decides; flagged = most passes a flagged instance was left billing)");
    let mut summary = Vec::new();
    for name in SCENARIOS {
        let rows = run_seeds(name);
        println!();
        println!("{name}:");
        println!(
            "{:>4} | {:>7} | {:>7} {:>6} {:>8} {:>7} | {:>7} {:>6} {:>8} {:>7} | {:>8}",
            "seed",
            "rules",
            "text",
            "share",
            "$/proof",
            "flagged",
            "down",
            "share",
            "$/proof",
            "flagged",
            "rules $"
        );
        for (seed, text, down) in &rows {
            let rules = text.model.rules.as_ref().expect("the rules beside");
            println!(
                "{:>4} | {:>6.1}% | {:>6.1}% {:>5.1}% {:>8.4} {:>7} | {:>6.1}% {:>5.1}% {:>8.4} {:>7} | {:>8.4}",
                seed,
                rules.served_share * 100.0,
                text.proofs.served_share * 100.0,
                share(text) * 100.0,
                text.money.dollars_per_proof,
                flagged_max(text),
                down.proofs.served_share * 100.0,
                share(down) * 100.0,
                down.money.dollars_per_proof,
                flagged_max(down),
                rules.dollars_per_proof
            );
        }
        let n = rows.len();
        let held = |f: &dyn Fn(&Report) -> f64| {
            rows.iter()
                .filter(|(_, t, d)| f(t) >= SERVED_SHARE - 1e-9 && f(d) >= SERVED_SHARE - 1e-9)
                .count()
        };
        let worst = rows
            .iter()
            .flat_map(|(_, t, d)| [share(t), share(d)])
            .fold(f64::INFINITY, f64::min);
        summary.push(format!(
            "{name:<9} both models serve >= {:.0}% of the rules on {} of {n} seeds (worst {:.1}%)",
            SERVED_SHARE * 100.0,
            held(&share),
            worst * 100.0
        ));
    }
    println!();
    for line in summary {
        println!("  {line}");
    }
}
