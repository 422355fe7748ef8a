"""Measure the runtime's fixed costs: `python -m ledger.runtime.benchmark`.

Prints the cost of starting an executor, of one tiny run (warm cache), of loading a program the
executor has not seen, of one host call round trip, and of one nested tool run: the best of five
batches, and the median, since a shared machine adds noise.

`--callgrind` counts the sandbox's side of a call tree's reads instead, in instructions: run as
`valgrind --tool=callgrind --trace-children=yes --instr-atstart=no python -m ledger.runtime.benchmark
--callgrind [--reads 1000]`, it runs a program that makes `--reads` graphql() reads (the bench's
call tree, `bench/fixtures.py` READS_SRC) against a host that answers at once, once to warm up, then
once with the executor process's instrumentation on, and dumps that process's counts
(`callgrind.out.<executor pid>`; its total / reads = the sandbox's instructions per read). The server's
side stays uninstrumented; the counts are deterministic whatever else the machine runs.

`--side server` counts this process instead (the lease, the pipe's server side and the trivial host, the
executor not traced: run without `--trace-children`), dumped as `callgrind.out.<this pid>`. `--runs N`
instead of a tree counts N top-level runs of a no-op program, each on its own lease (leased, run, given
back), as a queued no-op execution runs: total / N per run.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time
from collections.abc import Callable
from typing import Any

from ledger.runtime.interface import Program
from ledger.runtime.pool import ExecutorPool

# The bench's call tree (`bench/fixtures.py` READS_SRC is this), and what its read answers.
READS_SOURCE = '''DOC = """query($id: UUID!) { financial { account(id: $id) { balance } } }"""

def run(event):
    n = 0
    for i in range(event["data"]["n"]):
        if graphql(DOC, variables={"id": event["data"]["account_id"]})["financial"]["account"] != None:
            n += 1
    return {"reads": n}
'''
READ_ANSWER = {"financial": {"account": {"balance": 120}}}


class _Host:
    def __init__(self, lease: Any, tools: dict[str, Program]) -> None:
        self.lease = lease
        self.tools = tools

    def graphql(self, document: str, variables: dict | None, operation_name: str | None, check: bool) -> Any:
        return {"data": {"account": {"balance": 120, "currency": "EUR"}}}

    def cel(self, expression: str, variables: dict | None, check: bool) -> Any:
        return True

    def call_tool(self, name: str, input: Any, check: bool) -> Any:
        return self.lease.run(self.tools[name], {"data": input}, self, time.monotonic() + 30).output


class _ReadHost(_Host):
    def graphql(self, document: str, variables: dict | None, operation_name: str | None, check: bool) -> Any:
        return READ_ANSWER


def _report(label: str, batch: Callable[[int], None], count: int, batches: int = 5) -> None:
    costs = []
    for index in range(batches):
        started = time.perf_counter()
        batch(index)
        costs.append((time.perf_counter() - started) / count * 1e6)
    print(f"{label:28} best {min(costs):8.1f} µs   median {statistics.median(costs):8.1f} µs")


def main() -> None:
    started = time.perf_counter()
    with ExecutorPool(1) as pool:
        print(f"{'start one executor':28} {(time.perf_counter() - started) * 1e3:8.1f} ms")
        tiny = Program(("bench", "tiny"), "def run(event):\n    return event['data']\n")
        calls = Program(
            ("bench", "calls"),
            "def run(event):\n"
            "    for i in range(event['data']):\n"
            "        graphql('query($id: UUID!) { financial { account(id: $id) { balance } } }', {'id': 'A'})\n",
        )
        leaf = Program(("bench", "leaf"), "def run(event):\n    return event['data']\n")
        nesting = Program(
            ("bench", "nesting"),
            "def run(event):\n    for i in range(event['data']):\n        tools.leaf(i)\n",
            ("leaf",),
        )
        with pool.lease() as lease:
            host = _Host(lease, {"leaf": leaf})

            def run(program: Program, data: Any) -> None:
                outcome = lease.run(program, {"data": data}, host, time.monotonic() + 60)
                assert outcome.ok, outcome

            for program in (tiny, calls, nesting):
                run(program, 1)  # load into the executor's cache

            def tiny_runs(batch: int) -> None:
                for index in range(1000):
                    run(tiny, index)

            def cold_runs(batch: int) -> None:
                for index in range(100):
                    run(Program(("bench", "cold", batch, index), tiny.source), index)

            _report("tiny run (warm cache)", tiny_runs, 1000)
            _report("tiny run (cold: load)", cold_runs, 100)
            _report("host call round trip", lambda batch: run(calls, 5000), 5000)
            _report("nested tool run", lambda batch: run(nesting, 1000), 1000)


NOOP_SOURCE = "def run(event):\n    return {}\n"  # the bench's no-op tool (`bench/fixtures.py` NOOP_SRC)


def count_tree_instructions(reads: int, *, side: str = "executor", runs: int = 0) -> None:
    """The sandbox's (or this process's) instructions over one tree of `reads` graphql() reads, or over `runs`
    leased no-op runs (see the module's doc)."""
    import os

    # Valgrind needs more address space than the executor's usual bound, and starts it slowly.
    with ExecutorPool(1, memory_limit_bytes=64 << 30, startup_timeout=600.0) as pool:
        if runs:
            program = Program(("bench", "noop"), NOOP_SOURCE)

            def workload() -> None:
                for index in range(runs):
                    with pool.lease(60.0, tenant="bench") as lease:
                        event = {"data": {}, "session": None, "index": index}
                        outcome = lease.run(program, event, _Host(lease, {}), time.monotonic() + 60)
                        assert outcome.ok and outcome.output == {}, outcome
            what = f"{runs} leased no-op runs"
        else:
            program = Program(("bench", "reads"), READS_SOURCE)
            event = {"data": {"n": reads, "account_id": "6f1f5a2e-8a8e-4c3e-9d1e-0c7b3f6f2a10"}}

            def workload() -> None:
                with pool.lease() as lease:
                    outcome = lease.run(program, event, _ReadHost(lease, {}), time.monotonic() + 3600)
                    assert outcome.ok and outcome.output == {"reads": reads}, outcome
            what = f"one tree of {reads} reads"
        workload()  # load and warm up
        with pool.lease() as lease:
            pid = str(os.getpid() if side == "server" else lease.executor_pid)

        def callgrind(*flags: str) -> None:
            subprocess.run(["callgrind_control", *flags, pid], check=True, capture_output=True)

        callgrind("-z")
        callgrind("-i", "on")
        workload()
        callgrind("-i", "off")
        callgrind("-d", "tree")
        print(f"callgrind: the {side}'s process {pid} over {what} dumped (callgrind.out.{pid}.*)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--callgrind", action="store_true",
                        help="count the executor's instructions over a tree of reads (run under valgrind)")
    parser.add_argument("--reads", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=0, help="count N leased no-op runs instead of a tree")
    parser.add_argument("--side", choices=("executor", "server"), default="executor",
                        help="which process --callgrind counts")
    arguments = parser.parse_args()
    if arguments.callgrind:
        count_tree_instructions(arguments.reads, side=arguments.side, runs=arguments.runs)
    else:
        main()
