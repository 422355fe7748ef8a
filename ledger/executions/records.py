"""Execution records: reads (authorized per record) and the buffered writer of a call tree.

A call tree of 1,000 native calls must not cost 1,000 INSERT round trips, so rows are buffered while the
tree runs and written together once the top-level call has finished, in one statement (`flush`), inside
the same transaction.
"""

from __future__ import annotations

import datetime
import itertools
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

from psycopg.types.json import Jsonb

from ..db.paging import page_visible
from ..metrics import calls_finished, json_size
from ..scope import Scope
from ..values import storable_json, storable_json_around

EXECUTION = "financial.ActionExecution.document"
EXECUTION_INDEX = "financial.ActionExecution.indexes.children"

# The columns of an execution row that its record is made of (`record_of`), in every read and RETURNING.
EXECUTION_COLUMNS = ("tenant_id, id, action_id, action_version, status, parent_execution_id, root_execution_id,"
            " call_sequence, depth, attempts, started, started_by_execution_id, client_id, event, input,"
            " session_id, created_at, parent_attempt, rolled_back, mcp_server_id, trigger_id, trigger_depth")

EXECUTION_LISTING_INDEX = "financial.ActionExecution.indexes.all"
EXECUTION_RECORD_TYPE = "financial.ActionExecution"


def execution_document(row: dict) -> dict:
    """The execution as policies see it: its columns, with `execution_id` beside `id`."""
    doc = {k: row.get(k) for k in ("tenant_id", "id", "action_id", "action_version", "status",
                                   "parent_execution_id", "root_execution_id", "depth", "client_id",
                                   "session_id", "started")}
    doc["execution_id"] = row.get("id")
    return doc


_EXECUTION_NAMES = tuple(c.strip() for c in EXECUTION_COLUMNS.split(","))
_PREFIXED_EXECUTION = ", ".join(f"e.{c} AS e_{c}" for c in _EXECUTION_NAMES)


def lock_and_load_execution(scope: Scope, execution_id: uuid.UUID,
                            beside: tuple[str, tuple] | None = None) -> tuple[dict | None, dict | None]:
    """Serialize the requests that use one executionId until this transaction ends (so that two of them
    never both find it unused and run it), then `load_execution`, and the row of `beside` (a statement
    returning at most one row, whose columns must not start with `e_`; None: nothing beside), in one
    statement: (the execution or None, that row or None). One statement does what two would: at REPEATABLE READ each
    statement reads the transaction's snapshot, taken before the lock was, so a lookup after the lock sees
    the same rows."""
    columns, joined, params = _PREFIXED_EXECUTION, "", ()
    if beside is not None:
        columns, joined, params = f"{columns}, b.*", f" LEFT JOIN ({beside[0]}) AS b ON true", beside[1]
    row = scope.one(
        f"SELECT {columns} FROM (SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))) AS locked"
        f" LEFT JOIN executions e ON e.tenant_id = %s AND e.id = %s{joined}",
        (f"{scope.tenant_id}:{execution_id}", scope.tenant_id, execution_id, *params),
    )
    # The row's columns in the SELECT's order: the execution's first, then `beside`'s (no names compared).
    execution = dict(zip(_EXECUTION_NAMES, row.values()))
    other = dict(itertools.islice(row.items(), len(_EXECUTION_NAMES), None)) if beside is not None else {}
    return (execution if execution["id"] is not None else None,
            other if any(value is not None for value in other.values()) else None)


def require_new_execution(scope: Scope, execution_id: uuid.UUID, action_id: uuid.UUID, version: int, *,
                          status: str, started: bool) -> None:
    """A direct caller needs SELECT and INSERT on the execution it is about to create."""
    document = execution_document({
        "tenant_id": scope.tenant_id, "id": execution_id, "action_id": action_id, "action_version": version,
        "status": status, "parent_execution_id": None, "root_execution_id": execution_id, "depth": 0,
        "client_id": scope.principal.client_id, "session_id": None, "started": started,
    })
    scope.require("SELECT", EXECUTION, document)
    scope.require("INSERT", EXECUTION, document)


