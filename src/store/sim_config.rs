//! The config a simulation ran with (`sql/0010_sim_config.sql`): `sim` writes it into the
//! database it leaves (`sim --state-dir`), and `inspect` judges a simulation's database by
//! it rather than by the host's config. An install's database has no row.

use anyhow::Result;
use rusqlite::{params, Connection, OptionalExtension};

use crate::clock::Millis;

/// What a simulation's database says of the run that wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimConfig {
    pub scenario: String,
    pub seed: u64,
    /// The peer that decided in the rules' place (`sim --peer`); None: the rules or the model.
    pub peer: Option<String>,
    /// The config, TOML, `[vast.env]` left out.
    pub config: String,
}

/// Record the simulation's config (once, when `sim` creates the database).
pub fn write(conn: &Connection, sim: &SimConfig, at: Millis) -> Result<()> {
    conn.execute(
        "INSERT INTO sim_config (id, scenario, seed, peer, config, written_at)
         VALUES (1, ?1, ?2, ?3, ?4, ?5)",
        params![sim.scenario, sim.seed as i64, sim.peer, sim.config, at],
    )?;
    Ok(())
}

/// The simulation's config; None for an install's database, and for one a simulation wrote
/// before the config was kept (a read-only database of an older schema has no table).
pub fn read(conn: &Connection) -> Result<Option<SimConfig>> {
    let table: bool = conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'sim_config')",
        [],
        |r| r.get(0),
    )?;
    if !table {
        return Ok(None);
    }
    Ok(conn
        .query_row(
            "SELECT scenario, seed, peer, config FROM sim_config WHERE id = 1",
            [],
            |r| {
                Ok(SimConfig {
                    scenario: r.get(0)?,
                    seed: r.get::<_, i64>(1)? as u64,
                    peer: r.get(2)?,
                    config: r.get(3)?,
                })
            },
        )
        .optional()?)
}

/// A simulation's database is refused by what acts or records (`run`, `poll`, `trigger`,
/// `message`, `reset-session`, `pause`, `resume`, `wakes add|cancel`, `instances stop`,
/// `init`): its instances are the simulator's, its install id (`sim`) is every simulation's,
/// and a real pass there would count them as the fleet and label real rentals as another
/// simulation's. `inspect`, `history` and the lists read it as it is.
/// A simulation from before its config was kept is known by its install id, which no install
/// can have (theirs are 6 letters).
pub fn refuse(conn: &Connection, db: &std::path::Path) -> Result<()> {
    let which = match read(conn)? {
        Some(sim) => format!(" (scenario {}, seed {})", sim.scenario, sim.seed),
        None if simulated_install(conn) => String::new(),
        None => return Ok(()),
    };
    anyhow::bail!(
        "{} is a simulation's database{which}, written by `fleetagent sim --state-dir`, not an install's: refusing to act on it; point --state-dir (or the config's state_dir) at the install's state dir",
        db.display(),
    )
}

/// The database's install id is the simulator's (false when it cannot be read: an older
/// schema, which the opening migrates).
fn simulated_install(conn: &Connection) -> bool {
    conn.query_row("SELECT install_id FROM agent_state WHERE id = 1", [], |r| {
        r.get::<_, Option<String>>(0)
    })
    .ok()
    .flatten()
    .is_some_and(|id| id == super::ops::SIM_INSTALL_ID)
}

/// [`refuse`] before the database is opened, for `run`: its opening (after the lock, in the
/// pass's own machinery) is the simulator's too. Nothing when there is none yet.
pub fn refuse_in(dir: &std::path::Path) -> Result<()> {
    // As its links resolve, as `Store::open` opens it.
    let resolved = super::resolved_dir(dir);
    let dir = resolved.as_path();
    let path = dir.join(super::DB_FILE);
    if !super::database_exists(dir)?
        || crate::paths::not_a_plain_file(&path).is_some()
        || super::emptied_database(dir).is_some()
    {
        // No database (or a planted link, or an emptied file: the opening refuses them by
        // name, and SQLite must not open an emptied one, which discards its WAL).
        return Ok(());
    }
    let conn = Connection::open_with_flags(
        &path,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY
            | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX
            | rusqlite::OpenFlags::SQLITE_OPEN_NOFOLLOW,
    )?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    // A damaged file or another program's is the opening's to name, not this look's.
    match read(&conn) {
        Ok(_) => refuse(&conn, &path),
        Err(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_simulations_config_reads_back_and_an_install_has_none() {
        let dir = tempfile::tempdir().unwrap();
        let store =
            crate::store::Store::open(dir.path(), crate::store::OpenMode::Create, 0).unwrap();
        assert_eq!(read(&store.conn).unwrap(), None);
        let sim = SimConfig {
            scenario: "spike".into(),
            seed: 7,
            peer: Some("keda".into()),
            config: "[policy]\nmax_instances = 16\n".into(),
        };
        write(&store.conn, &sim, 1).unwrap();
        assert_eq!(read(&store.conn).unwrap(), Some(sim.clone()));
        // One row at most.
        assert!(write(&store.conn, &sim, 2).is_err());
    }
}
