"""A tool's database statements stop at its own deadline (PostgreSQL's statement_timeout).

Narrowed with one SET LOCAL, and only for a tool whose responseTimeout ends before the enclosing
bound (the request's deadline, or an enclosing tool's narrower one). The narrowing and its reset are
deferred (`ledger.db.pool.defer`): each goes in the round trip of the next statement, and a program that
makes no statement sends neither.
"""

from __future__ import annotations

import contextlib
import time
from typing import Iterator

from psycopg.pq import TransactionStatus

from ..db.pool import Deferred, defer, undefer
from ..scope import Scope
from .tree import CallTree


@contextlib.contextmanager
def statements_bounded_by(scope: Scope, tree: CallTree, deadline: float) -> Iterator[None]:
    """Within the block, the transaction's statements stop at `deadline` when it comes first."""
    enclosing = tree.statement_bounds[-1] if tree.statement_bounds else scope.deadline
    if deadline >= enclosing - 0.05:
        yield
        return
    tree.statement_bounds.append(deadline)
    narrowed = _set_statement_timeout(scope, deadline)
    try:
        yield
    finally:
        tree.statement_bounds.pop()
        # Never sent (no statement ran since): nothing to reset. After a failed statement (a graphql()
        # with check=True runs without a savepoint of its own) the call's savepoint rolls back, which
        # restores the enclosing statement_timeout anyway.
        if not undefer(scope.conn, narrowed) and not _in_failed_transaction(scope):
            _set_statement_timeout(scope, enclosing)


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
