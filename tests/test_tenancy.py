"""Tenant isolation: every path through the API, and the database role underneath it."""

from __future__ import annotations

import uuid

import psycopg
import pytest

from helpers import ACCOUNT, CREATE_TRANSFER, create_account, funded_account, transfer

TRANSFER = """query($id: UUID!) { financial { transfer(id: $id) { id amount } } }"""
TRANSFERS = """query($account: UUID) { financial { transfers(accountId: $account, first: 500) { id } } }"""
ACCOUNTS = """{ financial { accounts(first: 500) { id } } }"""
CREATE_CLIENT = """mutation($id: UUID!) { clients { createClient(id: $id, input: {name: "teller", policies: []}) {
  id name enabled } } }"""
UPDATE_CLIENT = """mutation($id: UUID!) { clients { updateClient(id: $id, input: {name: "mine now", policies: []}) {
  id } } }"""
DISABLE_CLIENT = """mutation($id: UUID!) { clients { disableClient(id: $id) { id enabled } } }"""
ISSUE_TOKEN = """mutation($id: UUID!) { clients { issueToken(clientId: $id) { token } } }"""


@pytest.fixture
def theirs(other_api):
    """The other tenant's opening account, a funded account and one transfer between them."""
    opening, funded = funded_account(other_api, 100)
    moved = transfer(other_api, opening, funded, 5)
    return {"opening": opening, "funded": funded, "transfer": moved["id"]}


def _client_of(api) -> str:
    client_id = str(uuid.uuid4())
    api.gql(CREATE_CLIENT, {"id": client_id})
    return client_id


# ---------------------------------------------------------------------------- through the API


def test_account_of_another_tenant_reads_as_null(api, theirs):
    assert api.gql(ACCOUNT, {"id": theirs["funded"]})["financial"]["account"] is None


def test_account_listing_shows_only_own_tenants_accounts(api, other_api, theirs):
    mine = create_account(api)
    listed = [a["id"] for a in api.gql(ACCOUNTS)["financial"]["accounts"]]
    assert listed == [mine]


def test_transfer_of_another_tenant_reads_as_null(api, theirs):
    assert api.gql(TRANSFER, {"id": theirs["transfer"]})["financial"]["transfer"] is None


def test_transfer_listing_shows_only_own_tenants_transfers(api, theirs):
    opening, funded = funded_account(api, 0)
    mine = transfer(api, opening, funded, 7)["id"]
    assert api.gql(TRANSFERS, {"account": None})["financial"]["transfers"] == [{"id": mine}]


def test_transfers_by_another_tenants_account_are_empty(api, theirs):
    assert api.gql(TRANSFERS, {"account": theirs["funded"]})["financial"]["transfers"] == []


def test_transfer_from_another_tenants_account_is_not_found(api, other_api, theirs):
    mine = create_account(api, overdraft=True)
    error = api.error(CREATE_TRANSFER, {"id": str(uuid.uuid4()), "from": theirs["funded"], "to": mine, "amount": 1})
    assert error["extensions"]["code"] == "not_found"
    assert other_api.gql(ACCOUNT, {"id": theirs["funded"]})["financial"]["account"]["balance"] == 100 + 5


def test_transfer_to_another_tenants_account_is_not_found(api, theirs):
    opening = create_account(api, "opening", overdraft=True)
    error = api.error(CREATE_TRANSFER, {"id": str(uuid.uuid4()), "from": opening, "to": theirs["funded"], "amount": 1})
    assert error["extensions"]["code"] == "not_found"


def test_transfer_id_taken_in_another_tenant_is_free_in_this_one(api, theirs):
    opening, funded = funded_account(api, 0)
    made = api.gql(CREATE_TRANSFER, {"id": theirs["transfer"], "from": opening, "to": funded, "amount": 3})
    assert made["financial"]["createTransfer"]["id"] == theirs["transfer"]


def test_update_client_of_another_tenant_is_not_found(api, other_api):
    theirs = _client_of(other_api)
    assert api.error(UPDATE_CLIENT, {"id": theirs})["extensions"]["code"] == "not_found"


