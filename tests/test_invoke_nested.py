"""invokeAction: nested calls (`tools.x()`, `graphql()`, `cel()`), their records and their failures."""

import uuid

import pytest

from helpers import balance, create_account, funded_account
from invoke_helpers import invoke, publish, tool

READ_EXECUTION = """query($id: UUID!) { actions { execution(id: $id) {
  executionId actionId actionVersion status parentExecutionId callSequence rootExecutionId depth
  invocation { input output error { code message hint } tools { name actionId actionVersion } logs startedAt finishedAt }
  children { executionId actionId status parentExecutionId callSequence rootExecutionId depth
             invocation { input output error { code message hint } } } } } }"""

TRANSFER_DOC = ('"""mutation($id: UUID!, $f: UUID!, $t: UUID!, $a: Int64!) { financial { createTransfer(id: $id,'
                ' input: {fromAccountId: $f, toAccountId: $t, amount: $a}) { id } } }"""')


def execution(api, execution_id: str) -> dict | None:
    return api.gql(READ_EXECUTION, {"id": execution_id})["actions"]["execution"]


_server_ids = None


@pytest.fixture(autouse=True)
def _the_servers_child_ids(services):
    """Child ids are keyed with the server's secret (DESIGN 17): only the test's own server can compute them."""
    global _server_ids
    _server_ids = services.execution_ids


def child_id(parent: str, sequence: int, attempt: int = 1) -> str:
    return str(_server_ids.child(uuid.UUID(parent), attempt, sequence))


def leaf_and_caller(api, caller_src: str, leaf_src: str = 'def run(event):\n    return {"doubled": event["data"]["n"] * 2}\n'):
    leaf_id = publish(api, tool("leaf", leaf_src))
    caller_id = publish(api, tool("caller", caller_src, tools=[{"name": "leaf"}]))
    return leaf_id, caller_id


# ---------------------------------------------------------------------------- tools.x()


def test_a_declared_tool_call_returns_the_childs_output(api):
    _, caller_id = leaf_and_caller(api, 'def run(event):\n    return tools.leaf({"n": 21})\n')
    result = invoke(api, caller_id)
    assert result["status"] == "SUCCEEDED"
    assert result["invocation"]["output"] == {"doubled": 42}


def test_a_child_is_recorded_under_its_parent_with_sequence_root_and_depth(api):
    leaf_id, caller_id = leaf_and_caller(
        api, 'def run(event):\n    tools.leaf({"n": 1})\n    return tools.leaf({"n": 2})\n')
    result = invoke(api, caller_id)
    parent = result["executionId"]
    children = result["children"]
    assert [c["callSequence"] for c in children] == [1, 2]
    assert [c["depth"] for c in children] == [1, 1]
    assert all(c["actionId"] == leaf_id for c in children)
    assert [c["invocation"]["output"] for c in children] == [{"doubled": 2}, {"doubled": 4}]
    read = execution(api, children[0]["executionId"])
    assert read["parentExecutionId"] == parent and read["rootExecutionId"] == parent
    assert read["depth"] == 1 and read["callSequence"] == 1


def test_a_grandchild_names_its_parent_and_the_root(api):
    publish(api, tool("leaf", 'def run(event):\n    return 1\n'))
    publish(api, tool("mid", 'def run(event):\n    return tools.leaf({})\n', tools=[{"name": "leaf"}]))
    top_id = publish(api, tool("top", 'def run(event):\n    return tools.mid({})\n', tools=[{"name": "mid"}]))
    root = invoke(api, top_id)["executionId"]
    mid = child_id(root, 1)
    leaf = execution(api, child_id(mid, 1))
    assert leaf is not None
    assert (leaf["parentExecutionId"], leaf["rootExecutionId"], leaf["depth"]) == (mid, root, 2)


