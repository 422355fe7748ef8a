"""The chain a confirmed plan runs under (DESIGN 14), rebuilt from its records at the confirm and again at
every attempt of the started run:

1. the proposer's client layer;
2. the confirmer's client layer;
3. the MCP server's or the agent's layer;
4. the layers of the proposing stack, outermost to innermost;
5. the tool's layer (added by the call itself, as for any call).

Each client layer sees its own client as `principal`; every other layer sees the proposer. Both clients'
records are read fresh each time, and the confirmer's token expiry binds the run. So an approval never
widens what the agent may do, and a person cannot act through the agent beyond their own rights.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import replace
from typing import Any

import psycopg

from ..actions.mcp_servers import load_server_for_task, server_layer
from ..actions.registry import load_action
from ..auth.clients import client_layer
from ..policy.chain import Chain, Layer
from ..policy.principal import Principal
from ..scope import Scope
from .engine import tool_layer


class RunRefused(Exception):
    """The plan's chain cannot be built: a client was disabled, the server is gone, the confirmer's token
    expired. A confirmed run's attempt fails with it (`action_access_denied`)."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.code, self.message, self.hint = "action_access_denied", message, hint


def _client(conn: psycopg.Connection, tenant_id: uuid.UUID, client_id: uuid.UUID) -> dict | None:
    return conn.execute("SELECT name, enabled, policies FROM clients WHERE tenant_id = %s AND id = %s",
                        (tenant_id, client_id)).fetchone()


def confirmed_scope(services: Any, conn: psycopg.Connection, plan: dict, confirmer_id: uuid.UUID,
                    confirmer_claims: dict, deadline: float, *, dry_run: bool = False) -> tuple[Scope, Chain]:
    """The scope a confirmed run executes in (the proposer as principal, layers 1 to 4), and the chain of
    the callers alone (layers 1 to 3), which must allow SELECT and INVOKE of the action as for any start.
    Raises RunRefused."""
    tenant_id = plan["tenant_id"]
    expires = (confirmer_claims or {}).get("exp")
    if expires is not None and time.time() >= float(expires):
        raise RunRefused("the credential this plan was confirmed with expired",
                         "the token that confirmed it expired; have the call proposed again, and confirm it "
                         "with a token that outlives the run")
    proposer_row, confirmer_row = _client(conn, tenant_id, plan["client_id"]), _client(conn, tenant_id, confirmer_id)
    for row, who in ((proposer_row, "proposed"), (confirmer_row, "confirmed")):
        if row is None or not row["enabled"]:
            raise RunRefused(f"the client that {who} this plan was revoked",
                             "enable that client, or have the call proposed and confirmed again")
    proposer = Principal(tenant_id, plan["client_id"], proposer_row["name"], plan["client_claims"] or {})
    confirmer = Principal(tenant_id, confirmer_id, confirmer_row["name"], confirmer_claims or {})
    scope = Scope(conn=conn, principal=proposer, chain=Chain(), services=services, deadline=deadline,
                  dry_run=dry_run)
    layers = [client_layer(proposer, proposer_row["policies"]),
              replace(client_layer(confirmer, confirmer_row["policies"]), principal=confirmer.as_cel())]
    if plan["mcp_server_id"] is not None:
        server = load_server_for_task(scope, plan["mcp_server_id"])
        if server is None:
            raise RunRefused("the MCP server this plan was proposed through is disabled or deleted",
                             "enable the server, or have the call proposed again through a server that is served")
        layers.append(server_layer(server))
    if plan["agent_action_id"] is not None:
        layers.append(_version_layer(scope, "agent", plan["agent_action_id"], plan["agent_action_version"]))
    callers = Chain(tuple(layers))
    for frame in plan["stack"] or []:
        layers.append(_version_layer(scope, "tool", uuid.UUID(frame["actionId"]), frame["version"]))
    return replace(scope, chain=Chain(tuple(layers))), callers


def _version_layer(scope: Scope, what: str, action_id: uuid.UUID, version: int) -> Layer:
    """The layer of an action version that proposed (versions never change); one that no longer exists
    allows nothing."""
    record = load_action(scope, action_id, version)
    if record is None:
        return Layer(f"{what} {action_id} v{version} (it no longer exists, so it allows nothing)", ())
    return tool_layer(record)
