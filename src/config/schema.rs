//! The schema: every key of DESIGN.md with its default, as serde reads it (unknown keys and
//! wrong types are refused here; ranges are checked in `validate`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The worker environment variable that carries the instance's label (the Curio machine
/// name fleetagent matches workers by); set by the launch, never by the config.
pub const LABEL_ENV: &str = "FLEETAGENT_LABEL";

/// The worker environment variable the worker image names its Curio machine after
/// (`--name` / `CURIO_NODE_NAME`, docs/worker-image.md); the launch sets it to the label
/// unless `[vast.env]` sets it.
pub const NODE_NAME_ENV: &str = "CURIO_NODE_NAME";

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub state_dir: Option<PathBuf>,
    pub run: RunConfig,
    pub llm: LlmConfig,
    pub vast: VastConfig,
    pub demand: DemandConfig,
    pub policy: PolicyConfig,
    pub price: PriceConfig,
    pub debounce: DebounceConfig,
    pub metrics: MetricsConfig,
    pub ha: HaConfig,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RunConfig {
    /// The whole process, all passes included.
    pub deadline_secs: u64,
    pub max_passes: u32,
    /// The systemd timer's period: a failed pass defers its events by this much.
    pub timer_period_secs: u64,
    /// What no prompt, `inspect` or `doctor` reads again is deleted after this many days
    /// (`store::prune`); 0, the default, keeps everything: the ledger and the conversation
    /// are the audit trail, and an operator chooses to drop them.
    pub retention_days: u64,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    Openai,
    Rules,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Fallback {
    Rules,
    None,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LlmConfig {
    pub provider: Provider,
    /// OpenAI-compatible endpoint ending in `/v1`.
    pub base_url: String,
    pub model: String,
    /// One HTTP request.
    pub timeout_secs: u64,
    /// All attempts of one model turn, retries included.
    pub retry_budget_secs: u64,
    pub context_budget_tokens: u64,
    /// `o200k_base` or `cl100k_base`; unset = chosen from the model name.
    pub encoding: Option<String>,
    pub max_tool_rounds: u32,
    pub quiet_interval_mins: u64,
    pub fallback: Fallback,
    /// `max_tokens` of every request: the longest answer the model may give.
    pub max_output_tokens: u64,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum StopMode {
    Destroy,
    Stop,
}

/// A worker environment value: a literal, or the name of a credential to read at launch.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(
    untagged,
    expecting = "must be a string, or { credential = \"NAME\" } and nothing else"
)]
pub enum EnvValue {
    Literal(String),
    Credential(CredentialRef),
}

/// `{ credential = "NAME" }`: a file under `$CREDENTIALS_DIRECTORY`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct CredentialRef {
    pub credential: String,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct VastConfig {
    pub base_url: String,
    /// Docker image of a worker. Unset: no launch is possible.
    pub image: Option<String>,
    pub disk_gb: f64,
    pub onstart: Option<String>,
    pub env: BTreeMap<String, EnvValue>,
    pub label_prefix: String,
    pub stop_mode: StopMode,
    /// With `stop_mode = "stop"`: a stopped instance of ours older than this is destroyed
    /// (a stopped disk still bills).
    pub stopped_max_hours: f64,
    /// One HTTP exchange with vast.ai, body included (1-120 s): a hung server costs an
    /// operator command a few of these, never minutes.
    pub timeout_secs: u64,
    pub offers: OffersConfig,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
pub enum OfferType {
    #[serde(rename = "on-demand")]
    OnDemand,
    #[serde(rename = "interruptible")]
    Interruptible,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct OffersConfig {
    #[serde(rename = "type")]
    pub offer_type: OfferType,
    /// Empty: any GPU.
    pub gpu_names: Vec<String>,
    pub min_reliability: f64,
    pub max_dph_per_instance: Option<f64>,
    pub min_gpu_ram_gb: Option<f64>,
    pub verified_only: bool,
    /// A bid offers `bid_factor` x the offer's `min_bid` $/h (never above
    /// `max_dph_per_instance`).
    pub bid_factor: f64,
    /// A host (`machine_id`) that failed us is left out of searches this long.
    pub bad_host_hours: f64,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum DemandSource {
    Harmonydb,
    Http,
    Command,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct DemandConfig {
    pub source: DemandSource,
    /// Without a password (that comes from FLEETAGENT_HARMONYDB_URL or a credential).
    pub harmonydb_url: Option<String>,
    pub http_url: Option<String>,
    /// Run with `sh -c`; prints the demand JSON.
    pub command: Option<String>,
    pub task: String,
    pub worker_alive_secs: u64,
    pub timeout_secs: u64,
    /// ProofShare queue rows waiting for a task count as work only while younger than this
    /// (and while ProofShare is enabled); older ones are shown as stale.
    pub waiting_max_age_mins: u64,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PolicyConfig {
    /// Throughput to sell; 0 = no fixed target (scale on the backlog signals only).
    pub target_proofs_per_hour: f64,
    pub proofs_per_hour_per_instance: f64,
    /// GPU name -> proofs per hour of one instance with that GPU.
    pub gpu_rates: BTreeMap<String, f64>,
    /// Fleet $/h cap. Unset: no launch is possible.
    pub max_dph_total: Option<f64>,
    /// Instance cap. Unset: no launch is possible.
    pub max_instances: Option<u32>,
    /// Spend per UTC day; unset = no daily cap.
    pub daily_spend_max: Option<f64>,
    pub launch_window_minutes: u64,
    pub launch_window_max: u32,
    pub emergency_launch_max: u32,
    pub stuck_loading_mins: u64,
    pub dry_run: bool,
    /// The grace of a model acting on a deficit: the floor adds what the rules still want
    /// this long after the model's last launch while the deficit is open (a deficit the model
    /// did nothing about is answered in the pass the rules confirm it).
    pub floor_after_mins: u64,
    /// The floor destroys a flagged instance the model left for this many passes.
    pub floor_flagged_passes: u32,
    /// The floor stops idle surplus the model left this long.
    pub floor_idle_mins: u64,
    /// A worker that heartbeats and completes nothing this long while work waits is
    /// flagged (it cannot prove: parameters never fetched, a broken GPU).
    pub silent_worker_mins: u64,
    /// A launch whose cost per proof leaves less than this share of the revenue per proof is
    /// refused (`unprofitable`); 0 refuses only losses.
    pub min_margin: f64,
    /// Nothing is stopped or destroyed within this long of its start, flagged instances
    /// aside: a rental pays its boot whatever it does after.
    pub min_rental_mins: u64,
    /// Learn how demand moves with the hour of the day from the samples, and let the rules
    /// rent ahead of a rise it shows and hold capacity it says is needed again soon
    /// (`fleet::day`); false: the rules react alone.
    pub learn_day: bool,
    /// A bid is rented only where its $/proof beats the best on-demand offer's by this share.
    pub bid_discount_min: f64,
    /// On-demand instances kept as a base under a bid fleet (never outbid).
    pub on_demand_min: u32,
    /// What an operator stopped by hand (`instances stop`) is not put back by the rules or
    /// the floor for this long, unless the operator resumes or asks through `message`.
    pub operator_hold_mins: u64,
}

/// `[price]`: what a proof earns. Revenue per proof = the ask price (Curio's
/// `proofshare_meta.pprice`, else `proof_price_fil`) x FIL/USD (at most one of `fil_usd`,
/// `fil_usd_command`, `fil_usd_url`). Missing or older than `max_age_mins`: unknown, never 0.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PriceConfig {
    /// FIL per proof when Curio's ask price is unreadable or unset (`'0'`).
    pub proof_price_fil: Option<f64>,
    /// A static FIL/USD rate.
    pub fil_usd: Option<f64>,
    /// Run with `sh -c`; prints `{"fil_usd": x}`.
    pub fil_usd_command: Option<String>,
    /// GET; answers `{"fil_usd": x}`.
    pub fil_usd_url: Option<String>,
    /// A fetched FIL/USD older than this is unknown.
    pub max_age_mins: u64,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct DebounceConfig {
    pub p0_secs: u64,
    pub p1_secs: u64,
    pub p2_secs: u64,
    pub max_wait_secs: u64,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// node_exporter textfile written after each run (atomic rename).
    pub textfile: Option<PathBuf>,
}

/// `[ha]`: several management hosts, one acting (docs/ha.md). Off by default: nothing needs
/// PostgreSQL and nothing changes.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct HaConfig {
    /// true: the state that decides safety lives in the shared database (credential
    /// `ha_db_url`), and only the lease's holder acts.
    pub enabled: bool,
    /// This host's name in the lease; default the first 12 characters of /etc/machine-id,
    /// else the hostname.
    pub host_id: Option<String>,
    /// How long a lease lasts without renewal, in the database's time.
    pub lease_ttl_secs: u64,
    /// A fenced step (a shared write, a mutating vast.ai request) needs this much lease left.
    pub fence_margin_secs: u64,
}

impl Default for HaConfig {
    fn default() -> Self {
        HaConfig {
            enabled: false,
            host_id: None,
            lease_ttl_secs: 150,
            fence_margin_secs: 75,
        }
    }
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            deadline_secs: 600,
            max_passes: 5,
            timer_period_secs: 300,
            retention_days: 0,
        }
    }
}

impl Default for LlmConfig {
    fn default() -> Self {
        LlmConfig {
            provider: Provider::Openai,
            base_url: "https://api.openai.com/v1".into(),
            model: "gpt-4.1-mini".into(),
            timeout_secs: 60,
            retry_budget_secs: 90,
            context_budget_tokens: 30_000,
            encoding: None,
            max_tool_rounds: 4,
            quiet_interval_mins: 30,
            max_output_tokens: 1024,
            fallback: Fallback::Rules,
        }
    }
}

impl Default for VastConfig {
    fn default() -> Self {
        VastConfig {
            base_url: "https://console.vast.ai".into(),
            image: None,
            disk_gb: 40.0,
            onstart: None,
            env: BTreeMap::new(),
            label_prefix: "fleetagent".into(),
            stop_mode: StopMode::Destroy,
            stopped_max_hours: 24.0,
            timeout_secs: 20,
            offers: OffersConfig::default(),
        }
    }
}

impl Default for OffersConfig {
    fn default() -> Self {
        OffersConfig {
            offer_type: OfferType::OnDemand,
            gpu_names: Vec::new(),
            min_reliability: 0.98,
            max_dph_per_instance: None,
            min_gpu_ram_gb: None,
            verified_only: true,
            bid_factor: 1.2,
            bad_host_hours: 24.0,
        }
    }
}

impl Default for DemandConfig {
    fn default() -> Self {
        DemandConfig {
            source: DemandSource::Harmonydb,
            harmonydb_url: None,
            http_url: None,
            command: None,
            task: "PSProve".into(),
            worker_alive_secs: 150,
            timeout_secs: 10,
            waiting_max_age_mins: 60,
        }
    }
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            target_proofs_per_hour: 0.0,
            proofs_per_hour_per_instance: 20.0,
            gpu_rates: BTreeMap::new(),
            max_dph_total: None,
            max_instances: None,
            daily_spend_max: None,
            launch_window_minutes: 15,
            launch_window_max: 3,
            emergency_launch_max: 6,
            stuck_loading_mins: 30,
            floor_after_mins: 20,
            floor_flagged_passes: 2,
            floor_idle_mins: 120,
            silent_worker_mins: 20,
            min_margin: 0.2,
            min_rental_mins: 30,
            learn_day: true,
            bid_discount_min: 0.25,
            on_demand_min: 0,
            operator_hold_mins: 30,
            dry_run: false,
        }
    }
}

impl Default for PriceConfig {
    fn default() -> Self {
        PriceConfig {
            proof_price_fil: None,
            fil_usd: None,
            fil_usd_command: None,
            fil_usd_url: None,
            max_age_mins: 60,
        }
    }
}

impl Default for DebounceConfig {
    fn default() -> Self {
        DebounceConfig {
            p0_secs: 2,
            p1_secs: 10,
            p2_secs: 30,
            max_wait_secs: 60,
        }
    }
}

#[allow(clippy::derivable_impls)]
impl Default for Config {
    fn default() -> Self {
        Config {
            state_dir: None,
            run: RunConfig::default(),
            llm: LlmConfig::default(),
            vast: VastConfig::default(),
            demand: DemandConfig::default(),
            policy: PolicyConfig::default(),
            price: PriceConfig::default(),
            debounce: DebounceConfig::default(),
            metrics: MetricsConfig::default(),
            ha: HaConfig::default(),
        }
    }
}

impl PolicyConfig {
    /// The operator's rate for this GPU in `gpu_rates` (names compared ignoring case and
    /// vast.ai's `_` for a space), if pinned.
    pub fn pinned_rate(&self, gpu_name: &str) -> Option<f64> {
        let gpu = gpu_name.replace('_', " ");
        self.gpu_rates
            .iter()
            .find(|(k, _)| k.replace('_', " ").eq_ignore_ascii_case(gpu.trim()))
            .map(|(_, v)| *v)
    }

    /// Proofs per hour of one instance with this GPU as configured: pinned, else the default.
    pub fn rate_for(&self, gpu_name: &str) -> f64 {
        self.pinned_rate(gpu_name)
            .unwrap_or(self.proofs_per_hour_per_instance)
    }

    /// The keys that must be set before any launch, unset ones first in DESIGN order.
    pub fn missing_launch_keys(&self, vast: &VastConfig) -> Vec<&'static str> {
        let mut missing = Vec::new();
        if vast.image.as_deref().is_none_or(|s| s.trim().is_empty()) {
            missing.push("vast.image");
        }
        if self.max_dph_total.is_none() {
            missing.push("policy.max_dph_total");
        }
        if self.max_instances.is_none() {
            missing.push("policy.max_instances");
        }
        missing
    }
}

impl DebounceConfig {
    /// The quiet window for the highest waiting priority (0 is the most urgent).
    pub fn window_secs(&self, priority: u8) -> u64 {
        match priority {
            0 => self.p0_secs,
            1 => self.p1_secs,
            _ => self.p2_secs,
        }
    }
}
