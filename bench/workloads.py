"""The ledger's side of each row."""

from __future__ import annotations

import datetime
import http.client
import json
import statistics
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import mcp.types as mcp_types
import psycopg

from . import loadgen
from .env import Client, DurableCommits, RoundTrips, Server, Statements, Workers
from .fixtures import CREATE_TOOL, INVOKE, READ, Fixtures

APP_ROLE = "ledger_app"


def _count_rows(database_url: str, sql: str, params: tuple) -> int:
    with psycopg.connect(database_url, autocommit=True) as conn:
        return conn.execute(sql, params).fetchone()[0]


def money(server: Server, fx: Fixtures, seconds: float, stats: Statements, rt: RoundTrips, *,
          connections: int = 4, warmup: float = 2.0, loadgen_kind: str = "auto") -> dict:
    """invokeAction of the transfer tool (one createTransfer through graphql()), 4 connections."""
    spec = {"url": server.url, "token": fx.token, "kind": "invoke", "query": INVOKE, "action": fx.transfer_tool,
            "accounts": fx.accounts}
    if warmup:
        loadgen.run(spec, connections, warmup, loadgen=loadgen_kind)
    count_sql = "SELECT count(*) FROM transfers WHERE tenant_id = %s"
    before = _count_rows(fx.database_url, count_sql, (fx.tenant_id,))
    stats.reset()
    trips, cpu = rt.total(), server.cpu()
    result = loadgen.run(spec, connections, seconds, loadgen=loadgen_kind)
    cpu = server.cpu() - cpu
    statements = stats.count(APP_ROLE)
    trips = rt.total() - trips
    result["server_cpu_ms_per_call"] = round(cpu * 1000 / result["requests"], 2) if result["requests"] else None
    transfers = _count_rows(fx.database_url, count_sql, (fx.tenant_id,)) - before
    result["roundtrips_per_call"] = round(trips / result["requests"], 1) if result["requests"] else None
    result["transfers"] = transfers
    result["calls_per_s"] = round(transfers / result["seconds"], 1) if result["seconds"] else 0.0
    result["statements_per_call"] = round(statements / transfers, 1) if transfers else None
    result["top_statements"] = stats.top(APP_ROLE)
    return result


def read(server: Server, fx: Fixtures, seconds: float, stats: Statements, rt: RoundTrips, *,
         connections: int = 4, warmup: float = 2.0, loadgen_kind: str = "auto") -> dict:
    """`query { financial { account(id) { balance } } }`, 4 connections."""
    spec = {"url": server.url, "token": fx.token, "kind": "static",
            "body": json.dumps({"query": READ, "variables": {"id": fx.accounts[0]}})}
    return _throughput(server, spec, seconds, stats, rt, connections, warmup, loadgen_kind)


# tools/call in the 2025-11-25 protocol: stateless, so no initialize is needed before a request.
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}
# The SDK's latest protocol (2026-07-28 with the installed SDK): a single-exchange POST whose `_meta` carries
# the envelope an up-to-date SDK client stamps on every request (mcp/client/session.py _make_modern_stamp:
# protocol version, client info, client capabilities, none declared by a client without callbacks), and the
# routing headers the server checks against the body (Mcp-Method, Mcp-Name).
MCP_LATEST = mcp_types.LATEST_PROTOCOL_VERSION
MCP_LATEST_HEADERS = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": MCP_LATEST,
                      "Mcp-Method": "tools/call", "Mcp-Name": "bench_balance"}
MCP_LATEST_META = {"io.modelcontextprotocol/protocolVersion": MCP_LATEST,
                   "io.modelcontextprotocol/clientInfo": {"name": "ledger-bench", "version": "1"},
                   "io.modelcontextprotocol/clientCapabilities": {}}
# A tool's failure is an isError result; anything else the SDK refused is a JSON-RPC error.
MCP_ERRORS = ('"isError":true', '"error":{')
INVOKE_READ = ("mutation($id: UUID!, $input: InvokeActionInput!) { actions { invokeAction(id: $id, input: $input)"
               " { status invocation { output error { code message } } } } }")


