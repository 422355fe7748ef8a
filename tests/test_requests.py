"""Requests: one request is one transaction, document order, dry runs, limits and malformed input."""

from __future__ import annotations

import json
import time
import uuid

import psycopg
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from helpers import ACCOUNT, CREATE_ACCOUNT, balance, create_account, funded_account

ACCOUNTS = """query($first: Int, $after: String) { financial { accounts(first: $first, after: $after) { id createdAt } } }"""
TRANSFERS = """query($first: Int, $after: String) { financial { transfers(first: $first, after: $after) { id } } }"""
VIEWER = "{ viewer { tenantId } }"


def _count(db_url: str, table: str) -> int:
    with psycopg.connect(db_url) as conn:
        return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def _raw(api, content: bytes, **headers):
    return api.http.post("/graphql", content=content, headers={"Authorization": f"Bearer {api.token}",
                                                              "Content-Type": "application/json", **headers})


def _new_id() -> str:
    return str(uuid.uuid4())


# ---------------------------------------------------------------------------- one request, one transaction


OPEN_AND_OVERDRAW = """mutation($a: UUID!, $b: UUID!, $t: UUID!) { financial {
  a: createAccount(id: $a, input: {name: "a", currency: "USD"}) { id }
  b: createAccount(id: $b, input: {name: "b", currency: "USD"}) { id }
  t: createTransfer(id: $t, input: {fromAccountId: $a, toAccountId: $b, amount: 1}) { id } } }"""


def test_failing_field_rolls_back_the_fields_before_it(api):
    ids = {"a": _new_id(), "b": _new_id(), "t": _new_id()}
    body = api.post(OPEN_AND_OVERDRAW, ids).json()
    assert body["errors"][0]["extensions"]["code"] == "insufficient_funds"
    assert api.gql(ACCOUNT, {"id": ids["a"]})["financial"]["account"] is None
    assert api.gql(ACCOUNT, {"id": ids["b"]})["financial"]["account"] is None


def test_failure_in_a_later_root_field_rolls_back_an_earlier_namespace(api):
    account_id = _new_id()
    body = api.post("""mutation($a: UUID!, $c: UUID!) {
      financial { createAccount(id: $a, input: {name: "a", currency: "USD"}) { id } }
      clients { issueToken(clientId: $c) { token } } }""", {"a": account_id, "c": _new_id()}).json()
    assert body["errors"][0]["extensions"]["code"] == "not_found"
    assert api.gql(ACCOUNT, {"id": account_id})["financial"]["account"] is None


def test_first_failure_is_reported_and_nothing_after_it_takes_effect(api):
    ids = {"a": _new_id(), "b": _new_id(), "t": _new_id()}
    body = api.post("""mutation($a: UUID!, $b: UUID!, $t: UUID!) { financial {
      t: createTransfer(id: $t, input: {fromAccountId: $a, toAccountId: $b, amount: 1}) { id }
      a: createAccount(id: $a, input: {name: "a", currency: "USD"}) { id } }
      clients { issueToken(clientId: $b) { token } } }""", ids).json()
    assert body["data"] is None
    assert body["errors"][0]["extensions"]["code"] == "not_found"
    assert body["errors"][0]["path"] == ["financial", "t"]
    assert all(e["extensions"]["code"] in ("not_found", "not_executed") for e in body["errors"])
    assert api.gql(ACCOUNT, {"id": ids["a"]})["financial"]["account"] is None


def test_fields_inside_a_namespace_run_in_document_order(api):
    opening, target = _new_id(), _new_id()
    data = api.gql("""mutation($o: UUID!, $a: UUID!, $t1: UUID!, $t2: UUID!) { financial {
      o: createAccount(id: $o, input: {name: "opening", currency: "USD", allowOverdraft: true}) { id }
      a: createAccount(id: $a, input: {name: "a", currency: "USD"}) { id }
      t1: createTransfer(id: $t1, input: {fromAccountId: $o, toAccountId: $a, amount: 10}) { amount }
      t2: createTransfer(id: $t2, input: {fromAccountId: $a, toAccountId: $o, amount: 10}) { amount } } }""",
                   {"o": opening, "a": target, "t1": _new_id(), "t2": _new_id()})
    assert list(data["financial"]) == ["o", "a", "t1", "t2"]
    assert balance(api, target) == 0 and balance(api, opening) == 0


