//! One short handler per subcommand, each a script over the concern modules.

mod app;
mod backup;
mod doctor;
mod ha;
mod history;
mod init;
mod inspect;
mod instances;
pub(crate) mod message;
mod pause;
mod plot_file;
pub(crate) mod poll;
pub(crate) mod reset_session;
mod run;
mod sim;
pub(crate) mod trigger;
mod units;
mod wakes;

pub use app::App;

use std::path::PathBuf;

use anyhow::Result;

use crate::cli::Command;
use crate::config::LoadedConfig;
use crate::store::{OpenMode, Store};

pub fn dispatch(app: &App, command: &Command) -> Result<()> {
    let result = match command {
        Command::Run(_) => run::run(app),
        Command::Trigger(a) => trigger::run(app, a),
        Command::Message(a) => message::run(app, a),
        Command::ResetSession(a) => reset_session::run(app, a),
        Command::Inspect(a) => inspect::run(app, a),
        Command::Doctor(a) => doctor::run(app, a),
        Command::Wakes(c) => wakes::run(app, c),
        Command::History(a) => history::run(app, a),
        Command::Init(a) => init::run(app, a),
        Command::Units(c) => units::run(app, c),
        Command::Instances(c) => instances::run(app, c),
        Command::Poll(_) => poll::run(app),
        Command::Sim(a) => sim::run(app, a),
        Command::Pause(a) => pause::pause(app, a),
        Command::Resume(_) => pause::resume(app),
        Command::Backup(a) => backup::run(app, a),
        Command::Ha(c) => ha::run(app, c),
    };
    match command {
        // Their files are elsewhere (the simulator's own dir, the unit files); `backup` names
        // the file system of each side itself.
        Command::Sim(_) | Command::Units(_) | Command::Backup(_) => result,
        _ => result.map_err(|e| name_storage_fault(app, e)),
    }
}

/// A full or read-only file system under the state dir, named with the dir and its free space
/// ([`crate::paths::name_storage_fault`]) rather than as SQLite's "disk I/O error"; a database
/// locked past the busy timeout named with its file ([`crate::store::locked_line`]) rather
/// than as "database is locked".
pub(crate) fn name_storage_fault(app: &App, err: anyhow::Error) -> anyhow::Error {
    let locked = crate::error::is_database_locked(&err);
    let damaged = crate::error::is_damaged_database(&err);
    if !locked && !damaged && crate::error::storage_fault(&err).is_none() {
        return err;
    }
    let dir = app
        .load_config()
        .ok()
        .and_then(|l| app.state_dir(Some(&l.config)).ok())
        .or_else(|| app.state_dir_without_config());
    match dir {
        Some(d) if locked => err.context(crate::store::locked_line(&d)),
        Some(d) if damaged => {
            // SQLite says "malformed" without the file: name it, once.
            let db = d.join(crate::store::DB_FILE);
            if crate::error::one_line(&err).contains(&db.display().to_string()) {
                err
            } else {
                err.context(format!("database {}", db.display()))
            }
        }
        Some(d) => crate::paths::name_storage_fault(err, &d),
        None => err,
    }
}

/// Config, state dir and an existing database, for the commands that must never create one
/// (a caller with the wrong user or dir must not write into a database nobody reads).
pub(crate) fn open_existing(app: &App) -> Result<(LoadedConfig, PathBuf, Store)> {
    open_existing_with(app, app.load_config()?)
}

/// Where `trigger` and `message` record their event: this host's outbox (`[ha] enabled`) or
/// the events, in the state dir's database, and the config's refusals, which
/// [`refused_after_recording`] turns into the command's error once the event is recorded.
pub(crate) struct EventPlace {
    pub place: crate::trigger::Recorded,
    pub dir: PathBuf,
    pub store: Store,
    pub refused: Vec<String>,
}

impl EventPlace {
    /// Record the event here and ring the doorbell: what it was recorded as, and what comes of
    /// it then (`trigger::recorded_as`).
    pub fn record(
        &self,
        priority: u8,
        kind: &str,
        reason: &str,
        body: Option<&str>,
        now: crate::clock::Millis,
    ) -> Result<(String, &'static str)> {
        let id = crate::trigger::record(
            &self.store,
            &self.dir,
            self.place,
            priority,
            kind,
            reason,
            body,
            now,
        )?;
        Ok(crate::trigger::recorded_as(self.place, id))
    }
}

