//! `init`: create the state dir (setgid 2770) and the database, and write a commented config
//! (0640, its missing parent dirs 0755) where none exists yet.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};

use anyhow::{Context, Result};

use crate::cmd::App;
use crate::config::{self, TEMPLATE};
use crate::store::{OpenMode, Store};

pub fn run(app: &App, args: &crate::cli::InitArgs) -> Result<()> {
    let env_value = app.env.get("FLEETAGENT_CONFIG");
    let (path, _origin) = config::resolve_path(app.config_flag.as_deref(), env_value.as_deref());
    if !path.exists() {
        // Missing parents 0755 whatever the umask: a world-writable dir above the config
        // would let anyone replace it.
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            crate::paths::create_dirs(parent, 0o755)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o640)
            .open(&path)
            .with_context(|| format!("cannot write config {}", path.display()))?;
        f.set_permissions(std::fs::Permissions::from_mode(0o640))?;
        f.write_all(TEMPLATE.as_bytes())?;
        crate::outln!("wrote a commented config to {}", path.display());
    } else {
        crate::outln!("config {} exists; left as is", path.display());
    }
    let loaded = app.load_config()?;
    let dir = app.state_dir(Some(&loaded.config))?;
    crate::paths::ensure_state_dir(&dir)?;
    let existed = crate::store::database_exists(&dir)?;
    if !existed && args.install_id.is_none() {
        // A plain init would mint a new id, and the old instances would be another install's.
        if let Some(lost) = crate::store::lost_database(&dir) {
            anyhow::bail!(
                "{lost}; or, for a new install whose old instances are all gone, delete {} first",
                dir.join(crate::paths::LOCK_FILE).display()
            );
        }
    }
    let store = Store::open(&dir, OpenMode::Create, app.now())?;
    crate::store::sim_config::refuse(&store.conn, &store.path)?;
    // "ready" only for a database a run can write: an existing one opens read-only when it
    // is immutable (a re-test saw "ready", then every run fail). Nothing is written.
    store
        .conn
        .execute("UPDATE agent_state SET id = id WHERE 0", [])
        .context("the database cannot be written")?;
    if let Some(id) = &args.install_id {
        install_id(&store, id, existed)?;
    }
    // The database file whole, its WAL empty (as a `run` leaves it): a file copied over
    // `fleetagent.db` alone would otherwise have init's WAL replayed over it (a walkthrough
    // moving an install to a host README's Install had prepared lost the moved install id and
    // rented a second fleet).
    store.checkpoint();
    crate::outln!(
        "database {} ready (schema {}, install id {})",
        store.path.display(),
        crate::store::SCHEMA_VERSION,
        crate::store::ops::install_id(&store.conn)?
    );
    // An existing dir keeps its mode (init never chmods what it did not create): said.
    if let Some(mode) = crate::paths::open_to_everyone(&dir) {
        crate::outln!(
            "state dir {} is mode {mode:o}, open to every user, not the designed 2770: run chmod 2770 {}",
            dir.display(),
            dir.display()
        );
    }
    let missing = loaded
        .config
        .policy
        .missing_launch_keys(&loaded.config.vast);
    if !missing.is_empty() {
        crate::outln!(
            "no launch is possible until you set: {}",
            missing.join(", ")
        );
    }
    Ok(())
}

/// `--install-id`: a new database takes it; an existing one must already have it (an install's
/// id never changes under its instances).
fn install_id(store: &Store, id: &str, existed: bool) -> Result<()> {
    let current = crate::store::ops::install_id(&store.conn)?;
    if current == id {
        return Ok(());
    }
    if existed {
        return Err(crate::error::usage(format!(
            "--install-id {id}: the database {} already has install id {current}, and an install's id never changes (its instances' labels carry it); the option is for a new database",
            store.path.display()
        )));
    }
    crate::store::ops::set_install_id(&store.conn, id)
}
