"""Repeated executionIds and the ids a call names (DESIGN section 17): concurrent starts with one id answer
the recorded execution or `retryable`; repeats compare JSON by type and value; a missing action is
`not_found`."""

from __future__ import annotations

import uuid

import psycopg
import pytest

from invoke_helpers import INVOKE, invoke, publish, tool
from registry_helpers import create
from test_invoke_concurrency import in_threads
from test_queue import START

ECHO = 'def run(event):\n    return event["data"]\n'


def start_body(api, action_id: str, execution_id: str, data) -> dict:
    return api.post(START, {"id": action_id, "input": {"executionId": execution_id, "input": data}}).json()


def invoke_body(api, action_id: str, execution_id: str, data) -> dict:
    return api.post(INVOKE, {"id": action_id, "input": {"executionId": execution_id, "input": data}}).json()


def code_of(body: dict) -> str | None:
    return body["errors"][0]["extensions"]["code"] if body.get("errors") else None


# ---------------------------------------------------------------------------- item 5: concurrent starts


def test_sixteen_concurrent_starts_with_one_execution_id_answer_one_queued_execution(api, db_url):
    action_id = publish(api, tool("echo", ECHO))
    execution_id = str(uuid.uuid4())
    data = {"n": 1}
    bodies = in_threads(16, lambda _: start_body(api, action_id, execution_id, data))
    answered = [b["data"]["actions"]["startAction"] for b in bodies if not b.get("errors")]
    codes = [code_of(b) for b in bodies if b.get("errors")]
    assert set(codes) <= {"retryable"}, [b["errors"] for b in bodies if b.get("errors")]
    assert answered, bodies
    assert {(a["executionId"], a["event"]["data"]["n"]) for a in answered} == {(execution_id, 1)}
    with psycopg.connect(db_url) as conn:  # as the owner: exactly one row, one queue entry
        assert conn.execute("SELECT count(*) FROM executions WHERE id = %s", (execution_id,)).fetchone()[0] == 1
        assert conn.execute("SELECT count(*) FROM execution_queue WHERE execution_id = %s",
                            (execution_id,)).fetchone()[0] == 1


def test_sixteen_concurrent_invokes_with_one_execution_id_answer_one_execution(api, db_url):
    action_id = publish(api, tool("echo", ECHO))
    execution_id = str(uuid.uuid4())
    bodies = in_threads(16, lambda _: invoke_body(api, action_id, execution_id, {"n": 2}))
    assert {code_of(b) for b in bodies} <= {None, "retryable"}, [b["errors"] for b in bodies if b.get("errors")]
    answered = [b["data"]["actions"]["invokeAction"] for b in bodies if not b.get("errors")]
    assert answered
    assert {(a["executionId"], a["status"]) for a in answered} == {(execution_id, "SUCCEEDED")}
    assert all(a["invocation"]["output"] == {"n": 2} for a in answered)
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT count(*) FROM executions WHERE id = %s", (execution_id,)).fetchone()[0] == 1


# ---------------------------------------------------------------------------- item 6: exact comparison


@pytest.mark.parametrize("first,second", [
    ({"x": True}, {"x": 1}),
    ({"x": 1}, {"x": True}),
    ({"x": False}, {"x": 0}),
    ({"x": 0}, {"x": None}),
    ({"x": "1"}, {"x": 1}),
    ({"x": [1]}, {"x": [True]}),
    ({"x": {"a": True}}, {"x": {"a": 1.0}}),
])
def test_a_repeated_invoke_compares_its_input_by_type(api, first, second):
    action_id = publish(api, tool("echo", ECHO))
    execution_id = str(uuid.uuid4())
    assert invoke(api, action_id, first, execution_id=execution_id)["status"] == "SUCCEEDED"
    assert code_of(invoke_body(api, action_id, execution_id, second)) == "execution_id_conflict"
    assert code_of(invoke_body(api, action_id, execution_id, first)) is None


@pytest.mark.parametrize("first,second", [({"x": True}, {"x": 1}), ({"x": 1}, {"x": True}),
                                          ({"x": [False]}, {"x": [0]})])
def test_a_repeated_start_compares_its_input_by_type(api, first, second):
    action_id = publish(api, tool("echo", ECHO))
    execution_id = str(uuid.uuid4())
    assert code_of(start_body(api, action_id, execution_id, first)) is None
    assert code_of(start_body(api, action_id, execution_id, second)) == "execution_id_conflict"
    assert code_of(start_body(api, action_id, execution_id, first)) is None


