"""Prometheus metrics of calls and pools, and the exposition for GET /metrics.

Families (beside those of the HTTP layer and the queue, defined where they are measured):
- ledger_calls_total{kind,action,status,code}: finished calls (each attempt of an execution, nested ones too);
- ledger_call_duration_seconds{kind,action}: their latency;
- ledger_call_output_bytes: the size of their results (the output's JSON, or the error's when it failed);
- ledger_calls_per_tree: calls in one call tree (a top-level call and everything beneath it);
- ledger_db_pool_*: the database pool (connections open, idle, in use and at most; requests waiting,
  served, waited for and failed);
- ledger_executors{state}: the sandbox executor processes.

With several server processes (`ledger serve --workers N`), `ledger serve` sets PROMETHEUS_MULTIPROC_DIR
before they start, and a scrape of any of them sums every live process (prometheus-client's multiprocess
mode); gauges of a process that exited are dropped.

No label carries a string a tenant chose (DESIGN 17): whoever can scrape must not learn tenants' action,
tool, server or client names. A call is labelled by its kind (tool, graphql, cel: ours) and its
`action` label is empty, unless the operator sets LEDGER_METRICS_PER_ACTION=1. With
LEDGER_METRICS_TOKEN set, a scrape must present it as a bearer token.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import threading
from bisect import bisect_left
from collections.abc import Iterable
from typing import Any

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

log = logging.getLogger("ledger.metrics")
call_log = logging.getLogger("ledger.calls")

# Set by each scrape (ledger_queue_depth()) and by a worker's claim loop.
QUEUE_DEPTH = Gauge("ledger_queue_depth", "Started executions waiting for or holding a worker",
                    multiprocess_mode="livemostrecent")
CALLS = Counter("ledger_calls_total",
                "Finished calls by kind, action (with LEDGER_METRICS_PER_ACTION=1), status and error code",
                ["kind", "action", "status", "code"])
CALL_SECONDS = Histogram("ledger_call_duration_seconds", "Call latency, by kind and action", ["kind", "action"],
                         buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
                                  120, 300))
CALL_OUTPUT_BYTES = Histogram("ledger_call_output_bytes", "Size of a call's result JSON in bytes",
                              buckets=(16, 64, 256, 1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20,
                                       4 << 20, 16 << 20))
CALLS_PER_TREE = Histogram("ledger_calls_per_tree", "Calls in one call tree, the top-level call included",
                           buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048))

POOL_CONNECTIONS = Gauge("ledger_db_pool_connections", "Database pool connections by state (open, idle, in_use, max)",
                         ["state"], multiprocess_mode="livesum")
POOL_WAITING = Gauge("ledger_db_pool_requests_waiting", "Requests waiting for a database connection now",
                     multiprocess_mode="livesum")
POOL_REQUESTS = Counter("ledger_db_pool_requests", "Database connections handed out by the pool")
POOL_WAIT_SECONDS = Counter("ledger_db_pool_wait_seconds", "Time spent waiting for a database connection")
POOL_ERRORS = Counter("ledger_db_pool_request_errors", "Requests for a database connection that failed (timed out)")
EXECUTORS = Gauge("ledger_executors", "Sandbox executor processes by state (live, idle, max)", ["state"],
                  multiprocess_mode="livesum")

# Initialised, so that a scrape shows every family (at zero) before the first call.
for _state in ("open", "idle", "in_use", "max"):
    POOL_CONNECTIONS.labels(_state)
for _state in ("live", "idle", "max"):
    EXECUTORS.labels(_state)


def multiprocess() -> bool:
    return bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))


# Whether calls are labelled with their action's name (a tenant's string): the operator's choice, made
# once per process when its services open (wiring.open_services).
_per_action = False
KINDS = frozenset({"tool", "graphql", "cel"})


def configure(*, per_action: bool) -> None:
    global _per_action
    _per_action = per_action


def authorized(authorization: str | None, token: str | None) -> bool:
    """Whether a scrape's Authorization header presents the metrics token (always, without one)."""
    if not token:
        return True
    scheme, _, presented = (authorization or "").partition(" ")
    # Compared in constant time over bytes: a mismatch's position must not show in the timing.
    return scheme.lower() == "bearer" and hmac.compare_digest(presented.strip().encode(), token.encode())


UNAUTHORIZED_BODY = b"/metrics requires the metrics token: send Authorization: Bearer <LEDGER_METRICS_TOKEN>\n"
UNAUTHORIZED_HEADERS = {"WWW-Authenticate": 'Bearer realm="ledger-metrics"'}


