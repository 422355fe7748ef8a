"""The MCP endpoint `POST /mcp/<name>` (DESIGN 12), through the SDK's own client over real HTTP against a
running server, on the real PostgreSQL: what each caller sees, what its calls do and record, and how
bad input is answered (never a 500, nothing written).
"""

from __future__ import annotations

import json
import time
import uuid

import httpx
import pytest

from helpers import balance, create_account
from live_helpers import GET_ACCOUNT_ACTIVITY, TRANSFER
from mcp_helpers import (DELETE_SERVER, EVERYTHING, READ_ONLY, UPDATE_SERVER, call_tool, count_rows, create_client,
                         create_server, execution, funded_accounts, list_tools, publish_examples, reference,
                         with_client)
from mcp_helpers import examples, served, settings  # noqa: F401  (fixtures)


ACTIVITY = reference("get_account_activity")
TRANSFER_REF = reference("transfer")
WRITES = [{"effect": "ALLOW", "actions": ["SELECT", "INSERT", "UPDATE", "DELETE", "INVOKE"],
           "resources": ["financial.*"]}]


def url_of(served: str, name: str) -> str:
    return f"{served}/mcp/{name}"


# ---------------------------------------------------------------------------- tools/list


def test_two_clients_with_different_policies_see_different_lists(served, examples):
    api = examples
    create_server(api, "desk", [ACTIVITY, TRANSFER_REF], EVERYTHING)
    reader = create_client(api, "reader", [
        {"effect": "ALLOW", "actions": ["SELECT", "INVOKE"], "resources": ["financial.Action.document"],
         "assertion": f'context.document.action_id == uuid("{GET_ACCOUNT_ACTIVITY}")'},
        {"effect": "ALLOW", "actions": ["SELECT"], "resources": ["financial.McpServer.document"]}])
    assert [t.name for t in list_tools(url_of(served, "desk"), api.token)] == ["get_account_activity", "transfer"]
    assert [t.name for t in list_tools(url_of(served, "desk"), reader)] == ["get_account_activity"]


def test_two_tenants_see_their_own_servers_and_tools(served, examples, other_api):
    create_server(examples, "desk", [ACTIVITY, TRANSFER_REF], EVERYTHING)
    publish_examples(other_api)
    create_server(other_api, "desk", [TRANSFER_REF], EVERYTHING)
    assert [t.name for t in list_tools(url_of(served, "desk"), examples.token)] == ["get_account_activity",
                                                                                   "transfer"]
    assert [t.name for t in list_tools(url_of(served, "desk"), other_api.token)] == ["transfer"]


def test_tools_are_listed_in_the_order_the_server_lists_them_with_their_ids(served, examples):
    create_server(examples, "desk", [TRANSFER_REF, reference("get_account_activity", version=1)], EVERYTHING)
    for mode in ("legacy", "auto"):
        tools = list_tools(url_of(served, "desk"), examples.token, mode=mode)
        assert [t.name for t in tools] == ["transfer", "get_account_activity"]
        assert tools[0].meta == {"ledger/actionId": TRANSFER, "ledger/actionVersion": None}
        assert tools[1].meta == {"ledger/actionId": GET_ACCOUNT_ACTIVITY, "ledger/actionVersion": 1}
    assert tools[0].description.startswith("Moves `amount` minor units")
    assert tools[0].output_schema["required"] == ["transfer_id", "amount", "currency"]


def test_a_server_whose_layer_allows_no_write_lists_transfer_read_only(served, examples):
    create_server(examples, "viewer", [TRANSFER_REF, ACTIVITY], READ_ONLY)
    annotations = {t.name: t.annotations for t in list_tools(url_of(served, "viewer"), examples.token)}
    assert annotations["transfer"].read_only_hint is True
    assert annotations["transfer"].destructive_hint is False
    assert annotations["transfer"].open_world_hint is False


