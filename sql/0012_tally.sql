-- Counts the metrics file writes over tables that grow with the install's age (`runs`,
-- `llm_calls`, `actions`): a year-old database made every pass and every `poll` read them
-- whole (store::tally). Rows up to `upto` are counted in `tally`; each write counts only the
-- rows after it. `check_at` is the time row `upto` had when counted: a table replaced since
-- (a restore, a host taking the lead) no longer matches, and the tally is counted afresh.
CREATE TABLE tally (
    name TEXT    NOT NULL,
    key  TEXT    NOT NULL,
    n    INTEGER NOT NULL,
    PRIMARY KEY (name, key)
);
CREATE TABLE tally_marks (
    name     TEXT    PRIMARY KEY,
    upto     INTEGER NOT NULL,
    check_at INTEGER
);
-- What `doctor`, `inspect` and the metrics look for among rows of every age.
CREATE INDEX wakes_failed ON wakes(id) WHERE status = 'failed';
CREATE INDEX actions_open ON actions(id) WHERE outcome = 'intent';
CREATE INDEX instances_gone ON instances(gone_at);