def test_account_created_later_in_the_request_is_not_yet_there_for_an_earlier_field(api):
    opening, target = _new_id(), _new_id()
    body = api.post("""mutation($o: UUID!, $a: UUID!, $t: UUID!) { financial {
      o: createAccount(id: $o, input: {name: "opening", currency: "USD", allowOverdraft: true}) { id }
      t: createTransfer(id: $t, input: {fromAccountId: $o, toAccountId: $a, amount: 10}) { amount }
      a: createAccount(id: $a, input: {name: "a", currency: "USD"}) { id } } }""",
                    {"o": opening, "a": target, "t": _new_id()}).json()
    assert body["errors"][0]["extensions"]["code"] == "not_found"


def test_committed_request_answers_200_with_data(api):
    response = api.post(CREATE_ACCOUNT, {"id": _new_id(), "name": "n", "currency": "USD"})
    assert response.status_code == 200
    assert "errors" not in response.json()


# ---------------------------------------------------------------------------- dry run


def test_dry_run_answers_as_a_real_run_would(api):
    ids = {"o": _new_id(), "a": _new_id(), "t": _new_id()}
    query = """mutation($o: UUID!, $a: UUID!, $t: UUID!) { financial {
      o: createAccount(id: $o, input: {name: "opening", currency: "USD", allowOverdraft: true}) { id balance }
      a: createAccount(id: $a, input: {name: "a", currency: "USD"}) { id name currency }
      t: createTransfer(id: $t, input: {fromAccountId: $o, toAccountId: $a, amount: 10}) { id amount currency } } }"""
    dry = api.post(query, ids, headers={"Ledger-Dry-Run": "true"})
    real = api.post(query, ids)
    assert dry.status_code == real.status_code == 200
    assert dry.json() == real.json()


def test_dry_run_writes_nothing(api, db_url):
    account_id = _new_id()
    data = api.gql(CREATE_ACCOUNT, {"id": account_id, "name": "n", "currency": "USD"},
                   headers={"Ledger-Dry-Run": "true"})
    assert data["financial"]["createAccount"]["id"] == account_id
    assert api.gql(ACCOUNT, {"id": account_id})["financial"]["account"] is None
    assert _count(db_url, "accounts") == 0


def test_dry_run_reports_the_errors_a_real_run_would(api):
    ids = {"a": _new_id(), "b": _new_id(), "t": _new_id()}
    dry = api.post(OPEN_AND_OVERDRAW, ids, headers={"Ledger-Dry-Run": "true"}).json()
    assert dry["errors"][0]["extensions"]["code"] == "insufficient_funds"


def test_dry_run_header_other_than_true_runs_for_real(api):
    account_id = _new_id()
    api.gql(CREATE_ACCOUNT, {"id": account_id, "name": "n", "currency": "USD"}, headers={"Ledger-Dry-Run": "false"})
    assert api.gql(ACCOUNT, {"id": account_id})["financial"]["account"]["id"] == account_id


# ---------------------------------------------------------------------------- malformed requests


def test_malformed_json_is_bad_request(api):
    response = _raw(api, b'{"query": ')
    assert response.status_code == 400
    assert response.json()["errors"][0]["extensions"]["code"] == "bad_request"


def test_deeply_nested_json_is_bad_request(api):
    response = _raw(api, b"[" * 100_000)
    assert response.status_code == 400
    assert response.json()["errors"][0]["extensions"]["code"] == "bad_request"


def test_body_that_is_not_utf8_is_bad_request(api):
    response = _raw(api, b'{"query": "\xff\xfe"}')
    assert response.status_code == 400
    assert response.json()["errors"][0]["extensions"]["code"] == "bad_request"


def test_body_without_query_is_bad_request(api):
    response = _raw(api, b'{"variables": {}}')
    assert response.status_code == 400
    assert "query" in response.json()["errors"][0]["message"]


def test_body_that_is_not_an_object_is_bad_request(api):
    assert _raw(api, b'["{ viewer { tenantId } }"]').status_code == 400


def test_variables_that_are_not_an_object_are_bad_request(api):
    response = _raw(api, b'{"query": "{ viewer { tenantId } }", "variables": [1]}')
    assert response.status_code == 400
    assert response.json()["errors"][0]["extensions"]["code"] == "bad_request"


def test_empty_query_fails_validation(api):
    response = api.post("")
    assert response.status_code == 400
    assert response.json()["errors"][0]["extensions"]["code"] == "graphql_validation_failed"


