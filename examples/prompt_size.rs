//! The minimal prompt per fleet size: what a pass sends before any history (the system
//! prompt, the tool schemas, the pinned state block and this pass's observation), assembled
//! by fleetagent's own prompt code for a busy snapshot of N instances, counted with o200k
//! and, given a llama.cpp server's URL, by the model's own tokenizer. Prints the context a
//! model needs for it (`llm.context_budget_tokens`, with the 5 % margin and
//! `llm.max_output_tokens` = 256).
//!
//!   cargo run --release --example prompt_size [-- --tokenize-url http://127.0.0.1:8080]
//!
//! `--dump DIR` writes each request body (`prompt-N.json`) for another tool to count.
//! With a URL the server applies its chat template to the request (`POST /apply-template`,
//! tools included) and counts the result (`POST /tokenize`): no inference is run. Without
//! one the model's count is estimated as o200k x 1.16 (Qwen2.5's measured ratio on these
//! prompts, ids and times costing more). The snapshot is a busy pass with a fleet of N: 10
//! pending wakes (the agent may keep 12), the 8 recent actions pinned, two launches in flight,
//! a flagged instance, the floor's last actions, events and a wake that came due.
#![allow(clippy::disallowed_methods, clippy::disallowed_macros)]

use std::collections::BTreeMap;

use fleetagent::config::Config;
use fleetagent::demand::{Demand, Worker, WorkerHistory};
use fleetagent::fleet::{Snapshot, DEAD, LAUNCHING, LOADING, PROVING, REGISTERED};
use fleetagent::llm::{ChatMessage, ChatRequest, Role};
use fleetagent::prompt::calibration::MARGIN;
use fleetagent::prompt::observation::{pass_text, Woke};
use fleetagent::prompt::state::{pinned_state, Pinned, PINNED_ACTIONS};
use fleetagent::prompt::{BUDGET_MARGIN_PERCENT, SYSTEM_PROMPT};
use fleetagent::store::actions::Action;
use fleetagent::store::events::Event;
use fleetagent::store::instances::{InstanceRow, State};
use fleetagent::store::wakes::Wake;
use fleetagent::tokens::{Encoding, Tokenizer};

/// 2026-12-01 20:05 UTC.
const NOW: i64 = 1_796_155_500_000;
const MIN: i64 = 60_000;
/// Qwen2.5's count of our prompts over o200k (reference/openai-chat-tools.md, 2026-12-04).
const QWEN_OVER_O200K: f64 = 1.16;
const MAX_OUTPUT_TOKENS: u64 = 256;
const SIZES: [usize; 5] = [0, 5, 10, 20, 40];

fn main() {
    let mut url = None;
    let mut dump = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--tokenize-url" => url = args.next(),
            "--dump" => dump = args.next().map(std::path::PathBuf::from),
            _ => {
                eprintln!("usage: prompt_size [--tokenize-url http://127.0.0.1:8080] [--dump DIR]");
                std::process::exit(2);
            }
        }
    }
    let config = config();
    let tk = Tokenizer::new(Encoding::O200kBase);
    let tools = fleetagent::tools::registry().specs();
    let tools_tokens = tk.count_tools(&tools);
    let system_tokens = tk.count_text(SYSTEM_PROMPT);
    println!(
        "minimal prompt (system + tools + pinned state + observation, no history), max_output_tokens {MAX_OUTPUT_TOKENS}"
    );
    println!(
        "{:>4} {:>7} {:>6} {:>6} {:>6} {:>7} {:>7} {:>7} {:>8}",
        "N", "system", "tools", "state", "obs", "o200k", "model", "source", "context"
    );
    for n in SIZES {
        let world = World::new(n);
        let (state, observation) = world.texts(&config);
        let request = request(&state, &observation, tools.clone());
        let total = tk.count_request(&request);
        if let Some(dir) = &dump {
            let body = fleetagent::llm::http::request_body(&request);
            let path = dir.join(format!("prompt-{n}.json"));
            if let Err(e) = std::fs::write(&path, body.to_string()) {
                eprintln!("{}: {e}", path.display());
                std::process::exit(1);
            }
        }
        let (model, source) = match url.as_deref() {
            Some(u) => match server_count(u, &request) {
                Ok(c) => (c, "server"),
                Err(e) => {
                    eprintln!("{u}: {e}");
                    std::process::exit(1);
                }
            },
            None => ((total as f64 * QWEN_OVER_O200K).ceil() as u64, "x1.16"),
        };
        println!(
            "{n:>4} {system_tokens:>7} {tools_tokens:>6} {:>6} {:>6} {total:>7} {model:>7} {source:>7} {:>8}",
            tk.count_text(&state),
            tk.count_text(&observation),
            context_needed(model),
        );
        if std::env::var_os("PROMPT_SIZE_SHOW").is_some_and(|v| v == n.to_string().as_str()) {
            println!("--- state ---\n{state}--- observation ---\n{observation}\n---");
        }
    }
    println!(
        "context = the smallest llm.context_budget_tokens (and server context) that sends it: (model count x {} + {MAX_OUTPUT_TOKENS}) / (1 - {BUDGET_MARGIN_PERCENT} %)",
        1.0 + MARGIN
    );
}

