//! The configuration: one TOML file parsed and validated once into [`Config`].
//!
//! Every key of DESIGN.md is here with its default. Unknown keys, wrong types and values out
//! of range are errors naming the key and its line. Secrets never come from this file
//! (see `secrets.rs`); a HarmonyDB URL with a password in it is refused.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::UsageError;

/// Where the config comes from when neither `--config` nor `$FLEETAGENT_CONFIG` names one.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/fleetagent/config.toml";

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub state_dir: Option<PathBuf>,
    pub run: RunConfig,
    pub llm: LlmConfig,
    pub vast: VastConfig,
    pub demand: DemandConfig,
    pub policy: PolicyConfig,
    pub debounce: DebounceConfig,
    pub metrics: MetricsConfig,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RunConfig {
    /// The whole process, all passes included.
    pub deadline_secs: u64,
    pub max_passes: u32,
    /// The systemd timer's period: a failed pass defers its events by this much.
    pub timer_period_secs: u64,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    Openai,
    Rules,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Fallback {
    Rules,
    None,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
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
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum StopMode {
    Destroy,
    Stop,
}

/// A worker environment value: a literal, or the name of a credential to read at launch.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(
    untagged,
    expecting = "must be a string, or { credential = \"NAME\" } and nothing else"
)]
pub enum EnvValue {
    Literal(String),
    Credential(CredentialRef),
}

/// `{ credential = "NAME" }`: a file under `$CREDENTIALS_DIRECTORY`.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct CredentialRef {
    pub credential: String,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
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
    pub offers: OffersConfig,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
pub enum OfferType {
    #[serde(rename = "on-demand")]
    OnDemand,
    #[serde(rename = "interruptible")]
    Interruptible,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
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
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum DemandSource {
    Harmonydb,
    Http,
    Command,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
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
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
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
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct DebounceConfig {
    pub p0_secs: u64,
    pub p1_secs: u64,
    pub p2_secs: u64,
    pub max_wait_secs: u64,
}

#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// node_exporter textfile written after each run (atomic rename).
    pub textfile: Option<PathBuf>,
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            deadline_secs: 600,
            max_passes: 5,
            timer_period_secs: 300,
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
            dry_run: false,
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
            debounce: DebounceConfig::default(),
            metrics: MetricsConfig::default(),
        }
    }
}

impl PolicyConfig {
    /// Proofs per hour of one instance with this GPU.
    pub fn rate_for(&self, gpu_name: &str) -> f64 {
        self.gpu_rates
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(gpu_name))
            .map(|(_, v)| *v)
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

/// Where the config was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigOrigin {
    /// `--config` or `$FLEETAGENT_CONFIG`: the file must exist.
    Explicit,
    /// The default path; a missing file means every default.
    Default,
}

#[derive(Debug, Clone)]
pub struct LoadedConfig {
    pub config: Config,
    pub path: PathBuf,
    /// False when the default path did not exist and every default applies.
    pub file_found: bool,
}

/// Pick the config path: `--config`, else `$FLEETAGENT_CONFIG`, else the default.
pub fn resolve_path(flag: Option<&Path>, env_value: Option<&str>) -> (PathBuf, ConfigOrigin) {
    if let Some(p) = flag {
        return (p.to_path_buf(), ConfigOrigin::Explicit);
    }
    if let Some(v) = env_value.filter(|v| !v.is_empty()) {
        return (PathBuf::from(v), ConfigOrigin::Explicit);
    }
    (PathBuf::from(DEFAULT_CONFIG_PATH), ConfigOrigin::Default)
}