# ---------------------------------------------------------------------------- calls


def observe_call(kind: str | None, action: str, status: str, code: str | None, seconds: float | None,
                 output_bytes: int | None) -> None:
    kind = kind if kind in KINDS else "unknown"
    action = action if _per_action else ""
    CALLS.labels(kind, action, status, code or "none").inc()
    if seconds is not None:
        CALL_SECONDS.labels(kind, action).observe(max(0.0, seconds))
    if output_bytes is not None and output_bytes >= 0:
        CALL_OUTPUT_BYTES.observe(output_bytes)


def observe_tree(calls: int) -> None:
    CALLS_PER_TREE.observe(calls)


def json_size(value: Any) -> int:
    """The size in bytes of a JSON value as the ledger writes it."""
    try:
        return len(orjson.dumps(value))
    except (TypeError, orjson.JSONEncodeError):  # an integer beyond 64 bits, stored as received
        return len(json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str).encode())


def call_finished(tenant_id: Any, *, execution_id: Any, root_execution_id: Any, action: str | None,
                  action_version: int, status: str, error: dict | None, duration_ms: float | None,
                  output_bytes: int | None, attempt: int, depth: int, kind: str | None = None) -> None:
    """One finished call: its metrics and its log line.

    A top-level call logs at INFO, a nested one at DEBUG (a tree may hold a thousand calls)."""
    action = action or "unknown"
    code = error.get("code") if error else None
    observe_call(kind, action, status, code, duration_ms / 1000 if duration_ms is not None else None, output_bytes)
    _log_call(tenant_id, execution_id, root_execution_id, action, action_version, status, code, duration_ms,
              output_bytes, attempt, depth)


def _log_call(tenant_id: Any, execution_id: Any, root_execution_id: Any, action: str, action_version: int,
              status: str, code: str | None, duration_ms: float | None, output_bytes: int | None, attempt: int,
              depth: int) -> None:
    level = logging.INFO if depth == 0 else logging.DEBUG
    if call_log.isEnabledFor(level):
        call_log.log(level, "call %s %s", action, status.lower(), extra={
            "executionId": str(execution_id), "rootExecutionId": str(root_execution_id), "tenant": str(tenant_id),
            "action": action, "actionVersion": action_version, "status": status, "code": code, "attempt": attempt,
            "depth": depth, "durationMs": round(duration_ms, 3) if duration_ms is not None else None,
            "outputBytes": output_bytes})


def calls_finished(tenant_id: Any, calls: list) -> None:
    """The calls of a tree, written together: each call, and the tree's size when it starts at its root.

    Every call is counted and observed as `call_finished` would count and observe it, in one pass: the
    counts summed per label set, each histogram's observations sorted into its buckets and added once per
    bucket (a tree of 1,000 reads would otherwise take 1,000 label lookups and locked updates per family)."""
    counts: dict[tuple, int] = {}
    seconds: dict[tuple, list[float]] = {}
    sizes: list[int] = []
    debug = call_log.isEnabledFor(logging.DEBUG)
    for call in calls:
        kind = call.action_kind if call.action_kind in KINDS else "unknown"
        action = (call.action_name or "unknown") if _per_action else ""
        error = call.error
        code = error.get("code") if error else None
        key = (kind, action, call.status, code or "none")
        counts[key] = counts.get(key, 0) + 1
        duration_ms = call.duration_ms
        if duration_ms is not None:
            seconds.setdefault((kind, action), []).append(max(0.0, duration_ms / 1000))
        output_bytes = call.result_bytes()
        if output_bytes is not None and output_bytes >= 0:
            sizes.append(output_bytes)
        if call.depth == 0 or debug:
            _log_call(tenant_id, call.execution_id, call.root_execution_id, call.action_name or "unknown",
                      call.action_version, call.status, code, duration_ms,
                      output_bytes, call.attempt, call.depth)
    for key, count in counts.items():
        CALLS.labels(*key).inc(count)
    for key, values in seconds.items():
        _observe_all(CALL_SECONDS.labels(*key), values)
    _observe_all(CALL_OUTPUT_BYTES, sizes)
    if calls and calls[0].parent_execution_id is None:
        observe_tree(len(calls))


