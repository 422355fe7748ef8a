-- DESIGN 13: an agent's (or a model tool's) turn records its token usage per attempt, and a session
-- turn its final answer. IF NOT EXISTS: the kind `model` work adds the same usage column.
ALTER TABLE invocations ADD COLUMN IF NOT EXISTS usage jsonb;
ALTER TABLE session_inputs ADD COLUMN IF NOT EXISTS output jsonb;
