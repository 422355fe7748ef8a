-- DESIGN 15: triggers, record events that start executions in the writing transaction.
--
-- triggers: one row per trigger; a delete flags the row (the executions it started keep naming it) and
-- frees its name. client_id: the client that wrote it last, whose authority its runs carry.
--
-- trigger_versions: one counter per tenant, raised by every trigger write in the same transaction. Each
-- process keeps the tenant's enabled triggers in memory under the version it loaded them at; a request
-- reads the version in the statement it already sends first (its client row), so finding "no trigger on
-- this event" costs no round trip, and a trigger written by any process is seen by the next transaction
-- of every other one (the version is read in that transaction's own snapshot).

CREATE TABLE triggers (
  tenant_id uuid NOT NULL REFERENCES tenants (id),
  id uuid NOT NULL,
  name text NOT NULL,
  event text NOT NULL,
  condition text,
  action_id uuid NOT NULL,
  action_version integer,
  input jsonb,
  enabled boolean NOT NULL DEFAULT true,
  client_id uuid NOT NULL,
  deleted boolean NOT NULL DEFAULT false,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, id)
);
CREATE UNIQUE INDEX triggers_name ON triggers (tenant_id, name) WHERE NOT deleted;
CREATE INDEX triggers_listing ON triggers (tenant_id, created_at, id);

CREATE TABLE trigger_versions (
  tenant_id uuid PRIMARY KEY REFERENCES tenants (id),
  version bigint NOT NULL
);

DO $$
DECLARE
  t text;
BEGIN
  FOREACH t IN ARRAY ARRAY['triggers', 'trigger_versions'] LOOP
    EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
    EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', t);
    EXECUTE format('CREATE POLICY tenant_isolation ON %I USING (tenant_id = ledger_current_tenant()) '
                   'WITH CHECK (tenant_id = ledger_current_tenant())', t);
  END LOOP;
END
$$;
-- A delete is a flag: no DELETE grant.
GRANT SELECT, INSERT, UPDATE ON triggers TO ledger_app;
GRANT SELECT, INSERT, UPDATE ON trigger_versions TO ledger_app;

-- The trigger that queued a run (null otherwise), and every execution's trigger depth: 0 for what a
-- client did, 1 for a run fired by a client's write, one more for each trigger-started run in between.
ALTER TABLE executions ADD COLUMN trigger_id uuid;
ALTER TABLE executions ADD COLUMN trigger_depth integer NOT NULL DEFAULT 0;
CREATE INDEX executions_by_trigger ON executions (tenant_id, trigger_id, created_at, id) WHERE trigger_id IS NOT NULL;
CREATE INDEX executions_top_level ON executions (tenant_id, created_at, id) WHERE parent_execution_id IS NULL;
