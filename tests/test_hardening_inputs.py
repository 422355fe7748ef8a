"""Inputs are kept exactly as received, or refused (DESIGN sections 7 and 17): a NUL character, which jsonb
cannot hold, and a number beyond a double's range are `bad_request`, naming where, with nothing recorded."""

from __future__ import annotations

import json
import uuid

import psycopg
import pytest

from invoke_helpers import INVOKE, invoke, publish, tool
from registry_helpers import tool_input
from test_queue import START

ECHO = 'def run(event):\n    return event["data"]\n'
EXECUTION = "query($id: UUID!) { actions { execution(id: $id) { status invocation { input output } } } }"


def body_of(api, document: str, action_id: str, execution_id: str, data) -> dict:
    return api.post(document, {"id": action_id, "input": {"executionId": execution_id, "input": data}}).json()


def recorded(api, execution_id: str):
    return api.gql(EXECUTION, {"id": execution_id})["actions"]["execution"]


def rows(db_url: str, execution_id: str) -> int:
    with psycopg.connect(db_url) as conn:
        return conn.execute("SELECT count(*) FROM executions WHERE id = %s", (execution_id,)).fetchone()[0]


@pytest.mark.parametrize("document", [INVOKE, START], ids=["invoke", "start"])
@pytest.mark.parametrize("data,path", [({"s": "a\x00b"}, "/s"), ({"k\x00": 1}, "/"),
                                       ({"list": [1, {"deep": "\x00"}]}, "/list/1/deep")])
def test_a_nul_in_an_input_is_a_bad_request_naming_where_and_records_nothing(api, db_url, document, data, path):
    action_id = publish(api, tool("echo", ECHO))
    execution_id = str(uuid.uuid4())
    for _ in range(2):  # the identical retry answers the same, not execution_id_conflict
        error = body_of(api, document, action_id, execution_id, data)["errors"][0]
        assert error["extensions"]["code"] == "bad_request", error
        assert path in error["message"] and "NUL" in error["message"]
        assert error["extensions"]["hint"]
    assert recorded(api, execution_id) is None
    assert rows(db_url, execution_id) == 0


def test_an_input_holding_u_fffd_is_its_own_input_not_a_nul_one(api):
    action_id = publish(api, tool("echo", ECHO))
    execution_id = str(uuid.uuid4())
    assert body_of(api, INVOKE, action_id, execution_id, {"s": "a\x00b"})["errors"][0]["extensions"]["code"] \
        == "bad_request"
    done = invoke(api, action_id, {"s": "a\ufffdb"}, execution_id=execution_id)
    assert done["status"] == "SUCCEEDED"
    assert done["invocation"]["output"] == {"s": "a\ufffdb"}


@pytest.mark.parametrize("literal", ["1e400", "-1E+400", "1e-400", "[1, {a: 2.5e999}]"])
@pytest.mark.parametrize("field", ["invokeAction", "startAction"])
def test_a_float_literal_beyond_a_double_is_a_bad_request_and_records_nothing(api, db_url, literal, field):
    action_id = publish(api, tool("echo", ECHO))
    execution_id = str(uuid.uuid4())
    body = api.post(f"""mutation {{ actions {{ {field}(id: "{action_id}", input: {{executionId: "{execution_id}",
      input: {{x: {literal}}}}}) {{ executionId }} }} }}""").json()
    error = body["errors"][0]
    assert error["extensions"]["code"] == "bad_request", body
    assert "64-bit float" in error["message"] and error["extensions"]["hint"]
    assert rows(db_url, execution_id) == 0


def test_a_tiny_number_in_a_body_is_a_bad_request_not_zero(api):
    action_id = publish(api, tool("echo", ECHO))
    body = ('{"query": %s, "variables": {"id": "%s", "input": {"executionId": "%s", "input": {"x": 1e-400}}}}'
            % (json.dumps(INVOKE), action_id, uuid.uuid4())).encode()
    response = api.http.post("/graphql", content=body, headers={"Authorization": f"Bearer {api.token}",
                                                                "Content-Type": "application/json"})
    assert response.status_code == 400
    assert response.json()["errors"][0]["extensions"]["code"] == "bad_request"


def test_float_literals_within_range_are_kept(api):
    action_id = publish(api, tool("echo", ECHO))
    body = api.post(f"""mutation {{ actions {{ invokeAction(id: "{action_id}", input: {{executionId: "{uuid.uuid4()}",
      input: {{a: 1.5e300, b: -2.5, c: 5e-324, d: 0.0e-999}}}}) {{ invocation {{ output }} }} }} }}""").json()
    assert body["data"]["actions"]["invokeAction"]["invocation"]["output"] == {"a": 1.5e300, "b": -2.5, "c": 5e-324,
                                                                              "d": 0.0}


def test_an_integer_literal_beyond_64_bits_is_recorded_exactly(api):
    action_id = publish(api, tool("echo", ECHO))
    execution_id = str(uuid.uuid4())
    big = 123456789012345678901234567890
    body = api.post(f"""mutation {{ actions {{ invokeAction(id: "{action_id}", input: {{executionId: "{execution_id}",
      input: {{n: {big}}}}}) {{ status invocation {{ error {{ code }} }} }} }} }}""").json()
    assert body["data"]["actions"]["invokeAction"]["invocation"]["error"]["code"] == "action_input_invalid"
    assert recorded(api, execution_id)["invocation"]["input"] == {"n": big}


def test_a_float_setting_beyond_a_double_is_refused_not_stored(api):
    doc = tool_input()
    body = api.post("""mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) {
      actionId } } }""", {"id": str(uuid.uuid4()), "input": doc}).json()
    assert "errors" not in body
    literal = api.post(f"""mutation {{ actions {{ createAction(id: "{uuid.uuid4()}", input: {{name: "other",
      kind: "tool", config: {{runtime: "starlark", src: "def run(event):\\n    return 1\\n"}},
      tool: {{name: "other", description: "d", inputSchema: {{type: "object"}}}},
      execution: {{backoffSeconds: 1e400}}}}) {{ actionId }} }} }}""").json()
    assert literal["errors"][0]["extensions"]["code"] in ("bad_request", "action_definition_invalid"), literal


def test_a_nul_in_a_definition_is_refused_not_altered(api):
    doc = tool_input()
    doc["tool"]["description"] = "a\x00b"
    error = api.error(
        """mutation($id: UUID!, $input: ActionInput!) { actions { createAction(id: $id, input: $input) { actionId } } }""",
        {"id": str(uuid.uuid4()), "input": doc})
    assert error["extensions"]["code"] in ("invalid_input", "bad_request", "action_definition_invalid"), error
