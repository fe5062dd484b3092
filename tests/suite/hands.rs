//! The agent's hands and eyes at library level: `fleet::observe` reconciling against the fake
//! vast.ai and Curio's tables in a real PostgreSQL, the tools executed through the registry
//! and the guardrails, the rules policy, and `poll` with the real binary. vast.ai client and
//! fake share a ManualClock, so create spacing and penalties cost no real time.

mod configuration;
mod curio_reading;
mod fallback_rules;
mod guardrails;
mod hand_brake;
mod incident;
mod instances_command;
mod lost_creates;
mod mid_pass;
mod poll;
mod price;
mod read_only_tools;
mod reconciliation;
mod restore;
mod two_installs;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fleetagent::clock::{Clock, ManualClock};
use fleetagent::config::{self, Config};
use fleetagent::demand::{Demand, DemandProbe, HarmonyDbProbe, Worker};
use fleetagent::env::Env;
use fleetagent::fleet::Snapshot;
use fleetagent::run::observe;
use fleetagent::services::Services;
use fleetagent::store::actions::{self, NewAction};
use fleetagent::store::instances::{self, InstanceRow};
use fleetagent::store::{runs, session, Store};
use fleetagent::tools::{self, Actor, ToolCtx, ToolResult};
use fleetagent::vast::http::HttpVastClient;
use fleetagent::vast::VastClient;
use serde_json::Value;

use crate::common::fake_vast::{FakeVast, Route, FAKE_API_KEY};
use crate::common::pg::TestDb;

const T0: i64 = 1_800_000_000_000;
const MIN: i64 = 60_000;

/// Launch-ready policy: 50 proofs/h per instance, target 500, $10/h, 20 instances.
const BASE: &str = r#"
[vast]
image = "ghcr.io/example/curio-psprove:latest"
[vast.offers]
gpu_names = ["RTX 4090"]
[policy]
target_proofs_per_hour = 500
proofs_per_hour_per_instance = 50
max_dph_total = 10.0
max_instances = 20
"#;

/// A demand probe whose answer the test sets.
struct StaticDemand(Mutex<Result<Demand, String>>);

impl StaticDemand {
    fn new(d: Demand) -> Arc<StaticDemand> {
        Arc::new(StaticDemand(Mutex::new(Ok(d))))
    }

    fn set(&self, d: Result<Demand, String>) {
        *self.0.lock().unwrap() = d;
    }
}

impl DemandProbe for StaticDemand {
    fn probe(&self) -> anyhow::Result<Demand> {
        self.0.lock().unwrap().clone().map_err(anyhow::Error::msg)
    }
}

struct Rig {
    clock: Arc<ManualClock>,
    fake: FakeVast,
    store: Store,
    config: Config,
    env: Env,
    services: Services,
    run_id: i64,
    calls: u32,
}

impl Rig {
    fn new(config_text: &str, demand: Arc<dyn DemandProbe>) -> Rig {
        let clock = Arc::new(ManualClock::new(T0));
        let fake = FakeVast::start(clock.clone());
        let config = config::parse(config_text).expect("config");
        let vast: Arc<dyn VastClient> = Arc::new(HttpVastClient::new(
            &fake.url(),
            Some(FAKE_API_KEY.into()),
            clock.clone(),
            Duration::from_secs(10),
        ));
        Rig {
            store: Store::open_memory(T0).unwrap(),
            clock,
            fake,
            config,
            env: Env::default(),
            services: Services {
                vast: Some(vast),
                demand: Some(demand),
                llm: None,
                fil_usd: None,
                secrets: Default::default(),
            },
            run_id: 0,
            calls: 0,
        }
    }

    fn now(&self) -> i64 {
        self.clock.now_ms()
    }

    /// A new run row (as a pass's claim makes) and its observation.
    fn pass(&mut self) -> Snapshot {
        let session = session::current(&self.store.conn).unwrap();
        self.run_id = runs::create(
            &self.store.conn,
            session,
            1,
            1,
            fleetagent::store::runs::StartedBy::Tick,
            self.now(),
        )
        .unwrap();
        observe::observe(
            &mut self.store,
            &self.config,
            &self.services,
            self.clock.as_ref(),
            self.run_id,
        )
        .unwrap()
    }

    fn call_as(&mut self, snap: &mut Snapshot, actor: Actor, tool: &str, args: &str) -> ToolResult {
        self.calls += 1;
        let mut ctx = ToolCtx {
            store: &mut self.store,
            ctx: fleetagent::services::Ctx {
                config: &self.config,
                env: &self.env,
                clock: self.clock.as_ref(),
                services: &self.services,
            },
            snapshot: snap,
            run_id: self.run_id,
            actor,
            call_id: format!("call_{}", self.calls),
        };
        tools::registry().call(&mut ctx, tool, args).unwrap()
    }

    fn call(&mut self, snap: &mut Snapshot, tool: &str, args: Value) -> ToolResult {
        self.call_as(snap, Actor::Llm, tool, &args.to_string())
    }