/// The smallest `llm.context_budget_tokens` whose effective budget (less the 5 % margin and
/// the answer) holds a prompt the model counts as `model_tokens`, with the calibration's own
/// margin over the model's ratio (`prompt::calibration::MARGIN`): the assembler holds our
/// estimate times that ratio to the budget.
fn context_needed(model_tokens: u64) -> u64 {
    let need = (model_tokens as f64 * (1.0 + MARGIN)).ceil() as u64 + MAX_OUTPUT_TOKENS;
    let mut ctx = need * 100 / (100 - BUDGET_MARGIN_PERCENT);
    while ctx - ctx * BUDGET_MARGIN_PERCENT / 100 < need {
        ctx += 1;
    }
    ctx
}

/// The request as a pass sends it with no history: the system prompt with the state block
/// (the order inside the prompt does not change its size), the observation, the tools.
fn request(state: &str, observation: &str, tools: Vec<fleetagent::llm::ToolSpec>) -> ChatRequest {
    let msg = |role, content: String| ChatMessage {
        role,
        content,
        tool_calls: Vec::new(),
        tool_call_id: None,
    };
    ChatRequest {
        model: "qwen2.5-coder-0.5b".into(),
        // As the agent sends it: the system prompt alone (a stable prefix), then the state
        // block and the observation, the parts that change every pass.
        messages: vec![
            msg(Role::System, SYSTEM_PROMPT.trim_end().to_string()),
            msg(Role::User, fleetagent::prompt::context::state_text(state)),
            msg(Role::User, observation.to_string()),
        ],
        tools,
        max_tokens: Some(MAX_OUTPUT_TOKENS),
        budget: None,
    }
}

/// The server's own count: its chat template applied to the request (tools included), then
/// tokenized.
fn server_count(base: &str, req: &ChatRequest) -> Result<u64, String> {
    let base = base.trim_end_matches('/');
    let body = fleetagent::llm::http::request_body(req);
    let templated: serde_json::Value = post(&format!("{base}/apply-template"), &body)?;
    let prompt = templated["prompt"]
        .as_str()
        .ok_or("apply-template answered no prompt")?;
    let tokens = post(
        &format!("{base}/tokenize"),
        &serde_json::json!({"content": prompt, "add_special": true}),
    )?;
    tokens["tokens"]
        .as_array()
        .map(|t| t.len() as u64)
        .ok_or_else(|| "tokenize answered no tokens".into())
}

fn post(url: &str, body: &serde_json::Value) -> Result<serde_json::Value, String> {
    let text = ureq::post(url)
        .header("content-type", "application/json")
        .send(body.to_string())
        .map_err(|e| format!("POST {url}: {e}"))?
        .body_mut()
        .read_to_string()
        .map_err(|e| format!("POST {url}: {e}"))?;
    serde_json::from_str(&text).map_err(|e| format!("POST {url}: {e}"))
}