/// Read, parse and validate the config. Errors are [`UsageError`]s (exit 2) naming the file,
/// the line and the key.
pub fn load(path: &Path, origin: ConfigOrigin) -> Result<LoadedConfig, UsageError> {
    use std::os::unix::fs::PermissionsExt;
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && origin == ConfigOrigin::Default => {
            return Ok(LoadedConfig {
                config: Config::default(),
                path: path.to_path_buf(),
                file_found: false,
            });
        }
        Err(e) => {
            return Err(UsageError(format!(
                "cannot read config {}: {e}",
                path.display()
            )))
        }
    };
    if meta.permissions().mode() & 0o002 != 0 {
        return Err(UsageError(format!(
            "config {} is world-writable (mode {:o}); refusing it: run chmod o-w {}",
            path.display(),
            meta.permissions().mode() & 0o7777,
            path.display()
        )));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| UsageError(format!("cannot read config {}: {e}", path.display())))?;
    let config = parse(&text).map_err(|e| UsageError(format!("config {}: {e}", path.display())))?;
    Ok(LoadedConfig {
        config,
        path: path.to_path_buf(),
        file_found: true,
    })
}

/// Parse and validate config text. The error is one line: `line N (key): what is wrong`.
pub fn parse(text: &str) -> Result<Config, String> {
    let config: Config = toml::from_str(text).map_err(|e| toml_error(text, &e))?;
    validate(&config).map_err(|(key, msg, other)| {
        let at = key_line(text, key)
            .map(|line| (line, key))
            .or_else(|| other.and_then(|o| key_line(text, o).map(|line| (line, o))));
        match at {
            Some((line, k)) => format!("line {line} ({k}): {msg}"),
            None => format!("{key}: {msg}"),
        }
    })?;
    Ok(config)
}

