"""Builders for invoke tests: publish a tool, call it."""

from __future__ import annotations

import uuid

from registry_helpers import create, lifecycle

INVOKE = """mutation($id: UUID!, $input: InvokeActionInput!) { actions { invokeAction(id: $id, input: $input) {
  executionId status actionVersion depth rootExecutionId parentExecutionId
  event { eventType data recordType recordId }
  invocation { input output error { code message hint } tools { name actionId actionVersion } logs attempt }
  children { executionId status callSequence depth actionId invocation { output error { code message } } } } } }"""

ALL_ACCESS = [{"effect": "ALLOW", "actions": ["SELECT", "INSERT", "UPDATE", "DELETE", "INVOKE"],
               "resources": ["financial.*"]}]


def tool(name: str, src: str, *, schema: dict | None = None, output_schema: dict | None = None,
         policies: list | None = None, tools: list | None = None, timeout_ms: int | None = None) -> dict:
    block = {"name": name, "description": f"{name} tool",
             "inputSchema": schema or {"type": "object"}}
    if output_schema is not None:
        block["outputSchema"] = output_schema
    if timeout_ms is not None:
        block["responseTimeout"] = timeout_ms
    doc = {"name": name, "kind": "tool", "config": {"runtime": "starlark", "src": src}, "tool": block,
           "policies": ALL_ACCESS if policies is None else policies}
    if tools:
        doc["tools"] = tools
    return doc


def publish(api, doc: dict) -> str:
    action = create(api, doc)
    lifecycle(api, "publishAction", action["actionId"])
    return action["actionId"]


def invoke(api, action_id: str, input=None, *, execution_id: str | None = None, version: int | None = None) -> dict:
    payload = {"executionId": execution_id or str(uuid.uuid4()), "input": input if input is not None else {}}
    if version is not None:
        payload["actionVersion"] = version
    return api.gql(INVOKE, {"id": action_id, "input": payload})["actions"]["invokeAction"]


def invoke_error(api, action_id: str, input=None, **kw) -> dict:
    payload = {"executionId": str(uuid.uuid4()), "input": input if input is not None else {}}
    payload.update(kw)
    return api.error(INVOKE, {"id": action_id, "input": payload})
