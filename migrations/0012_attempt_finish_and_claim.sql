-- An attempt's last writes in one statement instead of a pipeline of five: psycopg's pipeline costs the
-- worker ~50 µs of CPU per statement, and the worker's CPU is what bounds the queue's throughput.
--
-- In order, in the attempt's transaction (REPEATABLE READ: every statement here reads the attempt's
-- snapshot, as the pipeline's did): the fence (the queue row locked: a claim by another worker, or a cancel,
-- made after the snapshot fails this lock as a lost race); then, only while the caller's lease still holds
-- it and no cancel is pending, the invocation, the execution's status, and the queue row given up (back
-- to the queue after `retry_in` seconds, or deleted). A finish for good also locks the action's row FOR
-- SHARE, so that a concurrent disable or delete meets this finish (actions/lifecycle.py), and answers
-- whether a lifecycle change is pending there. The caller checks the fence's row (queue/claims.py `held`)
-- and rolls the transaction back when the lease is lost or a cancel is pending.
--
-- SECURITY INVOKER: the tables' row-level security applies, to the tenant the transaction is set to.
CREATE FUNCTION ledger_finish_attempt(
    p_tenant uuid, p_execution uuid, p_lease uuid, p_attempt integer, p_input jsonb, p_output jsonb,
    p_error jsonb, p_tools jsonb, p_logs jsonb, p_started_at timestamptz, p_finished_at timestamptz,
    p_duration_ms double precision, p_output_bytes integer, p_usage jsonb, p_status text,
    p_retry_in double precision, p_action uuid)
  RETURNS TABLE (lease_token uuid, cancel_requested boolean, lifecycle_pending boolean)
  LANGUAGE plpgsql SECURITY INVOKER SET search_path = public
AS $$
DECLARE
  held_token uuid;
  cancel boolean;
  pending_change text;
BEGIN
  SELECT q.lease_token, q.cancel_requested INTO held_token, cancel FROM execution_queue q
   WHERE q.tenant_id = p_tenant AND q.execution_id = p_execution FOR UPDATE;
  IF NOT FOUND OR held_token IS DISTINCT FROM p_lease OR cancel THEN
    -- Nothing written: the caller raises, and the transaction rolls back.
    RETURN QUERY SELECT held_token, cancel, false;
    RETURN;
  END IF;
  INSERT INTO invocations (tenant_id, execution_id, attempt, input, output, error, tools, logs, started_at,
                           finished_at, duration_ms, output_bytes, usage)
  VALUES (p_tenant, p_execution, p_attempt, p_input, p_output, p_error, p_tools, p_logs, p_started_at,
          p_finished_at, p_duration_ms, p_output_bytes, p_usage);
  UPDATE executions SET status = p_status, updated_at = now() WHERE tenant_id = p_tenant AND id = p_execution;
  IF p_retry_in IS NOT NULL THEN
    UPDATE execution_queue SET run_at = now() + make_interval(secs => p_retry_in), lease_token = NULL,
           lease_owner = NULL, cancel_requested = false
     WHERE tenant_id = p_tenant AND execution_id = p_execution;
    RETURN QUERY SELECT held_token, cancel, false;
    RETURN;
  END IF;
  DELETE FROM execution_queue WHERE tenant_id = p_tenant AND execution_id = p_execution;
  SELECT a.pending INTO pending_change FROM actions a WHERE a.tenant_id = p_tenant AND a.id = p_action FOR SHARE;
  RETURN QUERY SELECT held_token, cancel, pending_change IS NOT NULL;
END
$$;

GRANT EXECUTE ON FUNCTION ledger_finish_attempt(uuid, uuid, uuid, integer, jsonb, jsonb, jsonb, jsonb, jsonb,
  timestamptz, timestamptz, double precision, integer, jsonb, text, double precision, uuid) TO ledger_app;


