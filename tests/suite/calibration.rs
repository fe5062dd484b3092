//! Counting that never under-counts (issue 15): a model whose tokenizer counts more than our
//! o200k estimate (the fake counts 20 % above its own o200k count, as Qwen's and SmolLM's
//! tokenizers do on digit-heavy prompts). After the first call that reports usage the budget
//! is calibrated and no request is over it by the server's count; a server that refuses an
//! over-long prompt teaches the same; `inspect` and `doctor` show the ratio.

use serde_json::Value;

use crate::common::fake_llm::{FakeLlm, Tokenizer};
use crate::common::fleet::Fleet;

/// An unknown model: counted with o200k, calibrated under its own name.
const MODEL: &str = "qwen2.5-coder-0.5b-instruct";
const BUDGET: u64 = 4_000;
/// `llm.max_output_tokens`: the prompt gets the budget less the margin and this.
const OUTPUT: u64 = 64;

fn fleet(llm: &FakeLlm, extra: &str) -> Fleet {
    let config = super::mind::llm_config(
        &llm.base_url(),
        &format!(
            "retry_budget_secs = 8\ncontext_budget_tokens = {BUDGET}\nmax_output_tokens = {OUTPUT}\nquiet_interval_mins = 0\n{extra}"
        ),
    )
    .replace("model = \"gpt-4.1-mini\"", &format!("model = \"{MODEL}\""));
    assert!(config.contains(MODEL));
    let f = Fleet::with_config(&config).env("FLEETAGENT_LLM_API_KEY", "sk-test-calibration-42");
    f.cmd(&["init"]).ok();
    f
}

/// A digit-heavy operator message: what a real tokenizer splits finer than o200k.
fn message(i: usize) -> String {
    // 38 figures: ten such messages with the system prompt, the tools and the state block
    // fill a 4,000-token budget by our estimate, and pass it by the fake's count.
    let figures: Vec<String> = (0..38)
        .map(|k| format!("{}", 1_000_003 * (i + 1) + 7_919 * k))
        .collect();
    format!("pass {i}: instance figures {}", figures.join(" "))
}

/// One pass: an operator message (kept in later prompts with its answer), then `run`.
fn pass(f: &Fleet, i: usize) -> Value {
    f.cmd(&["message", &message(i)]).ok();
    f.cmd(&["run"]).ok();
    f.inspect()["runs"][0].clone()
}

fn calls(f: &Fleet) -> Vec<(i64, Option<i64>)> {
    let db = f.db();
    let mut st = db
        .prepare("SELECT prompt_tokens_est, prompt_tokens_reported FROM llm_calls ORDER BY id")
        .unwrap();
    let rows = st
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    rows
}

fn stored_ratio(f: &Fleet) -> Option<f64> {
    f.db()
        .query_row(
            "SELECT ratio FROM token_calibration WHERE model = ?1",
            [MODEL],
            |r| r.get(0),
        )
        .ok()
}

