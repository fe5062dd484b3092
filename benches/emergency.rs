//! Benchmark (not a timed test): the incident's emergency pass (observe a dead fleet with
//! 3 launches in the window, then 4 launch calls through the registry and the guardrails,
//! 3 of which rent) against a no-op pass (observe a steady fleet, no calls). vast.ai and the
//! demand probe are in-process fakes, so neither network latency nor vast.ai's create
//! spacing is measured: what remains is reconciliation, guardrails and the ledger writes.
//! Prints both medians and their ratio. Then the floor's plan of the emergency snapshot, and
//! the rules' whole plan (`policy::rules::decide`) of a 100-instance fleet with a backlog and
//! one idle worker (issue 25's goal: under 50 us).
#![allow(clippy::disallowed_macros)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fleetagent::clock::{Clock, ManualClock};
use fleetagent::config::{self, Config};
use fleetagent::demand::{Demand, DemandProbe, Worker};
use fleetagent::env::Env;
use fleetagent::run::observe;
use fleetagent::services::Services;
use fleetagent::store::actions::{self, NewAction};
use fleetagent::store::{runs, session, Store};
use fleetagent::tools::{self, Actor, ToolCtx};
use fleetagent::vast::{CreateRequest, Instance, Offer, OfferQuery, VastClient, VastError};

const T0: i64 = 1_800_000_000_000;
const ROUNDS: usize = 200;
const CONFIG: &str = r#"
[vast]
image = "img"
[policy]
target_proofs_per_hour = 500
proofs_per_hour_per_instance = 50
max_dph_total = 10.0
max_instances = 20
"#;

#[derive(Default)]
struct MemVast {
    instances: Mutex<Vec<Instance>>,
}

impl VastClient for MemVast {
    fn search_offers(&self, _q: &OfferQuery) -> Result<Vec<Offer>, VastError> {
        Ok((0..20)
            .map(|i| Offer {
                id: 1000 + i,
                gpu_name: "RTX 4090".into(),
                num_gpus: 1,
                gpu_ram_mb: 24_000.0,
                dph_total: 0.4,
                reliability: 0.99,
                verified: true,
                geolocation: None,
                public_ip: None,
                min_bid: None,
                machine_id: None,
                storage_dph: None,
            })
            .collect())
    }
    fn create_instance(&self, req: &CreateRequest) -> Result<u64, VastError> {
        let mut all = self.instances.lock().unwrap();
        let id = 9_000_000 + all.len() as u64;
        all.push(Instance {
            id,
            label: Some(req.label.clone()),
            gpu_name: Some("RTX 4090".into()),
            dph_total: Some(0.4),
            ..Default::default()
        });
        Ok(id)
    }
    fn list_instances(&self) -> Result<Vec<Instance>, VastError> {
        Ok(self.instances.lock().unwrap().clone())
    }
    fn show_instance(&self, _id: u64) -> Result<Option<Instance>, VastError> {
        Ok(None)
    }
    fn stop_instance(&self, _id: u64) -> Result<(), VastError> {
        Ok(())
    }
    fn start_instance(&self, _id: u64) -> Result<(), VastError> {
        Ok(())
    }
    fn change_bid(&self, _id: u64, _price: f64) -> Result<(), VastError> {
        Ok(())
    }
    fn destroy_instance(&self, _id: u64) -> Result<(), VastError> {
        Ok(())
    }
    fn label_instance(&self, _id: u64, _label: &str) -> Result<(), VastError> {
        Ok(())
    }
    fn instance_logs(&self, _id: u64, _tail: u32) -> Result<String, VastError> {
        Ok(String::new())
    }
}

struct Fixed(Demand);

impl DemandProbe for Fixed {
    fn probe(&self) -> anyhow::Result<Demand> {
        Ok(self.0.clone())
    }
}

fn setup(demand: Demand, earlier: usize) -> (Store, Services, Arc<MemVast>) {
    let store = Store::open_memory(T0).unwrap();
    let vast = Arc::new(MemVast::default());
    for i in 0..earlier {
        let label = format!("fleetagent-r0-e{i}");
        let id = vast
            .create_instance(&CreateRequest {
                offer_id: 1,
                image: "img".into(),
                disk_gb: 40.0,
                label: label.clone(),
                env: Default::default(),
                onstart: None,
                bid_price: None,
                image_login: None,
            })
            .unwrap();
        actions::insert(
            &store.conn,
            &NewAction {
                kind: "launch",
                outcome: "ok",
                actor: "llm",
                instance_id: Some(id as i64),
                label: Some(&label),
                dph: Some(0.4),
                ..Default::default()
            },
            T0 - (i as i64 + 1) * 60_000,
        )
        .unwrap();
    }
    let services = Services {
        vast: Some(vast.clone()),
        demand: Some(Arc::new(Fixed(demand))),
        llm: None,
        fil_usd: None,
        secrets: Default::default(),
    };
    (store, services, vast)
}

/// A run row, as a pass's claim makes it.
fn new_run(store: &Store, clock: &ManualClock) -> i64 {
    let session = session::current(&store.conn).unwrap();
    let tick = fleetagent::store::runs::StartedBy::Tick;
    runs::create(&store.conn, session, 1, 1, tick, clock.now_ms()).unwrap()
}

