"""Firing triggers (DESIGN 15): a record event queues the matching enabled triggers' runs in the
transaction that writes the record (a transactional outbox), so they commit or roll back with it.

`TriggerEvents` is the `RecordEvents` port (ledger/services.py): the domain and the execution records
tell it of each write; it never makes that write fail. For each enabled trigger on the event:
1. its condition over `event` must be true (false, or not evaluable: skipped, counted; the latter logged);
2. its client's layer must allow SELECT on the record's document (else skipped, counted: the run would
   reveal a record its client may not read);
3. the run is queued under the trigger's client, one trigger depth deeper than the write; a run past
   MAX_TRIGGER_DEPTH is not started (logged, counted). A run that cannot run (the target is not callable,
   the input expression fails or the input does not fit the schema, the client may not invoke it) is
   recorded FAILED at once, so that the failure shows where the runs are listed.

Finding the triggers costs nothing when the event has none: each process keeps every tenant's enabled
triggers in memory, under the tenant's trigger version. A transaction learns that version from the row it
reads first anyway (its client's, through `opening_query`), in its own snapshot, so it sees exactly the
triggers committed before it began, whichever process wrote them, and no round trip is added. Only a
transaction that reads nothing first (a cancel's, say) spends one query on the version, once.
"""

from __future__ import annotations

import datetime
import logging
import threading
import uuid
from dataclasses import replace
from typing import Any

from prometheus_client import Counter
from psycopg.types.json import Jsonb

from ..actions import natives
from ..actions.registry import ACTION, as_document, load_action
from ..actions.schemas import first_error
from ..actions.triggers import (TRIGGERS_VERSION_COLUMN, TRIGGERS_WRITTEN, Trigger, condition_of,
                                enabled_triggers, run_input, triggers_version)
from ..auth.clients import client_layer
from ..executions.admission import refused_version
from ..executions.records import EXECUTION_COLUMNS, execution_event_record, record_json
from ..policy.cel import CelError, cel_data
from ..policy.chain import Chain
from ..policy.principal import Principal
from ..scope import Scope, as_document as document_of
from ..values import value_problem
from .start import QUEUE_CHANNEL

log = logging.getLogger("ledger.triggers")

# A run fired by a client's write is at depth 1; one at depth MAX_TRIGGER_DEPTH + 1 is not started.
MAX_TRIGGER_DEPTH = 8
# Runs one transaction may fire, whatever their depth: a few triggers that each react to the others'
# runs would otherwise multiply at every level.
MAX_RUNS_PER_TRANSACTION = 1024

EXECUTION_INSERTED = "financial.ActionExecution.inserted"

__all__ = ["TRIGGERS_VERSION_COLUMN", "TriggerEvents", "remember_version"]

# Where a transaction keeps what it learnt about triggers (Scope.request_state).
TRIGGERS_VERSION = "triggers_version"
_CAUSE = "trigger_cause"
_RUNS = "trigger_runs"
_CLIENTS = "trigger_clients"
_UNREAD = object()

FIRED = Counter("ledger_triggers_fired_total", "Trigger runs queued, by event", ["event"])
SKIPPED = Counter("ledger_triggers_skipped_total",
                  "Triggers that did not fire on an event, by event and reason (condition_false, not_evaluable,"
                  " not_visible)", ["event", "reason"])
CUT = Counter("ledger_trigger_cascades_cut_total",
              "Trigger runs not started: past the trigger depth limit, or past the runs one transaction may fire",
              ["event", "reason"])

# Tenants whose triggers one process keeps; past this the copy starts over (each is reloaded on use).
_CACHE_LIMIT = 10_000


def remember_version(scope: Scope, version: int | None) -> None:
    """Tell the transaction its tenant's trigger version, read with its first statement."""
    scope.request_state[TRIGGERS_VERSION] = version


