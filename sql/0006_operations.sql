-- Operations (issue 22): the install's identity, the hand-brake, what doctor and the metrics
-- read about vast.ai's health and the metrics file, and passes whose actions all failed or
-- were refused (never a plain `no-action`).
--
-- `agent_state` and `runs` are rebuilt (SQLite's documented procedure: Store::migrate runs
-- migrations with foreign keys off and checks them all with `PRAGMA foreign_key_check`
-- before the commit; the children's foreign keys name `runs` and find the new table under
-- it). `runs` must be: SQLite cannot change a CHECK constraint in place. Both are written on
-- one line without comments because SQLite keeps each CREATE statement's text and every
-- process, `trigger` included, parses all of it at open (about 90 instructions a character,
-- half of what `trigger` does): the two rebuilt statements are 900 characters shorter than
-- the ones they replace, more than this migration adds.
--
-- agent_state, the one row of what outlives a process and is not a log; the columns this
-- migration adds:
--   install_id           a short random lowercase word made once per install (Store::open
--                        fills it for a new database and for one migrated from an older
--                        version); labels carry it: `<label_prefix>-<install id>-r<run>-<suffix>`
--   paused_at, paused_until, paused_reason
--                        the hand-brake (`fleetagent pause`): in force while paused_at is set
--                        and paused_until is NULL (open-ended) or in the future
--   vast_ok_at, vast_error, vast_error_at
--                        the last vast.ai listing: when one last succeeded, and the failure
--                        since (its first time; cleared by a success)
--   foreign_installs, foreign_installs_at
--                        instances under our label_prefix that carry another install's id,
--                        as the last listing saw them (JSON array of {"install_id", "label",
--                        "vast_id"}); never adopted nor touched
--   metrics_error, metrics_error_at
--                        the metrics textfile's write failure since (cleared by a success)
-- and those of earlier migrations, as 0001-0005 describe them (last_demand, last_fleet,
-- poll_snapshot and last_reading are JSON; low_demand_passes and backlog_passes the rules'
-- streaks, streaks_run the run that last advanced them).
CREATE TABLE agent_state_v6(id INTEGER PRIMARY KEY CHECK(id=1),session_id INTEGER NOT NULL REFERENCES sessions(id),last_run_finished_at INTEGER,last_success_at INTEGER,last_llm_call_at INTEGER,last_llm_error TEXT,last_llm_error_at INTEGER,last_demand TEXT,last_fleet TEXT,poll_snapshot TEXT,poll_at INTEGER,low_demand_passes INTEGER NOT NULL DEFAULT 0,backlog_passes INTEGER NOT NULL DEFAULT 0,streaks_run INTEGER,floor_memory TEXT,work_waiting_since INTEGER,last_reading TEXT,last_reading_at INTEGER,search_quota_until TEXT,search_quota_at INTEGER,fil_usd REAL,fil_usd_at INTEGER,fil_usd_error TEXT,install_id TEXT,paused_at INTEGER,paused_until INTEGER,paused_reason TEXT,vast_ok_at INTEGER,vast_error TEXT,vast_error_at INTEGER,foreign_installs TEXT,foreign_installs_at INTEGER,metrics_error TEXT,metrics_error_at INTEGER);
INSERT INTO agent_state_v6(id,session_id,last_run_finished_at,last_success_at,last_llm_call_at,
    last_llm_error,last_llm_error_at,last_demand,last_fleet,poll_snapshot,poll_at,
    low_demand_passes,backlog_passes,streaks_run,floor_memory,work_waiting_since,last_reading,
    last_reading_at,search_quota_until,search_quota_at,fil_usd,fil_usd_at,fil_usd_error)
  SELECT id,session_id,last_run_finished_at,last_success_at,last_llm_call_at,last_llm_error,
         last_llm_error_at,last_demand,last_fleet,poll_snapshot,poll_at,low_demand_passes,
         backlog_passes,streaks_run,floor_memory,work_waiting_since,last_reading,
         last_reading_at,search_quota_until,search_quota_at,fil_usd,fil_usd_at,fil_usd_error
    FROM agent_state;
DROP TABLE agent_state;
ALTER TABLE agent_state_v6 RENAME TO agent_state;

-- Completions of our own instances' workers in the hour before each sample (profit is ours).
ALTER TABLE samples ADD COLUMN ours_completed_1h INTEGER;

-- runs: two more verdicts and what each pass's asked-for actions came to.
--   verdict action-failed:  calls changed nothing and at least one failed at vast.ai
--   verdict action-refused: calls changed nothing and every one was refused by a guardrail
--   actions_ok:      launches and stops that went through (dry runs included)
--   actions_refused: refused by a guardrail
--   actions_failed:  failed at vast.ai
--   floor_clocks:    (issue 23) the floor's clocks as the pass left them, when one runs
--                    (policy::floor::Clocks as JSON: deficit_since, surplus_since,
--                    flagged_passes, and why the pass ended with the deficit unanswered);
--                    NULL when none runs or the floor did not plan
-- and those of 0001 (in_prompt: later prompts include the run: an action run, an operator
-- exchange, an interrupted tool loop).
CREATE TABLE runs_v6(id INTEGER PRIMARY KEY AUTOINCREMENT,session_id INTEGER NOT NULL REFERENCES sessions(id),pid INTEGER NOT NULL,pass INTEGER NOT NULL,started_by TEXT NOT NULL CHECK(started_by IN('events','tick')),status TEXT NOT NULL CHECK(status IN('running','ok','failed')),verdict TEXT CHECK(verdict IN('action','no-action','skipped','action-failed','action-refused')),decided_by TEXT,started_at INTEGER NOT NULL,finished_at INTEGER,events_claimed INTEGER NOT NULL DEFAULT 0,wakes_claimed INTEGER NOT NULL DEFAULT 0,llm_calls INTEGER NOT NULL DEFAULT 0,prompt_tokens_est INTEGER,prompt_tokens_reported INTEGER,completion_tokens INTEGER,llm_error TEXT,error TEXT,emergency INTEGER NOT NULL DEFAULT 0,in_prompt INTEGER NOT NULL DEFAULT 0,actions_ok INTEGER NOT NULL DEFAULT 0,actions_refused INTEGER NOT NULL DEFAULT 0,actions_failed INTEGER NOT NULL DEFAULT 0,floor_clocks TEXT);
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

-- What `doctor` and every pass read through an index at any size of the database: the
-- calls of one pass (the ledger only grows). The operator hold's check (an event since a
-- time) and doctor's failed runs of the last hour walk back from the newest row instead: an
-- index on `events` would cost every `trigger` its upkeep and its parse.
CREATE INDEX actions_run ON actions(run_id);

-- counts slice: our estimate of the tools' tokens in each request beside the prompt's
-- (`doctor`'s tools_in_prompt check compares what the server counted with both). NULL on rows
-- stored before it.
ALTER TABLE llm_calls ADD COLUMN tools_tokens_est INTEGER;
-- prefix slice (issue 23): how much of each prompt the server took from its prompt cache
-- (OpenAI's usage.prompt_tokens_details.cached_tokens, llama.cpp's timings.cache_n; null when
-- it said nothing), and the shape of the request's history (its earliest run, and the newest
-- run shown with tool outputs as placeholders): the next request keeps that shape while it
-- fits, so the system prompt, the tools and the history stay a prefix the server can reuse.
ALTER TABLE llm_calls ADD COLUMN prompt_tokens_cached INTEGER;
ALTER TABLE llm_calls ADD COLUMN history_from_run INTEGER;
ALTER TABLE llm_calls ADD COLUMN history_compacted_through_run INTEGER;