fn config() -> Config {
    let mut c = Config::default();
    c.vast.image = Some("ghcr.io/example/curio-worker:latest".into());
    c.vast.offers.gpu_names = vec!["RTX 4090".into(), "RTX 3090".into()];
    c.policy.max_dph_total = Some(20.0);
    c.policy.max_instances = Some(48);
    c.policy.target_proofs_per_hour = 300.0;
    c.policy.proofs_per_hour_per_instance = 28.0;
    c.policy.gpu_rates = BTreeMap::from([("RTX 4090".into(), 30.0), ("RTX 3090".into(), 18.0)]);
    c
}

/// A busy pass with N instances of ours: most proving, some idle, some loading, one flagged
/// exited, two launches in flight.
struct World {
    snapshot: Snapshot,
    intents: Vec<Action>,
    wakes_pending: Vec<Wake>,
    recent: Vec<Action>,
    floor_before: Vec<Action>,
    events: Vec<Event>,
    wakes_due: Vec<Wake>,
}

impl World {
    fn new(n: usize) -> World {
        let mut instances = Vec::new();
        let mut workers = Vec::new();
        let mut history = Vec::new();
        for i in 0..n {
            let (state, status): (State, &str) = match i % 10 {
                0..=4 => (PROVING, "running"),
                5 | 6 => (REGISTERED, "running"),
                7 => (LOADING, "loading"),
                8 if i >= 10 => (LAUNCHING, ""),
                8 => (PROVING, "running"),
                _ if i == 9 => (DEAD, "exited"),
                _ => (PROVING, "running"),
            };
            let (gpu, dph) = if i % 3 == 2 {
                ("RTX 3090", [0.22, 0.24, 0.25][i % 3])
            } else {
                ("RTX 4090", [0.40, 0.42, 0.45][i % 3])
            };
            let vast_id = (state != LAUNCHING).then_some(28_412_301 + 37 * i as i64);
            let label = format!(
                "fleetagent-qwerty-r{}-{:08x}",
                100 + i,
                0x0a1b_2c3d + i * 7919
            );
            let name = label.clone();
            let address = format!("10.1.{}.{}:12300", i / 200, i % 200 + 2);
            if matches!(state, PROVING | REGISTERED) {
                workers.push(Worker {
                    machine_name: name.clone(),
                    host_and_port: address.clone(),
                    running: u32::from(state == PROVING),
                    cordoned: false,
                });
                history.push(WorkerHistory {
                    host_and_port: address.clone(),
                    proofs: 40,
                    first_end_secs_ago: 5 * 3600,
                    last_end_secs_ago: 120,
                    busy_secs: None,
                    completed_1h: Some(25),
                });
            }
            let age = match state {
                LOADING | LAUNCHING => (4 + i as i64 % 9) * MIN,
                _ => (40 + 23 * i as i64 % 240) * MIN,
            };
            instances.push(InstanceRow {
                label,
                vast_id,
                state,
                actual_status: (!status.is_empty()).then(|| status.to_string()),
                status_msg: match state {
                    LOADING => Some("pulling image".into()),
                    DEAD => Some("Error: container exited with code 137".into()),
                    PROVING | REGISTERED => Some("success, running".into()),
                    _ => None,
                },
                gpu_name: Some(gpu.into()),
                dph: Some(dph),
                offer_id: Some(31_000_000 + i as i64),
                public_ip: Some(format!("203.0.113.{}", i % 250 + 1)),
                machine_name: matches!(state, PROVING | REGISTERED).then_some(name),
                worker_address: matches!(state, PROVING | REGISTERED).then_some(address),
                launched_run: Some(100 + i as i64),
                adopted: false,
                created_at: NOW - age,
                state_since: NOW - age / 2,
                last_seen_at: Some(NOW - MIN),
                gone_at: None,
                machine_id: Some(70_000 + i as i64),
                is_bid: false,
                storage_dph: Some(0.01),
                paused_spans: Vec::new(),
            });
        }
        let proving = instances.iter().filter(|r| r.state == PROVING).count() as u32;
        let snapshot = Snapshot {
            now: NOW,
            run_id: 412,
            demand: Some(Demand {
                pending: 6,
                running: proving,
                completed_1h: 25 * proving,
                completed_15m: 6 * proving,
                workers,
                ps_waiting: Some(2),
                backlog: Some(6),
                history,
                ..Default::default()
            }),
            instances,
            changes: if n > 0 {
                vec![
                    "instance 28412301 registered -> proving".into(),
                    "instance 28412634 loading -> dead (exited)".into(),
                ]
            } else {
                Vec::new()
            },
            window_launches: vec![NOW - 12 * MIN, NOW - 4 * MIN],
            spent_today: 18.4,
            price_unknown: Some(
                "no ask price read from Curio and price.proof_price_fil is not set".into(),
            ),
            install_id: "qwerty".into(),
            ..Default::default()
        };
        let action = |id: i64,
                      kind: &str,
                      outcome: &str,
                      actor: &str,
                      inst: Option<i64>,
                      reason: &str,
                      ago: i64| Action {
            id,
            run_id: Some(400 + id),
            kind: kind.into(),
            outcome: outcome.into(),
            actor: actor.into(),
            instance_id: inst,
            label: Some(format!(
                "fleetagent-qwerty-r{}-{:08x}",
                400 + id,
                0x5e6f_7a8b + id
            )),
            offer_id: Some(31_000_100 + id),
            dph: Some(0.42),
            emergency: false,
            reason: Some(reason.into()),
            detail: None,
            created_at: NOW - ago * MIN,
        };
        let intents = if n >= 10 {
            vec![
                action(
                    90,
                    "launch",
                    "intent",
                    "llm",
                    None,
                    "backlog of 6 for 2 passes",
                    2,
                ),
                action(
                    91,
                    "launch",
                    "intent",
                    "llm",
                    None,
                    "backlog of 6 for 2 passes",
                    2,
                ),
            ]
        } else {
            Vec::new()
        };
        let mut recent = Vec::new();
        for k in 0..PINNED_ACTIONS as i64 {
            recent.push(match k % 4 {
                0 => action(80 - k, "launch", "ok", "floor", Some(28_412_900 + k), "floor: rules: WORKERS DEAD: 59 proofs queued and no live worker; 0 p/h coming (launch 1 of 3)", 5 + 9 * k),
                1 => action(80 - k, "destroy", "ok", "floor", Some(28_412_634 + k), "floor: rules: instance 28412634 is exited: it bills and earns nothing", 5 + 9 * k),
                2 => action(80 - k, "launch", "refused", "llm", None, "Backlog of 6 proofs with every worker busy; adding capacity toward the target", 5 + 9 * k),
                _ => action(80 - k, "launch", "ok", "llm", Some(28_412_700 + k), "Queue has 6 pending and all workers are busy", 5 + 9 * k),
            });
        }
        let floor_before = recent
            .iter()
            .filter(|a| a.actor == "floor")
            .take(2)
            .cloned()
            .collect();
        let wake = |id: i64, due: i64, reason: &str| Wake {
            id,
            due_at: NOW + due * MIN,
            reason: reason.into(),
            created_at: NOW - 30 * MIN,
            created_by: "agent".into(),
            status: "pending".into(),
            processed_by: None,
            attempts: 0,
        };
        let wakes_pending = (0..10)
            .map(|k| {
                wake(
                    300 + k,
                    5 + 10 * k,
                    "check that the new instances came up and are proving",
                )
            })
            .collect();
        let wakes_due = vec![wake(299, -3, "confirm the backlog cleared")];
        let events = vec![Event {
            id: 9001,
            priority: 1,
            kind: "trigger".into(),
            reason: "poll: fleet changed".into(),
            body: None,
            created_at: NOW - 2 * MIN,
            attempts: 0,
        }];
        World {
            snapshot,
            intents,
            wakes_pending,
            recent,
            floor_before,
            events,
            wakes_due,
        }
    }

    /// The pinned state block and the observation, as a pass builds them.
    fn texts(&self, config: &Config) -> (String, String) {
        let pinned = Pinned {
            intents: &self.intents,
            pending_wakes: &self.wakes_pending,
            recent_actions: &self.recent,
        };
        let state = pinned_state(&pinned, &self.snapshot, config, NOW);
        let woke = Woke {
            events: &self.events,
            wakes: &self.wakes_due,
            run_id: 412,
            pass_no: 1,
            started_by: "events",
            floor_before: &self.floor_before,
        };
        (state, pass_text(&self.snapshot, config, &woke, NOW))
    }
}
