"""A call tree's cost per read in one process: `create_app()` called as an ASGI app.

    python -m bench.asgi_tree [--reads 1000] [--repeat 7] [--profile FILE]

Starts a throwaway cluster, the app in this process (queue worker off), creates an account and the
bench's reads tool (`bench.fixtures.READS_SRC`) through POST /graphql, then invokes it `--repeat` times
with `n = --reads` and prints, per read: the wall time, this process's CPU (every thread), the sandbox
executors' CPU (from /proc) and the PostgreSQL backends' CPU, and the same reads' floor (primary-key
SELECTs through psycopg on one connection, as the floor in `bench.workloads.call_tree`), each the median of
the repeats; then the statements of one more tree by their PostgreSQL time per read (pg_stat_statements),
and, for each of the three processes of a read's path (this one, every thread; the sandbox executors; the
cluster's processes), its system CPU and its voluntary and involuntary context switches per read (from
/proc, medians of the repeats): where a read's wall time goes that the instructions do not show.
`--syscalls` counts the system calls of each of the three over one more tree (`perf stat` on the
`raw_syscalls:sys_enter` tracepoint: perf must be installed and allowed to trace).
`--profile FILE` keeps a cProfile of the request thread's top-level runs (cProfile slows
what it measures: read it for shares, not for µs). `--callgrind`, under
`valgrind --tool=callgrind --instr-atstart=no`, counts this process's instructions (every thread; the
sandbox's process is not traced) over one tree after a warm-up one, and dumps them (`callgrind_annotate`
of the dump; its total / reads = instructions per read): deterministic whatever else the machine runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import uuid

import psycopg

from .env import Cluster, children, cpu_seconds, sandbox_pids
from .fixtures import CREATE_TOOL, INVOKE, READS_SRC, prepare_database
from .inprocess import post_graphql, run_with_app

def _callgrind(*flags: str) -> None:
    """Drive the callgrind this process runs under (`--callgrind`)."""
    import subprocess

    subprocess.run(["callgrind_control", *flags, str(os.getpid())], check=True, capture_output=True)


def _task_counts(pids: list[int]) -> tuple[float, int, int]:
    """System CPU seconds and voluntary and involuntary context switches of every thread of `pids` now
    running (a process's own /proc/PID/status counts its first thread's switches only)."""
    ticks = os.sysconf("SC_CLK_TCK")
    system, voluntary, involuntary = 0, 0, 0
    for pid in pids:
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{pid}/task/{task}/stat") as f:
                    system += int(f.read().rsplit(")", 1)[1].split()[12])
                with open(f"/proc/{pid}/task/{task}/status") as f:
                    for line in f:
                        if line.startswith("voluntary_ctxt_switches:"):
                            voluntary += int(line.split()[1])
                        elif line.startswith("nonvoluntary_ctxt_switches:"):
                            involuntary += int(line.split()[1])
            except (OSError, IndexError, ValueError):
                continue
    return system / ticks, voluntary, involuntary


def _paths_pids(cluster: Cluster) -> dict[str, list[int]]:
    """The processes of a read's path by their part: this one, the sandbox executors, the cluster's."""
    postmaster = cluster.postmaster_pid
    return {"this process": [os.getpid()], "the sandbox": sandbox_pids(cluster),
            "PostgreSQL": [pid for pid in [postmaster, *children(postmaster)] if os.path.exists(f"/proc/{pid}")]}


def _syscalls(pids: dict[str, list[int]], tree) -> dict[str, int | None]:
    """The system calls each part's processes make while `tree()` runs (`perf stat`, every thread); None for
    a part perf could not count (it refuses a process that ended as it attached, e.g. a closing backend)."""
    import signal
    import subprocess
    import tempfile

    counted, files = {}, {}
    for part, part_pids in pids.items():
        files[part] = tempfile.NamedTemporaryFile(suffix=".perf", delete=False).name
        counted[part] = subprocess.Popen(["perf", "stat", "-x,", "-e", "raw_syscalls:sys_enter", "-o", files[part],
                                          "-p", ",".join(map(str, part_pids))])
    time.sleep(0.5)  # perf attaches
    tree()
    totals = {}
    for part, perf in counted.items():
        perf.send_signal(signal.SIGINT)
        failed = perf.wait() not in (0, -signal.SIGINT)
        with open(files[part]) as f:
            lines = [line.split(",") for line in f if "raw_syscalls" in line]
        os.unlink(files[part])
        counts = [int(fields[0]) for fields in lines if fields[0].isdigit()]
        totals[part] = None if failed or not counts else sum(counts)
    return totals


async def _run(app, token: str, url: str, tenant_id, cluster: Cluster, reads: int, repeat: int,
               profile: str | None, callgrind: bool = False, syscalls: bool = False) -> None:
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

    async def tree() -> None:
        out = await data(INVOKE, {"id": tool, "input": {"executionId": str(uuid.uuid4()),
                                                         "input": {"account_id": account, "n": reads}}})
        assert out["actions"]["invokeAction"]["status"] == "SUCCEEDED", out

    if callgrind:
        for counted in (False, True):
            if counted:
                _callgrind("-z")
                _callgrind("-i", "on")
            await tree()
        _callgrind("-i", "off")
        _callgrind("-d", "tree")
        print(f"callgrind: one tree of {reads} reads dumped (callgrind_annotate <file>; total / {reads} per read)")
        return
    walls, cpus, sandboxes, postgres, floors = [], [], [], [], []
    kernel: dict[str, list[tuple[float, int, int]]] = {}
    for i in range(repeat + 1):
        executor_pids = sandbox_pids(cluster)
        parts = _paths_pids(cluster)
        counts = {part: _task_counts(part_pids) for part, part_pids in parts.items()}
        before = (time.perf_counter(), time.process_time(), cpu_seconds(executor_pids), cluster.cpu())
        await tree()
        after = (time.perf_counter(), time.process_time(), cpu_seconds(executor_pids), cluster.cpu())
        counts_after = {part: _task_counts(part_pids) for part, part_pids in parts.items()}
        if i:  # the first warms the executor and the caches
            walls.append(after[0] - before[0])
            cpus.append(after[1] - before[1])
            sandboxes.append(after[2] - before[2])
            postgres.append(after[3] - before[3])
            for part, (system, voluntary, involuntary) in counts_after.items():
                was = counts[part]
                kernel.setdefault(part, []).append((system - was[0], voluntary - was[1], involuntary - was[2]))
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
    for part, rows in kernel.items():
        print(f"  {part}: system CPU {per([r[0] for r in rows]):.0f} µs a read, context switches a read "
              f"{statistics.median(r[1] for r in rows) / reads:.2f} voluntary, "
              f"{statistics.median(r[2] for r in rows) / reads:.2f} involuntary")
    if syscalls:
        loop = asyncio.get_running_loop()
        counted = await loop.run_in_executor(
            None, lambda: _syscalls(_paths_pids(cluster), lambda: asyncio.run_coroutine_threadsafe(tree(), loop).result()))
        print("system calls a read (one tree, perf stat): " + "; ".join(
            f"{part} {'n/a' if count is None else f'{count / reads:.2f}'}" for part, count in counted.items()))
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
    parser.add_argument("--syscalls", action="store_true", help="count each process's system calls over one more tree (perf)")
    parser.add_argument("--callgrind", action="store_true",
                        help="count instructions instead (run under `valgrind --tool=callgrind --instr-atstart=no`)")
    args = parser.parse_args(argv)
    cluster = Cluster()
    try:
        url = cluster.create_database("ledger")
        tenant_id, _client, token, _secret = prepare_database(url)
        run_with_app(url, lambda app: _run(app, token, url, tenant_id, cluster, args.reads, args.repeat,
                                           args.profile, args.callgrind, args.syscalls))
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
