-- Reading Curio as it is (issue 16): the proofs/h learned per GPU model from our workers'
-- completions (used where `policy.gpu_rates` does not pin the GPU), since when work has been
-- waiting without a break (silent workers), the last successful demand reading with its time
-- (`inspect`'s `demand`), and the Curio worker address last matched to each instance (two of
-- ours behind one Curio machine).
CREATE TABLE measured_rates (
    gpu_name        TEXT    PRIMARY KEY,
    proofs_per_hour REAL    NOT NULL CHECK (proofs_per_hour > 0),
    proofs          INTEGER NOT NULL,
    span_secs       INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL
);

ALTER TABLE agent_state ADD COLUMN work_waiting_since INTEGER;
ALTER TABLE agent_state ADD COLUMN last_reading TEXT;
ALTER TABLE agent_state ADD COLUMN last_reading_at INTEGER;
ALTER TABLE instances ADD COLUMN worker_address TEXT;