def test_annotations_follow_the_client_the_server_and_the_tool(served, examples):
    create_server(examples, "desk", [TRANSFER_REF, ACTIVITY], EVERYTHING)
    reader = create_client(examples, "reader", READ_ONLY)
    by_admin = {t.name: t.annotations for t in list_tools(url_of(served, "desk"), examples.token)}
    by_reader = {t.name: t.annotations for t in list_tools(url_of(served, "desk"), reader)}
    # transfer's own layer allows INSERT; get_account_activity's allows only SELECT.
    assert (by_admin["transfer"].read_only_hint, by_admin["transfer"].destructive_hint) == (False, True)
    assert (by_admin["get_account_activity"].read_only_hint,
            by_admin["get_account_activity"].destructive_hint) == (True, False)
    # A client that may not write sees every tool read-only.
    assert by_reader["transfer"].read_only_hint is True


def test_fixed_properties_are_not_in_the_listed_schema(served, examples):
    payer, payee = funded_accounts(examples)
    create_server(examples, "payroll", [reference("transfer", input={"from_account": payer, "memo": "payroll"})],
                  EVERYTHING)
    (tool,) = list_tools(url_of(served, "payroll"), examples.token)
    assert set(tool.input_schema["properties"]) == {"transfer_id", "to_account", "amount"}
    assert tool.input_schema["required"] == ["transfer_id", "to_account", "amount"]


def test_a_reference_that_no_longer_resolves_is_left_out(served, examples):
    create_server(examples, "desk", [ACTIVITY, TRANSFER_REF], EVERYTHING)
    examples.gql("mutation($id: UUID!) { actions { deleteAction(id: $id) { status } } }", {"id": TRANSFER})
    assert [t.name for t in list_tools(url_of(served, "desk"), examples.token)] == ["get_account_activity"]


def test_the_server_s_instructions_reach_the_initialize_result(served, examples):
    create_server(examples, "desk", [ACTIVITY], READ_ONLY, instructions="Read balances; never guess ids.")

    async def work(client):
        return client.instructions

    for mode in ("legacy", "auto"):
        assert with_client(url_of(served, "desk"), examples.token, work, mode=mode) == \
            "Read balances; never guess ids."


# ---------------------------------------------------------------------------- tools/call


def test_a_call_answers_structured_content_and_records_the_execution(served, examples):
    payer, payee = funded_accounts(examples)
    server_id = create_server(examples, "desk", [TRANSFER_REF], EVERYTHING)
    transfer_id = str(uuid.uuid4())
    arguments = {"transfer_id": transfer_id, "from_account": payer, "to_account": payee, "amount": 250}
    result = call_tool(url_of(served, "desk"), examples.token, "transfer", arguments)
    assert result.is_error is False
    assert result.structured_content["transfer_id"] == transfer_id
    assert json.loads(result.content[0].text) == result.structured_content
    recorded = execution(examples, result.meta["ledger/executionId"])
    assert recorded["status"] == "SUCCEEDED"
    assert recorded["mcpServerId"] == server_id
    assert recorded["event"] == {"eventType": "mcp.tools_call", "data": arguments}
    assert balance(examples, payee) == 250


def test_a_call_over_the_2025_11_25_handshake_works_too(served, examples):
    payer, _ = funded_accounts(examples)
    create_server(examples, "desk", [ACTIVITY], READ_ONLY)
    result = call_tool(url_of(served, "desk"), examples.token, "get_account_activity", {"account_id": payer},
                       mode="legacy")
    assert result.is_error is False
    assert result.structured_content["balance"] == 10_000


ANSWER_TOOL = """mutation($id: UUID!) { actions {
  createAction(id: $id, input: {name: "answer", kind: "tool",
    config: {runtime: "starlark", src: "def run(event):\\n    return 42\\n"},
    tool: {name: "answer", description: "the answer", inputSchema: {type: "object"},
           outputSchema: {type: "integer"}}}) { version }
  publishAction(id: $id) { status } } }"""


