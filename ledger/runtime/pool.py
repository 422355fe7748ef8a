"""A pool of warm executor processes, leased one call tree at a time.

`size` executors are kept started and idle; when all are leased, more are spawned up to
`max_size`, and a lease request beyond that waits. A lost or retiring executor is dropped and,
while fewer than `size` exist, replaced in the background, so the next lease finds it warm.

Tenants share the pool fairly: one tenant holds at most `per_tenant` executors at once (half of
`max_size` by default), so that however many slow calls one tenant makes, another tenant's call
finds an executor free or waits only for its own tenant's calls. A lease is never taken back, so
the bound holds whether or not anyone waits yet: a tenant at it waits for one of its own executors
even while others are idle (a single-tenant deployment sets `per_tenant` to `max_size`). Waiting requests are served first come, first served among those whose
tenant is under its bound; a waiter whose timeout passes leaves the queue.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Hashable

from ledger.errors import Retryable
from ledger.runtime.lease import ExecutorLease
from ledger.runtime.limits import DEFAULT_STEP_BUDGET, ExecutorSettings
from ledger.runtime.process import ExecutorProcess, ExecutorStartFailed


class ExecutorUnavailable(Retryable):
    """No executor could be leased in time (all busy at the pool's maximum, or none would start)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, hint="the server is busy running programs; retry shortly")


class ExecutorWaitTimedOut(ExecutorUnavailable):
    """Every executor the request could have had stayed busy until its timeout."""


_NOT_HELD = object()


class _Waiter:
    """One lease request waiting for its turn (compared by identity)."""

    __slots__ = ("tenant",)

    def __init__(self, tenant: Hashable | None) -> None:
        self.tenant = tenant


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
        per_tenant: int | None = None,
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
        if per_tenant is not None and per_tenant < 1:
            raise ValueError("per_tenant must be >= 1")
        self.per_tenant = min(per_tenant or max(self.max_size // 2, 1), self.max_size)
        self.grace_seconds = grace_seconds
        self.startup_timeout = startup_timeout
        self._condition = threading.Condition()
        self._idle: list[ExecutorProcess] = []
        self._live: set[ExecutorProcess] = set()
        self._count = 0  # executors existing or being started, leased or idle
        self._closed = False
        # Fairness: executors held (or being started) per tenant, who holds each leased one, and
        # the lease requests waiting, in arrival order.
        self._held: Counter = Counter()
        self._holder: dict[ExecutorProcess, Hashable] = {}
        self._waiters: list[_Waiter] = []

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

    def lease(self, timeout: float | None = None, *, tenant: Hashable | None = None) -> ExecutorLease:
        """Exclusive use of one executor for one top-level call tree; waits up to `timeout`.

        `tenant` is whose work it runs, for the per-tenant bound; None (the server's own work, such
        as a benchmark) is not bound. Raises ExecutorWaitTimedOut when none was free in time.
        """
        return ExecutorLease(self, self._acquire(timeout, tenant), tenant)

    def held_by(self, tenant: Hashable | None) -> int:
        """Executors the tenant holds now (for metrics and tests)."""
        with self._condition:
            return self._held[tenant]

    def waiting(self) -> int:
        """Lease requests waiting now."""
        with self._condition:
            return len(self._waiters)

    def compile(self, source: str, tool_names: tuple[str, ...], timeout: float = 5.0, *,
                tenant: Hashable | None = None) -> list[dict]:
        """Check a program without running it: [] when it is fine, else [{"line", "column", "message"}].

        Parses it, checks that `run` is a function taking one argument, and evaluates its top level
        in an executor with host calls refused (a host call at load time is a problem).
        """
        with self.lease(timeout, tenant=tenant) as lease:
            return lease.compile(source, tuple(tool_names), timeout)

    # --- for leases -----------------------------------------------------------------------------

    def _acquire(self, timeout: float | None, tenant: Hashable | None = None) -> ExecutorProcess:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            process = self._grant(tenant, deadline)
            if process is None:
                try:
                    process = self._spawn_counted()
                except OSError as error:
                    self._ungrant(tenant)
                    raise ExecutorUnavailable(f"an executor could not be started: {error}") from None
                except BaseException:
                    self._ungrant(tenant)
                    raise
            if not process.is_alive():
                self._ungrant(tenant)
                self._discard(process)
                continue
            try:
                process.wait_ready(self.startup_timeout)
            except ExecutorStartFailed as error:
                self._ungrant(tenant)
                self._discard(process)
                raise ExecutorUnavailable(str(error)) from None
            except BaseException:
                self._ungrant(tenant)
                self._discard(process)
                raise
            with self._condition:
                self._holder[process] = tenant
            return process

    def _grant(self, tenant: Hashable | None, deadline: float | None) -> ExecutorProcess | None:
        """Wait for this request's turn; returns an idle executor, or None to start one (counted)."""
        with self._condition:
            if (not self._waiters and self._idle and not self._closed
                    and (tenant is None or self._held.get(tenant, 0) < self.per_tenant)):
                # Nobody is ahead of this request and it may have an idle executor: its turn is now, as it
                # would be queued alone, with no one behind it to wake.
                self._held[tenant] = self._held.get(tenant, 0) + 1
                return self._idle.pop()  # most recently used: its caches are warmest
            waiter = _Waiter(tenant)
            self._waiters.append(waiter)
            try:
                while True:
                    if self._closed:
                        raise RuntimeError("the executor pool is closed")
                    if (self._idle or self._count < self.max_size) and self._first_servable() is waiter:
                        break
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise ExecutorWaitTimedOut(self._busy_message(tenant))
                    self._condition.wait(remaining)
            finally:
                self._waiters.remove(waiter)
                # Whoever is next may be servable now (or was behind this waiter).
                self._condition.notify_all()
            self._held[tenant] += 1
            if self._idle:
                return self._idle.pop()  # most recently used: its caches are warmest
            self._count += 1
            return None

    def _first_servable(self) -> _Waiter | None:
        """The earliest waiter whose tenant is under its bound."""
        for waiter in self._waiters:  # in arrival order
            if waiter.tenant is None or self._held[waiter.tenant] < self.per_tenant:
                return waiter
        return None

    def _busy_message(self, tenant: Hashable | None) -> str:
        if tenant is not None and self._held[tenant] >= self.per_tenant:
            return (f"this tenant's calls already hold {self._held[tenant]} of the {self.max_size} sandbox "
                    "executors, as many as one tenant may hold at once")
        return f"all {self.max_size} sandbox executors stayed busy"

    def _ungrant(self, tenant: Hashable | None) -> None:
        """Give back a grant that produced no lease."""
        with self._condition:
            self._drop_held(tenant)
            self._condition.notify_all()

    def _drop_held(self, tenant: Hashable | None) -> None:
        self._held[tenant] -= 1
        if self._held[tenant] <= 0:
            del self._held[tenant]

    def _release(self, process: ExecutorProcess) -> None:
        # Whether it still lives is asked when it is next leased (`_acquire`), once per lease: a lease that
        # lost it killed it (`killed`), and one that died unseen since is dropped then.
        with self._condition:
            self._forget_holder(process)
            if not self._closed and not process.killed and not process.retiring:
                self._idle.append(process)
                self._wake_waiters()
                return
        self._discard(process)

    def _forget_holder(self, process: ExecutorProcess) -> None:
        tenant = self._holder.pop(process, _NOT_HELD)
        if tenant is not _NOT_HELD:
            self._drop_held(tenant)
            self._wake_waiters()

    def _wake_waiters(self) -> None:
        # Only `_grant` waits on the condition, and only while its waiter is queued.
        if self._waiters:
            self._condition.notify_all()

    def _discard(self, process: ExecutorProcess) -> None:
        """Forget an executor (killing it if need be) and top the warm set back up."""
        process.kill()
        with self._condition:
            self._forget_holder(process)
            if process not in self._live:
                return
            self._live.discard(process)
            self._count -= 1
            self._condition.notify_all()
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
                self._condition.notify_all()
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
