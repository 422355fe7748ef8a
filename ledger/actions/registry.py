"""The action registry: versioned definitions and their lifecycle, guarded by the policy chain.

Every createAction/updateAction writes a new immutable version (an update equal to the latest version
writes nothing). Lifecycle mutations (publish, disable, enable, delete) change the action's status and
write no version.
"""

from __future__ import annotations

import uuid
from typing import Any, Callable

import psycopg
from psycopg.types.json import Jsonb

from ..db.jsonb import loads_jsonb_text
from ..db.paging import parse_cursor
from ..errors import LedgerError, NotFound
from ..values import same_json
from ..scope import Scope
from . import natives
from .dialects import dialect_warnings
from .lifecycle import has_unfinished_starts
from .validation import ActionDefinitionInvalid, ReferenceLookup, ReferenceTarget, validate_definition

ACTION = "financial.Action.document"
ACTION_INDEX = "financial.Action.indexes.all"

# An action's header columns (`a`), as ACTION_AT_VERSION reads them: a caller reading them beside columns
# of the same names renames them from this list (queue/attempts.py).
HEADER_COLUMNS = ("tenant_id", "id", "name", "kind", "status", "pending", "latest_version", "created_at", "updated_at")
_HEADER = ", ".join(f"a.{column}" for column in HEADER_COLUMNS)


class ActionExists(LedgerError):
    code = "already_exists"


class ActionStateError(LedgerError):
    code = "action_state_invalid"


# Told each warning ({path, client, message}) about a written definition (DESIGN 16); it never fails.
Warn = Callable[[dict], None]


# ---------------------------------------------------------------------------- records


def _record(header: dict, version_row: dict) -> dict:
    """An action at one version, in the shape the API and the executor read."""
    definition = version_row["definition"]
    return {
        "tenant_id": header["tenant_id"],
        "action_id": header["id"],
        "version": version_row["version"],
        "latest_version": header["latest_version"],
        "name": definition["name"],
        "description": definition.get("description"),
        "kind": definition["kind"],
        "config": definition.get("config"),
        "tool": definition.get("tool"),
        "policies": definition.get("policies") or [],
        "tools": definition.get("tools") or [],
        "execution": definition.get("execution"),
        "status": header["status"],
        "pending": header["pending"],
        "enabled": version_row["enabled"],
        "native": False,
        "created_at": version_row["created_at"],
        "definition": definition,
    }


def as_document(record: dict) -> dict:
    """The action as policies see it (`context.document`)."""
    return {
        "tenant_id": record.get("tenant_id"), "id": record["action_id"], "action_id": record["action_id"],
        "name": record["name"], "kind": record["kind"], "status": record["status"],
        "version": record["version"], "latest_version": record["latest_version"], "enabled": record["enabled"],
        "native": record["native"], "pending": record["pending"],
    }


def _header(scope: Scope, action_id: uuid.UUID, *, lock: bool = False) -> dict | None:
    suffix = " FOR UPDATE" if lock else ""
    return scope.one(f"SELECT {_HEADER} FROM actions a WHERE a.tenant_id = %s AND a.id = %s{suffix}",
                     (scope.tenant_id, action_id))


def _version_row(scope: Scope, action_id: uuid.UUID, version: int) -> dict | None:
    return scope.one(
        "SELECT version, definition, enabled, created_at FROM action_versions"
        " WHERE tenant_id = %s AND action_id = %s AND version = %s",
        (scope.tenant_id, action_id, version),
    )


def load_action(scope: Scope, action_id: uuid.UUID, version: int | None = None) -> dict | None:
    """The action at `version` (default: latest), without authorization. Natives included."""
    native_name = natives.NATIVE_BY_ID.get(action_id)
    if native_name is not None:
        return natives.native_record(native_name) if version in (None, 1) else None
    # The header and the version in one statement (one round trip).
    return action_of_row(scope.one(*action_statement(scope, action_id, version)))


def action_statement(scope: Scope, action_id: uuid.UUID, version: int | None = None) -> tuple[str, tuple]:
    """The statement `load_action` reads a stored action with, for a caller that reads it beside something
    else in one statement; `action_of_row` makes its row the record."""
    return (f"{ACTION_AT_VERSION} ON v.tenant_id = a.tenant_id AND v.action_id = a.id"
            " AND v.version = coalesce(%s, a.latest_version) WHERE a.tenant_id = %s AND a.id = %s",
            (version, scope.tenant_id, action_id))


