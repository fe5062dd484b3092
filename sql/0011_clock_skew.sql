-- This host's clock against vast.ai's, as the last listing that worked measured it: this
-- host's time when the answer came less the answer's HTTP `Date` (ms; NULL: not measured,
-- no `Date` header). `doctor` names a skew over a minute: the launch window,
-- policy.min_rental_mins and vast.stopped_max_hours count by this host's clock.
ALTER TABLE agent_state ADD COLUMN vast_clock_skew_ms INTEGER;
