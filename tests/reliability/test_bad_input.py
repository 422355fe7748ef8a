"""What the fuzzer (reliability/fuzz.py) found, pinned as regressions: lone surrogates and NUL characters.

A lone surrogate (`"\\ud800"`) is not Unicode text: the body is refused (400 `bad_request`). A NUL
(`"\\u0000"`) is Unicode but PostgreSQL stores it neither in text nor in jsonb: a direct write is refused
with `invalid_input`, a call's input holding one is `bad_request` before any work (DESIGN section 17: an
input is kept exactly or refused, never altered), an output holding one fails that call, and what a program
printed or failed with is recorded with U+FFFD in its place. None of it is an `internal_error` any more.
"""

from __future__ import annotations

import uuid

from helpers import ACCOUNT, CREATE_ACCOUNT, CREATE_TRANSFER, balance, funded_account
from invoke_helpers import INVOKE, invoke, publish, tool
from test_queue import start, wait_for, worker  # noqa: F401 - the worker fixture

EXECUTION = """query($id: UUID!) { actions { execution(id: $id) { status invocation { input output logs
  error { code message } } } } }"""


def _raw(api, body: bytes):
    return api.http.post("/graphql", content=body, headers={"Authorization": f"Bearer {api.token}",
                                                            "Content-Type": "application/json"})


def test_a_lone_surrogate_in_a_variable_is_a_bad_request(api):
    response = _raw(api, b'{"query": "query($id: UUID!) { financial { account(id: $id) { id } } }",'
                         b' "variables": {"id": "\\ud800"}}')
    assert response.status_code == 400
    error = response.json()["errors"][0]
    assert error["extensions"]["code"] == "bad_request"
    assert "surrogate" in error["message"]


def test_a_lone_surrogate_in_a_key_or_as_raw_bytes_is_a_bad_request(api):
    for body in (b'{"query": "{ viewer { tenantId } }", "variables": {"\\udc00": 1}}',
                 b'{"query": "{ viewer { tenantId } }", "variables": {"x": "\xed\xa0\x80"}}'):
        response = _raw(api, body)
        assert response.status_code == 400, body
        assert response.json()["errors"][0]["extensions"]["code"] == "bad_request"


def test_a_surrogate_pair_is_one_character_and_fine(api):
    account_id = str(uuid.uuid4())
    body = ('{"query": "mutation($id: UUID!) { financial { createAccount(id: $id, input: {name: \\"\\\\ud83d\\\\ude00\\",'
            ' currency: \\"USD\\"}) { name } } }", "variables": {"id": "%s"}}' % account_id).encode()
    response = _raw(api, body)
    assert response.json()["data"]["financial"]["createAccount"]["name"] == "\U0001F600", response.text


def test_a_nul_in_a_memo_or_a_name_is_invalid_input_and_writes_nothing(api):
    opening, funded = funded_account(api, 100)
    transfer_id, account_id = str(uuid.uuid4()), str(uuid.uuid4())
    error = api.error(CREATE_TRANSFER, {"id": transfer_id, "from": opening, "to": funded, "amount": 5, "memo": "a\x00"})
    assert error["extensions"]["code"] == "invalid_input"
    assert "NUL" in error["message"]
    error = api.error(CREATE_ACCOUNT, {"id": account_id, "name": "\x00", "currency": "USD", "overdraft": False})
    assert error["extensions"]["code"] == "invalid_input"
    assert balance(api, funded) == 100
    assert api.gql(ACCOUNT, {"id": account_id})["financial"]["account"] is None


def test_a_nul_in_a_graphql_string_literal_is_invalid_input(api):
    opening, funded = funded_account(api, 100)
    body = api.post(f"""mutation {{ financial {{ createTransfer(id: "{uuid.uuid4()}", input: {{fromAccountId: "{opening}",
      toAccountId: "{funded}", amount: 1, memo: "\\u0000"}}) {{ id }} }} }}""").json()
    assert body["errors"][0]["extensions"]["code"] == "invalid_input", body
    assert balance(api, funded) == 100


def test_a_nul_in_a_calls_input_is_a_bad_request_and_records_nothing(api):
    echo = publish(api, tool("echo", 'def run(event):\n    return event["data"]\n'))
    for data in ({"s": "a\x00b"}, {"k\x00": 1}):
        execution_id = str(uuid.uuid4())
        error = api.error(INVOKE, {"id": echo, "input": {"executionId": execution_id, "input": data}})
        assert error["extensions"]["code"] == "bad_request"
        assert "NUL" in error["message"]
        assert api.gql(EXECUTION, {"id": execution_id})["actions"]["execution"] is None


def test_a_program_returning_printing_or_failing_with_a_nul_fails_at_most_its_own_call(api):
    both = """mutation($a: UUID!, $b: UUID!, $c: UUID!, $g: UUID!) { actions {
      a: invokeAction(id: $a, input: {executionId: "%s", input: {}}) { executionId status invocation { error { code } } }
      b: invokeAction(id: $b, input: {executionId: "%s", input: {}}) { executionId status invocation { logs } }
      c: invokeAction(id: $c, input: {executionId: "%s", input: {}}) { executionId status invocation { error { code } } }
      g: invokeAction(id: $g, input: {executionId: "%s", input: {}}) { status invocation { output } } } }""" % tuple(
        str(uuid.uuid4()) for _ in range(4))
    ids = {"a": publish(api, tool("returns", 'def run(event):\n    return "a\\x00b"\n')),
           "b": publish(api, tool("prints", 'def run(event):\n    print("a\\x00b")\n    return 1\n')),
           "c": publish(api, tool("fails", 'def run(event):\n    fail("a\\x00b")\n')),
           "g": publish(api, tool("good", 'def run(event):\n    return "fine"\n'))}
    data = api.gql(both, ids)["actions"]
    assert data["a"]["status"] == "FAILED"
    assert data["a"]["invocation"]["error"]["code"] == "action_output_invalid"
    assert data["b"]["status"] == "SUCCEEDED"
    assert data["c"]["invocation"]["error"]["code"] == "action_failure"
    assert data["g"] == {"status": "SUCCEEDED", "invocation": {"output": "fine"}}
    # Recorded, with U+FFFD where the NUL was.
    printed = api.gql(EXECUTION, {"id": data["b"]["executionId"]})["actions"]["execution"]
    assert "a\ufffdb" in str(printed["invocation"]["logs"])
    failed = api.gql(EXECUTION, {"id": data["c"]["executionId"]})["actions"]["execution"]
    assert "a\ufffdb" in failed["invocation"]["error"]["message"]


