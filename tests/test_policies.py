"""Policy semantics over HTTP: a client created with policies, given a token, acting as itself."""

from __future__ import annotations

import uuid

import pytest

from helpers import ACCOUNT, CREATE_ACCOUNT, CREATE_TRANSFER, create_account, funded_account, transfer

CREATE_CLIENT = """mutation($id: UUID!, $name: String!, $policies: [PolicyStatementInput!]!) {
  clients { createClient(id: $id, input: {name: $name, policies: $policies}) {
    id name enabled policies { effect actions resources assertion } } } }"""
UPDATE_CLIENT = """mutation($id: UUID!, $policies: [PolicyStatementInput!]!) {
  clients { updateClient(id: $id, input: {name: "reader", policies: $policies}) { id } } }"""
ISSUE_TOKEN = """mutation($id: UUID!) { clients { issueToken(clientId: $id) { token } } }"""
ACCOUNTS = """query($first: Int) { financial { accounts(first: $first) { id currency } } }"""
TRANSFERS = """query($account: UUID) { financial { transfers(accountId: $account) { id } } }"""
TRANSFER = """query($id: UUID!) { financial { transfer(id: $id) { id } } }"""

USD_ONLY = 'context.document.currency == "USD"'


def allow(actions, resources, assertion=None) -> dict:
    return {"effect": "ALLOW", "actions": list(actions), "resources": list(resources), "assertion": assertion}


def deny(actions, resources, assertion=None) -> dict:
    return {"effect": "DENY", "actions": list(actions), "resources": list(resources), "assertion": assertion}


def as_client(api, policies: list[dict], name: str = "reader"):
    """A new client of the tenant with `policies`, and an Api acting as it."""
    client_id = str(uuid.uuid4())
    api.gql(CREATE_CLIENT, {"id": client_id, "name": name, "policies": policies})
    token = api.gql(ISSUE_TOKEN, {"id": client_id})["clients"]["issueToken"]["token"]
    acting = api.as_client(token)
    acting.client_id = uuid.UUID(client_id)
    return acting


def read_account(api, account_id: str):
    return api.post(ACCOUNT, {"id": account_id}).json()


@pytest.fixture
def usd_and_eur(api):
    return create_account(api, "dollars", "USD"), create_account(api, "euros", "EUR")


# ---------------------------------------------------------------------------- documents


def test_allow_with_assertion_on_document_allows_a_matching_record(api, usd_and_eur):
    usd, _ = usd_and_eur
    reader = as_client(api, [allow(["SELECT"], ["financial.Account.document"], USD_ONLY)])
    assert reader.gql(ACCOUNT, {"id": usd})["financial"]["account"]["id"] == usd


def test_allow_with_assertion_on_document_denies_another_record(api, usd_and_eur):
    _, eur = usd_and_eur
    reader = as_client(api, [allow(["SELECT"], ["financial.Account.document"], USD_ONLY)])
    body = read_account(reader, eur)
    assert body["data"]["financial"]["account"] is None
    assert body["errors"][0]["extensions"]["code"] == "permission_denied"


def test_permission_denied_hint_names_operation_resource_and_layer(api, usd_and_eur):
    _, eur = usd_and_eur
    reader = as_client(api, [allow(["SELECT"], ["financial.Account.document"], USD_ONLY)], name="auditor")
    hint = read_account(reader, eur)["errors"][0]["extensions"]["hint"]
    assert "SELECT" in hint
    assert "financial.Account.document" in hint
    assert f'client "auditor" ({reader.client_id})' in hint


def test_read_by_id_of_a_missing_record_is_null_even_without_grants(api):
    reader = as_client(api, [])
    assert reader.gql(ACCOUNT, {"id": str(uuid.uuid4())})["financial"]["account"] is None


def test_default_deny_without_any_statement(api, usd_and_eur):
    usd, _ = usd_and_eur
    reader = as_client(api, [])
    assert read_account(reader, usd)["errors"][0]["extensions"]["code"] == "permission_denied"


