"""A call tree's cost per read in one process: `create_app()` called as an ASGI app.

    python -m bench.asgi_tree [--reads 1000] [--repeat 7] [--profile FILE]

Starts a throwaway cluster, the app in this process (queue worker off), creates an account and the
bench's reads tool (`bench.fixtures.READS_SRC`) through POST /graphql, then invokes it `--repeat` times
with `n = --reads` and prints, per read: the wall time, this process's CPU (every thread), the sandbox
executors' CPU (from /proc) and the PostgreSQL backends' CPU, and the same reads' floor (primary-key
SELECTs through psycopg on one connection, as the floor in `bench.workloads.call_tree`), each the median of
the repeats; then the statements of one more tree by their PostgreSQL time per read (pg_stat_statements).
`--profile FILE` keeps a cProfile of the request thread's top-level runs (cProfile slows
what it measures: read it for shares, not for µs). `--callgrind`, under
`valgrind --tool=callgrind --instr-atstart=no`, counts this process's instructions (every thread; the
sandbox's process is not traced) over one tree after a warm-up one, and dumps them (`callgrind_annotate`
of the dump; its total / reads = instructions per read): deterministic whatever else the machine runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid

import psycopg

from .env import Cluster, cpu_seconds, sandbox_pids
from .fixtures import CREATE_TOOL, INVOKE, READS_SRC, prepare_database
from .inprocess import post_graphql, run_with_app

def _callgrind(*flags: str) -> None:
    """Drive the callgrind this process runs under (`--callgrind`)."""
    import subprocess

    subprocess.run(["callgrind_control", *flags, str(os.getpid())], check=True, capture_output=True)


async def _run(app, token: str, url: str, tenant_id, cluster: Cluster, reads: int, repeat: int,
               profile: str | None, callgrind: bool = False) -> None:
    async def data(query: str, variables: dict) -> dict:
        document = json.dumps({"query": query, "variables": variables}).encode()
        status, answer = await post_graphql(app, token, document)
        body = json.loads(answer)
        assert status == 200 and not body.get("errors"), answer
        return body["data"]

    account = str(uuid.uuid4())
    await data('mutation($id: UUID!) { financial { createAccount(id: $id, input: {name: "a", currency: "USD"})'
               ' { id } } }', {"id": account})
    tool = str(uuid.uuid4())
    await data(CREATE_TOOL, {"id": tool, "input": {
        "name": "bench_reads", "kind": "tool", "description": "bench", "config": {"runtime": "starlark",
                                                                                  "src": READS_SRC},
        "tool": {"name": "bench_reads", "description": "bench", "responseTimeout": 300000, "inputSchema": {
            "type": "object", "properties": {"account_id": {"type": "string"}, "n": {"type": "integer"}}}},
        "policies": [{"effect": "ALLOW", "actions": ["SELECT"], "resources": ["financial.Account.document"]}]}})

    profiler = None
    if profile:
        import cProfile

        from ledger.runtime.lease import ExecutorLease

        profiler = cProfile.Profile()
        original = ExecutorLease.run

        def profiled(self, *args, **kwargs):
            if self._depth:
                return original(self, *args, **kwargs)
            profiler.enable()
            try:
                return original(self, *args, **kwargs)
            finally:
                profiler.disable()

        ExecutorLease.run = profiled

    if callgrind:
        for counted in (False, True):
            if counted:
                _callgrind("-z")
                _callgrind("-i", "on")
            out = await data(INVOKE, {"id": tool, "input": {"executionId": str(uuid.uuid4()),
                                                             "input": {"account_id": account, "n": reads}}})
            assert out["actions"]["invokeAction"]["status"] == "SUCCEEDED", out
        _callgrind("-i", "off")
        _callgrind("-d", "tree")
        print(f"callgrind: one tree of {reads} reads dumped (callgrind_annotate <file>; total / {reads} per read)")
        return
    walls, cpus, sandboxes, postgres, floors = [], [], [], [], []
    for i in range(repeat + 1):
        executor_pids = sandbox_pids(cluster)
        before = (time.perf_counter(), time.process_time(), cpu_seconds(executor_pids), cluster.cpu())
        out = await data(INVOKE, {"id": tool, "input": {"executionId": str(uuid.uuid4()),
                                                         "input": {"account_id": account, "n": reads}}})
        after = (time.perf_counter(), time.process_time(), cpu_seconds(executor_pids), cluster.cpu())
        assert out["actions"]["invokeAction"]["status"] == "SUCCEEDED", out
        if i:  # the first warms the executor and the caches
            walls.append(after[0] - before[0])
            cpus.append(after[1] - before[1])
            sandboxes.append(after[2] - before[2])
            postgres.append(after[3] - before[3])
            floors.append(_floor(url, tenant_id, account, reads))
    per = lambda values: statistics.median(values) / reads * 1e6  # noqa: E731
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        conn.execute("SELECT pg_stat_statements_reset()")
    await data(INVOKE, {"id": tool, "input": {"executionId": str(uuid.uuid4()),
                                               "input": {"account_id": account, "n": reads}}})
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute("SELECT calls, total_exec_time, total_plan_time, left(regexp_replace(query, '\\s+', ' ', 'g'), 90)"
                            " FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 8").fetchall()
    for calls, exec_ms, plan_ms, query in rows:
        print(f"  {calls:6} calls {exec_ms * 1000 / reads:7.1f} µs/read exec {plan_ms * 1000 / reads:5.1f} plan  {query}")
    print(f"per read (median of {repeat}): wall {per(walls):.0f} µs; this process's CPU {per(cpus):.0f} µs; the "
          f"sandbox's {per(sandboxes):.0f} µs; PostgreSQL's {per(postgres):.0f} µs; floor {per(floors):.0f} µs "
          f"({statistics.median(walls) / statistics.median(floors):.2f}x); walls {[round(w * 1e3) for w in walls]} ms, "
          f"floors {[round(f * 1e3) for f in floors]} ms")
    if profiler is not None:
        profiler.dump_stats(profile)


def _floor(url: str, tenant_id, account: str, reads: int) -> float:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET ROLE ledger_app")
        started = time.perf_counter()
        with conn.transaction():
            conn.execute("SELECT set_config('ledger.tenant_id', %s, true)", (str(tenant_id),))
            for _ in range(reads):
                row = conn.execute("SELECT balance FROM accounts WHERE tenant_id = %s AND id = %s",
                                   (tenant_id, account)).fetchone()
                assert row is not None
        return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.asgi_tree")
    parser.add_argument("--reads", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--profile")
    parser.add_argument("--callgrind", action="store_true",
                        help="count instructions instead (run under `valgrind --tool=callgrind --instr-atstart=no`)")
    args = parser.parse_args(argv)
    cluster = Cluster()
    try:
        url = cluster.create_database("ledger")
        tenant_id, _client, token, _secret = prepare_database(url)
        run_with_app(url, lambda app: _run(app, token, url, tenant_id, cluster, args.reads, args.repeat,
                                           args.profile, args.callgrind))
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
