"""A second, independent client of `POST /mcp/<name>`: the TypeScript SDK's Client over its
StreamableHTTPClientTransport with a bearer header (tests/mcp_ts_client.mjs), over real HTTP against a
running ledger on the real PostgreSQL. Skipped only when Node.js or the npm registry is missing."""

from __future__ import annotations

import uuid

import pytest

from helpers import balance
from mcp_helpers import (EVERYTHING, READ_ONLY, create_client, create_server, execution, funded_accounts, reference,
                         running_server)
from mcp_helpers import examples, settings  # noqa: F401  (fixtures)
from mcp_ts_helpers import run_ts_client, sdk_modules


ACTIVITY, TRANSFER_REF = reference("get_account_activity"), reference("transfer")


@pytest.fixture
def served(services):
    sdk_modules()  # installed (or skipped) before the server starts, so its time is not the server's
    with running_server(services) as url:
        yield url


def test_the_typescript_client_lists_the_tools_with_their_annotations(served, examples):
    create_server(examples, "viewer", [ACTIVITY, TRANSFER_REF], READ_ONLY, instructions="Read only.")
    report = run_ts_client(f"{served}/mcp/viewer", examples.token)
    assert "error" not in report, report
    assert report["protocolVersion"] == "2025-11-25"
    assert report["instructions"] == "Read only."
    tools = {tool["name"]: tool for tool in report["tools"]}
    assert list(tools) == ["get_account_activity", "transfer"]
    # The server's layer allows no write: transfer is read-only through it.
    assert tools["transfer"]["annotations"]["readOnlyHint"] is True
    assert tools["get_account_activity"]["annotations"]["readOnlyHint"] is True
    assert tools["get_account_activity"]["inputSchema"]["required"] == ["account_id"]


def test_the_typescript_client_calls_a_read_tool_and_gets_structured_content(served, examples):
    payer, _ = funded_accounts(examples)
    server_id = create_server(examples, "viewer", [ACTIVITY], READ_ONLY)
    execution_id = str(uuid.uuid4())
    report = run_ts_client(f"{served}/mcp/viewer", examples.token, [
        {"name": "get_account_activity", "arguments": {"account_id": payer, "limit": 5},
         "meta": {"ledger/executionId": execution_id}}])
    assert "error" not in report, report
    (result,) = report["calls"]
    assert result.get("isError") is not True, result
    content = result["structuredContent"]
    assert (content["account_id"], content["balance"], content["currency"]) == (payer, 10_000, "USD")
    assert len(content["transfers"]) == 1
    assert result["_meta"]["ledger/executionId"] == execution_id
    recorded = execution(examples, execution_id)
    assert (recorded["status"], recorded["mcpServerId"]) == ("SUCCEEDED", server_id)


def test_the_typescript_client_sees_a_refused_call_as_an_error_result_and_no_money_moves(served, examples):
    payer, payee = funded_accounts(examples)
    create_server(examples, "viewer", [TRANSFER_REF], READ_ONLY)
    writer = create_client(examples, "writer", EVERYTHING)
    report = run_ts_client(f"{served}/mcp/viewer", writer, [
        {"name": "transfer", "arguments": {"transfer_id": str(uuid.uuid4()), "from_account": payer,
                                           "to_account": payee, "amount": 100}}])
    assert "error" not in report, report
    (result,) = report["calls"]
    assert result["isError"] is True
    text = result["content"][0]["text"]
    assert text.startswith("action_permission_denied: ")
    assert 'MCP server "viewer"' in text
    assert result["_meta"]["ledger/error"]["code"] == "action_permission_denied"
    assert (balance(examples, payer), balance(examples, payee)) == (10_000, 0)


def test_the_typescript_client_with_a_bad_token_is_refused(served, examples):
    create_server(examples, "viewer", [ACTIVITY], READ_ONLY)
    report = run_ts_client(f"{served}/mcp/viewer", examples.token + "x")
    assert report["error"]["code"] == 401, report
    assert "unauthenticated" in report["error"]["message"]
