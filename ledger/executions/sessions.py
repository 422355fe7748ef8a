"""Sessions of session tools (`financial.Session`, `financial.SessionInput`).

A call to a tool with `session: true` finds the caller's open session for the action, or creates one
whose `input` is this call's input. That happens in a short transaction of its own, on a separate
connection, before the call, so the session survives even when the call then fails. The call itself is
recorded as a SessionInput in the request's transaction.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

from psycopg.types.json import Jsonb

from ..errors import LedgerError, NotFound
from ..scope import Scope

SESSION = "financial.Session.document"
SESSION_INDEX = "financial.Session.indexes.by_client_action"
SESSION_INPUT = "financial.SessionInput.document"
SESSION_INPUT_INDEX = "financial.SessionInput.indexes.by_session"
_COLUMNS = "tenant_id, id, action_id, client_id, input, closed, created_at"


class SessionNotCallable(LedgerError):
    code = "action_not_callable"


def require_session_grants(scope: Scope) -> None:
    """The index grants a direct caller needs before any session work (documents are checked per row)."""
    for operation in ("SELECT", "INSERT"):
        scope.require(operation, SESSION_INDEX, index=True)
        scope.require(operation, SESSION_INPUT_INDEX, index=True)


def find_or_create(scope: Scope, action_id: uuid.UUID, session_id: uuid.UUID | None, input: Any) -> dict:
    """The session of this call, committed in its own transaction (in a dry run: in the request's, which
    rolls back, so that a dry run leaves no session behind)."""
    if scope.dry_run:
        with scope.savepoint():
            return _find_or_create(scope, action_id, session_id, input)
    with scope.services.db.transaction(scope.tenant_id, deadline=scope.deadline) as conn:
        return _find_or_create(replace(scope, conn=conn), action_id, session_id, input)


def _find_or_create(scope: Scope, action_id: uuid.UUID, session_id: uuid.UUID | None, input: Any) -> dict:
    if session_id is not None:
        row = scope.one(f"SELECT {_COLUMNS} FROM sessions WHERE tenant_id = %s AND id = %s", (scope.tenant_id, session_id))
        if row is None or row["client_id"] != scope.principal.client_id or row["action_id"] != action_id:
            raise SessionNotCallable(f"no session {session_id} of this client for this action",
                                     hint="omit sessionId to use (or start) your open session for the action")
        scope.require("SELECT", SESSION, row)
        if row["closed"]:
            raise SessionNotCallable(f"session {session_id} is closed",
                                     hint="omit sessionId to start a new session")
        return row
    row = scope.one(f"SELECT {_COLUMNS} FROM sessions WHERE tenant_id = %s AND client_id = %s AND action_id = %s"
                    " AND NOT closed", (scope.tenant_id, scope.principal.client_id, action_id))
    if row is not None:
        scope.require("SELECT", SESSION, row)
        return row
    new_id = uuid.uuid4()
    candidate = {"tenant_id": scope.tenant_id, "id": new_id, "action_id": action_id,
                 "client_id": scope.principal.client_id, "input": input, "closed": False}
    scope.require("INSERT", SESSION, candidate)
    scope.require("SELECT", SESSION, candidate)
    row = scope.one(
        f"INSERT INTO sessions (tenant_id, id, action_id, client_id, input) VALUES (%s, %s, %s, %s, %s)"
        f" ON CONFLICT (tenant_id, client_id, action_id) WHERE NOT closed DO NOTHING RETURNING {_COLUMNS}",
        (scope.tenant_id, new_id, action_id, scope.principal.client_id, Jsonb(input)),
    )
    if row is None:  # a concurrent call created it first
        row = scope.one(f"SELECT {_COLUMNS} FROM sessions WHERE tenant_id = %s AND client_id = %s"
                        " AND action_id = %s AND NOT closed", (scope.tenant_id, scope.principal.client_id, action_id))
    return row


def record_input(scope: Scope, session: dict, execution_id: uuid.UUID, input: Any, output: Any = None) -> None:
    """`output`: an agent turn's final answer (DESIGN 13), which the session's next turns see."""
    doc = {"tenant_id": scope.tenant_id, "session_id": session["id"], "action_id": session["action_id"],
           "client_id": scope.principal.client_id, "execution_id": execution_id, "input": input}
    scope.require("INSERT", SESSION_INPUT, doc)
    scope.require("SELECT", SESSION_INPUT, doc)
    scope.conn.execute(
        "INSERT INTO session_inputs (tenant_id, session_id, execution_id, action_id, client_id, input, output)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s)",
        (scope.tenant_id, session["id"], execution_id, session["action_id"], scope.principal.client_id, Jsonb(input),
         None if output is None else Jsonb(output)),
    )


def get_session(scope: Scope, session_id: uuid.UUID) -> dict | None:
    row = scope.one(f"SELECT {_COLUMNS} FROM sessions WHERE tenant_id = %s AND id = %s", (scope.tenant_id, session_id))
    if row is not None:
        scope.require("SELECT", SESSION, row)
    return row


def inputs_of(scope: Scope, session_id: uuid.UUID) -> list[dict]:
    scope.require("SELECT", SESSION_INPUT_INDEX, index=True)
    rows = scope.all(
        "SELECT tenant_id, session_id, execution_id, action_id, client_id, input, output, created_at"
        " FROM session_inputs WHERE tenant_id = %s AND session_id = %s ORDER BY seq", (scope.tenant_id, session_id))
    return scope.visible(SESSION_INPUT, rows)


def earlier_turns(scope: Scope, session_id: uuid.UUID, limit: int) -> list[dict]:
    """The latest `limit` turns of an agent's session that gave an answer, oldest first: {input, output}.

    The turn's own conversation, read for the model as the session's caller recorded it (the caller was
    authorized for the session's inputs when the call began); a turn that failed left no answer and is
    not replayed."""
    if limit <= 0:
        return []
    rows = scope.all(
        "SELECT input, output FROM (SELECT input, output, seq FROM session_inputs"
        " WHERE tenant_id = %s AND session_id = %s AND output IS NOT NULL ORDER BY seq DESC LIMIT %s) t"
        " ORDER BY seq", (scope.tenant_id, session_id, limit))
    return [{"input": r["input"], "output": r["output"]} for r in rows]


def close_session(scope: Scope, session_id: uuid.UUID) -> dict:
    row = scope.one(f"SELECT {_COLUMNS} FROM sessions WHERE tenant_id = %s AND id = %s FOR UPDATE",
                    (scope.tenant_id, session_id))
    if row is None:
        raise NotFound(f"no session {session_id}", hint="check the id")
    scope.require("UPDATE", SESSION, {**row, "closed": True})
    return scope.one(f"UPDATE sessions SET closed = true WHERE tenant_id = %s AND id = %s RETURNING {_COLUMNS}",
                     (scope.tenant_id, session_id))
