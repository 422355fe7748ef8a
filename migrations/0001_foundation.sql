-- The foundation: tenants, clients, the financial records, and row-level security.
--
-- Every tenant-owned table is keyed by tenant_id first (primary key and indexes), so the schema
-- distributes by tenant on Citus unchanged. The application role `ledger_app` is neither superuser
-- nor owner, so row-level security always applies to it; FORCE makes it apply to the owner too.

DO $$
BEGIN
  CREATE ROLE ledger_app NOLOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
  NULL;
END
$$;

-- Lets a non-superuser owner SET ROLE ledger_app.
GRANT ledger_app TO CURRENT_USER;

GRANT USAGE ON SCHEMA public TO ledger_app;

-- The tenant of the current transaction; NULL when unset (then every tenant-owned row is invisible).
CREATE FUNCTION ledger_current_tenant() RETURNS uuid
  LANGUAGE sql STABLE PARALLEL SAFE
  AS $$ SELECT nullif(current_setting('ledger.tenant_id', true), '')::uuid $$;

-- Secrets readable by the owner role only (the JWT signing key).
CREATE TABLE ledger_secrets (
  name text PRIMARY KEY,
  value text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);
REVOKE ALL ON ledger_secrets FROM PUBLIC;

CREATE TABLE tenants (
  id uuid PRIMARY KEY,
  name text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE clients (
  tenant_id uuid NOT NULL REFERENCES tenants (id),
  id uuid NOT NULL,
  name text NOT NULL,
  enabled boolean NOT NULL DEFAULT true,
  policies jsonb NOT NULL DEFAULT '[]',
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, id)
);

CREATE TABLE accounts (
  tenant_id uuid NOT NULL REFERENCES tenants (id),
  id uuid NOT NULL,
  name text NOT NULL,
  currency text NOT NULL,
  balance bigint NOT NULL DEFAULT 0,
  allow_overdraft boolean NOT NULL DEFAULT false,
  execution_id uuid,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, id),
  CONSTRAINT balance_not_below_zero CHECK (allow_overdraft OR balance >= 0)
);
CREATE INDEX accounts_listing ON accounts (tenant_id, created_at, id);

CREATE TABLE transfers (
  tenant_id uuid NOT NULL REFERENCES tenants (id),
  id uuid NOT NULL,
  from_account_id uuid NOT NULL,
  to_account_id uuid NOT NULL,
  amount bigint NOT NULL CHECK (amount > 0),
  currency text NOT NULL,
  memo text,
  execution_id uuid,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, id),
  FOREIGN KEY (tenant_id, from_account_id) REFERENCES accounts (tenant_id, id),
  FOREIGN KEY (tenant_id, to_account_id) REFERENCES accounts (tenant_id, id),
  CHECK (from_account_id <> to_account_id)
);
CREATE INDEX transfers_listing ON transfers (tenant_id, created_at, id);
CREATE INDEX transfers_from ON transfers (tenant_id, from_account_id, created_at, id);
CREATE INDEX transfers_to ON transfers (tenant_id, to_account_id, created_at, id);

DO $$
DECLARE
  t text;
BEGIN
  FOREACH t IN ARRAY ARRAY['clients', 'accounts', 'transfers'] LOOP
    EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
    EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', t);
    EXECUTE format('CREATE POLICY tenant_isolation ON %I USING (tenant_id = ledger_current_tenant()) '
                   'WITH CHECK (tenant_id = ledger_current_tenant())', t);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE ON %I TO ledger_app', t);
  END LOOP;
END
$$;

ALTER TABLE tenants ENABLE ROW LEVEL SECURITY;
ALTER TABLE tenants FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON tenants USING (id = ledger_current_tenant())
  WITH CHECK (id = ledger_current_tenant());
GRANT SELECT, INSERT ON tenants TO ledger_app;
