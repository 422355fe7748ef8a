"""Sessions of session tools (`financial.Session`, `financial.SessionInput`): reads and close.

Calling a session tool (find-or-create in its own transaction, SessionInput records) is not built
yet; such calls are refused with `not_implemented` rather than run without their session.
"""

from __future__ import annotations

import uuid

from ..errors import LedgerError, NotFound
from ..scope import Scope

SESSION = "financial.Session.document"
SESSION_INPUT_INDEX = "financial.SessionInput.indexes.by_session"
_COLUMNS = "tenant_id, id, action_id, client_id, input, closed, created_at"


def require_session_support(record: dict) -> None:
    raise LedgerError(f"{record['name']!r} is a session tool, and calls with sessions are not supported yet",
                      code="not_implemented", hint="call a tool without `session: true`")


def get_session(scope: Scope, session_id: uuid.UUID) -> dict | None:
    row = scope.one(f"SELECT {_COLUMNS} FROM sessions WHERE tenant_id = %s AND id = %s", (scope.tenant_id, session_id))
    if row is not None:
        scope.require("SELECT", SESSION, row)
    return row


def inputs_of(scope: Scope, session_id: uuid.UUID) -> list[dict]:
    scope.require("SELECT", SESSION_INPUT_INDEX, index=True)
    rows = scope.all(
        "SELECT tenant_id, session_id, execution_id, action_id, client_id, input, created_at FROM session_inputs"
        " WHERE tenant_id = %s AND session_id = %s ORDER BY seq", (scope.tenant_id, session_id))
    return scope.visible("financial.SessionInput.document", rows)


def close_session(scope: Scope, session_id: uuid.UUID) -> dict:
    row = scope.one(f"SELECT {_COLUMNS} FROM sessions WHERE tenant_id = %s AND id = %s FOR UPDATE",
                    (scope.tenant_id, session_id))
    if row is None:
        raise NotFound(f"no session {session_id}", hint="check the id")
    scope.require("UPDATE", SESSION, {**row, "closed": True})
    return scope.one(f"UPDATE sessions SET closed = true WHERE tenant_id = %s AND id = %s RETURNING {_COLUMNS}",
                     (scope.tenant_id, session_id))
