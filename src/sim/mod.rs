//! `fleetagent sim`: the real run pipeline (runner, lock, triggers and debounce, wakes,
//! prompt assembly, tools, guardrails, rules or LLM) on simulated time, against a simulated
//! vast.ai and Curio ([`world`]), in its own state dir. systemd is modelled as DESIGN.md
//! describes it: a timer tick every 5 minutes starts a run unless one is running (then it is
//! merged), and a run starts whenever the doorbell exists and none is running (`PathExists=`).
//! Deterministic for a seed; the report is built from the database the agent wrote.

pub mod measure;
pub mod oracle;
pub mod outside;
pub mod peers;
pub mod plot;
pub mod report;
pub mod rng;
pub mod scenario;
pub mod services;
pub mod world;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};

use crate::clock::{Clock, ManualClock, Millis};
use crate::config::{self, Config, Provider};
use crate::doorbell::{Doorbell, MemoryDoorbell};
use crate::error::usage;
use crate::llm::LlmClient;
use crate::run::{self, RunEnv, RunFailure};
use crate::services::Services;
use crate::store::instances::InstanceRow;
use crate::store::{actions, instances, wakes, OpenMode, Store};
use outside::SIM_INSTALL_ID;
use outside::{Fire, Outside, SimClock};
use report::DriverTally;
use scenario::{ActionKind, LlmMode, Scenario};
use services::{OutageLlm, SimCurio, SimVast, TimedLlm};
use world::{Sample, World};

/// 2026-03-02T00:00:00Z, a Monday: every simulation starts here.
pub const START: Millis = 1_772_409_600_000;
const HOUR_MS: Millis = 3_600_000;

/// The simulator's own config, under the scenario's `[config]`: rules decide, a worker image
/// is set and the money caps are generous enough for every built-in scenario. GPU rates are
/// not pinned: the agent learns them from Curio's history, as it must on a real fleet (a
/// scenario may pin them under `[config.policy.gpu_rates]`).
pub const BASE_CONFIG: &str = r#"
[llm]
provider = "rules"
[vast]
image = "ghcr.io/example/curio-psprove:sim"
[vast.offers]
gpu_names = ["RTX 4090", "RTX 3090"]
min_reliability = 0.95
[policy]
target_proofs_per_hour = 300
proofs_per_hour_per_instance = 25
max_dph_total = 8.0
max_instances = 16
"#;

/// What `price.fil_usd_command` is set to when the scenario models a price: the sim's
/// [`services::SimFilUsd`] answers for it (nothing is run).
pub const FIL_USD_PLACEHOLDER: &str = "sim: the scenario's [price] path";

pub struct Options {
    pub scenario: Scenario,
    /// Simulated hours (the scenario's own when None).
    pub hours: Option<f64>,
    pub seed: u64,
    /// A whole config (`--config`): replaces the base config and the scenario's `[config]`.
    pub config: Option<Config>,
    /// The real model (`--llm`): `provider = "openai"` with this client.
    pub llm: Option<Arc<dyn LlmClient>>,
    /// How long each call of `llm` takes in simulated time (`--llm-latency`); None: as long
    /// as it took for real.
    pub llm_latency: Option<Duration>,
    /// Keep the database here instead of a temporary dir.
    pub state_dir: Option<PathBuf>,
    /// A progress bar on stderr.
    pub progress: bool,
    /// A peer decides in the rules' place (`sim::peers`); None: the rules (or the model).
    pub peer: Option<peers::PeerKind>,
    /// The peer's free parameter (the bench's grid); None: its chosen value.
    pub peer_param: Option<f64>,
    /// Run every peer beside on the same world (`Report::peers`), in threads of their own.
    pub with_peers: bool,
}

impl Options {
    /// `scenario` on `seed` for its own hours, the rules (or the scenario's model) deciding,
    /// in a temporary dir, without peers beside: set the rest with `..Options::new(..)`.
    pub fn new(scenario: Scenario, seed: u64) -> Options {
        Options {
            scenario,
            hours: None,
            seed,
            config: None,
            llm: None,
            llm_latency: None,
            state_dir: None,
            progress: false,
            peer: None,
            peer_param: None,
            with_peers: false,
        }
    }
}

pub struct SimRun {
    pub report: report::Report,
    pub samples: Vec<Sample>,
    pub target: f64,
    /// Hours below target in each simulated hour (the report's `hours_below_target`, hour by
    /// hour): what the bench reads around a daily rise.
    pub below_by_hour: Vec<f64>,
}

