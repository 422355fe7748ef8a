"""The HTTP surface: POST /graphql (one request, one transaction), POST /mcp/<name> (ledger/api/mcp),
GraphiQL, the planned actions' /inbox (ledger/api/inbox.py), /healthz, /metrics.

The GraphQL execution is synchronous and runs on a worker thread: every field, including the fields
inside the `actions {}` namespace objects, then runs serially in document order on the request's one
database connection.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

from prometheus_client import Counter, Histogram
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware.errors import ServerErrorMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route, request_response

from ..db.retry import retry_lost_races
from ..errors import LedgerError, Retryable, Unauthenticated
from ..executions.tree import model_was_called, not_rerun_hint
from ..services import Services
from . import documents
from .context import RequestContext
from .documents import error_payload, first_retryable, format_error, is_document_error
from .graphiql import asset_response, graphiql_page
from .inbox import inbox_response
from .json_codec import dump_json, load_json
from .mcp import McpEndpoint
from .requests import request_transaction
from .schema import schema
from .threads import RequestThreads, request_thread_count

try:  # the router's own reading of the path under a root_path (a private helper of starlette's)
    from starlette._utils import get_route_path
except ImportError:  # pragma: no cover - an older or newer starlette: the plain path
    def get_route_path(scope: dict) -> str:
        return scope["path"]

log = logging.getLogger("ledger.http")

REQUESTS = Counter("ledger_graphql_requests_total", "GraphQL requests by outcome", ["outcome"])
REQUEST_SECONDS = Histogram("ledger_graphql_request_seconds", "GraphQL request latency")


class _RollBack(Exception):
    """Leaves the transaction block with a finished result that must not commit."""

    def __init__(self, payload: dict) -> None:
        self.payload = payload


def _json(payload: Any, status: int = 200) -> Response:
    return Response(dump_json(payload), status_code=status, media_type="application/json")


# The request headers POST /graphql reads; the first of each counts, as in starlette's `Headers.get`.
_HEADERS = (b"authorization", b"content-length", b"request-timeout", b"ledger-dry-run")


def _headers(scope: dict) -> dict[bytes, str]:
    found: dict[bytes, str] = {}
    for name, value in scope["headers"]:
        if name in _HEADERS and name not in found:
            found[name] = value.decode("latin-1")
    return found


def _errors(message: str, code: str, hint: str | None = None) -> dict:
    return {"errors": [error_payload(message, code, hint)]}


class GraphQLEndpoint:
    """POST /graphql as a plain ASGI app: it answers JSON only, so starlette's Request and Response (and
    its router, for the one path every client calls) are work it does not need (`build_app`)."""

    def __init__(self, services: Services, threads: RequestThreads) -> None:
        self.services = services
        self.threads = threads

    async def page(self, request: Request) -> Response:
        return HTMLResponse(await run_in_threadpool(graphiql_page, self.services))

    async def __call__(self, scope: dict, receive, send) -> None:
        started = time.perf_counter()
        try:
            answer = await self._post(scope, receive)
        finally:
            REQUEST_SECONDS.observe(time.perf_counter() - started)
        if answer is None:
            return  # the client went away before its body arrived: nobody to answer
        payload, status = answer
        body = dump_json(payload)
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-length", str(len(body)).encode()),
                                (b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})

    async def _post(self, scope: dict, receive) -> tuple[dict, int] | None:
        limit = self.services.settings.max_body_bytes
        headers = _headers(scope)
        declared = headers.get(b"content-length")
        if declared and declared.isdigit() and int(declared) > limit:
            return self._too_large(limit)
        # Read at most the limit (a chunked body declares no length): never buffer an unbounded body.
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            if chunk:
                size += len(chunk)
                if size > limit:
                    return self._too_large(limit)
                chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        try:
            params = load_json(body)
        except ValueError as exc:
            REQUESTS.labels("bad_request").inc()
            return _errors(f"the body is not valid JSON: {exc}", "bad_request",
                           "send a JSON object {query, variables, operationName}"), 400
        if not isinstance(params, dict) or not isinstance(params.get("query"), str):
            REQUESTS.labels("bad_request").inc()
            return _errors("the body needs a `query` string", "bad_request",
                           "send a JSON object {query, variables, operationName}"), 400
        variables = params.get("variables")
        operation_name = params.get("operationName")
        if variables is not None and not isinstance(variables, dict) or (
                operation_name is not None and not isinstance(operation_name, str)):
            REQUESTS.labels("bad_request").inc()
            return _errors("`variables` must be an object and `operationName` a string", "bad_request"), 400
        try:
            claims = self._authenticate(headers.get(b"authorization", ""))
            deadline = self._deadline(headers.get(b"request-timeout"))
        except LedgerError as exc:
            REQUESTS.labels(exc.code).inc()
            status = 401 if isinstance(exc, Unauthenticated) else 400
            return _errors(exc.message, exc.code, exc.hint), status
        dry_run = headers.get(b"ledger-dry-run", "").strip().lower() == "true"
        return await self.threads.run(self.execute, claims, params["query"], variables, operation_name, deadline,
                                      dry_run)

    @staticmethod
    def _too_large(limit: int) -> tuple[dict, int]:
        REQUESTS.labels("too_large").inc()
        return _errors(f"the request body exceeds {limit} bytes", "request_too_large",
                       "send a smaller document or variables"), 413

    def _authenticate(self, header: str):
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthenticated("this request carries no bearer token",
                                  hint="send `Authorization: Bearer <token>`; `ledger token` mints one")
        claims = self.services.tokens.verify(token.strip())
        if claims.mcp_server is not None:
            raise Unauthenticated(f"this token is confined to MCP server {claims.mcp_server}",
                                  hint="use it only at that server's /mcp/<name> endpoint; for /graphql, mint a "
                                       "token without mcpServer (issueToken(clientId, ttlSeconds))")
        return claims

    def _deadline(self, raw: str | None) -> float:
        settings = self.services.settings
        seconds = settings.request_timeout
        if raw:
            try:
                seconds = float(raw.rstrip("s"))
            except ValueError:
                raise LedgerError(f"Request-Timeout {raw!r} is not a number of seconds", code="bad_request",
                                  hint="send e.g. `Request-Timeout: 10`") from None
            if not 0 < seconds <= settings.max_request_timeout:
                raise LedgerError(f"Request-Timeout must be between 0 and {settings.max_request_timeout:.0f} s",
                                  code="bad_request")
        return time.monotonic() + seconds

    # ------------------------------------------------------------------ on a worker thread

    def execute(self, claims, query: str, variables: dict | None, operation_name: str | None,
                deadline: float, dry_run: bool) -> tuple[dict, int]:
        attempts: list[dict] = []

        def once() -> tuple[dict, int]:
            attempts.append({})  # the attempt's request_state: whether it called a model
            return self._execute_once(claims, query, variables, operation_name, deadline, dry_run, attempts[-1])

        try:
            # A request that called a model is never run again (DESIGN 13): its answer would differ, and
            # its tokens are spent. It fails `retryable`; the client may send it again.
            payload, status = retry_lost_races(once, retries=self.services.settings.race_retries, deadline=deadline,
                                               may_retry=lambda: not model_was_called(attempts[-1]))
        except Retryable as exc:
            REQUESTS.labels("retryable").inc()
            hint = not_rerun_hint(exc.hint) if model_was_called(attempts[-1]) else exc.hint
            return {"data": None, "errors": [error_payload(exc.message, exc.code, hint, retryable=True)]}, 200
        except Unauthenticated as exc:
            REQUESTS.labels("unauthenticated").inc()
            return {"errors": [error_payload(exc.message, exc.code, exc.hint)]}, 401
        REQUESTS.labels("error" if payload.get("errors") else "ok").inc()
        return payload, status

    def _execute_once(self, claims, query, variables, operation_name, deadline, dry_run,
                      request_state: dict) -> tuple[dict, int]:
        services = self.services
        try:
            with request_transaction(services, claims, deadline, rollback=dry_run) as request:
                scope = request.scope(dry_run=dry_run, request_state=request_state)
                context = RequestContext(scope)
                try:
                    result = documents.execute(schema, scope, query, variables, operation_name, documents.HTTP,
                                               context)
                except documents.DocumentRejected as rejected:
                    raise _RollBack({"data": None, "errors": [error_payload(rejected.message, rejected.code,
                                                                           rejected.hint)], "_status": 400}) from None
                payload: dict[str, Any] = {"data": result.data}
                if result.errors:
                    race = first_retryable(result.errors)
                    if race is not None:
                        raise race
                    payload["errors"] = [format_error(e) for e in result.errors]
                    status = 400 if result.data is None and all(is_document_error(e) for e in result.errors) else 200
                    raise _RollBack({**payload, "_status": status})
                if context.warnings:
                    # DESIGN 16: the warnings of the writes this answer reports (a dry run's too); a request
                    # that failed wrote nothing, so it has none.
                    payload["extensions"] = {"warnings": context.warnings}
        except _RollBack as rolled_back:
            status = rolled_back.payload.pop("_status")
            return rolled_back.payload, status
        return payload, 200


class _PageOrPost:
    """The /graphql route (an ASGI app, not a function, so that starlette does not wrap it as an endpoint):
    GraphiQL for GET (and HEAD); POST, which `_App` sends to the endpoint before routing, gets here only if
    its path reading differs from the router's, and the route names it (a PUT is answered 405 with
    `Allow: GET, HEAD, POST`)."""

    def __init__(self, graphql: GraphQLEndpoint) -> None:
        self._post = graphql
        self._page = request_response(graphql.page)

    async def __call__(self, scope, receive, send) -> None:
        await (self._post if scope["method"] == "POST" else self._page)(scope, receive, send)


class _App(Starlette):
    """Starlette, with POST /graphql and POST /mcp/<name> (nearly every request) sent straight to their
    endpoints: what those paths would pass through (the router's matching, the exception middleware, a
    Request and a Response) does nothing for them. It keeps starlette's answer to an unexpected exception
    (a plain 500, the exception logged by the server). Every other request, GET /graphql and GET or DELETE
    /mcp/<name> included, takes starlette's routes."""

    def __init__(self, graphql: GraphQLEndpoint, mcp: McpEndpoint, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._graphql = ServerErrorMiddleware(graphql)
        self._mcp = ServerErrorMiddleware(mcp)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            path = get_route_path(scope)
            if path == "/graphql":
                scope["app"] = self
                await self._graphql(scope, receive, send)
                return
            # As the route `/mcp/{name}` matches: one path segment, not empty.
            name = path[5:] if path.startswith("/mcp/") else ""
            if name and "/" not in name:
                scope["app"] = self
                scope["path_params"] = {"name": name}
                await self._mcp(scope, receive, send)
                return
        await super().__call__(scope, receive, send)


def build_app(services: Services) -> Starlette:
    settings = services.settings
    threads = RequestThreads(request_thread_count(settings))
    graphql_endpoint = GraphQLEndpoint(services, threads)

    async def healthz(request: Request) -> Response:
        def ping() -> bool:
            try:
                with services.db.pool.connection(timeout=2) as conn:
                    conn.execute("SELECT 1")
                return True
            except Exception:  # noqa: BLE001 - any failure means unhealthy
                return False

        ok = await run_in_threadpool(ping)
        return JSONResponse({"status": "ok" if ok else "unavailable"}, status_code=200 if ok else 503)

    async def metrics(request: Request) -> Response:
        from ..metrics import UNAUTHORIZED_BODY, UNAUTHORIZED_HEADERS, authorized, exposition

        if not authorized(request.headers.get("authorization"), services.settings.metrics_token):
            return Response(UNAUTHORIZED_BODY, status_code=401, media_type="text/plain",
                            headers=UNAUTHORIZED_HEADERS)
        body, media_type = await run_in_threadpool(exposition, services)
        return Response(body, media_type=media_type)

    async def graphiql_asset(request: Request) -> Response:
        # Only the pinned asset names are served, from the first cache that holds them all.
        return await run_in_threadpool(asset_response, services, request.path_params["name"])

    async def inbox(request: Request) -> Response:
        return inbox_response()

    mcp = McpEndpoint(services, threads)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette):
        # The MCP session manager runs here: a mounted sub-app's lifespan would never run.
        try:
            async with mcp.running():
                yield
        finally:
            threads.close()

    app = _App(graphql_endpoint, mcp, routes=[
        Route("/graphql", _PageOrPost(graphql_endpoint), methods=["GET", "POST"]),
        Route("/graphiql/{name}", graphiql_asset, methods=["GET"]),
        Route("/inbox", inbox, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        # The SDK answers every method itself (405 for GET and DELETE in stateless mode).
        Route("/mcp/{name}", mcp, methods=["GET", "POST", "DELETE"]),
    ], lifespan=lifespan)
    app.state.mcp = mcp
    return app