def test_a_non_object_output_is_wrapped_as_result(served, examples):
    examples.gql(ANSWER_TOOL, {"id": str(uuid.uuid4())})
    create_server(examples, "desk", [reference("answer")], READ_ONLY)
    (tool,) = list_tools(url_of(served, "desk"), examples.token)
    assert tool.output_schema == {"type": "object", "properties": {"result": {"type": "integer"}},
                                  "required": ["result"]}
    for mode in ("legacy", "auto"):
        result = call_tool(url_of(served, "desk"), examples.token, "answer", {}, mode=mode)
        assert result.is_error is False, result.content
        assert result.structured_content == {"result": 42}
        assert result.content[0].text == '{"result":42}'


@pytest.mark.parametrize("token_of", ["admin", "reader_writer"])
def test_transfer_through_a_server_without_insert_fails_naming_the_server_and_moves_nothing(
        served, examples, token_of):
    api = examples
    payer, payee = funded_accounts(api)
    server_id = create_server(api, "viewer", [TRANSFER_REF], READ_ONLY)
    token = api.token if token_of == "admin" else create_client(api, "writer", WRITES)
    arguments = {"transfer_id": str(uuid.uuid4()), "from_account": payer, "to_account": payee, "amount": 100}
    result = call_tool(url_of(served, "viewer"), token, "transfer", arguments)
    assert result.is_error is True
    error = result.meta["ledger/error"]
    assert error["code"] == "action_permission_denied"
    assert 'MCP server "viewer"' in error["hint"]
    assert result.content[0].text == f"{error['code']}: {error['message']}\nhint: {error['hint']}"
    assert (balance(api, payer), balance(api, payee)) == (10_000, 0)
    recorded = execution(api, result.meta["ledger/executionId"])
    assert (recorded["status"], recorded["mcpServerId"]) == ("FAILED", server_id)


def test_fixed_properties_cannot_be_overridden(served, examples):
    payer, payee = funded_accounts(examples)
    other = create_account(examples, "other")
    create_server(examples, "payroll", [reference("transfer", input={"from_account": payer})], EVERYTHING)
    arguments = {"transfer_id": str(uuid.uuid4()), "from_account": other, "to_account": payee, "amount": 100}
    result = call_tool(url_of(served, "payroll"), examples.token, "transfer", arguments)
    assert result.is_error is False, result.content
    assert (balance(examples, payer), balance(examples, other), balance(examples, payee)) == (9_900, 0, 100)
    recorded = execution(examples, result.meta["ledger/executionId"])
    assert recorded["invocation"]["input"]["from_account"] == payer


def test_repeating_an_execution_id_returns_the_recorded_outcome_and_writes_once(served, examples, db_url):
    payer, payee = funded_accounts(examples)
    create_server(examples, "desk", [TRANSFER_REF], EVERYTHING)
    execution_id = str(uuid.uuid4())
    arguments = {"transfer_id": str(uuid.uuid4()), "from_account": payer, "to_account": payee, "amount": 300}
    first = call_tool(url_of(served, "desk"), examples.token, "transfer", arguments,
                      meta={"ledger/executionId": execution_id})
    again = call_tool(url_of(served, "desk"), examples.token, "transfer", arguments,
                      meta={"ledger/executionId": execution_id})
    assert first.meta["ledger/executionId"] == again.meta["ledger/executionId"] == execution_id
    assert again.structured_content == first.structured_content
    assert balance(examples, payee) == 300
    assert count_rows(db_url, "transfers") == 2  # the funding transfer and this one


def test_an_execution_id_repeated_with_other_arguments_is_a_conflict(served, examples):
    payer, payee = funded_accounts(examples)
    create_server(examples, "desk", [TRANSFER_REF], EVERYTHING)
    execution_id = str(uuid.uuid4())
    arguments = {"transfer_id": str(uuid.uuid4()), "from_account": payer, "to_account": payee, "amount": 300}
    call_tool(url_of(served, "desk"), examples.token, "transfer", arguments, meta={"ledger/executionId": execution_id})
    other = call_tool(url_of(served, "desk"), examples.token, "transfer", {**arguments, "amount": 301},
                      meta={"ledger/executionId": execution_id})
    assert other.is_error is True
    assert other.meta["ledger/error"]["code"] == "execution_id_conflict"
    assert balance(examples, payee) == 300