/// The config the agent runs with in this simulation.
pub fn effective_config(opts: &Options) -> Result<Config> {
    let mut config = match &opts.config {
        Some(c) => c.clone(),
        None => {
            let mut base: toml::Table = toml::from_str(BASE_CONFIG).context("base config")?;
            if let Some(over) = &opts.scenario.config {
                merge(&mut base, over);
            }
            let text = toml::to_string(&base)?;
            config::parse(&text).map_err(|e| anyhow::anyhow!("scenario [config]: {e}"))?
        }
    };
    config.state_dir = None;
    config.metrics.textfile = None;
    // A worker credential is never read by the simulator (nothing leaves it): a stand-in, so
    // that an operator's own config runs as it would on the host that holds the credential.
    for value in config.vast.env.values_mut() {
        if let crate::config::EnvValue::Credential(c) = value {
            *value = crate::config::EnvValue::Literal(format!(
                "(credential {}, not read by the simulator)",
                c.credential
            ));
        }
    }
    // The scenario's FIL/USD reaches the agent through a source, as a command's would; a
    // config that names its own FIL/USD keeps it.
    let p = &config.price;
    if opts.scenario.price.is_some()
        && p.fil_usd.is_none()
        && p.fil_usd_command.is_none()
        && p.fil_usd_url.is_none()
    {
        config.price.fil_usd_command = Some(FIL_USD_PLACEHOLDER.to_string());
    }
    // A peer decides in the rules' place, whatever model the scenario names.
    let model = opts.llm.is_some() || opts.scenario.llm.mode == LlmMode::Outage;
    config.llm.provider = if model && opts.peer.is_none() {
        Provider::Openai
    } else {
        Provider::Rules
    };
    // Outbids happen to bids only: a scenario's [bids] under an on-demand config (a
    // `--config` of one's own on the outbid scenario) has no effect, and its checks read "no
    // outbid within N h". Said, not refused: the rest of the scenario still runs.
    let b = &opts.scenario.bids;
    if (b.outbid_per_day > 0.0 || !b.waves.is_empty())
        && config.vast.offers.offer_type != crate::config::OfferType::Interruptible
    {
        crate::journal::eprint(
            crate::journal::WARNING,
            "fleetagent: sim: the scenario's [bids] outbids bid instances only, and the config rents on-demand: no outbid will happen; set vast.offers.type = \"interruptible\" (in the scenario's [config.vast.offers], or in --config) to see them",
        );
    }
    Ok(config)
}

/// The config as the simulation's database keeps it (`store::sim_config`): TOML, with
/// `[vast.env]` left out, since a literal worker value may be a secret, and the query
/// values of `demand.http_url` and `price.fil_usd_url` as `***` (a token may travel there;
/// every other output shows them so).
pub fn kept_config(config: &Config) -> Result<String> {
    use crate::secrets::redact::without_query_values;
    let mut kept = config.clone();
    kept.vast.env.clear();
    for url in [&mut kept.demand.http_url, &mut kept.price.fil_usd_url] {
        *url = url.as_deref().map(without_query_values);
    }
    toml::to_string(&kept).context("the simulation's config as TOML")
}

fn merge(base: &mut toml::Table, over: &toml::Table) {
    for (k, v) in over {
        match (base.get_mut(k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            _ => {
                base.insert(k.clone(), v.clone());
            }
        }
    }
}

/// Where the sim's database lives: a fresh dir in /dev/shm when it is writable (no disk
/// flushes), else the system temp dir.
fn temp_state_dir() -> Result<tempfile::TempDir> {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(d) = tempfile::Builder::new()
            .prefix("fleetagent-sim-")
            .tempdir_in(shm)
        {
            return Ok(d);
        }
    }
    tempfile::Builder::new()
        .prefix("fleetagent-sim-")
        .tempdir()
        .context("cannot create a temporary state dir")
}

