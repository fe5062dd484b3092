-- The floor's memory between passes (policy::floor::Memory as JSON: since when a deficit or
-- idle surplus was left to the model, and how many passes each flagged instance has been
-- left), and the per-model calibration of the prompt-token estimate against the provider's
-- reported usage (the estimate is multiplied by `ratio` before the budget check).
ALTER TABLE agent_state ADD COLUMN floor_memory TEXT;

CREATE TABLE token_calibration (
    model       TEXT    PRIMARY KEY,
    ratio       REAL    NOT NULL CHECK (ratio >= 1.0),
    samples     INTEGER NOT NULL DEFAULT 0,
    updated_at  INTEGER NOT NULL
);
