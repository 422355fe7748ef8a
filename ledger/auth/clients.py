"""Clients (`financial.Client`) and tenants: who may call, with which policies."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
from psycopg.rows import dict_row

from ..db.jsonb import loads_jsonb_text
from ..errors import InvalidInput, LedgerError, NotFound, Unauthenticated
from ..policy.chain import Layer
from ..policy.layers import layer_from_stored
from ..policy.statements import parse_policies
from ..scope import Scope
from ..policy.principal import Principal

CLIENT = "financial.Client.document"
ADMIN_POLICIES: list[dict[str, Any]] = [
    {"effect": "ALLOW", "actions": ["SELECT", "INSERT", "UPDATE", "DELETE", "INVOKE"],
     "resources": ["financial.*"], "assertion": None},
]
_COLUMNS = "tenant_id, id, name, enabled, policies, created_at, updated_at"


class PolicyInvalid(LedgerError):
    code = "policy_invalid"


def checked_policies(raw: list[dict]) -> list[dict]:
    statements, problems = parse_policies(raw)
    if problems:
        raise PolicyInvalid(
            f"{len(problems)} problem(s) in the policies: "
            + "; ".join(f"{p['path']}: {p['message']}" for p in problems),
            hint="fix each statement listed in extensions.problems",
            extensions={"problems": problems},
        )
    return [s.to_json() for s in statements]


def client_layer(principal: Principal, policies: list[dict]) -> Layer:
    """The client's layer of the chain, failing closed (allowed nothing) when its stored policies do not parse."""
    return layer_from_stored(f'client "{principal.client_name}" ({principal.client_id})', policies,
                             remedy="fix them with updateClient")


_PRINCIPAL = "SELECT name, enabled, policies FROM clients WHERE tenant_id = %s AND id = %s"
_UNREAD = object()


def opening_query(client_id: uuid.UUID) -> tuple[str, tuple]:
    """The client's row (as load_principal reads it) with the tenant's trigger version, as the statement
    that opens a request
    (Database.transaction's `opener`, which adds the tenant and the timeout as its parameters):
    `ledger_open_request` (migration 0013) sets the tenant and the statement_timeout, then reads the
    client under the tenant's RLS. The policies come as their jsonb's text, which `load_principal` decodes
    with less work than psycopg's jsonb loader (every request reads them)."""
    return ("SELECT name, enabled, policies::text AS policies, triggers_version"
            " FROM ledger_open_request(%s, %s, %s)", (client_id,))


def load_principal(conn: psycopg.Connection, tenant_id: uuid.UUID, client_id: uuid.UUID,
                   claims: dict[str, Any], row: Any = _UNREAD) -> tuple[Principal, list[dict]]:
    """The enabled client a token names, read fresh for every request (no cache on direct requests).

    `row` is the client's row when the caller has already read it (`opening_query`)."""
    if row is _UNREAD:
        row = conn.execute(_PRINCIPAL, (tenant_id, client_id)).fetchone()
    if row is None:
        raise Unauthenticated("the token names a client that does not exist",
                              hint="mint a token for an existing client")
    if not row["enabled"]:
        raise Unauthenticated("the client of this token is disabled",
                              hint="ask an administrator to enable the client, or use another client")
    policies = row["policies"]
    if type(policies) is str:
        policies = loads_jsonb_text(policies)
    return Principal(tenant_id, client_id, row["name"], claims), policies


def create_client(scope: Scope, client_id: uuid.UUID, name: str, policies: list[dict]) -> dict:
    name = _checked_name(name)
    stored = checked_policies(policies)
    doc = {"tenant_id": scope.tenant_id, "id": client_id, "name": name, "enabled": True, "policies": stored}
    scope.require("INSERT", CLIENT, doc)
    row = scope.one(
        f"INSERT INTO clients (tenant_id, id, name, policies) VALUES (%s, %s, %s, %s)"
        f" ON CONFLICT DO NOTHING RETURNING {_COLUMNS}",
        (scope.tenant_id, client_id, name, psycopg.types.json.Jsonb(stored)),
    )
    if row is None:
        raise LedgerError(f"a client with id {client_id} already exists", code="already_exists",
                          hint="use updateClient to change it, or choose a new id")
    return row