def test_a_program_writing_a_nul_through_graphql_fails_its_call_and_writes_nothing(api):
    opening, funded = funded_account(api, 100)
    src = ('def run(event):\n    return graphql("""mutation($id: UUID!, $f: UUID!, $t: UUID!, $m: String) { financial {'
           ' createTransfer(id: $id, input: {fromAccountId: $f, toAccountId: $t, amount: 5, memo: $m}) { id } } }""",'
           ' variables={"id": event["data"]["id"], "f": event["data"]["f"], "t": event["data"]["t"], "m": "a\\x00"})\n')
    writer = publish(api, tool("writer", src))
    result = invoke(api, writer, {"id": str(uuid.uuid4()), "f": opening, "t": funded})
    assert result["status"] == "FAILED"
    assert result["invocation"]["error"]["code"] == "graphql_error"
    assert balance(api, funded) == 100


def test_a_started_program_returning_a_nul_reaches_a_final_state(api, worker):  # noqa: F811
    doc = tool("returns", 'def run(event):\n    print("\\x00")\n    return "a\\x00b"\n')
    doc["execution"] = {"maxAttempts": 1}
    action_id = publish(api, doc)
    done = wait_for(api, start(api, action_id)["executionId"])
    assert done["status"] == "FAILED"
    assert done["invocation"]["error"]["code"] == "action_output_invalid"


def test_invoke_with_a_nul_through_a_raw_body_is_refused_and_records_nothing(api):
    echo = publish(api, tool("echo", 'def run(event):\n    return event["data"]\n'))
    execution_id = str(uuid.uuid4())
    body = ('{"query": %s, "variables": {"id": "%s", "input": {"executionId": "%s", "input": {"s": "\\u0000"}}}}'
            % (__import__("json").dumps(INVOKE), echo, execution_id)).encode()
    response = _raw(api, body)
    assert response.status_code == 200
    assert response.json()["errors"][0]["extensions"]["code"] == "bad_request"
    assert "/s" in response.json()["errors"][0]["message"]
    assert api.gql(EXECUTION, {"id": execution_id})["actions"]["execution"] is None


def test_an_infinite_number_in_a_body_is_a_bad_request_not_an_internal_error(api):
    echo = publish(api, tool("echo", 'def run(event):\n    return event["data"]\n'))
    for number in (b"1e999", b"-1E+999"):
        body = (b'{"query": %s, "variables": {"id": "%s", "input": {"executionId": "%s", "input": %s}}}'
                % (__import__("json").dumps(INVOKE).encode(), echo.encode(), str(uuid.uuid4()).encode(), number))
        response = _raw(api, body)
        assert response.status_code == 400, response.text
        assert response.json()["errors"][0]["extensions"]["code"] == "bad_request"


def test_a_program_passing_infinity_or_a_nul_to_a_nested_call_fails_at_most_itself(api):
    publish(api, tool("echo", 'def run(event):\n    return event["data"]\n'))
    nul = publish(api, tool("nul", (
        'def run(event):\n'
        '    b = tools.echo({"x": "\\x00"}, check=False)\n'
        '    c = graphql("query($id: UUID!) { financial { account(id: $id) { id } } }",'
        ' variables={"id": "\\x00"}, check=False)\n'
        '    return [b["status"], b["error"]["code"], c["errors"][0]["extensions"]["code"]]\n'),
        tools=[{"name": "echo"}]))
    result = invoke(api, nul)
    assert result["status"] == "SUCCEEDED", result["invocation"]["error"]
    assert result["invocation"]["output"] == ["FAILED", "action_input_invalid", "graphql_validation_failed"]
    # Infinity is refused inside the sandbox, before it crosses: the caller fails, and only it.
    infinite = publish(api, tool("infinite", 'def run(event):\n    return tools.echo({"x": float("inf")})\n',
                                 tools=[{"name": "echo"}]))
    result = invoke(api, infinite)
    assert result["status"] == "FAILED"
    assert result["invocation"]["error"]["code"] == "action_failure"
    assert "finite" in result["invocation"]["error"]["message"]


def test_a_program_source_holding_a_nul_is_refused_naming_its_line(api):
    from registry_helpers import create_error, problems

    error = create_error(api, tool("nul", 'def run(event):\n    # a \x00 in a comment compiles\n    return 1\n'))
    assert problems(error) == [{"path": "config.src", "message": (
        'line 2, column 9: a NUL character (\\u0000) cannot be stored; write it as an escape ("\\x00") in a string,'
        " or remove it")}]
    # The escape is fine: the program holds the four characters, and its string the NUL.
    accepted = publish(api, tool("escaped", 'def run(event):\n    return len("a\\x00b")\n'))
    assert invoke(api, accepted)["invocation"]["output"] == 3
