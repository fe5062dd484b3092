-- The spans an instance of ours spent stopped or outbid, when vast.ai bills its disk and not
-- its GPU: a JSON array of [from_ms, to_ms, disk $/h], appended when such a state ends
-- (store::instances::upsert). Today's spend counted an instance by its state now alone: one
-- stopped and then destroyed or started again was counted at full price for its stopped
-- hours, and an outbid one at full price throughout, so the daily cap refused launches (a
-- WORKERS DEAD one among them) on spend that never was.
ALTER TABLE instances ADD COLUMN paused_spans TEXT;
