-- Operators' `instances stop ID` from the moment each is typed until it is recorded: when it
-- was typed (this host's time) and the instance. vast.ai answers a stop in seconds, and a pass
-- that launched meanwhile did not see the hold the stop begins (a walkthrough saw a
-- replacement rented two seconds after the DELETE was sent). While a row is younger than
-- policy.operator_hold_mins it holds the launches of the rules and the floor as a recorded
-- stop does; the command deletes its own row once its stop is recorded or refused (one row
-- each: a second stop refused must not end the first one's hold). A row a killed command
-- left holds for policy.operator_hold_mins from when it was typed.
CREATE TABLE operator_stops_in_flight (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    typed_at    INTEGER NOT NULL,
    instance_id INTEGER NOT NULL
);
CREATE INDEX operator_stops_in_flight_typed ON operator_stops_in_flight(typed_at);
