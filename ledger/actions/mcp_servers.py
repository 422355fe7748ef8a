"""MCP servers (`financial.McpServer`, DESIGN 12): records that list tools for Model Context Protocol clients.

A server has a name (the registry name rule; it is served at `/mcp/<name>`), a description, instructions
for the model, references to the tools it lists (validated like an action's, and only a server may list
`program`, `invoke`, `get_task` and `cancel_task`), policies (its layer of the chain: client, server,
tools) and `enabled`. A delete flags the row: executions made through the server keep naming it, and its
name is free again.
"""

from __future__ import annotations

import datetime
import logging
import uuid
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from ..db.jsonb import loads_jsonb_text
from ..db.paging import page_visible
from ..errors import LedgerError, NotFound
from ..policy.chain import Layer
from ..policy.layers import layer_from_stored
from ..policy.statements import parse_policies
from ..scope import Scope
from ..values import same_json
from . import natives
from .registry import reference_lookup
from .validation import DefinitionInvalid, Problems, check_name, check_references

log = logging.getLogger("ledger.mcp_servers")

SERVER = "financial.McpServer.document"
SERVER_INDEX = "financial.McpServer.indexes.all"
MAX_DESCRIPTION_CHARS = 2_000
MAX_INSTRUCTIONS_CHARS = 32 * 1024
# What a server may list besides tools: the natives that act for it, and graphql and cel.
LISTABLE_NATIVES = natives.SERVER_NATIVES | natives.NATIVE_KINDS

_COLUMNS = ("tenant_id, id, name, description, instructions, tools, policies, enabled, deleted, created_at,"
            " updated_at, created_by")


class McpServerDefinitionInvalid(DefinitionInvalid):
    code = "mcp_server_definition_invalid"
    what = "MCP server definition"


class McpServerExists(LedgerError):
    code = "already_exists"


@dataclass(frozen=True)
class McpServer:
    id: uuid.UUID
    name: str
    description: str | None
    instructions: str | None
    # The stored references in the order listed: {name, actionId, actionVersion, input, confirm}.
    tools: tuple[dict, ...]
    policies: list[dict]
    enabled: bool
    created_at: datetime.datetime

    @property
    def path(self) -> str:
        return f"/mcp/{self.name}"

    @classmethod
    def from_row(cls, row: dict) -> "McpServer":
        return cls(id=row["id"], name=row["name"], description=row["description"],
                   instructions=row["instructions"], tools=tuple(row["tools"] or ()),
                   policies=list(row["policies"] or []), enabled=row["enabled"], created_at=row["created_at"])


def server_layer(server: McpServer) -> Layer:
    """The server's layer of the chain: every call through it passes it, after the caller's client."""
    return layer_from_stored(f'MCP server "{server.name}"', server.policies, remedy="fix them with updateMcpServer")


# ---------------------------------------------------------------------------- validation


def validate_server(scope: Scope, doc: dict) -> dict:
    """The stored form of a server definition, or `mcp_server_definition_invalid` listing every problem."""
    problems = Problems()
    name = doc.get("name")
    check_name(name, problems)
    description = _text(doc.get("description"), "description", MAX_DESCRIPTION_CHARS, problems)
    instructions = _text(doc.get("instructions"), "instructions", MAX_INSTRUCTIONS_CHARS, problems)
    statements, policy_problems = parse_policies(doc.get("policies") or [], "policies")
    for p in policy_problems:
        problems.add(p["path"], p["message"])
    references, _ = check_references(doc.get("tools") or [], reference_lookup(scope), problems,
                                     listable_natives=LISTABLE_NATIVES, confirm_allowed=True)
    enabled = doc.get("enabled")
    if problems:
        raise McpServerDefinitionInvalid(problems.items)
    return {"name": name, "description": description, "instructions": instructions, "tools": references,
            "policies": [s.to_json() for s in statements], "enabled": True if enabled is None else bool(enabled)}


