-- Executions (one per call, started run, or nested call) and their invocations (one per attempt).

CREATE TABLE executions (
  tenant_id uuid NOT NULL REFERENCES tenants (id),
  id uuid NOT NULL,
  action_id uuid NOT NULL,
  action_version integer NOT NULL,
  status text NOT NULL CHECK (status IN ('QUEUED', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELLED')),
  parent_execution_id uuid,
  root_execution_id uuid NOT NULL,
  call_sequence integer,
  depth integer NOT NULL DEFAULT 0,
  attempts integer NOT NULL DEFAULT 0,
  -- Started (queued) executions: who started them, with which authority, and when they may run.
  started boolean NOT NULL DEFAULT false,
  started_by_execution_id uuid,
  client_id uuid NOT NULL,
  client_claims jsonb,
  run_at timestamptz,
  event jsonb NOT NULL,
  -- The input exactly as received (jsonb keeps numbers beyond 64 bits exactly).
  input jsonb,
  session_id uuid,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, id)
);
CREATE INDEX executions_children ON executions (tenant_id, parent_execution_id, call_sequence)
  WHERE parent_execution_id IS NOT NULL;
CREATE INDEX executions_unfinished_starts ON executions (tenant_id, action_id)
  WHERE started AND status IN ('QUEUED', 'RUNNING');
CREATE INDEX executions_listing ON executions (tenant_id, created_at, id);

CREATE TABLE invocations (
  tenant_id uuid NOT NULL,
  execution_id uuid NOT NULL,
  attempt integer NOT NULL,
  input jsonb,
  output jsonb,
  error jsonb,
  tools jsonb NOT NULL DEFAULT '[]',
  logs jsonb NOT NULL DEFAULT '[]',
  started_at timestamptz,
  finished_at timestamptz,
  duration_ms double precision,
  output_bytes integer,
  PRIMARY KEY (tenant_id, execution_id, attempt),
  FOREIGN KEY (tenant_id, execution_id) REFERENCES executions (tenant_id, id) ON DELETE CASCADE
);

CREATE TABLE sessions (
  tenant_id uuid NOT NULL REFERENCES tenants (id),
  id uuid NOT NULL,
  action_id uuid NOT NULL,
  client_id uuid NOT NULL,
  input jsonb,
  closed boolean NOT NULL DEFAULT false,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, id)
);
-- One open session per (client, action): a concurrent find-or-create meets this index.
CREATE UNIQUE INDEX sessions_open ON sessions (tenant_id, client_id, action_id) WHERE NOT closed;

CREATE TABLE session_inputs (
  tenant_id uuid NOT NULL,
  session_id uuid NOT NULL,
  execution_id uuid NOT NULL,
  action_id uuid NOT NULL,
  client_id uuid NOT NULL,
  input jsonb,
  created_at timestamptz NOT NULL DEFAULT now(),
  seq bigserial,
  PRIMARY KEY (tenant_id, session_id, execution_id),
  FOREIGN KEY (tenant_id, session_id) REFERENCES sessions (tenant_id, id)
);

DO $$
DECLARE
  t text;
BEGIN
  FOREACH t IN ARRAY ARRAY['executions', 'invocations', 'sessions', 'session_inputs'] LOOP
    EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
    EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', t);
    EXECUTE format('CREATE POLICY tenant_isolation ON %I USING (tenant_id = ledger_current_tenant()) '
                   'WITH CHECK (tenant_id = ledger_current_tenant())', t);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE ON %I TO ledger_app', t);
  END LOOP;
END
$$;
GRANT USAGE ON SEQUENCE session_inputs_seq_seq TO ledger_app;
