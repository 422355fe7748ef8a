"""The read (`account(id) { balance }`) on each HTTP stack `ledger serve` can run, in one run (issue 18).

    python -m bench.http_stacks [--stacks h11,httptools,granian] [--rounds 3] [--seconds 5]

One cluster, one database; one `ledger serve --workers 2 --no-worker` per stack (LEDGER_HTTP), all
started before the first measurement; each round drives each stack in turn (the order rotated every
round) with the bench's load generator and 4 connections, and reads the server processes' CPU before and
after. It prints, per stack, the median over rounds of req/s and of server CPU per request.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from . import loadgen
from .env import Cluster, Server
from .fixtures import READ, populate, prepare_database


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.http_stacks")
    parser.add_argument("--stacks", default="h11,httptools,granian")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=4)
    args = parser.parse_args(argv)
    stacks = args.stacks.split(",")
    workdir = Path(tempfile.mkdtemp(prefix="ledger-http-stacks-"))
    cluster = Cluster()
    servers: dict[str, Server] = {}
    try:
        url = cluster.create_database("ledger")
        tenant_id, client_id, token, secret = prepare_database(url)
        for stack in stacks:
            servers[stack] = Server(url, workdir, workers=2, extra_env={"LEDGER_HTTP": stack})
        fx = populate(url, servers[stacks[0]].url, tenant_id, client_id, token, secret, accounts=50)
        results: dict[str, list[dict]] = {s: [] for s in stacks}
        body = json.dumps({"query": READ, "variables": {"id": fx.accounts[0]}})
        for stack, server in servers.items():  # warm every process's caches
            loadgen.run({"url": server.url, "token": token, "kind": "static", "body": body}, args.connections, 2)
        for r in range(args.rounds):
            order = stacks[r % len(stacks):] + stacks[:r % len(stacks)]
            for stack in order:
                server = servers[stack]
                spec = {"url": server.url, "token": token, "kind": "static", "body": body}
                cpu = server.cpu()
                out = loadgen.run(spec, args.connections, args.seconds)
                cpu = server.cpu() - cpu
                out["server_cpu_ms_per_call"] = round(cpu * 1000 / out["requests"], 3) if out["requests"] else None
                results[stack].append(out)
                print(f"round {r + 1} {stack:10s} {out['rps']:8.1f} req/s  p50 {out['p50_ms']:.2f} ms  "
                      f"p99 {out['p99_ms']:.2f} ms  server CPU {out['server_cpu_ms_per_call']} ms/req  "
                      f"errors {out['errors']}", flush=True)
        print()
        for stack in stacks:
            runs = results[stack]
            print(f"{stack:10s} median {statistics.median(x['rps'] for x in runs):8.1f} req/s  "
                  f"server CPU {statistics.median(x['server_cpu_ms_per_call'] for x in runs):.3f} ms/req  "
                  f"p50 {statistics.median(x['p50_ms'] for x in runs):.2f} ms")
        (workdir / "results.json").write_text(json.dumps(results, indent=1))
        print(f"\n{workdir / 'results.json'}")
    finally:
        for server in servers.values():
            server.stop()
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
