"""The state one top-level call shares with every call beneath it, and the deadline of each call."""

from __future__ import annotations

import datetime
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from ..scope import Scope
from .records import PendingExecution

# Where a running call tree is kept in `Scope.request_state`, so that an invokeAction made through
# graphql() joins it (re-entry, depth, count, deadline, records) instead of starting a tree of its own.
TREE_KEY = "call_tree"
DEFAULT_RESPONSE_TIMEOUT = 30.0


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


@dataclass
class CallTree:
    """State shared by every call beneath one top-level call."""

    scope: Scope
    pending: list[PendingExecution] = field(default_factory=list)
    calls_beneath: int = 0
    stack: list[tuple[uuid.UUID, int]] = field(default_factory=list)
    # The deadline of every call running now, innermost last: a nested invokeAction through graphql()
    # is bounded by its caller's responseTimeout like any other child.
    deadlines: list[float] = field(default_factory=list)
    lease: Any = None
    # The session of the top-level call ({id, input}), for fixed input's `session`; None without one.
    session: dict | None = None
    # Deadlines of the enclosing tools that narrowed statement_timeout, innermost last.
    statement_bounds: list[float] = field(default_factory=list)

    def executor(self):
        if self.lease is None:
            self.lease = self.scope.services.executor_pool().lease(timeout=max(0.1, self.scope.time_left()))
        return self.lease

    def close(self) -> None:
        if self.lease is not None:
            self.lease.release()
            self.lease = None


def response_timeout_seconds(record: dict) -> float:
    timeout_ms = (record.get("tool") or {}).get("responseTimeout")
    return timeout_ms / 1000 if timeout_ms else DEFAULT_RESPONSE_TIMEOUT


def response_deadline(record: dict, outer: float) -> float:
    return min(outer, time.monotonic() + response_timeout_seconds(record))
