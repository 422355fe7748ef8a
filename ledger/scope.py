"""What every service receives: the transaction, the caller, and the policy chain that guards both.

Services read and write their records only through a `Scope`, and authorize each record through
`scope.require` (one record) or `scope.visible` (a listing). The chain grows one layer per tool on the
call stack; a denial inside a running tool is reported as `action_permission_denied`.
"""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import psycopg

from .db.prepared import PreparedRead, fetch_all, fetch_one, statement_of
from .policy.principal import Principal
from .errors import PermissionDenied
from .policy.chain import Chain

if TYPE_CHECKING:
    from .services import Services


@dataclass(frozen=True)
class ToolFrame:
    """A running tool on the call stack, as policies (`action`) and writes (`executionId`) see it."""

    action_id: uuid.UUID
    version: int
    name: str
    execution_id: uuid.UUID

    def as_cel(self) -> dict[str, Any]:
        return {"id": str(self.action_id), "version": self.version, "name": self.name}


@dataclass
class Scope:
    conn: psycopg.Connection
    principal: Principal
    chain: Chain
    services: "Services"
    deadline: float
    frames: tuple[ToolFrame, ...] = ()
    # State shared by every scope derived from one request (e.g. the running call tree).
    request_state: dict = field(default_factory=dict)
    # A dry run (`Ledger-Dry-Run: true`) rolls the request back: work that would commit on a connection of
    # its own (a session) stays in the request's transaction instead.
    dry_run: bool = False
    # The trigger depth of what this scope writes for (DESIGN 15): 0 for a client's request, the run's
    # own depth inside a trigger-started run; a trigger fired by a write here runs one level deeper.
    trigger_depth: int = 0

    @property
    def tenant_id(self) -> uuid.UUID:
        return self.principal.tenant_id

    @property
    def innermost_tool(self) -> ToolFrame | None:
        return self.frames[-1] if self.frames else None

    @property
    def writing_execution_id(self) -> uuid.UUID | None:
        """The execution a write is attributed to: the innermost tool's, never a native child's."""
        frame = self.innermost_tool
        return frame.execution_id if frame else None

    def within_tool(self, frame: ToolFrame, chain: Chain) -> "Scope":
        return replace(self, frames=self.frames + (frame,), chain=chain)

    def time_left(self) -> float:
        return self.deadline - time.monotonic()

    # ------------------------------------------------------------------ authorization

    def require(self, operation: str, resource: str, document: dict | None = None, *, index: bool = False) -> None:
        """Raise PermissionDenied unless every layer allows `operation` on `resource`."""
        if self.chain.allows_whatever_the_inputs(operation, resource):
            return  # the same decision, without building the document and the principal CEL would see
        frame = self.innermost_tool
        try:
            # Made only if an assertion needs them: a decision remembered by what its assertions read
            # needs neither the principal's nor the action's text, and reads the document as it is.
            self.chain.check(
                operation,
                resource,
                principal=self.principal.as_cel,
                document=None if index else document or {},
                document_view=as_document,
                has_document=not index,
                action=frame.as_cel if frame else None,
            )
        except PermissionDenied as denied:
            if self.frames:
                denied.code = "action_permission_denied"
            raise

    def allows(self, operation: str, resource: str, document: dict) -> bool:
        try:
            self.require(operation, resource, document)
        except PermissionDenied:
            return False
        return True

    def visible(self, resource: str, rows: Iterable[dict], operation: str = "SELECT") -> list[dict]:
        """The rows of a listing the chain lets the reader see; the others are silently left out."""
        return [row for row in rows if self.allows(operation, resource, row)]

    # ------------------------------------------------------------------ SQL helpers

    def one(self, sql: str, params: Any = None) -> dict | None:
        """The statement's first row, or None; once psycopg has prepared the statement on this connection,
        run without a cursor (db/prepared.py), with the same row or the same error."""
        if type(params) is tuple and type(sql) is str:
            statement = statement_of(sql)
            if statement is not None:
                return fetch_one(self.conn, statement, params)
        return self.conn.execute(sql, params).fetchone()

    def read_one(self, statement: PreparedRead, params: tuple) -> dict | None:
        """`one` for a hot read of fixed text, on its prepared statement without a cursor (db/prepared.py)."""
        return fetch_one(self.conn, statement, params)

    def all(self, sql: str, params: Any = None) -> list[dict]:
        """The statement's rows, as `one` runs it."""
        if type(params) is tuple and type(sql) is str:
            statement = statement_of(sql)
            if statement is not None:
                return fetch_all(self.conn, statement, params)
        return self.conn.execute(sql, params).fetchall()

    def read_all(self, statement: PreparedRead, params: tuple) -> list[dict]:
        """`all` for a hot statement of fixed text, on its prepared statement without a cursor (db/prepared.py)."""
        return fetch_all(self.conn, statement, params)

    def savepoint(self) -> Iterator[Any]:
        return self.conn.transaction()


def as_document(row: dict) -> dict:
    """A record as CEL sees it: column names, UUIDs as canonical strings, times as RFC 3339."""
    return {key: value if type(value) in _AS_IS else _cel_value(value) for key, value in row.items()}


# Values CEL sees unchanged (exact types: a subclass takes the general path, which returns it unchanged too).
_AS_IS = frozenset({str, int, bool, float, type(None)})


def _cel_value(value: Any) -> Any:
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: _cel_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_cel_value(v) for v in value]
    return value
