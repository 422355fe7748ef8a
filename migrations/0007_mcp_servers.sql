-- DESIGN 12: MCP servers, records that list tools for Model Context Protocol clients.
--
-- tools: the stored references, in the order listed ({name, actionId, actionVersion, input, confirm}, the
-- shape of an action's references). A deleted server keeps its row (executions name it by mcp_server_id)
-- and frees its name.

CREATE TABLE mcp_servers (
  tenant_id uuid NOT NULL REFERENCES tenants (id),
  id uuid NOT NULL,
  name text NOT NULL,
  description text,
  instructions text,
  tools jsonb NOT NULL DEFAULT '[]',
  policies jsonb NOT NULL DEFAULT '[]',
  enabled boolean NOT NULL DEFAULT true,
  deleted boolean NOT NULL DEFAULT false,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  created_by uuid,
  PRIMARY KEY (tenant_id, id)
);
CREATE UNIQUE INDEX mcp_servers_name ON mcp_servers (tenant_id, name) WHERE NOT deleted;
CREATE INDEX mcp_servers_listing ON mcp_servers (tenant_id, created_at, id);

ALTER TABLE mcp_servers ENABLE ROW LEVEL SECURITY;
ALTER TABLE mcp_servers FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON mcp_servers USING (tenant_id = ledger_current_tenant())
  WITH CHECK (tenant_id = ledger_current_tenant());
-- A delete is a flag (the row stays for the executions that name it): no DELETE grant.
GRANT SELECT, INSERT, UPDATE ON mcp_servers TO ledger_app;

-- The server a call was made through; null for a call not made through one.
ALTER TABLE executions ADD COLUMN mcp_server_id uuid;
