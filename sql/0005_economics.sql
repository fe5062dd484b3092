-- Economics (issue 17): the last FIL/USD fetched by `price.fil_usd_command` / `fil_usd_url`
-- (older than `price.max_age_mins` it is unknown, never reused as if fresh), and one sample of
-- the fleet and the demand per pass, which `inspect --plot` draws (kept 30 days).
ALTER TABLE agent_state ADD COLUMN fil_usd REAL;
ALTER TABLE agent_state ADD COLUMN fil_usd_at INTEGER;      -- when it was fetched
ALTER TABLE agent_state ADD COLUMN fil_usd_error TEXT;      -- the last fetch's failure, if it failed

CREATE TABLE samples (
    id                INTEGER PRIMARY KEY,
    run_id            INTEGER,
    at                INTEGER NOT NULL,
    demand_ok         INTEGER NOT NULL,   -- 0: the probe failed; the demand columns are NULL
    pending           INTEGER,
    running           INTEGER,
    running_stale     INTEGER,
    backlog           INTEGER,
    live_workers      INTEGER,
    completed_15m     INTEGER,
    completed_1h      INTEGER,
    ours_billing      INTEGER NOT NULL,   -- our instances that bill (all but stopped ones)
    ours_booting      INTEGER NOT NULL,   -- launching, loading, or running with no worker yet
    ours_proving      INTEGER NOT NULL,   -- registered or proving
    capacity_pph      REAL    NOT NULL,   -- proofs/h of what we have and what is coming
    target_pph        REAL    NOT NULL,   -- policy.target_proofs_per_hour (0: none)
    fleet_dph         REAL    NOT NULL,   -- $/h billed now
    revenue_per_proof REAL                -- $ a proof earns; NULL: price unknown
);
CREATE INDEX samples_at ON samples(at);
