"""Session tools, fixed input on references, and run-time resolution."""

from __future__ import annotations

import uuid

from invoke_helpers import INVOKE, invoke, publish, tool
from registry_helpers import UPDATE, lifecycle

SESSION_SRC = 'def run(event):\n    return {"said": event["data"]["text"]}\n'
READ_SESSION = """query($id: UUID!) { actions { session(id: $id) { id actionId input closed inputs { executionId input } } } }"""
INVOKE_WITH_SESSION = """mutation($id: UUID!, $input: InvokeActionInput!) { actions { invokeAction(id: $id, input: $input) {
  executionId status sessionId invocation { output error { code message hint } } } } }"""


def session_tool(api) -> str:
    doc = tool("chat", SESSION_SRC, schema={"type": "object", "properties": {"text": {"type": "string"}}})
    doc["tool"]["session"] = True
    return publish(api, doc)


def call(api, action_id: str, text: str, session_id: str | None = None, execution_id: str | None = None) -> dict:
    payload = {"executionId": execution_id or str(uuid.uuid4()), "input": {"text": text}}
    if session_id:
        payload["sessionId"] = session_id
    return api.gql(INVOKE_WITH_SESSION, {"id": action_id, "input": payload})["actions"]["invokeAction"]


def test_a_call_finds_or_creates_the_callers_session(api):
    action_id = session_tool(api)
    first = call(api, action_id, "hello")
    assert first["status"] == "SUCCEEDED" and first["sessionId"]
    session = api.gql(READ_SESSION, {"id": first["sessionId"]})["actions"]["session"]
    assert session["input"] == {"text": "hello"} and session["closed"] is False
    assert session["inputs"] == [{"executionId": first["executionId"], "input": {"text": "hello"}}]


def test_calls_share_the_open_session_and_inputs_read_oldest_first(api):
    action_id = session_tool(api)
    first, second = call(api, action_id, "one"), call(api, action_id, "two")
    assert first["sessionId"] == second["sessionId"]
    inputs = api.gql(READ_SESSION, {"id": first["sessionId"]})["actions"]["session"]["inputs"]
    assert [i["input"]["text"] for i in inputs] == ["one", "two"]


def test_a_session_id_is_reused_when_given(api):
    action_id = session_tool(api)
    first = call(api, action_id, "one")
    assert call(api, action_id, "two", session_id=first["sessionId"])["sessionId"] == first["sessionId"]


def test_a_closed_session_is_not_callable(api):
    action_id = session_tool(api)
    first = call(api, action_id, "one")
    api.gql("mutation($id: UUID!) { actions { closeSession(id: $id) { closed } } }", {"id": first["sessionId"]})
    error = api.error(INVOKE_WITH_SESSION, {"id": action_id, "input": {
        "executionId": str(uuid.uuid4()), "input": {"text": "x"}, "sessionId": first["sessionId"]}})
    assert error["extensions"]["code"] == "action_not_callable"
    assert call(api, action_id, "fresh")["sessionId"] != first["sessionId"]


def test_the_session_survives_a_failed_call(api):
    doc = tool("picky", 'def run(event):\n    fail("nope")\n')
    doc["tool"]["session"] = True
    action_id = publish(api, doc)
    failed = call(api, action_id, "x")
    assert failed["status"] == "FAILED"
    assert api.gql(READ_SESSION, {"id": failed["sessionId"]})["actions"]["session"]["inputs"][0]["input"] == {"text": "x"}


def _client(api, policies):
    from test_registry import _limited_token

    return api.as_client(_limited_token(api, policies))


BASE = [{"effect": "ALLOW", "actions": ["SELECT", "INSERT", "INVOKE"],
         "resources": ["financial.Action.*", "financial.ActionExecution.*"]}]


def test_without_the_session_grants_the_call_fails_and_records_nothing(api):
    action_id = session_tool(api)
    caller = _client(api, BASE)
    execution_id = str(uuid.uuid4())
    error = caller.error(INVOKE_WITH_SESSION, {"id": action_id, "input": {"executionId": execution_id, "input": {"text": "x"}}})
    assert error["extensions"]["code"] == "permission_denied"
    assert api.gql("query($id: UUID!) { actions { execution(id: $id) { status } } }", {"id": execution_id})["actions"]["execution"] is None


