-- The action registry: one header row per action, one immutable row per written version.

CREATE TABLE actions (
  tenant_id uuid NOT NULL REFERENCES tenants (id),
  id uuid NOT NULL,
  name text NOT NULL,
  kind text NOT NULL,
  status text NOT NULL DEFAULT 'UNPUBLISHED'
    CHECK (status IN ('UNPUBLISHED', 'ACTIVE', 'DISABLED', 'DELETED')),
  pending text CHECK (pending IN ('DISABLE', 'DELETE')),
  latest_version integer NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, id)
);
-- A registry name is unique per tenant among actions that are not deleted.
CREATE UNIQUE INDEX actions_name ON actions (tenant_id, name) WHERE status <> 'DELETED';
CREATE INDEX actions_listing ON actions (tenant_id, created_at, id);

CREATE TABLE action_versions (
  tenant_id uuid NOT NULL,
  action_id uuid NOT NULL,
  version integer NOT NULL CHECK (version > 0),
  -- The normalized definition (contract field names), compared to detect a no-op update.
  definition jsonb NOT NULL,
  enabled boolean NOT NULL DEFAULT true,
  created_by uuid,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, action_id, version),
  FOREIGN KEY (tenant_id, action_id) REFERENCES actions (tenant_id, id)
);

DO $$
DECLARE
  t text;
BEGIN
  FOREACH t IN ARRAY ARRAY['actions', 'action_versions'] LOOP
    EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
    EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', t);
    EXECUTE format('CREATE POLICY tenant_isolation ON %I USING (tenant_id = ledger_current_tenant()) '
                   'WITH CHECK (tenant_id = ledger_current_tenant())', t);
  END LOOP;
END
$$;
GRANT SELECT, INSERT, UPDATE ON actions TO ledger_app;
-- Versions are immutable: the application may add them, never change them.
GRANT SELECT, INSERT ON action_versions TO ledger_app;
