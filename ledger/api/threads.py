"""The threads a `/graphql` request's synchronous work runs on (its transaction, its GraphQL execution).

A plain executor instead of anyio's `run_in_threadpool`: that one looks up the running backend, its
thread limiter, a cancel scope and the idle-worker queue (a pure-Python `queue.Queue`) for each call, ~10%
of a read's server CPU in `python -m bench.profile read`; `loop.run_in_executor` does one C-level queue put.

Like `run_in_threadpool`, a call whose task is cancelled (the server shutting down) still waits for its
thread: the transaction ends (commits or rolls back) before the task does, and before the services close.
"""

from __future__ import annotations

import asyncio
import contextvars
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, TypeVar

T = TypeVar("T")


# anyio's default thread limit, which `run_in_threadpool` had (ledger/wiring.py raises it, never lowers it).
_ANYIO_DEFAULT = 40


def request_thread_count(settings: Any) -> int:
    """Every request runs on a thread while it holds or waits for a connection: enough threads for all of
    them (the pool's connections, its queue, a few more), so that a request is never queued, unbounded and
    untimed, for a thread instead; at least as many as anyio gave before (the same behaviour under load)."""
    return max(_ANYIO_DEFAULT, settings.pool_max + settings.pool_queue + 8)


class RequestThreads:
    def __init__(self, size: int) -> None:
        # Threads start when first needed, up to `size` (`request_thread_count`).
        self._executor = ThreadPoolExecutor(max_workers=size, thread_name_prefix="ledger-request")

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` on a request thread, in a copy of the caller's context variables."""
        future = asyncio.get_running_loop().run_in_executor(self._executor, contextvars.copy_context().run,
                                                            fn, *args)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            while not future.done():
                try:
                    await asyncio.wait([future])
                except asyncio.CancelledError:
                    continue
            raise

    def close(self) -> None:
        self._executor.shutdown(wait=False)
