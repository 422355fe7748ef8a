"""A request's opening (ledger/db/pool.py `Database.transaction` with an `opener`): BEGIN, then one
statement that sets the tenant and the request's statement_timeout and reads the client
(`ledger_open_request`, migration 0013), in one round trip."""

from __future__ import annotations

import time

from ledger.auth.clients import load_principal, opening_query

from helpers import ACCOUNT, funded_account

_SETTINGS = ("SELECT current_setting('ledger.tenant_id') AS tenant, current_setting('statement_timeout') AS timeout,"
             " current_setting('transaction_isolation') AS isolation")


def _timeout_ms(setting: str) -> int:
    return int(setting[:-2]) if setting.endswith("ms") else int(setting[:-1]) * 1000


def test_the_opener_sets_the_tenant_and_the_deadline_and_reads_the_client(services, api):
    with services.db.transaction(api.tenant_id, deadline=time.monotonic() + 5,
                                 opener=opening_query(api.client_id)) as conn:
        settings = conn.execute(_SETTINGS).fetchone()
        (client,) = conn.ledger_first
    assert settings["tenant"] == str(api.tenant_id) and settings["isolation"] == "repeatable read"
    assert 4000 <= _timeout_ms(settings["timeout"]) <= 5000
    assert client["enabled"] is True and isinstance(client["policies"], str) and client["triggers_version"] is None


def test_the_opener_comes_before_the_statements_sent_with_it(services, api):
    with services.db.transaction(api.tenant_id, deadline=time.monotonic() + 5,
                                 opener=opening_query(api.client_id),
                                 first=[("SELECT current_setting('ledger.tenant_id') AS tenant", None)]) as conn:
        client, seen = conn.ledger_first
    assert client["enabled"] is True and seen == {"tenant": str(api.tenant_id)}


def test_the_opener_reads_no_client_of_another_tenant(services, api, other_api):
    with services.db.transaction(api.tenant_id, deadline=time.monotonic() + 5,
                                 opener=opening_query(other_api.client_id)) as conn:
        assert conn.ledger_first == [None]
        assert conn.execute(_SETTINGS).fetchone()["tenant"] == str(api.tenant_id)


def test_a_request_reads_under_the_tenant_its_opener_set(api, other_api):
    _, funded = funded_account(api, 10)
    assert api.gql(ACCOUNT, {"id": funded})["financial"]["account"]["balance"] == 10
    assert other_api.gql(ACCOUNT, {"id": funded})["financial"]["account"] is None


def test_the_openings_policies_text_decodes_to_what_the_jsonb_loader_reads(services, api):
    with services.db.transaction(api.tenant_id, deadline=time.monotonic() + 5,
                                 opener=opening_query(api.client_id)) as conn:
        (client,) = conn.ledger_first
        _, from_text = load_principal(conn, api.tenant_id, api.client_id, {}, row=client)
        _, from_jsonb = load_principal(conn, api.tenant_id, api.client_id, {})
    assert from_text == from_jsonb and from_text
