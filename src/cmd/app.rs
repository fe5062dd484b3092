//! What every command handler gets: the global flags, the environment snapshot and the clock.
//! Loading the config and resolving the state dir happen here, once, on demand.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Result;

use crate::clock::Clock;
use crate::config::{self, LoadedConfig};
use crate::env::Env;

pub struct App {
    pub config_flag: Option<PathBuf>,
    pub state_dir_flag: Option<PathBuf>,
    pub env: Env,
    pub clock: Arc<dyn Clock>,
}

impl App {
    /// Load and validate the config (a [`crate::error::UsageError`] on failure: exit 2).
    pub fn load_config(&self) -> Result<LoadedConfig> {
        let (path, origin) = self.config_path();
        Ok(config::load(&path, origin)?)
    }

    /// Where the config is: `--config`, else `$FLEETAGENT_CONFIG`, else the default.
    pub(crate) fn config_path(&self) -> (PathBuf, config::ConfigOrigin) {
        let env_value = self.env.get("FLEETAGENT_CONFIG");
        config::resolve_path(self.config_flag.as_deref(), env_value.as_deref())
    }

    /// The config for the hand-brake (`pause`, `instances stop`): a key the config's checks
    /// refuse is left out, its default applied, and each one said at warning, so that a typo
    /// never keeps an operator from stopping the fleet (`config::load_for_brake`).
    pub fn load_config_for_brake(&self) -> Result<LoadedConfig> {
        let (path, origin) = self.config_path();
        let (loaded, left_out) = config::load_for_brake(&path, origin)?;
        Self::warn_left_out(&path, &left_out);
        Ok(loaded)
    }

    /// The config as [`App::load_config_for_brake`] reads it, and the refusals it left out
    /// (for the caller to say): for `trigger` and `message`, which record their event whatever
    /// the config says and then fail as a config error does (a drill saw a typo in an
    /// unrelated key drop every event other programs rang, with exit 2, which they do not
    /// retry).
    pub fn load_config_keeping_events(&self) -> Result<(LoadedConfig, Vec<String>)> {
        let (path, origin) = self.config_path();
        let (loaded, left_out) = config::load_for_brake(&path, origin)?;
        let refused = left_out
            .iter()
            .map(|e| format!("config {}: {e}", path.display()))
            .collect();
        Ok((loaded, refused))
    }

    fn warn_left_out(path: &std::path::Path, left_out: &[impl std::fmt::Display]) {
        for e in left_out {
            crate::journal::eprint(
                crate::journal::WARNING,
                &format!(
                    "fleetagent: config {}: {e}; left out for this command (its default applies): fix it, every run refuses this config",
                    path.display()
                ),
            );
        }
    }

    /// The state dir for this config (see `paths::resolve_state_dir`).
    pub fn state_dir(&self, config: Option<&config::Config>) -> Result<PathBuf> {
        let from_config = config.and_then(|c| c.state_dir.as_deref());
        crate::paths::resolve_state_dir(
            self.state_dir_flag.as_deref(),
            from_config,
            &|k| self.env.get(k),
            nix::unistd::geteuid().is_root(),
        )
    }

    /// The state dir a config that fails its checks still names (`state_dir`, read with the
    /// refused keys left out): where an early exit deletes the doorbell (DESIGN.md, "Early
    /// exits"). None when the file cannot be read that way; `Some(None)` when it reads and
    /// names none (the flag or `$STATE_DIRECTORY` is then certain, not a guess).
    pub fn state_dir_of_refused_config(&self) -> Option<Option<PathBuf>> {
        let (path, origin) = self.config_path();
        let (loaded, _) = config::load_for_brake(&path, origin).ok()?;
        if loaded.config.state_dir.is_none() {
            return Some(None);
        }
        Some(self.state_dir(Some(&loaded.config)).ok())
    }

    /// The state dir when the config cannot be read: the flag, or `$STATE_DIRECTORY` when
    /// there is no config file at all (an unreadable one may name a `state_dir`, which comes
    /// before `$STATE_DIRECTORY`: the re-test saw an event go to another install's dir).
    pub fn state_dir_without_readable_config(&self) -> Option<PathBuf> {
        if let Some(p) = &self.state_dir_flag {
            return Some(p.clone());
        }
        let (path, _) = self.config_path();
        match std::fs::symlink_metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => self.state_dir_without_config(),
            _ => None,
        }
    }

    /// The state dir as far as it is known without a config: the flag or `$STATE_DIRECTORY`.
    pub fn state_dir_without_config(&self) -> Option<PathBuf> {
        if let Some(p) = &self.state_dir_flag {
            return Some(p.clone());
        }
        self.env
            .get("STATE_DIRECTORY")
            .filter(|v| !v.is_empty())
            .map(|v| PathBuf::from(v.split(':').next().unwrap_or(&v)))
    }

    pub fn now(&self) -> crate::clock::Millis {
        self.clock.now_ms()
    }
}
