-- The claim's two walks (rows whose lease lapsed, rows due and unheld) read the tenants with a trigger on
-- `financial.ActionExecution.updated` from one materialized CTE, read once a claim, instead of each walk
-- reading the triggers table for itself. Everything else is migration 0018's claim, word for word: its
-- settings (the plans made once per connection, `jit = off` as a guard), its walks on their partial indexes,
-- its writes by primary key; `tests/test_queue_claim_plans.py` compares it with the claim of migration 0015.
-- The CTE is empty unless `untriggered_only`, and the walks' test still reads that flag first, so a claim in
-- a transaction (all tenants) never builds the set.
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
    WITH triggered AS MATERIALIZED (
      SELECT t.tenant_id FROM triggers t
       WHERE untriggered_only AND t.event = 'financial.ActionExecution.updated' AND t.enabled AND NOT t.deleted
    ), lapsed AS (
      SELECT c.tenant_id, c.execution_id, c.lease_token AS old_token, c.run_at FROM execution_queue c
       WHERE c.lease_token IS NOT NULL
         -- Held in the statement's snapshot (migration 0015), or else held in a fresh one, in that order:
         -- the CASE fixes it. As two ANDed tests the snapshot's, free of volatile functions, becomes an
         -- anti-join, and the call, a filter of the queue's scan below that join, is then made for every
         -- running attempt's row.
         AND CASE WHEN EXISTS (SELECT 1 FROM execution_leases h
                                WHERE h.lease_token = c.lease_token AND h.expires_at >= claim_at)
                  THEN false ELSE NOT ledger_lease_held(c.lease_token) END
         AND NOT (untriggered_only AND c.tenant_id IN (SELECT t.tenant_id FROM triggered t))
       ORDER BY c.run_at
       LIMIT batch
       FOR UPDATE OF c SKIP LOCKED
    ), ready AS (
      SELECT c.tenant_id, c.execution_id, c.lease_token AS old_token, c.run_at FROM execution_queue c
       WHERE c.lease_token IS NULL AND c.run_at <= claim_at
         AND NOT (untriggered_only AND c.tenant_id IN (SELECT t.tenant_id FROM triggered t))
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