def _text(value: Any, path: str, limit: int, problems: Problems) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        problems.add(path, "must be a string")
    elif len(value) > limit:
        problems.add(path, f"is {len(value)} characters; the limit is {limit}")
    elif "\x00" in value:
        problems.add(path, "a NUL character (\\u0000) cannot be stored; remove it")
    else:
        return value
    return None


# ---------------------------------------------------------------------------- reads


def _row(scope: Scope, server_id: uuid.UUID, *, lock: bool = False) -> dict | None:
    suffix = " FOR UPDATE" if lock else ""
    return scope.one(f"SELECT {_COLUMNS} FROM mcp_servers WHERE tenant_id = %s AND id = %s{suffix}",
                     (scope.tenant_id, server_id))


def get_server(scope: Scope, server_id: uuid.UUID) -> McpServer | None:
    """The server by id; null when it does not exist in the tenant or was deleted."""
    row = _row(scope, server_id)
    if row is None or row["deleted"]:
        return None
    scope.require("SELECT", SERVER, row)
    return McpServer.from_row(row)


def require_server(scope: Scope, server_id: uuid.UUID) -> McpServer:
    """The server a mutation names (a token confined to it): `not_found` when it does not exist in the
    tenant or was deleted, `permission_denied` when the caller may not SELECT it."""
    server = get_server(scope, server_id)
    if server is None:
        raise NotFound(f"no MCP server {server_id}", hint="check the id; mcpServers lists the servers")
    return server


def list_servers(scope: Scope, first: int, after: str | None) -> list[McpServer]:
    scope.require("SELECT", SERVER_INDEX, index=True)
    rows = page_visible(scope, SERVER, "mcp_servers", _COLUMNS, first, after, where="NOT deleted")
    return [McpServer.from_row(r) for r in rows]


_BY_NAME = f"SELECT {_COLUMNS} FROM mcp_servers WHERE tenant_id = %s AND name = %s AND NOT deleted AND enabled"
_UNREAD = object()


# The server at a name and the actions it references, at the versions they name, in one row: the server's
# columns, then each of the actions' columns as an array (`tool_<column>`, in the references' order; nulls
# when it references none that this statement reads). Sent ahead with BEGIN, it spares a tools/call or
# tools/list the round trip of each `load_action` of its listing. A reference whose actionId is not a UUID's
# canonical text or whose actionVersion is neither absent, null nor a plain integer is not read here (no
# cast can fail in this statement); the listing reads it as before (`server_and_tools_of_row`).
_SERVER_COLUMNS = tuple(column.strip() for column in _COLUMNS.split(","))
# Of an action's header, the columns its record is made of (`registry._record`; the tenant's is the
# server's, which the join requires): each column more is one more array for psycopg to parse a call.
_TOOL_HEADER_COLUMNS = ("id", "status", "pending", "latest_version")
_TOOL_COLUMNS = (*_TOOL_HEADER_COLUMNS, "v_version", "v_definition", "v_enabled", "v_created_at", "ref_version")
_TOOL_ALIASES = tuple(f"tool_{column}" for column in _TOOL_COLUMNS)
# The server's jsonb columns and the versions' definitions come as their text, which `json.loads` reads as
# psycopg's jsonb loader reads their bytes (PostgreSQL writes a jsonb as UTF-8 text without a BOM or a NUL,
# so the bytes' encoding is found to be UTF-8), without the loader's steps for each value.
_JSON_TEXT_COLUMNS = ("tools", "policies")
_SERVER_AND_TOOLS_BY_NAME = (
    "SELECT " + ", ".join(f"s.{column}::text AS {column}" if column in _JSON_TEXT_COLUMNS else f"s.{column}"
                          for column in _SERVER_COLUMNS) + ", "
    + ", ".join(f"tools.{column} AS {alias}" for column, alias in zip(_TOOL_COLUMNS, _TOOL_ALIASES))
    + " FROM mcp_servers s LEFT JOIN LATERAL (SELECT "
    + ", ".join(f"array_agg(r.{column} ORDER BY r.position) AS {column}" for column in _TOOL_COLUMNS)
    + f" FROM (SELECT t.position, t.ref_version, {', '.join(f'a.{c}' for c in _TOOL_HEADER_COLUMNS)},"
    " v.version AS v_version, v.definition::text AS v_definition, v.enabled AS v_enabled,"
    " v.created_at AS v_created_at FROM (SELECT e.position, jsonb_typeof(e.ref -> 'actionVersion') AS version_type,"
    " CASE WHEN e.ref ->> 'actionId' ~ '^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$'"
    " THEN (e.ref ->> 'actionId')::uuid END AS action_id,"
    " CASE WHEN jsonb_typeof(e.ref -> 'actionVersion') = 'number' AND e.ref ->> 'actionVersion' ~ '^[0-9]{1,9}$'"
    " THEN (e.ref ->> 'actionVersion')::int END AS ref_version"
    " FROM jsonb_array_elements(CASE WHEN jsonb_typeof(s.tools) = 'array' THEN s.tools ELSE '[]'::jsonb END)"
    " WITH ORDINALITY AS e(ref, position)) t"
    " JOIN actions a ON a.tenant_id = s.tenant_id AND a.id = t.action_id"
    " JOIN action_versions v ON v.tenant_id = a.tenant_id AND v.action_id = a.id"
    " AND v.version = coalesce(t.ref_version, a.latest_version)"
    " WHERE t.ref_version IS NOT NULL OR t.version_type IS NULL OR t.version_type = 'null') r) tools ON true"
    " WHERE s.tenant_id = %s AND s.name = %s AND NOT s.deleted AND s.enabled")