/// [`open_existing`] for `trigger` and `message`: the config read with the keys its checks
/// refuse left out ([`App::load_config_keeping_events`]). A config that cannot be read at all
/// (missing, unsafe, a broken `[table]` header) still lets the event be recorded where the
/// state dir is known without it: other programs ring and do not retry a usage error (the
/// walkthrough saw a P0 event lost). That is `--state-dir`, or `$STATE_DIRECTORY` when
/// there is no config file (one that cannot be read may name another `state_dir`, which
/// comes before it). Whether `[ha]` is on is not known then: the event goes to the outbox,
/// which the next `run` forwards to the leader, or makes an event without `[ha]`.
pub(crate) fn open_for_event(app: &App) -> Result<EventPlace> {
    let (loaded, refused) = match app.load_config_keeping_events() {
        Ok(v) => v,
        Err(config_error) => {
            let Some(dir) = app.state_dir_without_readable_config() else {
                return Err(config_error);
            };
            let opened = crate::paths::check_state_dir(&dir)
                .and_then(|()| Store::open(&dir, OpenMode::Existing, app.now()));
            let Ok(store) = opened else {
                return Err(config_error);
            };
            let refused = vec![crate::error::one_line(&config_error)];
            return Ok(EventPlace {
                place: crate::trigger::Recorded::OutboxConfigUnread,
                dir,
                store,
                refused,
            });
        }
    };
    match open_existing_with(app, loaded) {
        Ok((loaded, dir, store)) => Ok(EventPlace {
            place: if loaded.config.ha.enabled {
                crate::trigger::Recorded::Outbox
            } else {
                crate::trigger::Recorded::Event
            },
            dir,
            store,
            refused,
        }),
        // Nowhere to record it: the config's error is the one said (exit 2), as before.
        Err(e) => match refused.first() {
            Some(first) => Err(crate::error::usage(first.clone())),
            None => Err(e),
        },
    }
}

/// The config error of a command that recorded its event all the same (exit 2, as any config
/// error): Ok when the config had none.
pub(crate) fn refused_after_recording(refused: &[String], recorded: &str) -> Result<()> {
    let Some(first) = refused.first() else {
        return Ok(());
    };
    let more = match refused.len() {
        1 => String::new(),
        n => format!(" (and {} more)", n - 1),
    };
    Err(crate::error::usage(format!(
        "{first}{more}; {recorded} all the same, but every run refuses this config: fix it"
    )))
}

fn open_existing_with(app: &App, loaded: LoadedConfig) -> Result<(LoadedConfig, PathBuf, Store)> {
    let dir = app.state_dir(Some(&loaded.config))?;
    crate::paths::check_state_dir(&dir)?;
    let store = Store::open(&dir, OpenMode::Existing, app.now())?;
    crate::store::sim_config::refuse(&store.conn, &store.path)?;
    Ok((loaded, dir, store))
}

/// [`open_existing`] for a command that writes the state several hosts share (`pause`,
/// `resume`, `wakes add|cancel`, `instances stop`, `reset-session`): with `[ha] enabled` this
/// host must hold the lease (or take it, when nobody holds it), and the command ends with
/// `store.fence(what)`; on a follower it fails naming the leader.
pub(crate) fn open_shared(app: &App, what: &str) -> Result<(LoadedConfig, PathBuf, Store)> {
    let (loaded, dir, mut store) = open_existing(app)?;
    lead(app, &loaded, &mut store, what)?;
    Ok((loaded, dir, store))
}

/// [`open_shared`] for the hand-brake (`pause`, `instances stop`): the config loaded by
/// [`App::load_config_for_brake`], which leaves out a key its checks refuse.
pub(crate) fn open_for_brake(app: &App, what: &str) -> Result<(LoadedConfig, PathBuf, Store)> {
    let (loaded, dir, mut store) = open_existing_with(app, app.load_config_for_brake()?)?;
    lead(app, &loaded, &mut store, what)?;
    Ok((loaded, dir, store))
}