def test_syntax_error_fails_validation(api):
    response = api.post("{ viewer { tenantId }")
    assert response.status_code == 400
    assert response.json()["errors"][0]["extensions"]["code"] == "graphql_validation_failed"


def test_unknown_operation_name_fails_validation(api):
    response = api.http.post("/graphql", json={"query": "query A { viewer { tenantId } }", "operationName": "B"},
                             headers={"Authorization": f"Bearer {api.token}"})
    assert response.status_code == 400
    assert response.json()["errors"][0]["extensions"]["code"] == "graphql_validation_failed"


def test_several_operations_without_operation_name_fail_validation(api, db_url):
    query = f"""query A {{ viewer {{ tenantId }} }}
      mutation B {{ financial {{ createAccount(id: "{_new_id()}", input: {{name: "n", currency: "USD"}}) {{ id }} }} }}"""
    response = api.post(query)
    assert response.status_code == 400
    assert "operationName" in response.json()["errors"][0]["message"]


def test_operation_name_picks_one_of_several(api):
    response = api.http.post("/graphql", json={"query": "query A { viewer { tenantId } } query B { viewer { clientId } }",
                                               "operationName": "B"}, headers={"Authorization": f"Bearer {api.token}"})
    assert response.json() == {"data": {"viewer": {"clientId": str(api.client_id)}}}


def test_subscription_fails_validation(api):
    response = api.post("subscription { viewer { tenantId } }")
    assert response.status_code == 400
    assert response.json()["errors"][0]["extensions"]["code"] == "graphql_validation_failed"


def test_depth_bombed_query_fails_validation(api):
    inner = "name"
    for _ in range(20):
        inner = f"tools {{ action {{ {inner} }} }}"
    response = api.post("{ actions { actions { " + inner + " } } }")
    assert response.status_code == 400
    error = response.json()["errors"][0]
    assert error["extensions"]["code"] == "graphql_validation_failed"
    assert "depth" in error["message"]


def test_too_many_aliases_fail_validation(api):
    response = api.post("{ " + " ".join(f"a{i}: viewer {{ tenantId }}" for i in range(300)) + " }")
    assert response.status_code == 400
    assert "aliases" in response.json()["errors"][0]["message"]


def test_too_many_tokens_fail_validation(api):
    response = api.post("{ viewer { " + "tenantId " * 25_000 + "} }")
    assert response.status_code == 400
    assert response.json()["errors"][0]["extensions"]["code"] == "graphql_validation_failed"


def test_unknown_field_fails_validation_and_writes_nothing(api, db_url):
    response = api.post("""mutation($id: UUID!) { financial {
      createAccount(id: $id, input: {name: "n", currency: "USD"}) { id }
      closeAccount(id: $id) { id } } }""", {"id": _new_id()})
    assert response.status_code == 400
    assert response.json()["errors"][0]["extensions"]["code"] == "graphql_validation_failed"
    assert _count(db_url, "accounts") == 0


def test_wrong_variable_type_fails_validation_and_writes_nothing(api, db_url):
    response = api.post(CREATE_ACCOUNT, {"id": 5, "name": "n", "currency": "USD"})
    assert response.status_code == 400
    assert response.json()["errors"][0]["extensions"]["code"] == "graphql_validation_failed"
    assert _count(db_url, "accounts") == 0


def test_malformed_uuid_variable_fails_validation(api):
    response = api.post(ACCOUNT, {"id": "not-a-uuid"})
    assert response.status_code == 400
    assert response.json()["errors"][0]["extensions"]["code"] == "graphql_validation_failed"


def test_missing_required_variable_fails_validation(api):
    response = api.post(ACCOUNT, {})
    assert response.status_code == 400
    assert response.json()["errors"][0]["extensions"]["code"] == "graphql_validation_failed"


# ---------------------------------------------------------------------------- body size


def test_body_over_the_limit_is_413(api, settings):
    settings.max_body_bytes = 64 * 1024
    response = api.post(VIEWER, {"pad": "x" * (64 * 1024)})
    assert response.status_code == 413
    assert response.json()["errors"][0]["extensions"]["code"] == "request_too_large"


def test_body_over_the_default_limit_is_413(api, settings):
    response = _raw(api, b" " * (settings.max_body_bytes + 1))
    assert response.status_code == 413


def test_chunked_body_over_the_limit_is_413(api, settings):
    settings.max_body_bytes = 64 * 1024

    def chunks():
        yield b'{"query": "{ viewer { tenantId } }", "variables": {"pad": "'
        for _ in range(20):
            yield b"x" * 8192
        yield b'"}}'

    response = api.http.post("/graphql", content=chunks(), headers={"Authorization": f"Bearer {api.token}"})
    assert response.status_code == 413


