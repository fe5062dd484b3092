//! Price and the profit guardrail (issue 17), end to end: the real binary, the fake OpenAI
//! server and the fake vast.ai on 127.0.0.1. A model asking for a money-losing offer gets
//! `unprofitable` and nothing reaches vast.ai; the rules under WORKERS DEAD rent only the
//! profitable offer; with no price the launch still happens and the observation says
//! "price unknown"; FIL/USD from a URL and from a command, fresh, failing, stale and bad.

use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use serde_json::{json, Value};

use super::agent_e2e::{dead_fleet, one_instance_is_enough, rig, write_demand, CAPS};
use crate::common::fake_llm::{FakeLlm, Reply};
use crate::common::fake_vast::{FakeVast, Route};
use crate::common::fleet::{Fleet, FAST_CONFIG};

/// 0.01 FIL x 4 $/FIL = $0.04 a proof; `min_margin` 0.2: at most $0.032 a proof.
const PRICE: &str = "[price]\nproof_price_fil = 0.01\nfil_usd = 4.0";

fn tool_results(req: &Value) -> Vec<Value> {
    req["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| serde_json::from_str(m["content"].as_str().unwrap()).unwrap())
        .collect()
}

fn refused_unprofitable(f: &Fleet) -> Vec<(String, Option<i64>, Value)> {
    let db = f.db();
    let mut stmt = db
        .prepare(
            "SELECT actor, offer_id, detail FROM actions
             WHERE kind = 'launch' AND outcome = 'refused' ORDER BY id",
        )
        .unwrap();
    stmt.query_map([], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, Option<i64>>(1)?,
            r.get::<_, String>(2)?,
        ))
    })
    .unwrap()
    .map(|r| {
        let (actor, offer, detail) = r.unwrap();
        (actor, offer, serde_json::from_str(&detail).unwrap())
    })
    .filter(|(_, _, d): &(String, Option<i64>, Value)| d["error"] == "unprofitable")
    .collect()
}

