"""The request threads (ledger/api/threads.py): a request's synchronous work, as anyio's run_sync ran it."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time

import pytest

from ledger.api.threads import RequestThreads

_CALLER = contextvars.ContextVar("caller", default=None)


def test_a_cancelled_call_ends_only_after_its_thread_has():
    threads = RequestThreads(2)
    finished = threading.Event()

    def work():
        time.sleep(0.3)
        finished.set()

    async def main():
        task = asyncio.create_task(threads.run(work))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert finished.is_set()  # the transaction's thread ended before the request's task did

    try:
        asyncio.run(main())
    finally:
        threads.close()


def test_a_call_sees_the_callers_context_variables_and_returns_or_raises_what_it_did():
    threads = RequestThreads(2)

    def fails():
        raise ValueError("no")

    async def main():
        _CALLER.set("request 1")
        assert await threads.run(_CALLER.get) == "request 1"
        with pytest.raises(ValueError, match="no"):
            await threads.run(fails)

    try:
        asyncio.run(main())
    finally:
        threads.close()