/// The floor's planning on the emergency snapshot (what the floor adds to every model pass:
/// one pure call), timed over many calls.
fn floor_plan(config: &Config, demand: Demand) -> Duration {
    let (mut store, services, _vast) = setup(demand, 3);
    let clock = ManualClock::new(T0);
    let run = new_run(&store, &clock);
    let snap = observe::observe(&mut store, config, &services, &clock, run).unwrap();
    let memory = fleetagent::policy::floor::Memory::default();
    let model = fleetagent::policy::floor::ModelDid::default();
    const CALLS: u32 = 100;
    let started = Instant::now();
    for _ in 0..CALLS {
        let plan = fleetagent::policy::floor::plan(&snap, config, 0, &memory, &model, T0);
        std::hint::black_box(plan);
    }
    started.elapsed() / CALLS
}

/// The rules' whole plan of a 100-instance fleet (every worker registered, 99 busy, a
/// backlog), timed over many calls: the observation is built once, as a pass does.
fn rules_plan_100() -> Duration {
    let config = config::parse(
        "[vast]\nimage = \"img\"\n[policy]\ntarget_proofs_per_hour = 6000\n\
         proofs_per_hour_per_instance = 50\nmax_dph_total = 100.0\nmax_instances = 150\n",
    )
    .unwrap();
    let demand = Demand {
        pending: 40,
        running: 99,
        completed_1h: 4900,
        completed_15m: 1200,
        workers: workers(100, 1),
        ..Default::default()
    };
    let (mut store, services, _vast) = setup(demand, 100);
    let clock = ManualClock::new(T0);
    let run = new_run(&store, &clock);
    let snap = observe::observe(&mut store, &config, &services, &clock, run).unwrap();
    assert_eq!(snap.instances.len(), 100, "the fleet the plan is timed on");
    assert!(snap.listing_error.is_none() && snap.demand.is_some());
    const CALLS: u32 = 100;
    let started = Instant::now();
    for _ in 0..CALLS {
        let plan = fleetagent::policy::rules::decide(
            &snap,
            &config,
            0,
            fleetagent::policy::rules::Mode::Full,
        );
        std::hint::black_box(plan);
    }
    started.elapsed() / CALLS
}

fn one_pass(config: &Config, demand: Demand, launches: usize) -> Duration {
    let (mut store, services, vast) = setup(demand, 3);
    let clock = ManualClock::new(T0);
    let env = Env::default();
    let started = Instant::now();
    let run = new_run(&store, &clock);
    let mut snap = observe::observe(&mut store, config, &services, &clock, run).unwrap();
    let _ = snap.observation_line(config);
    let registry = tools::registry();
    for i in 0..launches {
        let mut ctx = ToolCtx {
            store: &mut store,
            ctx: fleetagent::services::Ctx {
                config,
                env: &env,
                clock: &clock,
                services: &services,
            },
            snapshot: &mut snap,
            run_id: run,
            actor: Actor::Llm,
            call_id: format!("c{i}"),
        };
        registry
            .call(&mut ctx, "launch_instance", r#"{"reason":"bench"}"#)
            .unwrap();
    }
    let took = started.elapsed();
    if launches > 0 {
        assert_eq!(
            vast.instances.lock().unwrap().len(),
            6,
            "3 earlier + 3 emergency"
        );
    }
    took
}

/// The Curio workers of the first `n` earlier instances ([`setup`]'s labels), each proving
/// one proof but the first `idle`.
fn workers(n: usize, idle: usize) -> Vec<Worker> {
    (0..n)
        .map(|i| Worker {
            machine_name: format!("fleetagent-r0-e{i}"),
            host_and_port: format!("10.0.{}.{}:12300", i / 200, i % 200),
            running: u32::from(i >= idle),
            cordoned: false,
        })
        .collect()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let config = config::parse(CONFIG).unwrap();
    let dead = Demand {
        pending: 59,
        ..Default::default()
    };
    let steady = Demand {
        pending: 2,
        running: 3,
        completed_1h: 150,
        completed_15m: 40,
        workers: workers(3, 0),
        ..Default::default()
    };
    let emergency = median(
        (0..ROUNDS)
            .map(|_| one_pass(&config, dead.clone(), 4))
            .collect(),
    );
    let noop = median(
        (0..ROUNDS)
            .map(|_| one_pass(&config, steady.clone(), 0))
            .collect(),
    );
    println!("no-op pass (observe a steady fleet):          {noop:?} median of {ROUNDS}");
    println!("emergency pass (observe + 4 launch calls):    {emergency:?} median of {ROUNDS}");
    println!(
        "ratio emergency / no-op: {:.2}",
        emergency.as_secs_f64() / noop.as_secs_f64()
    );
    let floor = median((0..20).map(|_| floor_plan(&config, dead.clone())).collect());
    println!("the floor's plan of that snapshot:            {floor:?} median of 20 x 100 calls");
    println!(
        "ratio floor plan / emergency pass: {:.4}",
        floor.as_secs_f64() / emergency.as_secs_f64()
    );
    let rules = median((0..20).map(|_| rules_plan_100()).collect());
    println!("the rules' plan of a 100-instance fleet:      {rules:?} median of 20 x 100 calls (goal < 50us)");
    println!(
        "ratio rules' plan (100 instances) / emergency pass: {:.4}",
        rules.as_secs_f64() / emergency.as_secs_f64()
    );
}
