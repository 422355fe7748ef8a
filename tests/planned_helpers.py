"""Helpers for planned actions' tests (DESIGN 14): a server whose transfer needs a person's confirmation, an
assistant client that proposes through it, and the plan's GraphQL reads and decisions."""

from __future__ import annotations

import uuid

from mcp_helpers import CREATE_CLIENT, EVERYTHING, create_server, reference, token_for

PLAN_FIELDS = """id actionId actionVersion input status preview proposedByExecutionId clientId mcpServerId expiresAt
  decidedBy decidedAt reason executionId createdAt execution { executionId status startedBy { executionId } }"""
PLAN = f"""query($id: UUID!) {{ plannedActions {{ plannedAction(id: $id) {{ {PLAN_FIELDS} }} }} }}"""
PLANS = f"""query($status: PlannedActionStatus, $first: Int, $after: String) {{ plannedActions {{
  plannedActions(status: $status, first: $first, after: $after) {{ {PLAN_FIELDS} }} }} }}"""
CONFIRM = f"""mutation($id: UUID!) {{ plannedActions {{ confirmPlannedAction(id: $id) {{ {PLAN_FIELDS} }} }} }}"""
REJECT = f"""mutation($id: UUID!, $reason: String) {{ plannedActions {{
  rejectPlannedAction(id: $id, reason: $reason) {{ {PLAN_FIELDS} }} }} }}"""
# The natives a model uses beside the confirm tool: invoke, the tasks, code mode.
NATIVES = [reference("invoke"), reference("get_task"), reference("cancel_task"), reference("program")]


def confirm_desk(api, policies=None, name: str = "desk") -> str:
    """A server listing `transfer` with confirm, `get_account_activity` without, and the natives."""
    return create_server(api, name, [reference("transfer", confirm=True), reference("get_account_activity"),
                                     *NATIVES], EVERYTHING if policies is None else policies)


def new_client(api, name: str, policies: list[dict], *, mcp_server: str | None = None) -> tuple[str, str]:
    """(client id, token), the token confined to `mcp_server` when given."""
    client_id = str(uuid.uuid4())
    api.gql(CREATE_CLIENT, {"id": client_id, "name": name, "policies": policies})
    return client_id, token_for(api, client_id, mcp_server=mcp_server)


def moving(source: str, target: str, amount: int, memo: str | None = None) -> dict:
    move = {"transfer_id": str(uuid.uuid4()), "from_account": source, "to_account": target, "amount": amount}
    return move if memo is None else {**move, "memo": memo}


def plan_of(api, plan_id: str) -> dict | None:
    return api.gql(PLAN, {"id": plan_id})["plannedActions"]["plannedAction"]


def confirm(api, plan_id: str) -> dict:
    return api.gql(CONFIRM, {"id": plan_id})["plannedActions"]["confirmPlannedAction"]


def reject(api, plan_id: str, reason: str | None = None) -> dict:
    return api.gql(REJECT, {"id": plan_id, "reason": reason})["plannedActions"]["rejectPlannedAction"]


UPDATE_CLIENT_POLICIES = """mutation($id: UUID!, $name: String!, $policies: [PolicyStatementInput!]!) { clients {
  updateClient(id: $id, input: {name: $name, policies: $policies}) { id } } }"""
DISABLE_CLIENT = """mutation($id: UUID!) { clients { disableClient(id: $id) { id enabled } } }"""
