-- An attempt's finish whose COMMIT is sent in the same round trip (queue/attempts.py, db/pool.py
-- `commit_with`): the server runs that COMMIT unless a statement before it failed, so every outcome that
-- must not commit is an error here, not a row the caller reads once the COMMIT has run. A lost lease (no
-- queue row, or another token) raises LQ001 and a pending cancel LQ002, with nothing written; the caller's
-- transaction then rolls back as it did when it read them from ledger_finish_attempt's row. A disable or
-- delete waiting for the action's running executions must be settled in this transaction
-- (actions/lifecycle.py), and the caller takes this path only when its snapshot saw none: one found here
-- anyway is a concurrent change, failed as the lost race it is (40001), and the attempt is run again.
--
-- ledger_finish_attempt's body (migration 0012) with those three refusals as errors, not a call of it:
-- a nested call is two more statements and a PL/pgSQL frame in every attempt. A change to one body is a
-- change to both.
CREATE FUNCTION ledger_finish_attempt_or_fail(
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
  IF NOT FOUND OR held_token IS DISTINCT FROM p_lease THEN
    RAISE EXCEPTION 'the attempt no longer holds its lease' USING ERRCODE = 'LQ001';
  END IF;
  IF cancel THEN
    RAISE EXCEPTION 'the execution was cancelled while its attempt ran' USING ERRCODE = 'LQ002';
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
  IF pending_change IS NOT NULL THEN
    RAISE EXCEPTION 'the action''s lifecycle changed while its attempt ran' USING ERRCODE = '40001';
  END IF;
  RETURN QUERY SELECT held_token, cancel, false;
END
$$;

GRANT EXECUTE ON FUNCTION ledger_finish_attempt_or_fail(uuid, uuid, uuid, integer, jsonb, jsonb, jsonb, jsonb,
  jsonb, timestamptz, timestamptz, double precision, integer, jsonb, text, double precision, uuid) TO ledger_app;