# The action's header joined to one of its versions (`v`): the caller adds the ON and WHERE clauses, so
# that it can read an action in the same statement or pipeline as what names it (a queued execution). The
# definition comes as its text, for `loads_jsonb_text` (psycopg's jsonb loader does more work for the same
# value, and every call of a tool reads its definition).
ACTION_AT_VERSION = (f"SELECT {_HEADER}, v.version AS v_version, v.definition::text AS v_definition, v.enabled AS v_enabled,"
                     " v.created_at AS v_created_at FROM actions a LEFT JOIN action_versions v")


def action_of_row(row: dict | None) -> dict | None:
    """The record of a row read with ACTION_AT_VERSION (None: no such action, or no such version); its
    definition as that text, or already decoded by a caller that read it otherwise."""
    if row is None or row["v_version"] is None:
        return None
    row = dict(row)
    definition = row.pop("v_definition")
    if type(definition) is str:
        definition = loads_jsonb_text(definition)
    version_row = {"version": row.pop("v_version"), "definition": definition,
                   "enabled": row.pop("v_enabled"), "created_at": row.pop("v_created_at")}
    return _record(row, version_row)


def get_action(scope: Scope, action_id: uuid.UUID, version: int | None = None) -> dict | None:
    record = load_action(scope, action_id, version)
    if record is not None:
        scope.require("SELECT", ACTION, as_document(record))
    return record


def list_actions(scope: Scope, where: dict, first: int, after: str | None) -> list[dict]:
    scope.require("SELECT", ACTION_INDEX, index=True)
    cursor = parse_cursor(after)
    records: list[dict] = []
    if where.get("native") is not False:
        native_ids = [spec["id"] for spec in natives.NATIVE_TOOLS.values()]
        if cursor is None or cursor in native_ids:
            start = native_ids.index(cursor) + 1 if cursor in native_ids else 0
            for name in list(natives.NATIVE_TOOLS)[start:]:
                records.append(natives.native_record(name))
            cursor = None
    if where.get("native") is not True:
        clauses = ["a.tenant_id = %s", "a.status <> 'DELETED'"]
        params: list[Any] = [scope.tenant_id]
        if where.get("status"):
            clauses[-1] = "a.status = %s"
            params.append(where["status"])
        if where.get("name"):
            clauses.append("a.name = %s")
            params.append(where["name"])
        if where.get("kind"):
            clauses.append("a.kind = %s")
            params.append(where["kind"])
        if cursor is not None:
            clauses.append("(a.created_at, a.id) > (SELECT created_at, id FROM actions WHERE tenant_id = %s AND id = %s)")
            params.extend([scope.tenant_id, cursor])
        params.append(first)
        rows = scope.all(
            f"SELECT {_HEADER}, v.version, v.definition, v.enabled, v.created_at AS version_created_at"
            f" FROM actions a JOIN action_versions v ON v.tenant_id = a.tenant_id AND v.action_id = a.id"
            f" AND v.version = a.latest_version WHERE {' AND '.join(clauses)} ORDER BY a.created_at, a.id LIMIT %s",
            params,
        )
        for row in rows:
            records.append(_record(row, {"version": row["version"], "definition": row["definition"],
                                         "enabled": row["enabled"], "created_at": row["version_created_at"]}))
    records = [r for r in records if _matches(r, where)]
    visible = [r for r in records if scope.allows("SELECT", ACTION, as_document(r))]
    return visible[:first]


def _matches(record: dict, where: dict) -> bool:
    for key in ("name", "kind", "status"):
        if where.get(key) is not None and record[key] != where[key]:
            return False
    return True


# ---------------------------------------------------------------------------- writes


def create_action(scope: Scope, action_id: uuid.UUID, doc: dict, warn: Warn | None = None) -> dict:
    if action_id in natives.RESERVED_IDS:
        raise ActionExists(f"{action_id} is the id of a native tool", hint="choose a new UUID for a new action")
    definition = _validated(scope, action_id, doc)
    candidate = {"tenant_id": scope.tenant_id, "action_id": action_id, "name": definition["name"],
                 "kind": definition["kind"], "status": "UNPUBLISHED", "version": 1, "latest_version": 1,
                 "enabled": definition["enabled"], "native": False, "pending": None}
    scope.require("INSERT", ACTION, as_document(candidate))
    if _header(scope, action_id) is not None:
        raise ActionExists(f"an action with id {action_id} already exists",
                           hint="use updateAction to write a new version of it, or choose a new id")
    _claim_name(scope, action_id, definition["name"])
    try:
        with scope.savepoint():
            scope.conn.execute(
                "INSERT INTO actions (tenant_id, id, name, kind, latest_version) VALUES (%s, %s, %s, %s, 1)",
                (scope.tenant_id, action_id, definition["name"], definition["kind"]),
            )
    except psycopg.errors.UniqueViolation as exc:
        raise _name_taken(definition["name"]) from exc
    _insert_version(scope, action_id, 1, definition)
    _warn_about(definition, warn)
    return load_action(scope, action_id, 1)


