"""The HTTP surface: POST /graphql (one request, one transaction), GraphiQL, /healthz, /metrics.

The GraphQL execution is synchronous and runs on a worker thread: every field, including the fields
inside the `actions {}` namespace objects, then runs serially in document order on the request's one
database connection.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import re
import random
import time
from typing import Any

import orjson
from graphql import GraphQLError, OperationDefinitionNode, parse
from prometheus_client import Counter, Histogram
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route
from strawberry.exceptions import MissingQueryError
from strawberry.schema.exceptions import CannotGetOperationTypeError, InvalidOperationTypeError

from ..app_services import Services
from ..auth.clients import client_layer, load_principal, principal_query
from ..errors import LedgerError, Retryable, Unauthenticated
from ..policy.chain import Chain
from ..scope import Scope
from .context import RequestContext
from .graphiql import asset_response, graphiql_page
from .schema import schema

log = logging.getLogger("ledger.http")

REQUESTS = Counter("ledger_graphql_requests_total", "GraphQL requests by outcome", ["outcome"])
REQUEST_SECONDS = Histogram("ledger_graphql_request_seconds", "GraphQL request latency")


class _RollBack(Exception):
    """Leaves the transaction block with a finished result that must not commit."""

    def __init__(self, payload: dict) -> None:
        self.payload = payload


# A run of 19 digits is the shortest text of an integer orjson cannot hold exactly (2**63 has 19).
_LONG_DIGITS = re.compile(rb"[0-9]{19}")


def _load_json(body: bytes) -> Any:
    """The request body as JSON; ValueError when it is not JSON.

    orjson reads an integer beyond 64 bits as a float, silently dropping digits, so a body that may hold
    one is read by the standard library, which keeps every integer exact (inputs are stored as received).
    """
    if not _LONG_DIGITS.search(body):
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError:
            pass  # the standard library reads a UTF-8 BOM or UTF-16, or says what is wrong
    try:
        value = json.loads(body, parse_constant=_not_json, parse_float=_finite_float)
    except RecursionError:  # nesting deeper than the stack
        raise ValueError("the JSON is nested too deeply") from None
    if _holds_lone_surrogate(value):
        # `"\ud800"` (or its bytes, read with surrogatepass) parses to a string that is not Unicode text:
        # it could be neither stored (PostgreSQL refuses it) nor written back as UTF-8. orjson refuses it.
        raise ValueError("a string holds a lone surrogate (an unpaired \\uD800-\\uDFFF escape), which is not a "
                         "Unicode character")
    return value


_SURROGATE = re.compile("[\ud800-\udfff]")


def _holds_lone_surrogate(value: Any) -> bool:
    """Whether a parsed JSON value holds a surrogate code point (a pair parses to one character, so any
    left is unpaired), in a string or in a key."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not a JSON value")