/// The scenario's operator actions and bursts as timed outside actions.
fn schedule(s: &Scenario, start: Millis, end: Millis) -> Vec<(Millis, Fire)> {
    let mut out = Vec::new();
    for a in &s.events {
        let mut t = start + (a.at_mins * 60_000.0) as Millis;
        loop {
            if t >= end {
                break;
            }
            match a.kind {
                ActionKind::Triggers => {
                    for k in 0..a.count {
                        let at = t + k as Millis * a.every_ms as Millis;
                        let reason = a.text.clone().unwrap_or_else(|| "state change".to_string());
                        out.push((
                            at,
                            Fire::Trigger {
                                priority: a.priority,
                                reason: format!("{reason} #{}", k + 1),
                            },
                        ));
                    }
                }
                ActionKind::ResetSession => out.push((t, Fire::Reset)),
                ActionKind::Message => {
                    out.push((t, Fire::Message(a.text.clone().unwrap_or_default())))
                }
            }
            // (A step under a millisecond, or a NaN, would never reach the end; a parsed
            // scenario repeats every minute at least.)
            let step = (a.repeat_mins * 60_000.0) as Millis;
            if step <= 0 {
                break;
            }
            t += step;
        }
    }
    out
}

/// The database as it would be after the runs that made the starting fleet: launches in the
/// ledger (so the launch window is spent), instance rows, pending wakes.
fn seed_database(
    store: &mut Store,
    seeds: &[world::SeedInstance],
    scenario: &Scenario,
    start: Millis,
) -> Result<()> {
    let tx = store.immediate()?;
    for s in seeds {
        if s.loading {
            let id = actions::insert(
                &tx,
                &actions::NewAction {
                    kind: "launch",
                    outcome: "ok",
                    actor: "rules",
                    instance_id: Some(s.id as i64),
                    label: Some(&s.label),
                    offer_id: Some(s.offer_id as i64),
                    dph: Some(s.dph),
                    reason: Some("sim: launched before the simulation started"),
                    ..Default::default()
                },
                s.created_at,
            )?;
            let _ = id;
        }
        // Dead ones were live when last seen; reconciliation finds them offline.
        let state = if s.loading {
            crate::fleet::LOADING
        } else {
            crate::fleet::REGISTERED
        };
        instances::upsert(
            &tx,
            &InstanceRow {
                label: s.label.clone(),
                vast_id: Some(s.id as i64),
                state,
                actual_status: Some(if s.loading { "loading" } else { "running" }.into()),
                status_msg: None,
                gpu_name: Some(s.gpu_name.clone()),
                dph: Some(s.dph),
                offer_id: Some(s.offer_id as i64),
                public_ip: None,
                machine_name: (!s.loading).then(|| s.label.clone()),
                worker_address: None,
                launched_run: None,
                adopted: false,
                created_at: s.created_at,
                state_since: s.created_at,
                last_seen_at: Some(start - 5 * 60_000),
                gone_at: None,
                machine_id: None,
                is_bid: s.is_bid,
                storage_dph: None,
                paused_spans: Vec::new(),
            },
        )?;
    }
    for k in 0..scenario.start.wakes {
        wakes::add(
            &tx,
            start + k as Millis * 300_000,
            &format!("sim: scheduled check {}", k + 1),
            "operator",
            None,
            start - HOUR_MS,
        )?;
    }
    tx.commit()?;
    Ok(())
}

/// The reactive bound ([`oracle::Foresight::Reactive`]) for these options: the same world and
/// config as [`run`], without running the agent.
pub fn reactive_bound(opts: &Options) -> Result<oracle::OracleResult> {
    let config = effective_config(opts)?;
    let (_, end) = horizon(opts)?;
    Ok(oracle::run(
        &opts.scenario,
        opts.seed,
        &config,
        START,
        end,
        oracle::Foresight::Reactive,
    ))
}

/// The simulated hours (`--hours` or the scenario's own, checked) and the end they give. The
/// scenario is checked again (it may have been built in code), and the work of these hours
/// with it: `--hours` may be longer than the scenario's own. A usage error (exit 2).
fn horizon(opts: &Options) -> Result<(f64, Millis)> {
    let hours = opts.hours.unwrap_or(opts.scenario.hours);
    let what = if opts.hours.is_some() {
        "--hours"
    } else {
        "the scenario's hours"
    };
    scenario::check_hours(hours).map_err(|m| usage(format!("{what} {m}")))?;
    opts.scenario
        .check()
        .map_err(|m| usage(format!("scenario {}: {m}", opts.scenario.name)))?;
    opts.scenario
        .check_work(hours)
        .map_err(|m| usage(format!("{what} {hours}: {m}")))?;
    Ok((hours, START + (hours * HOUR_MS as f64) as Millis))
}

