-- fleetagent schema, version 1. Append-only: later changes go in new numbered files.
-- Times are Unix milliseconds (INTEGER), UTC.

CREATE TABLE sessions (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    started_at  INTEGER NOT NULL,
    reason      TEXT    NOT NULL
);

-- One row: what must outlive a process and is not a log.
CREATE TABLE agent_state (
    id                   INTEGER PRIMARY KEY CHECK (id = 1),
    session_id           INTEGER NOT NULL REFERENCES sessions(id),
    last_run_finished_at INTEGER,
    last_success_at      INTEGER,
    last_llm_call_at     INTEGER,
    last_llm_error       TEXT,
    last_llm_error_at    INTEGER,
    last_demand          TEXT,     -- JSON: the demand reading of the last pass
    last_fleet           TEXT,     -- JSON: the fleet summary of the last pass
    poll_snapshot        TEXT,     -- JSON: what the last `poll` saw
    poll_at              INTEGER,
    low_demand_passes    INTEGER NOT NULL DEFAULT 0,  -- consecutive passes with idle workers and no backlog
    backlog_passes       INTEGER NOT NULL DEFAULT 0,  -- consecutive passes with a backlog and every live worker busy
    streaks_run          INTEGER                      -- the run that last advanced the two streaks
);

-- One row per pass. The AUTOINCREMENT key is the run id: never reset, never reused.
CREATE TABLE runs (
    id                     INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id             INTEGER NOT NULL REFERENCES sessions(id),
    pid                    INTEGER NOT NULL,
    pass                   INTEGER NOT NULL,
    started_by             TEXT    NOT NULL CHECK (started_by IN ('events', 'tick')),
    status                 TEXT    NOT NULL CHECK (status IN ('running', 'ok', 'failed')),
    verdict                TEXT             CHECK (verdict IN ('action', 'no-action', 'skipped')),
    decided_by             TEXT,
    started_at             INTEGER NOT NULL,
    finished_at            INTEGER,
    events_claimed         INTEGER NOT NULL DEFAULT 0,
    wakes_claimed          INTEGER NOT NULL DEFAULT 0,
    llm_calls              INTEGER NOT NULL DEFAULT 0,
    prompt_tokens_est      INTEGER,
    prompt_tokens_reported INTEGER,
    completion_tokens      INTEGER,
    llm_error              TEXT,
    error                  TEXT,
    emergency              INTEGER NOT NULL DEFAULT 0,
    in_prompt              INTEGER NOT NULL DEFAULT 0  -- later prompts include it (an action run, an operator exchange, an interrupted tool loop)
);
CREATE INDEX runs_running ON runs(status) WHERE status = 'running';
CREATE INDEX runs_in_prompt ON runs(session_id, id) WHERE in_prompt = 1;
CREATE INDEX runs_ok ON runs(finished_at) WHERE status = 'ok';

-- Things that happened and that a pass must look at. Claimed by exactly one pass.
CREATE TABLE events (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    priority    INTEGER NOT NULL CHECK (priority BETWEEN 0 AND 2),
    kind        TEXT    NOT NULL,   -- trigger, message, reset, lifecycle, poll
    reason      TEXT    NOT NULL,
    body        TEXT,               -- an operator message's text
    created_at  INTEGER NOT NULL,
    claimed_by  INTEGER REFERENCES runs(id),
    claimed_at  INTEGER,
    attempts    INTEGER NOT NULL DEFAULT 0,
    not_before  INTEGER,
    failed_at   INTEGER,
    last_error  TEXT
);
CREATE INDEX events_waiting ON events(priority) WHERE claimed_by IS NULL AND failed_at IS NULL;
CREATE INDEX events_claimed ON events(claimed_by);
CREATE INDEX events_failed ON events(failed_at) WHERE failed_at IS NOT NULL;

