"""One attempt of a started execution (the claim marked it RUNNING: queue/claims.py), run in a transaction
of its own and finished in that same transaction (recorded, and retried with backoff, failed for good or
cancelled) while its claim still holds: one durable commit per attempt.

Its reads go to the server together, with the transaction's BEGIN (one round trip): the queue row, the
execution, the starter's client and the action; its last writes go with the fence (one more), and so does
the COMMIT when nothing follows them (no trigger on the status change, no lifecycle change to settle)."""

from __future__ import annotations

import datetime
import time
from dataclasses import replace
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from ..actions.lifecycle import settle_pending_lifecycle
from ..actions.mcp_servers import load_server_for_task, server_layer
from ..actions import natives
from ..actions.registry import HEADER_COLUMNS as _HEADER_COLUMNS, action_of_row, load_action
from ..actions.triggers import TRIGGERS_WRITTEN
from ..auth.clients import client_layer
from ..db.jsonb import loads_jsonb_text
from ..db.pool import commit_with
from ..db.prepared import PreparedRead, fetch_one
from ..db.retry import retry_lost_races
from ..executions.engine import run_call
from ..executions.plan_chain import RunRefused, confirmed_scope
from ..executions.plan_records import read_plan
from ..executions.records import EXECUTION_COLUMNS, flush, raise_execution_event
from ..executions.tree import CallTree, model_was_called
from ..logs import current_call, update_call
from ..metrics import call_finished, json_size, observe_tree
from ..policy.chain import Chain
from ..policy.principal import Principal
from ..scope import Scope
from ..values import storable_json
from .claims import Job, LeaseLost, fence, held, release, uuid_array
from .triggers import TRIGGERS_VERSION_COLUMN, remember_version

TERMINAL_CODES = {"action_input_invalid", "action_access_denied", "action_call_limit_exceeded",
                  "tool_not_declared", "cancelled"}
MAX_BACKOFF_SECONDS = 300.0


class Cancelled(Exception):
    """cancelExecution asked a running attempt to stop."""


def backoff_seconds(base: float, attempt: int) -> float:
    """Attempt n waits base * 2^(n-1), capped at five minutes."""
    return min(MAX_BACKOFF_SECONDS, base * (2 ** max(0, attempt - 1)))


# The attempt's reads, with the tenant and the statement_timeout set, in one statement in the pipeline of
# its BEGIN (`ledger_open_attempt`, migration 0019, given the tenant and the timeout by the pool as an
# opener): the queue row (its lease token, a pending cancel; no row at all when it is gone, which `held`
# takes as a lost lease); the execution with the starter's claims and client row, and the tenant's trigger
# version (queue/triggers.py) for the events of its status change; and the action at the execution's
# version (ACTION_AT_VERSION's columns, its header's renamed `act_*` beside the execution's). One statement
# after BEGIN, not two (the tenant's set_config, then the read): ~34k instructions of the worker's less.
_OPEN_ATTEMPT = "SELECT * FROM ledger_open_attempt(%s, %s, %s)"
_VERSION_COLUMNS = ("v_version", "v_definition", "v_enabled", "v_created_at")
_EXECUTION_KEYS = tuple(column.strip() for column in EXECUTION_COLUMNS.split(",")) + (
    "client_claims", "planned_action_id", "client_row_id", "client_name", "client_enabled", "client_policies",
    "triggers_version")
# The opening's jsonb values come as their text, decoded by `loads_jsonb_text`: psycopg's jsonb loader takes
# the whole of `json.loads` from bytes for each (the encoding's detection, the decode, `raw_decode`).
_EXECUTION_JSON = ("event", "input", "client_claims", "client_policies")

def _split_opening(row: dict | None) -> tuple[dict | None, dict | None, dict | None]:
    """The queue row, the execution (with its client's columns) and the action row (as ACTION_AT_VERSION
    names its columns) of the attempt's opening."""
    if row is None:
        return None, None, None
    queue_row = {"lease_token": row["q_lease_token"], "cancel_requested": row["q_cancel_requested"]}
    if row["id"] is None:
        return queue_row, None, None
    execution = {key: row[key] for key in _EXECUTION_KEYS}
    for key in _EXECUTION_JSON:
        execution[key] = loads_jsonb_text(execution[key])
    if row["act_id"] is None:
        return queue_row, execution, None
    action_row = {column: row[f"act_{column}"] for column in _HEADER_COLUMNS}
    for column in _VERSION_COLUMNS:
        action_row[column] = row[column]
    action_row["v_definition"] = loads_jsonb_text(action_row["v_definition"])
    return queue_row, execution, action_row


