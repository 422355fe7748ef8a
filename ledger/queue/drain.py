"""Started work that a disable or delete waits for."""

from __future__ import annotations

import uuid
from typing import Any


def has_unfinished_starts(scope: Any, action_id: uuid.UUID) -> bool:
    row = scope.one(
        "SELECT 1 FROM executions WHERE tenant_id = %s AND action_id = %s AND started"
        " AND status IN ('QUEUED', 'RUNNING') LIMIT 1",
        (scope.tenant_id, action_id),
    )
    return row is not None
