"""invokeAction and the policy chain: the caller's client layer and every tool layer on the stack."""

import uuid

from helpers import ACCOUNT, funded_account
from invoke_helpers import INVOKE, invoke, publish, tool

READ_ACCOUNT = ('def run(event):\n    return graphql("""query($id: UUID!) { financial { account(id: $id) { balance } } }""",'
                ' variables={"id": event["data"]["id"]})["financial"]["account"]["balance"]\n')

# What a direct caller needs to invoke a tool: the action record and the execution it creates.
CALLER_BASICS = [
    {"effect": "ALLOW", "actions": ["SELECT", "INVOKE"], "resources": ["financial.Action.document"]},
    {"effect": "ALLOW", "actions": ["SELECT", "INSERT"], "resources": ["financial.ActionExecution.*"]},
]


def limited_client(api, policies: list[dict], name: str = "limited"):
    """A new client with `policies`, speaking with its own token."""
    client_id = str(uuid.uuid4())
    api.gql("""mutation($id: UUID!, $name: String!, $p: [PolicyStatementInput!]!) { clients {
                 createClient(id: $id, input: {name: $name, policies: $p}) { id } } }""",
            {"id": client_id, "name": name, "p": policies})
    token = api.gql("mutation($id: UUID!) { clients { issueToken(clientId: $id) { token } } }",
                    {"id": client_id})["clients"]["issueToken"]["token"]
    return api.as_client(token)


def test_a_tools_policies_narrow_the_callers(api):
    _, funded = funded_account(api, 10)
    assert api.gql(ACCOUNT, {"id": funded})["financial"]["account"]["balance"] == 10  # the caller may read it
    no_accounts = [{"effect": "ALLOW", "actions": ["SELECT"], "resources": ["financial.Transfer.*"]}]
    reader = publish(api, tool("reader", READ_ACCOUNT, policies=no_accounts))
    result = invoke(api, reader, {"id": funded})
    assert result["status"] == "FAILED"
    error = result["invocation"]["error"]
    assert error["code"] == "action_permission_denied"
    assert 'tool "reader" v1' in error["hint"] and "financial.Account.document" in error["hint"]


def test_the_callers_policies_narrow_a_tools(api):
    _, funded = funded_account(api, 10)
    reader = publish(api, tool("reader", READ_ACCOUNT))  # the tool allows everything
    caller = limited_client(api, CALLER_BASICS)
    result = invoke(caller, reader, {"id": funded})
    assert result["status"] == "FAILED"
    error = result["invocation"]["error"]
    assert error["code"] == "action_permission_denied"
    assert 'client "limited"' in error["hint"] and "financial.Account.document" in error["hint"]


def test_a_caller_allowed_both_ways_reads_through_the_tool(api):
    _, funded = funded_account(api, 10)
    reader = publish(api, tool("reader", READ_ACCOUNT))
    caller = limited_client(api, CALLER_BASICS + [
        {"effect": "ALLOW", "actions": ["SELECT"], "resources": ["financial.Account.*"]}])
    assert invoke(caller, reader, {"id": funded})["invocation"]["output"] == 10


ONLY_THROUGH_READER = CALLER_BASICS + [
    {"effect": "ALLOW", "actions": ["SELECT"], "resources": ["financial.Account.*"],
     "assertion": 'action.name == "reader"'}]


def test_action_in_an_assertion_is_the_running_tool(api):
    _, funded = funded_account(api, 10)
    reader = publish(api, tool("reader", READ_ACCOUNT))
    other = publish(api, tool("other", READ_ACCOUNT))
    caller = limited_client(api, ONLY_THROUGH_READER)
    assert invoke(caller, reader, {"id": funded})["invocation"]["output"] == 10
    assert invoke(caller, other, {"id": funded})["invocation"]["error"]["code"] == "action_permission_denied"
    # Outside any tool `action` is null, so the assertion cannot allow a direct read.
    assert caller.error(ACCOUNT, {"id": funded})["extensions"]["code"] == "permission_denied"