-- Scheduled checks. pending -> processed (by one pass) | cancelled | failed.
CREATE TABLE wakes (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    due_at        INTEGER NOT NULL,
    reason        TEXT    NOT NULL,
    created_at    INTEGER NOT NULL,
    created_by    TEXT    NOT NULL,   -- operator | agent
    created_run   INTEGER REFERENCES runs(id),
    status        TEXT    NOT NULL CHECK (status IN ('pending', 'processed', 'cancelled', 'failed')),
    processed_by  INTEGER REFERENCES runs(id),
    processed_at  INTEGER,
    attempts      INTEGER NOT NULL DEFAULT 0,
    not_before    INTEGER,
    finished_at   INTEGER            -- cancelled or failed at
);
CREATE INDEX wakes_pending ON wakes(due_at) WHERE status = 'pending';
CREATE INDEX wakes_processed_by ON wakes(processed_by);

-- The conversation. Token counts are computed once, at insert.
CREATE TABLE messages (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id    INTEGER NOT NULL REFERENCES sessions(id),
    run_id        INTEGER REFERENCES runs(id),
    role          TEXT    NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool')),
    kind          TEXT    NOT NULL,  -- observation, operator, answer, tool_result
    content       TEXT    NOT NULL,
    tokens        INTEGER NOT NULL,
    tool_calls    TEXT,              -- JSON array on assistant messages that call tools
    tool_call_id  TEXT,
    tool_name     TEXT,
    gist          TEXT,              -- one line kept when an old tool output is compacted
    gist_tokens   INTEGER,           -- token count of the compacted placeholder
    event_id      INTEGER REFERENCES events(id),
    created_at    INTEGER NOT NULL
);
CREATE INDEX messages_session ON messages(session_id, id);
CREATE INDEX messages_kind ON messages(session_id, kind, id);
CREATE INDEX messages_run ON messages(run_id);

-- One row per LLM request: the local estimate beside what the provider reported.
CREATE TABLE llm_calls (
    id                     INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id                 INTEGER NOT NULL REFERENCES runs(id),
    at                     INTEGER NOT NULL,
    round                  INTEGER NOT NULL,
    messages               INTEGER NOT NULL,
    prompt_tokens_est      INTEGER NOT NULL,
    prompt_tokens_reported INTEGER,
    completion_tokens      INTEGER,
    latency_ms             INTEGER NOT NULL,
    attempts               INTEGER NOT NULL,
    outcome                TEXT    NOT NULL CHECK (outcome IN ('ok', 'error')),
    error                  TEXT
);
CREATE INDEX llm_calls_run ON llm_calls(run_id);

-- The ledger of what fleetagent did or tried to do on vast.ai (and the rate limiter's source).
CREATE TABLE actions (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id        INTEGER REFERENCES runs(id),
    kind          TEXT    NOT NULL,  -- launch, stop, destroy
    outcome       TEXT    NOT NULL,  -- intent, ok, failed, refused, dry_run
    actor         TEXT    NOT NULL,  -- llm, rules, operator
    instance_id   INTEGER,
    label         TEXT,
    offer_id      INTEGER,
    dph           REAL,
    emergency     INTEGER NOT NULL DEFAULT 0,
    tool_call_id  TEXT,
    reason        TEXT,
    detail        TEXT,
    created_at    INTEGER NOT NULL,
    finished_at   INTEGER
);
CREATE INDEX actions_kind_time ON actions(kind, created_at);
CREATE UNIQUE INDEX actions_launch_label ON actions(label) WHERE kind = 'launch' AND label IS NOT NULL;

-- Our instances as fleetagent knows them, keyed by label (the launch intent's name).
CREATE TABLE instances (
    label          TEXT PRIMARY KEY,
    vast_id        INTEGER UNIQUE,
    state          TEXT    NOT NULL,  -- launching, loading, booted, registered, proving, dead, stopped, gone
    actual_status  TEXT,
    status_msg     TEXT,
    gpu_name       TEXT,
    dph            REAL,
    offer_id       INTEGER,
    public_ip      TEXT,
    machine_name   TEXT,
    launched_run   INTEGER REFERENCES runs(id),
    adopted        INTEGER NOT NULL DEFAULT 0,
    created_at     INTEGER NOT NULL,
    state_since    INTEGER NOT NULL,
    last_seen_at   INTEGER,
    gone_at        INTEGER
);
CREATE INDEX instances_live ON instances(state) WHERE gone_at IS NULL;
