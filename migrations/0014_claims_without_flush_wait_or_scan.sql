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

-- The claim's due rows from two partial indexes in run_at order instead of a sequential scan and a sort of
-- the whole queue on every claim (a claim of two with 1,000 queued: the scan and sort ~0.3-0.9 ms of its
-- ~1.3-2 ms, EXPLAIN ANALYZE). One statement could not use `execution_queue_ready`: it also takes rows
-- whose lease lapsed, so its test was an OR over both kinds of row. Now each kind is walked on its own
-- index (the leased rows are the running attempts, a few; their leases are checked as before, with a
-- fresh snapshot each), and the earliest `batch` of the two walks are claimed. A row a walk locked but the
-- claim did not pick stays untouched, locked until the claim commits. Still LANGUAGE sql, planned with
-- each call: kept as PL/pgSQL, its cached plan claimed more slowly as the queue churned (bench, two runs:
-- ~1.45 vs 2.5-3.2 ms of PostgreSQL's time a claim), with a run_at index or none.
CREATE INDEX execution_queue_leased ON execution_queue (run_at) WHERE lease_token IS NOT NULL;

CREATE OR REPLACE FUNCTION ledger_claim_and_start(worker text, batch integer, lease_seconds double precision, finished uuid[],
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
  ), triggered AS (
    -- The tenants a trigger on the RUNNING a claim makes could react to (for an untriggered claim).
    SELECT t.tenant_id FROM triggers t
     WHERE t.event = 'financial.ActionExecution.updated' AND t.enabled AND NOT t.deleted
  ), lapsed AS (
    -- Two walks in run_at order, each over a partial index of its own rows: the leased rows (few: the
    -- attempts running), of which those whose lease lapsed; and the rows no one holds, due now.
    SELECT c.tenant_id, c.execution_id, c.lease_token AS old_token, c.run_at FROM execution_queue c
     WHERE c.lease_token IS NOT NULL
       -- Held as this statement's snapshot sees it: not lapsed, without a call (~0.2 µs a row, against
       -- ~11 µs a call of ledger_lease_held; a claim passes every running attempt's row). A lease
       -- only lives longer in a fresher snapshot, or is replaced along with the row's token, which the
       -- claim re-reads; so this test can only pass a row by, never claim one. What it lets through is
       -- checked with a fresh snapshot, as before.
       AND NOT EXISTS (SELECT 1 FROM execution_leases h
                        WHERE h.lease_token = c.lease_token AND h.expires_at >= clock_timestamp())
       AND NOT ledger_lease_held(c.lease_token)
       AND NOT (untriggered_only AND c.tenant_id IN (SELECT tenant_id FROM triggered))
     ORDER BY c.run_at
     LIMIT batch
     FOR UPDATE OF c SKIP LOCKED
  ), ready AS (
    SELECT c.tenant_id, c.execution_id, c.lease_token AS old_token, c.run_at FROM execution_queue c
     WHERE c.lease_token IS NULL AND c.run_at <= clock_timestamp()
       AND NOT (untriggered_only AND c.tenant_id IN (SELECT tenant_id FROM triggered))
     ORDER BY c.run_at
     LIMIT batch
     FOR UPDATE OF c SKIP LOCKED
  ), picked AS (
    SELECT * FROM (SELECT * FROM lapsed UNION ALL SELECT * FROM ready) due ORDER BY run_at LIMIT batch
  ), claimed AS (
    UPDATE execution_queue q
       SET lease_token = gen_random_uuid(), lease_owner = worker, claimed_at = clock_timestamp(),
           attempt = q.attempt + 1
      FROM picked
     WHERE q.tenant_id = picked.tenant_id AND q.execution_id = picked.execution_id
    RETURNING q.tenant_id, q.execution_id, q.attempt, q.lease_token, q.enqueued_at, q.run_at, q.cancel_requested,
              picked.old_token
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