def test_statement_for_another_operation_does_not_grant(api, usd_and_eur):
    usd, _ = usd_and_eur
    reader = as_client(api, [allow(["INSERT", "UPDATE"], ["financial.Account.document"])])
    assert read_account(reader, usd)["errors"][0]["extensions"]["code"] == "permission_denied"


def test_statement_for_another_resource_does_not_grant(api, usd_and_eur):
    usd, _ = usd_and_eur
    reader = as_client(api, [allow(["SELECT"], ["financial.Transfer.*"])])
    assert read_account(reader, usd)["errors"][0]["extensions"]["code"] == "permission_denied"


def test_assertion_on_principal_sees_the_callers_client(api, usd_and_eur):
    usd, _ = usd_and_eur
    reader = as_client(api, [allow(["SELECT"], ["financial.Account.document"],
                                   'principal.tenant == context.document.tenant_id && principal.client != ""')])
    assert reader.gql(ACCOUNT, {"id": usd})["financial"]["account"]["id"] == usd


def test_uuid_function_in_an_assertion_compares_canonical_ids(api, usd_and_eur):
    usd, eur = usd_and_eur
    shouted = usd.upper().replace("-", "")
    reader = as_client(api, [allow(["SELECT"], ["financial.Account.document"],
                                   f'context.document.id == uuid("{shouted}")')])
    assert reader.gql(ACCOUNT, {"id": usd})["financial"]["account"]["id"] == usd
    assert read_account(reader, eur)["errors"][0]["extensions"]["code"] == "permission_denied"


def test_uuid_of_a_malformed_string_cannot_be_evaluated_so_allow_does_not_grant(api, usd_and_eur):
    usd, _ = usd_and_eur
    reader = as_client(api, [allow(["SELECT"], ["financial.Account.document"],
                                   'context.document.id == uuid("not-a-uuid")')])
    assert read_account(reader, usd)["errors"][0]["extensions"]["code"] == "permission_denied"


# ---------------------------------------------------------------------------- DENY


def test_deny_overrides_allow(api, usd_and_eur):
    usd, eur = usd_and_eur
    reader = as_client(api, [
        allow(["SELECT"], ["financial.*"]),
        deny(["SELECT"], ["financial.Account.document"], 'context.document.currency == "EUR"'),
    ])
    assert reader.gql(ACCOUNT, {"id": usd})["financial"]["account"]["id"] == usd
    assert read_account(reader, eur)["errors"][0]["extensions"]["code"] == "permission_denied"


def test_deny_listed_before_allow_still_wins(api, usd_and_eur):
    usd, _ = usd_and_eur
    reader = as_client(api, [deny(["SELECT"], ["financial.Account.document"]),
                             allow(["SELECT"], ["financial.Account.document"])])
    assert read_account(reader, usd)["errors"][0]["extensions"]["code"] == "permission_denied"


def test_deny_whose_assertion_cannot_be_evaluated_on_a_document_applies(api, usd_and_eur):
    usd, _ = usd_and_eur
    reader = as_client(api, [allow(["SELECT"], ["financial.*"]),
                             deny(["SELECT"], ["financial.Account.document"], "context.document.no_such_column == 1")])
    error = read_account(reader, usd)["errors"][0]
    assert error["extensions"]["code"] == "permission_denied"
    assert "cannot be evaluated" in error["extensions"]["hint"]


def test_deny_with_document_assertion_denies_the_index(api, usd_and_eur):
    reader = as_client(api, [allow(["SELECT"], ["financial.*"]),
                             deny(["SELECT"], ["financial.Account.*"], 'context.document.currency == "EUR"')])
    error = reader.error(ACCOUNTS, {"first": 10})
    assert error["extensions"]["code"] == "permission_denied"
    assert "financial.Account.indexes.all" in error["extensions"]["hint"]


# ---------------------------------------------------------------------------- indexes and listings


