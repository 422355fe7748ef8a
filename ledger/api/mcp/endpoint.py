"""`POST /mcp/<name>`: the ledger's MCP servers, on the official `mcp` SDK (DESIGN 12).

One low-level `Server` serves every record: its handlers read the resolved record and the caller from
the request the route handed on (`ctx.request.scope`). One stateless session manager, answering JSON,
runs in the app's lifespan. The route authenticates the bearer token as `/graphql` does, reads the body
(at most the limit, before it takes a database connection), opens the request's transaction with the
client's and the record's rows (and the rows of the actions the record lists) in its first round trip,
answers 401 or 404 itself (the record missing, disabled or deleted), and hands the request on: a
2026-07-28 tools/call or tools/list to the SDK's steps called directly (`exchange`), everything else (and
whatever those steps would refuse) to the session manager, which owns everything JSON-RPC: parsing, the
protocol version, body limits and transport security. The handler's first attempt runs in that
transaction; a request that no handler takes rolls it back. No JSON-RPC is written here.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from starlette.responses import Response
from starlette.types import Message, Receive, Scope as AsgiScope, Send

from ...actions.mcp_servers import load_server_by_name, server_and_tools_by_name_query, server_and_tools_of_row
from ...config import Settings
from ...errors import LedgerError, PermissionDenied, Retryable, Unauthenticated
from ...services import Services
from ..json_codec import dump_json
from ..requests import HeldTransaction
from ..threads import RequestThreads, request_thread_count
from .calls import Caller, McpCalls
from .exchange import SingleExchange
from .telemetry import CALLER_KEY, OBSERVED_KEY, Telemetry, Unobserved, observe_refusal

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

    def __init__(self, services: Services, threads: RequestThreads | None = None) -> None:
        self.services = services
        # The request threads /graphql runs on (`build_app` shares them); one's own otherwise.
        settings = services.settings
        self.threads = threads or RequestThreads(request_thread_count(settings))
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
        # The SDK's one default middleware opens an OpenTelemetry span per message; the ledger exports no
        # spans (its Telemetry measures and logs each request), so it is dropped as the SDK documents
        # ("Drop it from this list to opt out"); tests/test_mcp_endpoint.py fails if the defaults change.
        self.server.middleware[:] = [Telemetry()]
        self._sessions: StreamableHTTPSessionManager | None = None
        self._exchange = SingleExchange(self.server, TransportSecurityMiddleware(transport_security(settings)))

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
        # The body first: a client slow to send it holds no database connection meanwhile.
        limit = self.services.settings.max_body_bytes
        received, over_limit = await _read_body(receive, limit)
        if received[-1]["type"] == "http.disconnect":
            return  # the client left: nobody to answer
        if not over_limit and self._sessions is not None:
            body = b"".join(m.get("body", b"") for m in received if m["type"] == "http.request")
            prepared = await self._exchange.prepare(scope, body, limit)
            if prepared is not None:
                await self._answer_directly(scope, receive, send, prepared, name, started)
                return
        try:
            caller = await self._resolve(scope, name)
        except _Refusal as refusal:
            observe_refusal(refusal.outcome, started, server_name=name, status=refusal.status)
            await _refusal_response(refusal)(scope, receive, send)
            return
        try:
            await self._hand_on(scope, received, receive, send, caller, name, started, over_limit)
        finally:
            if caller.opened.held:
                # No handler took the transaction (initialize, ping, a request the SDK refused): roll it back,
                # even when the request was cancelled.
                with anyio.CancelScope(shield=True):
                    await self.threads.run(caller.opened.discard)

    async def _hand_on(self, scope: AsgiScope, received: list[Message], receive: Receive, send: Send,
                       caller: Caller, name: str, started: float, over_limit: bool) -> None:
        sessions = self._sessions
        if sessions is None:
            observe_refusal("not_running", started, server_name=name, status=503)
            await _refusal_response(_Refusal(503, "unavailable", "the MCP endpoint is not running",
                                             "retry shortly: the server is starting or stopping"))(scope, receive, send)
            return
        if over_limit or scope.get("method") != "POST":
            # No handler will run: the SDK refuses the body, or answers the method itself (a GET is a stream
            # that stays open), so the connection goes back now.
            await self.threads.run(caller.opened.discard)
        scope[CALLER_KEY] = caller
        status = 0

        async def watched(message: dict) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        await sessions.handle_request(scope, _replay(received, receive), watched)
        if status >= 400 and not scope.get(OBSERVED_KEY):
            # The SDK answered before any handler ran (a body it could not parse, over the limit, a host
            # it was not told, a protocol version it does not speak, a notification): one line still.
            observe_refusal(f"http_{status}", started, server_name=name, status=status, caller=caller)

    async def _answer_directly(self, scope: AsgiScope, receive: Receive, send: Send, prepared: Any, name: str,
                               started: float) -> None:
        """A 2026-07-28 tools/call or tools/list that the SDK's checks let through (`exchange`): the token,
        then one step on a request thread that opens the transaction (answering 401 or 404 as the route
        does), validates the params and makes the call."""
        try:
            claims, deadline = self._claims_of(prepared.authorization)
        except _Refusal as refusal:
            observe_refusal(refusal.outcome, started, server_name=name, status=refusal.status)
            await _refusal_response(refusal)(scope, receive, send)
            return

        async def handler(prepared: Any) -> Any:
            return await self.threads.run(self._open_and_handle, claims, name, deadline, prepared)

        try:
            await self._exchange.answer(prepared, send, handler)
        except _Refusal as refusal:
            observe_refusal(refusal.outcome, started, server_name=name, status=refusal.status)
            await _refusal_response(refusal)(scope, receive, send)
        finally:
            caller = scope.get(CALLER_KEY)
            if caller is not None and caller.opened.held:
                # The step was cancelled between opening the transaction and its call: roll it back.
                with anyio.CancelScope(shield=True):
                    await self.threads.run(caller.opened.discard)

    def _open_and_handle(self, claims: Any, name: str, deadline: float, prepared: Any) -> Any:
        """On a request thread: the transaction opened as `_resolve` opens it, then the handler's work."""
        scope = prepared.scope
        try:
            caller = self._open(claims, name, deadline)
        except _Refusal:
            raise
        except LedgerError as exc:
            raise _refusal_of(exc) from None
        scope[CALLER_KEY] = caller
        try:
            params = self._exchange.validated(prepared)
            if prepared.envelope.method == "tools/call":
                return self.calls.call_tool(caller, params)
            return self.calls.list_tools(caller)
        finally:
            caller.opened.discard()  # unless the call took it (a refusal before it ran, invalid params)

    def _claims(self, scope: AsgiScope) -> tuple[Any, float]:
        """The bearer token's verified claims and the request's deadline; a `_Refusal` (401) without one."""
        # The last Authorization header counts (as a dict of the headers would keep it); only it is decoded.
        authorization = b""
        for key, value in scope["headers"]:
            if key.lower() == b"authorization":
                authorization = value
        return self._claims_of(authorization)

    def _claims_of(self, authorization: bytes) -> tuple[Any, float]:
        """`_claims` of the request's last Authorization header (b"" without one)."""
        scheme, _, token = authorization.decode("latin-1").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise _Refusal(401, "unauthenticated", "this request carries no bearer token",
                           "send `Authorization: Bearer <token>`; issueToken (or `ledger token`) mints one")
        try:
            claims = self.services.tokens.verify(token.strip())
        except Unauthenticated as exc:
            raise _Refusal(401, exc.code, exc.message, exc.hint) from None
        return claims, time.monotonic() + self.services.settings.request_timeout

    async def _resolve(self, scope: AsgiScope, name: str) -> Caller:
        claims, deadline = self._claims(scope)
        try:
            return await self.threads.run(self._open, claims, name, deadline)
        except _Refusal:
            raise
        except LedgerError as exc:
            raise _refusal_of(exc) from None

    def _open(self, claims: Any, name: str, deadline: float) -> Caller:
        """The caller and the record, read in the request's transaction (BEGIN, the client's row, and the
        record's row with the rows of the actions it lists, in one round trip), which stays open for the
        handler."""
        held = HeldTransaction.open(self.services, claims, deadline,
                                    also=[server_and_tools_by_name_query(claims.tenant_id, name)])
        try:
            request = held.transaction
            server_row, tool_rows = server_and_tools_of_row(request.rows[0])
            opening = request.scope()
            server = load_server_by_name(opening, name, row=server_row)
            if claims.mcp_server is not None and (server is None or server.id != claims.mcp_server):
                # Before the 404: a confined token learns nothing about the tenant's other servers.
                raise Unauthenticated(f"this token is confined to MCP server {claims.mcp_server}",
                                      hint="use it only at that server's /mcp/<name> endpoint")
            if server is None:
                raise _Refusal(404, "not_found", f"no MCP server {name!r} is served here",
                               "check the name (mcpServers lists the servers); a disabled or deleted server is "
                               "not served")
        except BaseException:
            held.discard()
            raise
        return Caller(request.principal, request.policies, server, deadline, held, tool_rows=tool_rows,
                      layer=opening.chain.layers[0])

    # ------------------------------------------------------------------ the handlers

    async def _list_tools(self, ctx: ServerRequestContext[Any, Any],
                          params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return await self.threads.run(self.calls.list_tools, _caller(ctx))

    async def _call_tool(self, ctx: ServerRequestContext[Any, Any],
                         params: types.CallToolRequestParams) -> types.CallToolResult:
        return await self.threads.run(self.calls.call_tool, _caller(ctx), params)


def _caller(ctx: ServerRequestContext[Any, Any]) -> Caller:
    return ctx.request.scope[CALLER_KEY]


async def _read_body(receive: Receive, limit: int) -> tuple[list[Message], bool]:
    """The request's messages up to the end of its body, or up to the first past `limit` bytes (then
    True: the SDK, reading on, refuses the body with its own error)."""
    messages: list[Message] = []
    size = 0
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            return messages, False
        size += len(message.get("body", b""))
        if size > limit:
            return messages, True
        if not message.get("more_body", False):
            return messages, False


def _replay(messages: list[Message], receive: Receive) -> Receive:
    """`receive` for the SDK: the messages the route read, then the rest of the request."""
    pending = list(messages)

    async def replayed() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replayed


class _Refusal(Unobserved):
    """A request answered by the route itself, before the SDK sees it (or, answered directly, raised through
    the SDK's middleware by the handler's step, which the middleware leaves to the route)."""

    def __init__(self, status: int, code: str, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.hint = status, code, message, hint

    @property
    def outcome(self) -> str:
        return self.code


def _refusal_of(exc: LedgerError) -> _Refusal:
    """The route's answer to a failure opening the request's transaction."""
    if isinstance(exc, Unauthenticated):
        return _Refusal(401, exc.code, exc.message, exc.hint)
    if isinstance(exc, PermissionDenied):
        return _Refusal(403, exc.code, exc.message, exc.hint)
    if isinstance(exc, Retryable):
        return _Refusal(503, exc.code, exc.message, exc.hint)
    return _Refusal(400, exc.code, exc.message, exc.hint)


def _refusal_response(refusal: _Refusal) -> Response:
    headers = {"WWW-Authenticate": "Bearer"} if refusal.status == 401 else {}
    body = {"error": {"code": refusal.code, "message": refusal.message, "hint": refusal.hint}}
    return Response(dump_json(body), status_code=refusal.status, media_type="application/json", headers=headers)