/// The simulation of `opts`, with the peers beside it when asked (each in a thread of its
/// own, while this one runs).
pub fn run(opts: &Options) -> Result<SimRun> {
    if !opts.with_peers || opts.peer.is_some() {
        return run_one(opts);
    }
    // Refused here, once, rather than in every thread.
    horizon(opts)?;
    std::thread::scope(|scope| {
        let beside: Vec<_> = peers::ALL
            .iter()
            .map(|&k| (k, scope.spawn(move || run_one(&peer_beside(opts, k)))))
            .collect();
        let mut sim = run_one(opts)?;
        for (kind, handle) in beside {
            let peer = handle
                .join()
                .map_err(|_| anyhow::anyhow!("the {} peer's simulation panicked", kind.as_str()))?
                .with_context(|| format!("the {} peer's simulation", kind.as_str()))?;
            sim.report.peers.insert(
                kind.as_str().to_string(),
                report::PeerResult::of(&peer.report),
            );
        }
        Ok(sim)
    })
}

fn run_one(opts: &Options) -> Result<SimRun> {
    let config = effective_config(opts)?;
    let (hours, end) = horizon(opts)?;
    let start = START;
    let tmp;
    let state_dir: PathBuf = match &opts.state_dir {
        Some(d) => {
            // Refused before the dir is touched: a bad flag (exit 2), not a failure.
            if d.join(crate::store::DB_FILE).exists() {
                return Err(usage(format!(
                    "--state-dir {} already holds a database; sim needs a fresh state dir",
                    d.display()
                )));
            }
            // A dir that cannot be made or written is the flag's fault too (exit 2: in sim, 1
            // says a check failed).
            crate::paths::ensure_state_dir(d)
                .and_then(|()| crate::paths::check_state_dir(d))
                .map_err(|e| usage(format!("--state-dir {}: {e:#}", d.display())))?;
            d.clone()
        }
        None => {
            tmp = temp_state_dir()?;
            tmp.path().to_path_buf()
        }
    };

    let manual = Arc::new(ManualClock::new(start));
    let clock = Arc::new(SimClock::new(manual.clone()));
    let dyn_clock: Arc<dyn Clock> = clock.clone();
    let doorbell = Arc::new(MemoryDoorbell::new(manual.clone()));

    let mut w = World::new(&opts.scenario, opts.seed, start, &config.vast.label_prefix);
    w.configure(&config);
    let seeds = w.set_up_start();
    let world = Arc::new(Mutex::new(w));

    let mut store = Store::open(&state_dir, OpenMode::Create, start)?;
    crate::store::ops::set_install_id(&store.conn, SIM_INSTALL_ID)?;
    crate::store::sim_config::write(
        &store.conn,
        &crate::store::sim_config::SimConfig {
            scenario: opts.scenario.name.clone(),
            seed: opts.seed,
            peer: opts.peer.map(|k| k.as_str().to_string()),
            config: kept_config(&config)?,
        },
        start,
    )?;
    seed_database(&mut store, &seeds, &opts.scenario, start)?;
    let alive_ms = config.demand.worker_alive_secs as Millis * 1000;
    clock.install(Outside::new(
        store,
        doorbell.clone(),
        world.clone(),
        // The scenario's triggers, operator messages and resets are addressed to fleetagent;
        // a peer reads none of them (KEDA and an Auto Scaling group have no doorbell).
        match opts.peer {
            Some(_) => Vec::new(),
            None => schedule(&opts.scenario, start, end),
        },
        start,
        alive_ms,
        &config.vast.label_prefix,
    ));

    let llm: Option<Arc<dyn LlmClient>> = match (&opts.llm, opts.scenario.llm.mode) {
        (Some(l), _) => Some(Arc::new(TimedLlm {
            inner: l.clone(),
            clock: dyn_clock.clone(),
            fixed: opts.llm_latency,
        })),
        (None, LlmMode::Outage) => Some(Arc::new(OutageLlm {
            clock: dyn_clock.clone(),
            budget: Duration::from_secs(config.llm.retry_budget_secs),
        })),
        (None, LlmMode::Rules) => None,
    };
    let services = Services {
        vast: Some(Arc::new(SimVast::new(
            world.clone(),
            dyn_clock.clone(),
            Duration::from_secs(config.vast.timeout_secs),
        ))),
        demand: Some(Arc::new(SimCurio {
            world: world.clone(),
            clock: dyn_clock.clone(),
            alive_ms,
        })),
        llm,
        fil_usd: opts.scenario.price.as_ref().map(|_| {
            Arc::new(services::SimFilUsd {
                world: world.clone(),
                clock: dyn_clock.clone(),
            }) as Arc<dyn crate::price::FilUsdSource>
        }),
        // The simulated services know no secret.
        secrets: Arc::default(),
    };

    let bar = opts.progress.then(|| {
        let b = indicatif::ProgressBar::new((hours * 60.0) as u64);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{bar:40} {pos}/{len} simulated minutes ({per_sec}, eta {eta})",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        b
    });

    let peer = opts.peer.map(|k| k.build(opts.peer_param));
    let env = sim_env();
    let run_env = RunEnv {
        ctx: crate::services::Ctx {
            config: &config,
            env: &env,
            clock: dyn_clock.as_ref(),
            services: &services,
        },
        state_dir: &state_dir,
        doorbell: doorbell.as_ref(),
        pid: 0,
        peer: peer.as_deref(),
        config_changed: None,
    };
    let mut tally = DriverTally::default();
    let mut next_tick = start;
    let period = config.run.timer_period_secs as Millis * 1000;
    loop {
        let now = clock.now_ms();
        if now >= end {
            break;
        }
        if doorbell.mtime()?.is_some() {
            tally.path_starts += 1;
            run_once(&run_env, &mut tally);
            skip_merged_ticks(&mut next_tick, clock.now_ms(), period, &mut tally);
            continue;
        }
        // Idle until the next tick, unless an outside action rings the doorbell first.
        let target = next_tick.min(end);
        loop {
            match clock.next_due() {
                Some(t) if t <= target => {
                    clock.run_until(t);
                    if doorbell.mtime()?.is_some() {
                        break;
                    }
                }
                _ => {
                    clock.run_until(target);
                    break;
                }
            }
        }
        if let Some(b) = &bar {
            b.set_position(((clock.now_ms() - start) / 60_000) as u64);
        }
        if doorbell.mtime()?.is_some() {
            continue;
        }
        if clock.now_ms() >= next_tick && clock.now_ms() < end {
            tally.ticks += 1;
            run_once(&run_env, &mut tally);
            next_tick += period;
            skip_merged_ticks(&mut next_tick, clock.now_ms(), period, &mut tally);
        }
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let end_now = clock.now_ms();
    {
        let mut w = services::lock(&world);
        w.advance(end_now);
    }
    let outside_tally = clock.with_outside(|o| o.tally.clone()).unwrap_or_default();
    let store = Store::open(&state_dir, OpenMode::Existing, end_now)?;
    let bell = doorbell.mtime()?.is_some();
    let target = config.policy.target_proofs_per_hour;
    let oracle = oracle::run(
        &opts.scenario,
        opts.seed,
        &config,
        start,
        end,
        oracle::Foresight::Full,
    );
    let bound = oracle::run(
        &opts.scenario,
        opts.seed,
        &config,
        start,
        end,
        oracle::Foresight::Reactive,
    );
    // A model is judged beside the rules on the same world: the same scenario, seed and
    // config, decided by the rules (in a temporary dir of its own).
    let rules = match &opts.llm {
        Some(_) => Some(run_one(&rules_beside(opts))?.report),
        None => None,
    };
    let w = services::lock(&world);
    let report = report::build(&report::Inputs {
        store: &store,
        world: &w,
        config: &config,
        scenario: &opts.scenario,
        seed: opts.seed,
        hours,
        start,
        end: end_now,
        horizon: end,
        driver: &tally,
        outside: &outside_tally,
        doorbell_waiting: bell,
        oracle: &oracle,
        bound: &bound,
        llm_real: opts.llm.is_some(),
        rules: rules.as_ref(),
        peer: opts.peer.map(|p| p.as_str()),
    })?;
    let samples = w.samples.clone();
    let below_by_hour = (0..)
        .map(|h| start + h * HOUR_MS)
        .take_while(|from| *from < end_now.min(end))
        .map(|from| w.hours_below_target(target, from, (from + HOUR_MS).min(end_now).min(end)))
        .collect();
    drop(w);
    // Close our connections before the temporary dir goes.
    drop(store);
    clock.with_outside(|o| o.store.checkpoint());
    Ok(SimRun {
        report,
        samples,
        target,
        below_by_hour,
    })
}

/// These options with the rules deciding (no model, no simulated outage), in a temporary dir.
fn rules_beside(opts: &Options) -> Options {
    let mut scenario = opts.scenario.clone();
    scenario.llm.mode = LlmMode::Rules;
    Options {
        hours: opts.hours,
        config: opts.config.clone(),
        ..Options::new(scenario, opts.seed)
    }
}

/// These options decided by the peer `kind` (the rules' scenario, no model), in a temporary
/// dir, no peers beside.
fn peer_beside(opts: &Options, kind: peers::PeerKind) -> Options {
    Options {
        peer: Some(kind),
        ..rules_beside(opts)
    }
}

/// The environment a simulated pass sees: nothing of the host's, not even its credential
/// store (`FLEETAGENT_CREDSTORE` empty: none). Every launch looked up
/// `fleetagent.vast_image_login` there, and a broken entry refused them all: the same seed
/// gave another report on another host (the sim walkthrough).
fn sim_env() -> crate::env::Env {
    crate::env::Env::from_pairs([("FLEETAGENT_CREDSTORE".to_string(), String::new())])
}

fn run_once(env: &RunEnv<'_>, tally: &mut DriverTally) {
    tally.processes += 1;
    let env = RunEnv {
        ctx: env.ctx,
        state_dir: env.state_dir,
        doorbell: env.doorbell,
        pid: 10_000 + tally.processes as u32,
        peer: env.peer,
        config_changed: None,
    };
    match run::run_process(&env) {
        Ok(_) => {}
        Err(RunFailure::Early(e)) => {
            // The doorbell is already gone (as for `run`: systemd must not spin).
            tally.early_failures += 1;
            note(tally, format!("early: {e:#}"));
        }
        Err(RunFailure::Pass(e)) => {
            tally.pass_failures += 1;
            note(tally, format!("pass: {e:#}"));
        }
    }
}

fn note(tally: &mut DriverTally, e: String) {
    log::warn!("sim: run failed: {e}");
    if tally.errors.len() < 10 {
        tally.errors.push(crate::text::clip(&e, 300));
    }
}

/// A tick that fell while a run was going is merged into it (a oneshot start request while
/// the service is activating), as systemd does.
fn skip_merged_ticks(next_tick: &mut Millis, now: Millis, period: Millis, tally: &mut DriverTally) {
    while *next_tick <= now {
        *next_tick += period;
        tally.ticks_merged += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A simulated pass reads no secret of the host's: no variable, no credential store.
    #[test]
    fn the_simulation_reads_no_credential_of_the_host() {
        let env = sim_env();
        for kind in crate::secrets::Kind::ALL {
            assert!(
                crate::secrets::lookup(&env, kind).unwrap().is_none(),
                "{kind:?}"
            );
        }
        // Not the host's store (/etc/credstore, ...): none at all.
        assert_eq!(env.get("FLEETAGENT_CREDSTORE").as_deref(), Some(""));
    }

    fn fires(s: &Scenario, hours: f64) -> usize {
        schedule(s, START, START + (hours * HOUR_MS as f64) as Millis).len()
    }

    #[test]
    fn the_schedule_fires_what_the_bound_counts() {
        for (name, _) in scenario::BUILT_IN {
            let s = scenario::load(name).unwrap();
            for hours in [0.5, 0.75, 1.0, 2.0, s.hours] {
                let counted: u64 = s
                    .events
                    .iter()
                    .map(|a| {
                        let per = if a.kind == ActionKind::Triggers {
                            a.count as u64
                        } else {
                            1
                        };
                        scenario::repetitions(a, hours) * per
                    })
                    .sum();
                assert_eq!(fires(&s, hours) as u64, counted, "{name} {hours}h");
            }
        }
    }

    /// What the database keeps is the config the simulation ran with: it reads back as the
    /// same config on every built-in scenario, and a --config file's worker values stay out.
    #[test]
    fn the_kept_config_reads_back_as_the_one_the_simulation_ran_with() {
        for (name, _) in scenario::BUILT_IN {
            let opts = Options::new(scenario::load(name).unwrap(), 1);
            let config = effective_config(&opts).unwrap();
            let kept = config::parse(&kept_config(&config).unwrap()).unwrap();
            assert_eq!(kept, config, "{name}");
        }
        let mut opts = Options::new(scenario::load("steady").unwrap(), 1);
        opts.config = Some(
            config::parse(
                "[vast]\nimage = \"x\"\n[vast.env]\nCURIO_DB_PASSWORD = \"hunter2\"\nDB = { credential = \"db\" }\n",
            )
            .unwrap(),
        );
        let config = effective_config(&opts).unwrap();
        let text = kept_config(&config).unwrap();
        assert!(
            !text.contains("hunter2") && !text.contains("CURIO_DB_PASSWORD"),
            "{text}"
        );
        let kept = config::parse(&text).unwrap();
        assert!(kept.vast.env.is_empty());
        assert_eq!(kept.vast.image.as_deref(), Some("x"));
        // URL tokens are kept as `***`, the rest of each URL as it was.
        let mut tokens = config.clone();
        tokens.demand.http_url = Some("http://127.0.0.1:9/demand?token=dmTk58gRw2Pz".into());
        tokens.price.fil_usd_url = Some("http://127.0.0.1:9/fil?apikey=fxAb73kMn4Qs".into());
        let text = kept_config(&tokens).unwrap();
        for t in ["dmTk58gRw2Pz", "fxAb73kMn4Qs"] {
            assert!(!text.contains(t), "{text}");
        }
        let kept = config::parse(&text).unwrap();
        assert_eq!(
            kept.demand.http_url.as_deref(),
            Some("http://127.0.0.1:9/demand?token=***")
        );
        assert_eq!(
            kept.price.fil_usd_url.as_deref(),
            Some("http://127.0.0.1:9/fil?apikey=***")
        );
        // The worker credential is a stand-in the simulator never reads: an operator's own
        // config launches there (every launch was refused not_configured).
        assert_eq!(
            config.vast.env.get("DB"),
            Some(&config::EnvValue::Literal(
                "(credential db, not read by the simulator)".into()
            ))
        );
        opts.config = Some(
            config::parse(&format!(
                "{BASE_CONFIG}\n[vast.env]\nDB = {{ credential = \"db\" }}\n"
            ))
            .unwrap(),
        );
        opts.hours = Some(2.0);
        let r = run(&opts).unwrap().report;
        assert!(
            r.launches.made >= 1 && r.launches.refused.is_empty(),
            "{:?}",
            r.launches
        );
    }

    #[test]
    fn a_repeat_that_cannot_advance_fires_once() {
        // Built in code, unchecked: a NaN or sub-millisecond repeat must not loop for ever.
        let mut s = scenario::load("incident").unwrap();
        for repeat in [f64::NAN, 1e-9, -5.0] {
            s.events = vec![scenario::Action {
                at_mins: 1.0,
                kind: ActionKind::ResetSession,
                count: 1,
                every_ms: 0,
                priority: 1,
                text: None,
                repeat_mins: repeat,
            }];
            assert_eq!(fires(&s, 2.0), 1, "{repeat}");
            assert!(s.check().unwrap_err().starts_with("event #1 repeat_mins: "));
        }
    }

    #[test]
    fn a_peer_decides_in_the_rules_place_whatever_model_the_scenario_names() {
        let mut opts = Options::new(scenario::load("llm-outage").unwrap(), 1);
        // The scenario's model (an outage) decides the rules' run, never a peer's.
        assert_eq!(
            effective_config(&opts).unwrap().llm.provider,
            Provider::Openai
        );
        opts.peer = Some(peers::PeerKind::Keda);
        assert_eq!(
            effective_config(&opts).unwrap().llm.provider,
            Provider::Rules
        );
    }

    #[test]
    fn the_horizon_is_a_usage_error() {
        let opts = |hours: f64| Options {
            hours: Some(hours),
            ..Options::new(scenario::load("incident").unwrap(), 1)
        };
        for hours in [1e-300, 0.08, f64::NAN, 9000.0] {
            let err = run(&opts(hours)).err().expect("refused");
            assert_eq!(crate::error::exit_code(&err), 2, "{err:#}");
            assert!(err
                .to_string()
                .starts_with("--hours must be at least 5 minutes"));
        }
        let mut o = opts(8784.0);
        o.scenario.market.rate = vec![(0.0, 3000.0)];
        let err = run(&o).err().expect("refused");
        assert_eq!(crate::error::exit_code(&err), 2);
        assert!(
            err.to_string().starts_with("--hours 8784: market.rate: "),
            "{err}"
        );
    }
}
