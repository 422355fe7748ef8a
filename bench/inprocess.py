"""The app called as an ASGI app in this process, for the `bench.asgi_*` tools: one POST at a time, and the
app's lifespan run around a coroutine on uvloop. What these tools measure is everything a request does
from the ASGI call to the response's last message, without uvicorn's HTTP parsing."""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path
from typing import Awaitable, Callable

from .env import Server
from .fixtures import Fixtures, populate, prepare_database


def _scope(path: str, headers: dict[str, str], body: bytes) -> dict:
    raw = [(b"host", b"127.0.0.1:8000"), (b"user-agent", b"bench"), (b"content-length", str(len(body)).encode())]
    raw += [(name.lower().encode(), value.encode()) for name, value in headers.items()]
    return {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.4"}, "http_version": "1.1",
            "method": "POST", "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
            "root_path": "", "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8000), "state": {},
            "headers": raw}


async def post(app, path: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes]:
    """One request's status and body."""
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

    await app(_scope(path, headers, body), receive, send)
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


async def post_graphql(app, token: str, body: bytes) -> tuple[int, bytes]:
    return await post(app, "/graphql", {"Content-Type": "application/json", "Accept": "*/*",
                                        "Authorization": f"Bearer {token}"}, body)


def run_with_app(database_url: str, work: Callable[[object], Awaitable[None]]) -> None:
    """`work(app)` on uvloop inside the lifespan of an app on `database_url`, its queue worker off."""
    os.environ["LEDGER_DATABASE_URL"] = database_url
    os.environ["LEDGER_RUN_WORKER"] = "0"
    from ledger.wiring import create_app

    app = create_app()

    async def main_async():
        async with app.router.lifespan_context(app):
            await work(app)

    import uvloop

    uvloop.run(main_async())


def populated(database_url: str, *, accounts: int, workdir_prefix: str) -> tuple[Fixtures, Server]:
    """The bench's fixtures on a fresh database, created through the API as `make bench` creates them, by
    a `ledger serve` started for that alone and stopped before this returns (its URLs still name the
    routes the fixtures use)."""
    tenant_id, client_id, token, secret = prepare_database(database_url)
    server = Server(database_url, Path(tempfile.mkdtemp(prefix=workdir_prefix)), workers=1)
    try:
        fixtures = populate(database_url, server.url, tenant_id, client_id, token, secret, accounts=accounts)
    finally:
        server.stop()
    return fixtures, server
