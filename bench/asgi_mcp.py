"""The bench's tool call (`bench_balance`) without the HTTP parser, in one process, through each route:

    python -m bench.asgi_mcp [--via mcp,mcp-2025-11-25,graphql] [--calls 2000] [--repeat 3] [--profile VIA]
    valgrind --tool=callgrind --instr-atstart=no python -m bench.asgi_mcp --callgrind --calls 100

Starts a throwaway cluster and `ledger serve` (only to create the bench's fixtures through the API, as
`make bench` does), then builds `create_app()` in this process (its lifespan run, the queue worker off) and
sends the MCP row's requests (bench/workloads.py `tool_call_spec`: a fresh executionId each) N times, one
after another, on uvloop, through each route in turn. It prints the process's CPU (all threads: the event
loop's and the request threads') per call in µs, the best of `--repeat` rounds, and the event loop's
thread's part of it; the sandbox's process is not in it (it is the same for every route). `--profile VIA`
also prints cProfile's top functions (cumulative, the event loop's thread's CPU) over one more round of
that route; the profiler's overhead inflates absolute numbers, so compare shares. `--callgrind`, under
valgrind, counts each route's instructions instead (one dump per route, `totals` / N per call):
deterministic whatever else the machine runs.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import time
import uuid
from urllib.parse import urlsplit

from . import workloads
from .env import Cluster
from .inprocess import populated, post, run_with_app


class _Route:
    def __init__(self, spec: dict) -> None:
        self.path = urlsplit(spec["url"]).path
        self.headers = {"Content-Type": "application/json", "Authorization": f"Bearer {spec['token']}",
                        **spec.get("headers", {})}
        self.template = spec["body"]

    async def once(self, app) -> bytes:
        body = self.template.replace("__UUID__", str(uuid.uuid4())).encode()
        status, answer = await post(app, self.path, self.headers, body)
        if status != 200 or b'"balance"' not in answer or b'"isError":true' in answer:
            raise RuntimeError(f"{self.path} answered {status}: {answer[:400]!r}")
        return answer


def _callgrind(*flags: str) -> None:
    """Drive the callgrind this process runs under (`--callgrind`)."""
    import subprocess

    subprocess.run(["callgrind_control", *flags, str(os.getpid())], check=True, capture_output=True)


async def _count_instructions(app, routes: dict[str, _Route], calls: int) -> None:
    """Each route's instructions per call, all threads of this process, counted by callgrind (deterministic
    whatever else the machine runs): collection is switched on around the calls alone."""
    for via, route in routes.items():
        for _ in range(20):
            await route.once(app)
        _callgrind("-z")
        _callgrind("-i", "on")
        for _ in range(calls):
            await route.once(app)
        _callgrind("-i", "off")
        _callgrind("-d", via)
    print("callgrind: dumps of each route (callgrind_annotate <file>, 'summary' / calls = instructions per call)")


async def _measure(app, routes: dict[str, _Route], calls: int, repeat: int, profile: str | None) -> None:
    for route in routes.values():
        for _ in range(300):
            await route.once(app)
    best: dict[str, float] = {}
    for r in range(repeat):
        for via, route in routes.items():  # the routes interleaved, round by round
            cpu, loop, wall = time.process_time(), time.thread_time(), time.perf_counter()
            for _ in range(calls):
                await route.once(app)
            loop = time.thread_time() - loop
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            per = cpu / calls * 1e6
            best[via] = min(best.get(via, per), per)
            print(f"round {r + 1} {via}: {per:.0f} µs CPU per call, {loop / calls * 1e6:.0f} of them on the event "
                  f"loop's thread ({wall / calls * 1e6:.0f} µs wall)", flush=True)
    print("best: " + ", ".join(f"{via} {us:.0f} µs" for via, us in best.items()))
    if "graphql" in best:
        for via, us in best.items():
            if via != "graphql":
                print(f"CPU ratio graphql/{via}: {best['graphql'] / us:.2f}")
    if profile:
        # The event loop's thread's CPU only (the request threads' work is not profiled): what the route, the
        # SDK and the hops to the request threads cost on the loop, with no wait for the GIL counted.
        profiler = cProfile.Profile(time.thread_time)
        profiler.enable()
        for _ in range(calls):
            await routes[profile].once(app)
        profiler.disable()
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(60)
        print(out.getvalue())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.asgi_mcp")
    parser.add_argument("--via", default="mcp,mcp-2025-11-25,graphql")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", help="one route (mcp, mcp-2025-11-25, graphql) to profile with cProfile")
    parser.add_argument("--callgrind", action="store_true",
                        help="count instructions instead (run under `valgrind --tool=callgrind --instr-atstart=no`)")
    args = parser.parse_args(argv)
    cluster = Cluster()
    try:
        url = cluster.create_database("ledger")
        fx, server = populated(url, accounts=10, workdir_prefix="ledger-asgi-mcp-")
        routes = {via: _Route(workloads.tool_call_spec(server, fx, via)) for via in args.via.split(",")}

        async def work(app):
            if args.callgrind:
                await _count_instructions(app, routes, args.calls)
            else:
                await _measure(app, routes, args.calls, args.repeat, args.profile)

        run_with_app(url, work)
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