def tool_call_spec(server: Server, fx: Fixtures, via: str) -> dict:
    """The same call of the balance tool, with a fresh executionId each time: through GraphQL
    invokeAction ("graphql"), or through the bench's MCP server as tools/call in the SDK's latest protocol
    ("mcp") or in 2025-11-25 ("mcp-2025-11-25")."""
    arguments = {"account_id": fx.accounts[0]}
    if via == "graphql":
        return {"url": server.url, "token": fx.token, "kind": "template", "body": json.dumps({
            "query": INVOKE_READ, "variables": {"id": fx.balance_tool, "input": {
                "executionId": "__UUID__", "input": arguments}}})}
    if via not in ("mcp", "mcp-2025-11-25"):
        raise ValueError(f"no tool call through {via!r}")
    latest = via == "mcp"
    meta = {**(MCP_LATEST_META if latest else {}), "ledger/executionId": "__UUID__"}
    return {"url": server.origin + fx.mcp_path, "token": fx.token, "kind": "template",
            "headers": MCP_LATEST_HEADERS if latest else MCP_HEADERS,
            "error_markers": list(MCP_ERRORS), "body": json.dumps({
                "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
                    "name": "bench_balance", "arguments": arguments, "_meta": meta}},
                separators=(",", ":"))}


def check_tool_call(server: Server, fx: Fixtures, via: str) -> dict:
    """One call before the load: it must answer the balance, or the row would time errors."""
    spec = tool_call_spec(server, fx, via)
    parts = urlsplit(spec["url"])
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    try:
        conn.request("POST", parts.path, body=spec["body"].replace("__UUID__", str(uuid.uuid4())),
                     headers={"Content-Type": "application/json", "Authorization": f"Bearer {fx.token}",
                              **spec.get("headers", {})})
        response = conn.getresponse()
        payload = json.loads(response.read())
    finally:
        conn.close()
    if via == "graphql":
        answer = (((payload.get("data") or {}).get("actions") or {}).get("invokeAction") or {})
        output = (answer.get("invocation") or {}).get("output") if answer.get("status") == "SUCCEEDED" else None
    else:
        result = payload.get("result") or {}
        output = (result.get("structuredContent") if "error" not in payload and result.get("isError") is not True
                  else None)
    if response.status != 200 or not isinstance(output, dict) or not isinstance(output.get("balance"), int):
        raise RuntimeError(f"the balance tool through {via} did not answer a balance ({response.status}): {payload}")
    return output


def tool_call(server: Server, fx: Fixtures, via: str, seconds: float, stats: Statements, rt: RoundTrips, *,
              connections: int = 4, warmup: float = 2.0, loadgen_kind: str = "auto") -> dict:
    """The balance tool (one graphql() read in the sandbox, its execution recorded), called through
    `via` ("graphql", "mcp" or "mcp-2025-11-25"), 4 connections."""
    check_tool_call(server, fx, via)
    spec = tool_call_spec(server, fx, via)
    return _throughput(server, spec, seconds, stats, rt, connections, warmup, loadgen_kind)


def _throughput(server: Server, spec: dict, seconds: float, stats: Statements, rt: RoundTrips, connections: int,
                warmup: float, loadgen_kind: str) -> dict:
    if warmup:
        loadgen.run(spec, connections, warmup, loadgen=loadgen_kind)
    stats.reset()
    trips, cpu = rt.total(), server.cpu()
    result = loadgen.run(spec, connections, seconds, loadgen=loadgen_kind)
    cpu = server.cpu() - cpu
    statements = stats.count(APP_ROLE)
    trips = rt.total() - trips
    result["server_cpu_ms_per_call"] = round(cpu * 1000 / result["requests"], 2) if result["requests"] else None
    result["statements_per_call"] = round(statements / result["requests"], 1) if result["requests"] else None
    result["roundtrips_per_call"] = round(trips / result["requests"], 1) if result["requests"] else None
    return result