def test_with_the_assertion_form_of_the_grants_the_call_works(api):
    action_id = session_tool(api)
    grants = BASE + [
        {"effect": "ALLOW", "actions": ["SELECT", "INSERT"],
         "resources": ["financial.Session.indexes.*", "financial.SessionInput.indexes.*"]},
        {"effect": "ALLOW", "actions": ["SELECT", "INSERT"],
         "resources": ["financial.Session.document", "financial.SessionInput.document"],
         "assertion": f'context.document.action_id == uuid("{action_id.upper()}")'},
    ]
    caller = _client(api, grants)
    assert call(caller, action_id, "hi")["status"] == "SUCCEEDED"


def test_fixed_input_replaces_the_supplied_input_and_the_merged_input_is_recorded(api):
    callee = publish(api, tool("greet", 'def run(event):\n    return event["data"]\n'))
    caller_doc = tool("caller", 'def run(event):\n    return tools.greet({"name": "mallory", "tone": "warm"})\n',
                      tools=[{"name": "greet", "input": {"name": "alice"}}])
    caller = publish(api, caller_doc)
    execution = invoke(api, caller)
    assert execution["invocation"]["output"] == {"name": "alice", "tone": "warm"}
    child = execution["children"][0]
    assert child["actionId"] == callee and child["invocation"]["output"] == {"name": "alice", "tone": "warm"}


def test_cel_fixed_input_reads_the_session_input(api):
    publish(api, tool("greet", 'def run(event):\n    return event["data"]\n'))
    doc = tool("chatty", 'def run(event):\n    return tools.greet({})\n',
               tools=[{"name": "greet", "input": {"opening": {"$cel": "session.input.text"}}}])
    doc["tool"]["session"] = True
    action_id = publish(api, doc)
    call(api, action_id, "first words")
    second = call(api, action_id, "later words")
    assert second["invocation"]["output"] == {"opening": "first words"}


def test_an_unpinned_reference_whose_new_version_rejects_the_fixed_input_fails_with_a_hint(api):
    callee_doc = tool("greet", 'def run(event):\n    return event["data"]\n')
    callee = publish(api, callee_doc)
    caller = publish(api, tool("caller", 'def run(event):\n    return tools.greet({})\n',
                               tools=[{"name": "greet", "input": {"name": "alice"}}]))
    strict = tool("greet", 'def run(event):\n    return event["data"]\n',
                  schema={"type": "object", "properties": {"name": {"type": "integer"}}})
    api.gql(UPDATE, {"id": callee, "input": strict})
    execution = invoke(api, caller)
    assert execution["status"] == "FAILED"
    error = execution["invocation"]["error"]
    assert error["code"] == "action_input_invalid" and "pin a version" in error["hint"]


def test_a_name_collision_appearing_after_an_update_fails_the_execution(api):
    publish(api, tool("alpha", 'def run(event):\n    return 1\n'))
    beta = publish(api, tool("beta", 'def run(event):\n    return 2\n'))
    caller = publish(api, tool("caller", 'def run(event):\n    return tools.alpha({})\n',
                               tools=[{"name": "alpha"}, {"name": "beta"}]))
    renamed = tool("beta", 'def run(event):\n    return 2\n')
    renamed["tool"]["name"] = "alpha"
    api.gql(UPDATE, {"id": beta, "input": renamed})
    execution = invoke(api, caller)
    error = execution["invocation"]["error"]
    assert error["code"] == "action_failure"
    assert "alpha" in error["message"] and "beta" in error["message"] and "pin" in error["hint"]


def test_the_invocation_records_the_versions_its_references_resolved_to(api):
    callee = publish(api, tool("greet", 'def run(event):\n    return 1\n'))
    caller = publish(api, tool("caller", 'def run(event):\n    return tools.greet({})\n', tools=[{"name": "greet"}]))
    api.gql(UPDATE, {"id": callee, "input": tool("greet", 'def run(event):\n    return 2\n')})
    execution = invoke(api, caller)
    assert execution["invocation"]["tools"] == [{"name": "greet", "actionId": callee, "actionVersion": 2}]
    assert execution["invocation"]["output"] == 2
