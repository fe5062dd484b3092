-- Whether the operator spoke (a `resume` or a `message`) since an operator's stop, for the
-- hold it begins (tools::brake): read from this index by time, so that an event taken late
-- from an outbox or the shared inbox (a newer id, the time it was rung) cannot hide a later
-- message. Before, a walk from the newest event back stopped at the first older row: 70
-- triggers taken after a message brought back the hold it had ended (a re-test). Partial:
-- a `trigger`'s insert, the hot path, does not write it.
CREATE INDEX events_spoke ON events(created_at) WHERE kind IN ('resume', 'message');
