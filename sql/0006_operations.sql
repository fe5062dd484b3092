-- Operations (issue 22): the install's identity, the hand-brake, what doctor and the metrics
-- read about vast.ai's health and the metrics file, and passes whose actions all failed or
-- were refused (never a plain `no-action`).

-- A short random lowercase word made once per install (Store::open fills it for a new
-- database and for one migrated from an older version). Labels carry it:
-- `<label_prefix>-<install id>-r<run>-<suffix>`.
ALTER TABLE agent_state ADD COLUMN install_id TEXT;
-- The hand-brake (`fleetagent pause`): in force while paused_at is set and paused_until is
-- NULL (open-ended) or in the future.
ALTER TABLE agent_state ADD COLUMN paused_at INTEGER;
ALTER TABLE agent_state ADD COLUMN paused_until INTEGER;
ALTER TABLE agent_state ADD COLUMN paused_reason TEXT;
-- The last vast.ai listing: when one last succeeded, and the last failure (cleared by a
-- success). Written by every pass and every `poll`.
ALTER TABLE agent_state ADD COLUMN vast_ok_at INTEGER;
ALTER TABLE agent_state ADD COLUMN vast_error TEXT;
ALTER TABLE agent_state ADD COLUMN vast_error_at INTEGER;
-- Instances under our label_prefix that carry another install's id, as the last listing
-- saw them (JSON array of {"install_id", "label", "vast_id"}); never adopted nor touched.
ALTER TABLE agent_state ADD COLUMN foreign_installs TEXT;
ALTER TABLE agent_state ADD COLUMN foreign_installs_at INTEGER;
-- The metrics textfile's last write failure (cleared by a success).
ALTER TABLE agent_state ADD COLUMN metrics_error TEXT;
ALTER TABLE agent_state ADD COLUMN metrics_error_at INTEGER;

-- Completions of our own instances' workers in the hour before each sample (profit is ours).
ALTER TABLE samples ADD COLUMN ours_completed_1h INTEGER;

-- runs: two more verdicts and what each pass's asked-for actions came to. SQLite cannot
-- change a CHECK constraint in place, so the table is rebuilt (SQLite's documented
-- procedure: Store::migrate runs migrations with foreign keys off and checks them all with
-- `PRAGMA foreign_key_check` before the commit; the children's foreign keys name `runs` and
-- find the new table under it).
--   action-failed:  calls changed nothing and at least one failed (vast.ai refused or erred)
--   action-refused: calls changed nothing and every one was refused by a guardrail
CREATE TABLE runs_v6 (
    id                     INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id             INTEGER NOT NULL REFERENCES sessions(id),
    pid                    INTEGER NOT NULL,
    pass                   INTEGER NOT NULL,
    started_by             TEXT    NOT NULL CHECK (started_by IN ('events', 'tick')),
    status                 TEXT    NOT NULL CHECK (status IN ('running', 'ok', 'failed')),
    verdict                TEXT             CHECK (verdict IN ('action', 'no-action', 'skipped',
                                                               'action-failed', 'action-refused')),
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
    in_prompt              INTEGER NOT NULL DEFAULT 0,
    actions_ok             INTEGER NOT NULL DEFAULT 0,  -- launches and stops that went through (dry runs included)
    actions_refused        INTEGER NOT NULL DEFAULT 0,  -- refused by a guardrail
    actions_failed         INTEGER NOT NULL DEFAULT 0   -- failed at vast.ai
);
INSERT INTO runs_v6 (id, session_id, pid, pass, started_by, status, verdict, decided_by,
                     started_at, finished_at, events_claimed, wakes_claimed, llm_calls,
                     prompt_tokens_est, prompt_tokens_reported, completion_tokens, llm_error,
                     error, emergency, in_prompt)
    SELECT id, session_id, pid, pass, started_by, status, verdict, decided_by, started_at,
           finished_at, events_claimed, wakes_claimed, llm_calls, prompt_tokens_est,
           prompt_tokens_reported, completion_tokens, llm_error, error, emergency, in_prompt
      FROM runs;
-- The run counter survives the rebuild: never reset, never reused.
CREATE TEMP TABLE runs_seq AS SELECT seq FROM sqlite_sequence WHERE name = 'runs';
DROP TABLE runs;
ALTER TABLE runs_v6 RENAME TO runs;
DELETE FROM sqlite_sequence WHERE name IN ('runs', 'runs_v6');
INSERT INTO sqlite_sequence (name, seq)
    SELECT 'runs', MAX(COALESCE((SELECT MAX(seq) FROM temp.runs_seq), 0),
                       COALESCE((SELECT MAX(id) FROM runs), 0));
DROP TABLE temp.runs_seq;
CREATE INDEX runs_running ON runs(status) WHERE status = 'running';
CREATE INDEX runs_in_prompt ON runs(session_id, id) WHERE in_prompt = 1;
CREATE INDEX runs_ok ON runs(finished_at) WHERE status = 'ok';

-- hands (install identity, pause, operator hold): a pass asks whether the operator resumed or
-- wrote since their last stop (`events.kind` = 'resume' or 'message' after a time).
CREATE INDEX events_kind_time ON events(kind, created_at);
-- obs slice: what `doctor` reads through an index at any size of the database: the failed
-- runs of the last hour, and the failed calls of one pass.
CREATE INDEX runs_failed ON runs(finished_at) WHERE status = 'failed';
CREATE INDEX actions_run ON actions(run_id);

-- floor (issue 23): the floor's clocks as each pass left them, when one runs
-- (policy::floor::Clocks as JSON: deficit_since, surplus_since, flagged_passes, and why the
-- pass ended with the deficit unanswered); NULL when none runs or the floor did not plan.
ALTER TABLE runs ADD COLUMN floor_clocks TEXT;
