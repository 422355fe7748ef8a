-- The claim as PL/pgSQL statements whose plans are made once per connection and stay right as the tables
-- grow, instead of one SQL statement planned on every call: in the bench's queue (1,000 no-op executions
-- queued, pg_stat_statements with planning) a claim spent ~0.7-1.1 ms planning its CTEs, more than
-- executing them.
--
-- A cached plan is made while the tables are as they are at a worker's first claim (an empty queue, few
-- executions), so no statement here may have a plan that turns bad as they grow; the settings below hold
-- for this function's statements only:
-- - `plan_cache_mode = force_generic_plan`: one plan per statement and connection from the first call, not
--   five custom plans first;
-- - `enable_sort = off`: the due rows are read in run_at order from their partial indexes, with their
--   LIMIT (a sort of all due rows, chosen while the queue was tiny, would read the whole queue each claim);
-- - `enable_seqscan = off`: every row written is found by its primary key, one statement per claimed row
--   (a join of the claimed rows with `executions`, or a sequential scan, chosen while `executions` was
--   tiny, would read that table, which only grows, once per claimed row). The one sequential scan left is
--   the leases' own (no index on expires_at; the table holds the running attempts' leases);
-- - `jit = off`: a disabled plan node's cost (10^10) is far past `jit_above_cost`, and JIT compiled the
--   claim's statements on every call (~54 and ~320 ms, auto_explain), more than the whole claim's execution.
--
-- The clock is read once, at the claim's start, so that "due" and "held" are index conditions of the walks
-- (`clock_timestamp()`, volatile, can only be a filter: the walk of the ready rows then read every row not
-- yet due whenever fewer than `batch` were due). `ledger_lease_held` still reads a fresh clock.
--
-- What a claim does is as before (migrations 0011-0015): it drops `finished` leases and leases long
-- expired that no queue row refers to (a lease is only ever referred to by its own execution's queue row,
-- so that row is looked up by its key); locks, in run_at order, up to `batch` rows whose lease lapsed (the
-- lease tested in the statement's snapshot, then with a fresh one: `ledger_lease_held`) and up to `batch`
-- rows due and unheld, SKIP LOCKED, and claims the earliest `batch` of them (a row locked but not picked
-- stays locked until the claim commits); for each, a new lease token and one more attempt on the queue
-- row, the old lease dropped, the new one inserted, and the execution marked RUNNING with one more attempt
-- unless a cancel is pending. `untriggered_only` claims only executions of tenants with no enabled trigger
-- on `financial.ActionExecution.updated`, read in the statement that locks the rows, and (as
-- `ledger_claim_untriggered` does, migration 0014) turns the flush wait off for its own transaction: the
-- worker calls it directly as an autocommit statement.
CREATE OR REPLACE FUNCTION ledger_claim_and_start(worker text, batch integer, lease_seconds double precision, finished uuid[],
                                       untriggered_only boolean DEFAULT false)
  RETURNS TABLE (tenant_id uuid, execution_id uuid, attempt integer, lease_token uuid, enqueued_at timestamptz,
                 run_at timestamptz, started boolean, previous_status text, triggers_version bigint)
  LANGUAGE plpgsql SECURITY DEFINER
  SET search_path = public SET plan_cache_mode = force_generic_plan SET enable_sort = off SET enable_seqscan = off
  SET jit = off
AS $$
DECLARE
  claim_at timestamptz := clock_timestamp();
  due record;
  cancel boolean;
BEGIN
  IF untriggered_only THEN
    -- Local: for the caller's transaction only (an autocommit statement is one).
    PERFORM set_config('synchronous_commit', 'off', true);
  END IF;
  DELETE FROM execution_leases l
   WHERE l.lease_token = ANY(finished)
      OR (l.expires_at < claim_at - interval '10 minutes'
          AND NOT EXISTS (SELECT 1 FROM execution_queue q
                           WHERE q.tenant_id = l.tenant_id AND q.execution_id = l.execution_id
                             AND q.lease_token = l.lease_token));
  IF batch <= 0 THEN
    RETURN;
  END IF;
  FOR due IN
    WITH lapsed AS (
      SELECT c.tenant_id, c.execution_id, c.lease_token AS old_token, c.run_at FROM execution_queue c
       WHERE c.lease_token IS NOT NULL
         -- Held in the statement's snapshot (migration 0015), or else held in a fresh one, in that order:
         -- the CASE fixes it. As two ANDed tests the snapshot's, free of volatile functions, becomes an
         -- anti-join, and the call, a filter of the queue's scan below that join, is then made for every
         -- running attempt's row.
         AND CASE WHEN EXISTS (SELECT 1 FROM execution_leases h
                                WHERE h.lease_token = c.lease_token AND h.expires_at >= claim_at)
                  THEN false ELSE NOT ledger_lease_held(c.lease_token) END
         AND NOT (untriggered_only AND c.tenant_id IN (
               SELECT t.tenant_id FROM triggers t
                WHERE t.event = 'financial.ActionExecution.updated' AND t.enabled AND NOT t.deleted))
       ORDER BY c.run_at
       LIMIT batch
       FOR UPDATE OF c SKIP LOCKED
    ), ready AS (
      SELECT c.tenant_id, c.execution_id, c.lease_token AS old_token, c.run_at FROM execution_queue c
       WHERE c.lease_token IS NULL AND c.run_at <= claim_at
         AND NOT (untriggered_only AND c.tenant_id IN (
               SELECT t.tenant_id FROM triggers t
                WHERE t.event = 'financial.ActionExecution.updated' AND t.enabled AND NOT t.deleted))
       ORDER BY c.run_at
       LIMIT batch
       FOR UPDATE OF c SKIP LOCKED
    )
    SELECT d.tenant_id, d.execution_id, d.old_token
      FROM (SELECT * FROM lapsed UNION ALL SELECT * FROM ready) d
     ORDER BY d.run_at
     LIMIT batch
  LOOP
    UPDATE execution_queue q
       SET lease_token = gen_random_uuid(), lease_owner = worker, claimed_at = clock_timestamp(),
           attempt = q.attempt + 1
     WHERE q.tenant_id = due.tenant_id AND q.execution_id = due.execution_id
    RETURNING q.tenant_id, q.execution_id, q.attempt, q.lease_token, q.enqueued_at, q.run_at, q.cancel_requested
         INTO ledger_claim_and_start.tenant_id, ledger_claim_and_start.execution_id, ledger_claim_and_start.attempt,
              ledger_claim_and_start.lease_token, ledger_claim_and_start.enqueued_at, ledger_claim_and_start.run_at,
              cancel;
    IF due.old_token IS NOT NULL THEN
      DELETE FROM execution_leases l WHERE l.lease_token = due.old_token;
    END IF;
    INSERT INTO execution_leases (lease_token, tenant_id, execution_id, expires_at, cancel_requested)
    VALUES (ledger_claim_and_start.lease_token, due.tenant_id, due.execution_id,
            clock_timestamp() + make_interval(secs => lease_seconds), cancel);
    SELECT e.status INTO previous_status FROM executions e
     WHERE e.tenant_id = due.tenant_id AND e.id = due.execution_id;
    started := false;
    IF NOT cancel THEN
      UPDATE executions e SET status = 'RUNNING', attempts = e.attempts + 1, updated_at = now()
       WHERE e.tenant_id = due.tenant_id AND e.id = due.execution_id AND e.status IN ('QUEUED', 'RUNNING');
      started := FOUND;
    END IF;
    SELECT v.version INTO triggers_version FROM trigger_versions v WHERE v.tenant_id = due.tenant_id;
    RETURN NEXT;
  END LOOP;
END
$$;
