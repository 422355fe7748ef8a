"""An action's pending disable or delete, and the started work it waits for."""

from __future__ import annotations

import uuid

from ..scope import Scope


def has_unfinished_starts(scope: Scope, action_id: uuid.UUID) -> bool:
    row = scope.one(
        "SELECT 1 FROM executions WHERE tenant_id = %s AND action_id = %s AND started"
        " AND status IN ('QUEUED', 'RUNNING') LIMIT 1",
        (scope.tenant_id, action_id),
    )
    return row is not None


def settle_pending_lifecycle(scope: Scope, action_id: uuid.UUID) -> None:
    """Apply a pending disable or delete once the action's started executions have drained."""
    row = scope.one("SELECT pending FROM actions WHERE tenant_id = %s AND id = %s FOR UPDATE",
                    (scope.tenant_id, action_id))
    if row is None or row["pending"] is None or has_unfinished_starts(scope, action_id):
        return
    status = "DISABLED" if row["pending"] == "DISABLE" else "DELETED"
    scope.conn.execute("UPDATE actions SET status = %s, pending = NULL, updated_at = now()"
                       " WHERE tenant_id = %s AND id = %s", (status, scope.tenant_id, action_id))