def _record(row: dict, invocations: list[dict] | None = None) -> dict:
    return {
        "execution_id": row["id"], "action_id": row["action_id"], "action_version": row["action_version"],
        "status": row["status"], "parent_execution_id": row["parent_execution_id"],
        "root_execution_id": row["root_execution_id"], "call_sequence": row["call_sequence"],
        "depth": row["depth"], "attempts": row["attempts"], "started": row["started"],
        "started_by": row["started_by_execution_id"], "event": row["event"], "input": row["input"],
        "session_id": row["session_id"], "created_at": row["created_at"], "client_id": row["client_id"],
        # Rows read without the column (a start, a cancel) are top-level executions: never rolled back.
        "rolled_back": bool(row.get("rolled_back")), "mcp_server_id": row.get("mcp_server_id"),
        "trigger_id": row.get("trigger_id"), "trigger_depth": row.get("trigger_depth") or 0,
        "invocations": invocations,
    }


def execution_event_record(row: dict, error: dict | None = None) -> dict:
    """A top-level execution as a record event carries it (DESIGN 15): its columns, valued as policies see
    them, with its input and its latest attempt's error (null while it has none)."""
    record = execution_document(row)
    for key in ("attempts", "started_by_execution_id", "mcp_server_id", "trigger_id", "trigger_depth", "input",
                "created_at"):
        record[key] = row.get(key)
    record["error"] = error
    return record


def raise_execution_event(scope: Scope, event_type: str, row: dict, error: dict | None = None,
                          previous_status: str | None = None) -> None:
    """`financial.ActionExecution.inserted` or `.updated` of a top-level execution (children raise none).
    An update's `previous` is the record with its status before the change."""
    record = execution_event_record(row, error)
    previous = None if previous_status is None else {**record, "status": previous_status}
    # The execution's own trigger depth: a run that reacts to it is one level deeper.
    events_scope = scope if scope.trigger_depth == record["trigger_depth"] else replace(
        scope, trigger_depth=record["trigger_depth"])
    scope.services.record_events.raised(events_scope, f"financial.ActionExecution.{event_type}",
                                        EXECUTION_RECORD_TYPE, record, previous)


def list_executions(scope: Scope, where: dict, first: int, after: str | None) -> list[dict]:
    """Executions in (createdAt, id) order under `financial.ActionExecution.indexes.all`: top-level ones, or
    the calls beneath `parentExecutionId`; narrowed by action, trigger and status; only those the reader
    may SELECT."""
    scope.require("SELECT", EXECUTION_LISTING_INDEX, index=True)
    clauses, params = [], []
    if where.get("parent_execution_id") is None:
        clauses.append("parent_execution_id IS NULL")
    else:
        clauses.append("parent_execution_id = %s")
        params.append(where["parent_execution_id"])
    for column in ("action_id", "trigger_id", "status"):
        if where.get(column) is not None:
            clauses.append(f"{column} = %s")
            params.append(where[column])
    rows = page_visible(scope, EXECUTION, "executions", EXECUTION_COLUMNS, first, after,
                        where=" AND ".join(clauses), params=tuple(params), document=execution_document)
    return [_record(r) for r in rows]


def load_execution(scope: Scope, execution_id: uuid.UUID) -> dict | None:
    return scope.one(f"SELECT {EXECUTION_COLUMNS} FROM executions WHERE tenant_id = %s AND id = %s",
                     (scope.tenant_id, execution_id))


def get_execution(scope: Scope, execution_id: uuid.UUID) -> dict | None:
    row = load_execution(scope, execution_id)
    if row is None:
        return None
    scope.require("SELECT", EXECUTION, execution_document(row))
    return _record(row)


def record_of(row: dict, invocations: list[dict] | None = None) -> dict:
    return _record(row, invocations)


def children_of(scope: Scope, execution_id: uuid.UUID, attempt: int) -> list[dict]:
    """The calls that attempt `attempt` of the execution made, in call order: a listing, under its index."""
    scope.require("SELECT", EXECUTION_INDEX, index=True)
    rows = scope.all(
        f"SELECT {EXECUTION_COLUMNS} FROM executions WHERE tenant_id = %s AND parent_execution_id = %s"
        " AND parent_attempt = %s ORDER BY call_sequence, created_at, id",
        (scope.tenant_id, execution_id, attempt),
    )
    return [_record(r) for r in rows if scope.allows("SELECT", EXECUTION, execution_document(r))]