#[test]
fn calibration_keeps_every_request_within_the_budget_by_the_servers_count() {
    let llm = FakeLlm::start();
    let tokenizer = Tokenizer {
        factor: 1.2,
        context: None,
    };
    llm.set_tokenizer(tokenizer);
    let f = fleet(&llm, "");
    // Enough unanswered messages to fill the first prompt to its budget (10 since the
    // system prompt, the tools and the state block were made compact for small models).
    for i in 0..10 {
        f.cmd(&["message", &message(100 + i)]).ok();
    }
    for i in 0..12 {
        let run = pass(&f, i);
        assert_eq!(run["decided_by"], "llm", "pass {i}: {run}");
    }
    let reqs = llm.requests();
    assert_eq!(llm.rejected_count(), 0, "{:?}", llm.rejections());
    let counted: Vec<u64> = reqs.iter().map(|r| tokenizer.count(r)).collect();
    let stored = calls(&f);
    assert_eq!(stored.len(), reqs.len());
    // Without calibration the first request, filled to the budget by our estimate, is over it
    // by the server's count: the estimate under-counts this tokenizer.
    assert!(
        counted[0] > BUDGET,
        "the first request ({} by the server, {} by us) should show the under-count",
        counted[0],
        stored[0].0
    );
    // After that first call reported usage, none is over: prompt and answer fit.
    for (k, n) in counted.iter().enumerate().skip(1) {
        assert!(
            *n + OUTPUT <= BUDGET,
            "request {k}: {n} tokens by the server's count + {OUTPUT} of answer > {BUDGET}"
        );
    }
    // And the budget was used, not shrunk to nothing: the prompts reach near it (the
    // history grows back to it after each reshape to half the room, prompt::context).
    let largest = counted[1..].iter().max().unwrap();
    assert!(*largest > BUDGET * 85 / 100, "{counted:?}");
    // The stored estimate is our raw count (what the ratio is measured against), the
    // reported figure the server's; the calibration sits above every ratio seen.
    let mut max_ratio: f64 = 0.0;
    for ((est, rep), n) in stored.iter().zip(&counted) {
        assert_eq!(*rep, Some(*n as i64));
        max_ratio = max_ratio.max(*n as f64 / *est as f64);
    }
    assert!(max_ratio > 1.0, "{max_ratio}");
    let ratio = stored_ratio(&f).expect("a calibration row for the model");
    // The largest ratio plus 2 %, fading slowly as lower ones follow: above all of them.
    let last = counted[counted.len() - 1] as f64 / stored[stored.len() - 1].0 as f64;
    assert!(
        ratio >= max_ratio && ratio <= max_ratio * 1.02 + 1e-9,
        "{ratio} vs {max_ratio}"
    );
    assert!(ratio >= last * 1.02 - 1e-9, "{ratio} vs the last {last}");
    let samples: i64 = f.count("SELECT samples FROM token_calibration");
    assert_eq!(samples as usize, reqs.len());

    // inspect shows the calibrated ratio beside the measured ones.
    let v = f.inspect()["llm"].clone();
    assert_eq!(v["model"], MODEL);
    let shown = v["calibrated_ratio"].as_f64().unwrap();
    assert!(shown >= ratio && shown < ratio + 0.001, "{v}");
    assert_eq!(v["calibration_samples"], samples);
    let measured_max = v["max_reported_to_estimate_ratio"].as_f64().unwrap();
    assert!((measured_max - max_ratio).abs() < 0.001, "{v}");
    assert!(v["reported_to_estimate_ratio"].as_f64().unwrap() > 1.0);
    let held = v["calibrated_budget_tokens"].as_u64().unwrap();
    assert_eq!(
        held,
        (v["effective_budget_tokens"].as_u64().unwrap() as f64 / ratio).floor() as u64
    );
    let text = f.cmd(&["inspect"]).ok().stdout;
    assert!(
        text.contains(&format!("calibrated {shown} over {samples} calls")),
        "{text}"
    );
    // The ratio is covered: doctor has nothing to say about the tokenizer.
    let doc = f.cmd(&["doctor"]).code(1);
    assert!(!doc.stdout.contains("tokenizer"), "{}", doc.stdout);
}

/// The case: a budget set near the server's context, the first request refused as
/// too long (no usage then). The refusal raises the ratio; within a few passes the requests
/// fit, are answered, and calibrate from the usage they report.
#[test]
fn calibration_learns_from_a_servers_context_refusals() {
    let llm = FakeLlm::start();
    let tokenizer = Tokenizer {
        factor: 1.2,
        context: Some(BUDGET),
    };
    llm.set_tokenizer(tokenizer);
    let f = fleet(&llm, "");
    for i in 0..10 {
        f.cmd(&["message", &message(100 + i)]).ok();
    }
    let mut deciders = Vec::new();
    for i in 0..10 {
        deciders.push(pass(&f, i)["decided_by"].as_str().unwrap().to_string());
    }
    assert_eq!(deciders[0], "fallback-rules", "{deciders:?}");
    let refused = llm.overflow_count();
    assert!(
        (1..=3).contains(&refused),
        "{refused} refusals; {deciders:?}"
    );
    // Once it fits it keeps fitting: the model decides every later pass.
    assert!(
        deciders[refused..].iter().all(|d| d == "llm"),
        "{deciders:?}"
    );
    let counted: Vec<u64> = llm.requests().iter().map(|r| tokenizer.count(r)).collect();
    for (k, n) in counted.iter().enumerate().skip(refused) {
        assert!(*n <= BUDGET, "request {k}: {n} > {BUDGET}");
    }
    assert!(stored_ratio(&f).unwrap() > 1.0);
}

