"""Profile a server process under a bench workload with py-spy (`pip install -e '.[bench]'`).

    python -m bench.profile read|money|tree|tool-graphql|tool-mcp|tool-mcp-2025-11-25 [--seconds 15] [--top 40]

Starts the same cluster and `ledger serve` as `make bench`, drives the workload with the same load
generator, samples one server process with `py-spy record` (native frames off, idle threads off) and
prints the functions by inclusive and by self share of the samples. The collapsed stacks stay in the
log directory for a flame graph.
"""

from __future__ import annotations

import argparse
import collections
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from . import loadgen, workloads
from .env import Client, Cluster, Server, cpu_seconds
from .fixtures import INVOKE, READ, populate, prepare_database


def _summarize(collapsed: Path, top: int, focus: str | None) -> str:
    inclusive: collections.Counter = collections.Counter()
    own: collections.Counter = collections.Counter()
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        frames = stack.split(";")
        if focus and not any(focus in f for f in frames):
            continue
        total += n
        for frame in set(frames):
            inclusive[frame] += n
        own[frames[-1]] += n
    lines = [f"{total} samples", "", "inclusive:"]
    lines += [f"{100 * n / total:5.1f}%  {frame}" for frame, n in inclusive.most_common(top)]
    lines += ["", "self:"]
    lines += [f"{100 * n / total:5.1f}%  {frame}" for frame, n in own.most_common(top)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile")
    parser.add_argument("workload", choices=("read", "money", "tree", "tool-graphql", "tool-mcp",
                                            "tool-mcp-2025-11-25"))
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--top", type=int, default=45)
    parser.add_argument("--focus", help="only stacks through a frame containing this text")
    parser.add_argument("--http", help="the server's HTTP stack (LEDGER_HTTP: h11, httptools, granian)")
    args = parser.parse_args(argv)
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    workdir = Path(tempfile.mkdtemp(prefix="ledger-profile-"))
    cluster = Cluster()
    server = None
    try:
        url = cluster.create_database("ledger")
        tenant_id, client_id, token, secret = prepare_database(url)
        server = Server(url, workdir, workers=1 if args.workload == "tree" else 2,
                        extra_env={"LEDGER_HTTP": args.http} if args.http else None)
        fx = populate(url, server.url, tenant_id, client_id, token, secret, accounts=50)
        if args.workload.startswith("tool-"):
            via = args.workload.removeprefix("tool-")
            workloads.check_tool_call(server, fx, via)
            spec = workloads.tool_call_spec(server, fx, via)
        elif args.workload == "read":
            spec = {"url": server.url, "token": token, "kind": "static",
                    "body": json.dumps({"query": READ, "variables": {"id": fx.accounts[0]}})}
        else:
            spec = {"url": server.url, "token": token, "kind": "invoke", "query": INVOKE,
                    "action": fx.transfer_tool, "accounts": fx.accounts}
        out = workdir / "stacks.txt"
        if args.workload == "tree":
            def drive():
                client = Client(server.url, token)
                for _ in range(int(args.seconds) + 2):
                    client.data(INVOKE, {"id": fx.reads_tool, "input": {"executionId": str(uuid.uuid4()),
                                                                       "input": {"account_id": fx.accounts[0],
                                                                                 "n": 1000}}})
            driver = threading.Thread(target=drive)
        else:
            driver = threading.Thread(target=lambda: print(loadgen.run(spec, 4, args.seconds + 4)))
        pids = server.worker_pids()
        before = [cpu_seconds([pid]) for pid in pids]
        driver.start()
        time.sleep(2)
        # The load generator's few keep-alive connections may all land on one server process: sample the
        # busiest one.
        busiest = max(zip((cpu_seconds([pid]) - b for pid, b in zip(pids, before)), pids))[1]
        subprocess.run([py_spy, "record", "-p", str(busiest), "-d", str(int(args.seconds)),
                        "-r", "200", "--gil", "-f", "raw", "-o", str(out)], check=True, capture_output=True)
        driver.join()
        print(_summarize(out, args.top, args.focus))
        print(f"\ncollapsed stacks: {out}")
    finally:
        if server is not None:
            server.stop()
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
