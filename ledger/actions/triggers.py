"""Triggers (`financial.Trigger`, DESIGN 15): records that start an action when a record event happens.

A trigger names an event of section 15's table, an optional CEL condition over `event`, the action it
starts (a version, or the latest when each run starts), the run's input (JSON, `{"$cel": ...}` over
`event`, or per top-level key; the record when omitted) and `enabled`. It carries the authority of the
client that wrote it last (`client_id`). Writing one needs INSERT or UPDATE on its document and INVOKE on
its action, and is refused from inside an execution: a program may not create standing authority.

Every write raises the tenant's trigger version (migrations/0010_triggers.sql), which tells every
process that its in-memory copy of the tenant's triggers is out of date (queue/triggers.py).
"""

from __future__ import annotations

import datetime
import uuid
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from ..db.paging import page_visible
from ..errors import LedgerError, NotFound, PermissionDenied, StartNotAllowed
from ..policy.cel import CelError, CompiledCondition, compile_condition, compile_expression_check, evaluate_expression
from ..scope import Scope
from ..values import value_problem
from . import natives
from .registry import ACTION, as_document, load_action
from .validation import NAME_PATTERN, DefinitionInvalid, Problems

TRIGGER = "financial.Trigger.document"
TRIGGER_INDEX = "financial.Trigger.indexes.all"

# The events of DESIGN 15 and the record type each is about.
EVENTS: dict[str, str] = {
    "financial.Account.inserted": "financial.Account",
    "financial.Account.updated": "financial.Account",
    "financial.Transfer.inserted": "financial.Transfer",
    "financial.PlannedAction.inserted": "financial.PlannedAction",
    "financial.PlannedAction.updated": "financial.PlannedAction",
    "financial.ActionExecution.inserted": "financial.ActionExecution",
    "financial.ActionExecution.updated": "financial.ActionExecution",
}
# What a condition and an input expression see.
EVENT_VARIABLES = ("event",)
MAX_NAME_CHARS = 64

# Set in a transaction's request_state once it wrote a trigger: its own reads of the tenant's triggers
# must see that write, which no other transaction's copy holds yet.
TRIGGERS_WRITTEN = "triggers_written"

_COLUMNS = ("tenant_id, id, name, event, condition, action_id, action_version, input, enabled, client_id, deleted,"
            " created_at, updated_at")


class TriggerDefinitionInvalid(DefinitionInvalid):
    code = "trigger_definition_invalid"
    what = "trigger definition"


class TriggerExists(LedgerError):
    code = "already_exists"


@dataclass(frozen=True)
class Trigger:
    id: uuid.UUID
    name: str
    event: str
    condition: str | None
    action_id: uuid.UUID
    action_version: int | None
    input: Any
    enabled: bool
    client_id: uuid.UUID
    created_at: datetime.datetime

    @property
    def record_type(self) -> str:
        return EVENTS[self.event]

    @classmethod
    def from_row(cls, row: dict) -> "Trigger":
        return cls(id=row["id"], name=row["name"], event=row["event"], condition=row["condition"],
                   action_id=row["action_id"], action_version=row["action_version"], input=row["input"],
                   enabled=row["enabled"], client_id=row["client_id"], created_at=row["created_at"])


# ---------------------------------------------------------------------------- the definition


def _is_cel(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"$cel"}


def condition_of(trigger: Trigger) -> CompiledCondition | None:
    """The trigger's condition, compiled (cached by its text); None when it has none."""
    return compile_condition(trigger.condition, EVENT_VARIABLES) if trigger.condition is not None else None


def run_input(trigger: Trigger, event: dict) -> Any:
    """The run's input (its event's `data`): the trigger's input with its `$cel` values evaluated over
    `event` (the whole input, or each top-level value), or the record when the trigger has no input.
    CelError when an expression cannot be evaluated."""
    given = trigger.input
    if given is None:
        return event["record"]
    if _is_cel(given):
        return evaluate_expression(given["$cel"], {"event": event})
    if isinstance(given, dict):
        return {key: evaluate_expression(value["$cel"], {"event": event}) if _is_cel(value) else value
                for key, value in given.items()}
    return given


def validate_trigger(scope: Scope, doc: dict) -> dict:
    """The stored form of a trigger definition, or `trigger_definition_invalid` listing every problem."""
    problems = Problems()
    name = doc.get("name")
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        problems.add("name", f"{name!r} is not a valid name: use 1 to {MAX_NAME_CHARS} lower-case letters, digits "
                             "and underscores, starting with a letter (e.g. `review_large_transfers`)")
    event = doc.get("event")
    if event not in EVENTS:
        problems.add("event", f"{event!r} is not an event; use one of {', '.join(EVENTS)}")
    condition = doc.get("condition")
    if condition is not None:
        try:
            compile_condition(condition, EVENT_VARIABLES)
        except CelError as exc:
            problems.add("condition", exc.message)
    _check_input(doc.get("input"), problems)
    action_id, version = doc.get("actionId"), doc.get("actionVersion")
    _check_action(scope, action_id, version, problems)
    if problems:
        raise TriggerDefinitionInvalid(problems.items)
    enabled = doc.get("enabled")
    return {"name": name, "event": event, "condition": condition, "action_id": action_id,
            "action_version": version, "input": doc.get("input"),
            "enabled": True if enabled is None else bool(enabled)}