#[test]
fn a_model_asking_for_a_money_losing_offer_gets_unprofitable_and_nothing_is_rented() {
    let llm = FakeLlm::start();
    let vast = FakeVast::start_real_time();
    // $4.00/h over 100 proofs/h (`one_instance_is_enough`) = $0.04 a proof: no margin.
    let losing = vast.add_offer("RTX 4090", 4.0, 0.99);
    let f = rig(&llm, &vast, &format!("{CAPS}\n{PRICE}"), "");
    one_instance_is_enough(&f);
    write_demand(f.path(), dead_fleet());
    let args = format!(r#"{{"offer_id": {losing}, "reason": "every worker is dead"}}"#);
    llm.push(Reply::tool_call("launch_instance", &args));
    llm.push(Reply::text("Refused as unprofitable; nothing rented."));
    f.cmd(&["trigger", "-p", "1", "-r", "workers died"]).ok();
    f.cmd(&["run"]).ok();

    assert_eq!(vast.count(Route::Create), 0, "no create reaches vast.ai");
    assert!(!vast.offer_rented(losing));
    let reqs = llm.requests();
    let results = tool_results(&reqs[1]);
    let r = &results[0];
    assert_eq!(r["error"], "unprofitable", "{r}");
    assert_eq!(r["offer_id"], losing);
    assert_eq!(r["usd_per_proof"], 0.04);
    assert_eq!(r["revenue_per_proof"], 0.04);
    assert_eq!(r["max_usd_per_proof"], 0.032);
    assert_eq!(
        (r["pph"].as_f64(), r["rate_source"].as_str()),
        (Some(100.0), Some("default"))
    );
    // The model's refusal is recorded, and the floor's WORKERS DEAD launch is refused too.
    let refused = refused_unprofitable(&f);
    assert!(
        refused
            .iter()
            .any(|(a, o, d)| a == "llm" && *o == Some(losing as i64) && d == r),
        "{refused:?}"
    );
    // The model read the economics of the pass.
    let prompt = reqs[0]["messages"].to_string();
    assert!(
        prompt.contains("Economics: a proof earns $0.0400"),
        "{prompt}"
    );
    assert!(
        prompt.contains("unprofitable"),
        "the system prompt explains the refusal"
    );
}

#[test]
fn the_rules_under_workers_dead_rent_only_the_profitable_offer() {
    let llm = FakeLlm::start();
    let vast = FakeVast::start_real_time();
    // Cheapest per hour, but 10 proofs/h: $0.05 a proof.
    for _ in 0..3 {
        vast.add_offer("RTX 3090", 0.5, 0.99);
    }
    // Dearer per hour, 50 proofs/h: $0.024 a proof.
    let good = vast.add_offer("RTX 4090", 1.2, 0.99);
    let policy =
        format!("{CAPS}\n[policy.gpu_rates]\n\"RTX 3090\" = 10\n\"RTX 4090\" = 50\n{PRICE}");
    let f = rig(&llm, &vast, &policy, "provider = \"rules\"");
    let cfg = std::fs::read_to_string(&f.config).unwrap().replace(
        r#"gpu_names = ["RTX 4090"]"#,
        r#"gpu_names = ["RTX 4090", "RTX 3090"]"#,
    );
    f.write_config(&cfg);
    write_demand(f.path(), dead_fleet());
    f.cmd(&["trigger", "-p", "1", "-r", "workers died"]).ok();
    f.cmd(&["run"]).ok();

    let creates = vast.requests_to(Route::Create);
    assert_eq!(creates.len(), 1, "only the profitable offer is rented");
    assert!(vast.offer_rented(good));
    assert!(llm.requests().is_empty(), "the rules decide");
    // The launches after it found only offers that lose money, and were refused so.
    let refused = refused_unprofitable(&f);
    assert!(!refused.is_empty());
    for (actor, _, d) in &refused {
        assert_eq!(actor, "rules");
        assert_eq!(d["offers_checked"], 3, "{d}");
        assert_eq!(d["usd_per_proof"], 0.05, "{d}");
        assert_eq!(d["rate_source"], "pinned", "{d}");
    }
}

#[test]
fn with_the_price_unknown_the_launch_happens_and_the_observation_says_so() {
    let llm = FakeLlm::start();
    let vast = FakeVast::start_real_time();
    // Would lose money at any price near the others': no price, no check.
    vast.add_offer("RTX 4090", 5.0, 0.99);
    let f = rig(&llm, &vast, CAPS, "");
    one_instance_is_enough(&f);
    write_demand(f.path(), dead_fleet());
    llm.push(Reply::tool_call(
        "launch_instance",
        r#"{"reason": "every worker is dead"}"#,
    ));
    llm.push(Reply::text("Launched one."));
    f.cmd(&["trigger", "-p", "1", "-r", "workers died"]).ok();
    f.cmd(&["run"]).ok();
    assert_eq!(vast.count(Route::Create), 1);
    let observation = f.last_observation();
    // The prompt's line is short; why and the keys to set are doctor's (below).
    assert!(
        observation.contains("Economics: price unknown, so profit is not checked.")
            && !observation.contains("proof_price_fil"),
        "{observation}"
    );
    let v = f.inspect();
    assert_eq!(v["price"]["revenue_per_proof"], Value::Null);
    assert!(v["price"]["unknown"]
        .as_str()
        .unwrap()
        .contains("proof_price_fil"));
    let doctor = f.cmd(&["doctor"]).code(1).stdout;
    assert!(
        doctor.contains("price unknown: no ask price read from Curio")
            && doctor.contains("price.fil_usd_command"),
        "{doctor}"
    );
}

/// A FIL/USD server on 127.0.0.1: answers every GET with the status and body set last.
struct PriceServer {
    url: String,
    answer: Arc<Mutex<(u16, String)>>,
    hits: Arc<Mutex<u32>>,
}

impl PriceServer {
    fn start() -> PriceServer {
        let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
        let port = server.server_addr().to_ip().unwrap().port();
        let answer = Arc::new(Mutex::new((200, r#"{"fil_usd": 4.0}"#.to_string())));
        let hits = Arc::new(Mutex::new(0));
        let (a, h) = (answer.clone(), hits.clone());
        thread::spawn(move || {
            while let Ok(Some(req)) = server.recv_timeout(Duration::from_secs(60)) {
                *h.lock().unwrap() += 1;
                let (status, body) = a.lock().unwrap().clone();
                let _ =
                    req.respond(tiny_http::Response::from_string(body).with_status_code(status));
            }
        });
        PriceServer {
            url: format!("http://127.0.0.1:{port}/fil_usd.json"),
            answer,
            hits,
        }
    }

    fn set(&self, status: u16, body: &str) {
        *self.answer.lock().unwrap() = (status, body.to_string());
    }
}

/// One pass (the rules; no vast.ai, no demand source: only the price is of interest).
fn pass(f: &Fleet) -> Value {
    f.cmd(&["run"]).ok();
    f.inspect()["price"].clone()
}

/// Make the cached FIL/USD `mins` minutes old.
fn age_cache(f: &Fleet, mins: i64) {
    f.db()
        .execute(
            "UPDATE agent_state SET fil_usd_at = fil_usd_at - ?1",
            [mins * 60_000],
        )
        .unwrap();
}

#[test]
fn fil_usd_from_a_url_fresh_failing_stale_and_bad() {
    let server = PriceServer::start();
    let f = Fleet::with_config(&format!(
        "{FAST_CONFIG}[price]\nproof_price_fil = 0.01\nfil_usd_url = \"{}\"\n",
        server.url
    ));
    f.cmd(&["init"]).ok();
    // inspect and doctor never fetch.
    assert!(f.inspect()["price"]["unknown"]
        .as_str()
        .unwrap()
        .contains("not fetched yet"));
    f.cmd(&["doctor"]);
    assert_eq!(*server.hits.lock().unwrap(), 0);

    let p = pass(&f);
    assert_eq!(*server.hits.lock().unwrap(), 1, "one fetch per pass");
    assert_eq!(
        (p["fil_usd"].as_f64(), p["fil_usd_source"].as_str()),
        (Some(4.0), Some("url"))
    );
    assert_eq!(p["revenue_per_proof"], 0.04);
    assert_eq!(p["unknown"], Value::Null);

    // The server fails: the error is recorded, the value still used while fresh.
    server.set(500, "upstream down");
    let p = pass(&f);
    assert_eq!(p["fil_usd"], 4.0);
    let err = p["fil_usd_error"].as_str().unwrap();
    assert!(
        err.starts_with("price.fil_usd_url: GET ") && err.contains("HTTP 500"),
        "{err}"
    );
    let doctor = f.cmd(&["doctor"]).stdout;
    assert!(
        doctor.contains("the FIL/USD fetch failed: price.fil_usd_url"),
        "{doctor}"
    );
    // Past price.max_age_mins the old value is unknown, not reused.
    age_cache(&f, 61);
    let p = f.inspect()["price"].clone();
    assert_eq!(p["revenue_per_proof"], Value::Null);
    let why = p["unknown"].as_str().unwrap();
    assert!(
        why.contains("FIL/USD is stale") && why.contains("HTTP 500"),
        "{why}"
    );
    let p = pass(&f);
    assert_eq!(
        p["revenue_per_proof"],
        Value::Null,
        "still failing: still unknown"
    );
    let text = f.cmd(&["inspect"]).ok().stdout;
    assert!(
        text.contains("price       price unknown: FIL/USD is stale"),
        "{text}"
    );

    // A bad answer is a one-line error naming the key and what was wrong.
    server.set(200, "{\"usd\": 4}\n");
    let p = pass(&f);
    let err = p["fil_usd_error"].as_str().unwrap();
    assert!(
        err.starts_with("price.fil_usd_url: ")
            && err.ends_with("the object has no \"fil_usd\" key"),
        "{err}"
    );
    assert!(!err.contains('\n'));
    // Good again: fresh, the error cleared.
    server.set(200, "{\"fil_usd\": 5.5}");
    let p = pass(&f);
    assert_eq!(
        (p["fil_usd"].as_f64(), p["fil_usd_error"].as_str()),
        (Some(5.5), None)
    );
}

#[test]
fn fil_usd_from_a_command_fresh_failing_stale_and_bad() {
    let f = Fleet::new();
    let answer = f.path().join("fil_usd.json");
    std::fs::write(&answer, r#"{"fil_usd": 3.0}"#).unwrap();
    f.write_config(&format!(
        "{FAST_CONFIG}[price]\nproof_price_fil = 0.01\nfil_usd_command = \"cat {}\"\n",
        answer.display()
    ));
    let p = pass(&f);
    assert_eq!(
        (p["fil_usd"].as_f64(), p["fil_usd_source"].as_str()),
        (Some(3.0), Some("command"))
    );
    assert_eq!(p["revenue_per_proof"], 0.03);
    std::fs::remove_file(&answer).unwrap();
    // A failed fetch is a warning in the journal naming the source, the error and what the
    // price is now (JOURNAL_STREAM names stderr: priority prefixes).
    let journal_line = |f: &Fleet| {
        let run = super::journal::in_journal(f, &["run"]).ok();
        let line = super::journal::journal_line(&run, "", "FIL/USD fetch failed");
        (line, f.inspect()["price"].clone())
    };
    let (line, p) = journal_line(&f);
    assert_eq!(p["fil_usd"], 3.0, "used while fresh");
    let err = p["fil_usd_error"].as_str().unwrap();
    assert!(
        err.starts_with("price.fil_usd_command exited with status 1: cat: "),
        "{err}"
    );
    assert!(
        line.starts_with("<4>fleetagent: the FIL/USD fetch failed (price.fil_usd_command): price.fil_usd_command exited with status 1")
            && line.contains("; the last good value (3 from ")
            && line.ends_with(" ago) counts until it is price.max_age_mins = 60 old"),
        "{line}"
    );
    age_cache(&f, 61);
    let (line, p) = journal_line(&f);
    assert!(p["unknown"].as_str().unwrap().contains("stale"), "{p}");
    assert!(
        line.ends_with("the price is unknown and launches are not checked for profit"),
        "{line}"
    );
    std::fs::write(&answer, "{\"fil_usd\": \"3\"}").unwrap();
    let p = pass(&f);
    assert_eq!(
        p["fil_usd_error"],
        json!("price.fil_usd_command: \"fil_usd\" must be a number, got \"3\"")
    );
}
