-- The claim of executions no trigger can react to (`ledger_claim_and_start(…, untriggered_only)`, an
-- autocommit statement of its own) commits without waiting for its WAL to reach the disk
-- (synchronous_commit off, for that one transaction). Nothing acknowledged depends on it: it leases the
-- executions, marks them RUNNING with one more attempt, and drops finished leases; no record event is
-- raised and no trigger reacts to it. The attempt that follows commits synchronously, and the WAL is
-- flushed in order, so once an attempt's outcome is on disk its claim is too. A crash that loses the claim
-- alone (before any later flush) leaves the executions as they were before it, queued with their earlier
-- attempt count, and the attempt that was running never committed: another claim runs them again.
-- The claim in a transaction (executions of tenants with triggers, whose RUNNING raises events that may
-- start runs) still waits for its flush.
--
-- What it saves: each claim's flush was a wait on the path of every execution it claimed (the worker's
-- slot idles from the attempt's end to the next claim's answer); the number of commit records is the same.
CREATE FUNCTION ledger_claim_untriggered(worker text, batch integer, lease_seconds double precision, finished uuid[])
  RETURNS TABLE (tenant_id uuid, execution_id uuid, attempt integer, lease_token uuid, enqueued_at timestamptz,
                 run_at timestamptz, started boolean, previous_status text, triggers_version bigint)
  LANGUAGE plpgsql SECURITY INVOKER SET search_path = public
AS $$
BEGIN
  -- Local: for the transaction of the caller's statement only (an autocommit statement is one).
  PERFORM set_config('synchronous_commit', 'off', true);
  RETURN QUERY SELECT * FROM ledger_claim_and_start(worker, batch, lease_seconds, finished, true);
END
$$;

REVOKE ALL ON FUNCTION ledger_claim_untriggered(text, integer, double precision, uuid[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ledger_claim_untriggered(text, integer, double precision, uuid[]) TO ledger_app;