def run_attempt(services: Any, job: Job) -> str:
    """Run one attempt; returns 'succeeded', 'failed', 'retry', 'cancelled' or 'stale'."""
    deadline = time.monotonic() + services.settings.max_request_timeout
    # The attempt, in its own transaction, committed only while the lease holds. A transaction that lost
    # a race (a concurrent transfer on the same account, a cancel made while it ran) is run again at once,
    # as the server does with a request, instead of waiting for the lease to lapse.
    runs: list[dict] = []

    def attempt_once() -> str:
        started_at = datetime.datetime.now(datetime.timezone.utc)
        runs.append({})  # this run's request_state: whether it called a model
        execution = None
        try:
            with services.db.transaction(job.tenant_id, deadline=deadline,
                                         opener=(_OPEN_ATTEMPT, (job.execution_id,))) as conn:
                queue_row, execution, action_row = _split_opening(conn.ledger_first[0])
                held(queue_row, job)
                if execution is None or execution["status"] in ("SUCCEEDED", "FAILED", "CANCELLED"):
                    release(conn, job, retry_in=None)
                    return "stale"
                if queue_row["cancel_requested"] or job.cancel:
                    raise Cancelled()
                attempt = execution["attempts"]  # the claim counted this attempt
                # The starter's client row, read once for the authority check, the scope and the finish.
                client = _client_of(execution)
                if execution["planned_action_id"] is not None:
                    scope, denial = _as_confirmed(services, conn, execution, deadline, client)
                else:
                    denial = _authority_problem(conn, execution, client)
                    scope = _scope_for(services, conn, execution, deadline, client)
                    scope, denial = _through_server(scope, execution, denial)
                runs[-1] = scope.request_state  # whether this run called a model, kept past its transaction
                record = (load_action(scope, execution["action_id"], execution["action_version"])
                          if execution["action_id"] in natives.NATIVE_BY_ID else action_of_row(action_row))
                update_call(action=record["name"] if record else None)
                if denial is not None or record is None:
                    code, message, hint = denial or ("action_failure", "the action version no longer exists", None)
                    return _finish(conn, services, job, execution, attempt, record, None, started_at,
                                   error={"code": code, "message": message, "hint": hint}, scope=scope,
                                   lifecycle_settled=_lifecycle_settled(execution, action_row))
                tree = CallTree(scope, on_worker=True)
                try:
                    # The recorded event: a start's `action.started`, a trigger's typed record event.
                    pending = run_call(scope, tree, record, execution["input"], execution_id=job.execution_id,
                                       parent_execution_id=None, root_execution_id=job.execution_id,
                                       call_sequence=None, depth=0, deadline=deadline, event_type="action.started",
                                       attempt=attempt, event=execution["event"])
                finally:
                    tree.close()
                observe_tree(len(tree.pending))
                # A cancel the heartbeat saw; one made later makes the fence fail (queue/claims.py), and
                # the run that follows finds it before running the program.
                if job.cancel:
                    raise Cancelled()
                if len(tree.pending) > 1:  # the calls it made (the execution itself is written by _finish)
                    flush(scope, tree.pending[1:], above=(pending,))
                return _finish(conn, services, job, execution, attempt, record, pending, started_at, scope=scope,
                               lifecycle_settled=_lifecycle_settled(execution, action_row))
        except Cancelled:
            return _finish_cancelled(services, job, execution, deadline,
                                     started_at if job.started else None)

    # An attempt that called a model is not run again at once (DESIGN 13): it is cut short, and the
    # execution's next attempt (after its lease lapses) is a new turn.
    return retry_lost_races(attempt_once, retries=services.settings.race_retries, deadline=deadline,
                            may_retry=lambda: not job.lost and not model_was_called(runs[-1]))


def _client_of(execution: dict) -> dict | None:
    """The starter's client row, as read with the execution."""
    if execution["client_row_id"] is None:
        return None
    return {"name": execution["client_name"], "enabled": execution["client_enabled"],
            "policies": execution["client_policies"], "triggers_version": execution["triggers_version"]}