def test_body_of_one_mebibyte_is_accepted(api):
    account_id = _new_id()
    variables = {"id": account_id, "name": "big", "currency": "USD", "pad": "x" * (1 << 20)}
    response = api.post(CREATE_ACCOUNT, variables)
    assert len(response.request.content) > 1 << 20
    assert response.status_code == 200, response.text
    assert response.json()["data"]["financial"]["createAccount"]["id"] == account_id


# ---------------------------------------------------------------------------- Request-Timeout


@pytest.mark.parametrize("value", ["soon", "nan", "inf", "0", "-1", "301", "1e999"])
def test_unusable_request_timeout_is_bad_request(api, value):
    response = api.post(VIEWER, headers={"Request-Timeout": value})
    assert response.status_code == 400
    error = response.json()["errors"][0]
    assert error["extensions"]["code"] == "bad_request"
    assert "Request-Timeout" in error["message"]


@pytest.mark.parametrize("value", ["10", "2.5", "10s"])
def test_request_timeout_in_seconds_is_accepted(api, value):
    assert api.gql(VIEWER, headers={"Request-Timeout": value})["viewer"]["tenantId"] == str(api.tenant_id)


def test_passed_deadline_is_retryable(api):
    response = api.post(VIEWER, headers={"Request-Timeout": "0.000001"})
    assert response.status_code == 200
    error = response.json()["errors"][0]
    assert error["extensions"]["code"] == "retryable"
    assert error["extensions"]["retryable"] is True


def test_statement_running_past_the_deadline_is_retryable_and_writes_nothing(api, db_url):
    """A long statement is cancelled at the deadline (statement_timeout), and the request rolls back."""
    with psycopg.connect(db_url, autocommit=True) as blocker:
        blocker.execute("BEGIN")
        blocker.execute("LOCK TABLE accounts IN ACCESS EXCLUSIVE MODE")
        response = api.post(CREATE_ACCOUNT, {"id": _new_id(), "name": "n", "currency": "USD"},
                            headers={"Request-Timeout": "0.5"})
        blocker.execute("ROLLBACK")
    error = response.json()["errors"][0]
    assert error["extensions"]["code"] == "retryable"
    assert _count(db_url, "accounts") == 0


# ---------------------------------------------------------------------------- reads and listings


def test_account_by_missing_id_is_null(api):
    assert api.gql(ACCOUNT, {"id": _new_id()}) == {"financial": {"account": None}}


def test_transfer_by_missing_id_is_null(api):
    data = api.gql("""query($id: UUID!) { financial { transfer(id: $id) { id } } }""", {"id": _new_id()})
    assert data == {"financial": {"transfer": None}}


def _insert_accounts(db_url: str, tenant_id, count: int) -> None:
    with psycopg.connect(db_url) as conn:
        conn.execute("INSERT INTO accounts (tenant_id, id, name, currency)"
                     " SELECT %s, gen_random_uuid(), 'bulk ' || n, 'USD' FROM generate_series(1, %s) AS n",
                     (tenant_id, count))


def test_first_is_clamped_to_500(api, db_url):
    _insert_accounts(db_url, api.tenant_id, 505)
    assert len(api.gql(ACCOUNTS, {"first": 100_000})["financial"]["accounts"]) == 500


def test_first_defaults_to_50(api, db_url):
    _insert_accounts(db_url, api.tenant_id, 60)
    assert len(api.gql("{ financial { accounts { id } } }")["financial"]["accounts"]) == 50


def test_first_zero_is_an_empty_page(api):
    create_account(api)
    assert api.gql(ACCOUNTS, {"first": 0})["financial"]["accounts"] == []


def test_negative_first_is_invalid_input(api):
    assert api.error(ACCOUNTS, {"first": -1})["extensions"]["code"] == "invalid_input"


