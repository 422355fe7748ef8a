"""A pool of warm executor processes, leased one call tree at a time.

`size` executors are kept started and idle; when all are leased, more are spawned up to
`max_size`, and a lease request beyond that waits. A lost or retiring executor is dropped and,
while fewer than `size` exist, replaced in the background, so the next lease finds it warm.
"""

from __future__ import annotations

import threading
import time

from ledger.errors import Retryable
from ledger.runtime.lease import ExecutorLease
from ledger.runtime.limits import DEFAULT_STEP_BUDGET, ExecutorSettings
from ledger.runtime.process import ExecutorProcess, ExecutorStartFailed


class ExecutorUnavailable(Retryable):
    """No executor could be leased in time (all busy at the pool's maximum, or none would start)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, hint="the server is busy running programs; retry shortly")


class ExecutorPool:
    def __init__(
        self,
        size: int = 2,
        *,
        memory_limit_bytes: int = 1 << 30,
        max_payload_bytes: int = 16 << 20,
        max_callstack: int = 200,
        grace_seconds: float = 1.0,
        step_budget: int | None = DEFAULT_STEP_BUDGET,
        max_size: int | None = None,
        startup_timeout: float = 10.0,
    ) -> None:
        if size < 0:
            raise ValueError("size must be >= 0")
        self.settings = ExecutorSettings(
            memory_limit_bytes=memory_limit_bytes,
            max_payload_bytes=max_payload_bytes,
            max_callstack=max_callstack,
            step_budget=step_budget,
        )
        self.size = size
        self.max_size = max_size if max_size is not None else max(size * 4, 8)
        if self.max_size < max(size, 1):
            raise ValueError("max_size must be >= size and >= 1")
        self.grace_seconds = grace_seconds
        self.startup_timeout = startup_timeout
        self._condition = threading.Condition()
        self._idle: list[ExecutorProcess] = []
        self._live: set[ExecutorProcess] = set()
        self._count = 0  # executors existing or being started, leased or idle
        self._closed = False

    def __enter__(self) -> ExecutorPool:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def start(self) -> None:
        """Start `size` executors and wait until each is ready."""
        with self._condition:
            missing = max(self.size - self._count, 0)
            self._count += missing
        started: list[ExecutorProcess] = []
        attempted = 0
        try:
            while attempted < missing:
                attempted += 1
                started.append(self._spawn_counted())
            for process in started:  # they start in parallel; this waits for the slowest
                process.wait_ready(self.startup_timeout)
        except BaseException:
            with self._condition:
                self._count -= missing - attempted
            for process in started:
                self._discard(process)
            raise
        with self._condition:
            self._idle.extend(started)
            self._condition.notify_all()

    def close(self) -> None:
        """Stop the idle executors; leased ones stop when their lease is released."""
        with self._condition:
            self._closed = True
            idle, self._idle = self._idle, []
            self._condition.notify_all()
        for process in idle:
            self._discard(process)

    def lease(self, timeout: float | None = None) -> ExecutorLease:
        """Exclusive use of one executor for one top-level call tree; waits up to `timeout`."""
        return ExecutorLease(self, self._acquire(timeout))

    def compile(self, source: str, tool_names: tuple[str, ...], timeout: float = 5.0) -> list[dict]:
        """Check a program without running it: [] when it is fine, else [{"line", "column", "message"}].

        Parses it, checks that `run` is a function taking one argument, and evaluates its top level
        in an executor with host calls refused (a host call at load time is a problem).
        """
        with self.lease(timeout) as lease:
            return lease.compile(source, tuple(tool_names), timeout)

    # --- for leases -----------------------------------------------------------------------------

    def _acquire(self, timeout: float | None) -> ExecutorProcess:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._condition:
                while True:
                    if self._closed:
                        raise RuntimeError("the executor pool is closed")
                    if self._idle:
                        process = self._idle.pop()  # most recently used: its caches are warmest
                        break
                    if self._count < self.max_size:
                        self._count += 1
                        process = None
                        break
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise ExecutorUnavailable(f"all {self.max_size} executors are busy")
                    self._condition.wait(remaining)
            if process is None:
                try:
                    process = self._spawn_counted()
                except OSError as error:
                    raise ExecutorUnavailable(f"an executor could not be started: {error}") from None
            if not process.is_alive():
                self._discard(process)
                continue
            try:
                process.wait_ready(self.startup_timeout)
            except ExecutorStartFailed as error:
                self._discard(process)
                raise ExecutorUnavailable(str(error)) from None
            return process

    def _release(self, process: ExecutorProcess) -> None:
        with self._condition:
            if not self._closed and process.is_alive() and not process.retiring:
                self._idle.append(process)
                self._condition.notify()
                return
        self._discard(process)

    def _discard(self, process: ExecutorProcess) -> None:
        """Forget an executor (killing it if need be) and top the warm set back up."""
        process.kill()
        with self._condition:
            if process not in self._live:
                return
            self._live.discard(process)
            self._count -= 1
            self._condition.notify()
            top_up = not self._closed and self._count < self.size
            if top_up:
                self._count += 1
        if top_up:
            threading.Thread(target=self._top_up, name="ledger-executor-top-up", daemon=True).start()

    def _spawn_counted(self) -> ExecutorProcess:
        """Spawn an executor already counted in `_count` (uncounted again if spawning fails)."""
        try:
            process = ExecutorProcess.spawn(self.settings)
        except BaseException:
            with self._condition:
                self._count -= 1
                self._condition.notify()
            raise
        with self._condition:
            self._live.add(process)
        return process

    def _top_up(self) -> None:
        try:
            process = self._spawn_counted()
        except Exception:
            return
        try:
            process.wait_ready(self.startup_timeout)
        except ExecutorStartFailed:
            self._discard(process)
            return
        self._release(process)