def update_action(scope: Scope, action_id: uuid.UUID, doc: dict, warn: Warn | None = None) -> dict:
    if action_id in natives.NATIVE_BY_ID:
        raise ActionStateError("native tools cannot be changed", hint="create an action of kind "
                               f"{natives.NATIVE_BY_ID[action_id]} to narrow it with your own policies")
    header = _header(scope, action_id, lock=True)
    if header is None:
        raise NotFound(f"no action {action_id}", hint="create it with createAction first")
    latest = _record(header, _version_row(scope, action_id, header["latest_version"]))
    if header["status"] == "DELETED":
        raise ActionStateError(f"action {action_id} is deleted and takes no new versions",
                               hint="create a new action instead")
    definition = _validated(scope, action_id, doc, current_name=header["name"])
    if same_json(definition, _with_reference_defaults(latest["definition"])):  # by type: a schema's `true` is not `1`
        scope.require("SELECT", ACTION, as_document(latest))
        _warn_about(definition, warn)  # the answer describes the definition, written now or before
        return latest
    next_version = header["latest_version"] + 1
    candidate = {**latest, "name": definition["name"], "kind": definition["kind"], "version": next_version,
                 "latest_version": next_version, "enabled": definition["enabled"]}
    scope.require("UPDATE", ACTION, as_document(candidate))
    if definition["name"] != header["name"]:
        _claim_name(scope, action_id, definition["name"])
    try:
        with scope.savepoint():
            scope.conn.execute(
                "UPDATE actions SET name = %s, kind = %s, latest_version = %s, updated_at = now()"
                " WHERE tenant_id = %s AND id = %s",
                (definition["name"], definition["kind"], next_version, scope.tenant_id, action_id),
            )
    except psycopg.errors.UniqueViolation as exc:
        raise _name_taken(definition["name"]) from exc
    _insert_version(scope, action_id, next_version, definition)
    _warn_about(definition, warn)
    return load_action(scope, action_id, next_version)


def _warn_about(definition: dict, warn: Warn | None) -> None:
    """The written definition's warnings: schemas a model client's dialect cannot hold, and a name that has
    become a native's since the action took it (it keeps working; validation lets it keep the name)."""
    if warn is None:
        return
    name = definition["name"]
    if name in natives.RESERVED_NAMES:
        warn({"path": "name", "client": "all",
              "message": f"{name!r} is now reserved for the native {name} tool: this action keeps its name and "
                         "keeps working, but a model or an MCP client that also sees the native cannot tell the "
                         "two apart; rename it"})
    if definition["kind"] in natives.NATIVE_KINDS:
        return  # a native kind's schemas are the native's, not the writer's to change: its adapter's concern
    for warning in dialect_warnings(definition.get("tool"), definition.get("kind")):
        warn(warning)


def _with_reference_defaults(definition: dict) -> dict:
    """A stored definition as validation writes it now: references written before `confirm` existed
    compare equal to the same input written today."""
    refs = definition.get("tools")
    if not refs or all("confirm" in ref for ref in refs):
        return definition
    return {**definition, "tools": [{**ref, "confirm": bool(ref.get("confirm"))} for ref in refs]}


def _claim_name(scope: Scope, action_id: uuid.UUID, name: str) -> None:
    taken = scope.one("SELECT id FROM actions WHERE tenant_id = %s AND name = %s AND status <> 'DELETED'",
                      (scope.tenant_id, name))
    if taken is not None and taken["id"] != action_id:
        raise _name_taken(name)


def _name_taken(name: str) -> LedgerError:
    return ActionDefinitionInvalid([{"path": "name", "message": f"the name {name!r} is taken by another action "
                                                                 "in this tenant; choose another"}])


def _insert_version(scope: Scope, action_id: uuid.UUID, version: int, definition: dict) -> None:
    scope.conn.execute(
        "INSERT INTO action_versions (tenant_id, action_id, version, definition, enabled, created_by)"
        " VALUES (%s, %s, %s, %s, %s, %s)",
        (scope.tenant_id, action_id, version, Jsonb(definition), definition["enabled"], scope.principal.client_id),
    )