def test_action_in_an_assertion_is_the_innermost_tool(api):
    _, funded = funded_account(api, 10)
    publish(api, tool("reader", READ_ACCOUNT))
    outer = publish(api, tool("outer", 'def run(event):\n    return tools.reader(event["data"])\n',
                              tools=[{"name": "reader"}]))
    nosy = publish(api, tool("nosy", READ_ACCOUNT.replace("def run(event):", "def run(event):\n    tools.reader(event[\"data\"])"),
                             tools=[{"name": "reader"}]))
    caller = limited_client(api, ONLY_THROUGH_READER)
    assert invoke(caller, outer, {"id": funded})["invocation"]["output"] == 10
    # nosy's own read runs with nosy innermost: denied, although its call to reader succeeded.
    result = invoke(caller, nosy, {"id": funded})
    assert result["invocation"]["error"]["code"] == "action_permission_denied"
    assert [c["status"] for c in result["children"]] == ["SUCCEEDED", "FAILED"]


def test_a_nested_tools_policies_narrow_its_callers(api):
    _, funded = funded_account(api, 10)
    no_accounts = [{"effect": "ALLOW", "actions": ["SELECT"], "resources": ["financial.Transfer.*"]}]
    publish(api, tool("reader", READ_ACCOUNT, policies=no_accounts))
    outer = publish(api, tool("outer", 'def run(event):\n    return tools.reader(event["data"])\n',
                              tools=[{"name": "reader"}]))
    error = invoke(api, outer, {"id": funded})["invocation"]["error"]
    assert error["code"] == "action_permission_denied" and 'tool "reader" v1' in error["hint"]


def test_a_callers_tool_layer_narrows_the_tools_it_calls(api):
    _, funded = funded_account(api, 10)
    publish(api, tool("reader", READ_ACCOUNT))
    no_accounts = [{"effect": "ALLOW", "actions": ["SELECT"], "resources": ["financial.Transfer.*"]}]
    outer = publish(api, tool("outer", 'def run(event):\n    return tools.reader(event["data"])\n',
                              tools=[{"name": "reader"}], policies=no_accounts))
    error = invoke(api, outer, {"id": funded})["invocation"]["error"]
    assert error["code"] == "action_permission_denied" and 'tool "outer" v1' in error["hint"]


def test_a_nested_call_needs_no_invoke_grant(api):
    publish(api, tool("leaf", 'def run(event):\n    return "leaf ran"\n'))
    outer = publish(api, tool("outer", 'def run(event):\n    return tools.leaf({})\n', tools=[{"name": "leaf"}],
                              policies=[{"effect": "ALLOW", "actions": ["SELECT"], "resources": ["financial.Transfer.*"]}]))
    assert invoke(api, outer)["invocation"]["output"] == "leaf ran"


def test_a_direct_caller_without_invoke_is_denied_and_nothing_is_recorded(api):
    reader = publish(api, tool("echo", 'def run(event):\n    return 1\n'))
    caller = limited_client(api, [
        {"effect": "ALLOW", "actions": ["SELECT"], "resources": ["financial.Action.document"]},
        {"effect": "ALLOW", "actions": ["SELECT", "INSERT"], "resources": ["financial.ActionExecution.*"]},
    ])
    execution_id = str(uuid.uuid4())
    error = caller.error(INVOKE, {"id": reader, "input": {"executionId": execution_id, "input": {}}})
    assert error["extensions"]["code"] == "permission_denied"
    assert "INVOKE" in error["extensions"]["hint"] and 'client "limited"' in error["extensions"]["hint"]
    read = "query($id: UUID!) { actions { execution(id: $id) { status } } }"
    assert api.gql(read, {"id": execution_id})["actions"]["execution"] is None


def test_a_direct_caller_without_insert_on_executions_is_denied(api):
    reader = publish(api, tool("echo", 'def run(event):\n    return 1\n'))
    caller = limited_client(api, [
        {"effect": "ALLOW", "actions": ["SELECT", "INVOKE"], "resources": ["financial.Action.document"]},
        {"effect": "ALLOW", "actions": ["SELECT"], "resources": ["financial.ActionExecution.*"]},
    ])
    error = caller.error(INVOKE, {"id": reader, "input": {"executionId": str(uuid.uuid4()), "input": {}}})
    assert error["extensions"]["code"] == "permission_denied"
    assert "financial.ActionExecution.document" in error["extensions"]["hint"]
