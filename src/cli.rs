//! Command-line types (clap derive) and nothing else: no crate imports, so build scripts and
//! the man page / completion generator can load this file alone.

use std::ops::Deref;
use std::path::PathBuf;

use clap::{ArgMatches, Args, FromArgMatches, Parser, Subcommand};

/// Keeps a vast.ai GPU fleet sized to a Curio cluster's SNARK proving demand. An LLM decides;
/// fleetagent keeps it safe: single-flight runs, durable events, wakes, guardrails.
#[derive(Debug, Parser)]
#[command(
    name = "fleetagent",
    version = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("FLEETAGENT_COMMIT"), ")"),
    about,
    after_help = "Environment: FLEETAGENT_CONFIG (config path), STATE_DIRECTORY (state dir, set by systemd), \
VAST_API_KEY, FLEETAGENT_LLM_API_KEY (or OPENAI_API_KEY), FLEETAGENT_HARMONYDB_URL, \
FLEETAGENT_HA_DB_URL, VAST_IMAGE_LOGIN, CREDENTIALS_DIRECTORY (systemd credentials: vast_api_key, \
llm_api_key, harmonydb_url, ha_db_url, vast_image_login; without it, outside a service, the credential \
store's fleetagent.NAME in /etc/credstore, /run/credstore, /usr/lib/credstore, or FLEETAGENT_CREDSTORE's \
colon-separated dirs), RUST_LOG.\n\
Exit codes: 0 success, 1 runtime error, 2 usage or configuration error."
)]
pub struct Cli {
    /// Config file [default: $FLEETAGENT_CONFIG, else /etc/fleetagent/config.toml]
    #[arg(long, global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,

    /// State dir holding fleetagent.db, run.lock and the doorbell [default: state_dir in the
    /// config, else $STATE_DIRECTORY, else /var/lib/fleetagent (root) or $XDG_STATE_HOME/fleetagent]
    #[arg(long, global = true, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,

    /// More log output on stderr (-v info, -vv debug); RUST_LOG overrides
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,

    #[command(subcommand)]
    pub command: Command,
}

/// Each subcommand's arguments are [`Deferred`]: clap builds them only for the subcommand the
/// command line names (help, completions and the man page build them all).
#[derive(Debug, Subcommand)]
pub enum Command {
    /// One agent pass (or a few while events keep arriving): what the timer and the path unit start
    Run(Deferred<RunArgs>),
    /// Record an event and ring the doorbell (cheap; called on every state change)
    Trigger(Deferred<TriggerArgs>),
    /// Send the agent an operator message (a P0 event carrying the text)
    Message(Deferred<MessageArgs>),
    /// Start a fresh conversation; run ids go on; pending wakes are cancelled
    ResetSession(Deferred<ResetSessionArgs>),
    /// Everything needed to diagnose the agent
    Inspect(Deferred<InspectArgs>),
    /// Health check for monitoring: exit 0 healthy, 1 with one line per problem, 2 for a
    /// config error
    Doctor(Deferred<DoctorArgs>),
    /// Scheduled wake-ups: add, list, cancel
    #[command(subcommand)]
    Wakes(WakesCommand),
    /// The conversation: observations, operator messages, the model's answers, tool calls
    History(Deferred<HistoryArgs>),
    /// The fleet as fleetagent sees it, and operator actions on it
    #[command(subcommand)]
    Instances(InstancesCommand),
    /// Cheap change detection (no LLM): rings the doorbell when the fleet or demand changed
    Poll(Deferred<PollArgs>),
    /// Run the whole agent against a simulated fleet and demand (no keys, no network)
    #[command(
        after_help = "sim reads a config only when --config names one: never $FLEETAGENT_CONFIG or \
/etc/fleetagent/config.toml (the defaults above are the other commands'). Without --state-dir \
it works in a temp dir, removed at the end. Exit status: 0 every check passed, 1 one failed \
(the report says which), 2 a bad flag or scenario file."
    )]
    Sim(Deferred<SimArgs>),
    /// systemd units, shell completions and the man pages
    #[command(subcommand)]
    Units(UnitsCommand),
    /// Create the state dir and database; write a commented config where none exists yet
    Init(Deferred<InitArgs>),
    /// Hands off: neither the model, the rules nor the floor launch or stop anything (the
    /// operator's own `instances stop` still works) until `resume` or the end of --for
    Pause(Deferred<PauseArgs>),
    /// End a pause: the next pass decides again
    Resume(Deferred<ResumeArgs>),
    /// An online copy of the database (safe while a run holds it)
    Backup(Deferred<BackupArgs>),
    /// Several management hosts ([ha]): who leads, and a planned handover
    #[command(subcommand)]
    Ha(HaCommand),
}

