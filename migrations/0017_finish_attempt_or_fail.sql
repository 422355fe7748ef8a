-- An attempt's finish whose COMMIT is sent in the same round trip (queue/attempts.py, db/prepared.py
-- `commit_with`): the COMMIT runs unless a statement before it failed, so every outcome that must not
-- commit is an error here, not a row the caller reads after the commit has run. A lost lease (no queue row,
-- or another token) raises LQ001, a pending cancel LQ002; nothing is written in either case, and the
-- caller's transaction rolls back as it did when it read those from ledger_finish_attempt's row. A
-- disable or delete waiting for the action's running executions needs its settling in this transaction
-- (actions/lifecycle.py), which the caller takes this path only when its snapshot saw none: one that
-- appears anyway is a concurrent change, failed as the lost race it is (40001), and the attempt is run again.
CREATE FUNCTION ledger_finish_attempt_or_fail(
    p_tenant uuid, p_execution uuid, p_lease uuid, p_attempt integer, p_input jsonb, p_output jsonb,
    p_error jsonb, p_tools jsonb, p_logs jsonb, p_started_at timestamptz, p_finished_at timestamptz,
    p_duration_ms double precision, p_output_bytes integer, p_usage jsonb, p_status text,
    p_retry_in double precision, p_action uuid)
  RETURNS TABLE (lease_token uuid, cancel_requested boolean, lifecycle_pending boolean)
  LANGUAGE plpgsql SECURITY INVOKER SET search_path = public
AS $$
DECLARE
  finished record;
BEGIN
  SELECT * INTO finished FROM ledger_finish_attempt(p_tenant, p_execution, p_lease, p_attempt, p_input, p_output,
    p_error, p_tools, p_logs, p_started_at, p_finished_at, p_duration_ms, p_output_bytes, p_usage, p_status,
    p_retry_in, p_action);
  IF finished.lease_token IS DISTINCT FROM p_lease THEN
    RAISE EXCEPTION 'the attempt no longer holds its lease' USING ERRCODE = 'LQ001';
  END IF;
  IF finished.cancel_requested THEN
    RAISE EXCEPTION 'the execution was cancelled while its attempt ran' USING ERRCODE = 'LQ002';
  END IF;
  IF finished.lifecycle_pending THEN
    RAISE EXCEPTION 'the action''s lifecycle changed while its attempt ran' USING ERRCODE = '40001';
  END IF;
  RETURN QUERY SELECT finished.lease_token, finished.cancel_requested, finished.lifecycle_pending;
END
$$;

GRANT EXECUTE ON FUNCTION ledger_finish_attempt_or_fail(uuid, uuid, uuid, integer, jsonb, jsonb, jsonb, jsonb,
  jsonb, timestamptz, timestamptz, double precision, integer, jsonb, text, double precision, uuid) TO ledger_app;
