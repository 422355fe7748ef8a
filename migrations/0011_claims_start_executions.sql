-- A claim marks its executions RUNNING in the same statement, with no global lock, and drops the leases
-- of the attempts its worker finished since its last claim (an attempt cannot drop its own: heartbeats
-- update that row while the attempt's snapshot is open). So a queued execution costs two durable commits:
-- the claim, and the attempt with its outcome.

-- Set by cancelExecution on a running execution, beside its lease's flag: the attempt's fence locks this
-- row when it finishes, and a cancel made after the attempt's snapshot makes that lock fail as a lost race,
-- so the attempt runs again at once, finds the flag, and is cancelled instead of committing.
ALTER TABLE execution_queue ADD COLUMN cancel_requested boolean NOT NULL DEFAULT false;

-- Whether a lease is held, read with a snapshot of its own (VOLATILE: one per call, in READ COMMITTED).
-- A claim meeting a row that a concurrent claim just took re-checks that row's new version, and this
-- function then sees the new lease that committed with it; a subquery would still use the claim's older
-- snapshot and claim the row a second time (why claims used to take turns on an advisory lock).
CREATE FUNCTION ledger_lease_held(token uuid) RETURNS boolean
  LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = public
AS $$
BEGIN
  RETURN EXISTS (SELECT 1 FROM execution_leases l WHERE l.lease_token = token AND l.expires_at >= clock_timestamp());
END
$$;

-- Claim up to `batch` due executions (or ones whose lease lapsed), lease them, and mark them RUNNING with
-- one more attempt, unless a cancel is pending (the attempt then records the cancel without running).
-- `finished`: leases of attempts that ended, dropped here; leases long expired and referenced by no queue
-- row (those of a worker that died before its next claim) go too.
CREATE FUNCTION ledger_claim_and_start(worker text, batch integer, lease_seconds double precision, finished uuid[])
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
     WHERE (c.lease_token IS NULL AND c.run_at <= clock_timestamp())
        OR (c.lease_token IS NOT NULL AND NOT ledger_lease_held(c.lease_token))
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

REVOKE ALL ON FUNCTION ledger_lease_held(uuid) FROM PUBLIC;
REVOKE ALL ON FUNCTION ledger_claim_and_start(text, integer, double precision, uuid[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ledger_claim_and_start(text, integer, double precision, uuid[]) TO ledger_app;