def call_tree(server: Server, fx: Fixtures, stats: Statements, rt: RoundTrips, *, reads: int = 1000,
              repeats: int = 5, settle: Callable[[], dict] | None = None) -> tuple[dict, dict, list[dict]]:
    """One invokeAction whose program makes `reads` graphql() reads, each repeat followed at once by the floor:
    `reads` primary-key SELECTs from psycopg on one connection (as the app role, RLS on, in one transaction),
    what a call tree of reads cannot go below. The tree and the floor alternate so that each repeat's ratio
    compares one moment of the shared machine (the floor moved 28–82 µs a SELECT between runs when it ran
    after all the trees). With `settle` (`bench.env.wait_until_quiet`), each repeat starts once the machine
    is quiet, since the row follows the others' load. Returns the tree's medians, the floor's, and each repeat's pair."""
    client = Client(server.url, fx.token)
    times, floor_times = [], []
    settles = []
    cpus = []  # the server processes' CPU per tree, their sandbox executors included
    statements = None
    try:
        with psycopg.connect(fx.database_url, autocommit=True) as floor:
            floor.execute(f"SET ROLE {APP_ROLE}")
            for i in range(repeats + 1):
                if i == 1:
                    stats.reset()
                    trips = rt.total()
                if settle is not None:
                    settles.append(settle())
                cpu = server.cpu()
                started = time.perf_counter()
                data = client.data(INVOKE, {"id": fx.reads_tool, "input": {
                    "executionId": str(uuid.uuid4()), "input": {"account_id": fx.accounts[0], "n": reads}}})
                elapsed = time.perf_counter() - started
                cpus.append(server.cpu() - cpu)
                status = data["actions"]["invokeAction"]["status"]
                if status != "SUCCEEDED":
                    raise RuntimeError(f"the call tree failed: {data}")
                if i == 1:
                    statements = stats.count(APP_ROLE)
                    trips = rt.total() - trips
                floor_elapsed = _floor_once(floor, fx, reads)
                if i:  # the first one warms the sandbox, the caches and the floor's prepared statement
                    times.append(elapsed)
                    floor_times.append(floor_elapsed)
    finally:
        client.close()
    tree = {"reads": reads, "repeats": repeats, "median_ms": round(statistics.median(times) * 1000, 1),
            "min_ms": round(min(times) * 1000, 1), "per_read_us": round(statistics.median(times) / reads * 1e6, 1),
            "statements_per_tree": statements, "roundtrips_per_tree": trips,
            # CPU is what a shared machine does not distort as much as wall time (the median of the repeats).
            "server_cpu_us_per_read": round(statistics.median(cpus[1:]) / reads * 1e6, 1),
            "settled": settles[1:]}
    floor_result = {"reads": reads, "repeats": repeats,
                    "median_ms": round(statistics.median(floor_times) * 1000, 1),
                    "min_ms": round(min(floor_times) * 1000, 1)}
    pairs = [{"ledger": round(t * 1000, 1), "anchor": round(f * 1000, 1), "ratio": round(t / f, 3)}
             for t, f in zip(times, floor_times) if f]
    return tree, floor_result, pairs


def _floor_once(conn: psycopg.Connection, fx: Fixtures, reads: int) -> float:
    started = time.perf_counter()
    with conn.transaction():
        conn.execute("SELECT set_config('ledger.tenant_id', %s, true)", (str(fx.tenant_id),))
        for _ in range(reads):
            row = conn.execute("SELECT balance FROM accounts WHERE tenant_id = %s AND id = %s",
                               (fx.tenant_id, fx.accounts[0])).fetchone()
            assert row is not None
    return time.perf_counter() - started


