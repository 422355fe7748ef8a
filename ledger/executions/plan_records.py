"""The records of planned actions (`financial.PlannedAction`, DESIGN 14): reads, authorized per record, and
the one function that inserts a plan and the one that updates it (where record events attach, section 15).

A PROPOSED plan whose expiry has passed reads as EXPIRED at once, whether or not the worker has settled it
yet: a person never sees a plan they can no longer decide as open.
"""

from __future__ import annotations

import datetime
import uuid
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from ..db.paging import page_visible
from ..scope import Scope
from ..values import storable_json

PLAN = "financial.PlannedAction.document"
PLAN_INDEX = "financial.PlannedAction.indexes.all"
RECORD_TYPE = "financial.PlannedAction"
_NOT_IN_EVENTS = frozenset({"client_claims", "decided_claims", "stored_status", "tenant_id"})
# How long a proposal waits for a decision.
EXPIRY = datetime.timedelta(hours=24)

_STORED = ("tenant_id", "id", "action_id", "action_version", "input", "preview", "proposed_by_execution_id",
           "proposal_execution_id", "client_id", "client_claims", "mcp_server_id", "agent_action_id",
           "agent_action_version", "stack", "expires_at", "decided_by", "decided_at", "decided_claims", "reason",
           "execution_id", "created_at", "updated_at")
_JSON = frozenset({"input", "preview", "client_claims", "stack", "decided_claims"})
_EFFECTIVE_STATUS = "CASE WHEN status = 'PROPOSED' AND expires_at <= now() THEN 'EXPIRED' ELSE status END"
COLUMNS = ", ".join(_STORED) + f", ({_EFFECTIVE_STATUS}) AS status"


def _stored(column: str, value: Any) -> Any:
    return Jsonb(value, dumps=storable_json) if column in _JSON and value is not None else value


# ---------------------------------------------------------------------------- writes (one place each)


def insert_plan(scope: Scope, values: dict) -> dict:
    """Record a proposal, expiring EXPIRY after the database's clock says now; returns it as read back.
    Raises `financial.PlannedAction.inserted` (DESIGN 15) in the same transaction."""
    columns = ["tenant_id", *values]
    plan = scope.conn.execute(
        f"INSERT INTO planned_actions ({', '.join(columns)}, expires_at)"
        f" VALUES ({', '.join(['%s'] * len(columns))}, now() + %s) RETURNING {COLUMNS}",
        [scope.tenant_id, *(_stored(column, value) for column, value in values.items()), EXPIRY],
    ).fetchone()
    scope.services.record_events.raised(scope, "financial.PlannedAction.inserted", RECORD_TYPE, event_record(plan))
    return plan


def update_plan(scope: Scope, previous: dict, *, status: str, decided_by: uuid.UUID | None = None,
                decided_claims: dict | None = None, reason: str | None = None,
                execution_id: uuid.UUID | None = None) -> dict:
    """Record a decision (`decided_by` the deciding client, at the database's now) or an expiry of the plan
    `previous` (as read, locked, before); returns the plan as read back. Raises
    `financial.PlannedAction.updated` in the same transaction."""
    plan = scope.conn.execute(
        "UPDATE planned_actions SET status = %s, decided_by = %s, decided_claims = %s, reason = %s,"
        " execution_id = %s, decided_at = CASE WHEN %s THEN now() END, updated_at = now()"
        f" WHERE tenant_id = %s AND id = %s RETURNING {COLUMNS}",
        (status, decided_by, _stored("decided_claims", decided_claims), reason, execution_id,
         decided_by is not None, scope.tenant_id, previous["id"]),
    ).fetchone()
    scope.services.record_events.raised(scope, "financial.PlannedAction.updated", RECORD_TYPE, event_record(plan),
                                        event_record(previous))
    return plan


def event_record(plan: dict) -> dict:
    """A plan as a record event shows it: its columns, without the tokens' claims it keeps for the run."""
    return {key: value for key, value in plan.items() if key not in _NOT_IN_EVENTS}


def read_plan(conn: psycopg.Connection, tenant_id: uuid.UUID, plan_id: uuid.UUID, *, lock: bool = False) -> dict | None:
    """The plan, unauthorized (`lock`: held until the transaction ends), with its stored status beside the
    status a reader sees."""
    suffix = " FOR UPDATE" if lock else ""
    return conn.execute(f"SELECT {COLUMNS}, status AS stored_status FROM planned_actions"
                        f" WHERE tenant_id = %s AND id = %s{suffix}", (tenant_id, plan_id)).fetchone()


# ---------------------------------------------------------------------------- reads


def load_plan(scope: Scope, plan_id: uuid.UUID, *, lock: bool = False) -> dict | None:
    """The plan in the scope's tenant, unauthorized."""
    return read_plan(scope.conn, scope.tenant_id, plan_id, lock=lock)


def get_plan(scope: Scope, plan_id: uuid.UUID) -> dict | None:
    """`plannedAction(id)`: null when it does not exist in the tenant, a denial when it may not be read."""
    row = load_plan(scope, plan_id)
    if row is not None:
        scope.require("SELECT", PLAN, row)
    return row


def list_plans(scope: Scope, status: str | None, first: int, after: str | None) -> list[dict]:
    """`plannedActions(status, first, after)`: the plans the reader may SELECT, oldest first."""
    scope.require("SELECT", PLAN_INDEX, index=True)
    where, params = (f"{_EFFECTIVE_STATUS} = %s", (status,)) if status else (None, ())
    rows = page_visible(scope, PLAN, "planned_actions", COLUMNS, first, after, where=where, params=params)
    return rows
