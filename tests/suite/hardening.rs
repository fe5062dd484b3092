//! The reliability and security suite (issue 6): crash injection at every persistence point,
//! randomised races between processes, fuzzing of every parser, an adversarial model, secrets,
//! permissions, the units' sandbox and database safety. Each part prints the figure it proves
//! (points x cases, interleavings, executions, adversarial cases); docs/testing.md lists the
//! commands that reproduce them at a larger scale.

mod adversarial;
pub(crate) mod clock;
mod crash;
mod database;
mod fuzz;
mod links;
mod lost;
mod race;
mod sandbox;
mod secrets;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde_json::{json, Value};

use crate::common::fake_llm::{self, FakeLlm};
use crate::common::fake_vast::{FakeVast, Route};
use crate::common::fleet::Fleet;

pub const LLM_KEY: &str = "sk-hardening-llm-5b1e0c7d9a";
/// What every fake-LLM request must fit in (the fake's own provider-like count).
pub const BUDGET: u64 = 8_000;

/// The real binary wired to a strict fake LLM, the fake vast.ai and a `command` demand probe
/// reading `demand.json` in the test's temp dir.
pub struct Rig {
    pub llm: FakeLlm,
    pub vast: FakeVast,
    pub f: Fleet,
}

impl Rig {
    /// `policy` and `llm_extra` are extra TOML lines for those tables.
    pub fn new(policy: &str, llm_extra: &str) -> Rig {
        let llm = FakeLlm::start();
        let vast = FakeVast::start_real_time();
        let f = Fleet::with_config("")
            .env("FLEETAGENT_LLM_API_KEY", LLM_KEY)
            .env("VAST_API_KEY", &vast.api_key());
        let rig = Rig { llm, vast, f };
        rig.f.write_config(&rig.config_text(policy, llm_extra));
        rig.f.cmd(&["init"]).ok();
        rig
    }

    pub fn config_text(&self, policy: &str, llm_extra: &str) -> String {
        format!(
            r#"
[run]
deadline_secs = 60
[debounce]
p0_secs = 0
p1_secs = 0
p2_secs = 0
max_wait_secs = 1
[llm]
base_url = "{llm_url}"
model = "gpt-4.1-mini"
timeout_secs = 3
retry_budget_secs = 4
context_budget_tokens = {BUDGET}
quiet_interval_mins = 0
{llm_extra}
[vast]
base_url = "{vast_url}"
image = "ghcr.io/example/curio-psprove:latest"
[vast.offers]
gpu_names = ["RTX 4090"]
[demand]
source = "command"
command = "cat {demand}"
[policy]
target_proofs_per_hour = 50
proofs_per_hour_per_instance = 50
{policy}
"#,
            llm_url = self.llm.base_url(),
            vast_url = self.vast.url(),
            demand = self.f.path().join("demand.json").display(),
        )
    }

    pub fn demand(&self, v: Value) {
        std::fs::write(self.f.path().join("demand.json"), v.to_string()).unwrap();
    }

    /// Every request the model got passed the strict fake and fit the budget.
    #[track_caller]
    pub fn assert_prompts_valid(&self, what: &str) {
        assert_eq!(
            self.llm.rejected_count(),
            0,
            "{what}: {:?}",
            self.llm.rejections()
        );
        for (i, req) in self.llm.requests().iter().enumerate() {
            fake_llm::validate(req).unwrap_or_else(|e| panic!("{what}: request {i}: {e:?}"));
            let tokens = fake_llm::provider_prompt_tokens(req);
            assert!(tokens <= BUDGET, "{what}: request {i}: {tokens} > {BUDGET}");
        }
    }

    /// Every instance of ours on the fake account is in the instances table under its label and id,
    /// and no label was ever sent in two creates. Returns the number of creates that rented.
    #[track_caller]
    pub fn assert_fleet_tracked(&self, what: &str) -> usize {
        let creates: Vec<_> = self
            .vast
            .requests_to(Route::Create)
            .into_iter()
            .filter(|r| r.status == 200)
            .collect();
        let mut per_label: HashMap<String, usize> = HashMap::new();
        for c in &creates {
            let label = c.json()["label"].as_str().unwrap_or_default().to_string();
            *per_label.entry(label).or_default() += 1;
        }
        assert!(
            per_label.values().all(|n| *n == 1),
            "{what}: a label was created twice: {per_label:?}"
        );
        let tracked: BTreeMap<i64, String> = {
            let db = self.f.db();
            let mut st = db
                .prepare("SELECT vast_id, label FROM instances WHERE vast_id IS NOT NULL")
                .unwrap();
            let rows = st
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            rows
        };
        for inst in self.vast.instances() {
            let id = inst["id"].as_i64().unwrap();
            let label = inst["label"].as_str().unwrap_or_default();
            if !label.starts_with("fleetagent-") {
                continue; // not ours: someone else's instance on the account
            }
            assert_eq!(
                tracked.get(&id).map(String::as_str),
                Some(label),
                "{what}: vast.ai instance {id} ({label}) is not tracked: {tracked:?}"
            );
        }
        creates.len()
    }
}

/// No worker alive while 59 proofs wait: the incident's WORKERS DEAD.
pub fn dead_fleet() -> Value {
    json!({"pending": 59, "running": 0, "running_stale": 0, "completed_1h": 0, "completed_15m": 0, "workers": []})
}

/// `(id, pid, status, started_at, finished_at)` of every run, by id.
pub fn run_rows(db: &rusqlite::Connection) -> Vec<(i64, i64, String, i64, Option<i64>)> {
    let mut st = db
        .prepare("SELECT id, pid, status, started_at, finished_at FROM runs ORDER BY id")
        .unwrap();
    let rows = st
        .query_map([], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    rows
}

/// `PRAGMA integrity_check` is "ok".
#[track_caller]
pub fn assert_integrity(f: &Fleet, what: &str) {
    let v: String = f
        .db()
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(v, "ok", "{what}");
}

/// Files under `dir`, recursively.
pub fn files_under(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(files_under(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}