def _get_for_update(scope: Scope, client_id: uuid.UUID) -> dict:
    row = scope.one(f"SELECT {_COLUMNS} FROM clients WHERE tenant_id = %s AND id = %s FOR UPDATE",
                    (scope.tenant_id, client_id))
    if row is None:
        raise NotFound(f"no client {client_id}", hint="check the id, or create the client first")
    return row


def update_client(scope: Scope, client_id: uuid.UUID, name: str, policies: list[dict]) -> dict:
    name = _checked_name(name)
    stored = checked_policies(policies)
    current = _get_for_update(scope, client_id)
    scope.require("UPDATE", CLIENT, {**current, "name": name, "policies": stored})
    return scope.one(
        f"UPDATE clients SET name = %s, policies = %s, updated_at = now() WHERE tenant_id = %s AND id = %s"
        f" RETURNING {_COLUMNS}",
        (name, psycopg.types.json.Jsonb(stored), scope.tenant_id, client_id),
    )


def disable_client(scope: Scope, client_id: uuid.UUID) -> dict:
    current = _get_for_update(scope, client_id)
    scope.require("UPDATE", CLIENT, {**current, "enabled": False})
    return scope.one(
        f"UPDATE clients SET enabled = false, updated_at = now() WHERE tenant_id = %s AND id = %s"
        f" RETURNING {_COLUMNS}",
        (scope.tenant_id, client_id),
    )


def issue_token(scope: Scope, client_id: uuid.UUID, ttl_seconds: int | None, *,
                mcp_server: uuid.UUID | None = None) -> tuple[str, int | None]:
    """Minting a token for a client is an UPDATE of that client: it extends who can act as it.

    `mcp_server`: the server (checked by the caller to exist and be readable) the token is confined to."""
    if ttl_seconds is not None and ttl_seconds <= 0:
        raise InvalidInput("ttlSeconds must be positive", hint="omit it for a token without expiry")
    row = scope.one(f"SELECT {_COLUMNS} FROM clients WHERE tenant_id = %s AND id = %s",
                    (scope.tenant_id, client_id))
    if row is None:
        raise NotFound(f"no client {client_id}", hint="check the id, or create the client first")
    scope.require("UPDATE", CLIENT, row)
    if not row["enabled"]:
        raise LedgerError(f"client {client_id} is disabled", code="client_disabled",
                          hint="a disabled client's tokens are refused; create or use another client")
    return scope.services.tokens.mint(scope.tenant_id, client_id, ttl_seconds, mcp_server=mcp_server)


def _checked_name(name: str) -> str:
    name = name.strip()
    if not name or len(name) > 200:
        raise InvalidInput("a client name is 1 to 200 characters", hint="give the client a short name")
    return name


def create_tenant(owner_conninfo: str, name: str, *, tenant_id: uuid.UUID | None = None,
                  admin_id: uuid.UUID | None = None) -> tuple[uuid.UUID, uuid.UUID]:
    """A tenant with an admin client allowed everything in it; returns (tenant_id, admin client id).

    Runs as the application role, scoped to the new tenant, like every other write.
    """
    tenant_id = tenant_id or uuid.uuid4()
    admin_id = admin_id or uuid.uuid4()
    with psycopg.connect(owner_conninfo, autocommit=True, row_factory=dict_row) as conn:
        conn.execute("SET ROLE ledger_app")
        with conn.transaction():
            conn.execute("SELECT set_config('ledger.tenant_id', %s, true)", (str(tenant_id),))
            conn.execute("INSERT INTO tenants (id, name) VALUES (%s, %s)", (tenant_id, name))
            conn.execute(
                "INSERT INTO clients (tenant_id, id, name, policies) VALUES (%s, %s, %s, %s)",
                (tenant_id, admin_id, "admin", psycopg.types.json.Jsonb(ADMIN_POLICIES)),
            )
    return tenant_id, admin_id