def server_and_tools_by_name_query(tenant_id: uuid.UUID, name: str) -> tuple[str, tuple]:
    """The statement whose row `server_and_tools_of_row` reads, for a caller that sends it ahead (with BEGIN):
    the enabled server at `name` (the row load_server_by_name reads) and the stored actions it references."""
    return _SERVER_AND_TOOLS_BY_NAME, (tenant_id, name)


def server_and_tools_of_row(row: Any) -> tuple[dict | None, dict[tuple[uuid.UUID, int | None], dict]]:
    """The server's row as load_server_by_name reads it (None when there is none), and of each row that
    `load_action(action_id, version)` would read in the same transaction, the columns `action_of_row` makes
    the same record of, by (action_id, the version as the reference names it: an int or None); a reference
    not among them is read as before."""
    if row is None:
        return None, {}
    server = {column: row[column] for column in _SERVER_COLUMNS}
    for column in _JSON_TEXT_COLUMNS:
        server[column] = loads_jsonb_text(server[column])
    if row["tool_id"] is None:
        return server, {}
    rows: dict[tuple[uuid.UUID, int | None], dict] = {}
    tenant_id = row["tenant_id"]
    for values in zip(*(row[alias] for alias in _TOOL_ALIASES)):
        found = dict(zip(_TOOL_COLUMNS, values))
        found["tenant_id"] = tenant_id
        found["v_definition"] = loads_jsonb_text(found["v_definition"])
        version = found.pop("ref_version")
        rows[(found["id"], version)] = found
    return server, rows


def load_server_by_name(scope: Scope, name: str, *, row: Any = _UNREAD) -> McpServer | None:
    """The enabled server served at `/mcp/<name>`, authorized for SELECT under the scope's chain; None
    when there is none (deleted and disabled servers included). A denied SELECT raises PermissionDenied.

    `row`: the server's row when the caller has read it already (`server_and_tools_of_row`)."""
    if row is _UNREAD:
        row = scope.one(_BY_NAME, (scope.tenant_id, name))
    if row is None:
        return None
    scope.require("SELECT", SERVER, row)
    return McpServer.from_row(row)


def load_server_for_task(scope: Scope, server_id: uuid.UUID) -> McpServer | None:
    """The server a started task was started through, as each attempt re-reads it: None when it is
    disabled or deleted. Read for the system (as the starter's client row is), not authorized per caller."""
    row = _row(scope, server_id)
    if row is None or row["deleted"] or not row["enabled"]:
        return None
    return McpServer.from_row(row)