#[test]
fn doctor_reports_a_tokenizer_ratio_the_calibration_does_not_cover() {
    let llm = FakeLlm::start();
    let f = fleet(&llm, "");
    // Calls of a model counted 17 % above our estimate, from before any calibration.
    let db = f.db();
    db.execute(
        "INSERT INTO runs (session_id, pid, pass, started_by, status, started_at, finished_at)
         VALUES (1, 1, 1, 'tick', 'ok', 1000, 2000)",
        [],
    )
    .unwrap();
    for _ in 0..3 {
        db.execute(
            "INSERT INTO llm_calls (run_id, at, round, messages, prompt_tokens_est,
                                    prompt_tokens_reported, latency_ms, attempts, outcome)
             VALUES (1, 1500, 1, 3, 2683, 3131, 10, 1, 'ok')",
            [],
        )
        .unwrap();
    }
    let line = |f: &Fleet| {
        f.cmd(&["doctor"])
            .stdout
            .lines()
            .find(|l| l.contains("tokenizer"))
            .map(str::to_string)
    };
    let found = line(&f).expect("doctor names the ratio");
    assert!(
        found.starts_with(&format!(
            "the model's tokenizer counts up to 1.167x our estimate ({MODEL}, over the last 3 calls"
        )),
        "{found}"
    );
    assert!(found.contains("not calibrated"), "{found}");
    // Calibrated for it (as the model's next call that reports usage would), the line goes.
    db.execute(
        "INSERT INTO token_calibration (model, ratio, samples, updated_at) VALUES (?1, 1.19, 3, 2000)",
        [MODEL],
    )
    .unwrap();
    assert_eq!(line(&f), None);
}

/// A budget far above the server's context: its refusals raise the ratio to the inferred
/// cap, and no prompt fits the server while the budget stays. The operator then lowers the
/// budget under the server's context, as the error and doctor say: the raised ratio would
/// leave no room for the minimal prompt, and no call is sent to bring it down, so it goes
/// back to what the provider's counts say and the model decides again.
#[test]
fn a_ratio_raised_by_refusals_does_not_lock_the_model_out_of_a_lowered_budget() {
    let llm = FakeLlm::start();
    let server_context = 2_800;
    llm.set_tokenizer(Tokenizer {
        factor: 0.9,
        context: Some(server_context),
    });
    let f = fleet(&llm, "");
    let config = std::fs::read_to_string(&f.config).unwrap();
    let budget = |tokens: u64| {
        f.write_config(&config.replace(
            &format!("context_budget_tokens = {BUDGET}"),
            &format!("context_budget_tokens = {tokens}"),
        ))
    };
    budget(30_000);
    for i in 0..10 {
        f.cmd(&["message", &message(100 + i)]).ok();
    }
    let mut deciders = Vec::new();
    for i in 0..3 {
        deciders.push(pass(&f, i)["decided_by"].as_str().unwrap().to_string());
    }
    assert!(llm.overflow_count() >= 1, "{deciders:?}");
    assert_eq!(deciders.last().unwrap(), "fallback-rules", "{deciders:?}");
    let raised = stored_ratio(&f).unwrap();
    assert!(raised > 1.5, "{raised}");

    budget(server_context);
    let out = f.cmd(&["run"]).ok();
    assert_eq!(
        f.inspect()["runs"][0]["decided_by"],
        "llm",
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("left no room for the minimal prompt under llm.context_budget_tokens = 2800: set back to 1.02 (no call has reported usage yet: the margin alone)"),
        "{}",
        out.stderr
    );
    // Then the answered call's usage (0.9 of our count) folds in: it only decays.
    assert!(stored_ratio(&f).unwrap() <= 1.02, "{:?}", stored_ratio(&f));
}

/// A server that reports an impossible prompt count once (10^8 times its own count: a
/// cumulative figure, a bug): no sample. It was one, capped at 3x: every later prompt was
/// held to a third of its budget and the model lost its conversation for 50 calls. The pass
/// says so at warning, `inspect` counts it apart, and the next prompt keeps its history.
#[test]
fn an_impossible_usage_count_is_no_sample() {
    let llm = FakeLlm::start();
    let f = fleet(&llm, "");
    for i in 0..3 {
        pass(&f, i);
    }
    let before = stored_ratio(&f);
    let sent_before = llm.requests().last().unwrap()["messages"]
        .as_array()
        .unwrap()
        .len();
    llm.set_tokenizer(Tokenizer {
        factor: 1e8,
        context: None,
    });
    f.cmd(&["message", &message(50)]).ok();
    let out = f.cmd(&["run"]).ok();
    assert!(
        out.stderr
            .contains("not a count of this prompt; left out of the token calibration"),
        "{}",
        out.stderr
    );
    assert_eq!(stored_ratio(&f), before);
    llm.set_tokenizer(Tokenizer {
        factor: 1.0,
        context: None,
    });
    pass(&f, 60);
    let sent_after = llm.requests().last().unwrap()["messages"]
        .as_array()
        .unwrap()
        .len();
    assert!(sent_after > sent_before, "{sent_before} -> {sent_after}");
    let v = f.inspect()["llm"].clone();
    assert_eq!(v["impossible_usage_calls"], 1, "{v}");
    assert!(
        v["max_reported_to_estimate_ratio"].as_f64().unwrap() < 3.0,
        "{v}"
    );
    let text = f.cmd(&["inspect"]).ok().stdout;
    assert!(
        text.contains("1 call(s) reported over 3x our count"),
        "{text}"
    );
}