@pytest.mark.parametrize("value", [1.0, 1e300, 1e2, -0.0, 0.1, 2**64 - 1, 10**30, 5e-324, 123456789.125])
def test_an_identical_repeat_of_any_number_returns_the_record(api, value):
    # A number goes through jsonb's numeric and back: 1e300 comes back as a 301-digit integer, 1e2 as 100.
    # (A start refuses an integer beyond 64 bits at once; a call records it, FAILED.)
    action_id = publish(api, tool("echo", ECHO))
    for send in (invoke_body, start_body) if value != 10**30 else (invoke_body,):
        execution_id = str(uuid.uuid4())
        first = send(api, action_id, execution_id, {"x": value})
        assert code_of(first) is None, first
        again = send(api, action_id, execution_id, {"x": value})
        assert code_of(again) is None, again


def test_numbers_of_equal_value_are_the_same_json_number(api):
    """JSON has one number type: 1 and 1.0 are one value (as for JSON Schema's const and enum, and jsonb)."""
    action_id = publish(api, tool("echo", ECHO))
    execution_id = str(uuid.uuid4())
    assert invoke(api, action_id, {"x": 1}, execution_id=execution_id)["status"] == "SUCCEEDED"
    assert code_of(invoke_body(api, action_id, execution_id, {"x": 1.0})) is None
    assert code_of(invoke_body(api, action_id, execution_id, {"x": 1.5})) == "execution_id_conflict"


def test_a_repeat_within_one_request_compares_by_type_too(api):
    action_id = publish(api, tool("echo", ECHO))
    execution_id = str(uuid.uuid4())
    doc = """mutation($id: UUID!, $e: UUID!) { actions {
      a: invokeAction(id: $id, input: {executionId: $e, input: {x: true}}) { status }
      b: invokeAction(id: $id, input: {executionId: $e, input: {x: 1}}) { status } } }"""
    body = api.post(doc, {"id": action_id, "e": execution_id}).json()
    assert code_of(body) == "execution_id_conflict", body


# ---------------------------------------------------------------------------- item 10: missing actions


def test_invoking_an_action_that_does_not_exist_is_not_found(api):
    body = invoke_body(api, str(uuid.uuid4()), str(uuid.uuid4()), {})
    assert code_of(body) == "not_found", body
    assert body["errors"][0]["extensions"].get("hint")


def test_starting_an_action_that_does_not_exist_is_not_found(api):
    body = start_body(api, str(uuid.uuid4()), str(uuid.uuid4()), {})
    assert code_of(body) == "not_found", body


def test_an_action_of_another_tenant_is_not_found(api, other_api):
    theirs = publish(other_api, tool("echo", ECHO))
    assert code_of(invoke_body(api, theirs, str(uuid.uuid4()), {})) == "not_found"
    assert code_of(start_body(api, theirs, str(uuid.uuid4()), {})) == "not_found"


def test_a_missing_version_and_an_unpublished_action_stay_not_callable(api):
    action_id = publish(api, tool("echo", ECHO))
    body = api.post(INVOKE, {"id": action_id, "input": {"executionId": str(uuid.uuid4()), "input": {},
                                                         "actionVersion": 7}}).json()
    assert code_of(body) == "action_not_callable"
    body = api.post(START, {"id": action_id, "input": {"executionId": str(uuid.uuid4()), "input": {},
                                                        "actionVersion": 7}}).json()
    assert code_of(body) == "action_not_callable"
    unpublished = create(api, tool("draft", ECHO))["actionId"]
    assert code_of(invoke_body(api, unpublished, str(uuid.uuid4()), {})) == "action_not_callable"
    assert code_of(start_body(api, unpublished, str(uuid.uuid4()), {})) == "action_not_callable"


def test_an_update_changing_true_to_1_writes_a_version(api):
    from registry_helpers import UPDATE, tool_input

    doc = tool_input()
    doc["tool"]["inputSchema"]["properties"]["flag"] = {"const": True}
    action_id = create(api, doc)["actionId"]
    doc["tool"]["inputSchema"]["properties"]["flag"] = {"const": 1}
    updated = api.gql(UPDATE, {"id": action_id, "input": doc})["actions"]["updateAction"]
    assert updated["version"] == 2
    assert updated["tool"]["inputSchema"]["properties"]["flag"] == {"const": 1}
    again = api.gql(UPDATE, {"id": action_id, "input": doc})["actions"]["updateAction"]
    assert again["version"] == 2  # the same input again writes nothing