def test_child_ids_derive_from_the_parent_attempt_and_sequence(api):
    _, caller_id = leaf_and_caller(
        api, 'def run(event):\n    cel("1 == 1", {})\n    return tools.leaf({"n": event["data"]["n"]})\n')
    first = invoke(api, caller_id, {"n": 3})
    second = invoke(api, caller_id, {"n": 3})
    first_ids = [c["executionId"] for c in first["children"]]
    second_ids = [c["executionId"] for c in second["children"]]
    assert first_ids == [child_id(first["executionId"], 1), child_id(first["executionId"], 2)]
    assert second_ids == [child_id(second["executionId"], 1), child_id(second["executionId"], 2)]
    assert set(first_ids).isdisjoint(second_ids)


def test_a_failed_child_with_check_false_is_returned_and_the_caller_continues(api):
    _, caller_id = leaf_and_caller(
        api,
        'def run(event):\n    r = tools.leaf({"n": 1}, check=False)\n    return {"child": r, "after": True}\n',
        leaf_src='def run(event):\n    fail("leaf broke", hint="mend the leaf")\n')
    result = invoke(api, caller_id)
    assert result["status"] == "SUCCEEDED"
    assert result["invocation"]["output"] == {
        "child": {"status": "FAILED", "error": {"code": "action_failure", "message": "leaf broke", "hint": "mend the leaf"},
                  "executionId": child_id(result["executionId"], 1)},
        "after": True,
    }
    assert [c["status"] for c in result["children"]] == ["FAILED"]


def test_a_succeeded_child_with_check_false_is_wrapped(api):
    _, caller_id = leaf_and_caller(api, 'def run(event):\n    return tools.leaf({"n": 4}, check=False)\n')
    result = invoke(api, caller_id)
    assert result["invocation"]["output"] == {"status": "SUCCEEDED", "output": {"doubled": 8},
                                              "executionId": child_id(result["executionId"], 1)}


def test_a_failed_child_with_check_true_fails_the_caller_with_its_code_message_and_hint(api):
    _, caller_id = leaf_and_caller(
        api, 'def run(event):\n    tools.leaf({"n": 1})\n    return "not reached"\n',
        leaf_src='def run(event):\n    fail("leaf broke", hint="mend the leaf")\n')
    result = invoke(api, caller_id)
    assert result["status"] == "FAILED"
    assert result["invocation"]["error"] == {"code": "action_failure", "message": "leaf broke", "hint": "mend the leaf"}
    assert result["invocation"]["output"] is None