def test_disable_client_of_another_tenant_is_not_found(api, other_api):
    theirs = _client_of(other_api)
    assert api.error(DISABLE_CLIENT, {"id": theirs})["extensions"]["code"] == "not_found"
    # ... and it is still enabled for its own tenant.
    token = other_api.gql(ISSUE_TOKEN, {"id": theirs})["clients"]["issueToken"]["token"]
    assert other_api.gql("{ viewer { clientName } }", token=token)["viewer"]["clientName"] == "teller"


def test_issue_token_for_another_tenants_client_is_not_found(api, other_api):
    theirs = _client_of(other_api)
    assert api.error(ISSUE_TOKEN, {"id": theirs})["extensions"]["code"] == "not_found"


def test_disable_another_tenants_admin_is_not_found(api, other_api):
    assert api.error(DISABLE_CLIENT, {"id": str(other_api.client_id)})["extensions"]["code"] == "not_found"
    assert other_api.gql("{ viewer { clientName } }")["viewer"]["clientName"] == "admin"


# ---------------------------------------------------------------------------- the database role


def _as_app(db_url: str) -> psycopg.Connection:
    conn = psycopg.connect(db_url, autocommit=True)
    conn.execute("SET ROLE ledger_app")
    return conn


def test_app_role_without_a_tenant_sees_no_rows(db_url, api, theirs):
    create_account(api)
    with _as_app(db_url) as conn:
        for table in ("tenants", "clients", "accounts", "transfers"):
            assert conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == 0, table


def test_app_role_with_a_tenant_sees_only_that_tenants_rows(db_url, api, theirs):
    mine = create_account(api)
    with _as_app(db_url) as conn, conn.transaction():
        conn.execute("SELECT set_config('ledger.tenant_id', %s, true)", (str(api.tenant_id),))
        assert [r[0] for r in conn.execute("SELECT id::text FROM accounts")] == [mine]
        assert conn.execute("SELECT count(*) FROM transfers").fetchone()[0] == 0
        assert [r[0] for r in conn.execute("SELECT id FROM tenants")] == [api.tenant_id]


def test_app_role_cannot_write_a_row_of_another_tenant(db_url, api, other_api):
    with _as_app(db_url) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            with conn.transaction():
                conn.execute("SELECT set_config('ledger.tenant_id', %s, true)", (str(api.tenant_id),))
                conn.execute("INSERT INTO accounts (tenant_id, id, name, currency) VALUES (%s, %s, 'x', 'USD')",
                             (other_api.tenant_id, uuid.uuid4()))


def test_app_role_cannot_read_the_signing_key(db_url, services):
    with _as_app(db_url) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT value FROM ledger_secrets")


def test_app_role_is_neither_superuser_nor_bypasses_rls(db_url):
    with psycopg.connect(db_url) as conn:
        row = conn.execute("SELECT rolsuper, rolbypassrls, rolcreaterole, rolcreatedb FROM pg_roles"
                           " WHERE rolname = 'ledger_app'").fetchone()
    assert row == (False, False, False, False)


def test_app_role_owns_no_table(db_url):
    with psycopg.connect(db_url) as conn:
        owned = conn.execute("SELECT tablename FROM pg_tables WHERE tableowner = 'ledger_app'").fetchall()
    assert owned == []


def test_every_tenant_table_forces_row_level_security(db_url):
    with psycopg.connect(db_url) as conn:
        rows = conn.execute("SELECT relname, relrowsecurity, relforcerowsecurity FROM pg_class"
                            " WHERE relname IN ('tenants', 'clients', 'accounts', 'transfers')").fetchall()
    assert sorted(rows) == [(name, True, True) for name in ("accounts", "clients", "tenants", "transfers")]


def test_request_connections_act_as_the_app_role(services):
    with services.db.transaction(None) as conn:
        assert conn.execute("SELECT current_user").fetchone()["current_user"] == "ledger_app"


def test_every_table_with_a_tenant_id_has_row_level_security_for_the_app_role(db_url):
    with psycopg.connect(db_url) as conn:
        rows = conn.execute("""
            SELECT c.relname, c.relrowsecurity, (SELECT count(*) FROM pg_policy p WHERE p.polrelid = c.oid)
            FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p')
              AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'tenant_id'
                          AND NOT a.attisdropped)""").fetchall()
    assert {"accounts", "clients", "transfers"} <= {name for name, _, _ in rows}
    unprotected = [name for name, rls, policies in rows if not rls or policies == 0]
    assert unprotected == []
