"""Proposals (DESIGN 14): a model's call through a `confirm: true` reference never runs its tool; it becomes a
planned action that a person confirms or rejects.

`propose` is the one way such a call is made, whichever path it takes: an MCP `tools/call` of the tool,
`invoke` of it, `tools.x()` from `program`, or an agent's tool call. The proposal is a child execution of
the proposing execution (the MCP call or the agent's turn), SUCCEEDED with the planned result. Beneath it,
the preview: the call itself, run in a savepoint that is then rolled back, its records kept with
`rolledBack: true`. The plan records what a confirmed run needs to rebuild the proposing chain.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable

from ..runtime import CallFailure
from ..scope import Scope
from . import admission
from .plan_records import insert_plan
from .previews import rolled_back
from .records import PendingExecution
from .tree import CallTree

PLANNED_RESULT_SCHEMA: dict = {
    "type": "object",
    "description": "This call was not made: it is a planned action that waits for a person to confirm it.",
    "properties": {
        "planned": {"type": "boolean", "enum": [True]},
        "plannedActionId": {"type": "string", "format": "uuid",
                            "description": "The plan's id: get_task follows it (working until a person decides)"},
        "status": {"type": "string", "enum": ["PROPOSED"]},
        "preview": {
            "type": "object",
            "description": "What the call would do now: run, then rolled back",
            "properties": {
                "status": {"type": "string", "enum": ["SUCCEEDED", "FAILED"]},
                "output": {},
                "error": {"type": "object"},
                "children": {"type": "array", "items": {"type": "object", "properties": {
                    "actionId": {"type": "string"}, "status": {"type": "string"}}}},
            },
            "required": ["status", "children"],
        },
    },
    "required": ["planned", "plannedActionId", "status", "preview"],
}


@dataclass(frozen=True)
class Proposer:
    """Whose proposal it is beside the client: the MCP server the call came through, or the agent (its
    action id and version) whose turn made it. Their layer sits between the clients' and the stack's in a
    confirmed run."""

    mcp_server_id: uuid.UUID | None = None
    agent: tuple[uuid.UUID, int] | None = None


def propose(scope: Scope, tree: CallTree, parent: PendingExecution, target: dict, reference: dict, input: Any, *,
            proposer: Proposer, sequence: int, execution_id: uuid.UUID, deadline: float,
            run_call: Callable[..., PendingExecution]) -> PendingExecution:
    """Propose calling `target` (the version `reference` resolved to) with `input` (fixed input merged).

    The caller has admitted the call (re-entry, depth, count) and derived `execution_id` for call number
    `sequence` of `parent`. Returns the proposal: SUCCEEDED with the planned result, or FAILED when the
    call cannot be proposed (its input fails the tool's schema, the tool keeps sessions); a failure
    records no plan. `reference` is the confirm reference itself (its fixed input is already merged).
    `run_call`: the engine's, which the caller holds (the engine's turn of an agent proposes through here).
    """
    planned = {**target, "tool": {**(target.get("tool") or {}), "outputSchema": PLANNED_RESULT_SCHEMA}}
    return run_call(scope, tree, planned, input, execution_id=execution_id,
                    parent_execution_id=parent.execution_id, root_execution_id=parent.root_execution_id,
                    call_sequence=sequence, depth=parent.depth + 1, deadline=deadline,
                    parent_attempt=parent.attempt, body=partial(_proposal, target, proposer, run_call))


def _proposal(target: dict, proposer: Proposer, run_call: Callable[..., PendingExecution], scope: Scope,
              tree: CallTree, proposal: PendingExecution, deadline: float) -> dict:
    """The proposal's body: the preview, then the plan; its output is the planned result."""
    name = (target.get("tool") or {}).get("name") or target["name"]
    if (target.get("tool") or {}).get("session"):
        raise CallFailure("action_not_callable", f"{name!r} keeps sessions, and a planned action runs as a start, "
                          "which a session tool cannot",
                          "pin the reference to a version without sessions, or list the tool without confirm")
    preview = _preview(scope, tree, proposal, target, deadline, run_call)
    plan = insert_plan(scope, {
        "id": uuid.uuid4(), "action_id": target["action_id"], "action_version": target["version"],
        "input": proposal.input, "preview": preview, "proposed_by_execution_id": proposal.parent_execution_id,
        "proposal_execution_id": proposal.execution_id, "client_id": scope.principal.client_id,
        "client_claims": scope.principal.claims, "mcp_server_id": proposer.mcp_server_id,
        "agent_action_id": proposer.agent[0] if proposer.agent else None,
        "agent_action_version": proposer.agent[1] if proposer.agent else None,
        "stack": [{"actionId": str(action_id), "version": version} for action_id, version in tree.stack
                  if (action_id, version) != proposer.agent],
    })
    return {"planned": True, "plannedActionId": str(plan["id"]), "status": "PROPOSED", "preview": preview}


def _preview(scope: Scope, tree: CallTree, proposal: PendingExecution, target: dict, deadline: float,
             run_call: Callable[..., PendingExecution]) -> dict:
    """The call run in a savepoint that is then rolled back: `{status, output | error, children}`, its records
    kept beneath the proposal with rolledBack true."""
    try:
        admission.count_call(tree)
    except admission.CallRefused as refused:
        raise CallFailure(refused.code, refused.message, refused.hint) from None
    return rolled_back(scope, tree, partial(
        run_call, scope, tree, target, proposal.input,
        execution_id=scope.services.execution_ids.child(proposal.execution_id, proposal.attempt, 1),
        parent_execution_id=proposal.execution_id, root_execution_id=proposal.root_execution_id,
        call_sequence=1, depth=proposal.depth + 1, deadline=deadline, parent_attempt=proposal.attempt))
