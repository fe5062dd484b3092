-- Why a model's answer ran nothing though the request succeeded: 'cut' (at
-- llm.max_output_tokens, its calls not run), 'as_text' (a tool call written as text), 'empty'
-- (no text, no tool call); NULL for a usable answer or a failed request. `doctor`'s llm check
-- goes red when the model's recent answers are all unusable: an LLM walkthrough saw every
-- answer of four passes cut, each pass "no-action, decided by llm", and doctor green.
ALTER TABLE llm_calls ADD COLUMN unusable TEXT;
