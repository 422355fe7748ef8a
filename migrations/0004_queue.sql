-- The queue of started executions. One row per execution that still has an attempt to make.
--
-- Workers serve every tenant, so claiming reads across tenants: `ledger_claim_executions` is a
-- SECURITY DEFINER function owned by the migrating (owner) role, and this table has row-level security
-- ENABLEd but not FORCEd, so that function (and only the owner) sees every tenant's rows. The
-- application role sees only its tenant's rows, like everywhere else. Claims carry a lease; the lease
-- token fences a worker whose lease lapsed from committing over the retry's outcome.

CREATE TABLE execution_queue (
  tenant_id uuid NOT NULL REFERENCES tenants (id),
  execution_id uuid NOT NULL,
  run_at timestamptz NOT NULL DEFAULT now(),
  attempt integer NOT NULL DEFAULT 0,
  -- The current claim; stable for the whole attempt (so the attempt's fence never conflicts with a
  -- heartbeat), renewed through execution_leases.
  lease_token uuid,
  lease_owner text,
  claimed_at timestamptz,
  enqueued_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, execution_id),
  FOREIGN KEY (tenant_id, execution_id) REFERENCES executions (tenant_id, id)
);
-- Claimable work, oldest first (not tenant-first on purpose: workers claim across tenants).
CREATE INDEX execution_queue_ready ON execution_queue (run_at) WHERE lease_token IS NULL;

-- Heartbeats renew these rows, never the queue row an attempt fences on.
CREATE TABLE execution_leases (
  lease_token uuid PRIMARY KEY,
  tenant_id uuid NOT NULL,
  execution_id uuid NOT NULL,
  expires_at timestamptz NOT NULL,
  -- Set by cancelExecution on a running execution; the worker stops at its next check.
  cancel_requested boolean NOT NULL DEFAULT false
);
CREATE INDEX execution_leases_execution ON execution_leases (tenant_id, execution_id);
ALTER TABLE execution_leases ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON execution_leases USING (tenant_id = ledger_current_tenant())
  WITH CHECK (tenant_id = ledger_current_tenant());
GRANT SELECT, UPDATE, DELETE ON execution_leases TO ledger_app;

ALTER TABLE execution_queue ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON execution_queue USING (tenant_id = ledger_current_tenant())
  WITH CHECK (tenant_id = ledger_current_tenant());
GRANT SELECT, INSERT, UPDATE, DELETE ON execution_queue TO ledger_app;

-- Claim up to `batch` executions that are due, or whose lease lapsed, in one statement.
CREATE FUNCTION ledger_claim_executions(worker text, batch integer, lease_seconds double precision)
  RETURNS TABLE (tenant_id uuid, execution_id uuid, attempt integer, lease_token uuid, enqueued_at timestamptz,
                 run_at timestamptz)
  LANGUAGE sql SECURITY DEFINER SET search_path = public
AS $$
  WITH due AS (
    SELECT c.tenant_id, c.execution_id, c.lease_token AS old_token FROM execution_queue c
     WHERE (c.lease_token IS NULL AND c.run_at <= clock_timestamp())
        OR (c.lease_token IS NOT NULL AND NOT EXISTS (
              SELECT 1 FROM execution_leases l WHERE l.lease_token = c.lease_token
                 AND l.expires_at >= clock_timestamp()))
     ORDER BY c.run_at
     LIMIT batch
     FOR UPDATE OF c SKIP LOCKED
  ), claimed AS (
    UPDATE execution_queue q
       SET lease_token = gen_random_uuid(), lease_owner = worker, claimed_at = clock_timestamp(),
           attempt = q.attempt + 1
      FROM due
     WHERE q.tenant_id = due.tenant_id AND q.execution_id = due.execution_id
    RETURNING q.tenant_id, q.execution_id, q.attempt, q.lease_token, q.enqueued_at, q.run_at, due.old_token
  ), dropped AS (
    DELETE FROM execution_leases l USING claimed WHERE l.lease_token = claimed.old_token
  ), leased AS (
    INSERT INTO execution_leases (lease_token, tenant_id, execution_id, expires_at)
    SELECT claimed.lease_token, claimed.tenant_id, claimed.execution_id,
           clock_timestamp() + make_interval(secs => lease_seconds) FROM claimed
  )
  SELECT claimed.tenant_id, claimed.execution_id, claimed.attempt, claimed.lease_token, claimed.enqueued_at,
         claimed.run_at FROM claimed
$$;

-- Keep leases alive; returns the executions whose lease is still held (the others were lost).
CREATE FUNCTION ledger_renew_leases(tokens uuid[], lease_seconds double precision)
  RETURNS TABLE (lease_token uuid, cancel_requested boolean)
  LANGUAGE sql SECURITY DEFINER SET search_path = public
AS $$
  UPDATE execution_leases l
     SET expires_at = clock_timestamp() + make_interval(secs => lease_seconds)
   WHERE l.lease_token = ANY(tokens)
  RETURNING l.lease_token, l.cancel_requested
$$;

-- Ready work across tenants, for the queue-depth gauge.
CREATE FUNCTION ledger_queue_depth() RETURNS bigint
  LANGUAGE sql SECURITY DEFINER SET search_path = public STABLE
AS $$ SELECT count(*) FROM execution_queue $$;

REVOKE ALL ON FUNCTION ledger_claim_executions(text, integer, double precision) FROM PUBLIC;
REVOKE ALL ON FUNCTION ledger_renew_leases(uuid[], double precision) FROM PUBLIC;
REVOKE ALL ON FUNCTION ledger_queue_depth() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ledger_claim_executions(text, integer, double precision) TO ledger_app;
GRANT EXECUTE ON FUNCTION ledger_renew_leases(uuid[], double precision) TO ledger_app;
GRANT EXECUTE ON FUNCTION ledger_queue_depth() TO ledger_app;