def test_listing_needs_the_index_resource(api, usd_and_eur):
    reader = as_client(api, [allow(["SELECT"], ["financial.Account.document"])])
    error = reader.error(ACCOUNTS, {"first": 10})
    assert error["extensions"]["code"] == "permission_denied"
    assert "financial.Account.indexes.all" in error["extensions"]["hint"]


def test_allow_with_document_assertion_does_not_grant_the_index(api, usd_and_eur):
    reader = as_client(api, [allow(["SELECT"], ["financial.Account.*"], USD_ONLY)])
    assert reader.error(ACCOUNTS, {"first": 10})["extensions"]["code"] == "permission_denied"


def test_listing_leaves_out_documents_the_reader_cannot_select(api, usd_and_eur):
    usd, _ = usd_and_eur
    reader = as_client(api, [allow(["SELECT"], ["financial.Account.indexes.all"]),
                             allow(["SELECT"], ["financial.Account.document"], USD_ONLY)])
    assert reader.gql(ACCOUNTS, {"first": 10})["financial"]["accounts"] == [{"id": usd, "currency": "USD"}]


def test_listing_page_counts_only_visible_documents(api):
    hidden = [create_account(api, f"euro {i}", "EUR") for i in range(3)]
    visible = [create_account(api, f"dollar {i}", "USD") for i in range(2)]
    reader = as_client(api, [allow(["SELECT"], ["financial.Account.indexes.all"]),
                             allow(["SELECT"], ["financial.Account.document"], USD_ONLY)])
    first = reader.gql(ACCOUNTS, {"first": 1})["financial"]["accounts"]
    assert [a["currency"] for a in first] == ["USD"]
    assert len(hidden) == 3 and first[0]["id"] in visible


def test_transfer_listing_needs_its_index(api):
    opening, funded = funded_account(api, 10)
    reader = as_client(api, [allow(["SELECT"], ["financial.Transfer.document", "financial.Transfer.indexes.all"])])
    assert len(reader.gql(TRANSFERS, {"account": None})["financial"]["transfers"]) == 1
    error = reader.error(TRANSFERS, {"account": funded})
    assert error["extensions"]["code"] == "permission_denied"
    assert "financial.Transfer.indexes.by_account" in error["extensions"]["hint"]


def test_transfers_by_account_with_its_index(api):
    opening, funded = funded_account(api, 10)
    reader = as_client(api, [allow(["SELECT"], ["financial.Transfer.document", "financial.Transfer.indexes.by_account"])])
    assert len(reader.gql(TRANSFERS, {"account": funded})["financial"]["transfers"]) == 1
    assert reader.error(TRANSFERS, {"account": None})["extensions"]["code"] == "permission_denied"


def test_transfer_read_by_id_checks_its_document(api):
    opening, funded = funded_account(api, 0)
    moved = transfer(api, opening, funded, 10)["id"]
    reader = as_client(api, [allow(["SELECT"], ["financial.Transfer.document"], "context.document.amount > 100")])
    assert reader.error(TRANSFER, {"id": moved})["extensions"]["code"] == "permission_denied"


# ---------------------------------------------------------------------------- writing policies


def test_bad_cel_assertion_is_rejected_at_create_client_with_problems(api):
    error = api.error(CREATE_CLIENT, {"id": str(uuid.uuid4()), "name": "broken", "policies": [
        allow(["SELECT"], ["financial.*"]),
        allow(["SELECT"], ["financial.Account.document"], "context.document.currency ==== 'USD'"),
    ]})
    assert error["extensions"]["code"] == "policy_invalid"
    assert [p["path"] for p in error["extensions"]["problems"]] == ["policies[1].assertion"]


def test_every_problem_of_the_policies_is_reported(api):
    error = api.error(CREATE_CLIENT, {"id": str(uuid.uuid4()), "name": "broken", "policies": [
        allow(["SELECT"], ["financial..Account"]),
        allow(["SELECT"], ["financial.*"], "1 +"),
        allow([], ["financial.*"]),
    ]})
    paths = sorted(p["path"] for p in error["extensions"]["problems"])
    assert paths == ["policies[0].resources[0]", "policies[1].assertion", "policies[2].actions"]