_UNREAD = object()


def _client(conn: psycopg.Connection, execution: dict) -> dict | None:
    """The starter's client row, with the tenant's trigger version read in the same statement."""
    return conn.execute(f"SELECT name, enabled, policies, {TRIGGERS_VERSION_COLUMN} FROM clients"
                        " WHERE tenant_id = %s AND id = %s",
                        (execution["tenant_id"], execution["client_id"])).fetchone()


def _authority_problem(conn: psycopg.Connection, execution: dict,
                       client: Any = _UNREAD) -> tuple[str, str, str] | None:
    """Authority carries over from the start: the starter's token must not have expired, nor its client
    been disabled. The client row is read fresh for every attempt (a cache of zero, within the 5 minutes
    the contract allows)."""
    claims = execution["client_claims"] or {}
    expires = claims.get("exp")
    if expires is not None and time.time() >= float(expires):
        return ("action_access_denied", "the credential this execution was started with expired",
                "the credential it was started with expired; start it again with a valid token")
    if client is _UNREAD:
        client = _client(conn, execution)
    if client is None or not client["enabled"]:
        return ("action_access_denied", "the client that started this execution was revoked",
                "enable the client, or start the execution again as another client")
    return None


def _through_server(scope: Scope, execution: dict,
                    denial: tuple[str, str, str] | None) -> tuple[Scope, tuple[str, str, str] | None]:
    """A task started through an MCP server keeps the server's layer after the starter's (DESIGN 12),
    re-read at every attempt: a server disabled or deleted since refuses the attempt."""
    if execution.get("mcp_server_id") is None:
        return scope, denial
    server = load_server_for_task(scope, execution["mcp_server_id"])
    if server is None:
        return scope, denial or ("action_access_denied",
                                 "the MCP server this task was started through is disabled or deleted",
                                 "enable the server, or start the task again through a server that is served")
    return replace(scope, chain=scope.chain.extended(server_layer(server))), denial


def _as_confirmed(services: Any, conn: psycopg.Connection, execution: dict, deadline: float,
                  client: Any) -> tuple[Scope, tuple[str, str, str] | None]:
    """A run confirmed from a plan runs under the plan's chain (DESIGN 14), rebuilt for every attempt from
    fresh records: both clients, the server or the agent, the proposing stack; the confirmer's token expiry
    binds it."""
    plan = read_plan(conn, execution["tenant_id"], execution["planned_action_id"])
    if plan is None or plan["decided_by"] is None:
        return _scope_for(services, conn, execution, deadline, client), (
            "action_access_denied", "the plan this run was confirmed from is missing", None)
    try:
        scope, _ = confirmed_scope(services, conn, plan, plan["decided_by"], plan["decided_claims"] or {}, deadline)
    except RunRefused as refused:
        return _scope_for(services, conn, execution, deadline, client), (refused.code, refused.message, refused.hint)
    scope = replace(scope, trigger_depth=execution["trigger_depth"])
    remember_version(scope, execution["triggers_version"])
    return scope, None


def _scope_for(services: Any, conn: psycopg.Connection, execution: dict, deadline: float,
               client: Any = _UNREAD) -> Scope:
    if client is _UNREAD:
        client = _client(conn, execution)
    name = client["name"] if client else "revoked"
    principal = Principal(execution["tenant_id"], execution["client_id"], name, execution["client_claims"] or {})
    # The starter's layer, failing closed exactly as for a direct request.
    chain = Chain((client_layer(principal, client["policies"] if client else []),))
    scope = Scope(conn=conn, principal=principal, chain=chain, services=services, deadline=deadline,
                  trigger_depth=execution["trigger_depth"])
    if client is not None:
        remember_version(scope, client["triggers_version"])
    return scope