def test_after_pages_in_created_at_then_id_order(api):
    # Three accounts made in one request share createdAt, so id breaks the tie.
    ids = [_new_id() for _ in range(3)]
    api.gql("""mutation($a: UUID!, $b: UUID!, $c: UUID!) { financial {
      a: createAccount(id: $a, input: {name: "a", currency: "USD"}) { id }
      b: createAccount(id: $b, input: {name: "b", currency: "USD"}) { id }
      c: createAccount(id: $c, input: {name: "c", currency: "USD"}) { id } } }""", dict(zip("abc", ids)))
    later = [create_account(api, f"later {i}") for i in range(3)]
    expected = sorted(ids, key=uuid.UUID) + later
    seen, after = [], None
    while True:
        page = api.gql(ACCOUNTS, {"first": 2, "after": after})["financial"]["accounts"]
        if not page:
            break
        assert len(page) <= 2
        seen.extend(page)
        after = page[-1]["id"]
    assert [a["id"] for a in seen] == expected
    assert [a["createdAt"] for a in seen] == sorted(a["createdAt"] for a in seen)


def test_transfers_page_with_after(api):
    opening, funded = funded_account(api, 0)
    made = [api.gql("""mutation($id: UUID!, $o: UUID!, $f: UUID!) { financial { createTransfer(id: $id,
      input: {fromAccountId: $o, toAccountId: $f, amount: 1}) { id } } }""",
                    {"id": _new_id(), "o": opening, "f": funded})["financial"]["createTransfer"]["id"] for _ in range(3)]
    first = api.gql(TRANSFERS, {"first": 2})["financial"]["transfers"]
    rest = api.gql(TRANSFERS, {"first": 2, "after": first[-1]["id"]})["financial"]["transfers"]
    assert [t["id"] for t in first + rest] == made


def test_malformed_cursor_is_a_clear_error(api):
    error = api.error(ACCOUNTS, {"first": 2, "after": "page-2"})
    assert error["extensions"]["code"] == "invalid_input"
    assert "cursor" in error["message"]


def test_unknown_cursor_is_a_clear_error_not_an_empty_page(api):
    create_account(api)
    error = api.error(ACCOUNTS, {"first": 2, "after": _new_id()})
    assert error["extensions"]["code"] == "invalid_input"


def test_cursor_from_another_tenant_is_not_a_cursor_here(api, other_api):
    theirs = create_account(other_api)
    create_account(api)
    assert api.error(ACCOUNTS, {"first": 2, "after": theirs})["extensions"]["code"] == "invalid_input"


# ---------------------------------------------------------------------------- the other endpoints


def test_graphiql_page_needs_no_token(api):
    response = api.http.get("/graphql")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert "GraphiQL" in response.text


def test_graphql_answers_json_with_its_length(api):
    response = _raw(api, json.dumps({"query": VIEWER}).encode())
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert int(response.headers["content-length"]) == len(response.content)


def test_graphql_refuses_other_methods_naming_get_and_post(api):
    response = api.http.put("/graphql", content=b"{}", headers={"Authorization": f"Bearer {api.token}"})
    assert response.status_code == 405
    assert {m.strip() for m in response.headers["allow"].split(",")} == {"GET", "HEAD", "POST"}


def test_healthz_needs_no_token(api):
    response = api.http.get("/healthz")
    assert response.status_code == 200 and response.json() == {"status": "ok"}


def test_metrics_count_requests(api):
    api.gql(VIEWER)
    response = api.http.get("/metrics")
    assert response.status_code == 200
    assert "ledger_graphql_requests_total" in response.text


# ---------------------------------------------------------------------------- never 500


NASTY_BODIES = [
    b"",
    b"null",
    b"0",
    b'"query"',
    b"{",
    b"[" * 5000,
    b'{"query": null}',
    b'{"query": 5}',
    b'{"query": "{ viewer { tenantId } }", "operationName": 5}',
    b'{"query": "{ viewer { tenantId } }", "variables": "x"}',
    b'{"query": "' + b"{" * 3000 + b'"}',
    b'{"query": "{ __schema { types { name } } }"}',
    b'{"query": "query($x: Int64!) { viewer { tenantId } }", "variables": {"x": 1e400}}',
    b'{"query": "mutation { financial { createTransfer(id: \\"x\\", input: {}) { id } } }"}',
    b'{"query": "{ financial { accounts(first: 99999999999) { id } } }"}',
    b'{"query": "{ financial { account(id: \\"00000000-0000-0000-0000-000000000000\\") { transfers(first: -5) { id } } } }"}',
    b'\xef\xbb\xbf{"query": "{ viewer { tenantId } }"}',
    b'{"query": "' + b"{ a " * 4000 + b"}" * 4000 + b'"}',
    b'{"query": "{ viewer { tenantId } }", "variables": {"x": 1e999}}',
    b'{"query": "query($x: Int64!) { viewer { tenantId } }", "variables": {"x": 123456789012345678901234567890}}',
]


