//! Building the real outside services from the config and the secrets: the vast.ai client
//! (only when a key exists) and the demand probe of `[demand]`. A service that cannot be
//! built is `None`; the observation and the tools then say `not_configured` and why. The LLM
//! client is left to the caller.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;

use crate::clock::Clock;
use crate::config::{Config, DemandSource};
use crate::demand::{CommandProbe, DemandProbe, HarmonyDbProbe, HttpProbe};
use crate::env::Env;
use crate::llm::LlmClient;
use crate::secrets::{self, Kind};
use crate::vast::http::HttpVastClient;
use crate::vast::VastClient;

/// The outside services a pass may use; `None` when not configured (no key, no source).
#[derive(Default, Clone)]
pub struct Services {
    pub vast: Option<Arc<dyn VastClient>>,
    pub demand: Option<Arc<dyn DemandProbe>>,
    pub llm: Option<Arc<dyn LlmClient>>,
    /// FIL/USD from `price.fil_usd_command` / `fil_usd_url` (None: static or unset).
    pub fil_usd: Option<Arc<dyn crate::fil_usd::FilUsdSource>>,
    /// Every secret this process could read, redacted from what the demand probe and the
    /// FIL/USD source say before anything quotes it (`secrets::known_values`).
    pub secrets: Arc<Vec<String>>,
}

/// What every driver runs against: the config, the environment, the clock and the outside
/// services. The run, the model's loop and each tool call carry one (`RunEnv`, `LoopEnv`
/// and `ToolCtx` dereference to it), so `env.config` reads the same everywhere.
#[derive(Clone, Copy)]
pub struct Ctx<'a> {
    pub config: &'a Config,
    pub env: &'a Env,
    pub clock: &'a dyn Clock,
    pub services: &'a Services,
}

/// `impl Deref<Target = Ctx>` for a struct with a `ctx: Ctx` field.
#[macro_export]
macro_rules! deref_ctx {
    ($t:ident) => {
        impl<'a> std::ops::Deref for $t<'a> {
            type Target = $crate::services::Ctx<'a>;
            fn deref(&self) -> &Self::Target {
                &self.ctx
            }
        }
    };
}

/// The services a pass (or `poll`, or `instances`) uses. `with_llm` is for the caller that
/// fills `llm`; this function never builds an LLM client. An `Err` is a credential file that
/// exists but cannot be read.
pub fn build_services(
    config: &Config,
    env: &Env,
    clock: Arc<dyn Clock>,
    with_llm: bool,
) -> Result<Services> {
    Ok(Services {
        vast: build_vast(config, env, Arc::clone(&clock))?,
        demand: build_demand(config, env)?,
        llm: if with_llm {
            build_llm(config, env, clock)?
        } else {
            None
        },
        fil_usd: build_fil_usd(config),
        secrets: Arc::new(probe_secrets(config, env)),
    })
}

/// What is redacted from what the demand probe, the FIL/USD source and vast.ai say: every secret the
/// process can read (the worker env's credentials included), and the query values of the
/// `http` probe's URL (a token may travel there; its errors show them as `***` already, but
/// a body may echo one, decoded).
fn probe_secrets(config: &Config, env: &Env) -> Vec<String> {
    let mut out = known_secrets(config, env);
    if let Some(url) = &config.demand.http_url {
        out.extend(secrets::redact::query_values(url));
    }
    out
}

/// Every secret the process can read (the worker env's credentials included), without the
/// demand URL's query values: what the vast.ai client cuts from what the hosts say (a plain
/// `?cluster=mainnet` cut from every log hid which cluster a worker joined: the re-test).
fn known_secrets(config: &Config, env: &Env) -> Vec<String> {
    secrets::known_values(
        env,
        config.vast.env.values().filter_map(|v| match v {
            crate::config::EnvValue::Credential(c) => Some(c.credential.as_str()),
            crate::config::EnvValue::Literal(_) => None,
        }),
    )
}

/// The FIL/USD source of `price.fil_usd_command` or `price.fil_usd_url` (at most one is set:
/// the config is validated), or None (a static `price.fil_usd`, or no price at all).
pub fn build_fil_usd(config: &Config) -> Option<Arc<dyn crate::fil_usd::FilUsdSource>> {
    use crate::fil_usd::{CommandSource, UrlSource, FETCH_TIMEOUT};
    let p = &config.price;
    if let Some(c) = &p.fil_usd_command {
        return Some(Arc::new(CommandSource::new(c.clone(), FETCH_TIMEOUT)));
    }
    p.fil_usd_url.as_ref().map(|u| {
        Arc::new(UrlSource::new(u.clone(), FETCH_TIMEOUT)) as Arc<dyn crate::fil_usd::FilUsdSource>
    })
}

