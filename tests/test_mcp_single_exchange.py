"""A 2026-07-28 `tools/call` or `tools/list` is answered without the SDK's streamable-HTTP transport
(ledger/api/mcp/exchange.py): its answer must be the transport's, byte for byte, and whatever the SDK would
refuse before a handler runs must still be the SDK's refusal.

Each case sends the same request twice over real HTTP: once as served, once with the direct answer turned
off (every request then takes the SDK's transport, as before the direct answer existed).
"""

from __future__ import annotations

import json
import uuid

import httpx
import mcp_types
import pytest

from mcp_helpers import EVERYTHING, create_server, funded_accounts, reference
from mcp_helpers import examples, served, settings  # noqa: F401  (fixtures)

from ledger.api.mcp import exchange

LATEST = mcp_types.LATEST_PROTOCOL_VERSION
ENVELOPE = {"io.modelcontextprotocol/protocolVersion": LATEST,
            "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {}}


def post(served: str, token: str, body: dict, **headers) -> httpx.Response:
    method = body["method"]
    sent = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
            "Authorization": f"Bearer {token}", "MCP-Protocol-Version": LATEST, "Mcp-Method": method}
    if method == "tools/call":
        sent["Mcp-Name"] = body["params"]["name"]
    sent.update(headers)
    return httpx.post(f"{served}/mcp/desk", content=json.dumps(body), headers=sent, timeout=60)


