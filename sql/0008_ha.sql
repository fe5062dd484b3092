-- Several management hosts (issue 24, docs/ha.md). These tables stay empty while
-- `[ha] enabled = false`: a single-host install reads and writes none of them.

-- `trigger` and `message` with HA on: the event waits here, on this host, until the next
-- `run` or `poll` here forwards it to the shared inbox (no network in `trigger`).
CREATE TABLE outbox (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    priority     INTEGER NOT NULL CHECK (priority BETWEEN 0 AND 2),
    kind         TEXT    NOT NULL,
    reason       TEXT    NOT NULL,
    body         TEXT,
    created_at   INTEGER NOT NULL,
    forwarded_at INTEGER
);
CREATE INDEX outbox_waiting ON outbox(id) WHERE forwarded_at IS NULL;

-- The shared tables' rows this host changed since its last fenced push (filled by TEMP
-- triggers that only an HA leader's connections create).
CREATE TABLE ha_changes (
    id   INTEGER PRIMARY KEY AUTOINCREMENT,
    tbl  TEXT NOT NULL,
    pk   TEXT NOT NULL
);

-- Where this host's copy of the shared tables stands: the shared sequence number it last
-- pushed or pulled, and the holder and epoch it was written under.
CREATE TABLE ha_sync (
    id     INTEGER PRIMARY KEY CHECK (id = 1),
    holder TEXT    NOT NULL,
    epoch  INTEGER NOT NULL,
    seq    INTEGER NOT NULL
);

-- Shared inbox rows this host made into events, deleted from the inbox by its next push.
CREATE TABLE ha_inbox_taken (
    inbox_id INTEGER PRIMARY KEY
);
