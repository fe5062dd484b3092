-- Whether the pass's reading showed the market giving more than the fleet took: work waiting
-- (Curio's backlog, else the pending count less orphan tasks) of at least the rules' backlog
-- minimum while every live worker was busy (`policy::streaks::backlog`). The day profile
-- marks an hour saturated (a floor under demand, not its measure) from it: read from the
-- raw pending count, orphan tasks that are never work marked every hour of a dead day
-- saturated, and the profile stayed believed and rented ahead (a walkthrough). NULL in rows
-- stored before it: those are read by their backlog (else pending) at the minimum with as
-- many tasks running as live workers (`store::samples::hourly`).
ALTER TABLE samples ADD COLUMN saturated INTEGER;
-- The complete hours cached by the old reading are read again the same way, where their
-- samples are still kept (a re-test upgraded at 06:50 and the cached hours of a dead day,
-- saturated by orphan tasks, kept the profile believed and rented ahead at 07:30).
UPDATE day_hours SET saturated = (
    SELECT SUM(coalesce(backlog, pending) >= 5 AND live_workers > 0 AND running >= live_workers)
           * 2 > COUNT(*)
    FROM samples
    WHERE demand_ok AND completed_15m IS NOT NULL
      AND at - 450000 >= day_hours.start AND at - 450000 < day_hours.start + 3600000)
WHERE saturated = 1 AND EXISTS (
    SELECT 1 FROM samples
    WHERE demand_ok AND completed_15m IS NOT NULL
      AND at - 450000 >= day_hours.start AND at - 450000 < day_hours.start + 3600000);