def invocations_of(scope: Scope, execution_id: uuid.UUID) -> list[dict]:
    return scope.all(
        "SELECT attempt, input, output, error, tools, logs, started_at, finished_at, duration_ms, output_bytes,"
        " usage FROM invocations"
        " WHERE tenant_id = %s AND execution_id = %s ORDER BY attempt",
        (scope.tenant_id, execution_id),
    )


# ---------------------------------------------------------------------------- buffered writes


@dataclass
class PendingExecution:
    execution_id: uuid.UUID
    action_id: uuid.UUID
    action_version: int
    status: str
    parent_execution_id: uuid.UUID | None
    root_execution_id: uuid.UUID
    call_sequence: int | None
    depth: int
    client_id: uuid.UUID
    event: dict
    input: Any
    session_id: uuid.UUID | None = None
    attempt: int = 1
    # The attempt of the parent that made this call (None for a top-level execution).
    parent_attempt: int | None = None
    # The call whose savepoint enclosed this one, when not its parent: a nested invokeAction runs inside
    # the graphql() call that made it, and goes with it when that call fails.
    enclosing_execution_id: uuid.UUID | None = None
    # Set when the tree is written: recorded beneath a call that failed, so none of its writes remain.
    rolled_back: bool = False
    # The MCP server the call was made through (DESIGN 12), None for a call not made through one.
    mcp_server_id: uuid.UUID | None = None
    output: Any = None
    error: dict | None = None
    tools: list[dict] = field(default_factory=list)
    logs: list[str] = field(default_factory=list)
    started_at: datetime.datetime | None = None
    finished_at: datetime.datetime | None = None
    output_bytes: int | None = None
    # An agent's turn: {inputTokens, outputTokens, modelCalls} summed over its model calls (DESIGN 13).
    usage: dict | None = None
    action_name: str | None = None  # for metrics and logs
    action_kind: str | None = None  # for metrics: the kind is ours to name, unlike the action's name
    # Set by the code that built this call's event, input and output itself around values it was given
    # (a graphql() call: its document, variables, operation name, answer): (that event, that input, that
    # output, those values), so that `_given_values` walks only the values while the call still holds
    # those very objects. None: every part is walked.
    built: tuple | None = None
    # {inputTokens, outputTokens, modelCalls} of the model calls this call made itself (a model tool, an
    # agent); None for a call that made none.
    usage: dict | None = None

    @property
    def duration_ms(self) -> float | None:
        if self.started_at is None or self.finished_at is None:
            return None
        return (self.finished_at - self.started_at).total_seconds() * 1000

    def result_bytes(self) -> int:
        """The size of the call's result: its output's JSON, or its error's when it has no output."""
        if self.output_bytes is None:
            self.output_bytes = json_size(self.output if self.output is not None or self.error is None else self.error)
        return self.output_bytes

    def row(self, tenant_id: uuid.UUID, created_at: datetime.datetime, trigger_depth: int) -> dict:
        """The execution's row as it is written (its columns)."""
        return {"tenant_id": tenant_id, "id": self.execution_id, "action_id": self.action_id,
                "action_version": self.action_version, "status": self.status,
                "parent_execution_id": self.parent_execution_id, "root_execution_id": self.root_execution_id,
                "depth": self.depth, "attempts": self.attempt, "client_id": self.client_id,
                "session_id": self.session_id, "started": False, "started_by_execution_id": None,
                "mcp_server_id": self.mcp_server_id, "trigger_id": None, "trigger_depth": trigger_depth,
                "input": self.input, "created_at": created_at}

    def as_record(self, created_at: datetime.datetime, trigger_depth: int) -> dict:
        """The call as invokeAction answers it; `trigger_depth` is the tree's, which every row of it is
        written with (flush), so that the answer inside a trigger's run says what is stored."""
        invocation = {"attempt": self.attempt, "input": self.input, "output": self.output, "error": self.error,
                      "tools": self.tools, "logs": self.logs, "started_at": self.started_at,
                      "finished_at": self.finished_at, "duration_ms": self.duration_ms,
                      "output_bytes": self.result_bytes() if self.status != "RUNNING" else None,
                      "usage": self.usage}
        return record_of({
            "id": self.execution_id, "action_id": self.action_id, "action_version": self.action_version,
            "status": self.status, "parent_execution_id": self.parent_execution_id,
            "root_execution_id": self.root_execution_id, "call_sequence": self.call_sequence,
            "depth": self.depth, "attempts": self.attempt, "started": False, "started_by_execution_id": None,
            "event": self.event, "input": self.input, "session_id": self.session_id, "created_at": created_at,
            "client_id": self.client_id, "rolled_back": self.rolled_back, "mcp_server_id": self.mcp_server_id,
            "trigger_depth": trigger_depth,
        }, [invocation])


