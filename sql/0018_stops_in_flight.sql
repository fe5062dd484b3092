-- A pass's stop or destroy from the moment before it is sent to vast.ai until its row is in
-- the ledger (the same transaction deletes it): a pass killed in between (a crash walkthrough
-- widened the window with strace) left an instance vast.ai had ended with no record that
-- fleetagent ended it, read as "gone from the vast.ai listing". The next pass settles what is
-- left (`store::stops_in_flight::settle`): recorded as the pass's own when the instance ended
-- since the mark, dropped otherwise. The operator's commands have their own marks
-- (operator_stops_in_flight, which also hold launches).
CREATE TABLE stops_in_flight (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    sent_at      INTEGER NOT NULL,
    run_id       INTEGER,
    actor        TEXT NOT NULL,
    kind         TEXT NOT NULL CHECK (kind IN ('stop', 'destroy')),
    instance_id  INTEGER NOT NULL,
    label        TEXT,
    dph          REAL,
    tool_call_id TEXT,
    reason       TEXT,
    flag         TEXT,
    -- 1 once the call goes out (a destroy waits for vast.ai's spacing first): only such a
    -- mark is recorded as carried out.
    sent         INTEGER NOT NULL DEFAULT 0
);