class TriggerEvents:
    """The `RecordEvents` port: matches an event against the tenant's enabled triggers, and fires them."""

    def __init__(self) -> None:
        self._by_tenant: dict[uuid.UUID, tuple[int, dict[str, tuple[Trigger, ...]]]] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ matching

    def on(self, scope: Scope, event_type: str) -> tuple[Trigger, ...]:
        """The enabled triggers on `event_type` that this transaction sees."""
        state = scope.request_state
        if state.get(TRIGGERS_WRITTEN):
            # This transaction wrote a trigger: its own reads must see it, and no process holds it yet.
            return _grouped(enabled_triggers(scope)).get(event_type, ())
        version = state.get(TRIGGERS_VERSION, _UNREAD)
        if version is _UNREAD:
            version = state[TRIGGERS_VERSION] = triggers_version(scope)
        if version is None:
            return ()  # the tenant never wrote a trigger
        cached = self._by_tenant.get(scope.tenant_id)
        if cached is not None and cached[0] == version:
            return cached[1].get(event_type, ())
        grouped = _grouped(enabled_triggers(scope))
        with self._lock:
            current = self._by_tenant.get(scope.tenant_id)
            # An older snapshot's copy never replaces a newer one (versions only grow).
            if current is None or current[0] < version:
                if len(self._by_tenant) >= _CACHE_LIMIT:
                    self._by_tenant.clear()
                self._by_tenant[scope.tenant_id] = (version, grouped)
        return grouped.get(event_type, ())

    # ------------------------------------------------------------------ the port

    def raised(self, scope: Scope, event_type: str, record_type: str, record: dict,
               previous: dict | None = None) -> None:
        triggers = self.on(scope, event_type)
        if not triggers:
            return
        event = {"eventType": event_type, "recordType": record_type, "recordId": _text(record.get("id")),
                 "record": cel_data(document_of(record)),
                 "previous": cel_data(document_of(previous)) if previous is not None else None}
        for trigger in triggers:
            self._consider(scope, trigger, event, record)

    def _consider(self, scope: Scope, trigger: Trigger, event: dict, record: dict) -> None:
        event_type = event["eventType"]
        verdict, why = _condition(trigger, event)
        if verdict is None:
            SKIPPED.labels(event_type, "not_evaluable").inc()
            log.warning("trigger %s did not fire on %s %s: its condition cannot be evaluated (%s)",
                        trigger.id, event_type, event["recordId"], why,
                        extra={"tenant": str(scope.tenant_id), "triggerId": str(trigger.id)})
            return
        if not verdict:
            SKIPPED.labels(event_type, "condition_false").inc()
            return
        principal, client = _client(scope, trigger.client_id)
        chain = Chain((client_layer(principal, client["policies"] if client else []),))
        denial = chain.decide("SELECT", f"{trigger.record_type}.document", principal=principal.as_cel(),
                              document=document_of(record), has_document=True, action=None)
        if denial is not None:
            SKIPPED.labels(event_type, "not_visible").inc()
            return
        depth = scope.trigger_depth + 1
        runs = scope.request_state.get(_RUNS, 0) + 1
        if depth > MAX_TRIGGER_DEPTH or runs > MAX_RUNS_PER_TRANSACTION:
            reason = "depth" if depth > MAX_TRIGGER_DEPTH else "runs_per_transaction"
            CUT.labels(event_type, reason).inc()
            log.warning("trigger %s did not start a run on %s %s: %s", trigger.id, event_type, event["recordId"],
                        f"it would run at trigger depth {depth}, past the limit of {MAX_TRIGGER_DEPTH}"
                        if reason == "depth" else
                        f"the transaction already fired {MAX_RUNS_PER_TRANSACTION} runs",
                        extra={"tenant": str(scope.tenant_id), "triggerId": str(trigger.id)})
            return
        scope.request_state[_RUNS] = runs
        run = _queue_run(scope, trigger, principal, chain, event, record, depth, runs)
        FIRED.labels(event_type).inc()
        # A trigger's run is a top-level execution: it raises its own event, one trigger depth deeper.
        self.raised(replace(scope, trigger_depth=depth), EXECUTION_INSERTED, "financial.ActionExecution",
                    execution_event_record(run, run.get("error")))


def _grouped(triggers: list[Trigger]) -> dict[str, tuple[Trigger, ...]]:
    grouped: dict[str, list[Trigger]] = {}
    for trigger in triggers:
        grouped.setdefault(trigger.event, []).append(trigger)
    return {event: tuple(items) for event, items in grouped.items()}


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _condition(trigger: Trigger, event: dict) -> tuple[bool | None, str | None]:
    try:
        condition = condition_of(trigger)
    except CelError as exc:  # checked when written; a stored text that no longer compiles cannot be evaluated
        return None, exc.message
    if condition is None:
        return True, None
    return condition.evaluate({"event": event})


def _client(scope: Scope, client_id: uuid.UUID) -> tuple[Principal, dict | None]:
    """The trigger's client as it is now (read once per transaction): its layer decides what the trigger
    may see, and its name is in that layer's denials."""
    clients = scope.request_state.setdefault(_CLIENTS, {})
    if client_id not in clients:
        clients[client_id] = scope.one("SELECT name, enabled, policies FROM clients WHERE tenant_id = %s AND id = %s",
                                       (scope.tenant_id, client_id))
    row = clients[client_id]
    return Principal(scope.tenant_id, client_id, row["name"] if row else "deleted", {}), row


# ---------------------------------------------------------------------------- the run


