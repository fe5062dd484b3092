-- vast.ai as it really is (issue 16): the host (machine_id) an instance runs on, whether it
-- is a bid (interruptible), and what its disk bills per hour while stopped; the hosts that
-- failed us (left out of offer searches until `until`) with the times one outbid us; and
-- the daily search quota, once vast.ai said it is spent (until X-RateLimit-Reset).
ALTER TABLE instances ADD COLUMN machine_id INTEGER;
ALTER TABLE instances ADD COLUMN is_bid INTEGER NOT NULL DEFAULT 0;
ALTER TABLE instances ADD COLUMN storage_dph REAL;

CREATE TABLE bad_hosts (
    machine_id    INTEGER PRIMARY KEY,
    reason        TEXT    NOT NULL,
    outbid_count  INTEGER NOT NULL DEFAULT 0,
    until         INTEGER,             -- left out of searches until then; NULL: not (yet) bad
    updated_at    INTEGER NOT NULL
);

ALTER TABLE agent_state ADD COLUMN search_quota_until TEXT;   -- X-RateLimit-Reset as sent
ALTER TABLE agent_state ADD COLUMN search_quota_at INTEGER;   -- when vast.ai said so