def test_rejected_client_is_not_created(api):
    client_id = str(uuid.uuid4())
    api.error(CREATE_CLIENT, {"id": client_id, "name": "broken", "policies": [allow(["SELECT"], ["*"], "(")]})
    error = api.error(ISSUE_TOKEN, {"id": client_id})
    assert error["extensions"]["code"] == "not_found"


def test_non_boolean_assertion_is_rejected(api):
    error = api.error(CREATE_CLIENT, {"id": str(uuid.uuid4()), "name": "broken", "policies": [
        allow(["SELECT"], ["financial.*"], '"yes"')]})
    assert error["extensions"]["code"] == "policy_invalid"


def test_created_client_returns_its_policies(api):
    policies = [allow(["SELECT"], ["financial.Account.document"], USD_ONLY)]
    client = api.gql(CREATE_CLIENT, {"id": str(uuid.uuid4()), "name": "reader", "policies": policies})
    assert client["clients"]["createClient"]["policies"] == policies
    assert client["clients"]["createClient"]["enabled"] is True


def test_new_policies_apply_to_the_very_next_request(api, usd_and_eur):
    usd, _ = usd_and_eur
    reader = as_client(api, [allow(["SELECT"], ["financial.Account.document"])])
    assert reader.gql(ACCOUNT, {"id": usd})["financial"]["account"]["id"] == usd
    api.gql(UPDATE_CLIENT, {"id": str(reader.client_id), "policies": []})
    assert read_account(reader, usd)["errors"][0]["extensions"]["code"] == "permission_denied"


def test_client_administration_needs_the_client_document(api):
    reader = as_client(api, [allow(["SELECT"], ["financial.*"])])
    error = reader.error(CREATE_CLIENT, {"id": str(uuid.uuid4()), "name": "escalated",
                                         "policies": [allow(["SELECT", "INSERT", "UPDATE"], ["financial.*"])]})
    assert error["extensions"]["code"] == "permission_denied"
    assert "financial.Client.document" in error["extensions"]["hint"]


def test_issuing_a_token_needs_update_on_the_client(api):
    reader = as_client(api, [allow(["SELECT", "INSERT"], ["financial.Client.document"])])
    error = reader.error(ISSUE_TOKEN, {"id": str(api.client_id)})
    assert error["extensions"]["code"] == "permission_denied"
    assert "UPDATE" in error["extensions"]["hint"]


# ---------------------------------------------------------------------------- writes


def test_create_account_needs_insert_with_the_new_values(api):
    writer = as_client(api, [allow(["INSERT"], ["financial.Account.document"], USD_ONLY)])
    made = writer.gql(CREATE_ACCOUNT, {"id": str(uuid.uuid4()), "name": "a", "currency": "USD"})
    assert made["financial"]["createAccount"]["currency"] == "USD"
    error = writer.error(CREATE_ACCOUNT, {"id": str(uuid.uuid4()), "name": "b", "currency": "EUR"})
    assert error["extensions"]["code"] == "permission_denied"


def _transfer_as(client, source: str, target: str, amount: int = 1) -> dict:
    return client.post(CREATE_TRANSFER, {"id": str(uuid.uuid4()), "from": source, "to": target,
                                         "amount": amount}).json()


def test_create_transfer_with_insert_and_select_on_both_accounts(api):
    opening, funded = funded_account(api, 10)
    mover = as_client(api, [allow(["INSERT"], ["financial.Transfer.document"]),
                            allow(["SELECT"], ["financial.Account.document"])])
    body = _transfer_as(mover, funded, opening, 4)
    assert body["data"]["financial"]["createTransfer"]["amount"] == 4


