//! This host in the shared database: its settings (`[ha]` and the `ha_db_url` credential),
//! the start of a `run` or `poll` (record this host, forward its outbox, acquire or join the
//! lease), the leader's link the store pushes through ([`Link`], `store::Shared`), and the
//! keeper that renews the lease while the process lasts and ends the process when the lease
//! is lost.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::db::SharedDb;
use super::mirror::{self, Held, Synced};
use super::{hosts, lease, schema, Role};
use crate::clock::{rfc3339, Clock, Millis, SystemClock};
use crate::config::Config;
use crate::env::Env;
use crate::secrets::{self, Kind, Secret};
use crate::store::{session, Store};

/// How long one connect or statement may take.
const DB_TIMEOUT: Duration = Duration::from_secs(10);

/// `[ha]` resolved: who this host is, and where the shared database is.
#[derive(Debug, Clone)]
pub struct Settings {
    pub host: String,
    pub ttl: Duration,
    pub margin: Duration,
    /// `vast.timeout_secs`: one vast.ai request after a fence ([`Held::act`]).
    pub act: Duration,
    pub url: Secret,
    pub config_hash: String,
    /// [`config_keys`]: which keys differ when two hosts' hashes do.
    pub config_keys: String,
}

impl Settings {
    /// None while `[ha] enabled = false`; an error when it is on and the URL is missing.
    pub fn of(config: &Config, env: &Env) -> Result<Option<Settings>> {
        if !config.ha.enabled {
            return Ok(None);
        }
        let url = secrets::lookup(env, Kind::HaDbUrl)?.with_context(|| {
            format!(
                "[ha] enabled = true needs the shared database's URL: {}",
                Kind::HaDbUrl.hint()
            )
        })?;
        Ok(Some(Settings {
            host: config.ha.host_id.clone().unwrap_or_else(default_host_id),
            ttl: Duration::from_secs(config.ha.lease_ttl_secs),
            margin: Duration::from_secs(config.ha.fence_margin_secs),
            act: Duration::from_secs(config.vast.timeout_secs),
            url,
            config_hash: config_hash(config),
            config_keys: config_keys(config),
        }))
    }

    /// A lease last renewed `since` ago has less than the margin left: its holder stops.
    fn lease_low(&self, since: Duration) -> bool {
        since + self.margin >= self.ttl
    }

    pub fn connect(&self) -> Result<SharedDb> {
        SharedDb::connect(self.url.expose(), DB_TIMEOUT, Arc::new(SystemClock))
    }

    /// How often the keeper renews: 20 s at the default 150 s lease (one missed renewal
    /// still leaves most of the lease).
    pub fn renew_every(&self) -> Duration {
        self.ttl.mul_f64(2.0 / 15.0).max(Duration::from_millis(200))
    }
}

/// The first 12 characters of /etc/machine-id, else the hostname, else `localhost`.
pub fn default_host_id() -> String {
    if let Ok(id) = std::fs::read_to_string("/etc/machine-id") {
        let id = id.trim();
        if id.len() >= 12 {
            return id[..12].to_string();
        }
    }
    hostname()
}

/// This machine's hostname, else `localhost`.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// What decides, of the config: all but this host's own id, state dir and metrics file, and
/// what may hold a secret: a worker env's literal values (its names and credential names
/// stay) and the start script. A hash of a config otherwise known would give a short secret
/// away to anyone who reads the shared database (the second re-test: a six-digit PIN in
/// 10^6 tries); hosts that differ only there are not told apart.
fn shared_part(config: &Config) -> Config {
    let mut c = config.clone();
    c.ha.host_id = None;
    c.state_dir = None;
    c.metrics = Default::default();
    c.vast.onstart = None;
    for v in c.vast.env.values_mut() {
        if let crate::config::EnvValue::Literal(s) = v {
            s.clear();
        }
    }
    c
}

/// FNV-1a, 64 bits.
fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A hash of what decides ([`shared_part`]). Two hosts whose hashes differ would change the
/// caps at a failover (`doctor` says so).
pub fn config_hash(config: &Config) -> String {
    // Over the Debug rendering, which is deterministic for these types.
    format!("{:016x}", fnv(&format!("{:?}", shared_part(config))))
}

