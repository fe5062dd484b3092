-- Typed columns (issue 25): what is read of an action, or of a tool's answer, is kept in a
-- column of its own, never read back out of JSON or text.
--
-- The action ledger: its detail stays as written (a refusal's JSON answer, a failure's
-- message, `flagged (<why>): earned nothing`).
--   code  why the action did not go through, where a decision tells it apart:
--           the code of a guardrail's refusal (`rate_limited`, `unprofitable`,
--           `instance_cap`, `protected`, ...: the `error` of its JSON answer), or
--           `vast_rate_limited`: a call that failed on vast.ai's rate limit, retries spent;
--         NULL otherwise. The floor reads it (a model whose launch met a rate limit), and so
--         do the rules (a launch refused as unprofitable a moment ago), the metrics and the
--         sim's report (refusals by guardrail).
--   flag  a stop or destroy of a flagged instance of ours: why it was flagged (`exited`,
--         `offline`, `unknown`, `loading`, `silent`, `outbid`, `stopped`; fleet::FlagKind);
--         NULL otherwise (and for one vast.ai had already lost). The breaker of silent workers
--         counts the `silent` ones.
ALTER TABLE actions ADD COLUMN code TEXT;
ALTER TABLE actions ADD COLUMN flag TEXT;

-- The rows written before: the code from a refusal's JSON detail, or from vast.ai's rate
-- limit message; the flag from the detail's `flagged (<why>` (the why's first word).
UPDATE actions SET code = json_extract(detail, '$.error')
 WHERE json_valid(detail) AND json_type(detail, '$.error') = 'text';
UPDATE actions SET code = 'vast_rate_limited'
 WHERE outcome = 'failed' AND substr(detail, 1, 20) = 'vast.ai rate limit: ';
CREATE TEMP TABLE flag_why AS
    SELECT id, substr(detail, 10, instr(substr(detail, 10), ')') - 1) AS why FROM actions
     WHERE kind IN ('stop', 'destroy') AND substr(detail, 1, 9) = 'flagged ('
       AND instr(substr(detail, 10), ')') > 1;
UPDATE actions SET flag = (
    SELECT CASE WHEN instr(why, ' ') > 0 THEN substr(why, 1, instr(why, ' ') - 1) ELSE why END
      FROM temp.flag_why f WHERE f.id = actions.id)
 WHERE id IN (SELECT id FROM temp.flag_why);
UPDATE actions SET flag = NULL
 WHERE flag NOT IN ('outbid', 'stopped', 'exited', 'offline', 'unknown', 'loading', 'silent');
DROP TABLE temp.flag_why;

-- messages: the error code of a tool result (`error` of its JSON content, `invalid_args`,
-- `rate_limited`, ...; ToolResult::error_code), NULL for a success and any other message. The
-- sim's report counts the model's invalid calls by it.
ALTER TABLE messages ADD COLUMN error_code TEXT;
UPDATE messages SET error_code = json_extract(content, '$.error')
 WHERE role = 'tool' AND json_valid(content) AND json_type(content, '$.error') = 'text';
