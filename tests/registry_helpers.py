"""Builders for registry tests."""

from __future__ import annotations

import uuid

ACTION_FIELDS = """actionId version latestVersion name description kind config status pending enabled native
  tool { name description inputSchema outputSchema output { offload } responseTimeout session }
  policies { effect actions resources assertion }
  tools { name actionId actionVersion input action { name version } }"""

CREATE = f"""mutation($id: UUID!, $input: ActionInput!) {{ actions {{ createAction(id: $id, input: $input) {{
  {ACTION_FIELDS} }} }} }}"""
UPDATE = f"""mutation($id: UUID!, $input: ActionInput!) {{ actions {{ updateAction(id: $id, input: $input) {{
  {ACTION_FIELDS} }} }} }}"""
READ = f"""query($id: UUID!, $version: Int) {{ actions {{ action(id: $id, version: $version) {{ {ACTION_FIELDS} }} }} }}"""
LIFECYCLE = """mutation($id: UUID!) {{ actions {{ {op}(id: $id) {{ actionId status pending version latestVersion }} }} }}"""

SIMPLE_SRC = 'def run(event):\n    return {"echo": event["data"]["text"]}\n'


def tool_input(name: str = "echo", src: str = SIMPLE_SRC, **extra) -> dict:
    doc = {
        "name": name,
        "description": f"the {name} tool",
        "kind": "tool",
        "config": {"runtime": "starlark", "src": src},
        "tool": {
            "name": name,
            "description": f"{name} something",
            "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
        },
    }
    doc.update(extra)
    return doc


def create(api, doc: dict, action_id: str | None = None) -> dict:
    action_id = action_id or str(uuid.uuid4())
    return api.gql(CREATE, {"id": action_id, "input": doc})["actions"]["createAction"]


def create_error(api, doc: dict) -> dict:
    return api.error(CREATE, {"id": str(uuid.uuid4()), "input": doc})


def problems(error: dict) -> list[dict]:
    assert error["extensions"]["code"] == "action_definition_invalid", error
    return error["extensions"]["problems"]


def lifecycle(api, op: str, action_id: str) -> dict:
    return api.gql(LIFECYCLE.format(op=op), {"id": action_id})["actions"][op]