def _finite_float(text: str) -> float:
    """A JSON number with a fraction or exponent, which must fit a double (1e999 would be infinity, which
    JSON cannot write back: orjson refuses it too)."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is too large for a 64-bit float")
    return value


def _json(payload: Any, status: int = 200) -> Response:
    try:
        content = orjson.dumps(payload, option=orjson.OPT_PASSTHROUGH_DATACLASS, default=str)
    except orjson.JSONEncodeError:
        # An integer beyond 64 bits (an input stored as received): the standard library writes it exactly.
        text = json.dumps(payload, default=str, ensure_ascii=False, separators=(",", ":"))
        try:
            content = text.encode()
        except UnicodeEncodeError:  # a lone surrogate has no UTF-8: write it as a JSON escape
            content = json.dumps(payload, default=str, separators=(",", ":")).encode()
    return Response(content, status_code=status, media_type="application/json")


def error_payload(message: str, code: str, hint: str | None = None, **extra: Any) -> dict:
    ext: dict[str, Any] = {"code": code}
    if hint:
        ext["hint"] = hint
    ext.update(extra)
    return {"message": message, "extensions": ext}


def format_error(error: GraphQLError) -> dict:
    original = _translated(error.original_error)
    out: dict[str, Any] = {"message": error.message}
    if error.locations:
        out["locations"] = [{"line": loc.line, "column": loc.column} for loc in error.locations]
    if error.path:
        out["path"] = list(error.path)
    if isinstance(original, LedgerError):
        out["message"] = original.message
        out["extensions"] = original.as_extensions()
    elif _is_document_error(error):
        # Syntax, validation and variable-coercion errors: the document or its variables are wrong.
        out["extensions"] = {"code": "graphql_validation_failed",
                             "hint": "check the document and its variables against the schema (see GraphiQL)"}
    else:
        log.exception("unexpected error in a resolver", exc_info=original)
        out["message"] = "internal error: the request was rolled back"
        out["extensions"] = {"code": "internal_error",
                             "hint": "this is a bug in the ledger; the request changed nothing"}
    return out


def _translated(original: Any) -> Any:
    """A database error the caller can act on (a NUL it sent) as its LedgerError; anything else as is."""
    import psycopg

    if isinstance(original, psycopg.Error):
        from ..db.pool import as_ledger_error

        translated = as_ledger_error(original)
        if isinstance(translated, LedgerError):
            return translated
    return original


def _is_document_error(error: GraphQLError) -> bool:
    """A syntax, validation or variable-coercion error: the document or its variables are wrong.

    These carry no path (no field ran); a variable that fails a scalar's coercion carries the scalar's
    ValueError/TypeError or a GraphQLError subclass (strawberry's StrawberryInputCoercionError).
    """
    original = error.original_error
    return original is None or (
        not error.path and isinstance(original, (ValueError, TypeError, GraphQLError))
        and not isinstance(original, LedgerError))


@functools.lru_cache(maxsize=1024)
def _operation_count(query: str) -> int:
    """How many operations a document defines (strawberry would silently run the first of several)."""
    try:
        document = parse(query, no_location=True, max_tokens=20_000)
    except GraphQLError:
        return 1  # the execution reports the syntax error
    return sum(isinstance(d, OperationDefinitionNode) for d in document.definitions)


def _document_failure(message: str) -> "_RollBack":
    return _RollBack({"data": None, "errors": [error_payload(
        message, "graphql_validation_failed",
        "check the document and its variables against the schema (see GraphiQL)")], "_status": 400})


class GraphQLEndpoint:
    def __init__(self, services: Services) -> None:
        self.services = services

    async def __call__(self, request: Request) -> Response:
        if request.method == "GET":
            return HTMLResponse(await run_in_threadpool(graphiql_page, self.services))
        started = time.perf_counter()
        try:
            response = await self._post(request)
        finally:
            REQUEST_SECONDS.observe(time.perf_counter() - started)
        return response

    async def _post(self, request: Request) -> Response:
        settings = self.services.settings
        too_large = _json({"errors": [error_payload(
            f"the request body exceeds {settings.max_body_bytes} bytes", "request_too_large",
            "send a smaller document or variables")]}, 413)
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > settings.max_body_bytes:
            REQUESTS.labels("too_large").inc()
            return too_large
        # Read at most the limit (a chunked body declares no length): never buffer an unbounded body.
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > settings.max_body_bytes:
                REQUESTS.labels("too_large").inc()
                return too_large
            chunks.append(chunk)
        body = b"".join(chunks)
        try:
            params = _load_json(body)
        except ValueError as exc:
            REQUESTS.labels("bad_request").inc()
            return _json({"errors": [error_payload(f"the body is not valid JSON: {exc}", "bad_request",
                                                   "send a JSON object {query, variables, operationName}")]}, 400)
        if not isinstance(params, dict) or not isinstance(params.get("query"), str):
            REQUESTS.labels("bad_request").inc()
            return _json({"errors": [error_payload("the body needs a `query` string", "bad_request",
                                                   "send a JSON object {query, variables, operationName}")]}, 400)
        variables = params.get("variables")
        operation_name = params.get("operationName")
        if variables is not None and not isinstance(variables, dict) or (
                operation_name is not None and not isinstance(operation_name, str)):
            REQUESTS.labels("bad_request").inc()
            return _json({"errors": [error_payload("`variables` must be an object and `operationName` a string",
                                                   "bad_request")]}, 400)
        try:
            claims = self._authenticate(request)
            deadline = self._deadline(request)
        except LedgerError as exc:
            REQUESTS.labels(exc.code).inc()
            status = 401 if isinstance(exc, Unauthenticated) else 400
            return _json({"errors": [error_payload(exc.message, exc.code, exc.hint)]}, status)
        dry_run = request.headers.get("ledger-dry-run", "").strip().lower() == "true"
        payload, status = await run_in_threadpool(
            self.execute, claims, params["query"], variables, operation_name, deadline, dry_run)
        return _json(payload, status)

    def _authenticate(self, request: Request):
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthenticated("this request carries no bearer token",
                                  hint="send `Authorization: Bearer <token>`; `ledger token` mints one")
        return self.services.tokens.verify(token.strip())

    def _deadline(self, request: Request) -> float:
        settings = self.services.settings
        raw = request.headers.get("request-timeout")
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
        attempts = self.services.settings.race_retries + 1
        for attempt in range(attempts):
            try:
                payload, status = self._execute_once(claims, query, variables, operation_name, deadline, dry_run)
            except Retryable as exc:
                if attempt + 1 < attempts and exc.race and time.monotonic() < deadline:
                    time.sleep(random.uniform(0.001, min(0.2, 0.005 * 2**attempt)))
                    continue
                REQUESTS.labels("retryable").inc()
                return {"data": None, "errors": [error_payload(exc.message, exc.code, exc.hint, retryable=True)]}, 200
            except Unauthenticated as exc:
                REQUESTS.labels("unauthenticated").inc()
                return {"errors": [error_payload(exc.message, exc.code, exc.hint)]}, 401
            REQUESTS.labels("error" if payload.get("errors") else "ok").inc()
            return payload, status
        raise AssertionError("unreachable")

    def _execute_once(self, claims, query, variables, operation_name, deadline, dry_run) -> tuple[dict, int]:
        services = self.services
        try:
            # The client's row is read in the same round trip as BEGIN and the tenant's set_config.
            with services.db.transaction(claims.tenant_id, deadline=deadline, rollback=dry_run,
                                         first=principal_query(claims.tenant_id, claims.client_id)) as conn:
                principal, policies = load_principal(conn, claims.tenant_id, claims.client_id, claims.raw,
                                                     row=conn.ledger_first)
                chain = Chain((client_layer(principal, policies),))
                scope = Scope(conn=conn, principal=principal, chain=chain, services=services, deadline=deadline)
                if operation_name is None and _operation_count(query) > 1:
                    raise _document_failure(
                        "the document has several operations: name the one to run with `operationName`")
                try:
                    result = schema.execute_sync(query, variable_values=variables,
                                                 context_value=RequestContext(scope), operation_name=operation_name)
                except MissingQueryError:
                    raise _document_failure("the document is empty") from None
                except CannotGetOperationTypeError:
                    raise _document_failure(
                        f"the document has no operation named {operation_name!r}" if operation_name else
                        "the document has several operations: name the one to run with `operationName`") from None
                except InvalidOperationTypeError:
                    raise _document_failure("this server runs queries and mutations only") from None
                payload: dict[str, Any] = {"data": result.data}
                if result.errors:
                    race = _first_retryable(result.errors)
                    if race is not None:
                        raise race
                    payload["errors"] = [format_error(e) for e in result.errors]
                    status = 400 if result.data is None and all(_is_document_error(e) for e in result.errors) else 200
                    raise _RollBack({**payload, "_status": status})
        except _RollBack as rolled_back:
            status = rolled_back.payload.pop("_status")
            return rolled_back.payload, status
        return payload, 200


def _first_retryable(errors: list[GraphQLError]) -> Retryable | None:
    """A transient database failure anywhere fails the whole request as `retryable`."""
    from ..db.pool import transient_failure

    for error in errors:
        retry = transient_failure(error.original_error)
        if retry is not None:
            return retry
    return None


def build_app(services: Services) -> Starlette:
    graphql_endpoint = GraphQLEndpoint(services)

    async def endpoint(request: Request) -> Response:
        return await graphql_endpoint(request)

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

    return Starlette(routes=[
        Route("/graphql", endpoint, methods=["GET", "POST"]),
        Route("/graphiql/{name}", graphiql_asset, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
    ])