-- A claim as one statement, for the common case: `untriggered_only` claims only executions of tenants with
-- no enabled trigger on `financial.ActionExecution.updated`, the event their RUNNING raises (queue/attempts.py
-- `raise_started_events`; a trigger matches its event exactly, queue/triggers.py), so that no trigger can
-- react to it: such a claim needs no transaction around it (BEGIN, the claim, COMMIT: three statements, two
-- round trips) and runs in autocommit. The triggers are read in the claim's own statement, as the claim's
-- trigger version always was. The other executions are claimed as before, in a transaction that raises
-- their events before it commits.
DROP FUNCTION ledger_claim_and_start(text, integer, double precision, uuid[]);
CREATE FUNCTION ledger_claim_and_start(worker text, batch integer, lease_seconds double precision, finished uuid[],
                                       untriggered_only boolean DEFAULT false)
  RETURNS TABLE (tenant_id uuid, execution_id uuid, attempt integer, lease_token uuid, enqueued_at timestamptz,
                 run_at timestamptz, started boolean, previous_status text, triggers_version bigint)
  LANGUAGE sql SECURITY DEFINER SET search_path = public
AS $$
  WITH dropped AS (
    DELETE FROM execution_leases l
     WHERE l.lease_token = ANY(finished)
        OR (l.expires_at < clock_timestamp() - interval '10 minutes'
            AND NOT EXISTS (SELECT 1 FROM execution_queue q WHERE q.lease_token = l.lease_token))
  ), due AS (
    SELECT c.tenant_id, c.execution_id, c.lease_token AS old_token FROM execution_queue c
     WHERE ((c.lease_token IS NULL AND c.run_at <= clock_timestamp())
            OR (c.lease_token IS NOT NULL AND NOT ledger_lease_held(c.lease_token)))
       AND NOT (untriggered_only AND EXISTS (
             SELECT 1 FROM triggers t WHERE t.tenant_id = c.tenant_id AND t.event = 'financial.ActionExecution.updated'
                AND t.enabled AND NOT t.deleted))
     ORDER BY c.run_at
     LIMIT batch
     FOR UPDATE OF c SKIP LOCKED
  ), claimed AS (
    UPDATE execution_queue q
       SET lease_token = gen_random_uuid(), lease_owner = worker, claimed_at = clock_timestamp(),
           attempt = q.attempt + 1
      FROM due
     WHERE q.tenant_id = due.tenant_id AND q.execution_id = due.execution_id
    RETURNING q.tenant_id, q.execution_id, q.attempt, q.lease_token, q.enqueued_at, q.run_at, q.cancel_requested,
              due.old_token
  ), old_leases AS (
    DELETE FROM execution_leases l USING claimed WHERE l.lease_token = claimed.old_token
  ), leased AS (
    INSERT INTO execution_leases (lease_token, tenant_id, execution_id, expires_at, cancel_requested)
    SELECT claimed.lease_token, claimed.tenant_id, claimed.execution_id,
           clock_timestamp() + make_interval(secs => lease_seconds), claimed.cancel_requested FROM claimed
  ), prior AS (
    SELECT e.tenant_id, e.id, e.status FROM executions e
      JOIN claimed ON e.tenant_id = claimed.tenant_id AND e.id = claimed.execution_id
  ), running AS (
    UPDATE executions e SET status = 'RUNNING', attempts = e.attempts + 1, updated_at = now()
      FROM claimed
     WHERE e.tenant_id = claimed.tenant_id AND e.id = claimed.execution_id
       AND e.status IN ('QUEUED', 'RUNNING') AND NOT claimed.cancel_requested
    RETURNING e.tenant_id, e.id
  )
  SELECT claimed.tenant_id, claimed.execution_id, claimed.attempt, claimed.lease_token, claimed.enqueued_at,
         claimed.run_at, running.id IS NOT NULL, prior.status,
         (SELECT v.version FROM trigger_versions v WHERE v.tenant_id = claimed.tenant_id)
    FROM claimed
    LEFT JOIN prior ON prior.tenant_id = claimed.tenant_id AND prior.id = claimed.execution_id
    LEFT JOIN running ON running.tenant_id = claimed.tenant_id AND running.id = claimed.execution_id
$$;

REVOKE ALL ON FUNCTION ledger_claim_and_start(text, integer, double precision, uuid[], boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ledger_claim_and_start(text, integer, double precision, uuid[], boolean) TO ledger_app;
