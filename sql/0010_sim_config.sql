-- The config a simulation ran with (`sim --state-dir`, install id `sim`): its base config
-- under the scenario's [config], or the --config file, as TOML with [vast.env] left out (a
-- literal worker value may be a secret). `inspect` on a simulation's database judges this
-- config, not the host's. One row at most; an install's database has none.
CREATE TABLE sim_config (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    scenario   TEXT    NOT NULL,
    seed       INTEGER NOT NULL,
    peer       TEXT,                        -- the peer that decided (sim --peer); NULL: the rules or the model
    config     TEXT    NOT NULL,            -- TOML
    written_at INTEGER NOT NULL             -- ms since the epoch (the simulation's start)
);