def _check_input(given: Any, problems: Problems) -> None:
    problem = value_problem(given)
    if problem:
        where = problem[0].strip("/").replace("/", ".")
        problems.add(f"input.{where}" if where else "input", problem[1])
        return
    expressions = ([("input", given["$cel"])] if _is_cel(given) else
                   [(f"input.{key}", value["$cel"]) for key, value in given.items() if _is_cel(value)]
                   if isinstance(given, dict) else [])
    for path, text in expressions:
        try:
            compile_expression_check(text, EVENT_VARIABLES)
        except CelError as exc:
            problems.add(path, exc.message)


def _check_action(scope: Scope, action_id: Any, version: Any, problems: Problems) -> None:
    """The action must exist, have a tool block and be startable; the writer needs SELECT and INVOKE on it."""
    if version is not None and (not isinstance(version, int) or version < 1):
        problems.add("actionVersion", "a version is a positive integer; omit it for the latest")
        return
    record = load_action(scope, action_id, version)
    if record is None:
        if load_action(scope, action_id) is None:
            problems.add("actionId", f"no action {action_id} in this tenant")
        else:
            problems.add("actionVersion", f"the action has no version {version}")
        return
    for operation in ("SELECT", "INVOKE"):
        try:
            scope.require(operation, ACTION, as_document(record))
        except PermissionDenied as denied:
            problems.add("actionId", f"{denied.message}: a trigger's writer needs SELECT and INVOKE on its action "
                                     f"({denied.hint})")
            return
    if record["status"] == "DELETED":
        problems.add("actionId", f"action {record['name']!r} is deleted")
    elif not record.get("tool"):
        problems.add("actionId", f"action {record['name']!r} has no tool block, so it cannot be started")
    elif record["tool"].get("session"):
        problems.add("actionId", f"action {record['name']!r} has sessions and cannot be started by a trigger")
    elif record["native"] and record["name"] in natives.ACTS_FOR_CALLER:
        problems.add("actionId", f"the native {record['name']!r} acts for an MCP server's caller and cannot be "
                                 "started")


# ---------------------------------------------------------------------------- reads


def _document(row: dict) -> dict:
    """The trigger as policies see it (`context.document`)."""
    return {key: row.get(key) for key in ("tenant_id", "id", "name", "event", "condition", "action_id",
                                          "action_version", "input", "enabled", "client_id")}


def _row(scope: Scope, trigger_id: uuid.UUID, *, lock: bool = False) -> dict | None:
    suffix = " FOR UPDATE" if lock else ""
    return scope.one(f"SELECT {_COLUMNS} FROM triggers WHERE tenant_id = %s AND id = %s{suffix}",
                     (scope.tenant_id, trigger_id))


def get_trigger(scope: Scope, trigger_id: uuid.UUID) -> Trigger | None:
    row = _row(scope, trigger_id)
    if row is None or row["deleted"]:
        return None
    scope.require("SELECT", TRIGGER, _document(row))
    return Trigger.from_row(row)


def list_triggers(scope: Scope, first: int, after: str | None) -> list[Trigger]:
    scope.require("SELECT", TRIGGER_INDEX, index=True)
    rows = page_visible(scope, TRIGGER, "triggers", _COLUMNS, first, after, where="NOT deleted")
    return [Trigger.from_row(r) for r in rows]


# The tenant's trigger version as a column of a statement a transaction sends first anyway (its client's
# row): learning it then costs no round trip. NULL when the tenant never wrote a trigger.
TRIGGERS_VERSION_COLUMN = ("(SELECT v.version FROM trigger_versions v WHERE v.tenant_id = ledger_current_tenant())"
                           " AS triggers_version")


def triggers_version(scope: Scope) -> int | None:
    """The tenant's trigger version in this transaction's snapshot; None when no trigger was ever written."""
    row = scope.one("SELECT version FROM trigger_versions WHERE tenant_id = %s", (scope.tenant_id,))
    return row["version"] if row else None


def enabled_triggers(scope: Scope) -> list[Trigger]:
    """Every enabled trigger of the tenant, for the system to match events against (not authorized per
    caller: a trigger acts under its own client's authority)."""
    rows = scope.all(f"SELECT {_COLUMNS} FROM triggers WHERE tenant_id = %s AND enabled AND NOT deleted"
                     " ORDER BY created_at, id", (scope.tenant_id,))
    return [Trigger.from_row(r) for r in rows]