def _refusal(scope: Scope, trigger: Trigger, principal: Principal, chain: Chain,
             data: Any) -> tuple[dict | None, dict | None]:
    """(the version to run, why the run fails before it starts, as an error): the checks startAction makes
    of its caller, made of the trigger's client as it is now."""
    record = load_action(scope, trigger.action_id, trigger.action_version)
    if record is None:
        return None, _error("action_not_callable", f"the trigger's action {trigger.action_id} has no version "
                            f"{trigger.action_version}" if trigger.action_version else
                            f"the trigger's action {trigger.action_id} no longer exists",
                            "point the trigger at an existing action and version (updateTrigger)")
    refused = refused_version(record)
    if refused is None and not record.get("tool"):
        refused = (f"action {record['name']!r} has no tool block", "only tools can be started")
    if refused is None and (record["tool"].get("session") or
                            (record["native"] and record["name"] in natives.ACTS_FOR_CALLER)):
        refused = (f"action {record['name']!r} cannot be started", "point the trigger at a tool without sessions")
    if refused is not None:
        return record, _error("action_not_callable", refused[0], refused[1])
    for operation in ("SELECT", "INVOKE"):
        denial = chain.decide(operation, ACTION, principal=principal.as_cel(), document=as_document(record),
                              has_document=True, action=None)
        if denial is not None:
            error = denial.error()
            return record, _error("action_permission_denied", error.message, error.hint)
    problem = value_problem(data)
    if problem:
        return record, _error("action_input_invalid", f"the trigger's input at {problem[0]}: {problem[1]}",
                              "change the trigger's input")
    schema_error = first_error(record["tool"]["inputSchema"], data)
    if schema_error:
        return record, _error("action_input_invalid",
                              f"the trigger's input does not match the tool's inputSchema: {schema_error[1]}",
                              f"change the trigger's input at {schema_error[0]}, or the tool's inputSchema")
    return record, None


def _error(code: str, message: str, hint: str | None) -> dict:
    return {"code": code, "message": message, "hint": hint}


def _queue_run(scope: Scope, trigger: Trigger, principal: Principal, chain: Chain, event: dict, record: dict,
               depth: int, sequence: int) -> dict:
    """Queue (or record as failed at once) the trigger's run; its row, with `error` when it failed."""
    cause = scope.request_state.setdefault(_CAUSE, uuid.uuid4())
    run_id = scope.services.execution_ids.triggered(trigger.id, cause, sequence)
    error = None
    try:
        data = run_input(trigger, event)
    except CelError as exc:
        data, error = None, _error("action_input_invalid", f"the trigger's input could not be evaluated: {exc.message}",
                                   "fix the $cel expression of the trigger's input")
    target = None
    if error is None:
        target, error = _refusal(scope, trigger, principal, chain, data)
    version = (target or {}).get("version") or trigger.action_version or 1
    run_event = {"eventType": event["eventType"], "data": data, "recordType": event["recordType"],
                 "recordId": event["recordId"]}
    status = "FAILED" if error else "QUEUED"
    row = scope.one(
        "INSERT INTO executions (tenant_id, id, action_id, action_version, status, root_execution_id, depth, attempts,"
        " started, client_id, client_claims, run_at, event, input, started_by_execution_id, trigger_id, trigger_depth)"
        " VALUES (%s, %s, %s, %s, %s, %s, 0, %s, true, %s, %s, now(), %s, %s, %s, %s, %s)"
        f" RETURNING {EXECUTION_COLUMNS}",
        (scope.tenant_id, run_id, trigger.action_id, version, status, run_id, 1 if error else 0, trigger.client_id,
         Jsonb({}), record_json(run_event), record_json(data), scope.writing_execution_id, trigger.id, depth),
    )
    if error:
        now = datetime.datetime.now(datetime.timezone.utc)
        scope.conn.execute(
            "INSERT INTO invocations (tenant_id, execution_id, attempt, input, error, started_at, finished_at,"
            " duration_ms, output_bytes) VALUES (%s, %s, 1, %s, %s, %s, %s, 0, NULL)",
            (scope.tenant_id, run_id, record_json(data), Jsonb(error), now, now))
        log.info("trigger %s queued a run that failed at once: %s", trigger.id, error["message"],
                 extra={"tenant": str(scope.tenant_id), "triggerId": str(trigger.id), "executionId": str(run_id),
                        "code": error["code"]})
        return {**row, "error": error}
    scope.conn.execute("INSERT INTO execution_queue (tenant_id, execution_id, run_at) VALUES (%s, %s, now())",
                       (scope.tenant_id, run_id))
    # Delivered when (and only if) the writing transaction commits.
    scope.conn.execute("SELECT pg_notify(%s, '')", (QUEUE_CHANNEL,))
    return row
