"""The MCP endpoint `POST /mcp/<name>` (DESIGN 12), through the SDK's own client over real HTTP against a
running server, on the real PostgreSQL: what each caller sees, what its calls do and record, and how
bad input is answered (never a 500, nothing written).
"""

from __future__ import annotations

import json
import uuid

import httpx
import pytest

from helpers import balance, create_account, transfer
from live_helpers import GET_ACCOUNT_ACTIVITY, TRANSFER
from mcp_helpers import (DELETE_SERVER, EVERYTHING, READ_ONLY, UPDATE_SERVER, call_tool, count_rows, create_client,
                         create_server, execution, list_tools, publish_examples, reference, running_server,
                         with_client)

from ledger.config import Settings

ACTIVITY = reference("get_account_activity")
TRANSFER_REF = reference("transfer")
WRITES = [{"effect": "ALLOW", "actions": ["SELECT", "INSERT", "UPDATE", "DELETE", "INVOKE"],
           "resources": ["financial.*"]}]


@pytest.fixture
def settings(db_url, tmp_path) -> Settings:
    # The real server listens on 127.0.0.1 (any port); TestClient's requests name the host "testserver".
    return Settings(database_url=db_url, data_dir=tmp_path / "data", pool_min=1, pool_max=10,
                    mcp_allowed_hosts="127.0.0.1:*,testserver")


@pytest.fixture
def served(services):
    with running_server(services) as url:
        yield url


@pytest.fixture
def examples(api):
    publish_examples(api)
    return api


def url_of(served: str, name: str) -> str:
    return f"{served}/mcp/{name}"


def money(api) -> tuple[str, str]:
    """A funded payer and an empty payee."""
    opening = create_account(api, "opening", overdraft=True)
    payer, payee = create_account(api, "payer"), create_account(api, "payee")
    transfer(api, opening, payer, 10_000)
    return payer, payee


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
