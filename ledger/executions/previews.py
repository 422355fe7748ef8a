"""A call run in a savepoint that is then rolled back, so that a person or a model sees what it would do:
`{status, output | error, children: [{actionId, status}]}`. Its records are kept, marked `rolledBack`, under
whoever asked (an MCP `invoke` with `preview`, a proposal's preview of a planned action)."""

from __future__ import annotations

from typing import Any, Callable

import psycopg

from ..scope import Scope
from .records import PendingExecution
from .tree import CallTree


def rolled_back(scope: Scope, tree: CallTree, make_call: Callable[[], PendingExecution]) -> dict[str, Any]:
    """Run `make_call` (one call of `tree`) in a savepoint rolled back after it: its preview."""
    first = len(tree.pending)
    with scope.savepoint():
        call = make_call()
        raise psycopg.Rollback()
    made = tree.pending[first:]
    for kept in made:
        kept.rolled_back = True
    preview: dict[str, Any] = {"status": call.status}
    if call.status == "SUCCEEDED":
        preview["output"] = call.output
    else:
        preview["error"] = call.error
    preview["children"] = [{"actionId": str(p.action_id), "status": p.status} for p in made
                           if p.parent_execution_id == call.execution_id]
    return preview