def reference_lookup(scope: Scope) -> ReferenceLookup:
    """Finds a referenced action by registry name, at its pinned or latest version (for validation)."""

    def lookup(name: str, version: int | None) -> ReferenceTarget | None:
        row = scope.one(f"SELECT {_HEADER} FROM actions a WHERE a.tenant_id = %s AND a.name = %s"
                        " ORDER BY (a.status = 'DELETED'), a.created_at DESC LIMIT 1", (scope.tenant_id, name))
        if row is None:
            return None
        resolved = version or row["latest_version"]
        version_row = _version_row(scope, row["id"], resolved)
        return ReferenceTarget(
            action_id=row["id"], name=name, status=row["status"], pending=row["pending"], version=resolved,
            definition=version_row["definition"] if version_row else None,
            enabled=version_row["enabled"] if version_row else False,
        )

    return lookup


def _validated(scope: Scope, action_id: uuid.UUID, doc: dict, current_name: str | None = None) -> dict:
    lookup = reference_lookup(scope)

    def walk(target: uuid.UUID, version: int | None) -> list[dict]:
        header = _header(scope, target)
        if header is None:
            return []
        row = _version_row(scope, target, version or header["latest_version"])
        return (row["definition"].get("tools") or []) if row else []

    def compile_program(source: str, tool_names: tuple) -> list[dict]:
        return scope.services.executor_pool().compile(source, tool_names, tenant=scope.tenant_id)

    return validate_definition(action_id, doc, lookup=lookup, walk=walk, compile_program=compile_program,
                               analyze_program=scope.services.analyze_program, current_name=current_name)


# ---------------------------------------------------------------------------- lifecycle


def _lifecycle(scope: Scope, action_id: uuid.UUID, operation: str) -> tuple[dict, dict]:
    if action_id in natives.NATIVE_BY_ID:
        raise ActionStateError("native tools are always active and cannot be changed")
    header = _header(scope, action_id, lock=True)
    if header is None:
        raise NotFound(f"no action {action_id}", hint="check the id; actions(where: {name: ...}) finds it by name")
    latest = _record(header, _version_row(scope, action_id, header["latest_version"]))
    scope.require(operation, ACTION, as_document(latest))
    return header, latest


def _set_status(scope: Scope, action_id: uuid.UUID, status: str, pending: str | None) -> dict:
    scope.conn.execute(
        "UPDATE actions SET status = %s, pending = %s, updated_at = now() WHERE tenant_id = %s AND id = %s",
        (status, pending, scope.tenant_id, action_id),
    )
    return load_action(scope, action_id)


def _has_started_work(scope: Scope, action_id: uuid.UUID) -> bool:
    """Started executions still queued or running: a disable or delete waits for them to drain."""
    return has_unfinished_starts(scope, action_id)


def publish_action(scope: Scope, action_id: uuid.UUID) -> dict:
    header, latest = _lifecycle(scope, action_id, "UPDATE")
    status = header["status"]
    if status == "ACTIVE" and header["pending"] is None:
        return latest
    if status == "DELETED" or header["pending"] == "DELETE":
        raise ActionStateError(f"action {action_id} is deleted and cannot be published",
                               hint="create a new action instead")
    if status == "DISABLED" or header["pending"] == "DISABLE":
        raise ActionStateError(f"action {action_id} is disabled", hint="use enableAction to make it active again")
    return _set_status(scope, action_id, "ACTIVE", None)


def enable_action(scope: Scope, action_id: uuid.UUID) -> dict:
    header, latest = _lifecycle(scope, action_id, "UPDATE")
    if header["status"] == "DELETED" or header["pending"] == "DELETE":
        raise ActionStateError(f"action {action_id} is deleted and cannot be enabled",
                               hint="create a new action instead")
    if header["status"] == "DISABLED" or header["pending"] == "DISABLE":
        # Enabling cancels a pending disable: the action never stopped being ACTIVE underneath.
        return _set_status(scope, action_id, "ACTIVE", None)
    return latest


def disable_action(scope: Scope, action_id: uuid.UUID) -> dict:
    header, latest = _lifecycle(scope, action_id, "UPDATE")
    if header["status"] == "DELETED" or header["pending"] == "DELETE":
        raise ActionStateError(f"action {action_id} is deleted", hint="a deleted action cannot be disabled")
    if header["status"] == "DISABLED" or header["pending"] == "DISABLE":
        return latest
    if _has_started_work(scope, action_id):
        return _set_status(scope, action_id, header["status"], "DISABLE")
    return _set_status(scope, action_id, "DISABLED", None)


def delete_action(scope: Scope, action_id: uuid.UUID) -> dict:
    header, latest = _lifecycle(scope, action_id, "DELETE")
    if header["status"] == "DELETED":
        return latest
    if _has_started_work(scope, action_id):
        return _set_status(scope, action_id, header["status"], "DELETE")
    return _set_status(scope, action_id, "DELETED", None)
