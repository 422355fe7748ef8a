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
