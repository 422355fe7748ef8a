-- DESIGN 14: planned actions. A model's call through a `confirm: true` reference does not run its tool: it
-- records a plan here, which a person (another client) confirms or rejects; the worker expires it.
--
-- client_id / client_claims: the proposer's client and the claims of the token it proposed with (the
-- principal the tool layers of a confirmed run see). stack: the action versions on the proposing call stack,
-- outermost first ([{actionId, version}]). mcp_server_id or agent_action_id/agent_action_version: the
-- proposing server or agent. decided_claims: the confirmer's claims (their token's expiry binds the run).
--
-- The worker settles expiry across tenants: `ledger_due_planned_actions` is a SECURITY DEFINER function
-- owned by the migrating (owner) role, and this table has row level security ENABLEd but not FORCEd (as
-- execution_queue), so that function sees every tenant's due plans; each expiry is then written by the
-- application role in a transaction of that tenant, under row level security like any other write.

CREATE TABLE planned_actions (
  tenant_id uuid NOT NULL REFERENCES tenants (id),
  id uuid NOT NULL,
  action_id uuid NOT NULL,
  action_version integer NOT NULL,
  input jsonb,
  status text NOT NULL DEFAULT 'PROPOSED' CHECK (status IN ('PROPOSED', 'CONFIRMED', 'REJECTED', 'EXPIRED')),
  preview jsonb NOT NULL,
  proposed_by_execution_id uuid,
  proposal_execution_id uuid,
  client_id uuid NOT NULL,
  client_claims jsonb NOT NULL DEFAULT '{}',
  mcp_server_id uuid,
  agent_action_id uuid,
  agent_action_version integer,
  stack jsonb NOT NULL DEFAULT '[]',
  expires_at timestamptz NOT NULL,
  decided_by uuid,
  decided_at timestamptz,
  decided_claims jsonb,
  reason text,
  execution_id uuid,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, id)
);
CREATE INDEX planned_actions_listing ON planned_actions (tenant_id, created_at, id);
-- What the worker expires (not tenant-first on purpose: the sweep reads across tenants).
CREATE INDEX planned_actions_due ON planned_actions (expires_at) WHERE status = 'PROPOSED';

ALTER TABLE planned_actions ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON planned_actions USING (tenant_id = ledger_current_tenant())
  WITH CHECK (tenant_id = ledger_current_tenant());
-- A plan is never deleted: its decision is the record of who allowed what.
GRANT SELECT, INSERT, UPDATE ON planned_actions TO ledger_app;

-- Up to `batch` PROPOSED plans whose expiry has passed, oldest first.
CREATE FUNCTION ledger_due_planned_actions(batch integer)
  RETURNS TABLE (tenant_id uuid, id uuid)
  LANGUAGE sql SECURITY DEFINER SET search_path = public STABLE
AS $$
  SELECT p.tenant_id, p.id FROM planned_actions p
   WHERE p.status = 'PROPOSED' AND p.expires_at <= clock_timestamp()
   ORDER BY p.expires_at
   LIMIT batch
$$;
REVOKE ALL ON FUNCTION ledger_due_planned_actions(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ledger_due_planned_actions(integer) TO ledger_app;

-- The plan a started execution was confirmed from: its attempts run under the plan's chain (DESIGN 14).
ALTER TABLE executions ADD COLUMN planned_action_id uuid;