/// The LLM client for `provider = "openai"` (None for the rules). Built even without a key:
/// its first call then fails with a clear "no LLM API key", which the pass records and hands
/// to the fallback.
pub fn build_llm(
    config: &Config,
    env: &Env,
    clock: Arc<dyn Clock>,
) -> Result<Option<Arc<dyn crate::llm::LlmClient>>> {
    if config.llm.provider != crate::config::Provider::Openai {
        return Ok(None);
    }
    let key = secrets::lookup(env, Kind::LlmApiKey)?;
    Ok(Some(Arc::new(crate::llm::http::HttpLlmClient::new(
        &config.llm.base_url,
        key.map(|k| k.expose().to_string()),
        clock,
        Duration::from_secs(config.llm.timeout_secs),
        Duration::from_secs(config.llm.retry_budget_secs),
    ))))
}

/// The vast.ai client, or None without a key (`VAST_API_KEY` or the `vast_api_key`
/// credential). It redacts every secret the process can read ([`probe_secrets`]) from what
/// vast.ai and the hosts say (logs, status messages, errors echoing a create's `env`).
pub fn build_vast(
    config: &Config,
    env: &Env,
    clock: Arc<dyn Clock>,
) -> Result<Option<Arc<dyn VastClient>>> {
    let Some(key) = secrets::lookup(env, Kind::VastApiKey)? else {
        return Ok(None);
    };
    let client = HttpVastClient::new(
        &config.vast.base_url,
        Some(key.expose().to_string()),
        clock,
        vast_timeout(config),
    )
    .with_secrets(known_secrets(config, env));
    Ok(Some(Arc::new(client)))
}

/// One vast.ai exchange, body included (`vast.timeout_secs`).
pub fn vast_timeout(config: &Config) -> Duration {
    Duration::from_secs(config.vast.timeout_secs)
}

/// The longest one vast.ai call may keep an operator waiting: a request with its retries
/// (`vast::http::call_budget_of`; the operator's commands list, stop and destroy, never
/// create).
pub fn vast_call_bound(config: &Config) -> Duration {
    crate::vast::http::call_budget_of(vast_timeout(config), false)
}

/// The probe of `demand.source`, or None when its address is missing. The HarmonyDB URL
/// comes from `FLEETAGENT_HARMONYDB_URL` / the `harmonydb_url` credential (it may hold the
/// password), else from `demand.harmonydb_url` (which never does).
pub fn build_demand(config: &Config, env: &Env) -> Result<Option<Arc<dyn DemandProbe>>> {
    let d = &config.demand;
    let timeout = Duration::from_secs(d.timeout_secs);
    let probe: Option<Arc<dyn DemandProbe>> = match d.source {
        DemandSource::Harmonydb => {
            let url = match secrets::lookup(env, Kind::HarmonyDbUrl)? {
                Some(s) => Some(s.expose().to_string()),
                None => d.harmonydb_url.clone(),
            };
            url.map(|u| {
                Arc::new(HarmonyDbProbe::new(
                    u,
                    d.task.clone(),
                    d.worker_alive_secs,
                    d.waiting_max_age_mins,
                    timeout,
                )) as Arc<dyn DemandProbe>
            })
        }
        DemandSource::Http => d
            .http_url
            .clone()
            .map(|u| Arc::new(HttpProbe::new(u, timeout)) as Arc<dyn DemandProbe>),
        DemandSource::Command => d
            .command
            .clone()
            .map(|c| Arc::new(CommandProbe::new(c, timeout)) as Arc<dyn DemandProbe>),
    };
    Ok(probe)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    #[test]
    fn nothing_without_keys_or_addresses() {
        let c = Config::default();
        let s = build_services(&c, &Env::default(), Arc::new(ManualClock::new(0)), false).unwrap();
        assert!(s.vast.is_none() && s.demand.is_none() && s.llm.is_none());
        assert!(s.fil_usd.is_none());
    }

    #[test]
    fn a_fil_usd_source_only_for_a_command_or_url() {
        let mut c = Config::default();
        c.price.fil_usd = Some(3.0);
        assert!(build_fil_usd(&c).is_none());
        c.price.fil_usd = None;
        c.price.fil_usd_command = Some("echo '{\"fil_usd\": 2}'".into());
        assert_eq!(build_fil_usd(&c).unwrap().fil_usd().unwrap(), 2.0);
        c.price.fil_usd_command = None;
        c.price.fil_usd_url = Some("http://127.0.0.1:9/p".into());
        assert!(build_fil_usd(&c).is_some());
    }

    #[test]
    fn key_and_url_from_env() {
        let mut c = Config::default();
        c.demand.source = DemandSource::Http;
        c.demand.http_url = Some("http://127.0.0.1:9/demand".into());
        let env = Env::from_pairs([("VAST_API_KEY".to_string(), "k".to_string())]);
        let s = build_services(&c, &env, Arc::new(ManualClock::new(0)), false).unwrap();
        assert!(s.vast.is_some() && s.demand.is_some());
        let env = Env::from_pairs([(
            "FLEETAGENT_HARMONYDB_URL".to_string(),
            "postgresql://u:p@127.0.0.1:9/db".to_string(),
        )]);
        let s = build_services(
            &Config::default(),
            &env,
            Arc::new(ManualClock::new(0)),
            false,
        )
        .unwrap();
        assert!(s.demand.is_some() && s.vast.is_none());
    }
}
