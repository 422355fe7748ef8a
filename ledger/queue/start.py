"""startAction and cancelExecution: the queued execution commits or rolls back with the request."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from ..actions.lifecycle import settle_pending_lifecycle
from ..actions.schemas import first_error
from ..errors import LedgerError, NotFound, Retryable, StartNotAllowed
from ..executions.admission import invocable_record
from ..executions.invoke import ExecutionIdConflict
from ..executions.records import (EXECUTION, EXECUTION_COLUMNS, execution_document, lock_and_load_execution,
                                  raise_execution_event, record_of, require_new_execution)
from ..values import require_storable_input, same_json, value_problem
from ..scope import Scope

QUEUE_CHANNEL = "ledger_queue"


class ActionInputInvalid(LedgerError):
    code = "action_input_invalid"


def start_action(scope: Scope, action_id: uuid.UUID, execution_id: uuid.UUID, version: int | None, input: Any,
                 run_at: datetime.datetime | None, *, started_by: uuid.UUID | None = None,
                 mcp_server_id: uuid.UUID | None = None, planned_action_id: uuid.UUID | None = None) -> dict:
    """`started_by`: the execution that starts this one (an MCP server's `invoke`, the proposal of a
    confirmed plan), which the caller was authorized to create: the started row, whose id the ledger
    derived from it, is the system's to write. `mcp_server_id`: the server whose layer every attempt keeps
    (DESIGN 12). `planned_action_id`: the confirmed plan whose chain every attempt runs under (DESIGN 14)."""
    if scope.frames:
        raise StartNotAllowed("a start cannot be made from inside an execution",
                              hint="call the tool with tools.<name>() or invokeAction instead")
    require_storable_input(input)
    existing, _ = lock_and_load_execution(scope, execution_id)
    if existing is not None:
        scope.require("SELECT", EXECUTION, execution_document(existing))
        if (existing["action_id"] != action_id or not existing["started"] or not same_json(existing["input"], input)
                or (version is not None and version != existing["action_version"])):
            raise ExecutionIdConflict(f"executionId {execution_id} was already used for another call",
                                      hint="use a new executionId for a new start")
        return record_of(existing)
    record = invocable_record(scope, action_id, version)
    if record["tool"].get("session"):
        raise StartNotAllowed(f"{record['name']!r} has sessions and cannot be started",
                              hint="call it with invokeAction, which finds or creates its session")
    problem = value_problem(input)
    if problem:
        raise ActionInputInvalid(f"the input at {problem[0]}: {problem[1]}", hint=f"fix the input at {problem[0]}")
    error = first_error(record["tool"]["inputSchema"], input)
    if error:
        raise ActionInputInvalid(f"the input does not match the tool's inputSchema: {error[1]}",
                                 hint=f"fix the input at {error[0]}")
    if started_by is None:
        require_new_execution(scope, execution_id, action_id, record["version"], status="QUEUED", started=True)
    event = {"eventType": "action.started", "data": input, "recordType": None, "recordId": None}
    try:
        created = _insert_queued(scope, execution_id, action_id, record["version"], run_at, event, input,
                                 started_by, mcp_server_id, planned_action_id)
    except psycopg.errors.UniqueViolation as exc:
        # Another request started this executionId and committed after this transaction's snapshot, so
        # the lookup above could not see it. A retry, in a new transaction, answers the recorded one.
        retry = Retryable("another request started this executionId at the same time",
                          hint="retry: the repeat returns the recorded execution")
        retry.race = True
        raise retry from exc
    scope.conn.execute(
        "INSERT INTO execution_queue (tenant_id, execution_id, run_at) VALUES (%s, %s, coalesce(%s, now()))",
        (scope.tenant_id, execution_id, run_at),
    )
    # Delivered when (and only if) the request commits.
    scope.conn.execute("SELECT pg_notify(%s, '')", (QUEUE_CHANNEL,))
    raise_execution_event(scope, "inserted", created)
    return record_of(created, [])


def _insert_queued(scope: Scope, execution_id: uuid.UUID, action_id: uuid.UUID, version: int,
                   run_at: datetime.datetime | None, event: dict, input: Any, started_by: uuid.UUID | None,
                   mcp_server_id: uuid.UUID | None, planned_action_id: uuid.UUID | None) -> dict:
    return scope.one(
        "INSERT INTO executions (tenant_id, id, action_id, action_version, status, root_execution_id, depth,"
        " started, client_id, client_claims, run_at, event, input, started_by_execution_id, mcp_server_id,"
        " trigger_depth, planned_action_id)"
        " VALUES (%s, %s, %s, %s, 'QUEUED', %s, 0, true, %s, %s, coalesce(%s, now()), %s, %s, %s, %s, %s, %s)"
        f" RETURNING {EXECUTION_COLUMNS}",
        (scope.tenant_id, execution_id, action_id, version, execution_id, scope.principal.client_id,
         Jsonb(scope.principal.claims), run_at, Jsonb(event), Jsonb(input), started_by, mcp_server_id,
         scope.trigger_depth, planned_action_id),
    )


def cancel_execution(scope: Scope, execution_id: uuid.UUID) -> dict:
    row = scope.one(
        f"SELECT {EXECUTION_COLUMNS} FROM executions WHERE tenant_id = %s AND id = %s FOR UPDATE",
        (scope.tenant_id, execution_id),
    )
    if row is None:
        raise NotFound(f"no execution {execution_id}", hint="check the id")
    scope.require("UPDATE", EXECUTION, execution_document({**row, "status": "CANCELLED"}))
    if row["status"] in ("SUCCEEDED", "FAILED", "CANCELLED"):
        if row["status"] == "CANCELLED":
            return record_of(row)
        raise LedgerError(f"execution {execution_id} already finished ({row['status']})", code="execution_finished",
                          hint="only queued or running executions can be cancelled")
    if not row["started"]:
        raise LedgerError("only started executions can be cancelled; a call finishes within its request",
                          code="execution_finished")
    running = scope.one(
        "SELECT l.lease_token FROM execution_queue q JOIN execution_leases l ON l.lease_token = q.lease_token"
        " WHERE q.tenant_id = %s AND q.execution_id = %s AND l.expires_at >= clock_timestamp()",
        (scope.tenant_id, execution_id),
    )
    if running is not None:
        # Running: the worker stops at its next check and rolls its writes back. Its heartbeat reads the
        # lease's flag; the queue row's makes the attempt's fence fail (queue/claims.py), so that it
        # cannot commit past the cancel, and tells its next run not to start.
        with scope.conn.pipeline():
            scope.conn.execute("UPDATE execution_leases SET cancel_requested = true WHERE lease_token = %s",
                               (running["lease_token"],))
            scope.conn.execute("UPDATE execution_queue SET cancel_requested = true"
                               " WHERE tenant_id = %s AND execution_id = %s", (scope.tenant_id, execution_id))
        return record_of(row)
    scope.conn.execute("DELETE FROM execution_leases WHERE tenant_id = %s AND execution_id = %s",
                       (scope.tenant_id, execution_id))
    scope.conn.execute("DELETE FROM execution_queue WHERE tenant_id = %s AND execution_id = %s",
                       (scope.tenant_id, execution_id))
    updated = scope.one(
        "UPDATE executions SET status = 'CANCELLED', updated_at = now() WHERE tenant_id = %s AND id = %s"
        f" RETURNING {EXECUTION_COLUMNS}",
        (scope.tenant_id, execution_id),
    )
    raise_execution_event(scope, "updated", updated, _cancelled_error(), previous_status=row["status"])
    settle_pending_lifecycle(scope, row["action_id"])
    return record_of(updated)


def _cancelled_error() -> dict:
    return {"code": "cancelled", "message": "the execution was cancelled", "hint": None}