def raise_started_events(services: Any, conn: psycopg.Connection, claimed: list[dict]) -> None:
    """The events of the claim's status changes (QUEUED or RUNNING to RUNNING), raised in the claim's
    transaction. Only tenants that ever wrote a trigger are read (their executions, under their tenant)."""
    by_tenant: dict[Any, list[dict]] = {}
    for row in claimed:
        if row["started"] and row["triggers_version"] is not None:
            by_tenant.setdefault(row["tenant_id"], []).append(row)
    for tenant_id, rows in by_tenant.items():
        with conn.pipeline():
            conn.execute("SELECT set_config('ledger.tenant_id', %s, true)", (str(tenant_id),))
            cursor = conn.execute(f"SELECT {EXECUTION_COLUMNS} FROM executions WHERE tenant_id = %s"
                                  " AND id = ANY(%s::uuid[])", (tenant_id, uuid_array([row["execution_id"] for row in rows])))
        executions = {execution["id"]: execution for execution in cursor.fetchall()}
        for row in rows:
            execution = executions.get(row["execution_id"])
            if execution is not None:
                scope = _system_scope(services, conn, execution, row["triggers_version"])
                raise_execution_event(scope, "updated", execution, previous_status=row["previous_status"])


def _system_scope(services: Any, conn: psycopg.Connection, execution: dict, triggers_version: int) -> Scope:
    """The scope of the queue's own writes to an execution (marking it RUNNING): no caller's authority is
    needed or granted (an empty chain allows nothing), only the events those writes raise."""
    principal = Principal(execution["tenant_id"], execution["client_id"], "queue", {})
    scope = Scope(conn=conn, principal=principal, chain=Chain(()), services=services,
                  deadline=time.monotonic() + 30, trigger_depth=execution["trigger_depth"])
    remember_version(scope, triggers_version)
    return scope


def _lifecycle_settled(execution: dict, action_row: dict | None) -> bool:
    """Whether the attempt's snapshot saw its (stored) action with no disable or delete waiting for its
    running executions: then its finish has nothing to settle (actions/lifecycle.py)."""
    return (action_row is not None and action_row["pending"] is None
            and execution["action_id"] not in natives.NATIVE_BY_ID)


_FINISH = PreparedRead(
    "SELECT * FROM ledger_finish_attempt(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)")
# The same finish, failing instead of answering a lost lease (LQ001), a pending cancel (LQ002) or a
# lifecycle change to settle (a lost race): what it answers can be committed unread (migration 0017).
_FINISH_OR_FAIL = PreparedRead(
    "SELECT * FROM ledger_finish_attempt_or_fail(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)")
_LEASE_LOST_STATE, _CANCELLED_STATE = "LQ001", "LQ002"
_STATUS_CHANGED = "financial.ActionExecution.updated"


def _nothing_follows_finish(services: Any, scope: Scope | None, lifecycle_settled: bool) -> bool:
    """Whether the finish can be the transaction's last statement, committed with it: no trigger reacts to
    the status change (its event would be raised after the finish, in the same transaction) and no
    lifecycle change waits to be settled."""
    return (lifecycle_settled and scope is not None and not scope.request_state.get(TRIGGERS_WRITTEN)
            and not services.record_events.on(scope, _STATUS_CHANGED))