/// With `[ha] enabled`: this host leads (the store linked to the shared database), or the
/// command fails naming the leader. The lease keeper runs while the command does, as in a
/// pass: without it the panic button's fence failed after a few slow destroys on a lease
/// the poll timer was not renewing (6 of 9 instances left billing, no host leading), and
/// with the database gone silent it waited for ever (a walkthrough on two hosts).
pub(crate) fn lead(app: &App, loaded: &LoadedConfig, store: &mut Store, what: &str) -> Result<()> {
    let Some(settings) = crate::ha::node::Settings::of(&loaded.config, &app.env)? else {
        return Ok(());
    };
    match crate::ha::node::start(&settings, store, app.now(), Some(what))? {
        crate::ha::node::Start::Leader { .. } => Ok(()),
        // When the leader is dead, neither "there" is possible: the lease's time left says
        // when this command works here (a walkthrough with the leader's host down).
        crate::ha::node::Start::Follower {
            holder,
            epoch,
            lease_left,
            ..
        } => anyhow::bail!(
            "{what} changes the state the hosts share, and this host ({}) is a follower: {holder} leads (epoch {epoch}); run it there, or `fleetagent ha release` there first; if {holder} is down, its lease lapses in {}s and this command then works here",
            settings.host,
            lease_left.as_secs().max(1)
        ),
        crate::ha::node::Start::Released { epoch, hold_left, .. } => anyhow::bail!(
            "{what} changes the state the hosts share, and this host ({}) released the lease (epoch {epoch}) for another host to take; run it on the host that leads next (`fleetagent ha status`), or here in {}s",
            settings.host,
            hold_left.as_secs()
        ),
    }
}

/// Config, state dir and an existing database for a command that only reads (`inspect`,
/// `history`, `instances list`, `wakes list`): opened read-only when the state dir is on a read-only file system.
pub(crate) fn open_for_report(app: &App) -> Result<(LoadedConfig, PathBuf, Store)> {
    let loaded = app.load_config()?;
    let dir = app.state_dir(Some(&loaded.config))?;
    let store = Store::open_for_report(&dir, app.now())?;
    Ok((loaded, dir, store))
}

/// [`open_for_report`] for `inspect` and `instances list`, the config read as the hand-brake
/// reads it: a key its checks refuse is left out (its default applies), so that a typo never
/// hides what bills (a walkthrough: every run refused the config while an instance billed,
/// and the commands that name it refused too). The caller shows its report, then fails with
/// [`refused_after_report`] (exit 2, as any config error).
///
/// Nothing to show (no database where the config leads, or one that cannot be read): the
/// config's own error, exit 2, as before (a re-test: a refused `llm.base_url` read as
/// "state dir ... No such file", exit 1).
pub(crate) fn open_for_report_despite_typos(app: &App) -> Result<(LoadedConfig, PathBuf, Store)> {
    let (path, origin) = app.config_path();
    let (loaded, _) = crate::config::load_for_brake(&path, origin)?;
    let opened = app
        .state_dir(Some(&loaded.config))
        .and_then(|dir| Ok((Store::open_for_report(&dir, app.now())?, dir)));
    match opened {
        Ok((store, dir)) => Ok((loaded, dir, store)),
        Err(e) if loaded.left_out.is_empty() => Err(e),
        Err(e) => Err(app.load_config().err().unwrap_or(e)),
    }
}

/// The config error of a report shown with keys left out ([`open_for_report_despite_typos`]):
/// exit 2 after it, as any config error; Ok when none was.
pub(crate) fn refused_after_report(loaded: &LoadedConfig) -> Result<()> {
    let Some(first) = loaded.left_out.first() else {
        return Ok(());
    };
    let more = match loaded.left_out.len() {
        1 => String::new(),
        n => format!(" (and {} more)", n - 1),
    };
    Err(crate::error::usage(format!(
        "config {}: {first}{more}; shown above with its default, but every run refuses this config (no pass decides meanwhile): fix it",
        loaded.path.display()
    )))
}

/// Config, state dir (created setgid 2770 when missing) and a database created if missing.
pub(crate) fn open_or_create(app: &App) -> Result<(LoadedConfig, PathBuf, Store)> {
    let loaded = app.load_config()?;
    let dir = app.state_dir(Some(&loaded.config))?;
    crate::paths::ensure_state_dir(&dir)?;
    crate::store::refuse_lost_database(&dir)?;
    let store = Store::open(&dir, OpenMode::Create, app.now())?;
    crate::store::sim_config::refuse(&store.conn, &store.path)?;
    Ok((loaded, dir, store))
}