def test_a_preview_answers_as_a_call_and_leaves_nothing(served, examples, db_url):
    payer, payee = funded_accounts(examples)
    create_server(examples, "desk", [TRANSFER_REF], EVERYTHING)
    execution_id = str(uuid.uuid4())
    arguments = {"transfer_id": str(uuid.uuid4()), "from_account": payer, "to_account": payee, "amount": 300}
    executions_before = count_rows(db_url, "executions")
    preview = call_tool(url_of(served, "desk"), examples.token, "transfer", arguments,
                        meta={"ledger/executionId": execution_id, "ledger/preview": True})
    assert preview.is_error is False, preview.content
    assert preview.meta["ledger/preview"] is True
    assert preview.structured_content["amount"] == 300
    assert balance(examples, payee) == 0
    assert count_rows(db_url, "executions") == executions_before
    assert execution(examples, execution_id) is None
    # The executionId stays free: a real call with it runs.
    real = call_tool(url_of(served, "desk"), examples.token, "transfer", arguments,
                     meta={"ledger/executionId": execution_id})
    assert real.is_error is False and "ledger/preview" not in real.meta
    assert balance(examples, payee) == 300


SESSION_TOOL = """mutation($id: UUID!) { actions {
  createAction(id: $id, input: {name: "counter", kind: "tool",
    config: {runtime: "starlark", src: "def run(event):\\n    return {'seen': event['data']}\\n"},
    tool: {name: "counter", description: "counts", inputSchema: {type: "object"}, session: true}}) { version }
  publishAction(id: $id) { status } } }"""


def test_a_session_tool_answers_its_session_and_a_preview_leaves_no_session(served, examples, db_url):
    examples.gql(SESSION_TOOL, {"id": str(uuid.uuid4())})
    create_server(examples, "desk", [reference("counter")], EVERYTHING)
    preview = call_tool(url_of(served, "desk"), examples.token, "counter", {"n": 1}, meta={"ledger/preview": True})
    assert preview.is_error is False, preview.content
    assert count_rows(db_url, "sessions") == 0
    first = call_tool(url_of(served, "desk"), examples.token, "counter", {"n": 1})
    session_id = first.meta["ledger/sessionId"]
    again = call_tool(url_of(served, "desk"), examples.token, "counter", {"n": 2},
                      meta={"ledger/sessionId": session_id})
    assert again.meta["ledger/sessionId"] == session_id
    assert execution(examples, again.meta["ledger/executionId"])["sessionId"] == session_id


def test_a_failed_call_commits_its_record_with_the_error(served, examples):
    payer, payee = funded_accounts(examples)
    create_server(examples, "desk", [TRANSFER_REF], EVERYTHING)
    arguments = {"transfer_id": str(uuid.uuid4()), "from_account": payer, "to_account": payee, "amount": 99_999}
    result = call_tool(url_of(served, "desk"), examples.token, "transfer", arguments)
    assert result.is_error is True
    assert result.meta["ledger/error"]["code"] == "insufficient_funds"
    recorded = execution(examples, result.meta["ledger/executionId"])
    assert recorded["status"] == "FAILED"
    assert recorded["invocation"]["error"]["code"] == "insufficient_funds"


def test_arguments_that_fail_the_input_schema_are_action_input_invalid(served, examples):
    create_server(examples, "desk", [ACTIVITY], READ_ONLY)
    result = call_tool(url_of(served, "desk"), examples.token, "get_account_activity", {"limit": 5})
    assert result.is_error is True
    assert result.meta["ledger/error"]["code"] == "action_input_invalid"


def test_a_disabled_tool_is_refused_with_action_not_callable(served, examples, db_url):
    create_server(examples, "desk", [ACTIVITY], READ_ONLY)
    examples.gql("mutation($id: UUID!) { actions { disableAction(id: $id) { status } } }",
                 {"id": GET_ACCOUNT_ACTIVITY})
    before = count_rows(db_url, "executions")
    result = call_tool(url_of(served, "desk"), examples.token, "get_account_activity",
                       {"account_id": str(uuid.uuid4())})
    assert result.is_error is True
    assert result.meta["ledger/error"]["code"] == "action_not_callable"
    assert count_rows(db_url, "executions") == before


