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
