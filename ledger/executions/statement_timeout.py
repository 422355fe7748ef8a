"""A tool's database statements stop at its own deadline (PostgreSQL's statement_timeout).

Narrowed with one set_config, and only for a tool whose responseTimeout ends before the enclosing
bound (the request's deadline, or an enclosing tool's narrower one): most calls cost nothing here.
"""

from __future__ import annotations

import contextlib
import time
from typing import Iterator

from psycopg.pq import TransactionStatus

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
    _set_statement_timeout(scope, deadline)
    try:
        yield
    finally:
        tree.statement_bounds.pop()
        # After a failed statement (a graphql() with check=True runs without a savepoint of its own)
        # the call's savepoint rolls back, which restores the enclosing statement_timeout anyway.
        if not _in_failed_transaction(scope):
            _set_statement_timeout(scope, enclosing)


def _in_failed_transaction(scope: Scope) -> bool:
    return scope.conn.info.transaction_status == TransactionStatus.INERROR


def _set_statement_timeout(scope: Scope, deadline: float) -> None:
    remaining_ms = max(1, int((deadline - time.monotonic()) * 1000))
    scope.conn.execute("SELECT set_config('statement_timeout', %s, true)", (str(remaining_ms),))