def queue(fx: Fixtures, workers: Workers, stats: Statements, rt: RoundTrips, *, jobs: int = 1000,
          commits: DurableCommits | None = None, postgres_cpu: Callable[[], float] | None = None,
          settle: Callable[[], dict] | None = None) -> dict:
    """`jobs` no-op executions started in one transaction; the time from its commit until every one is
    SUCCEEDED, and each one's latency (its invocation's finish minus the commit); with `commits`, the
    durable commits (WAL commit records) the workers made per execution; with `postgres_cpu`, PostgreSQL's
    CPU per execution (the bench's own poll included, as graphile-worker's side has its own); with `settle`
    (`bench.env.wait_until_quiet`), the enqueue waits for a quiet machine first, as graphile-worker's rounds do."""
    from ledger.wiring import open_services
    from ledger.auth.clients import client_layer, load_principal
    from ledger.config import Settings
    from ledger.policy.chain import Chain
    from ledger.queue.start import start_action
    from ledger.scope import Scope

    services = open_services(Settings(database_url=fx.database_url, pool_min=1, pool_max=1), fx.database_url)
    settled = settle() if settle is not None else None
    try:
        claims = {"tenant": str(fx.tenant_id), "sub": str(fx.client_id), "iat": int(time.time())}
        deadline = time.monotonic() + 600
        ids = [uuid.uuid4() for _ in range(jobs)]
        with psycopg.connect(fx.database_url, autocommit=True) as poll:
            def queue_rows() -> int:
                return poll.execute("SELECT count(*) FROM execution_queue WHERE tenant_id = %s",
                                    (fx.tenant_id,)).fetchone()[0]

            def finished_count() -> int:
                return poll.execute("SELECT count(*) FROM executions WHERE tenant_id = %s AND id = ANY(%s)"
                                    " AND status IN ('SUCCEEDED', 'FAILED')", (fx.tenant_id, ids)).fetchone()[0]

            queue_rows_before = queue_rows()
            # Read before the enqueue (the workers claim as soon as it commits): its one commit is taken off.
            wal_start = commits.position() if commits is not None else None
            trips, cpu_start = rt.total(), workers.cpu()  # the bench's own enqueue is not counted by either
            with services.db.transaction(fx.tenant_id, deadline=deadline) as conn:
                principal, policies = load_principal(conn, fx.tenant_id, fx.client_id, claims)
                scope = Scope(conn=conn, principal=principal, chain=Chain((client_layer(principal, policies),)),
                              services=services, deadline=deadline)
                for execution_id in ids:
                    start_action(scope, uuid.UUID(fx.noop_tool), execution_id, None, {}, None)
            committed = time.perf_counter()
            committed_at = datetime.datetime.now(datetime.timezone.utc)
            postgres_start = postgres_cpu() if postgres_cpu is not None else None
            stats.reset()
            # Polled as graphile-worker's side is (bench/peers.py: its jobs left): an execution's queue row
            # goes in the transaction that finishes it for good, so the poll costs both sides the same
            # (~0.15 ms of PostgreSQL's time). A count over the 1,000 ids took ~4 ms of PostgreSQL's
            # time, ~60 times a second, from the ledger's side alone. The exact count confirms the end
            # once the queue looks empty.
            while True:
                time.sleep(0.01)
                if queue_rows() <= queue_rows_before and finished_count() == jobs:
                    break
                if time.perf_counter() - committed > 600:
                    raise RuntimeError("the ledger workers did not finish in 10 minutes")
            elapsed = time.perf_counter() - committed
            cpu = workers.cpu() - cpu_start
            postgres = postgres_cpu() - postgres_start if postgres_cpu is not None else None
            statements = stats.count(APP_ROLE)
            trips = rt.total() - trips
            durable = commits.since(wal_start) - 1 if commits is not None else None
            failed = poll.execute("SELECT count(*) FROM executions WHERE tenant_id = %s AND id = ANY(%s)"
                                  " AND status = 'FAILED'", (fx.tenant_id, ids)).fetchone()[0]
            finished = [r[0] for r in poll.execute(
                "SELECT finished_at FROM invocations WHERE tenant_id = %s AND execution_id = ANY(%s)"
                " ORDER BY finished_at", (fx.tenant_id, ids)).fetchall()]
    finally:
        services.close()
    latencies = sorted(max(0.0, (f - committed_at).total_seconds() * 1000) for f in finished)
    return {"jobs": jobs, "failed": failed, "seconds": round(elapsed, 3), "jobs_per_s": round(jobs / elapsed, 1),
            "p50_ms": round(latencies[len(latencies) // 2], 1) if latencies else None,
            "p99_ms": round(latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))], 1) if latencies else None,
            "statements_per_job": round(statements / jobs, 1), "roundtrips_per_job": round(trips / jobs, 1),
            "durable_commits_per_job": round(durable / jobs, 2) if durable is not None else None,
            "worker_cpu_ms_per_job": round(cpu * 1000 / jobs, 2),
            "postgres_cpu_ms_per_job": round(postgres * 1000 / jobs, 2) if postgres is not None else None,
            "settled": settled}


