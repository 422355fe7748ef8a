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
import asyncio
import json
import os
import sys
import time
import uuid

from .env import Cluster
from .fixtures import READ, prepare_database


def _scope(token: str, body: bytes) -> dict:
    return {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.4"}, "http_version": "1.1",
            "method": "POST", "scheme": "http", "path": "/graphql", "raw_path": b"/graphql",
            "query_string": b"", "root_path": "", "client": ("127.0.0.1", 50000),
            "server": ("127.0.0.1", 8000), "state": {},
            "headers": [(b"host", b"127.0.0.1:8000"), (b"user-agent", b"wrk"), (b"accept", b"*/*"),
                        (b"content-type", b"application/json"), (b"authorization", f"Bearer {token}".encode()),
                        (b"content-length", str(len(body)).encode())]}


async def _call(app, token: str, body: bytes) -> tuple[int, bytes]:
    sent: list[dict] = []
    delivered = False

    async def receive():
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.sleep(3600)

    async def send(message):
        sent.append(message)

    await app(_scope(token, body), receive, send)
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


async def _run(app, token: str, calls: int, repeat: int) -> None:
    account = str(uuid.uuid4())
    create = json.dumps({"query": 'mutation($id: UUID!) { financial { createAccount(id: $id, input: {name: "a",'
                                  ' currency: "USD"}) { id } } }', "variables": {"id": account}}).encode()
    status, answer = await _call(app, token, create)
    assert status == 200 and b"errors" not in answer, answer
    body = json.dumps({"query": READ, "variables": {"id": account}}).encode()
    status, answer = await _call(app, token, body)
    assert status == 200 and answer == b'{"data":{"financial":{"account":{"balance":0}}}}', answer
    for _ in range(500):
        await _call(app, token, body)
    best = None
    for r in range(repeat):
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(calls):
            await _call(app, token, body)
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
        os.environ["LEDGER_DATABASE_URL"] = url
        os.environ["LEDGER_RUN_WORKER"] = "0"
        from ledger.wiring import create_app

        app = create_app()

        async def main_async():
            async with app.router.lifespan_context(app):
                await _run(app, token, args.calls, args.repeat)

        import uvloop

        uvloop.run(main_async())
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