def test_an_unknown_tool_is_a_json_rpc_error_listing_the_callable_tools(served, examples, db_url):
    from mcp.shared.exceptions import MCPError

    create_server(examples, "desk", [ACTIVITY, TRANSFER_REF], READ_ONLY)
    before = count_rows(db_url, "executions")
    with pytest.raises(MCPError) as raised:
        call_tool(url_of(served, "desk"), examples.token, "settle_invoice", {})
    assert raised.value.code == -32602
    assert "get_account_activity, transfer" in raised.value.message
    assert count_rows(db_url, "executions") == before


def test_an_execution_id_that_is_not_a_uuid_is_bad_request(served, examples, db_url):
    create_server(examples, "desk", [ACTIVITY], READ_ONLY)
    before = count_rows(db_url, "executions")
    result = call_tool(url_of(served, "desk"), examples.token, "get_account_activity",
                       {"account_id": str(uuid.uuid4())}, meta={"ledger/executionId": "seven"})
    assert result.is_error is True
    assert result.meta["ledger/error"]["code"] == "bad_request"
    assert count_rows(db_url, "executions") == before


# ---------------------------------------------------------------------------- bad input

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
JSON_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def post(served: str, name: str, body, token: str | None, **headers) -> httpx.Response:
    sent = {**JSON_HEADERS, **({"Authorization": f"Bearer {token}"} if token else {}), **headers}
    content = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return httpx.post(url_of(served, name), content=content, headers=sent, timeout=60)