def test_create_transfer_without_insert_on_transfer_is_denied(api):
    opening, funded = funded_account(api, 10)
    mover = as_client(api, [allow(["SELECT"], ["financial.*"])])
    error = _transfer_as(mover, funded, opening)["errors"][0]
    assert error["extensions"]["code"] == "permission_denied"
    assert "INSERT on financial.Transfer.document" in error["extensions"]["hint"]


def test_create_transfer_without_select_on_the_target_is_denied(api):
    opening, funded = funded_account(api, 10)
    mover = as_client(api, [allow(["INSERT"], ["financial.Transfer.document"]),
                            allow(["SELECT"], ["financial.Account.document"], f'context.document.id == "{funded}"')])
    error = _transfer_as(mover, funded, opening)["errors"][0]
    assert error["extensions"]["code"] == "permission_denied"
    assert "SELECT on financial.Account.document" in error["extensions"]["hint"]


def test_create_transfer_without_select_on_the_source_is_denied(api):
    opening, funded = funded_account(api, 10)
    mover = as_client(api, [allow(["INSERT"], ["financial.Transfer.document"]),
                            allow(["SELECT"], ["financial.Account.document"], f'context.document.id == "{opening}"')])
    assert _transfer_as(mover, funded, opening)["errors"][0]["extensions"]["code"] == "permission_denied"


def test_transfer_insert_assertion_sees_the_new_transfer(api):
    opening, funded = funded_account(api, 100)
    mover = as_client(api, [allow(["INSERT"], ["financial.Transfer.document"], "context.document.amount <= 10"),
                            allow(["SELECT"], ["financial.Account.document"])])
    assert _transfer_as(mover, funded, opening, 10)["data"]["financial"]["createTransfer"]["amount"] == 10
    assert _transfer_as(mover, funded, opening, 11)["errors"][0]["extensions"]["code"] == "permission_denied"


def test_denied_transfer_moves_no_money(api):
    opening, funded = funded_account(api, 10)
    mover = as_client(api, [allow(["SELECT"], ["financial.*"])])
    _transfer_as(mover, funded, opening, 5)
    assert api.gql(ACCOUNT, {"id": funded})["financial"]["account"]["balance"] == 10


def test_paging_with_after_reaches_every_visible_document_past_hidden_ones(api):
    made = []
    for i in range(6):
        made.append((create_account(api, f"a{i}", "EUR" if i % 3 else "USD"), "EUR" if i % 3 else "USD"))
    reader = as_client(api, [allow(["SELECT"], ["financial.Account.indexes.all"]),
                             allow(["SELECT"], ["financial.Account.document"], USD_ONLY)])
    query = """query($after: String) { financial { accounts(first: 1, after: $after) { id } } }"""
    seen, after = [], None
    while True:
        page = reader.gql(query, {"after": after})["financial"]["accounts"]
        if not page:
            break
        seen.append(page[0]["id"])
        after = page[0]["id"]
    assert sorted(seen) == sorted(a for a, currency in made if currency == "USD")


def test_client_whose_stored_policies_no_longer_parse_is_allowed_nothing(api, db_url, services, usd_and_eur):
    """Dropping just the broken statement would drop a DENY and widen access: the layer fails closed."""
    import psycopg
    from psycopg.types.json import Jsonb

    usd, _ = usd_and_eur
    client_id = uuid.uuid4()
    stored = [allow(["SELECT"], ["financial.*"]), deny(["SELECT"], ["financial.Account.document"], "((( broken")]
    with psycopg.connect(db_url) as conn:  # as the owner: a row the API would never have written
        conn.execute("INSERT INTO clients (tenant_id, id, name, policies) VALUES (%s, %s, 'legacy', %s)",
                     (api.tenant_id, client_id, Jsonb(stored)))
    token, _ = services.tokens.mint(api.tenant_id, client_id)
    error = read_account(api.as_client(token), usd)["errors"][0]
    assert error["extensions"]["code"] == "permission_denied"
    assert "stored policies are invalid" in error["extensions"]["hint"]
