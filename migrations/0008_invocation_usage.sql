-- DESIGN 13: Invocation.usage, {inputTokens, outputTokens, modelCalls} of a model tool's or an agent's
-- call, summed over its model calls; null for a call that made none. (IF NOT EXISTS: the agents work adds
-- the same column.)
ALTER TABLE invocations ADD COLUMN IF NOT EXISTS usage jsonb;