# ---------------------------------------------------------------------------- writes


def create_server(scope: Scope, server_id: uuid.UUID, input: dict) -> McpServer:
    definition = validate_server(scope, input)
    candidate = {"tenant_id": scope.tenant_id, "id": server_id, **definition, "deleted": False,
                 "created_by": scope.principal.client_id}
    scope.require("INSERT", SERVER, candidate)
    existing = _row(scope, server_id)
    if existing is not None:
        hint = ("that server was deleted; choose a new id" if existing["deleted"]
                else "use updateMcpServer to change it, or choose a new id")
        raise McpServerExists(f"an MCP server with id {server_id} already exists", hint=hint)
    _claim_name(scope, server_id, definition["name"])
    try:
        with scope.savepoint():
            row = scope.one(
                f"INSERT INTO mcp_servers (tenant_id, id, name, description, instructions, tools, policies,"
                f" enabled, created_by) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING {_COLUMNS}",
                (scope.tenant_id, server_id, definition["name"], definition["description"],
                 definition["instructions"], Jsonb(definition["tools"]), Jsonb(definition["policies"]),
                 definition["enabled"], scope.principal.client_id),
            )
    except psycopg.errors.UniqueViolation as exc:
        raise _name_taken(definition["name"]) from exc
    return McpServer.from_row(row)


def update_server(scope: Scope, server_id: uuid.UUID, input: dict) -> McpServer:
    """Replaces the definition. An input equal to the current record writes nothing (no UPDATE is
    needed, only SELECT) and returns it, so re-publishing an unchanged definition is a no-op."""
    current = _row(scope, server_id, lock=True)
    if current is None or current["deleted"]:
        raise NotFound(f"no MCP server {server_id}", hint="create it with createMcpServer first"
                       if current is None else "it was deleted; create a new server with a new id")
    definition = validate_server(scope, input)
    if all(same_json(definition[key], current[key]) for key in definition):
        scope.require("SELECT", SERVER, current)
        return McpServer.from_row(current)
    scope.require("UPDATE", SERVER, {**current, **definition})
    if definition["name"] != current["name"]:
        _claim_name(scope, server_id, definition["name"])
    try:
        with scope.savepoint():
            row = scope.one(
                f"UPDATE mcp_servers SET name = %s, description = %s, instructions = %s, tools = %s, policies = %s,"
                f" enabled = %s, updated_at = now() WHERE tenant_id = %s AND id = %s RETURNING {_COLUMNS}",
                (definition["name"], definition["description"], definition["instructions"],
                 Jsonb(definition["tools"]), Jsonb(definition["policies"]), definition["enabled"],
                 scope.tenant_id, server_id),
            )
    except psycopg.errors.UniqueViolation as exc:
        raise _name_taken(definition["name"]) from exc
    return McpServer.from_row(row)


def delete_server(scope: Scope, server_id: uuid.UUID) -> McpServer:
    """Deletes the server (it answers 404 from now on) and returns it as it was; deleting it again
    returns the same."""
    current = _row(scope, server_id, lock=True)
    if current is None:
        raise NotFound(f"no MCP server {server_id}", hint="check the id; mcpServers lists the servers")
    scope.require("DELETE", SERVER, current)
    if not current["deleted"]:
        scope.conn.execute("UPDATE mcp_servers SET deleted = true, updated_at = now() WHERE tenant_id = %s AND id = %s",
                           (scope.tenant_id, server_id))
    return McpServer.from_row(current)


def _claim_name(scope: Scope, server_id: uuid.UUID, name: str) -> None:
    taken = scope.one("SELECT id FROM mcp_servers WHERE tenant_id = %s AND name = %s AND NOT deleted",
                      (scope.tenant_id, name))
    if taken is not None and taken["id"] != server_id:
        raise _name_taken(name)


def _name_taken(name: str) -> LedgerError:
    return McpServerDefinitionInvalid([{"path": "name", "message": f"the name {name!r} is taken by another MCP "
                                                                    "server in this tenant; choose another"}])
