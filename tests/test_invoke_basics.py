"""invokeAction: a call inside the request transaction."""

from invoke_helpers import invoke, invoke_error, publish, tool
from registry_helpers import create


def test_a_call_returns_the_programs_output(api):
    action_id = publish(api, tool("echo", 'def run(event):\n    return {"got": event["data"]["x"]}\n'))
    execution = invoke(api, action_id, {"x": 41})
    assert execution["status"] == "SUCCEEDED"
    assert execution["invocation"]["output"] == {"got": 41}
    assert execution["event"] == {"eventType": "action.invoked", "data": {"x": 41}, "recordType": None, "recordId": None}
    assert execution["depth"] == 0 and execution["rootExecutionId"] == execution["executionId"]


def test_print_goes_to_the_logs(api):
    action_id = publish(api, tool("talk", 'def run(event):\n    print("hello", 1)\n    return None\n'))
    assert invoke(api, action_id)["invocation"]["logs"] == ["hello 1"]


def test_fail_records_a_failed_execution_with_hint_and_the_request_commits(api):
    action_id = publish(api, tool("boom", 'def run(event):\n    fail("no money", hint="top up")\n'))
    execution = invoke(api, action_id)
    assert execution["status"] == "FAILED"
    assert execution["invocation"]["error"] == {"code": "action_failure", "message": "no money", "hint": "top up"}


def test_input_failing_the_schema_is_action_input_invalid(api):
    action_id = publish(api, tool("typed", 'def run(event):\n    return 1\n',
                                  schema={"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}))
    execution = invoke(api, action_id, {"n": "seven"})
    assert execution["invocation"]["error"]["code"] == "action_input_invalid"


def test_output_failing_the_schema_is_action_output_invalid(api):
    action_id = publish(api, tool("typed", 'def run(event):\n    return {"n": "x"}\n',
                                  output_schema={"type": "object", "properties": {"n": {"type": "integer"}}}))
    assert invoke(api, action_id)["invocation"]["error"]["code"] == "action_output_invalid"


def test_an_unpublished_action_is_not_callable(api):
    action = create(api, tool("draft", 'def run(event):\n    return 1\n'))
    assert invoke_error(api, action["actionId"])["extensions"]["code"] == "action_not_callable"


def test_a_missing_version_is_not_callable(api):
    action_id = publish(api, tool("v", 'def run(event):\n    return 1\n'))
    assert invoke_error(api, action_id, actionVersion=9)["extensions"]["code"] == "action_not_callable"


def test_a_repeated_execution_id_returns_the_recorded_execution_without_running_again(api):
    import uuid

    from helpers import balance, funded_account

    opening, funded = funded_account(api, 0)
    src = ('def run(event):\n    graphql("""mutation($id: UUID!, $f: UUID!, $t: UUID!) { financial { createTransfer(id: $id,'
           ' input: {fromAccountId: $f, toAccountId: $t, amount: 5}) { id } } }""", variables={"id": event["data"]["id"],'
           ' "f": event["data"]["f"], "t": event["data"]["t"]})\n    return "moved"\n')
    action_id = publish(api, tool("mover", src))
    execution_id = str(uuid.uuid4())
    payload = {"id": str(uuid.uuid4()), "f": opening, "t": funded}
    first = invoke(api, action_id, payload, execution_id=execution_id)
    second = invoke(api, action_id, payload, execution_id=execution_id)
    assert first["status"] == second["status"] == "SUCCEEDED"
    assert balance(api, funded) == 5


def test_the_same_execution_id_with_another_input_is_a_conflict(api):
    import uuid

    action_id = publish(api, tool("echo", 'def run(event):\n    return 1\n'))
    execution_id = str(uuid.uuid4())
    invoke(api, action_id, {"a": 1}, execution_id=execution_id)
    error = invoke_error(api, action_id, {"a": 2}, executionId=execution_id)
    assert error["extensions"]["code"] == "execution_id_conflict"


def test_a_failed_call_rolls_back_its_writes_and_keeps_the_callers(api):
    from helpers import CREATE_ACCOUNT, balance, create_account

    opening = create_account(api, "opening", overdraft=True)
    target = create_account(api, "target")
    src = ('def run(event):\n    graphql("""mutation($id: UUID!, $f: UUID!, $t: UUID!) { financial { createTransfer(id: $id,'
           ' input: {fromAccountId: $f, toAccountId: $t, amount: 5}) { id } } }""", variables={"id": event["data"]["id"],'
           ' "f": event["data"]["f"], "t": event["data"]["t"]})\n    fail("after the write")\n')
    action_id = publish(api, tool("half", src))
    import uuid

    from invoke_helpers import INVOKE

    new_account = str(uuid.uuid4())
    data = api.gql(
        """mutation($acct: UUID!, $id: UUID!, $input: InvokeActionInput!) {
             financial { createAccount(id: $acct, input: {name: "kept", currency: "USD"}) { id } }
             actions { invokeAction(id: $id, input: $input) { status invocation { error { code } } } } }""",
        {"acct": new_account, "id": action_id,
         "input": {"executionId": str(uuid.uuid4()), "input": {"id": str(uuid.uuid4()), "f": opening, "t": target}}},
    )
    assert data["actions"]["invokeAction"]["status"] == "FAILED"
    assert balance(api, target) == 0
    assert api.gql("query($id: UUID!) { financial { account(id: $id) { name } } }", {"id": new_account})["financial"]["account"]["name"] == "kept"


def test_writes_by_a_program_record_its_execution_id(api):
    import uuid

    from helpers import funded_account

    opening, funded = funded_account(api, 0)
    src = ('def run(event):\n    r = graphql("""mutation($id: UUID!, $f: UUID!, $t: UUID!) { financial { createTransfer(id: $id,'
           ' input: {fromAccountId: $f, toAccountId: $t, amount: 5}) { executionId } } }""", variables={"id": event["data"]["id"],'
           ' "f": event["data"]["f"], "t": event["data"]["t"]})\n    return r["financial"]["createTransfer"]["executionId"]\n')
    action_id = publish(api, tool("mover", src))
    execution = invoke(api, action_id, {"id": str(uuid.uuid4()), "f": opening, "t": funded})
    assert execution["invocation"]["output"] == execution["executionId"]
    assert [c["callSequence"] for c in execution["children"]] == [1]
