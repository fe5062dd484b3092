//! `sim`: the whole agent against a simulated fleet and demand. Reads no config unless
//! `--config` names one, and calls no paid LLM unless `--llm` asks for it.

use std::io::IsTerminal;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::cli::SimArgs;
use crate::cmd::plot_file::PlotFile;
use crate::cmd::App;
use crate::error::{usage, Quiet};
use crate::sim::{self, scenario, Options};

/// The longest `--llm-latency`: an hour per model call is past any run's deadline already.
const MAX_LLM_LATENCY_SECS: f64 = 3600.0;

pub fn run(app: &App, args: &SimArgs) -> Result<()> {
    if args.list {
        let mut all = Vec::new();
        for (name, text) in scenario::BUILT_IN {
            let s = scenario::parse(text).map_err(|e| usage(format!("{name}: {e}")))?;
            all.push((name, s));
        }
        if args.json {
            let list: Vec<_> = all
                .iter()
                .map(|(name, s)| {
                    serde_json::json!({"name": name, "hours": s.hours, "description": s.description})
                })
                .collect();
            crate::outln!("{}", serde_json::to_string_pretty(&list)?);
        } else {
            for (name, s) in &all {
                crate::outln!("{name:<16} {:>5}h  {}", s.hours, s.description);
            }
        }
        return Ok(());
    }
    let llm_latency = match args.llm_latency {
        None => None,
        Some(_) if !args.llm => return Err(usage(
            "--llm-latency needs --llm (it is how long each model call takes in simulated time)",
        )),
        Some(secs) if secs.is_finite() && (0.0..=MAX_LLM_LATENCY_SECS).contains(&secs) => {
            Some(Duration::from_secs_f64(secs))
        }
        Some(secs) => {
            return Err(usage(format!(
                "--llm-latency must be between 0 and {MAX_LLM_LATENCY_SECS} seconds, got {secs}"
            )))
        }
    };
    let scenario = scenario::load(&args.scenario)?;
    // Only an explicit --config is read: never $FLEETAGENT_CONFIG or the default path.
    let config = match &app.config_flag {
        Some(path) => {
            Some(crate::config::load(path, crate::config::ConfigOrigin::Explicit)?.config)
        }
        None => None,
    };
    let llm: Option<Arc<dyn crate::llm::LlmClient>> = if args.llm {
        let Some(c) = &config else {
            return Err(usage(
                "--llm needs --config naming a config whose [llm] says which model to ask",
            ));
        };
        let key = crate::secrets::lookup(&app.env, crate::secrets::Kind::LlmApiKey)?;
        Some(Arc::new(crate::llm::http::HttpLlmClient::new(
            &c.llm.base_url,
            key.map(|k| k.expose().to_string()),
            Arc::clone(&app.clock),
            Duration::from_secs(c.llm.timeout_secs),
            Duration::from_secs(c.llm.retry_budget_secs),
        )))
    } else {
        None
    };
    let peer = args
        .peer
        .as_deref()
        .map(|text| sim::peers::PeerKind::parse_with_param(text).map_err(usage))
        .transpose()?;
    // The plot's file is opened before the simulation, not found unwritable after it.
    let plot = args.plot.as_deref().map(PlotFile::open).transpose()?;
    let opts = Options {
        scenario,
        hours: args.hours,
        seed: args.seed,
        config,
        llm,
        llm_latency,
        state_dir: app.state_dir_flag.clone(),
        progress: std::io::stderr().is_terminal(),
        peer: peer.map(|p| p.0),
        peer_param: peer.and_then(|p| p.1),
        with_peers: true,
    };
    let wall = Instant::now();
    let result = match sim::run(&opts) {
        Ok(r) => r,
        Err(e) => {
            if let Some(p) = plot {
                p.discard();
            }
            return Err(e);
        }
    };
    let secs = wall.elapsed().as_secs_f64();
    if let Some(p) = plot {
        let title = format!(
            "fleetagent sim: {} ({}h, seed {})",
            result.report.scenario, result.report.hours, result.report.seed
        );
        p.write(&sim::plot::svg(&title, &result.samples, result.target))?;
    }
    if args.json {
        crate::outln!("{}", serde_json::to_string_pretty(&result.report)?);
    } else {
        crate::out!("{}", sim::report::render_text(&result.report));
        crate::journal::write_stderr(&format!(
            "simulated {:.1} h in {:.1} s ({:.1} simulated hours per second)",
            result.report.hours,
            secs,
            result.report.hours / secs.max(1e-9)
        ));
    }
    if result.report.passed {
        Ok(())
    } else {
        Err(Quiet(1).into())
    }
}
