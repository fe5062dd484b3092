//! `inspect [--json]`: everything needed to diagnose the agent; `inspect --plot FILE
//! [--hours H]`: the last hours of the database's samples as an SVG.

use std::path::Path;

use anyhow::Result;

use crate::cli::InspectArgs;
use crate::clock::Millis;
use crate::cmd::plot_file::PlotFile;
use crate::cmd::App;
use crate::config::LoadedConfig;
use crate::error::usage;
use crate::inspect::SimView;
use crate::store::{ops, session, Store};

/// `--hours` when not given.
const DEFAULT_HOURS: f64 = 24.0;
/// The longest `--hours`: a leap year (samples are kept 30 days anyway).
const MAX_HOURS: f64 = 8784.0;

/// The time a report reads the database at: the wall clock, but for a database `sim` wrote
/// (`sim --state-dir`) the end of its simulated time, its last pass. Read at the wall clock,
/// a simulation's samples, wakes and hours of history are all months old: the plot would be
/// empty and the day not learned.
pub(crate) fn as_of(app: &App, store: &Store) -> Result<Millis> {
    if ops::is_sim(&ops::install_id(&store.conn)?) {
        if let Some(end) = session::state(&store.conn)?.last_run_finished_at {
            return Ok(end);
        }
    }
    Ok(app.now())
}

/// The config a report judges: for a database `sim` wrote, the one the simulation ran with
/// when the database keeps it (`store::sim_config`), else the host's (`loaded`), and what the
/// report's `sim` says of it (None for an install's database).
fn judged_config(
    loaded: LoadedConfig,
    dir: &Path,
    store: &Store,
) -> Result<(LoadedConfig, Option<SimView>)> {
    if !ops::is_sim(&ops::install_id(&store.conn)?) {
        return Ok((loaded, None));
    }
    let Some(kept) = crate::store::sim_config::read(&store.conn)? else {
        let view = SimView {
            scenario: None,
            seed: None,
            peer: None,
            config: "host",
            config_error: Some(
                "this database was written by a sim that kept no config (before schema 10)".into(),
            ),
        };
        return Ok((loaded, Some(view)));
    };
    let mut view = SimView {
        scenario: Some(kept.scenario),
        seed: Some(kept.seed),
        peer: kept.peer,
        config: "simulation",
        config_error: None,
    };
    match crate::config::parse(&kept.config) {
        Ok(config) => {
            let path = dir.join(crate::store::DB_FILE);
            let sim = LoadedConfig {
                config,
                path,
                file_found: true,
                left_out: Vec::new(),
            };
            Ok((sim, Some(view)))
        }
        Err(e) => {
            view.config = "host";
            view.config_error = Some(format!(
                "the config kept in the database does not parse: {e}"
            ));
            Ok((loaded, Some(view)))
        }
    }
}

pub fn run(app: &App, args: &InspectArgs) -> Result<()> {
    if let Some(file) = &args.plot {
        return plot(app, args, file);
    }
    if args.hours.is_some() {
        return Err(usage(
            "--hours needs --plot FILE (it is how far back the plot reaches)",
        ));
    }
    let (loaded, dir, store) = super::open_for_report_despite_typos(app)?;
    let refused = super::refused_after_report(&loaded);
    let (loaded, sim) = judged_config(loaded, &dir, &store)?;
    let units = crate::units::unit_states_json();
    let now = as_of(app, &store)?;
    let mut report = crate::inspect::build(&store, &dir, &loaded.config, &loaded.path, now, units)?;
    report.config_found = loaded.file_found;
    report.sim = sim;
    // HA set up wrong is when inspect is needed most: the role is unknown and says why.
    report.ha = match crate::ha::node::Settings::of(&loaded.config, &app.env) {
        Ok(Some(settings)) => Some(crate::ha::status::read(&settings)),
        Ok(None) => None,
        Err(e) => Some(crate::ha::status::unconfigured(&loaded.config, &e)),
    };
    // The shared state's install id: a follower that never led holds its own `init`'s,
    // which the first lease it takes replaces (a walkthrough: one HA install shown as one
    // install per host, new labels named under an id never used).
    // Not when this copy holds another install's state (`ha::mirror::foreign_state`): its
    // own instances would read as another's (a re-test).
    if let Some(shared) = report.ha.as_ref().and_then(|h| h.install_id.as_deref()) {
        report.install_id = crate::ha::mirror::install_shown(&store.conn, Some(shared))?;
    }
    if args.json {
        crate::outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        crate::out!("{}", crate::inspect::render_text(&report));
    }
    refused
}

/// The arguments first (a bad `--hours`, an unwritable file: usage errors before anything is
/// read), then the database, then the file. The summary goes to stderr: FILE may be stdout.
fn plot(app: &App, args: &InspectArgs, file: &Path) -> Result<()> {
    if args.json {
        return Err(usage(
            "--plot and --json do not go together: --plot writes only the SVG (run inspect --json on its own)",
        ));
    }
    let hours = args.hours.unwrap_or(DEFAULT_HOURS);
    if !(hours.is_finite() && hours > 0.0 && hours <= MAX_HOURS) {
        return Err(usage(format!(
            "--hours must be more than 0 and at most {MAX_HOURS} (a leap year), got {hours}"
        )));
    }
    let out = PlotFile::open(file)?;
    let drawn = super::open_for_report(app).and_then(|(loaded, dir, store)| {
        let (loaded, _) = judged_config(loaded, &dir, &store)?;
        let now = as_of(app, &store)?;
        let day = crate::run::observe::day_profile(&store.conn, &loaded.config, now)?;
        crate::inspect::plot::draw(&store, now, hours, day.as_ref())
    });
    let drawn = match drawn {
        Ok(d) => d,
        Err(e) => {
            out.discard();
            return Err(e);
        }
    };
    out.write(&drawn.svg)?;
    let window = crate::plot::trim(hours);
    if drawn.samples == 0 {
        crate::journal::write_stderr(&format!(
            "{}: no samples in the last {window} h (each `run` pass stores one; is the timer running?)",
            file.display()
        ));
    } else {
        crate::journal::write_stderr(&format!(
            "{}: {} samples of the last {window} h ({} without a demand reading, {} with the price unknown)",
            file.display(),
            drawn.samples,
            drawn.without_demand,
            drawn.without_price
        ));
    }
    Ok(())
}
