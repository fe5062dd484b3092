-- When this host's clock began to run behind or ahead of vast.ai's by more than a minute:
-- this host's time at the first listing that measured it (NULL: within a minute, or not
-- measured). A clock that ran behind and is then set right steps forward, and what a pass
-- dated since then would read that much older (the launch window, policy.min_rental_mins,
-- the pause): `store::clock_step` dates those rows later by the step.
ALTER TABLE agent_state ADD COLUMN vast_clock_skew_since_ms INTEGER;