def policy(n: int = 20_000) -> dict:
    from bench.policy import bench_decisions

    started = time.perf_counter()
    result = bench_decisions(n)
    elapsed = time.perf_counter() - started
    # bench_decisions warms up with min(n, 1000) decisions, then times n one by one.
    result["decisions_per_s"] = round(1e6 / result["p50_us"]) if result["p50_us"] else None
    result["seconds"] = round(elapsed, 3)
    return result


AGENT_ID = "0f5b7c2e-8a41-4c3d-9b6e-5a1d2c3e4fbe"
TWO_CALLS = ("mutation($id: UUID!, $a: InvokeActionInput!, $b: InvokeActionInput!) { actions {"
             " a: invokeAction(id: $id, input: $a) { status } b: invokeAction(id: $id, input: $b) { status } } }")


def agent_turn(server: Server, fx: Fixtures, script: Path, *, repeats: int = 5) -> dict:
    """One agent turn of 2 rounds (a scripted model: 3 model calls, each round one call of the balance tool),
    beside the same 2 tool calls invoked directly in one request: the median wall time of each."""
    account = fx.accounts[0]
    check = {"name": "bench_balance", "arguments": {"account_id": account}}
    script.write_text(json.dumps({"loop": True, "responses": [
        {"tool_calls": [check]}, {"tool_calls": [check]}, {"text": "done"}]}))
    client = Client(server.url, fx.token)
    try:
        created = client.post(CREATE_TOOL, {"id": AGENT_ID, "input": {
            "name": "bench_agent", "kind": "agent", "description": "bench: agent",
            "config": {"model": {"provider": "bench", "name": "scripted"}, "instructions": "Read the balance."},
            "tool": {"name": "bench_agent", "description": "bench: agent", "inputSchema": {"type": "object"}},
            "tools": [{"name": "bench_balance"}],
            "policies": [{"effect": "ALLOW", "actions": ["SELECT", "INVOKE"], "resources": ["financial.*"]}]}})
        # Already there when a --baseline revision's turn ran first in this run: the same definition.
        if any((e.get("extensions") or {}).get("code") != "already_exists" for e in created.get("errors") or ()):
            raise RuntimeError(f"the agent could not be created: {created['errors']}")
        turns, direct = [], []
        for i in range(repeats + 1):
            started = time.perf_counter()
            data = client.data(INVOKE, {"id": AGENT_ID, "input": {"executionId": str(uuid.uuid4()), "input": {}}})
            elapsed = time.perf_counter() - started
            if data["actions"]["invokeAction"]["status"] != "SUCCEEDED":
                raise RuntimeError(f"the agent turn failed: {data}")
            started = time.perf_counter()
            calls = {name: {"executionId": str(uuid.uuid4()), "input": {"account_id": account}} for name in "ab"}
            data = client.data(TWO_CALLS, {"id": fx.balance_tool, **calls})
            direct_elapsed = time.perf_counter() - started
            if {r["status"] for r in data["actions"].values()} != {"SUCCEEDED"}:
                raise RuntimeError(f"the direct calls failed: {data}")
            if i:  # the first warms the sandbox, the provider and the caches
                turns.append(elapsed)
                direct.append(direct_elapsed)
    finally:
        client.close()
    turn_ms, direct_ms = statistics.median(turns) * 1000, statistics.median(direct) * 1000
    return {"repeats": repeats, "median_ms": round(turn_ms, 2), "direct_median_ms": round(direct_ms, 2),
            "overhead_ms": round(turn_ms - direct_ms, 2)}
