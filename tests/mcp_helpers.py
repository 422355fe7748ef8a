"""Helpers for the MCP endpoint's tests: a real HTTP server (uvicorn on a free port, in a thread, with
the app `build_app` makes), the SDK's own client against it, and records made through GraphQL."""

from __future__ import annotations

import socket
import threading
import time
import uuid
from contextlib import contextmanager
from typing import Any, Awaitable, Callable

import anyio
import httpx2
import pytest
import uvicorn
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from helpers import create_account, transfer
from live_helpers import EXAMPLES

from ledger.api.http import build_app
from ledger.client.publish import publish
from ledger.config import Settings

CREATE_SERVER = """mutation($id: UUID!, $input: McpServerInput!) { mcpServers {
  createMcpServer(id: $id, input: $input) { id name path } } }"""
UPDATE_SERVER = """mutation($id: UUID!, $input: McpServerInput!) { mcpServers {
  updateMcpServer(id: $id, input: $input) { id } } }"""
DELETE_SERVER = """mutation($id: UUID!) { mcpServers { deleteMcpServer(id: $id) { id } } }"""
CREATE_CLIENT = """mutation($id: UUID!, $name: String!, $policies: [PolicyStatementInput!]!) { clients {
  createClient(id: $id, input: {name: $name, policies: $policies}) { id } } }"""
ISSUE_TOKEN = """mutation($id: UUID!, $ttl: Int, $server: UUID) { clients {
  issueToken(clientId: $id, ttlSeconds: $ttl, mcpServer: $server) { token } } }"""
EXECUTION = """query($id: UUID!) { actions { execution(id: $id) {
  executionId status mcpServerId sessionId event { eventType data }
  invocation { input output error { code message hint } } } } }"""

READ_ONLY = [{"effect": "ALLOW", "actions": ["SELECT", "INVOKE"], "resources": ["financial.*"]}]
EVERYTHING = [{"effect": "ALLOW", "actions": ["SELECT", "INSERT", "UPDATE", "DELETE", "INVOKE"],
               "resources": ["financial.*"]}]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def running_server(services):
    """`build_app(services)` served over real HTTP; yields its base URL."""
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(build_app(services), host="127.0.0.1", port=port, log_level="warning",
                                           lifespan="on"))
    thread = threading.Thread(target=server.run, name="mcp-test-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the test server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)


def with_client(url: str, token: str, work: Callable[[Client], Awaitable[Any]], *, mode: str = "auto") -> Any:
    """Runs `work(client)` with the SDK's client connected to `url` with `token`."""

    async def main() -> Any:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
            async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:
                return await work(client)

    try:
        return anyio.run(main)
    except BaseExceptionGroup as group:
        # The client's task groups wrap what the server answered: raise that (an MCPError, ...).
        while isinstance(group, BaseExceptionGroup) and len(group.exceptions) == 1:
            group = group.exceptions[0]
        raise group from None


def list_tools(url: str, token: str, **kw) -> list:
    async def work(client: Client):
        return (await client.list_tools()).tools

    return with_client(url, token, work, **kw)


def call_tool(url: str, token: str, name: str, arguments: Any = None, meta: dict | None = None, **kw):
    async def work(client: Client):
        return await client.call_tool(name, arguments, meta=meta)

    return with_client(url, token, work, **kw)


class _Querying:
    def __init__(self, api) -> None:
        self.api = api

    def query(self, document: str, variables: dict | None = None, **options: Any) -> dict:
        return self.api.gql(document, variables)

    def response(self, document: str, variables: dict | None = None, **options: Any) -> dict:
        body = self.api.post(document, variables).json()
        assert "errors" not in body, body
        return {"data": body["data"], "extensions": body.get("extensions") or {}}


def publish_examples(api) -> None:
    publish(_Querying(api), [EXAMPLES])


def reference(name: str, **fields: Any) -> dict:
    return {"name": name, **fields}


def create_server(api, name: str, tools: list[dict], policies: list[dict] | None = None, **fields: Any) -> str:
    server_id = str(uuid.uuid4())
    api.gql(CREATE_SERVER, {"id": server_id, "input": {"name": name, "tools": tools,
                                                        "policies": policies if policies is not None else READ_ONLY,
                                                        **fields}})
    return server_id


def create_client(api, name: str, policies: list[dict], *, mcp_server: str | None = None,
                  ttl: int | None = None) -> str:
    """A new client with `policies`; its token (confined to `mcp_server` when given)."""
    client_id = str(uuid.uuid4())
    api.gql(CREATE_CLIENT, {"id": client_id, "name": name, "policies": policies})
    return token_for(api, client_id, mcp_server=mcp_server, ttl=ttl)


def token_for(api, client_id: str, *, mcp_server: str | None = None, ttl: int | None = None) -> str:
    return api.gql(ISSUE_TOKEN, {"id": client_id, "ttl": ttl, "server": mcp_server})["clients"]["issueToken"]["token"]


def execution(api, execution_id: str) -> dict | None:
    return api.gql(EXECUTION, {"id": execution_id})["actions"]["execution"]


def count_rows(db_url: str, table: str) -> int:
    """Rows of a table in every tenant (as the owner: no row level security)."""
    import psycopg

    with psycopg.connect(db_url) as conn:
        return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


# ---------------------------------------------------------------------------- fixtures
# A test module takes these by importing them: `from mcp_helpers import examples, served, settings`.


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


def funded_accounts(api) -> tuple[str, str]:
    """A funded payer and an empty payee."""
    opening = create_account(api, "opening", overdraft=True)
    payer, payee = create_account(api, "payer"), create_account(api, "payee")
    transfer(api, opening, payer, 10_000)
    return payer, payee
