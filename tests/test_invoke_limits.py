"""invokeAction limits: tool depth, calls beneath one call, re-entry, undeclared tools."""

import uuid

from invoke_helpers import invoke, publish, tool
from registry_helpers import UPDATE


def chain_of_tools(api, count: int, leaf_src: str | None = None) -> list[str]:
    """Tools t0 -> t1 -> ... -> t{count-1}, written and published in one request; returns their ids, t0 first.

    Each returns the list of depths it and the tools below it ran at.
    """
    ids = [str(uuid.uuid4()) for _ in range(count)]
    fields, variables, params = [], {}, []
    for level in reversed(range(count)):
        name = f"t{level}"
        if level == count - 1:
            src = leaf_src or 'def run(event):\n    return [event["data"]["depth"]]\n'
            refs = None
        else:
            src = (f'def run(event):\n    d = event["data"]["depth"]\n'
                   f'    return [d] + tools.t{level + 1}({{"depth": d + 1}})\n')
            refs = [{"name": f"t{level + 1}"}]
        variables[f"i{level}"], variables[f"d{level}"] = ids[level], tool(name, src, tools=refs)
        params += [f"$i{level}: UUID!", f"$d{level}: ActionInput!"]
        fields.append(f"c{level}: createAction(id: $i{level}, input: $d{level}) {{ actionId }}"
                      f" p{level}: publishAction(id: $i{level}) {{ status }}")
    api.gql(f"mutation({', '.join(params)}) {{ actions {{ {' '.join(fields)} }} }}", variables)
    return ids


def test_a_chain_of_nine_tool_levels_succeeds(api):
    ids = chain_of_tools(api, 9)
    result = invoke(api, ids[0], {"depth": 0})
    assert result["status"] == "SUCCEEDED", result["invocation"]["error"]
    assert result["invocation"]["output"] == list(range(9))


def test_a_tenth_tool_level_fails_with_action_call_limit_exceeded(api):
    ids = chain_of_tools(api, 10)
    result = invoke(api, ids[0], {"depth": 0})
    assert result["status"] == "FAILED"
    assert result["invocation"]["error"]["code"] == "action_call_limit_exceeded"


def test_a_tool_at_depth_eight_may_still_call_native_tools(api):
    native_leaf = ('def run(event):\n    cel("1 == 1", {})\n    graphql("query { financial { accounts(first: 1) { id } } }")\n'
                   '    return [event["data"]["depth"]]\n')
    ids = chain_of_tools(api, 9, leaf_src=native_leaf)
    result = invoke(api, ids[0], {"depth": 0})
    assert result["status"] == "SUCCEEDED", result["invocation"]["error"]
    assert result["invocation"]["output"] == list(range(9))


def test_a_thousand_cel_calls_in_one_program_succeed(api):
    src = 'def run(event):\n    n = 0\n    for i in range(event["data"]["n"]):\n        if cel("x > 3", {"x": i}):\n            n += 1\n    return n\n'
    action_id = publish(api, tool("many", src))
    result = invoke(api, action_id, {"n": 1000})
    assert result["status"] == "SUCCEEDED", result["invocation"]["error"]
    assert result["invocation"]["output"] == 996


def test_more_than_1024_calls_beneath_one_call_fail_with_action_call_limit_exceeded(api):
    src = 'def run(event):\n    for i in range(event["data"]["n"]):\n        cel("x > 3", {"x": i})\n    return "done"\n'
    action_id = publish(api, tool("many", src))
    result = invoke(api, action_id, {"n": 1100})
    assert result["status"] == "FAILED"
    assert result["invocation"]["error"]["code"] == "action_call_limit_exceeded"


def test_the_1024th_call_is_allowed_and_the_1025th_is_not(api):
    src = ('def run(event):\n    for i in range(event["data"]["n"]):\n        cel("true", {})\n'
           '    return cel("true", {}, check=False)\n')
    action_id = publish(api, tool("edge", src))
    assert invoke(api, action_id, {"n": 1023})["status"] == "SUCCEEDED"
    result = invoke(api, action_id, {"n": 1024})
    assert result["invocation"]["error"]["code"] == "action_call_limit_exceeded"


