"""Metrics and one log line for every MCP request, the record's instructions in the initialize result,
and the nulls of the ledger's `_meta`: an SDK middleware, which sees every request the SDK dispatches, and the route's refusals.

Metrics carry no tenant-chosen string (DESIGN 17): the method (from the fixed set MCP defines) and the
outcome only; the log line names the server, the tool and the executionId.
"""

from __future__ import annotations

import logging
import time
from bisect import bisect_left
from typing import Any

from mcp.server import ServerRequestContext
from mcp.server.context import CallNext, HandlerResult
from mcp.shared.exceptions import MCPError
from prometheus_client import Counter, Histogram
from pydantic import ValidationError

from ...metrics import json_size
from .tools import ACTION_ID, ACTION_VERSION, ERROR, EXECUTION_ID

log = logging.getLogger("ledger.mcp")

# Where the route leaves the resolved caller for the handlers, and where the middleware says it saw the
# request (keys of the ASGI scope, which the SDK hands to handlers as `ctx.request.scope`).
CALLER_KEY = "ledger.mcp.caller"
OBSERVED_KEY = "ledger.mcp.observed"

_METHODS = frozenset({"initialize", "ping", "server/discover", "tools/list", "tools/call"})

REQUESTS = Counter("ledger_mcp_requests_total", "MCP requests by JSON-RPC method and outcome",
                   ["method", "outcome"])
REQUEST_SECONDS = Histogram("ledger_mcp_request_seconds", "MCP request latency, by JSON-RPC method", ["method"],
                            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30,
                                     60, 120, 300))
RESULT_BYTES = Histogram("ledger_mcp_result_bytes", "Size of an MCP result's JSON in bytes, by JSON-RPC method",
                         ["method"], buckets=(64, 256, 1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20,
                                              4 << 20, 16 << 20))


# Each label set's children, looked up once: `labels()` takes a lock and builds its key on every call. The
# sets are bounded (the methods MCP defines, the outcomes below).
_CHILDREN: dict[tuple[Any, ...], Any] = {}


def _child(metric: Any, *labels: str) -> Any:
    key = (metric, *labels)
    child = _CHILDREN.get(key)
    if child is None:
        child = _CHILDREN.setdefault(key, metric.labels(*labels))
    return child


# A request's count and latency children, by its method and outcome: one lookup for both.
_REQUEST_CHILDREN: dict[tuple[str, str], tuple[Any, Any]] = {}


def _request_children(method: str, outcome: str) -> tuple[Any, Any]:
    key = (method, outcome)
    children = _REQUEST_CHILDREN.get(key)
    if children is None:
        children = _REQUEST_CHILDREN.setdefault(key, (_child(REQUESTS, method, outcome),
                                                      _child(REQUEST_SECONDS, method)))
    return children


def _count(counter: Any) -> None:
    """`counter.inc()` of a labelled child, on its value (prometheus-client's `_value`, which its `inc` adds
    to after checks that a child and an amount of 1 always pass); a client without it counts by `inc`."""
    try:
        value = counter._value
    except AttributeError:
        counter.inc()
        return
    value.inc(1)


def _observe(histogram: Any, amount: float) -> None:
    """`histogram.observe(amount)` of a labelled child, on its state (prometheus-client's `_upper_bounds`,
    `_buckets` and `_sum`, as its own `observe` reads them), its bucket found by bisection rather than a
    walk of the bounds; a client without that state observes by `observe`."""
    try:
        bounds, buckets, total = histogram._upper_bounds, histogram._buckets, histogram._sum
    except AttributeError:
        histogram.observe(amount)
        return
    total.inc(amount)
    index = bisect_left(bounds, amount)
    # observe counts an amount in the first bucket whose bound it does not exceed (NaN: in none).
    if index < len(bounds) and amount <= bounds[index]:
        buckets[index].inc(1)


class Unobserved(Exception):
    """Raised through the middleware by a request the route answers itself (a refusal met while the
    request's transaction was opened in the handler's step): the route measures and logs it, not the
    middleware."""


def _method_label(method: str, is_notification: bool) -> str:
    if is_notification:
        return "notification"
    return method if method in _METHODS else "other"


