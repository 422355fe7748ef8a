"""The ledger's side of each row."""

from __future__ import annotations

import datetime
import json
import statistics
import time
import uuid

import psycopg

from . import loadgen
from .env import Client, RoundTrips, Server, Statements, Workers
from .fixtures import INVOKE, READ, Fixtures

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
              repeats: int = 5) -> dict:
    """One invokeAction whose program makes `reads` graphql() reads; the median wall time of `repeats`."""
    client = Client(server.url, fx.token)
    times = []
    statements = None
    try:
        for i in range(repeats + 1):
            if i == 1:
                stats.reset()
                trips = rt.total()
            started = time.perf_counter()
            data = client.data(INVOKE, {"id": fx.reads_tool, "input": {
                "executionId": str(uuid.uuid4()), "input": {"account_id": fx.accounts[0], "n": reads}}})
            elapsed = time.perf_counter() - started
            status = data["actions"]["invokeAction"]["status"]
            if status != "SUCCEEDED":
                raise RuntimeError(f"the call tree failed: {data}")
            if i == 1:
                statements = stats.count(APP_ROLE)
                trips = rt.total() - trips
            if i:  # the first one warms the sandbox and the caches
                times.append(elapsed)
    finally:
        client.close()
    return {"reads": reads, "repeats": repeats, "median_ms": round(statistics.median(times) * 1000, 1),
            "min_ms": round(min(times) * 1000, 1), "per_read_us": round(statistics.median(times) / reads * 1e6, 1),
            "statements_per_tree": statements, "roundtrips_per_tree": trips}


def call_tree_floor(fx: Fixtures, *, reads: int = 1000, repeats: int = 5) -> dict:
    """`reads` primary-key SELECTs from psycopg on one connection (as the app role, RLS on, in one
    transaction): the floor a call tree of reads cannot go below."""
    times = []
    with psycopg.connect(fx.database_url, autocommit=True) as conn:
        conn.execute(f"SET ROLE {APP_ROLE}")
        for i in range(repeats + 1):
            started = time.perf_counter()
            with conn.transaction():
                conn.execute("SELECT set_config('ledger.tenant_id', %s, true)", (str(fx.tenant_id),))
                for _ in range(reads):
                    row = conn.execute("SELECT balance FROM accounts WHERE tenant_id = %s AND id = %s",
                                       (fx.tenant_id, fx.accounts[0])).fetchone()
                    assert row is not None
            if i:
                times.append(time.perf_counter() - started)
    return {"reads": reads, "repeats": repeats, "median_ms": round(statistics.median(times) * 1000, 1),
            "min_ms": round(min(times) * 1000, 1)}


def queue(fx: Fixtures, workers: Workers, stats: Statements, rt: RoundTrips, *, jobs: int = 1000) -> dict:
    """`jobs` no-op executions started in one transaction; the time from its commit until every one is
    SUCCEEDED, and each one's latency (its invocation's finish minus the commit)."""
    from ledger.wiring import open_services
    from ledger.auth.clients import client_layer, load_principal
    from ledger.config import Settings
    from ledger.policy.chain import Chain
    from ledger.queue.start import start_action
    from ledger.scope import Scope

    services = open_services(Settings(database_url=fx.database_url, pool_min=1, pool_max=1), fx.database_url)
    try:
        claims = {"tenant": str(fx.tenant_id), "sub": str(fx.client_id), "iat": int(time.time())}
        deadline = time.monotonic() + 600
        ids = [uuid.uuid4() for _ in range(jobs)]
        with psycopg.connect(fx.database_url, autocommit=True) as poll:
            with services.db.transaction(fx.tenant_id, deadline=deadline) as conn:
                principal, policies = load_principal(conn, fx.tenant_id, fx.client_id, claims)
                scope = Scope(conn=conn, principal=principal, chain=Chain((client_layer(principal, policies),)),
                              services=services, deadline=deadline)
                for execution_id in ids:
                    start_action(scope, uuid.UUID(fx.noop_tool), execution_id, None, {}, None)
            committed = time.perf_counter()
            committed_at = datetime.datetime.now(datetime.timezone.utc)
            stats.reset()
            trips = rt.total() - 0
            done = 0
            while done < jobs:
                time.sleep(0.01)
                done = poll.execute("SELECT count(*) FROM executions WHERE tenant_id = %s AND id = ANY(%s)"
                                    " AND status IN ('SUCCEEDED', 'FAILED')", (fx.tenant_id, ids)).fetchone()[0]
                if time.perf_counter() - committed > 600:
                    raise RuntimeError("the ledger workers did not finish in 10 minutes")
            elapsed = time.perf_counter() - committed
            statements = stats.count(APP_ROLE)
            trips = rt.total() - trips
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
            "statements_per_job": round(statements / jobs, 1), "roundtrips_per_job": round(trips / jobs, 1)}


def policy(n: int = 20_000) -> dict:
    from bench.policy import bench_decisions

    started = time.perf_counter()
    result = bench_decisions(n)
    elapsed = time.perf_counter() - started
    # bench_decisions warms up with min(n, 1000) decisions, then times n one by one.
    result["decisions_per_s"] = round(1e6 / result["p50_us"]) if result["p50_us"] else None
    result["seconds"] = round(elapsed, 3)
    return result
