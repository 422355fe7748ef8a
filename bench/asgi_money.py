"""The bench's money-moving call in one process: `create_app()` called as an ASGI app.

    python -m bench.asgi_money [--calls 500] [--repeat 5] [--profile FILE]
    valgrind --tool=callgrind --instr-atstart=no python -m bench.asgi_money --callgrind --calls 200

Starts a throwaway cluster and `ledger serve` (only to create the bench's fixtures through the API, as
`make bench` does), then builds `create_app()` in this process (its lifespan run, the queue worker off) and
sends the money row's request (`invokeAction` of the transfer tool, a fresh executionId and transfer id and
two random accounts each, as bench/loadgen.py's "invoke" kind) N times, one after another, on uvloop. It
prints, per call, the best and the median of `--repeat` rounds of: this process's CPU (every thread), the
request thread's (`GraphQLEndpoint.execute`, measured with thread_time on that thread), the sandbox
executors' and the PostgreSQL processes' (from /proc, in clock ticks: use enough calls), then the
statements of one more round by their PostgreSQL time per call (pg_stat_statements).
`--profile FILE` keeps a cProfile (thread_time) of the request thread's `execute` over one more round
(cProfile slows what it measures: read it for shares). `--callgrind`, under valgrind, counts the process's
instructions per call over `--calls` calls instead (one dump, `money`): deterministic whatever else runs.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
import uuid

import psycopg

from .env import Cluster, cpu_seconds, sandbox_pids
from .fixtures import INVOKE
from .inprocess import populated, post_graphql, run_with_app


class _Money:
    def __init__(self, token: str, tool: str, accounts: list[str]) -> None:
        self.token, self.tool, self.accounts = token, tool, accounts
        self.rng = random.Random(7)

    async def once(self, app) -> None:
        a, b = self.rng.sample(self.accounts, 2)
        body = json.dumps({"query": INVOKE, "variables": {"id": self.tool, "input": {
            "executionId": str(uuid.uuid4()), "input": {"transfer_id": str(uuid.uuid4()), "from_account": a,
                                                         "to_account": b, "amount": 1}}}}).encode()
        status, answer = await post_graphql(app, self.token, body)
        if status != 200 or b'"SUCCEEDED"' not in answer:
            raise RuntimeError(f"the money call answered {status}: {answer[:400]!r}")


def _request_thread_clock():
    """GraphQLEndpoint.execute wrapped to sum its thread's CPU (thread_time): the request thread's share."""
    from ledger.api.http import GraphQLEndpoint

    spent = [0.0]
    original = GraphQLEndpoint.execute

    def timed(self, *args, **kwargs):
        started = time.thread_time()
        try:
            return original(self, *args, **kwargs)
        finally:
            spent[0] += time.thread_time() - started

    GraphQLEndpoint.execute = timed
    return spent


def _callgrind(*flags: str) -> None:
    import subprocess

    subprocess.run(["callgrind_control", *flags, str(os.getpid())], check=True, capture_output=True)


async def _run(app, money: _Money, url: str, cluster: Cluster, calls: int, repeat: int, profile: str | None,
               callgrind: bool) -> None:
    for _ in range(200 if not callgrind else 30):
        await money.once(app)
    if callgrind:
        _callgrind("-z")
        _callgrind("-i", "on")
        for _ in range(calls):
            await money.once(app)
        _callgrind("-i", "off")
        _callgrind("-d", "money")
        print(f"callgrind: dump 'money' ({calls} calls; callgrind_annotate <file>, 'summary' / {calls} = per call)")
        return
    thread = _request_thread_clock()
    rows = {"process": [], "request thread": [], "sandbox": [], "PostgreSQL": [], "wall": []}
    for r in range(repeat):
        executor_pids = sandbox_pids(cluster)
        before = (time.perf_counter(), time.process_time(), thread[0], cpu_seconds(executor_pids), cluster.cpu())
        for _ in range(calls):
            await money.once(app)
        after = (time.perf_counter(), time.process_time(), thread[0], cpu_seconds(executor_pids), cluster.cpu())
        wall, process, request, sandbox, postgres = ((a - b) / calls * 1e6 for a, b in zip(after, before))
        for key, value in zip(rows, (process, request, sandbox, postgres, wall)):
            rows[key].append(value)
        print(f"round {r + 1}: process {process:.0f} µs, request thread {request:.0f}, sandbox {sandbox:.0f}, "
              f"PostgreSQL {postgres:.0f}, wall {wall:.0f} µs per call", flush=True)
    print("per call (min / median of rounds): " + "; ".join(
        f"{key} {min(values):.0f} / {statistics.median(values):.0f} µs" for key, values in rows.items()))
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        conn.execute("SELECT pg_stat_statements_reset()")
    for _ in range(calls):
        await money.once(app)
    with psycopg.connect(url, autocommit=True) as conn:
        stats = conn.execute(
            "SELECT calls, total_exec_time, total_plan_time, left(regexp_replace(query, '\\s+', ' ', 'g'), 100)"
            " FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat_statements%'"
            " ORDER BY total_exec_time DESC LIMIT 12").fetchall()
    for count, exec_ms, plan_ms, query in stats:
        print(f"  {count / calls:5.2f}/call {exec_ms * 1000 / calls:7.1f} µs exec {plan_ms * 1000 / calls:5.1f} plan"
              f"  {query}")
    if profile:
        import cProfile

        from ledger.api.http import GraphQLEndpoint

        profiler = cProfile.Profile(time.thread_time)
        original = GraphQLEndpoint.execute

        def profiled(self, *args, **kwargs):
            profiler.enable()
            try:
                return original(self, *args, **kwargs)
            finally:
                profiler.disable()

        GraphQLEndpoint.execute = profiled
        for _ in range(calls):
            await money.once(app)
        GraphQLEndpoint.execute = original
        profiler.dump_stats(profile)
        print(f"cProfile of the request thread: {profile}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.asgi_money")
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--profile", help="a file for a cProfile of the request thread over one more round")
    parser.add_argument("--callgrind", action="store_true",
                        help="count instructions instead (run under `valgrind --tool=callgrind --instr-atstart=no`)")
    args = parser.parse_args(argv)
    cluster = Cluster()
    try:
        url = cluster.create_database("ledger")
        fx, _server = populated(url, accounts=50, workdir_prefix="ledger-asgi-money-")
        money = _Money(fx.token, fx.transfer_tool, fx.accounts)

        async def work(app):
            await _run(app, money, url, cluster, args.calls, args.repeat, args.profile, args.callgrind)

        run_with_app(url, work)
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
