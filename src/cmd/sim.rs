//! `sim`: the whole agent against a simulated fleet and demand. Reads no config unless
//! `--config` names one, and calls no paid LLM unless `--llm` asks for it.

use std::io::IsTerminal;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::app::App;
use crate::cli::SimArgs;
use crate::error::{usage, Quiet};
use crate::sim::{self, scenario, Options};

pub fn run(app: &App, args: &SimArgs) -> Result<()> {
    if args.list {
        for (name, text) in scenario::BUILT_IN {
            let s = scenario::parse(text).map_err(|e| usage(format!("{name}: {e}")))?;
            crate::outln!("{name:<16} {:>5}h  {}", s.hours, s.description);
        }
        return Ok(());
    }
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
    if let Some(h) = args.hours {
        scenario::check_hours(h).map_err(|m| usage(format!("--hours {m}")))?;
        scenario
            .check_work(h)
            .map_err(|m| usage(format!("--hours {h}: {m}")))?;
    }
    let opts = Options {
        scenario,
        hours: args.hours,
        seed: args.seed,
        config,
        llm,
        state_dir: app.state_dir_flag.clone(),
        progress: std::io::stderr().is_terminal(),
    };
    let wall = Instant::now();
    let result = sim::run(&opts)?;
    let secs = wall.elapsed().as_secs_f64();
    if let Some(path) = &args.plot {
        let title = format!(
            "fleetagent sim: {} ({}h, seed {})",
            result.report.scenario, result.report.hours, result.report.seed
        );
        std::fs::write(path, sim::plot::svg(&title, &result.samples, result.target))
            .with_context(|| format!("cannot write the plot {}", path.display()))?;
    }
    if args.json {
        crate::outln!("{}", serde_json::to_string_pretty(&result.report)?);
    } else {
        crate::out!("{}", sim::report::render_text(&result.report));
        eprintln!(
            "simulated {:.1} h in {:.1} s ({:.0} simulated hours per second)",
            result.report.hours,
            secs,
            result.report.hours / secs.max(1e-9)
        );
    }
    if result.report.passed {
        Ok(())
    } else {
        Err(Quiet(1).into())
    }
}