# ---------------------------------------------------------------------------- writes


def _refuse_inside_an_execution(scope: Scope) -> None:
    if scope.frames:
        raise StartNotAllowed(
            "a trigger cannot be written from inside an execution",
            hint="triggers are standing authority: a client writes them directly, never a program or an agent")


def _written(scope: Scope) -> None:
    """Raise the tenant's trigger version with this write (every process reloads its copy)."""
    scope.conn.execute(
        "INSERT INTO trigger_versions (tenant_id, version) VALUES (%s, 1)"
        " ON CONFLICT (tenant_id) DO UPDATE SET version = trigger_versions.version + 1", (scope.tenant_id,))
    scope.request_state[TRIGGERS_WRITTEN] = True


def create_trigger(scope: Scope, trigger_id: uuid.UUID, input: dict) -> Trigger:
    _refuse_inside_an_execution(scope)
    definition = validate_trigger(scope, input)
    candidate = {"tenant_id": scope.tenant_id, "id": trigger_id, **definition, "client_id": scope.principal.client_id}
    scope.require("INSERT", TRIGGER, _document(candidate))
    existing = _row(scope, trigger_id)
    if existing is not None:
        hint = ("that trigger was deleted; choose a new id" if existing["deleted"]
                else "use updateTrigger to change it, or choose a new id")
        raise TriggerExists(f"a trigger with id {trigger_id} already exists", hint=hint)
    _claim_name(scope, trigger_id, definition["name"])
    try:
        with scope.savepoint():
            row = scope.one(
                f"INSERT INTO triggers (tenant_id, id, name, event, condition, action_id, action_version, input,"
                f" enabled, client_id) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING {_COLUMNS}",
                (scope.tenant_id, trigger_id, definition["name"], definition["event"], definition["condition"],
                 definition["action_id"], definition["action_version"], _json(definition["input"]),
                 definition["enabled"], scope.principal.client_id),
            )
    except psycopg.errors.UniqueViolation as exc:
        raise _name_taken(definition["name"]) from exc
    _written(scope)
    return Trigger.from_row(row)


def update_trigger(scope: Scope, trigger_id: uuid.UUID, input: dict) -> Trigger:
    """Replaces the definition, and the authority its runs carry: the writer becomes its client."""
    _refuse_inside_an_execution(scope)
    current = _row(scope, trigger_id, lock=True)
    if current is None or current["deleted"]:
        raise NotFound(f"no trigger {trigger_id}", hint="create it with createTrigger first"
                       if current is None else "it was deleted; create a new trigger with a new id")
    definition = validate_trigger(scope, input)
    scope.require("UPDATE", TRIGGER, _document({**current, **definition, "client_id": scope.principal.client_id}))
    if definition["name"] != current["name"]:
        _claim_name(scope, trigger_id, definition["name"])
    try:
        with scope.savepoint():
            row = scope.one(
                f"UPDATE triggers SET name = %s, event = %s, condition = %s, action_id = %s, action_version = %s,"
                f" input = %s, enabled = %s, client_id = %s, updated_at = now() WHERE tenant_id = %s AND id = %s"
                f" RETURNING {_COLUMNS}",
                (definition["name"], definition["event"], definition["condition"], definition["action_id"],
                 definition["action_version"], _json(definition["input"]), definition["enabled"],
                 scope.principal.client_id, scope.tenant_id, trigger_id),
            )
    except psycopg.errors.UniqueViolation as exc:
        raise _name_taken(definition["name"]) from exc
    _written(scope)
    return Trigger.from_row(row)


def delete_trigger(scope: Scope, trigger_id: uuid.UUID) -> Trigger:
    """Deletes the trigger (it fires no more) and returns it as it was; deleting it again returns the same."""
    _refuse_inside_an_execution(scope)
    current = _row(scope, trigger_id, lock=True)
    if current is None:
        raise NotFound(f"no trigger {trigger_id}", hint="check the id; triggers lists them")
    scope.require("DELETE", TRIGGER, _document(current))
    if not current["deleted"]:
        scope.conn.execute("UPDATE triggers SET deleted = true, updated_at = now() WHERE tenant_id = %s AND id = %s",
                           (scope.tenant_id, trigger_id))
        _written(scope)
    return Trigger.from_row(current)


def _json(value: Any) -> Jsonb | None:
    return None if value is None else Jsonb(value)


def _claim_name(scope: Scope, trigger_id: uuid.UUID, name: str) -> None:
    taken = scope.one("SELECT id FROM triggers WHERE tenant_id = %s AND name = %s AND NOT deleted",
                      (scope.tenant_id, name))
    if taken is not None and taken["id"] != trigger_id:
        raise _name_taken(name)


def _name_taken(name: str) -> LedgerError:
    return TriggerDefinitionInvalid([{"path": "name", "message": f"the name {name!r} is taken by another trigger "
                                                                  "in this tenant; choose another"}])
