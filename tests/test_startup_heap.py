"""A served process takes what its startup built out of the garbage collector's walk (wiring
`freeze_startup_heap`): a full collection then walks what requests made since, not the schema and the SDKs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

_PROBE = r"""
import asyncio, gc, json
from ledger.wiring import create_app

app = create_app()

async def main():
    async with app.router.lifespan_context(app):
        gc.collect()
        print(json.dumps({"frozen": gc.get_freeze_count(), "walked": len(gc.get_objects())}))

asyncio.run(main())
"""


def test_a_served_process_leaves_its_startup_heap_out_of_full_collections(db_url):
    env = {**os.environ, "LEDGER_DATABASE_URL": db_url, "LEDGER_RUN_WORKER": "0"}
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    heap = json.loads(out.stdout.strip().splitlines()[-1])
    assert heap["frozen"] > 50_000
    assert heap["walked"] < heap["frozen"] / 10