def record_json(value: Any) -> Jsonb:
    """A value of an execution record: always storable (a NUL character is recorded as U+FFFD)."""
    return Jsonb(value, dumps=storable_json)


def mark_rolled_back(pending: list[PendingExecution], above: tuple[PendingExecution, ...] = ()) -> None:
    """Mark every call recorded beneath a call that failed (`above`: its callers not written here).

    A failed call's savepoint took everything beneath it, however those calls ended. The failed call
    itself keeps rolledBack false: its status already says that it left nothing.
    """
    by_id = {p.execution_id: p for p in (*above, *pending)}

    def enclosing(call: PendingExecution) -> PendingExecution | None:
        return by_id.get(call.enclosing_execution_id or call.parent_execution_id)

    for call in pending:
        outer = enclosing(call)
        while outer is not None and not call.rolled_back:
            call.rolled_back = outer.status == "FAILED"
            outer = enclosing(outer)


# The tree's rows: one JSON array per call holding its execution's and its invocation's columns in this
# order, read by position (`x->n`, `x->>n`), so that no row writes, and PostgreSQL looks up, 25 keys (an
# object per row cost PostgreSQL ~30% more CPU for a tree of 1,000 reads). `jsonb` is a JSON value kept as
# it is (a JSON null stays the jsonb null it was); `jsonb?` one whose absence is written as a JSON null
# and stored as SQL NULL (an error, usage).
_ROW_COLUMNS = (
    ("id", "uuid"), ("action_id", "uuid"), ("action_version", "int"), ("status", "text"),
    ("parent_execution_id", "uuid"), ("root_execution_id", "uuid"), ("call_sequence", "int"), ("depth", "int"),
    ("attempts", "int"), ("client_id", "uuid"), ("event", "jsonb"), ("input", "jsonb"), ("session_id", "uuid"),
    ("parent_attempt", "int"), ("rolled_back", "bool"), ("mcp_server_id", "uuid"), ("output", "jsonb"),
    ("error", "jsonb?"), ("tools", "jsonb"), ("logs", "jsonb"), ("started_at", "timestamptz"),
    ("finished_at", "timestamptz"), ("duration_ms", "float8"), ("output_bytes", "int"), ("usage", "jsonb?"),
)


def _read_column(index: int, name: str, kind: str) -> str:
    if kind == "jsonb":
        return f"x->{index} AS {name}"
    if kind == "jsonb?":
        return f"NULLIF(x->{index}, 'null') AS {name}"
    if kind == "text":
        return f"x->>{index} AS {name}"
    return f"(x->>{index})::{kind} AS {name}"


_ROWS = ("SELECT " + ", ".join(_read_column(index, *column) for index, column in enumerate(_ROW_COLUMNS))
         + " FROM jsonb_array_elements(%s::jsonb) AS x")
_FLUSH = (
    f"WITH r AS MATERIALIZED ({_ROWS}),"
    " e AS (INSERT INTO executions (tenant_id, id, action_id, action_version, status, parent_execution_id,"
    " root_execution_id, call_sequence, depth, attempts, client_id, event, input, session_id, parent_attempt,"
    " rolled_back, mcp_server_id, trigger_depth)"
    " SELECT %s, id, action_id, action_version, status, parent_execution_id, root_execution_id, call_sequence,"
    " depth, attempts, client_id, event, input, session_id, parent_attempt, rolled_back, mcp_server_id, %s"
    " FROM r),"
    " i AS (INSERT INTO invocations (tenant_id, execution_id, attempt, input, output, error, tools, logs,"
    " started_at, finished_at, duration_ms, output_bytes, usage)"
    " SELECT %s, id, attempts, input, output, error, tools, logs, started_at, finished_at,"
    " duration_ms, output_bytes, usage FROM r)"
    " SELECT now() AS now"
)