def _finish(conn: psycopg.Connection, services: Any, job: Job, execution: dict, attempt: int, record: dict | None,
            pending: Any, started_at: datetime.datetime, error: dict | None = None, scope: Scope | None = None,
            lifecycle_settled: bool = False) -> str:
    """Record the attempt and its outcome, and give the queue row up, in the attempt's transaction: the
    fence and these writes are one statement (one round trip), and when nothing follows it in the
    transaction, the COMMIT goes with it (`commit_with`)."""
    finished_at = datetime.datetime.now(datetime.timezone.utc)
    if pending is not None:
        error = pending.error
        output, tools, logs, usage = pending.output, pending.tools, pending.logs, pending.usage
    else:
        output, tools, logs, usage = None, [], [], None
    duration_ms = (finished_at - started_at).total_seconds() * 1000
    output_bytes = json_size(output if output is not None or error is None else error)
    settings = (record or {}).get("execution") or {}
    max_attempts = int(settings.get("maxAttempts") or 3)
    if error is None:
        status, outcome = "SUCCEEDED", "succeeded"
    elif error["code"] in TERMINAL_CODES or attempt >= max_attempts:
        status, outcome = "FAILED", "failed"
    else:
        status, outcome = "QUEUED", "retry"
    # The fence, then (while the lease holds and no cancel is pending) the invocation, the status, the queue
    # row given up and, for a finish for good, the action's row locked: one statement (migration 0012).
    retry_in = (backoff_seconds(float(settings.get("backoffSeconds", 1.0)), attempt) if outcome == "retry"
                else None)
    # The record's values as their JSON text (`record_json`'s, `storable_json`): psycopg sends a str as an
    # untyped literal, which the server reads as the function's jsonb parameter, through psycopg's C dumper
    # instead of the Python one of a Jsonb wrapper.
    params = (job.tenant_id, job.execution_id, job.lease_token, attempt, storable_json(execution["input"]),
              storable_json(output), storable_json(error) if error else None, storable_json(tools),
              storable_json(logs), started_at, finished_at, duration_ms, output_bytes,
              storable_json(usage) if usage else None, status, retry_in, execution["action_id"])
    if _nothing_follows_finish(services, scope, lifecycle_settled):
        if job.lost:  # as `held` finds it after the finish: the heartbeat saw the lease lapse
            raise LeaseLost()
        try:
            commit_with(conn, _FINISH_OR_FAIL, params)
        except psycopg.Error as exc:
            if exc.sqlstate == _LEASE_LOST_STATE:
                raise LeaseLost() from None
            if exc.sqlstate == _CANCELLED_STATE:
                raise Cancelled() from None
            raise
        _finished(job, execution, attempt, record, status, error, duration_ms, output_bytes)
        return outcome
    fenced_row = held(fetch_one(conn, _FINISH, params), job)
    if fenced_row["cancel_requested"]:
        raise Cancelled()
    scope = scope or _scope_for(services, conn, execution, time.monotonic() + 30)
    raise_execution_event(scope, "updated", {**execution, "status": status, "attempts": attempt}, error,
                          previous_status="RUNNING")
    _finished(job, execution, attempt, record, status, error, duration_ms, output_bytes)
    if fenced_row["lifecycle_pending"]:
        # A disable or delete waits for the action's running executions (actions/lifecycle.py).
        settle_pending_lifecycle(scope, execution["action_id"])
    return outcome


def _finished(job: Job, execution: dict, attempt: int, record: dict | None, status: str, error: dict | None,
              duration_ms: float, output_bytes: int) -> None:
    """The finished attempt's metrics and log line."""
    call_finished(job.tenant_id, execution_id=job.execution_id, root_execution_id=job.execution_id,
                  action=(record or {}).get("name") or current_call().get("action"), action_version=execution["action_version"],
                  status="FAILED" if error else "SUCCEEDED", error=error, duration_ms=duration_ms,
                  output_bytes=output_bytes, attempt=attempt, depth=0, kind=(record or {}).get("kind"))


def _finish_cancelled(services: Any, job: Job, execution: dict, deadline: float,
                      started_at: datetime.datetime | None = None) -> str:
    """Record the cancel in a transaction of its own (the attempt's rolled back). `started_at`: when the
    attempt began, if the claim had marked it RUNNING (else it goes from its status as it was)."""
    with services.db.transaction(job.tenant_id, deadline=deadline) as conn:
        fence(conn, job)
        attempt = execution["attempts"] if job.started else execution["attempts"] + 1
        now = datetime.datetime.now(datetime.timezone.utc)
        previous_status = "RUNNING" if started_at is not None else execution["status"]
        started_at = started_at or now
        error = {"code": "cancelled", "message": "the execution was cancelled", "hint": None}
        duration_ms, output_bytes = (now - started_at).total_seconds() * 1000, json_size(error)
        conn.execute(
            "INSERT INTO invocations (tenant_id, execution_id, attempt, input, error, started_at, finished_at,"
            " duration_ms, output_bytes) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
            (job.tenant_id, job.execution_id, attempt, Jsonb(execution["input"]), Jsonb(error), started_at, now,
             duration_ms, output_bytes),
        )
        call_finished(job.tenant_id, execution_id=job.execution_id, root_execution_id=job.execution_id,
                      action=current_call().get("action"), action_version=execution["action_version"], status="CANCELLED", error=error,
                      duration_ms=duration_ms, output_bytes=output_bytes, attempt=attempt, depth=0)
        conn.execute("UPDATE executions SET status = 'CANCELLED', updated_at = now() WHERE tenant_id = %s AND id = %s",
                     (job.tenant_id, job.execution_id))
        release(conn, job, retry_in=None)
        scope = _scope_for(services, conn, execution, deadline)
        raise_execution_event(scope, "updated", {**execution, "status": "CANCELLED", "attempts": attempt}, error,
                              previous_status=previous_status)
        settle_pending_lifecycle(scope, execution["action_id"])
    return "cancelled"
