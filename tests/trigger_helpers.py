"""Builders for trigger tests: write a trigger, list what it ran, a client of one's own."""

from __future__ import annotations

import time
import uuid

from mcp_helpers import CREATE_CLIENT, token_for

TRIGGER_FIELDS = "id name event condition actionId actionVersion input enabled clientId createdAt"
CREATE_TRIGGER = f"""mutation($id: UUID!, $input: TriggerInput!) {{ triggers {{ createTrigger(id: $id, input: $input) {{
  {TRIGGER_FIELDS} }} }} }}"""
UPDATE_TRIGGER = f"""mutation($id: UUID!, $input: TriggerInput!) {{ triggers {{ updateTrigger(id: $id, input: $input) {{
  {TRIGGER_FIELDS} }} }} }}"""
DELETE_TRIGGER = f"""mutation($id: UUID!) {{ triggers {{ deleteTrigger(id: $id) {{ {TRIGGER_FIELDS} }} }} }}"""
READ_TRIGGER = f"""query($id: UUID!) {{ triggers {{ trigger(id: $id) {{ {TRIGGER_FIELDS} }} }} }}"""
LIST_TRIGGERS = f"""query($first: Int, $after: String) {{ triggers {{ triggers(first: $first, after: $after) {{
  {TRIGGER_FIELDS} }} }} }}"""

RUN_FIELDS = """executionId actionId status triggerId triggerDepth depth attempts startedBy { executionId }
  event { eventType data recordType recordId } invocation { output error { code message hint } }"""
EXECUTIONS = f"""query($where: ExecutionWhere, $first: Int, $after: String) {{ actions {{
  executions(where: $where, first: $first, after: $after) {{ {RUN_FIELDS} }} }} }}"""

REVIEW = 'def run(event):\n    return {"eventType": event["eventType"], "data": event["data"]}\n'


def trigger_input(action_id: str, *, name: str = "review_large_transfers", event: str = "financial.Transfer.inserted",
                  **fields) -> dict:
    return {"name": name, "event": event, "actionId": action_id, **fields}


def create_trigger(api, action_id: str, **fields) -> dict:
    return api.gql(CREATE_TRIGGER, {"id": str(uuid.uuid4()), "input": trigger_input(action_id, **fields)})[
        "triggers"]["createTrigger"]


def create_trigger_error(api, action_id: str, **fields) -> dict:
    return api.error(CREATE_TRIGGER, {"id": str(uuid.uuid4()), "input": trigger_input(action_id, **fields)})


def problems(error: dict) -> list[dict]:
    assert error["extensions"]["code"] == "trigger_definition_invalid", error
    return error["extensions"]["problems"]


def runs(api, trigger_id: str | None = None, **where) -> list[dict]:
    """The executions listed under `where` (a trigger's runs, by default), oldest first."""
    if trigger_id is not None:
        where["triggerId"] = trigger_id
    return api.gql(EXECUTIONS, {"where": where, "first": 500})["actions"]["executions"]


def wait_for_runs(api, trigger_id: str, count: int, statuses=("SUCCEEDED", "FAILED", "CANCELLED"),
                  timeout: float = 30.0) -> list[dict]:
    """The trigger's runs once `count` of them have finished."""
    deadline = time.monotonic() + timeout
    while True:
        found = runs(api, trigger_id)
        if len([r for r in found if r["status"] in statuses]) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def new_client(api, name: str, policies: list[dict]) -> tuple[str, str]:
    """A client of the tenant with `policies`: (its id, a token for it)."""
    client_id = str(uuid.uuid4())
    api.gql(CREATE_CLIENT, {"id": client_id, "name": name, "policies": policies})
    return client_id, token_for(api, client_id)