# Where a row holds UUIDs and where timestamps (see _rows).
_UUID_INDEXES = tuple(index for index, (_, kind) in enumerate(_ROW_COLUMNS) if kind == "uuid")
_TIME_INDEXES = tuple(index for index, (_, kind) in enumerate(_ROW_COLUMNS) if kind == "timestamptz")


def _rows(pending: list[PendingExecution]) -> list[list]:
    """The rows `_FLUSH` reads (_ROW_COLUMNS' order), their ids as UUIDs and their times as datetimes, as
    the calls hold them."""
    return [[
        p.execution_id, p.action_id, p.action_version, p.status, p.parent_execution_id, p.root_execution_id,
        p.call_sequence, p.depth, p.attempt, p.client_id, p.event, p.input, p.session_id, p.parent_attempt,
        p.rolled_back, p.mcp_server_id, p.output, p.error if p.error else None, p.tools, p.logs, p.started_at,
        p.finished_at, p.duration_ms, p.result_bytes(), p.usage if p.usage else None,
    ] for p in pending]


def _given_values(pending: list[PendingExecution]) -> list:
    """The values in the calls' rows that the calls were given or made (events, inputs, outputs, errors,
    tools, logs, usage), which alone may hold what orjson writes otherwise than json.dumps. A native call's
    input is its event's data (the same object): walked once, with the event. Of a call whose event, input
    and output were built around given values (`PendingExecution.built`), only those values: the dicts
    around them hold only strings and None besides (a graphql() child's walk was ~2/3 its envelopes)."""
    values: list = []
    for p in pending:
        built = p.built
        if built is not None and built[0] is p.event and built[1] is p.input and built[2] is p.output:
            values += built[3]
            values += (p.error, p.tools, p.logs, p.usage)
            continue
        values += (p.event, p.output, p.error, p.tools, p.logs, p.usage)
        if type(p.event) is not dict or p.event.get("data") is not p.input:
            values.append(p.input)
    return values


def _rows_json(pending: list[PendingExecution]) -> str:
    """The tree's rows as one JSON document (storable_json: a NUL or a NaN anywhere in it is recorded as
    each value alone would be). orjson writes the UUIDs and datetimes the records code put in the rows as
    str() and isoformat() would, in Rust, so a tree of 1,000 children converts none of them in Python and
    walks only what its calls were given; anything else writes them as text and takes storable_json."""
    rows = _rows(pending)
    text = storable_json_around(rows, _given_values(pending))
    if text is not None:
        return text
    for row in rows:
        for index in _UUID_INDEXES:
            if row[index] is not None:
                row[index] = str(row[index])
        for index in _TIME_INDEXES:
            if row[index] is not None:
                row[index] = row[index].isoformat()
    return storable_json(rows)


def flush(scope: Scope, pending: list[PendingExecution],
          above: tuple[PendingExecution, ...] = ()) -> datetime.datetime:
    """Write buffered executions and their invocations; returns their created_at.

    `above`: the tree's calls written elsewhere (a started execution's own row), which decide, with
    `pending`, what was rolled back. Every finished call of a tree passes here once: its metrics and its
    log line are taken here too.
    """
    if not pending:
        return scope.one("SELECT now() AS now")["now"]
    mark_rolled_back(pending, above)
    # One statement: both inserts and now(), over the rows sent as one JSON document, serialized once. A
    # call tree of 1,000 graphql() reads must not spend more writing its records than running its reads,
    # and a money call must not pay a pipeline (psycopg's machinery costs more client CPU than the round
    # trips it saves on a local socket) nor an array adapter per column.
    now = scope.one(_FLUSH, (_rows_json(pending), scope.tenant_id, scope.trigger_depth, scope.tenant_id))["now"]
    calls_finished(scope.tenant_id, pending)
    for call in pending:
        if call.parent_execution_id is None:
            # A top-level call is recorded finished: it raises `.inserted` only, with its final status.
            raise_execution_event(scope, "inserted", call.row(scope.tenant_id, now, scope.trigger_depth), call.error)
    return now