/// What decides ([`shared_part`]) as a JSON object of each dotted key and a short hash of its
/// value (never the value), so that `doctor` can name the keys two hosts' configs differ in
/// (it said only that the hashes differed). What may hold a secret is left out as
/// [`shared_part`] leaves it out of the whole hash: a short value's hash would give it away
/// to anyone who reads the shared database (the re-test recovered a six-digit PIN from
/// `[vast.env]` in two seconds); the env's names and credential names are compared.
pub fn config_keys(config: &Config) -> String {
    fn walk(
        prefix: &str,
        v: &serde_json::Value,
        out: &mut serde_json::Map<String, serde_json::Value>,
    ) {
        match v {
            serde_json::Value::Object(m) if !m.is_empty() => {
                for (k, v) in m {
                    let key = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    walk(&key, v, out);
                }
            }
            leaf => {
                let hash = fnv(&leaf.to_string()) as u32;
                out.insert(prefix.to_string(), format!("{hash:08x}").into());
            }
        }
    }
    let mut out = serde_json::Map::new();
    if let Ok(v) = serde_json::to_value(shared_part(config)) {
        walk("", &v, &mut out);
    }
    // Left out of the whole hash: no key of its own either.
    out.remove("vast.onstart");
    serde_json::Value::Object(out).to_string()
}

/// The dotted keys whose values differ among these hosts' [`config_keys`] (a key one host
/// has and another lacks differs too); hosts without keys (an older build) are left out.
pub fn keys_that_differ<'a>(each: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let maps: Vec<serde_json::Map<String, serde_json::Value>> = each
        .into_iter()
        .filter_map(|t| serde_json::from_str(t).ok())
        .collect();
    let all: std::collections::BTreeSet<&String> = maps.iter().flat_map(|m| m.keys()).collect();
    all.into_iter()
        .filter(|k| maps.windows(2).any(|w| w[0].get(*k) != w[1].get(*k)))
        .cloned()
        .collect()
}

impl Start {
    /// The line of a host that does not lead, None on the leader.
    pub fn not_leading(&self, host: &str) -> Option<String> {
        match self {
            Start::Leader { .. } => None,
            Start::Follower {
                holder,
                epoch,
                lease_left,
                forwarded,
            } => Some(format!(
                "follower: {holder} leads (epoch {epoch}, lease {}s left); this host ({host}) forwarded {forwarded} event(s) and does nothing else",
                lease_left.as_secs()
            )),
            Start::Released {
                epoch,
                hold_left,
                forwarded,
            } => Some(format!(
                "follower: this host ({host}) released the lease (epoch {epoch}) and leaves it to another host for {}s more; it forwarded {forwarded} event(s) and does nothing else",
                hold_left.as_secs()
            )),
        }
    }
}

/// What the start found.
#[derive(Debug)]
pub enum Start {
    /// We hold the lease: the store pushes through the link from now on.
    Leader {
        epoch: i64,
        synced: Synced,
        forwarded: usize,
    },
    /// This host released the lease (`ha release`) and leaves it to another host a while.
    Released {
        epoch: i64,
        hold_left: Duration,
        forwarded: usize,
    },
    /// Another host holds a live lease.
    Follower {
        holder: String,
        epoch: i64,
        lease_left: Duration,
        forwarded: usize,
    },
}