#[derive(Debug, Subcommand)]
pub enum HaCommand {
    /// The lease (holder, epoch, time left) and every host's last contact, version and config hash
    Status(Deferred<HaStatusArgs>),
    /// A planned handover: this host's lease ends now and the next host to poll takes it
    Release(Deferred<HaReleaseArgs>),
}

#[derive(Debug, Args)]
pub struct HaStatusArgs {
    /// {host_id, role, holder, epoch, lease_left_secs, hosts: [{host_id, last_seen, version, config_hash}], error}
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct HaReleaseArgs {}

#[derive(Debug, Args)]
pub struct RunArgs {}

#[derive(Debug, Args)]
pub struct TriggerArgs {
    /// 0 = urgent (2 s debounce), 1 = state change (10 s), 2 = routine (30 s)
    #[arg(long, short, value_parser = clap::value_parser!(u8).range(0..=2))]
    pub priority: u8,
    /// Why the agent should look (shown to the model and in inspect); must not be empty
    #[arg(long, short, value_parser = non_empty)]
    pub reason: String,
}

#[derive(Debug, Args)]
pub struct MessageArgs {
    /// The message text; must not be empty
    #[arg(value_parser = non_empty)]
    pub text: String,
}

#[derive(Debug, Args)]
pub struct ResetSessionArgs {
    /// Keep pending wakes instead of cancelling them
    #[arg(long)]
    pub keep_wakes: bool,
}

#[derive(Debug, Args)]
pub struct InspectArgs {
    /// Machine-readable output (field names are stable; see docs/inspect.md)
    #[arg(long)]
    pub json: bool,
    /// Draw the last hours from the database as an SVG instead: queue, fleet, throughput
    /// against target and work seen, spend and profit (see docs/inspect.md)
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
    /// With --plot: how many hours back from now, more than 0 and at most 8784 [default: 24]
    #[arg(long, value_name = "H", allow_negative_numbers = true)]
    pub hours: Option<f64>,
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Every check by name with its state, since when and the fix:
    /// {"ok": bool, "checks": [{"name", "ok", "since", "detail", "fix"}]}
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum WakesCommand {
    /// Schedule a check
    Add(Deferred<WakeAddArgs>),
    /// Pending wakes (with --all: the latest of every status)
    List(Deferred<WakeListArgs>),
    /// Cancel pending wakes (one or several ids)
    Cancel(Deferred<WakeCancelArgs>),
}

#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("when").required(true).args(["in_", "at"]))]
pub struct WakeAddArgs {
    /// Due after this long: 90s, 15m, 2h, 1d, 1h30m (units s, m, h, d)
    #[arg(long = "in", value_name = "DURATION")]
    pub in_: Option<String>,
    /// Due at this time (RFC 3339, e.g. 2026-11-29T18:30:00Z)
    #[arg(long, value_name = "RFC3339")]
    pub at: Option<String>,
    /// Why; shown to the model when the wake is due
    #[arg(long, value_parser = non_empty)]
    pub reason: String,
}

#[derive(Debug, Args)]
pub struct WakeListArgs {
    /// Every status (processed, cancelled, failed), newest first
    #[arg(long)]
    pub all: bool,
    /// The wakes as a JSON array (the fields of inspect --json's `wakes`)
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct WakeCancelArgs {
    /// The wakes' ids (`wakes list` shows them): every one is cancelled, or none
    #[arg(value_name = "ID", required = true, num_args = 1.., value_parser = clap::value_parser!(i64).range(1..))]
    pub ids: Vec<i64>,
}

#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// How many messages, newest last
    #[arg(long, short = 'n', default_value_t = 50, value_parser = clap::value_parser!(i64).range(1..=100_000))]
    pub limit: i64,
    /// Every session, not only the current one
    #[arg(long)]
    pub all: bool,
    /// Only the messages of this run
    #[arg(long)]
    pub run: Option<i64>,
    /// The messages as JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum InstancesCommand {
    /// Our instances: fleetagent's table joined with vast.ai's listing
    List(Deferred<InstancesListArgs>),
    /// Stop (or destroy, per vast.stop_mode) one instance; with --all, pause and destroy
    /// every instance of ours (the panic button)
    Stop(Deferred<InstancesStopArgs>),
}

#[derive(Debug, Args)]
pub struct InstancesListArgs {
    /// Only the local table; do not ask vast.ai
    #[arg(long)]
    pub offline: bool,
    /// The instances (and the listing's error, if any) as JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct InstancesStopArgs {
    /// vast.ai instance id
    #[arg(value_parser = clap::value_parser!(i64).range(1..), required_unless_present = "all", conflicts_with = "all")]
    pub id: Option<i64>,
    /// Stop even the last live worker while work is queued, or an instance that is proving
    #[arg(long)]
    pub force: bool,
    /// Pause the agent, then destroy every instance of ours, protections lifted (needs --reason)
    #[arg(long)]
    pub all: bool,
    /// Why (recorded in the action ledger) [default: operator request]
    #[arg(long, value_parser = non_empty, required_if_eq("all", "true"))]
    pub reason: Option<String>,
}

#[derive(Debug, Args)]
pub struct PollArgs {}

#[derive(Debug, Args)]
pub struct SimArgs {
    /// Built-in scenario name (see --list) or a scenario TOML file
    #[arg(long, short, default_value = "steady")]
    pub scenario: String,
    /// Simulated hours [default: the scenario's own]
    #[arg(long)]
    pub hours: Option<f64>,
    /// Random seed; the same seed gives the same report
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print the report as JSON
    #[arg(long)]
    pub json: bool,
    /// Draw queue, fleet, throughput and spend over time as an SVG
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
    /// List the built-in scenarios and exit
    #[arg(long, conflicts_with_all = ["scenario", "hours", "seed", "plot", "llm"])]
    pub list: bool,
    /// Let the configured LLM decide (uses --config's [llm]; costs tokens)
    #[arg(long)]
    pub llm: bool,
    /// With --llm: each model call takes this long in simulated time [default: as long as
    /// it took for real]
    #[arg(long, value_name = "SECS")]
    pub llm_latency: Option<f64>,
    /// A peer decides in the rules' place (keda, target-tracking), no peers beside: for the
    /// bench's grid and for looking at a peer's run
    #[arg(long, value_name = "NAME", hide = true)]
    pub peer: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum UnitsCommand {
    /// Write the systemd units (and completions, man pages) for this binary
    Install(Deferred<UnitsInstallArgs>),
}

#[derive(Debug, Args)]
pub struct UnitsInstallArgs {
    /// Install for the user manager ($XDG_CONFIG_HOME/systemd/user) instead of /etc/systemd/system
    #[arg(long)]
    pub user: bool,
    /// Write the units here instead (for packaging and tests)
    #[arg(long, value_name = "DIR")]
    pub unit_dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct InitArgs {
    /// A new database takes this install id instead of a random one: starting afresh after the
    /// database was lost, the id in the instances' labels (<label_prefix>-<id>-r<run>-...), so
    /// that the first pass adopts them
    #[arg(long, value_name = "ID", value_parser = install_id)]
    pub install_id: Option<String>,
}

fn install_id(s: &str) -> Result<String, String> {
    if s == crate::store::ops::SIM_INSTALL_ID {
        Err(format!("{s:?} is the simulator's install id"))
    } else if crate::store::ops::is_install_id(s) {
        Ok(s.to_string())
    } else {
        Err(format!("{s:?} is not a lowercase word of 1-16 letters"))
    }
}

#[derive(Debug, Args)]
pub struct PauseArgs {
    /// End the pause by itself after this long (90s, 15m, 2h, 1d) [default: until `resume`]
    #[arg(long = "for", value_name = "DURATION")]
    pub for_: Option<String>,
    /// Why (shown by inspect, doctor and the observation); must not be empty
    #[arg(long, value_parser = non_empty)]
    pub reason: String,
}

#[derive(Debug, Args)]
pub struct ResumeArgs {}

#[derive(Debug, Args)]
pub struct BackupArgs {
    /// Where to write the copy (must not exist yet)
    pub file: PathBuf,
}

fn non_empty(s: &str) -> Result<String, String> {
    if s.trim().is_empty() {
        Err("must not be empty".into())
    } else {
        Ok(s.to_string())
    }
}

/// A subcommand's arguments (an [`Args`] struct), added to the clap `Command` with
/// `Command::defer`, so they are built only when clap enters that subcommand. Every process
/// parses one command line: building the arguments of every subcommand was most of clap's
/// cost in `trigger`, the process started on every state change. Parsing and help are
/// unchanged; completions list the same options (in another order). The subcommands of
/// `wakes`, `instances` and `units` are deferred too (their enums themselves are not: `help`
/// lists their names and abouts); that took 3 % of `trigger`'s instructions off in a debug
/// build once `instances stop` grew `--all`.
#[derive(Debug)]
pub struct Deferred<T>(pub T);

impl<T> Deref for Deferred<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: FromArgMatches> FromArgMatches for Deferred<T> {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        T::from_arg_matches(matches).map(Deferred)
    }

    fn from_arg_matches_mut(matches: &mut ArgMatches) -> Result<Self, clap::Error> {
        T::from_arg_matches_mut(matches).map(Deferred)
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        self.0.update_from_arg_matches(matches)
    }

    fn update_from_arg_matches_mut(&mut self, matches: &mut ArgMatches) -> Result<(), clap::Error> {
        self.0.update_from_arg_matches_mut(matches)
    }
}

impl<T: Args> Args for Deferred<T> {
    fn group_id() -> Option<clap::Id> {
        T::group_id()
    }

    fn augment_args(cmd: clap::Command) -> clap::Command {
        cmd.defer(T::augment_args)
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        cmd.defer(T::augment_args_for_update)
    }
}