def test_calls_of_nested_tools_count_towards_the_top_level_calls_limit(api):
    publish(api, tool("leaf", 'def run(event):\n    for i in range(600):\n        cel("true", {})\n    return 1\n'))
    caller_id = publish(api, tool("caller", 'def run(event):\n    tools.leaf({})\n    return tools.leaf({})\n',
                                  tools=[{"name": "leaf"}]))
    result = invoke(api, caller_id)
    assert result["invocation"]["error"]["code"] == "action_call_limit_exceeded"


REENTER = ('def run(event):\n    return graphql("""mutation($id: UUID!, $input: InvokeActionInput!) { actions {'
           ' invokeAction(id: $id, input: $input) { status } } }""", variables={"id": event["data"]["target"],'
           ' "input": {"executionId": event["data"]["eid"], "input": event["data"]}}, check=False)\n')


def test_reentering_a_tool_on_the_stack_through_graphql_fails_with_action_call_limit_exceeded(api):
    action_id = str(uuid.uuid4())
    api.gql("""mutation($id: UUID!, $d: ActionInput!) { actions { createAction(id: $id, input: $d) { actionId }
               publishAction(id: $id) { status } } }""", {"id": action_id, "d": tool("again", REENTER)})
    result = invoke(api, action_id, {"target": action_id, "eid": str(uuid.uuid4())})
    output = result["invocation"]["output"]
    assert output["data"] is None
    assert [e["extensions"]["code"] for e in output["errors"]] == ["action_call_limit_exceeded"]
    # Refused before running: the only child is the graphql() call itself.
    assert len(result["children"]) == 1


def test_reentry_through_graphql_with_check_true_fails_the_caller(api):
    src = REENTER.replace(", check=False", "")
    action_id = str(uuid.uuid4())
    api.gql("""mutation($id: UUID!, $d: ActionInput!) { actions { createAction(id: $id, input: $d) { actionId }
               publishAction(id: $id) { status } } }""", {"id": action_id, "d": tool("again", src)})
    result = invoke(api, action_id, {"target": action_id, "eid": str(uuid.uuid4())})
    assert result["status"] == "FAILED"
    assert result["invocation"]["error"]["code"] == "action_call_limit_exceeded"


def test_reentry_through_a_nested_tool_and_graphql_is_refused(api):
    outer_id = str(uuid.uuid4())
    inner_src = REENTER
    publish(api, tool("inner", inner_src))
    outer_src = ('def run(event):\n    return tools.inner({"target": event["data"]["target"], "eid": event["data"]["eid"]})\n')
    api.gql("""mutation($id: UUID!, $d: ActionInput!) { actions { createAction(id: $id, input: $d) { actionId }
               publishAction(id: $id) { status } } }""", {"id": outer_id, "d": tool("outer", outer_src, tools=[{"name": "inner"}])})
    result = invoke(api, outer_id, {"target": outer_id, "eid": str(uuid.uuid4())})
    assert result["status"] == "SUCCEEDED"
    assert result["invocation"]["output"]["errors"][0]["extensions"]["code"] == "action_call_limit_exceeded"


def test_calling_a_tool_the_invocation_did_not_resolve_is_tool_not_declared(api):
    inner = publish(api, tool("inner", 'def run(event):\n    return 1\n'))
    caller_id = publish(api, tool("caller", 'def run(event):\n    return tools.inner({})\n', tools=[{"name": "inner"}]))
    assert invoke(api, caller_id)["status"] == "SUCCEEDED"
    # The reference follows the latest version, which now gives the tool another name.
    renamed = tool("inner", 'def run(event):\n    return 1\n')
    renamed["tool"]["name"] = "renamed"
    api.gql(UPDATE, {"id": inner, "input": renamed})
    result = invoke(api, caller_id)
    assert result["status"] == "FAILED"
    assert result["invocation"]["error"]["code"] == "tool_not_declared"
    assert result["invocation"]["tools"] == [{"name": "renamed", "actionId": inner, "actionVersion": 2}]
    assert result["children"] == []  # the undeclared call itself is not recorded