/// The start of a `run` (or a leader's `poll`): this host recorded, its outbox forwarded, the
/// lease acquired or joined. As the leader, the copy is made current, the capture installed,
/// a fresh session started when the lease came from another host, the keeper started and the
/// store linked. As a follower, nothing else.
/// `keeper`: None for no keeper (`poll`), `Some("")` for a pass, `Some(what)` for an
/// operator's command (its exit line says the command was cut short).
pub fn start(
    settings: &Settings,
    store: &mut Store,
    now: Millis,
    keeper: Option<&str>,
) -> Result<Start> {
    // `now` and the monotonic time since: this host's clock when the row is written.
    let given = Instant::now();
    let host_now = || now + i64::try_from(given.elapsed().as_millis()).unwrap_or(0);
    let mut db = settings.connect()?;
    schema::migrate(&mut db)?;
    let dir = store.path.parent().unwrap_or(std::path::Path::new("."));
    let place = hosts::place_of(dir);
    let twin = hosts::record(
        &mut db,
        &settings.host,
        // With the commit: hosts on two builds of one version are told apart.
        concat!(env!("CARGO_PKG_VERSION"), "+", env!("FLEETAGENT_COMMIT")),
        (&settings.config_hash, &settings.config_keys),
        &place,
        Some(&host_now),
    )?;
    if let Some(t) = twin {
        bail!(
            "ha: host id {} is also used by another host ({}, {:.0}s ago; this one is {place}): two hosts under one id would both lead and launch, so neither acts; give each host its own ha.host_id (docs/ha.md). If this host took that one's place (a moved state dir, a renamed host), it acts {:.0}s after the other's last contact",
            settings.host,
            t.place,
            t.secs_ago,
            (hosts::TWIN_WINDOW_SECS - t.secs_ago).max(0.0)
        );
    }
    let forwarded = mirror::forward_outbox(&store.conn, &mut db, &settings.host, now)?;
    let epoch = match lease::acquire_or_join(&mut db, &settings.host, settings.ttl)? {
        Role::Follower {
            holder,
            epoch,
            lease_left,
        } => {
            return Ok(Start::Follower {
                holder,
                epoch,
                lease_left,
                forwarded,
            })
        }
        Role::Released { epoch, hold_left } => {
            return Ok(Start::Released {
                epoch,
                hold_left,
                forwarded,
            })
        }
        Role::Leader { epoch, .. } => epoch,
    };
    let held = Held {
        host: settings.host.clone(),
        epoch,
        margin: settings.margin,
        act: settings.act,
    };
    if let Err(e) = mirror::refuse_foreign_state(&store.conn, &mut db) {
        // Another host may lead meanwhile: this one would only hold the lease and fail.
        if let Err(r) = lease::release(&mut db, &settings.host, epoch) {
            log::warn!(
                "ha: the lease could not be released: {}",
                crate::error::one_line(&r)
            );
        }
        return Err(e);
    }
    let synced = mirror::sync_in(&mut store.conn, &mut db, &held, now)?;
    let later = super::hosts::all_share_later_tables(&mut db)?;
    if !later {
        let n = mirror::withdraw_new_tables(&mut db, &held.host, held.epoch)?;
        if n > 0 {
            log::warn!(
                "ha: a host on an older build runs: the measured rates and the day's hours ({n} row(s)) are kept on each host until every host runs this build"
            );
        }
    } else if !matches!(synced, Synced::Initialized { .. }) {
        mirror::seed_new_tables(&store.conn, &mut db)?;
    }
    mirror::capture(&store.conn, later)?;
    if let Synced::Pulled {
        holder, epoch: was, ..
    } = &synced
    {
        if *holder != settings.host {
            let reason = format!(
                "leadership moved from {holder} (epoch {was}) to {} (epoch {epoch}) at {}",
                settings.host,
                rfc3339(now)
            );
            session::start_new(&store.conn, &reason, now)?;
            log::info!(target: "fleetagent::notice", "ha: {reason}; a fresh session starts here");
        }
    }
    if let Some(what) = keeper {
        spawn_keeper(settings.clone(), epoch, cut_short(what))?;
    }
    store.shared = Some(Box::new(Link {
        db,
        held,
        confirmed: None,
    }));
    Ok(Start::Leader {
        epoch,
        synced,
        forwarded,
    })
}

/// The leader's link to the shared database, through which the store pushes.
pub struct Link {
    db: SharedDb,
    held: Held,
    /// When the last fence that confirmed the lease was asked (this host's monotonic clock).
    confirmed: Option<Instant>,
}

impl crate::store::Shared for Link {
    fn push(&mut self, conn: &rusqlite::Connection, step: &str) -> Result<()> {
        self.confirmed = Some(mirror::push(conn, &mut self.db, &self.held, step)?);
        Ok(())
    }

    fn stale(&self, step: &str) -> Option<String> {
        let asked = self.confirmed?;
        self.held
            .stale(asked, step)
            .map(|e| crate::error::one_line(&e))
    }

    fn take_inbox(&mut self, conn: &rusqlite::Connection, now: Millis) -> Result<usize> {
        mirror::forward_outbox(conn, &mut self.db, &self.held.host, now)?;
        mirror::take_inbox(conn, &mut self.db)
    }

    fn inbox_waiting(&mut self, conn: &rusqlite::Connection) -> Result<usize> {
        mirror::inbox_waiting(conn, &mut self.db)
    }
}

/// Renews the lease every [`Settings::renew_every`] on its own connection. When the lease
/// is gone (another host holds it) or cannot be renewed before it would expire, the process
/// ends (exit 1): a holder that cannot renew stops acting. Its pass is recovered as any
/// interrupted pass is.
fn spawn_keeper(settings: Settings, epoch: i64, tail: String) -> Result<()> {
    // When the last renewal that went through was asked: the lease runs from then at the
    // latest, not from when its answer came.
    let renewed = Arc::new(std::sync::Mutex::new(Instant::now()));
    // Ends the process (as `keeper_exit`), saying what an operator's command left undone.
    let exit = move |text: &str| keeper_exit(&format!("{text}{tail}"));
    watch_renewals(&settings, epoch, Arc::clone(&renewed), exit.clone())
        .context("cannot start the lease keeper's watch")?;
    std::thread::Builder::new()
        .name("ha-keeper".into())
        .spawn(move || {
            let clock = SystemClock;
            let renewed_at = || *renewed.lock().unwrap_or_else(|e| e.into_inner());
            // Its own connection, made here (off the pass's path), again after a failure.
            let mut db: Option<SharedDb> = None;
            loop {
                clock.sleep(settings.renew_every());
                let asked = Instant::now();
                let renewal = db.take().map_or_else(|| settings.connect(), Ok).and_then(|mut c| {
                    let r = lease::renew(&mut c, &settings.host, epoch, settings.ttl);
                    db = Some(c);
                    r
                });
                match renewal {
                    Ok(Some(_)) => *renewed.lock().unwrap_or_else(|e| e.into_inner()) = asked,
                    Ok(None) => exit(&format!(
                        "ha: the lease (epoch {epoch}) is no longer this host's; exiting"
                    )),
                    Err(e) => {
                        let since = renewed_at().elapsed();
                        if settings.lease_low(since) {
                            let left = settings.ttl.saturating_sub(since);
                            exit(&format!(
                                "ha: cannot renew the lease (epoch {epoch}) and it has {}s left, below ha.fence_margin_secs: exiting: {e}",
                                left.as_secs()
                            ));
                        }
                        log::warn!("ha: renewing the lease failed, trying again: {e}");
                        db = None;
                    }
                }
            }
        })
        .context("cannot start the lease keeper")?;
    Ok(())
}

