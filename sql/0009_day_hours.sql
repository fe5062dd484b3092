-- Learning the day (issue 25, policy::day): the hours of history the day profile is learned
-- from, one row per whole UTC hour whose samples are all in (the samples' mean rate over the
-- last 15 minutes, times 4), kept 8 days. Derived from `samples` and written by the pass
-- that sees the hour end, so that a pass reads a week of hours, not a week of samples.
CREATE TABLE day_hours (
    start     INTEGER PRIMARY KEY,          -- the hour's start, ms since the epoch (UTC)
    pph       REAL    NOT NULL,             -- proofs/h the hour's samples read, on average
    samples   INTEGER NOT NULL,             -- how many samples (passes that read demand)
    saturated INTEGER NOT NULL              -- 1: most of them saw a backlog, every worker busy
);