    fn force_stop(&mut self, snap: &mut Snapshot, id: i64) -> ToolResult {
        let mut ctx = ToolCtx {
            store: &mut self.store,
            ctx: fleetagent::services::Ctx {
                config: &self.config,
                env: &self.env,
                clock: self.clock.as_ref(),
                services: &self.services,
            },
            snapshot: snap,
            run_id: 0,
            actor: Actor::Operator,
            call_id: "operator-1".into(),
        };
        tools::stop::stop(&mut ctx, id, "operator says so", true).unwrap()
    }

    /// A launch already made earlier (in the ledger and on vast.ai), `ago_ms` before now.
    fn earlier_launch(&mut self, label: &str, ago_ms: i64) -> u64 {
        let id = self.fake.add_instance(label);
        self.fake.set_actual_status(id, Some("loading"));
        let at = self.now() - ago_ms;
        actions::insert(
            &self.store.conn,
            &NewAction {
                kind: "launch",
                outcome: "ok",
                actor: "llm",
                instance_id: Some(id as i64),
                label: Some(label),
                dph: Some(0.4),
                ..Default::default()
            },
            at,
        )
        .unwrap();
        instances::upsert(
            &self.store.conn,
            &InstanceRow {
                label: label.into(),
                vast_id: Some(id as i64),
                state: fleetagent::fleet::State::Loading,
                actual_status: Some("loading".into()),
                status_msg: None,
                gpu_name: Some("RTX 4090".into()),
                dph: Some(0.4),
                offer_id: None,
                public_ip: None,
                machine_name: None,
                worker_address: None,
                launched_run: None,
                adopted: false,
                created_at: at,
                state_since: at,
                last_seen_at: Some(at),
                gone_at: None,
                machine_id: None,
                is_bid: false,
                storage_dph: None,
                paused_spans: Vec::new(),
            },
        )
        .unwrap();
        id
    }

    fn creates_ok(&self) -> usize {
        self.fake
            .requests_to(Route::Create)
            .iter()
            .filter(|r| r.status == 200)
            .count()
    }

    fn count(&self, sql: &str) -> i64 {
        self.store.conn.query_row(sql, [], |r| r.get(0)).unwrap()
    }

    /// How this install's labels begin: `fleetagent-<install id>-r`.
    fn label_start(&self) -> String {
        let id = fleetagent::store::ops::install_id(&self.store.conn).unwrap();
        format!("fleetagent-{id}-r")
    }
}

fn code(r: &ToolResult) -> Option<&str> {
    r.error_code()
}

fn dead_demand(pending: u32) -> Demand {
    Demand {
        pending,
        ..Default::default()
    }
}

fn busy_demand() -> Demand {
    Demand {
        pending: 5,
        running: 1,
        completed_1h: 30,
        completed_15m: 8,
        workers: vec![Worker {
            machine_name: "curio-box".into(),
            host_and_port: "10.1.1.1:12300".into(),
            running: 1,
            cordoned: false,
        }],
        ..Default::default()
    }
}

/// `n` PSProve tasks owned by `owner` (NULL: waiting for a worker), each with the
/// `proofshare_queue` row pointing at it that Curio's PSProve adder writes, on a cluster
/// with ProofShare enabled.
fn psprove_tasks(db: &mut TestDb, n: u32, owner: &str) {
    db.exec(&format!(
        "UPDATE curio.proofshare_meta SET enabled = true WHERE singleton;
         WITH t AS (
           INSERT INTO curio.harmony_task (name, owner_id, posted_time, update_time, added_by)
             SELECT 'PSProve', {owner}, now() - interval '20 minutes', now(), 1
             FROM generate_series(1, {n})
             RETURNING id)
         INSERT INTO curio.proofshare_queue (service_id, obtained_at, request_cid, compute_task_id)
           SELECT id, now() - interval '21 minutes', 'bafy-task-' || id, id FROM t;"
    ));
}

/// Curio's tables: `n` PSProve tasks waiting for a worker.
fn pending_tasks(db: &mut TestDb, n: u32) {
    psprove_tasks(db, n, "NULL");
}

/// A Curio machine (PSProve-capable) last heard from `ago_secs` ago, owning `tasks` PSProve tasks.
fn machine(db: &mut TestDb, id: i32, name: &str, host: &str, ago_secs: u32, tasks: u32) {
    db.exec(&format!(
        "INSERT INTO curio.harmony_machines (id, host_and_port, last_contact, cpu, ram, gpu)
           VALUES ({id}, '{host}', now() - interval '{ago_secs} seconds', 32, 137438953472, 1);
         INSERT INTO curio.harmony_machine_details (machine_id, machine_name, tasks)
           VALUES ({id}, '{name}', 'PSAutoSettle,PShareSubmit,PSProve');"
    ));
    psprove_tasks(db, tasks, &id.to_string());
}

fn harmony(db: &TestDb) -> Arc<dyn DemandProbe> {
    Arc::new(HarmonyDbProbe::new(
        db.url(),
        "PSProve".into(),
        150,
        60,
        Duration::from_secs(10),
    ))
}
