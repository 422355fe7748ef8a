"""A tool's database statements stop at its own deadline (PostgreSQL's statement_timeout).

Narrowed with one SET LOCAL, and only for a tool whose responseTimeout ends before the enclosing
bound (the request's deadline, or an enclosing tool's narrower one). The narrowing and its reset are
deferred (`ledger.db.pool.defer`): each goes in the round trip of the next statement, and a program that
makes no statement sends neither.
"""

from __future__ import annotations

import time

from psycopg.pq import TransactionStatus

from ..db.pool import Deferred, defer, undefer
from ..scope import Scope
from .tree import CallTree


class statements_bounded_by:
    """Within the block, the transaction's statements stop at `deadline` when it comes first.

    A class with slots: every program's run enters one, and `contextlib.contextmanager`'s generator and
    wrapper cost ~9k instructions more a run (a queued no-op execution, `bench.asgi_queue --callgrind`)."""

    __slots__ = ("_scope", "_tree", "_deadline", "_enclosing", "_narrowed")

    def __init__(self, scope: Scope, tree: CallTree, deadline: float) -> None:
        self._scope, self._tree, self._deadline = scope, tree, deadline
        self._narrowed: Deferred | None = None

    def __enter__(self) -> None:
        tree = self._tree
        enclosing = tree.statement_bounds[-1] if tree.statement_bounds else self._scope.deadline
        if self._deadline >= enclosing - 0.05:
            return
        tree.statement_bounds.append(self._deadline)
        self._enclosing = enclosing
        self._narrowed = _set_statement_timeout(self._scope, self._deadline)

    def __exit__(self, *exc_info: object) -> None:
        narrowed = self._narrowed
        if narrowed is None:
            return
        self._tree.statement_bounds.pop()
        # Never sent (no statement ran since): nothing to reset. After a failed statement (a graphql()
        # with check=True runs without a savepoint of its own) the call's savepoint rolls back, which
        # restores the enclosing statement_timeout anyway.
        if not undefer(self._scope.conn, narrowed) and not _in_failed_transaction(self._scope):
            _set_statement_timeout(self._scope, self._enclosing)


def _in_failed_transaction(scope: Scope) -> bool:
    return scope.conn.info.transaction_status == TransactionStatus.INERROR


def _set_statement_timeout(scope: Scope, deadline: float) -> Deferred:
    # The milliseconds left now: sent a little later, the bound ends a little after the deadline, which
    # the deadline checks before every statement (`_DeadlineCursor`) and the sandbox's own cover.
    remaining_ms = max(1, int((deadline - time.monotonic()) * 1000))
    # SET LOCAL, not set_config(…, true), which does the same: a utility statement is not planned, and a
    # deferred statement is parsed anew each time (set_config's SELECT was planned twice a call, ~29 µs
    # of PostgreSQL's CPU each). The value is an int, written in.
    return defer(scope.conn, f"SET LOCAL statement_timeout = {remaining_ms}")
