"""Measure the runtime's fixed costs: `python -m ledger.runtime.benchmark`.

Prints the cost of starting an executor, of one tiny run (warm cache), of loading a program the
executor has not seen, of one host call round trip, and of one nested tool run: the best of five
batches, and the median, since a shared machine adds noise.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from ledger.runtime.interface import Program
from ledger.runtime.pool import ExecutorPool


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


if __name__ == "__main__":
    main()