/// The keeper's renewal may hang (an answer lost past a hop that terminates TCP): a second
/// thread ends the process once the last renewal asked that went through leaves less than
/// `ha.fence_margin_secs` of the lease, whether or not the renewal under way ever answers.
fn watch_renewals(
    settings: &Settings,
    epoch: i64,
    renewed: Arc<std::sync::Mutex<Instant>>,
    exit: impl Fn(&str) + Send + 'static,
) -> std::io::Result<()> {
    let settings = settings.clone();
    std::thread::Builder::new()
        .name("ha-keeper-watch".into())
        .spawn(move || loop {
            SystemClock.sleep(Duration::from_secs(1));
            let since = renewed.lock().unwrap_or_else(|e| e.into_inner()).elapsed();
            if settings.lease_low(since) {
                exit(&format!(
                    "ha: the lease (epoch {epoch}) was last renewed by a request asked {}s ago and has under ha.fence_margin_secs ({}s) left: exiting",
                    since.as_secs(),
                    settings.margin.as_secs()
                ));
            }
        })
        .map(|_| ())
}

/// What an operator's command cut short by the keeper says after why (the panic button's
/// last line said only that the lease was lost, not that instances may still bill: a
/// re-test).
fn cut_short(what: &str) -> String {
    if what.is_empty() {
        return String::new();
    }
    format!(
        "; {what} was cut short: what it did is recorded on this host (a stop that went through reaches the shared ledger from its mark, once a pass of the leader finds it done half an hour after it was typed), and `fleetagent instances list` shows what still bills; run it again once the shared database answers (or on the host that leads)"
    )
}

fn keeper_exit(text: &str) -> ! {
    let line = format!("fleetagent: {text}");
    crate::journal::eprint(crate::journal::ERR, &line);
    std::process::exit(crate::error::EXIT_RUNTIME);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two hosts' configs: the keys that differ are named, this host's own are not, and no
    /// value is kept (a hash of each).
    #[test]
    fn the_keys_two_configs_differ_in_are_named() {
        let a = Config::default();
        let mut b = a.clone();
        b.policy.max_instances = Some(19);
        b.ha.host_id = Some("host-b".into());
        b.vast.image = Some("registry.example/secret-looking:tag".into());
        b.vast.onstart = Some("echo 123456".into());
        let (ka, kb) = (config_keys(&a), config_keys(&b));
        assert!(
            !kb.contains("registry.example") && !kb.contains("onstart"),
            "{kb}"
        );
        assert_eq!(
            keys_that_differ([ka.as_str(), kb.as_str()]),
            ["policy.max_instances", "vast.image"]
        );
        assert!(keys_that_differ([ka.as_str(), ka.as_str()]).is_empty());
        // A worker env's literal value and the start script are in neither hash.
        let mut c = a.clone();
        c.vast.env.insert(
            "PIN".into(),
            crate::config::EnvValue::Literal("123456".into()),
        );
        let mut d = c.clone();
        d.vast.env.insert(
            "PIN".into(),
            crate::config::EnvValue::Literal("654321".into()),
        );
        d.vast.onstart = Some("echo 654321".into());
        assert_eq!(config_hash(&c), config_hash(&d));
        assert_eq!(config_keys(&c), config_keys(&d));
        assert_ne!(config_hash(&a), config_hash(&c), "a new env name differs");
        let (ka, kc) = (config_keys(&a), config_keys(&c));
        assert!(keys_that_differ([ka.as_str(), kc.as_str()]).contains(&"vast.env.PIN".to_string()));
        // An older build's host (no keys) is left out; a key one host lacks differs.
        assert!(keys_that_differ([ka.as_str(), "not json"]).is_empty());
        assert_eq!(
            keys_that_differ([r#"{"a":"1"}"#, r#"{"a":"1","b":"2"}"#]),
            ["b"]
        );
    }
}