def tools_call(name: str, arguments) -> dict:
    return {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": name, "arguments": arguments}}


@pytest.fixture
def desk(examples):
    return create_server(examples, "desk", [ACTIVITY, TRANSFER_REF], EVERYTHING)


@pytest.mark.parametrize("token", [None, "not-a-jwt"])
def test_a_missing_or_bad_token_is_401_with_www_authenticate(served, desk, token):
    response = post(served, "desk", INIT, token)
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    assert response.json()["error"]["code"] == "unauthenticated"


def test_an_expired_token_is_401(served, examples, desk, services):
    expired, _ = services.tokens.mint(examples.tenant_id, examples.client_id, 60, now=1)
    response = post(served, "desk", INIT, expired)
    assert (response.status_code, response.headers["www-authenticate"]) == (401, "Bearer")


def test_a_confined_token_lists_its_server_and_is_refused_at_another_and_at_graphql(served, examples, desk):
    create_server(examples, "other", [ACTIVITY], READ_ONLY)
    client_id = str(uuid.uuid4())
    examples.gql("""mutation($id: UUID!, $p: [PolicyStatementInput!]!) { clients {
      createClient(id: $id, input: {name: "assistant", policies: $p}) { id } } }""", {"id": client_id, "p": EVERYTHING})
    from mcp_helpers import token_for

    confined = token_for(examples, client_id, mcp_server=desk)
    assert [t.name for t in list_tools(url_of(served, "desk"), confined)] == ["get_account_activity", "transfer"]
    elsewhere = post(served, "other", INIT, confined)
    assert (elsewhere.status_code, elsewhere.headers["www-authenticate"]) == (401, "Bearer")
    assert post(served, "nowhere", INIT, confined).status_code == 401
    graphql = httpx.post(f"{served}/graphql", json={"query": "{ __typename }"},
                         headers={"Authorization": f"Bearer {confined}"})
    assert graphql.status_code == 401


def test_an_unknown_disabled_or_deleted_server_is_404(served, examples, desk):
    assert post(served, "nowhere", INIT, examples.token).status_code == 404
    closed = create_server(examples, "closed", [ACTIVITY], READ_ONLY, enabled=False)
    assert post(served, "closed", INIT, examples.token).status_code == 404
    examples.gql(UPDATE_SERVER, {"id": closed, "input": {"name": "closed", "tools": [ACTIVITY], "enabled": True}})
    assert post(served, "closed", INIT, examples.token).status_code == 200
    examples.gql(DELETE_SERVER, {"id": closed})
    response = post(served, "closed", INIT, examples.token)
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def _nothing_written(db_url: str, before: tuple[int, int]) -> None:
    assert (count_rows(db_url, "executions"), count_rows(db_url, "sessions")) == before


def _counts(db_url: str) -> tuple[int, int]:
    return count_rows(db_url, "executions"), count_rows(db_url, "sessions")


def test_malformed_json_is_the_sdk_s_parse_error(served, examples, desk, db_url):
    before = _counts(db_url)
    response = post(served, "desk", b"{not json", examples.token)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32700
    _nothing_written(db_url, before)


def test_a_body_that_is_not_json_rpc_is_the_sdk_s_error(served, examples, desk, db_url):
    before = _counts(db_url)
    response = post(served, "desk", {"hello": "world"}, examples.token)
    assert 400 <= response.status_code < 500
    assert response.json()["error"]["code"] in (-32600, -32602)
    _nothing_written(db_url, before)


def test_an_unknown_method_is_method_not_found(served, examples, desk, db_url):
    before = _counts(db_url)
    response = post(served, "desk", {"jsonrpc": "2.0", "id": 3, "method": "tools/frobnicate", "params": {}},
                    examples.token, **{"MCP-Protocol-Version": "2025-11-25"})
    assert response.status_code == 200
    assert response.json()["error"]["code"] == -32601
    _nothing_written(db_url, before)


def test_a_body_over_the_limit_is_413(served, examples, desk, services, db_url):
    before = _counts(db_url)
    padding = "x" * (services.settings.max_body_bytes + 1)
    response = post(served, "desk", tools_call("get_account_activity", {"account_id": padding}), examples.token,
                    **{"MCP-Protocol-Version": "2025-11-25"})
    assert response.status_code == 413
    _nothing_written(db_url, before)


def test_a_wrong_protocol_version_is_the_sdk_s_error(served, examples, desk, db_url):
    before = _counts(db_url)
    response = post(served, "desk", tools_call("get_account_activity", {"account_id": str(uuid.uuid4())}),
                    examples.token, **{"MCP-Protocol-Version": "1999-01-01"})
    assert 400 <= response.status_code < 500
    assert response.json()["error"]["code"] < 0
    _nothing_written(db_url, before)


def test_arguments_that_are_not_an_object_are_invalid_params(served, examples, desk, db_url):
    before = _counts(db_url)
    response = post(served, "desk", tools_call("get_account_activity", ["not", "an", "object"]), examples.token,
                    **{"MCP-Protocol-Version": "2025-11-25"})
    assert response.json()["error"]["code"] == -32602
    _nothing_written(db_url, before)


def test_a_host_the_server_was_not_told_is_refused(served, examples, desk):
    response = post(served, "desk", INIT, examples.token, Host="attacker.example")
    assert response.status_code == 421


# ---------------------------------------------------------------------------- one request, one transaction


LEGACY = {"MCP-Protocol-Version": "2025-11-25"}


def _connections_taken(services) -> int:
    return services.db.pool.get_stats().get("requests_num", 0)


def _wait_all_returned(services) -> None:
    """The route gives an unused transaction's connection back after the response has gone out."""
    deadline = time.monotonic() + 5
    while True:
        stats = services.db.pool.get_stats()
        if stats["pool_available"] == stats["pool_size"]:
            return
        assert time.monotonic() < deadline, f"connections are still checked out: {stats}"
        time.sleep(0.02)


@pytest.mark.parametrize("method", ["tools/call", "tools/list"])
def test_a_tools_request_takes_one_connection_for_the_route_and_the_handler(served, examples, desk, services,
                                                                            method):
    payer, _ = funded_accounts(examples)
    body = tools_call("get_account_activity", {"account_id": payer}) if method == "tools/call" else \
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
    _wait_all_returned(services)
    before = _connections_taken(services)
    response = post(served, "desk", body, examples.token, **LEGACY)
    assert response.status_code == 200 and "error" not in response.json()
    assert response.json()["result"].get("isError") is not True
    _wait_all_returned(services)
    assert _connections_taken(services) - before == 1


def test_requests_that_no_handler_runs_give_their_connection_back(served, examples, desk, services):
    notification = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    ping = {"jsonrpc": "2.0", "id": 5, "method": "ping"}
    too_large = tools_call("get_account_activity", {"account_id": "x" * (services.settings.max_body_bytes + 1)})
    # Each kind more times than the pool has connections: one kept would soon leave none.
    for _ in range(services.settings.pool_max + 1):
        assert post(served, "desk", INIT, examples.token).status_code == 200
        assert post(served, "desk", ping, examples.token, **LEGACY).status_code == 200
        assert post(served, "desk", notification, examples.token, **LEGACY).status_code == 202
        assert post(served, "desk", b"{not json", examples.token, **LEGACY).status_code == 400
        assert post(served, "desk", too_large, examples.token, **LEGACY).status_code == 413
        assert httpx.delete(url_of(served, "desk"), headers={"Authorization": f"Bearer {examples.token}"}
                            ).status_code == 405
    _wait_all_returned(services)
    payer, _ = funded_accounts(examples)
    assert post(served, "desk", tools_call("get_account_activity", {"account_id": payer}), examples.token,
                **LEGACY).json()["result"].get("isError") is not True


def test_an_open_get_stream_holds_no_connection(served, examples, desk, services):
    """A GET is the SDK's stream for server messages, which stays open (a stateless server sends none)."""
    headers = {"Authorization": f"Bearer {examples.token}", "Accept": "text/event-stream", **LEGACY}
    with httpx.stream("GET", url_of(served, "desk"), headers=headers, timeout=60):
        _wait_all_returned(services)


def test_the_sdk_s_one_default_middleware_is_opentelemetry_which_the_endpoint_drops(services):
    """The endpoint replaces `Server.middleware` (the SDK documents dropping its OpenTelemetry middleware to
    opt out): if a later SDK ships other defaults, they must be looked at before they are dropped too."""
    from mcp.server import Server

    from ledger.api.mcp import McpEndpoint
    from ledger.api.mcp.telemetry import Telemetry

    assert [type(m).__name__ for m in Server("probe").middleware] == ["OpenTelemetryMiddleware"]
    assert [type(m) for m in McpEndpoint(services).server.middleware] == [Telemetry]


# ---------------------------------------------------------------------------- telemetry


def test_metrics_count_requests_by_method_and_outcome_without_server_names(served, examples, desk):
    list_tools(url_of(served, "desk"), examples.token)
    post(served, "nowhere", INIT, examples.token)
    body = httpx.get(f"{served}/metrics").text
    assert 'ledger_mcp_requests_total{method="tools/list",outcome="ok"}' in body
    assert 'ledger_mcp_requests_total{method="unknown",outcome="not_found"}' in body
    assert "ledger_mcp_result_bytes_bucket" in body and "ledger_mcp_request_seconds_bucket" in body
    mcp_lines = [line for line in body.splitlines() if line.startswith("ledger_mcp_")]
    assert not any("desk" in line or "nowhere" in line for line in mcp_lines)


def test_each_call_logs_one_line_naming_its_execution_id(served, examples, desk, caplog):
    payer, _ = funded_accounts(examples)
    with caplog.at_level("INFO", logger="ledger.mcp"):
        result = call_tool(url_of(served, "desk"), examples.token, "get_account_activity", {"account_id": payer})
    lines = [r for r in caplog.records if r.name == "ledger.mcp" and getattr(r, "method", None) == "tools/call"]
    assert len(lines) == 1
    assert lines[0].executionId == result.meta["ledger/executionId"]
    assert lines[0].outcome == "ok" and lines[0].mcpServer == "desk"
