-- Whether the pass's reading showed the market giving more than the fleet took: work waiting
-- (Curio's backlog, else the pending count less orphan tasks) of at least the rules' backlog
-- minimum while every live worker was busy (`policy::streaks::backlog`). The day profile
-- marks an hour saturated (a floor under demand, not its measure) from it: read from the
-- raw pending count, orphan tasks that are never work marked every hour of a dead day
-- saturated, and the profile stayed believed and rented ahead (a walkthrough). NULL in rows
-- stored before it: those are read as before (backlog or pending at the minimum).
ALTER TABLE samples ADD COLUMN saturated INTEGER;
