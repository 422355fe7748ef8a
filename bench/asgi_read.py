"""The read's server CPU without the HTTP parser, in one process: `create_app()` called as an ASGI app.

    python -m bench.asgi_read [--calls 3000] [--repeat 3]

Starts a throwaway cluster, the app in this process (its lifespan run, the queue worker off), creates an
account through POST /graphql, then sends the bench's READ (`account(id) { balance }`) N times, one after
another, on uvloop, and prints the process's CPU (all threads: the event loop's and the request
threads') per call in µs, the best of `--repeat` rounds. Everything a request does from the ASGI call to
the response's last message is in it, the database's round trips' client side included; the parsing of
HTTP (uvicorn's protocol) is not.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid

from .env import Cluster
from .fixtures import READ, prepare_database
from .inprocess import post_graphql, run_with_app


async def _run(app, token: str, calls: int, repeat: int) -> None:
    account = str(uuid.uuid4())
    create = json.dumps({"query": 'mutation($id: UUID!) { financial { createAccount(id: $id, input: {name: "a",'
                                  ' currency: "USD"}) { id } } }', "variables": {"id": account}}).encode()
    status, answer = await post_graphql(app, token, create)
    assert status == 200 and b"errors" not in answer, answer
    body = json.dumps({"query": READ, "variables": {"id": account}}).encode()
    status, answer = await post_graphql(app, token, body)
    assert status == 200 and answer == b'{"data":{"financial":{"account":{"balance":0}}}}', answer
    for _ in range(500):
        await post_graphql(app, token, body)
    best = None
    for r in range(repeat):
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(calls):
            await post_graphql(app, token, body)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        per = cpu / calls * 1e6
        best = per if best is None else min(best, per)
        print(f"round {r + 1}: {per:.0f} µs CPU per read ({wall / calls * 1e6:.0f} µs wall)", flush=True)
    print(f"best: {best:.0f} µs CPU per read")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.asgi_read")
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    cluster = Cluster()
    try:
        url = cluster.create_database("ledger")
        _tenant, _client, token, _secret = prepare_database(url)
        run_with_app(url, lambda app: _run(app, token, args.calls, args.repeat))
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
