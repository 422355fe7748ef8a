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
  lease_token uuid,
  lease_owner text,
  lease_expires_at timestamptz,
  claimed_at timestamptz,
  -- Set by cancelExecution on a running execution; the worker stops at its next check.
  cancel_requested boolean NOT NULL DEFAULT false,
  enqueued_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, execution_id),
  FOREIGN KEY (tenant_id, execution_id) REFERENCES executions (tenant_id, id)
);
-- Claimable work, oldest first (not tenant-first on purpose: workers claim across tenants).
CREATE INDEX execution_queue_ready ON execution_queue (run_at) WHERE lease_token IS NULL;
CREATE INDEX execution_queue_leases ON execution_queue (lease_expires_at) WHERE lease_token IS NOT NULL;

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
  UPDATE execution_queue q
     SET lease_token = gen_random_uuid(),
         lease_owner = worker,
         lease_expires_at = clock_timestamp() + make_interval(secs => lease_seconds),
         claimed_at = clock_timestamp(),
         attempt = q.attempt + 1
    FROM (SELECT c.tenant_id, c.execution_id FROM execution_queue c
           WHERE (c.lease_token IS NULL AND c.run_at <= clock_timestamp())
              OR (c.lease_token IS NOT NULL AND c.lease_expires_at < clock_timestamp())
           ORDER BY c.run_at
           LIMIT batch
           FOR UPDATE SKIP LOCKED) due
   WHERE q.tenant_id = due.tenant_id AND q.execution_id = due.execution_id
  RETURNING q.tenant_id, q.execution_id, q.attempt, q.lease_token, q.enqueued_at, q.run_at
$$;

-- Keep leases alive; returns the executions whose lease is still held (the others were lost).
CREATE FUNCTION ledger_renew_leases(tokens uuid[], lease_seconds double precision)
  RETURNS TABLE (lease_token uuid, cancel_requested boolean)
  LANGUAGE sql SECURITY DEFINER SET search_path = public
AS $$
  UPDATE execution_queue q
     SET lease_expires_at = clock_timestamp() + make_interval(secs => lease_seconds)
   WHERE q.lease_token = ANY(tokens)
  RETURNING q.lease_token, q.cancel_requested
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