class Telemetry:
    """`Server.middleware`: measures and logs each request, and gives initialize (and server/discover)
    the record's instructions: one `Server` serves every record, so they cannot be fixed at its
    construction."""

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        scope = ctx.request.scope if ctx.request is not None else {}
        scope[OBSERVED_KEY] = True
        method = _method_label(ctx.method, ctx.request_id is None)
        started = time.perf_counter()
        outcome, result, code = "ok", None, None
        try:
            result = await call_next(ctx)
        except Unobserved:
            outcome = None
            raise
        except MCPError as exc:
            outcome, code = "jsonrpc_error", exc.code
            raise
        except ValidationError:
            outcome = "jsonrpc_error"
            raise
        except Exception:
            outcome = "failed"
            raise
        else:
            if isinstance(result, dict):
                caller = scope.get(CALLER_KEY)
                if ctx.method in ("initialize", "server/discover") and caller is not None \
                        and caller.server.instructions:
                    result["instructions"] = caller.server.instructions
                _restore_nulls(ctx.method, result)
                if result.get("isError"):
                    outcome = "tool_error"
            return result
        finally:
            if outcome is not None:
                seconds = time.perf_counter() - started
                size = json_size(result) if isinstance(result, dict) else None
                requests, latency = _request_children(method, outcome)
                _count(requests)
                _observe(latency, seconds)
                if size is not None:
                    _observe(_child(RESULT_BYTES, method), size)
                # The caller as the handler's step resolved it (the route's, or the one the step opened).
                _log_line(ctx, scope.get(CALLER_KEY), method, outcome, seconds, size, code, result)


def _restore_nulls(method: str, result: dict) -> None:
    """The SDK's 2026-07-28 serializer drops null values inside `_meta` (its 2025 one keeps them): put
    back the nulls the ledger's `_meta` promises (an actionVersion that follows the latest, an error
    without a hint), so that every protocol revision reads the same keys."""
    if method == "tools/list":
        for tool in result.get("tools") or ():
            meta = tool.get("_meta")
            if isinstance(meta, dict) and ACTION_ID in meta:
                meta.setdefault(ACTION_VERSION, None)
    elif method == "tools/call":
        error = (result.get("_meta") or {}).get(ERROR)
        if isinstance(error, dict):
            error.setdefault("hint", None)


def _log_line(ctx: ServerRequestContext[Any, Any], caller: Any, method: str, outcome: str, seconds: float,
              size: int | None, jsonrpc_code: int | None, result: Any) -> None:
    level = logging.INFO if method in ("tools/call", "tools/list") or outcome != "ok" else logging.DEBUG
    if not log.isEnabledFor(level):
        return
    meta = (result.get("_meta") or {}) if isinstance(result, dict) else {}
    params = ctx.params if isinstance(ctx.params, dict) else {}
    extra: dict[str, Any] = {"method": ctx.method, "outcome": outcome, "durationMs": round(seconds * 1000, 3),
                             "resultBytes": size}
    if caller is not None:
        extra.update(tenant=str(caller.principal.tenant_id), client=str(caller.principal.client_id),
                     mcpServer=caller.server.name, mcpServerId=str(caller.server.id))
    if ctx.method == "tools/call":
        extra["tool"] = params.get("name")
        extra["executionId"] = meta.get(EXECUTION_ID)
        if isinstance(meta.get(ERROR), dict):
            extra["code"] = meta[ERROR].get("code")
    if jsonrpc_code is not None:
        extra["jsonrpcCode"] = jsonrpc_code
    log.log(level, "mcp %s %s", ctx.method, outcome, extra=extra)


def observe_refusal(outcome: str, started: float, *, server_name: str, status: int, caller: Any = None) -> None:
    """A request the route, or the SDK's transport, answered before any handler ran."""
    seconds = time.perf_counter() - started
    REQUESTS.labels("unknown", outcome).inc()
    REQUEST_SECONDS.labels("unknown").observe(seconds)
    extra: dict[str, Any] = {"outcome": outcome, "status": status, "mcpServer": server_name,
                             "durationMs": round(seconds * 1000, 3)}
    if caller is not None:
        extra.update(tenant=str(caller.principal.tenant_id), client=str(caller.principal.client_id),
                     mcpServerId=str(caller.server.id))
    log.info("mcp request refused: %s (HTTP %s)", outcome, status, extra=extra)
