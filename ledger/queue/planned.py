"""Deciding planned actions (DESIGN 14): a person confirms (the action is started under the plan's chain) or
rejects; the worker expires what nobody decided within 24 hours.

Who may decide: nobody from inside an execution (`start_not_allowed`: an agent can neither approve its own
plans nor create standing authority), and never the proposer's own client (`permission_denied`); deciding
needs UPDATE on the plan's document. A plan that is no longer PROPOSED is `planned_action_decided`.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import replace
from typing import Any

import psycopg

from ..errors import InvalidInput, LedgerError, NotFound, PlannedActionDecided, StartNotAllowed
from ..executions.admission import invocable_record
from ..executions.engine import CallTree, run_call
from ..executions.plan_chain import RunRefused, confirmed_scope
from ..executions.plan_records import PLAN, load_plan, read_plan, update_plan
from ..executions.records import require_new_execution
from ..policy.chain import Chain
from ..policy.principal import Principal
from ..scope import Scope
from .start import start_action

log = logging.getLogger("ledger.planned")

MAX_REASON_CHARS = 2_000
# The deadline of the worker's transaction that writes one expiry.
EXPIRY_WRITE_SECONDS = 30


def confirm_plan(scope: Scope, plan_id: uuid.UUID) -> dict:
    """Preview the call under the plan's chain, then start it; a denial leaves the plan PROPOSED."""
    plan = _deciding(scope, plan_id, "CONFIRMED")
    try:
        run_scope, callers = confirmed_scope(scope.services, scope.conn, plan, scope.principal.client_id,
                                             scope.principal.claims, scope.deadline, dry_run=scope.dry_run)
    except RunRefused as refused:
        raise LedgerError(refused.message, code="permission_denied", hint=refused.hint) from None
    # As for any start: the callers' layers allow SELECT and INVOKE of the version, which must still be callable.
    calling = replace(run_scope, chain=callers)
    record = invocable_record(calling, plan["action_id"], plan["action_version"])
    execution_id = scope.services.execution_ids.child(plan_id, 0, 0)
    require_new_execution(calling, execution_id, plan["action_id"], record["version"], status="QUEUED",
                          started=True)
    _preview_under_chain(run_scope, record, plan, execution_id)
    started = start_action(calling, plan["action_id"], execution_id, record["version"], plan["input"], None,
                           started_by=plan["proposed_by_execution_id"], mcp_server_id=plan["mcp_server_id"],
                           planned_action_id=plan_id)
    return update_plan(scope, plan, status="CONFIRMED", decided_by=scope.principal.client_id,
                       decided_claims=scope.principal.claims, execution_id=started["execution_id"])


def reject_plan(scope: Scope, plan_id: uuid.UUID, reason: str | None) -> dict:
    if reason is not None:
        if len(reason) > MAX_REASON_CHARS:
            raise InvalidInput(f"the reason is {len(reason)} characters; the limit is {MAX_REASON_CHARS}",
                               hint="say why in fewer words")
        if "\x00" in reason:
            raise InvalidInput("the reason holds a NUL character (\\u0000), which cannot be stored",
                               hint="remove it")
    plan = _deciding(scope, plan_id, "REJECTED")
    return update_plan(scope, plan, status="REJECTED", decided_by=scope.principal.client_id,
                       decided_claims=scope.principal.claims, reason=reason)


def _deciding(scope: Scope, plan_id: uuid.UUID, decision: str) -> dict:
    """The plan this request may decide, locked until the request ends."""
    if scope.frames:
        raise StartNotAllowed("a planned action cannot be decided from inside an execution",
                              hint="a person confirms or rejects it: plannedActions { confirmPlannedAction } "
                                   "or the /inbox page, with their own token")
    plan = load_plan(scope, plan_id, lock=True)
    if plan is None:
        raise NotFound(f"no planned action {plan_id}", hint="check the id; plannedActions lists the plans")
    scope.require("UPDATE", PLAN, {**plan, "status": decision})
    if plan["client_id"] == scope.principal.client_id:
        raise LedgerError("the client that proposed this plan cannot decide it", code="permission_denied",
                          hint="another client must confirm or reject it: a person with their own token, not the "
                               "client whose token the agent proposed with")
    if plan["status"] != "PROPOSED":
        if plan["status"] == "EXPIRED":
            hint = "it expired 24 hours after it was proposed, unconfirmed; have the call proposed again"
        else:
            hint = f"it was {plan['status'].lower()} at {plan['decided_at'].isoformat()}; a plan is decided once"
        raise PlannedActionDecided(f"planned action {plan_id} is {plan['status']}, no longer PROPOSED", hint=hint)
    return plan


def _preview_under_chain(run_scope: Scope, record: dict, plan: dict, execution_id: uuid.UUID) -> None:
    """Run the call under the plan's chain and roll it back: a layer's denial refuses the confirm, naming
    the layer. Other failures (a short balance now) do not: the started run meets them and retries."""
    tree = CallTree(run_scope)
    try:
        with run_scope.savepoint():
            call = run_call(run_scope, tree, record, plan["input"], execution_id=execution_id,
                            parent_execution_id=None, root_execution_id=execution_id, call_sequence=None, depth=0,
                            deadline=run_scope.deadline, event_type="action.started")
            raise psycopg.Rollback()
    finally:
        tree.close()
    if call.status == "FAILED" and call.error["code"] == "action_permission_denied":
        raise LedgerError(f"confirming would run the call under a chain that denies it: {call.error['message']}",
                          code="permission_denied", hint=call.error.get("hint"))


# ---------------------------------------------------------------------------- expiry


def settle_expired_plans(services: Any, batch: int = 100) -> int:
    """Mark EXPIRED the PROPOSED plans whose expiry has passed, in every tenant; how many it settled.

    The due plans are found across tenants (a SECURITY DEFINER function); each expiry is then written in a
    transaction of its tenant, through the one function that updates a plan."""
    with services.db.pool.connection() as conn:
        due = conn.execute("SELECT tenant_id, id FROM ledger_due_planned_actions(%s)", (batch,)).fetchall()
    settled = 0
    for row in due:
        with services.db.transaction(row["tenant_id"]) as conn:
            plan = read_plan(conn, row["tenant_id"], row["id"], lock=True)
            # Decided meanwhile (the lock waited for that decision), or not due after all.
            if plan is None or plan["stored_status"] != "PROPOSED" or plan["status"] != "EXPIRED":
                continue
            update_plan(_expiry_scope(services, conn, plan), plan, status="EXPIRED")
            settled += 1
    if settled:
        log.info("expired %d planned action(s) that nobody decided in time", settled)
    return settled


def _expiry_scope(services: Any, conn: Any, plan: dict) -> Scope:
    """The worker's own write of an expiry: no caller's authority is needed or granted (an empty chain
    allows nothing), only the record event it raises."""
    principal = Principal(plan["tenant_id"], plan["client_id"], "queue", {})
    return Scope(conn=conn, principal=principal, chain=Chain(()), services=services,
                 deadline=time.monotonic() + EXPIRY_WRITE_SECONDS)
