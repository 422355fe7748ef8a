"""The state one top-level call shares with every call beneath it, and the deadline of each call."""

from __future__ import annotations

import datetime
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from ..runtime import ExecutorWaitTimedOut
from ..scope import Scope
from .failures import CallFailed
from .records import PendingExecution

# Where a running call tree is kept in `Scope.request_state`, so that an invokeAction made through
# graphql() joins it (re-entry, depth, count, deadline, records) instead of starting a tree of its own.
TREE_KEY = "call_tree"
# Set in `Scope.request_state` once any call tree of the request (or attempt) called a model: the server
# then never runs it again (DESIGN 13: a model is not deterministic, and its tokens are spent).
MODEL_CALLED_KEY = "model_called"
DEFAULT_RESPONSE_TIMEOUT = 30.0
# A called agent waits on its model: its responseTimeout defaults to 120 s (DESIGN 13).
DEFAULT_AGENT_RESPONSE_TIMEOUT = 120.0


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
    # A call of the tree made a model request: the request or attempt must never be run again.
    model_called: bool = False
    # The tree is a queued attempt on a worker (a start, a trigger's run): it holds no client's request
    # open, so the per-tenant bound on called agents does not apply to it.
    on_worker: bool = False

    def mark_model_called(self) -> None:
        self.model_called = True
        self.scope.request_state[MODEL_CALLED_KEY] = True

    def executor(self):
        """The tree's executor, leased by its first program; the calls beneath it share the lease.

        The first program waits for an executor at most until its own deadline (DESIGN 17). When
        that deadline is the tool's responseTimeout, the call fails (recorded) as a call that ran
        out of time does; when it is the request's, the whole request is `retryable`.
        """
        if self.lease is None:
            deadline = self.deadlines[-1] if self.deadlines else self.scope.deadline
            try:
                self.lease = self.scope.services.executor_pool().lease(
                    timeout=max(0.0, deadline - time.monotonic()), tenant=self.scope.tenant_id)
            except ExecutorWaitTimedOut as exc:
                if deadline < self.scope.deadline - 0.1:
                    raise CallFailed("action_response_timeout",
                                     f"the call's responseTimeout passed while it waited for a sandbox executor: {exc}",
                                     "retry when fewer calls are running, or raise the tool's responseTimeout") from None
                raise
        return self.lease

    def close(self) -> None:
        if self.lease is not None:
            self.lease.release()
            self.lease = None


def response_timeout_seconds(record: dict) -> float:
    timeout_ms = (record.get("tool") or {}).get("responseTimeout")
    if timeout_ms:
        return timeout_ms / 1000
    return DEFAULT_AGENT_RESPONSE_TIMEOUT if record.get("kind") == "agent" else DEFAULT_RESPONSE_TIMEOUT


def model_was_called(request_state: dict) -> bool:
    """Whether the request (or queued attempt) whose state this is made a model call: never re-run it."""
    return bool(request_state.get(MODEL_CALLED_KEY))


def not_rerun_hint(hint: str | None) -> str:
    """The hint of a `retryable` failure that the server did not retry because a model was called."""
    return ("it called a model, so the server did not run it again (a model's answer differs and its tokens are "
            "spent); send it again to run a new turn" + (f"; {hint}" if hint else ""))


def response_deadline(record: dict, outer: float) -> float:
    return min(outer, time.monotonic() + response_timeout_seconds(record))