def test_a_childs_input_failing_its_schema_fails_the_caller_with_action_input_invalid(api):
    publish(api, tool("leaf", 'def run(event):\n    return 1\n',
                      schema={"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}))
    caller_id = publish(api, tool("caller", 'def run(event):\n    return tools.leaf({"n": "two"})\n',
                                  tools=[{"name": "leaf"}]))
    result = invoke(api, caller_id)
    assert result["invocation"]["error"]["code"] == "action_input_invalid"


# ---------------------------------------------------------------------------- graphql()


def _mover(api, check: bool) -> str:
    flag = "" if check else ", check=False"
    src = (f'def run(event):\n    d = event["data"]\n    return graphql({TRANSFER_DOC}, variables={{"id": d["id"], "f": d["f"],'
           f' "t": d["t"], "a": d["a"]}}{flag})\n')
    return publish(api, tool("mover", src))


def test_graphql_with_check_false_returns_data_and_errors_with_codes(api):
    opening, funded = funded_account(api, 10)
    other = create_account(api, "other")
    mover = _mover(api, check=False)
    result = invoke(api, mover, {"id": str(uuid.uuid4()), "f": funded, "t": other, "a": 50})
    assert result["status"] == "SUCCEEDED"
    output = result["invocation"]["output"]
    assert output["data"] is None
    assert [e["extensions"]["code"] for e in output["errors"]] == ["insufficient_funds"]
    assert output["errors"][0]["extensions"]["hint"]


def test_graphql_with_check_false_returns_data_on_success(api):
    opening, funded = funded_account(api, 10)
    mover = _mover(api, check=False)
    transfer_id = str(uuid.uuid4())
    output = invoke(api, mover, {"id": transfer_id, "f": funded, "t": opening, "a": 5})["invocation"]["output"]
    assert output == {"data": {"financial": {"createTransfer": {"id": transfer_id}}}, "errors": None}


def test_graphql_with_check_true_keeps_a_domain_rules_code(api):
    opening, funded = funded_account(api, 10)
    mover = _mover(api, check=True)
    result = invoke(api, mover, {"id": str(uuid.uuid4()), "f": funded, "t": opening, "a": 50})
    assert result["status"] == "FAILED"
    assert result["invocation"]["error"]["code"] == "insufficient_funds"
    assert result["invocation"]["error"]["hint"]


def test_graphql_with_check_true_maps_other_errors_to_graphql_error(api):
    opening, _ = funded_account(api, 0)
    mover = _mover(api, check=True)
    result = invoke(api, mover, {"id": str(uuid.uuid4()), "f": opening, "t": str(uuid.uuid4()), "a": 5})
    assert result["invocation"]["error"]["code"] == "graphql_error"
    assert "no account" in result["invocation"]["error"]["message"]


def test_a_document_built_at_run_time_that_fails_validation_is_graphql_error(api):
    src = 'def run(event):\n    return graphql("query { financial { " + event["data"]["field"] + " } }")\n'
    action_id = publish(api, tool("builder", src))
    result = invoke(api, action_id, {"field": "nothing_here"})
    assert result["invocation"]["error"]["code"] == "graphql_error"


def test_graphql_with_check_true_maps_a_denial_to_action_permission_denied(api):
    _, funded = funded_account(api, 10)
    src = ('def run(event):\n    return graphql("""query($id: UUID!) { financial { account(id: $id) { balance } } }""",'
           ' variables={"id": event["data"]["id"]})\n')
    policies = [{"effect": "ALLOW", "actions": ["SELECT"], "resources": ["financial.Transfer.*"]}]
    action_id = publish(api, tool("blind", src, policies=policies))
    error = invoke(api, action_id, {"id": funded})["invocation"]["error"]
    assert error["code"] == "action_permission_denied"
    assert "financial.Account.document" in error["hint"]


# ---------------------------------------------------------------------------- cel()


def test_cel_returns_the_value_of_the_expression(api):
    action_id = publish(api, tool("celer", 'def run(event):\n    return [cel("x > 3", {"x": 5}), cel("x > 3", {"x": 1})]\n'))
    result = invoke(api, action_id)
    assert result["invocation"]["output"] == [True, False]
    assert [c["invocation"]["output"] for c in result["children"]] == [{"value": True}, {"value": False}]


def test_a_bad_cel_expression_fails_the_call_with_cel_error(api):
    action_id = publish(api, tool("celer", 'def run(event):\n    return cel(event["data"]["e"], {"x": 5})\n'))
    result = invoke(api, action_id, {"e": "x >"})
    assert result["status"] == "FAILED"
    assert result["invocation"]["error"]["code"] == "cel_error"
    assert [c["status"] for c in result["children"]] == ["FAILED"]


def test_cel_with_check_false_returns_the_same_shape_for_success_and_failure(api):
    src = 'def run(event):\n    return [cel("x + 1", {"x": 1}, check=False), cel("x +", {"x": 1}, check=False)]\n'
    action_id = publish(api, tool("celer", src))
    result = invoke(api, action_id)
    ok, bad = result["invocation"]["output"]
    parent = result["executionId"]
    assert ok == {"status": "SUCCEEDED", "output": {"value": 2}, "executionId": child_id(parent, 1)}
    assert bad["status"] == "FAILED" and bad["error"]["code"] == "cel_error" and bad["executionId"] == child_id(parent, 2)


# ---------------------------------------------------------------------------- savepoints


def test_a_failed_nested_call_rolls_back_its_writes_and_keeps_the_callers_earlier_ones(api):
    opening, funded = funded_account(api, 0)
    leaf_src = (f'def run(event):\n    d = event["data"]\n    graphql({TRANSFER_DOC}, variables={{"id": d["id"], "f": d["f"],'
                f' "t": d["t"], "a": 7}})\n    fail("after the write")\n')
    caller_src = (f'def run(event):\n    d = event["data"]\n    graphql({TRANSFER_DOC}, variables={{"id": d["mine"], "f": d["f"],'
                  f' "t": d["t"], "a": 3}})\n    r = tools.leaf({{"id": d["theirs"], "f": d["f"], "t": d["t"]}}, check=False)\n'
                  f'    return r["status"]\n')
    _, caller_id = leaf_and_caller(api, caller_src, leaf_src)
    mine, theirs = str(uuid.uuid4()), str(uuid.uuid4())
    result = invoke(api, caller_id, {"mine": mine, "theirs": theirs, "f": opening, "t": funded})
    assert result["status"] == "SUCCEEDED" and result["invocation"]["output"] == "FAILED"
    assert balance(api, funded) == 3
    read = "query($id: UUID!) { financial { transfer(id: $id) { id amount executionId } } }"
    assert api.gql(read, {"id": mine})["financial"]["transfer"]["executionId"] == result["executionId"]
    assert api.gql(read, {"id": theirs})["financial"]["transfer"] is None


# ---------------------------------------------------------------------------- reading back


def test_execution_reads_back_status_invocation_and_children(api):
    leaf_id, caller_id = leaf_and_caller(
        api, 'def run(event):\n    print("calling")\n    return tools.leaf({"n": event["data"]["n"]})\n')
    done = invoke(api, caller_id, {"n": 5})
    read = execution(api, done["executionId"])
    assert read["status"] == "SUCCEEDED"
    assert (read["actionId"], read["actionVersion"], read["depth"]) == (caller_id, 1, 0)
    assert read["parentExecutionId"] is None and read["callSequence"] is None
    invocation = read["invocation"]
    assert invocation["input"] == {"n": 5} and invocation["output"] == {"doubled": 10}
    assert invocation["error"] is None and invocation["logs"] == ["calling"]
    assert invocation["tools"] == [{"name": "leaf", "actionId": leaf_id, "actionVersion": 1}]
    assert invocation["startedAt"] <= invocation["finishedAt"]
    assert [(c["executionId"], c["status"], c["invocation"]["input"]) for c in read["children"]] == [
        (child_id(done["executionId"], 1), "SUCCEEDED", {"n": 5})]


def test_a_failed_execution_reads_back_its_error(api):
    action_id = publish(api, tool("boom", 'def run(event):\n    fail("broken", hint="fix it")\n'))
    done = invoke(api, action_id, {"k": 1})
    read = execution(api, done["executionId"])
    assert read["status"] == "FAILED"
    assert read["invocation"]["input"] == {"k": 1} and read["invocation"]["output"] is None
    assert read["invocation"]["error"] == {"code": "action_failure", "message": "broken", "hint": "fix it"}


def test_an_unknown_execution_reads_as_null(api):
    assert execution(api, str(uuid.uuid4())) is None


def test_a_nested_invoke_action_through_graphql_records_a_child_execution(api):
    leaf_id = publish(api, tool("leaf", 'def run(event):\n    return "from leaf"\n'))
    src = ('def run(event):\n    r = graphql("""mutation($id: UUID!, $input: InvokeActionInput!) { actions {'
           ' invokeAction(id: $id, input: $input) { executionId status invocation { output } } } }""",'
           ' variables={"id": event["data"]["leaf"], "input": {"executionId": event["data"]["eid"], "input": {}}})\n'
           '    return r["actions"]["invokeAction"]\n')
    caller_id = publish(api, tool("caller", src))
    nested = str(uuid.uuid4())
    result = invoke(api, caller_id, {"leaf": leaf_id, "eid": nested})
    assert result["invocation"]["output"] == {"executionId": nested, "status": "SUCCEEDED",
                                              "invocation": {"output": "from leaf"}}
    read = execution(api, nested)
    assert read["status"] == "SUCCEEDED" and read["rootExecutionId"] == result["executionId"]
