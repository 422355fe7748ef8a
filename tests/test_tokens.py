"""Bearer tokens: what is refused with HTTP 401 `unauthenticated`, and what is accepted."""

from __future__ import annotations

import base64
import datetime
import json
import time
import uuid

import jwt

from ledger.auth.tokens import load_signing_key

VIEWER = "{ viewer { tenantId clientId clientName } }"
CREATE_CLIENT = """mutation($id: UUID!) { clients { createClient(id: $id, input: {name: "temp", policies: []}) { id } } }"""
ISSUE_TOKEN = """mutation($id: UUID!, $ttl: Int) { clients { issueToken(clientId: $id, ttlSeconds: $ttl) {
  token expiresAt } } }"""
DISABLE_CLIENT = """mutation($id: UUID!) { clients { disableClient(id: $id) { id enabled } } }"""


def _b64(data: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


def _claims(api, **extra) -> dict:
    return {"tenant": str(api.tenant_id), "sub": str(api.client_id), "iat": int(time.time()), **extra}


def _signing_key(services) -> str:
    """The key the server signs with: the one stored in the database (LEDGER_JWT_SECRET is unset in tests)."""
    return load_signing_key(services.db.conninfo)


def assert_unauthenticated(response) -> dict:
    assert response.status_code == 401, response.text
    error = response.json()["errors"][0]
    assert error["extensions"]["code"] == "unauthenticated"
    return error


def _post_raw(api, headers: dict):
    return api.http.post("/graphql", json={"query": VIEWER}, headers=headers)


def test_missing_token_is_unauthenticated(api):
    assert_unauthenticated(_post_raw(api, {}))


def test_non_bearer_scheme_is_unauthenticated(api):
    assert_unauthenticated(_post_raw(api, {"Authorization": f"Basic {api.token}"}))


def test_empty_bearer_is_unauthenticated(api):
    assert_unauthenticated(_post_raw(api, {"Authorization": "Bearer   "}))


def test_garbage_token_is_unauthenticated(api):
    assert_unauthenticated(api.post(VIEWER, token="not.a.jwt"))


def test_forged_signature_is_unauthenticated(api):
    header, payload, signature = api.token.split(".")
    flipped = ("A" if signature[0] != "A" else "B") + signature[1:]
    assert_unauthenticated(api.post(VIEWER, token=f"{header}.{payload}.{flipped}"))


def test_altered_payload_is_unauthenticated(api, other_api):
    header, _, signature = api.token.split(".")
    payload = _b64(_claims(other_api))
    assert_unauthenticated(api.post(VIEWER, token=f"{header}.{payload}.{signature}"))


def test_alg_none_is_unauthenticated(api):
    token = f"{_b64({'alg': 'none', 'typ': 'JWT'})}.{_b64(_claims(api))}."
    assert_unauthenticated(api.post(VIEWER, token=token))


def test_alg_none_from_the_library_is_unauthenticated(api):
    token = jwt.encode(_claims(api), None, algorithm="none")
    assert_unauthenticated(api.post(VIEWER, token=token))


def test_other_hmac_algorithm_with_the_right_key_is_unauthenticated(api, services):
    token = jwt.encode(_claims(api), _signing_key(services), algorithm="HS512")
    assert_unauthenticated(api.post(VIEWER, token=token))


def test_wrong_key_is_unauthenticated(api):
    token = jwt.encode(_claims(api), "x" * 64, algorithm="HS256")
    assert_unauthenticated(api.post(VIEWER, token=token))


def test_expired_token_is_unauthenticated(api, services):
    token, _ = services.tokens.mint(api.tenant_id, api.client_id, 60, now=int(time.time()) - 120)
    error = assert_unauthenticated(api.post(VIEWER, token=token))
    assert "expired" in error["message"]


def test_token_expiring_this_second_is_expired_without_leeway(api, services):
    token = jwt.encode(_claims(api, exp=int(time.time())), _signing_key(services), algorithm="HS256")
    assert_unauthenticated(api.post(VIEWER, token=token))


def test_token_expired_one_second_ago_is_expired(api, services):
    token = jwt.encode(_claims(api, exp=int(time.time()) - 1), _signing_key(services), algorithm="HS256")
    assert_unauthenticated(api.post(VIEWER, token=token))


def test_token_with_future_expiry_is_accepted(api, services):
    token, _ = services.tokens.mint(api.tenant_id, api.client_id, 60)
    assert api.post(VIEWER, token=token).status_code == 200


def test_token_without_exp_is_accepted(api, services):
    token = jwt.encode(_claims(api), _signing_key(services), algorithm="HS256")
    assert api.gql(VIEWER, token=token)["viewer"]["clientId"] == str(api.client_id)


def test_token_without_iat_is_unauthenticated(api, services):
    claims = _claims(api)
    del claims["iat"]
    assert_unauthenticated(api.post(VIEWER, token=jwt.encode(claims, _signing_key(services), algorithm="HS256")))


def test_token_with_a_non_uuid_tenant_is_unauthenticated(api, services):
    token = jwt.encode(_claims(api, tenant="acme"), _signing_key(services), algorithm="HS256")
    assert_unauthenticated(api.post(VIEWER, token=token))


def test_token_of_a_non_existent_client_is_unauthenticated(api, services):
    token, _ = services.tokens.mint(api.tenant_id, uuid.uuid4())
    assert_unauthenticated(api.post(VIEWER, token=token))


def test_token_of_a_client_under_another_tenant_is_unauthenticated(api, other_api, services):
    token, _ = services.tokens.mint(other_api.tenant_id, api.client_id)
    assert_unauthenticated(api.post(VIEWER, token=token))


def test_unauthenticated_request_writes_nothing(api):
    response = _post_raw(api, {"Content-Type": "application/json"})
    assert response.status_code == 401
    mutation = """mutation { financial { createAccount(id: "00000000-0000-0000-0000-000000000001",
      input: {name: "x", currency: "USD"}) { id } } }"""
    assert api.post(mutation, token="bad").status_code == 401
    assert api.gql("""{ financial { account(id: "00000000-0000-0000-0000-000000000001") { id } } }""") == {
        "financial": {"account": None}}


# ---------------------------------------------------------------------------- clients and tokens


def _new_client(api) -> str:
    client_id = str(uuid.uuid4())
    api.gql(CREATE_CLIENT, {"id": client_id})
    return client_id


def test_issued_token_acts_as_its_client(api):
    client_id = _new_client(api)
    token = api.gql(ISSUE_TOKEN, {"id": client_id})["clients"]["issueToken"]["token"]
    assert api.gql(VIEWER, token=token)["viewer"] == {
        "tenantId": str(api.tenant_id), "clientId": client_id, "clientName": "temp"}


def test_issue_token_without_ttl_has_no_expiry(api):
    issued = api.gql(ISSUE_TOKEN, {"id": _new_client(api)})["clients"]["issueToken"]
    assert issued["expiresAt"] is None
    assert "exp" not in jwt.decode(issued["token"], options={"verify_signature": False})


def test_issue_token_with_ttl_returns_expires_at(api):
    before = int(time.time())
    issued = api.gql(ISSUE_TOKEN, {"id": _new_client(api), "ttl": 300})["clients"]["issueToken"]
    expires = datetime.datetime.fromisoformat(issued["expiresAt"].replace("Z", "+00:00"))
    assert expires.tzinfo is not None
    assert before + 300 <= expires.timestamp() <= int(time.time()) + 300
    claims = jwt.decode(issued["token"], options={"verify_signature": False})
    assert claims["exp"] == int(expires.timestamp())


def test_issue_token_with_non_positive_ttl_is_rejected(api):
    error = api.error(ISSUE_TOKEN, {"id": _new_client(api), "ttl": 0})
    assert error["extensions"]["code"] == "invalid_input"


def test_disabled_client_is_unauthenticated(api):
    client_id = _new_client(api)
    token = api.gql(ISSUE_TOKEN, {"id": client_id})["clients"]["issueToken"]["token"]
    api.gql(DISABLE_CLIENT, {"id": client_id})
    error = assert_unauthenticated(api.post(VIEWER, token=token))
    assert "disabled" in error["message"]


def test_disable_takes_effect_for_the_very_next_request(api):
    client_id = _new_client(api)
    token = api.gql(ISSUE_TOKEN, {"id": client_id})["clients"]["issueToken"]["token"]
    assert api.post(VIEWER, token=token).status_code == 200
    assert api.gql(DISABLE_CLIENT, {"id": client_id})["clients"]["disableClient"]["enabled"] is False
    assert_unauthenticated(api.post(VIEWER, token=token))


def test_client_disabling_itself_locks_itself_out(api):
    disabled = api.gql(DISABLE_CLIENT, {"id": str(api.client_id)})
    assert disabled["clients"]["disableClient"]["enabled"] is False
    assert_unauthenticated(api.post(VIEWER))


def test_disable_rolled_back_by_dry_run_leaves_the_client_enabled(api):
    client_id = _new_client(api)
    token = api.gql(ISSUE_TOKEN, {"id": client_id})["clients"]["issueToken"]["token"]
    api.gql(DISABLE_CLIENT, {"id": client_id}, headers={"Ledger-Dry-Run": "true"})
    assert api.post(VIEWER, token=token).status_code == 200


def test_issue_token_for_a_disabled_client_is_refused(api):
    client_id = _new_client(api)
    api.gql(DISABLE_CLIENT, {"id": client_id})
    assert api.error(ISSUE_TOKEN, {"id": client_id})["extensions"]["code"] == "client_disabled"


def test_issue_token_for_a_missing_client_is_not_found(api):
    assert api.error(ISSUE_TOKEN, {"id": str(uuid.uuid4())})["extensions"]["code"] == "not_found"