/// A TOML parse or schema error as one line naming the line and the dotted key (also used
/// for `sim` scenario files).
pub(crate) fn toml_error(text: &str, e: &toml::de::Error) -> String {
    let msg = one_line(e.message());
    match e.span() {
        Some(span) => {
            let line = line_of(text, span.start);
            match key_at(text, span.start) {
                Some(key) => format!("line {line} ({key}): {msg}"),
                // A duplicate key or table makes the document unparseable for `key_at`;
                // the span then covers the repeated name itself. (Only for duplicates: other
                // syntax errors may point into a value, which is never echoed.)
                None if msg.contains("duplicate") => match text.get(span.clone()).map(str::trim) {
                    Some(name) if !name.is_empty() && name.len() <= 80 && !name.contains('\n') => {
                        format!("line {line}: {msg} {name:?}")
                    }
                    _ => format!("line {line}: {msg}"),
                },
                None => format!("line {line}: {msg}"),
            }
        }
        None => msg,
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// The dotted key whose key or value covers `offset`.
fn key_at(text: &str, offset: usize) -> Option<String> {
    let doc = toml_edit::Document::parse(text.to_owned()).ok()?;
    let mut best: Option<(usize, String)> = None;
    walk(doc.as_table(), "", &mut |path, key_span, item_span| {
        let covers = |s: &Option<std::ops::Range<usize>>| {
            s.as_ref()
                .is_some_and(|r| r.start <= offset && offset <= r.end)
        };
        if covers(&key_span) || covers(&item_span) {
            let width = item_span.map(|r| r.end - r.start).unwrap_or(usize::MAX);
            if best.as_ref().is_none_or(|(w, _)| width <= *w) {
                best = Some((width, path.to_string()));
            }
        }
    });
    best.map(|(_, p)| p)
}

/// The line of a dotted key, if the text sets it.
pub(crate) fn key_line(text: &str, dotted: &str) -> Option<usize> {
    let Ok(doc) = toml_edit::Document::parse(text.to_owned()) else {
        // toml_edit refuses some text that serde's parser took (an integer past i64);
        // find `key =` under its `[table]` line by line.
        let (table, key) = dotted.rsplit_once('.').unwrap_or(("", dotted));
        let mut current = String::new();
        for (i, line) in text.lines().enumerate() {
            let t = line.trim();
            if let Some(header) = t.strip_prefix('[') {
                current = header
                    .trim_matches(|c| c == '[' || c == ']' || c == ' ')
                    .to_string();
            } else if current == table
                && t.strip_prefix(key)
                    .is_some_and(|rest| rest.trim_start().starts_with('='))
            {
                return Some(i + 1);
            }
        }
        return None;
    };
    let mut found = None;
    walk(doc.as_table(), "", &mut |path, key_span, _| {
        if path == dotted && found.is_none() {
            found = key_span.map(|r| line_of(text, r.start));
        }
    });
    found
}

type SpanVisitor<'a> =
    dyn FnMut(&str, Option<std::ops::Range<usize>>, Option<std::ops::Range<usize>>) + 'a;

fn walk(table: &toml_edit::Table, prefix: &str, f: &mut SpanVisitor<'_>) {
    for (key, item) in table.iter() {
        let path = if prefix.is_empty() {
            key.to_string()
        } else {
            format!("{prefix}.{key}")
        };
        let key_span = table.key(key).and_then(|k| k.span());
        f(&path, key_span, item.span());
        match item {
            toml_edit::Item::Table(t) => walk(t, &path, f),
            toml_edit::Item::Value(toml_edit::Value::InlineTable(t)) => {
                for (k, v) in t.iter() {
                    let p = format!("{path}.{k}");
                    f(&p, t.key(k).and_then(|x| x.span()), v.span());
                }
            }
            _ => {}
        }
    }
}

/// (the key blamed, what is wrong, another key the rule relates it to): the error names the
/// blamed key's line, else the other key's when only that one is in the file.
type Invalid = (&'static str, String, Option<&'static str>);

const DAY_SECS: u64 = 86_400;
const WEEK_MINS: u64 = 7 * 24 * 60;

fn validate(c: &Config) -> Result<(), Invalid> {
    // Every integer has an upper bound too: the code turns them into milliseconds and
    // instants, and an absurd value must be an error here, not an overflow later.
    fn within(key: &'static str, v: u64, min: u64, max: u64) -> Result<(), Invalid> {
        if v < min || v > max {
            return Err((
                key,
                format!("must be between {min} and {max}, got {v}"),
                None,
            ));
        }
        Ok(())
    }
    fn non_negative(key: &'static str, v: f64) -> Result<(), Invalid> {
        if !v.is_finite() || v < 0.0 {
            return Err((key, format!("must be a number >= 0, got {v}"), None));
        }
        Ok(())
    }
    fn positive(key: &'static str, v: f64) -> Result<(), Invalid> {
        if !v.is_finite() || v <= 0.0 {
            return Err((key, format!("must be a number > 0, got {v}"), None));
        }
        Ok(())
    }
    fn url(key: &'static str, v: &str) -> Result<(), Invalid> {
        if !(v.starts_with("http://") || v.starts_with("https://")) {
            return Err((
                key,
                format!("must be an http:// or https:// URL, got {v:?}"),
                None,
            ));
        }
        Ok(())
    }

    if let Some(dir) = &c.state_dir {
        if !dir.is_absolute() {
            return Err((
                "state_dir",
                format!("must be an absolute path, got {dir:?}"),
                None,
            ));
        }
    }
    within("run.deadline_secs", c.run.deadline_secs, 10, DAY_SECS)?;
    within("run.max_passes", c.run.max_passes.into(), 1, 100)?;
    within(
        "run.timer_period_secs",
        c.run.timer_period_secs,
        10,
        DAY_SECS,
    )?;

    url("llm.base_url", &c.llm.base_url)?;
    if !c.llm.base_url.trim_end_matches('/').ends_with("/v1") {
        return Err((
            "llm.base_url",
            format!(
                "must end in /v1 (an OpenAI-compatible root such as https://api.openai.com/v1), got {:?}",
                c.llm.base_url
            ),
            None,
        ));
    }
    if c.llm.model.trim().is_empty() {
        return Err(("llm.model", "must not be empty".into(), None));
    }
    within("llm.timeout_secs", c.llm.timeout_secs, 1, 3_600)?;
    within("llm.retry_budget_secs", c.llm.retry_budget_secs, 1, 3_600)?;
    within(
        "llm.quiet_interval_mins",
        c.llm.quiet_interval_mins,
        0,
        WEEK_MINS,
    )?;
    within(
        "llm.context_budget_tokens",
        c.llm.context_budget_tokens,
        2_000,
        2_000_000,
    )?;
    if let Some(enc) = &c.llm.encoding {
        if enc != "o200k_base" && enc != "cl100k_base" {
            return Err((
                "llm.encoding",
                format!("must be \"o200k_base\" or \"cl100k_base\", got {enc:?}"),
                None,
            ));
        }
    }
    if !(1..=20).contains(&c.llm.max_tool_rounds) {
        return Err((
            "llm.max_tool_rounds",
            format!("must be between 1 and 20, got {}", c.llm.max_tool_rounds),
            None,
        ));
    }

    url("vast.base_url", &c.vast.base_url)?;
    if let Some(image) = &c.vast.image {
        if image.trim().is_empty() {
            return Err((
                "vast.image",
                "must not be empty (leave it out instead)".into(),
                None,
            ));
        }
    }
    positive("vast.disk_gb", c.vast.disk_gb)?;
    let prefix = &c.vast.label_prefix;
    if prefix.is_empty()
        || prefix.len() > 40
        || !prefix
            .chars()
            .all(|ch| ch.is_ascii_alphanumeric() || ch == '-' || ch == '_')
    {
        return Err((
            "vast.label_prefix",
            format!("must be 1-40 characters of a-z, 0-9, - or _, got {prefix:?}"),
            None,
        ));
    }
    for (name, value) in &c.vast.env {
        let valid_name = name
            .chars()
            .next()
            .is_some_and(|ch| ch.is_ascii_alphabetic() || ch == '_')
            && name
                .chars()
                .all(|ch| ch.is_ascii_alphanumeric() || ch == '_');
        if !valid_name {
            return Err((
                "vast.env",
                format!(
                    "bad variable name {name:?} (letters, digits and _, not starting with a digit)"
                ),
                None,
            ));
        }
        if name == crate::tools::launch::LABEL_ENV {
            return Err((
                "vast.env",
                format!("{name} is set by fleetagent to each instance's label; leave it out"),
                None,
            ));
        }
        if let EnvValue::Credential(CredentialRef { credential }) = value {
            if credential.is_empty() || credential.contains('/') {
                return Err((
                    "vast.env",
                    format!("{name}: bad credential name {credential:?}"),
                    None,
                ));
            }
        }
    }
    let offers = &c.vast.offers;
    if !(0.0..=1.0).contains(&offers.min_reliability) {
        return Err((
            "vast.offers.min_reliability",
            format!("must be between 0 and 1, got {}", offers.min_reliability),
            None,
        ));
    }
    if let Some(v) = offers.max_dph_per_instance {
        positive("vast.offers.max_dph_per_instance", v)?;
    }
    if let Some(v) = offers.min_gpu_ram_gb {
        non_negative("vast.offers.min_gpu_ram_gb", v)?;
    }

    if let Some(u) = &c.demand.harmonydb_url {
        if pg_has_password(u) {
            return Err((
                "demand.harmonydb_url",
                "holds a password; secrets never go in the config: put the URL in \
                 FLEETAGENT_HARMONYDB_URL or the harmonydb_url credential"
                    .into(),
                None,
            ));
        }
    }
    if let Some(u) = &c.demand.http_url {
        url("demand.http_url", u)?;
        if url_has_password(u) {
            return Err((
                "demand.http_url",
                "holds a password; secrets never go in the config".into(),
                None,
            ));
        }
    }
    match c.demand.source {
        DemandSource::Http if c.demand.http_url.is_none() => {
            return Err((
                "demand.http_url",
                "demand.http_url must be set when demand.source = \"http\"".into(),
                Some("demand.source"),
            ));
        }
        DemandSource::Command
            if c.demand
                .command
                .as_deref()
                .is_none_or(|s| s.trim().is_empty()) =>
        {
            return Err((
                "demand.command",
                "demand.command must be set when demand.source = \"command\"".into(),
                Some("demand.source"),
            ));
        }
        _ => {}
    }
    if c.demand.task.trim().is_empty() {
        return Err(("demand.task", "must not be empty".into(), None));
    }
    within(
        "demand.worker_alive_secs",
        c.demand.worker_alive_secs,
        30,
        DAY_SECS,
    )?;
    within("demand.timeout_secs", c.demand.timeout_secs, 1, 3_600)?;

    let p = &c.policy;
    non_negative("policy.target_proofs_per_hour", p.target_proofs_per_hour)?;
    positive(
        "policy.proofs_per_hour_per_instance",
        p.proofs_per_hour_per_instance,
    )?;
    for (gpu, rate) in &p.gpu_rates {
        if !rate.is_finite() || *rate <= 0.0 {
            return Err((
                "policy.gpu_rates",
                format!("{gpu}: must be a number > 0, got {rate}"),
                None,
            ));
        }
    }
    if let Some(v) = p.max_dph_total {
        non_negative("policy.max_dph_total", v)?;
    }
    if let Some(v) = p.daily_spend_max {
        non_negative("policy.daily_spend_max", v)?;
    }
    within(
        "policy.launch_window_minutes",
        p.launch_window_minutes,
        1,
        DAY_SECS / 60,
    )?;
    within(
        "policy.launch_window_max",
        p.launch_window_max.into(),
        0,
        1_000,
    )?;
    within(
        "policy.emergency_launch_max",
        p.emergency_launch_max.into(),
        0,
        1_000,
    )?;
    if let Some(n) = p.max_instances {
        within("policy.max_instances", n.into(), 0, 10_000)?;
    }
    if p.emergency_launch_max < p.launch_window_max {
        return Err((
            "policy.emergency_launch_max",
            format!(
                "policy.emergency_launch_max ({}) must be at least policy.launch_window_max ({})",
                p.emergency_launch_max, p.launch_window_max
            ),
            Some("policy.launch_window_max"),
        ));
    }
    within(
        "policy.stuck_loading_mins",
        p.stuck_loading_mins,
        1,
        WEEK_MINS,
    )?;

    let d = &c.debounce;
    for (key, v) in [
        ("debounce.p0_secs", d.p0_secs),
        ("debounce.p1_secs", d.p1_secs),
        ("debounce.p2_secs", d.p2_secs),
    ] {
        if v > d.max_wait_secs {
            return Err((
                key,
                format!(
                    "{key} ({v}) must not exceed debounce.max_wait_secs ({})",
                    d.max_wait_secs
                ),
                Some("debounce.max_wait_secs"),
            ));
        }
    }
    if d.max_wait_secs >= c.run.deadline_secs {
        return Err((
            "debounce.max_wait_secs",
            format!(
                "debounce.max_wait_secs ({}) must be below run.deadline_secs ({})",
                d.max_wait_secs, c.run.deadline_secs
            ),
            Some("run.deadline_secs"),
        ));
    }
    if let Some(path) = &c.metrics.textfile {
        if !path.is_absolute() {
            return Err((
                "metrics.textfile",
                format!("must be an absolute path, got {path:?}"),
                None,
            ));
        }
    }
    Ok(())
}

/// A PostgreSQL URL or key=value string that carries a password, as the `postgres` crate
/// reads it (`user:pw@`, `?password=`, `password = x` with any spacing), or as a plain
/// look at the text when the crate cannot parse it.
fn pg_has_password(u: &str) -> bool {
    match u.parse::<postgres::Config>() {
        Ok(cfg) => cfg.get_password().is_some(),
        Err(_) => url_has_password(u) || !crate::secrets::redact::secrets_of(u).is_empty(),
    }
}

/// `scheme://user:password@host` has a password.
fn url_has_password(u: &str) -> bool {
    let Some(rest) = u.split_once("://").map(|(_, r)| r) else {
        return u.contains("password=");
    };
    let authority = rest.split(['/', '?']).next().unwrap_or("");
    let has_userinfo_password = authority
        .rsplit_once('@')
        .is_some_and(|(userinfo, _)| userinfo.contains(':'));
    has_userinfo_password || u.contains("password=")
}

/// The commented config `init` writes where none exists.
pub const TEMPLATE: &str = include_str!("../docs/config.example.toml");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_text_is_all_defaults() {
        assert_eq!(parse("").unwrap(), Config::default());
    }

    #[test]
    fn template_parses() {
        parse(TEMPLATE).unwrap();
    }

    #[test]
    fn unknown_key_names_key_and_line() {
        let err = parse("[run]\nmax_passes = 3\nbogus = 1\n").unwrap_err();
        assert!(err.contains("line 3"), "{err}");
        assert!(err.contains("bogus"), "{err}");
    }

    #[test]
    fn wrong_type_names_key_and_line() {
        let err = parse("\n[llm]\ntimeout_secs = \"soon\"\n").unwrap_err();
        assert!(err.contains("line 3"), "{err}");
        assert!(err.contains("llm.timeout_secs"), "{err}");
    }

    #[test]
    fn range_error_names_key_and_line() {
        let err = parse("[debounce]\np0_secs = 100\n").unwrap_err();
        assert!(err.contains("line 2 (debounce.p0_secs)"), "{err}");
    }

    #[test]
    fn bad_enum_value() {
        let err = parse("[vast]\nstop_mode = \"pause\"\n").unwrap_err();
        assert!(err.contains("line 2"), "{err}");
        assert!(err.contains("vast.stop_mode"), "{err}");
    }

    #[test]
    fn credential_env_values() {
        let c = parse(
            "[vast.env]\nA = \"x\"\nCURIO_DB_PASSWORD = { credential = \"curio_db_password\" }\n",
        )
        .unwrap();
        assert_eq!(
            c.vast.env["CURIO_DB_PASSWORD"],
            EnvValue::Credential(CredentialRef {
                credential: "curio_db_password".into()
            })
        );
        assert_eq!(c.vast.env["A"], EnvValue::Literal("x".into()));
    }

    #[test]
    fn password_in_harmonydb_url_refused() {
        let err = parse("[demand]\nharmonydb_url = \"postgres://u:secret@h:5433/yugabyte\"\n")
            .unwrap_err();
        assert!(err.contains("demand.harmonydb_url"), "{err}");
        assert!(!err.contains("secret@"), "{err}");
        parse("[demand]\nharmonydb_url = \"postgres://u@h:5433/yugabyte\"\n").unwrap();
    }

    #[test]
    fn password_in_any_spelling_refused() {
        for url in [
            "host=127.0.0.1 user=probe password = SECRETX",
            "host=127.0.0.1 user=probe password\t=SECRETX",
            "postgres://u@h/db?password=SECRETX",
        ] {
            let text = format!("[demand]\nharmonydb_url = {url:?}\n");
            let err = parse(&text).unwrap_err();
            assert!(err.contains("holds a password"), "{url}: {err}");
            assert!(!err.contains("SECRETX"), "{err}");
        }
        let err = parse("[demand]\nsource = \"http\"\nhttp_url = \"http://u:SECRETX@h/d\"\n")
            .unwrap_err();
        assert!(
            err.contains("demand.http_url") && !err.contains("SECRETX"),
            "{err}"
        );
        parse("[demand]\nharmonydb_url = \"host=h user=probe dbname=yugabyte\"\n").unwrap();
    }

    #[test]
    fn absurd_integers_are_errors_not_overflows() {
        for (text, key) in [
            (
                "[run]\ntimer_period_secs = 9223372036854775807\n",
                "run.timer_period_secs",
            ),
            (
                "[run]\ndeadline_secs = 18446744073709551615\n",
                "run.deadline_secs",
            ),
            (
                "[policy]\nlaunch_window_minutes = 9223372036854775807\n",
                "policy.launch_window_minutes",
            ),
            (
                "[demand]\ntimeout_secs = 18446744073709551615\n",
                "demand.timeout_secs",
            ),
            (
                "[llm]\ncontext_budget_tokens = 18446744073709551615\n",
                "llm.context_budget_tokens",
            ),
        ] {
            let err = parse(text).unwrap_err();
            assert!(
                err.contains(&format!("line 2 ({key}): must be between")),
                "{err}"
            );
        }
    }

    #[test]
    fn a_rule_between_two_keys_names_the_one_in_the_file() {
        let err = parse("[run]\ndeadline_secs = 30\n").unwrap_err();
        assert!(err.starts_with("line 2 (run.deadline_secs): "), "{err}");
        assert!(err.contains("debounce.max_wait_secs (60)"), "{err}");
        let err = parse("\n\n[policy]\nlaunch_window_max = 10\n").unwrap_err();
        assert!(
            err.starts_with("line 4 (policy.launch_window_max): "),
            "{err}"
        );
    }

    #[test]
    fn duplicate_key_is_named() {
        let err = parse("[run]\nmax_passes = 3\nmax_passes = 4\n").unwrap_err();
        assert!(
            err.contains("line 3") && err.contains("\"max_passes\""),
            "{err}"
        );
    }

    #[test]
    fn worker_env_is_checked() {
        let err = parse("[vast.env]\nA = { credential = \"x\", extra = 1 }\n").unwrap_err();
        assert!(err.contains("line 2 (vast.env.A)"), "{err}");
        assert!(err.contains("credential"), "{err}");
        assert!(parse("[vast.env]\nA = 5\n")
            .unwrap_err()
            .contains("must be a string"));
        assert!(parse("[vast.env]\n\"A B\" = \"x\"\n").is_err());
        assert!(parse("[vast.env]\n1A = \"x\"\n").is_err());
        let err = parse("[vast.env]\nFLEETAGENT_LABEL = \"x\"\n").unwrap_err();
        assert!(err.contains("set by fleetagent"), "{err}");
    }

    #[test]
    fn a_demand_source_needs_its_address() {
        let err = parse("[demand]\nsource = \"http\"\n").unwrap_err();
        assert!(err.contains("demand.http_url must be set"), "{err}");
        let err = parse("[demand]\nsource = \"command\"\ncommand = \" \"\n").unwrap_err();
        assert!(err.contains("demand.command must be set"), "{err}");
    }

    #[test]
    fn base_url_must_end_in_v1() {
        assert!(parse("[llm]\nbase_url = \"http://127.0.0.1:9/\"\n").is_err());
        parse("[llm]\nbase_url = \"http://127.0.0.1:9/v1\"\n").unwrap();
    }

    #[test]
    fn rates_fall_back() {
        let c = parse(
            "[policy]\nproofs_per_hour_per_instance = 10\n[policy.gpu_rates]\n\"RTX 4090\" = 40\n",
        )
        .unwrap();
        assert_eq!(c.policy.rate_for("rtx 4090"), 40.0);
        assert_eq!(c.policy.rate_for("RTX 3090"), 10.0);
    }

    #[test]
    fn launch_keys_reported() {
        let c = Config::default();
        assert_eq!(
            c.policy.missing_launch_keys(&c.vast),
            vec!["vast.image", "policy.max_dph_total", "policy.max_instances"]
        );
    }
}