def _observe_all(histogram: Histogram, values: list) -> None:
    """`histogram.observe` of each value, its buckets and sum updated once each. Reads prometheus-client's
    per-child state (`_upper_bounds`, `_buckets`, `_sum`, as its own `observe` does); a client without it
    observes the values one by one."""
    try:
        bounds, buckets, total = histogram._upper_bounds, histogram._buckets, histogram._sum
    except AttributeError:
        for value in values:
            histogram.observe(value)
        return
    if not values:
        return
    per_bucket = [0] * len(bounds)
    last = len(bounds) - 1
    for value in values:
        index = bisect_left(bounds, value)
        # observe counts a value in the first bucket whose bound it does not exceed (NaN: in none).
        if index <= last and value <= bounds[index]:
            per_bucket[index] += 1
    total.inc(sum(values))
    for index, count in enumerate(per_bucket):
        if count:
            buckets[index].inc(count)


# ---------------------------------------------------------------------------- pools


def update_pool_metrics(services: Any) -> None:
    """Read the database pool's and the executor pool's state into the gauges and counters."""
    try:
        stats = services.db.pool.pop_stats()  # counters since the last pop: added to ours
    except Exception:  # noqa: BLE001 - a closed pool reports nothing
        return
    size, idle = stats.get("pool_size", 0), stats.get("pool_available", 0)
    POOL_CONNECTIONS.labels("open").set(size)
    POOL_CONNECTIONS.labels("idle").set(idle)
    POOL_CONNECTIONS.labels("in_use").set(max(0, size - idle))
    POOL_CONNECTIONS.labels("max").set(stats.get("pool_max", 0))
    POOL_WAITING.set(stats.get("requests_waiting", 0))
    POOL_REQUESTS.inc(stats.get("requests_num", 0))
    POOL_WAIT_SECONDS.inc(stats.get("requests_wait_ms", 0) / 1000)
    POOL_ERRORS.inc(stats.get("requests_errors", 0))
    executors = services.started_executor_pool()
    if executors is not None:
        try:
            EXECUTORS.labels("live").set(len(executors._live))
            EXECUTORS.labels("idle").set(len(executors._idle))
            EXECUTORS.labels("max").set(executors.max_size)
        except (AttributeError, TypeError):
            pass


def update_queue_depth(services: Any) -> None:
    try:
        with services.db.pool.connection(timeout=2) as conn:
            QUEUE_DEPTH.set(conn.execute("SELECT ledger_queue_depth() AS depth").fetchone()["depth"])
    except Exception:  # noqa: BLE001 - a scrape never fails over the database
        log.debug("could not read the queue depth", exc_info=True)


class PoolSampler:
    """In multiprocess mode, each process refreshes its pool gauges now and then (a scrape reaches one)."""

    def __init__(self, services: Any, interval: float = 5.0) -> None:
        self.services = services
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ledger-metrics", daemon=True)

    def start(self) -> "PoolSampler":
        self._thread.start()
        return self

    def _run(self) -> None:
        update_pool_metrics(self.services)
        while not self._stop.wait(self.interval):
            update_pool_metrics(self.services)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


# ---------------------------------------------------------------------------- exposition


def exposition(services: Any) -> tuple[bytes, str]:
    """The body and media type of a scrape."""
    update_pool_metrics(services)
    update_queue_depth(services)
    if multiprocess():
        from prometheus_client import multiprocess as mp

        registry = CollectorRegistry()
        mp.MultiProcessCollector(registry)
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST


def serve_metrics(host: str, port: int, token: str | None) -> None:
    """Serve this process's registry on host:port (a `ledger worker`), behind the metrics token if set."""
    import socket
    from http.server import ThreadingHTTPServer

    from prometheus_client.exposition import MetricsHandler

    class Server(ThreadingHTTPServer):
        address_family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        daemon_threads = True

    class Handler(MetricsHandler):
        def do_GET(self) -> None:
            if not authorized(self.headers.get("Authorization"), token):
                self.send_response(401)
                for name, value in {**UNAUTHORIZED_HEADERS, "Content-Type": "text/plain"}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(UNAUTHORIZED_BODY)))
                self.end_headers()
                self.wfile.write(UNAUTHORIZED_BODY)
                return
            super().do_GET()

    server = Server((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="ledger-metrics-http", daemon=True).start()


def mark_process_dead() -> None:
    if multiprocess():
        from prometheus_client import multiprocess as mp

        mp.mark_process_dead(os.getpid())


def families(text: str) -> Iterable[str]:
    """The metric family names in an exposition (for tests and checks)."""
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            yield line.split()[2]
