-- An operator's `instances stop ID` from the moment it is typed until it is recorded: when it
-- began (this host's time) and the instance. vast.ai answers a stop in seconds, and a pass
-- that launched meanwhile did not see the hold the stop begins (a walkthrough saw a
-- replacement rented two seconds after the DELETE was sent). While set, and for
-- policy.operator_hold_mins at most, it holds the launches of the rules and the floor as the
-- recorded stop does; the command clears it once its stop is recorded or refused.
ALTER TABLE agent_state ADD COLUMN operator_stop_at INTEGER;
ALTER TABLE agent_state ADD COLUMN operator_stop_instance INTEGER;
