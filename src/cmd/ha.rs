//! `ha status [--json]` and `ha release` (`crate::ha`, docs/ha.md).

use anyhow::{Context, Result};

use crate::cli::HaCommand;
use crate::cmd::App;
use crate::ha::node::Settings;

pub fn run(app: &App, command: &HaCommand) -> Result<()> {
    let loaded = app.load_config()?;
    let settings = Settings::of(&loaded.config, &app.env)?;
    // A status query with [ha] off answers it (`--json` is `inspect --json`'s `ha`: null);
    // only `release` needs several hosts.
    if let (None, HaCommand::Status(a)) = (&settings, command) {
        match a.json {
            true => crate::outln!("null"),
            false => crate::outln!(
                "several hosts are off in {}: this host acts alone ([ha] enabled = true turns them on, docs/ha.md)",
                loaded.path.display()
            ),
        }
        return Ok(());
    }
    let settings = settings.with_context(|| {
        format!(
            "several hosts are not enabled in {}: set [ha] enabled = true (docs/ha.md)",
            loaded.path.display()
        )
    })?;
    match command {
        HaCommand::Status(a) => status(&settings, a.json),
        HaCommand::Release(_) => {
            release(&settings)?;
            if let Ok(dir) = app.state_dir(Some(&loaded.config)) {
                crate::metrics::after_role_change(&loaded.config, &app.env, &dir, app.now());
            }
            Ok(())
        }
    }
}

fn status(settings: &Settings, json: bool) -> Result<()> {
    let s = crate::ha::status::read(settings);
    if json {
        crate::outln!("{}", serde_json::to_string_pretty(&s)?);
    } else {
        crate::outln!("this host: {} ({})", s.host_id, s.role);
        match (&s.holder, s.epoch, s.lease_left_secs) {
            (Some(h), Some(e), Some(left)) if left > 0.0 => {
                crate::outln!("leader: {h} (epoch {e}, lease {left:.0}s left)")
            }
            (Some(h), Some(e), Some(left)) => crate::outln!(
                "leader: none: {h}'s lease (epoch {e}) expired {:.0}s ago; the next host to poll takes it",
                -left
            ),
            _ if s.error.is_some() => {
                crate::outln!("leader: unknown (the shared database cannot be read)")
            }
            _ => crate::outln!("leader: none yet (no host has run)"),
        }
        for h in &s.hosts {
            crate::outln!(
                "host {}: last seen {}, version {}, config {}{}",
                h.host_id,
                h.last_seen,
                h.version,
                h.config_hash,
                h.place
                    .as_deref()
                    .map(|p| format!(", at {p}"))
                    .unwrap_or_default()
            );
            if let Some((twin, ago)) = h
                .twin
                .as_ref()
                .filter(|(_, ago)| *ago < crate::ha::hosts::TWIN_WINDOW_SECS)
            {
                crate::outln!(
                    "  also at {twin} ({ago:.0}s ago): two hosts under one id, so neither acts; give each its own ha.host_id"
                );
            }
        }
    }
    if !s.cannot_write.is_empty() {
        anyhow::bail!(
            "this host's database role cannot write the shared tables ({}): every run here fails; use a role that owns the schema fleetagent (docs/ha.md)",
            s.cannot_write.join(", ")
        );
    }
    match s.error {
        Some(e) => anyhow::bail!(e),
        None => Ok(()),
    }
}

fn release(settings: &Settings) -> Result<()> {
    match crate::ha::status::release(settings)? {
        Some(epoch) => {
            log::info!(target: "fleetagent::notice", "ha: {} released the lease (epoch {epoch})", settings.host);
            crate::outln!(
                "released the lease (epoch {epoch}); another host takes it at its next poll, and this one leaves it to them for {}s (lease_ttl_secs)",
                settings.ttl.as_secs()
            );
            Ok(())
        }
        None => anyhow::bail!(
            "this host ({}) does not hold the lease: nothing to release (see `fleetagent ha status`)",
            settings.host
        ),
    }
}