def call(name: str, arguments, meta: dict | None = None) -> dict:
    return {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": name, "arguments": arguments, "_meta": {**ENVELOPE, **(meta or {})}}}


LIST = {"jsonrpc": "2.0", "id": "list-1", "method": "tools/list", "params": {"_meta": ENVELOPE}}


@pytest.fixture
def desk(examples):
    create_server(examples, "desk", [reference("get_account_activity"), reference("transfer")], EVERYTHING)


@pytest.fixture
def answered(monkeypatch):
    """Counts the requests answered directly; `through_the_sdk()` turns the direct answer off."""
    counted = {"direct": 0}
    original = exchange.SingleExchange.prepare

    async def counting(self, *args, **kwargs):
        prepared = await original(self, *args, **kwargs)
        counted["direct"] += prepared is not None
        return prepared

    async def declining(self, *args, **kwargs):
        return None

    monkeypatch.setattr(exchange.SingleExchange, "prepare", counting)
    counted["through_the_sdk"] = lambda: monkeypatch.setattr(exchange.SingleExchange, "prepare", declining)
    return counted


def _same_answer(served, token, body, answered, *, execution_ids: tuple[str, str] | None = None) -> httpx.Response:
    """`body` answered directly, then through the SDK; with `execution_ids`, each call gets its own (a
    repeat would answer the stored output, whose keys JSONB orders), and the SDK's answer is compared with
    its id in the first one's place."""
    first, second = execution_ids or ("", "")
    meta = body["params"]["_meta"]
    if first:
        meta["ledger/executionId"] = first
    direct = post(served, token, body)
    assert answered["direct"] == 1
    answered["through_the_sdk"]()
    if second:
        meta["ledger/executionId"] = second
    sdk = post(served, token, body)
    assert (direct.status_code, direct.headers["content-type"], direct.content) == (
        sdk.status_code, sdk.headers["content-type"], sdk.content.replace(second.encode(), first.encode()))
    return direct


def test_a_call_answers_as_the_sdk_s_transport_does(served, examples, desk, answered):
    payer, _ = funded_accounts(examples)
    body = call("get_account_activity", {"account_id": payer})
    response = _same_answer(served, examples.token, body, answered,
                            execution_ids=(str(uuid.uuid4()), str(uuid.uuid4())))
    result = response.json()["result"]
    assert result["isError"] is False and result["resultType"] == "complete"
    assert "io.modelcontextprotocol/serverInfo" in result["_meta"]


def test_a_listing_answers_as_the_sdk_s_transport_does(served, examples, desk, answered):
    response = _same_answer(served, examples.token, LIST, answered)
    tools = response.json()["result"]["tools"]
    assert [tool["name"] for tool in tools] == ["get_account_activity", "transfer"]
    assert tools[1]["_meta"]["ledger/actionVersion"] is None  # the null the ledger's _meta promises, kept


def test_a_failed_call_answers_as_the_sdk_s_transport_does(served, examples, desk, answered):
    body = call("get_account_activity", {"account_id": str(uuid.uuid4())}, {"ledger/executionId": "seven"})
    result = _same_answer(served, examples.token, body, answered).json()["result"]
    assert result["isError"] is True
    assert result["_meta"]["ledger/error"]["code"] == "bad_request"


def test_an_unknown_tool_answers_the_sdk_s_json_rpc_error(served, examples, desk, answered):
    response = _same_answer(served, examples.token, call("settle_invoice", {}), answered)
    assert response.json()["error"]["code"] == -32602


def test_params_the_version_s_schema_refuses_answer_the_sdk_s_error(served, examples, desk, answered):
    response = _same_answer(served, examples.token, call("get_account_activity", ["not", "an", "object"]), answered)
    assert response.json()["error"]["code"] == -32602


@pytest.mark.parametrize("headers", [{"Mcp-Name": "transfer"}, {"Mcp-Method": "tools/list"},
                                     {"Content-Type": "text/plain"}, {"Accept": "text/event-stream"},
                                     {"Host": "attacker.example"}])
def test_a_request_the_sdk_refuses_before_a_handler_is_left_to_the_sdk(served, examples, desk, answered, headers):
    payer, _ = funded_accounts(examples)
    direct = post(served, examples.token, call("get_account_activity", {"account_id": payer}), **headers)
    assert answered["direct"] == 0
    assert direct.status_code >= 400


# ---------------------------------------------------------------------------- the server's actions read ahead
# The route reads the actions a server references with its row, in the request's first round trip
# (ledger/actions/mcp_servers.py `server_and_tools_by_name_query`); a reference that statement does not read
# is read by `load_action` as before. Stored references in forms the write path never produces take both.


def test_references_the_statement_ahead_cannot_read_resolve_as_before(served, examples, db_url):
    import psycopg
    from live_helpers import GET_ACCOUNT_ACTIVITY, TRANSFER

    server_id = create_server(examples, "desk", [reference("get_account_activity")], EVERYTHING)
    stored = [
        {"name": "get_account_activity", "actionId": GET_ACCOUNT_ACTIVITY.upper(), "actionVersion": 1},  # ahead
        {"name": "transfer", "actionId": TRANSFER, "actionVersion": 99},  # no such version: left out
        {"name": "nothing", "actionId": "not-a-uuid"},  # left out
        {"name": "transfer", "actionId": "{" + TRANSFER + "}", "actionVersion": None},  # read by load_action
    ]
    with psycopg.connect(db_url) as conn:  # as the owner: the write path would normalize these
        conn.execute("UPDATE mcp_servers SET tools = %s::jsonb WHERE id = %s", (json.dumps(stored), server_id))
    for body in (LIST, {**LIST, "params": {}}):  # through the direct answer, then through the SDK (2025-11-25)
        headers = {} if body is LIST else {"MCP-Protocol-Version": "2025-11-25"}
        response = post(served, examples.token, {**body, "method": "tools/list"}, **headers)
        tools = response.json()["result"]["tools"]
        assert [(t["name"], t["_meta"]["ledger/actionVersion"]) for t in tools] == [
            ("get_account_activity", 1), ("transfer", None)]


def test_no_tool_input_schema_is_resolved_so_no_mcp_param_header_is_checked(services):
    # The direct answer leaves out the SDK's Mcp-Param-* check, which passes every request only while the
    # server resolves no schema: a schema here would need that check too.
    from ledger.api.mcp import McpEndpoint

    endpoint = McpEndpoint(services)
    try:
        assert endpoint.server.get_tool_input_schema("get_account_activity") is None
    finally:
        endpoint.threads.close()


def test_a_routing_header_sent_twice_is_refused_by_the_sdk(served, examples, desk, answered):
    payer, _ = funded_accounts(examples)
    body = call("get_account_activity", {"account_id": payer})
    headers = [("Accept", "application/json"), ("Content-Type", "application/json"),
               ("Authorization", f"Bearer {examples.token}"), ("MCP-Protocol-Version", LATEST),
               ("Mcp-Method", "tools/call"), ("Mcp-Name", "get_account_activity"), ("Mcp-Method", "tools/call")]
    response = httpx.post(f"{served}/mcp/desk", content=json.dumps(body), headers=headers, timeout=60)
    assert answered["direct"] == 0
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "mcp-method header appears more than once"
