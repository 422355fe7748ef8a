-- DESIGN 17: a child belongs to one attempt of its parent, and says whether a rollback took its writes.
--
-- parent_attempt: the attempt of the parent that made the call (null for a top-level execution).
-- rolled_back: the call was recorded beneath a call that failed (a failed attempt included): its status
-- is what it returned, and none of its writes remain.

ALTER TABLE executions ADD COLUMN parent_attempt integer;
ALTER TABLE executions ADD COLUMN rolled_back boolean NOT NULL DEFAULT false;

CREATE INDEX executions_children_per_attempt ON executions (tenant_id, parent_execution_id, parent_attempt, call_sequence)
  WHERE parent_execution_id IS NOT NULL;
DROP INDEX executions_children;

-- The rows recorded before: every tenant's, so row level security is lifted for this transaction only
-- (the owner role may be subject to it: FORCE), and put back below.
ALTER TABLE executions NO FORCE ROW LEVEL SECURITY;
ALTER TABLE invocations NO FORCE ROW LEVEL SECURITY;

-- A parent with one attempt (every invoked call, nested ones included) made its calls in attempt 1.
-- A started parent with several: the attempt that had begun when the call was recorded (its rows are
-- written at the end of the attempt's transaction, after the attempt's startedAt).
UPDATE executions c SET parent_attempt = coalesce(
    (SELECT max(i.attempt) FROM invocations i
      WHERE i.tenant_id = c.tenant_id AND i.execution_id = c.parent_execution_id AND i.started_at <= c.created_at),
    1)
  WHERE c.parent_execution_id IS NOT NULL;

WITH RECURSIVE beneath_failure (tenant_id, id) AS (
    SELECT c.tenant_id, c.id FROM executions c
      JOIN invocations i ON i.tenant_id = c.tenant_id AND i.execution_id = c.parent_execution_id
                        AND i.attempt = c.parent_attempt
     WHERE i.error IS NOT NULL
  UNION
    SELECT c.tenant_id, c.id FROM executions c
      JOIN beneath_failure b ON c.tenant_id = b.tenant_id AND c.parent_execution_id = b.id
)
UPDATE executions e SET rolled_back = true FROM beneath_failure b WHERE e.tenant_id = b.tenant_id AND e.id = b.id;

ALTER TABLE executions FORCE ROW LEVEL SECURITY;
ALTER TABLE invocations FORCE ROW LEVEL SECURITY;
