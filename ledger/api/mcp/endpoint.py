"""`POST /mcp/<name>`: the ledger's MCP servers, on the official `mcp` SDK (DESIGN 12).

One low-level `Server` serves every record: its handlers read the resolved record and the caller from
the request the route handed on (`ctx.request.scope`). One stateless session manager, answering JSON,
runs in the app's lifespan. The route authenticates the bearer token as `/graphql` does, resolves the
record by name (404 when it is missing, disabled or deleted) and hands the request to the session
manager, which owns everything JSON-RPC: parsing, the protocol version, body limits and transport
security. No JSON-RPC is written here.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response
from starlette.types import Receive, Scope as AsgiScope, Send

from ...actions.mcp_servers import load_server_by_name
from ...auth.clients import client_layer, load_principal, principal_query
from ...config import Settings
from ...errors import LedgerError, PermissionDenied, Retryable, Unauthenticated
from ...policy.chain import Chain
from ...scope import Scope
from ...services import Services
from ..json_codec import dump_json
from .calls import Caller, McpCalls
from .telemetry import CALLER_KEY, OBSERVED_KEY, Telemetry, observe_refusal

log = logging.getLogger("ledger.mcp")


def transport_security(settings: Settings) -> TransportSecuritySettings:
    """DNS-rebinding protection from LEDGER_MCP_ALLOWED_HOSTS: the Host values a browser's page may not
    forge, and the Origins derived from them. `*` turns the check off (behind a proxy that checks)."""
    hosts = settings.mcp_hosts()
    if hosts == ["*"]:
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    origins = [f"{scheme}://{host}" for host in hosts for scheme in ("http", "https")]
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=list(hosts),
                                     allowed_origins=origins)


class McpEndpoint:
    """The MCP route (an ASGI app) and the one session manager it hands requests to."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.calls = McpCalls(services)
        self.server: Server[Any] = Server(
            "ledger",
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            # The ledger reads a call's arguments from its body only; `Mcp-Param-*` header mirrors
            # (2026-07-28) are not consulted, and resolving a schema before the handler would cost every
            # call a second listing transaction.
            get_tool_input_schema=lambda name: None,
        )
        self.server.middleware.append(Telemetry())
        self._sessions: StreamableHTTPSessionManager | None = None

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The session manager's life: it runs only inside the app's lifespan (a manager runs once)."""
        settings = self.services.settings
        sessions = StreamableHTTPSessionManager(
            app=self.server, stateless=True, json_response=True, security_settings=transport_security(settings),
            max_request_body_size=settings.max_body_bytes)
        async with sessions.run():
            self._sessions = sessions
            try:
                yield
            finally:
                self._sessions = None

    # ------------------------------------------------------------------ the route

    async def __call__(self, scope: AsgiScope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        name = scope.get("path_params", {}).get("name", "")
        try:
            caller = await self._resolve(scope, name)
        except _Refusal as refusal:
            observe_refusal(refusal.outcome, started, server_name=name, status=refusal.status)
            await _refusal_response(refusal)(scope, receive, send)
            return
        sessions = self._sessions
        if sessions is None:
            observe_refusal("not_running", started, server_name=name, status=503)
            await _refusal_response(_Refusal(503, "unavailable", "the MCP endpoint is not running",
                                             "retry shortly: the server is starting or stopping"))(scope, receive, send)
            return
        scope[CALLER_KEY] = caller
        status = 0

        async def watched(message: dict) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        await sessions.handle_request(scope, receive, watched)
        if status >= 400 and not scope.get(OBSERVED_KEY):
            # The SDK answered before any handler ran (a body it could not parse, over the limit, a host
            # it was not told, a protocol version it does not speak, a notification): one line still.
            observe_refusal(f"http_{status}", started, server_name=name, status=status, caller=caller)

    async def _resolve(self, scope: AsgiScope, name: str) -> Caller:
        headers = {key.decode("latin-1").lower(): value.decode("latin-1") for key, value in scope["headers"]}
        scheme, _, token = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise _Refusal(401, "unauthenticated", "this request carries no bearer token",
                           "send `Authorization: Bearer <token>`; issueToken (or `ledger token`) mints one")
        try:
            claims = self.services.tokens.verify(token.strip())
        except Unauthenticated as exc:
            raise _Refusal(401, exc.code, exc.message, exc.hint) from None
        deadline = time.monotonic() + self.services.settings.request_timeout
        try:
            return await run_in_threadpool(self._load, claims, name, deadline)
        except Unauthenticated as exc:
            raise _Refusal(401, exc.code, exc.message, exc.hint) from None
        except PermissionDenied as exc:
            raise _Refusal(403, exc.code, exc.message, exc.hint) from None
        except Retryable as exc:
            raise _Refusal(503, exc.code, exc.message, exc.hint) from None
        except LedgerError as exc:
            raise _Refusal(400, exc.code, exc.message, exc.hint) from None

    def _load(self, claims: Any, name: str, deadline: float) -> Caller:
        services = self.services
        with services.db.transaction(claims.tenant_id, deadline=deadline, rollback=True,
                                     first=[principal_query(claims.tenant_id, claims.client_id)]) as conn:
            principal, policies = load_principal(conn, claims.tenant_id, claims.client_id, claims.raw,
                                                 row=conn.ledger_first[0])
            scope = Scope(conn=conn, principal=principal, chain=Chain((client_layer(principal, policies),)),
                          services=services, deadline=deadline)
            server = load_server_by_name(scope, name)
        if claims.mcp_server is not None and (server is None or server.id != claims.mcp_server):
            # Before the 404: a confined token learns nothing about the tenant's other servers.
            raise Unauthenticated(f"this token is confined to MCP server {claims.mcp_server}",
                                  hint="use it only at that server's /mcp/<name> endpoint")
        if server is None:
            raise _Refusal(404, "not_found", f"no MCP server {name!r} is served here",
                           "check the name (mcpServers lists the servers); a disabled or deleted server is not served")
        return Caller(principal, policies, server, deadline)

    # ------------------------------------------------------------------ the handlers

    async def _list_tools(self, ctx: ServerRequestContext[Any, Any],
                          params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return await run_in_threadpool(self.calls.list_tools, _caller(ctx))

    async def _call_tool(self, ctx: ServerRequestContext[Any, Any],
                         params: types.CallToolRequestParams) -> types.CallToolResult:
        return await run_in_threadpool(self.calls.call_tool, _caller(ctx), params)


def _caller(ctx: ServerRequestContext[Any, Any]) -> Caller:
    return ctx.request.scope[CALLER_KEY]


class _Refusal(Exception):
    """A request answered by the route itself, before the SDK sees it."""

    def __init__(self, status: int, code: str, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.hint = status, code, message, hint

    @property
    def outcome(self) -> str:
        return self.code


def _refusal_response(refusal: _Refusal) -> Response:
    headers = {"WWW-Authenticate": "Bearer"} if refusal.status == 401 else {}
    body = {"error": {"code": refusal.code, "message": refusal.message, "hint": refusal.hint}}
    return Response(dump_json(body), status_code=refusal.status, media_type="application/json", headers=headers)