@pytest.mark.parametrize("body", NASTY_BODIES, ids=range(len(NASTY_BODIES)))
def test_no_request_answers_500(api, body):
    response = _raw(api, body)
    assert response.status_code < 500, response.text
    errors = response.json().get("errors") or []
    assert all(e["extensions"]["code"] != "internal_error" for e in errors), errors


# ---------------------------------------------------------------------------- JSON numbers


def test_request_json_keeps_integers_beyond_64_bits_exact():
    from ledger.api.json_codec import load_json

    body = b'{"query": "{ viewer { tenantId } }", "variables": {"x": 1180591620717411303424, "y": -9223372036854775809}}'
    assert load_json(body)["variables"] == {"x": 2**70, "y": -(2**63) - 1}


def test_response_json_writes_integers_beyond_64_bits_exactly():
    from ledger.api.json_codec import dump_json

    assert dump_json({"data": {"x": 2**70, "y": [-(2**64)]}}) == b'{"data":{"x":1180591620717411303424,"y":[-18446744073709551616]}}'


def test_nan_is_not_json(api):
    response = _raw(api, b'{"query": "query($x: Int64) { viewer { tenantId } }", "variables": {"x": NaN}}')
    assert response.status_code == 400
    assert response.json()["errors"][0]["extensions"]["code"] == "bad_request"


def test_body_with_a_utf8_byte_order_mark_is_read(api):
    response = _raw(api, b'\xef\xbb\xbf{"query": "{ viewer { tenantId } }"}')
    assert response.json() == {"data": {"viewer": {"tenantId": str(api.tenant_id)}}}


def test_cached_graphiql_assets_are_served_locally(api, settings):
    from ledger.api.graphiql import ASSETS

    cache = settings.data_dir / "graphiql"
    cache.mkdir(parents=True)
    for name in ASSETS:
        (cache / name).write_text(f"/* {name} */")
    page = api.http.get("/graphql").text
    assert "unpkg.com" not in page
    for name in ASSETS:
        assert f"/graphiql/{name}" in page
        asset = api.http.get(f"/graphiql/{name}")
        assert asset.status_code == 200 and asset.text == f"/* {name} */"


def test_only_graphiql_asset_names_are_served(api, settings):
    (settings.data_dir / "graphiql").mkdir(parents=True)
    (settings.data_dir / "secret.txt").write_text("no")
    assert api.http.get("/graphiql/..%2Fsecret.txt").status_code == 404
    assert api.http.get("/graphiql/missing.js").status_code == 404


def test_many_short_statements_stop_at_the_deadline(api, db_url):
    """statement_timeout bounds each statement; the request as a whole must still end at its deadline."""
    _insert_accounts(db_url, api.tenant_id, 200)
    query = "{ " + " ".join(f"a{i}: financial {{ accounts(first: 500) {{ transfers(first: 500) {{ id }} }} }}"
                            for i in range(150)) + " }"
    started = time.monotonic()
    response = api.post(query, headers={"Request-Timeout": "0.5"})
    elapsed = time.monotonic() - started
    assert response.json()["errors"][0]["extensions"]["code"] == "retryable"
    assert elapsed < 3, f"the request ran {elapsed:.1f} s past a 0.5 s deadline"


# ---------------------------------------------------------------------------- fuzzed inputs

CREATE_TRANSFER_QUERY = """mutation($id: UUID!, $from: UUID!, $to: UUID!, $amount: Int64!, $memo: String) {
  financial { createTransfer(id: $id, input: {fromAccountId: $from, toAccountId: $to, amount: $amount, memo: $memo}) {
    id } } }"""
_JSON_LEAVES = st.uuids().map(str) | st.none() | st.booleans() | st.integers(min_value=-(2**80), max_value=2**80) | st.floats() | st.text(max_size=40)
_JSON = st.recursive(_JSON_LEAVES, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                     max_leaves=12)


@hypothesis_settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(variables=st.dictionaries(st.sampled_from(["id", "from", "to", "amount", "memo", "x"]), _JSON, max_size=6))
def test_any_variables_for_a_transfer_never_answer_500(api, variables):
    body = json.dumps({"query": CREATE_TRANSFER_QUERY, "variables": variables}).encode()
    response = _raw(api, body)
    assert response.status_code < 500, response.text
    assert all(e["extensions"]["code"] != "internal_error" for e in response.json().get("errors") or [])
