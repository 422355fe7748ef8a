"""invokeAction from inside a program, through graphql(): ids, depth, and how its failures map."""

import uuid

from invoke_helpers import invoke, publish, tool

NESTED_INVOKE = ('"""mutation($id: UUID!, $input: InvokeActionInput!) { actions { invokeAction(id: $id, input: $input) {'
                 ' executionId status invocation { output error { code } } } } }"""')


def invoker(name: str, *, check: bool = True, times: int = 1) -> dict:
    """A tool that invokes event.data.target `times` times with executionId event.data.eid and input event.data.input."""
    flag = "" if check else ", check=False"
    src = ('def run(event):\n    d = event["data"]\n    out = []\n'
           f'    for i in range({times}):\n'
           f'        out.append(graphql({NESTED_INVOKE}, variables={{"id": d["target"], "input": {{"executionId": d["eid"],'
           f' "input": d.get("input", {{}})}}}}{flag}))\n'
           '    return out\n')
    return tool(name, src)


def test_a_nested_invoke_repeating_an_execution_id_returns_the_recorded_execution(api):
    counter = publish(api, tool("counter", 'def run(event):\n    print("ran")\n    return event["data"]["n"]\n'))
    caller = publish(api, invoker("caller", times=2))
    nested = str(uuid.uuid4())
    result = invoke(api, caller, {"target": counter, "eid": nested, "input": {"n": 7}})
    assert result["status"] == "SUCCEEDED", result["invocation"]["error"]
    answers = [r["actions"]["invokeAction"] for r in result["invocation"]["output"]]
    assert answers == [{"executionId": nested, "status": "SUCCEEDED", "invocation": {"output": 7, "error": None}}] * 2
    read = api.gql("query($id: UUID!) { actions { execution(id: $id) { status invocation { logs } } } }", {"id": nested})
    assert read["actions"]["execution"] == {"status": "SUCCEEDED", "invocation": {"logs": ["ran"]}}


def test_a_nested_invoke_reusing_a_running_execution_id_for_another_call_is_a_conflict(api):
    other = publish(api, tool("other", 'def run(event):\n    return 1\n'))
    caller = publish(api, invoker("caller", check=False))
    own = str(uuid.uuid4())
    result = invoke(api, caller, {"target": other, "eid": own}, execution_id=own)
    assert result["status"] == "SUCCEEDED", result["invocation"]["error"]
    errors = result["invocation"]["output"][0]["errors"]
    assert [e["extensions"]["code"] for e in errors] == ["execution_id_conflict"]


def test_nested_invokes_through_graphql_are_bounded_by_the_tool_depth(api):
    # Each level invokes the next level's tool through graphql(); the chain is t0 -> t1 -> ... -> t10.
    ids = [str(uuid.uuid4()) for _ in range(11)]
    src = ('def run(event):\n    d = event["data"]\n    if d["level"] == len(d["ids"]) - 1:\n        return d["level"]\n'
           f'    r = graphql({NESTED_INVOKE}, variables={{"id": d["ids"][d["level"] + 1], "input": {{"executionId": d["eids"][d["level"] + 1],'
           ' "input": {"level": d["level"] + 1, "ids": d["ids"], "eids": d["eids"]}}})\n'
           '    inner = r["actions"]["invokeAction"]\n'
           '    if inner["status"] != "SUCCEEDED":\n        return {"failed": inner["invocation"]["error"]["code"]}\n'
           '    return inner["invocation"]["output"]\n')
    for level, action_id in enumerate(ids):
        api.gql("""mutation($id: UUID!, $d: ActionInput!) { actions { createAction(id: $id, input: $d) { actionId }
                   publishAction(id: $id) { status } } }""", {"id": action_id, "d": tool(f"t{level}", src)})
    eids = [str(uuid.uuid4()) for _ in ids]
    nine = invoke(api, ids[2], {"level": 2, "ids": ids, "eids": eids})  # levels 2..10: nine tools
    assert nine["status"] == "SUCCEEDED", nine["invocation"]["error"]
    assert nine["invocation"]["output"] == 10
    eids = [str(uuid.uuid4()) for _ in ids]
    ten = invoke(api, ids[1], {"level": 1, "ids": ids, "eids": eids})
    # The tool at depth 8 fails when it invokes a 10th level; the levels above report its failure.
    assert ten["invocation"]["output"] == {"failed": "action_call_limit_exceeded"}


def test_graphql_with_check_true_maps_an_uncallable_nested_invoke_to_graphql_error(api):
    draft = str(uuid.uuid4())
    api.gql("""mutation($id: UUID!, $d: ActionInput!) { actions { createAction(id: $id, input: $d) { actionId } } }""",
            {"id": draft, "d": tool("draft", 'def run(event):\n    return 1\n')})
    caller = publish(api, invoker("caller"))
    result = invoke(api, caller, {"target": draft, "eid": str(uuid.uuid4())})
    assert result["status"] == "FAILED"
    error = result["invocation"]["error"]
    assert error["code"] == "graphql_error"
    assert "UNPUBLISHED" in error["message"] and error["hint"]


def test_graphql_with_check_false_keeps_the_original_code_of_each_error(api):
    draft = str(uuid.uuid4())
    api.gql("""mutation($id: UUID!, $d: ActionInput!) { actions { createAction(id: $id, input: $d) { actionId } } }""",
            {"id": draft, "d": tool("draft", 'def run(event):\n    return 1\n')})
    caller = publish(api, invoker("caller", check=False))
    result = invoke(api, caller, {"target": draft, "eid": str(uuid.uuid4())})
    errors = result["invocation"]["output"][0]["errors"]
    assert [e["extensions"]["code"] for e in errors] == ["action_not_callable"]


def test_a_document_with_several_operations_and_no_name_is_graphql_error(api):
    src = 'def run(event):\n    return graphql(event["data"]["doc"])\n'
    action_id = publish(api, tool("runner", src))
    doc = "query A { financial { accounts(first: 1) { id } } } query B { financial { accounts(first: 2) { id } } }"
    result = invoke(api, action_id, {"doc": doc})
    assert result["status"] == "FAILED"
    assert result["invocation"]["error"]["code"] == "graphql_error"


def test_a_named_operation_of_several_runs(api):
    src = 'def run(event):\n    return graphql(event["data"]["doc"], operation_name="B")\n'
    action_id = publish(api, tool("runner", src))
    doc = "query A { financial { accounts(first: 1) { id } } } query B { financial { accounts(first: 2) { name } } }"
    result = invoke(api, action_id, {"doc": doc})
    assert result["invocation"]["output"] == {"financial": {"accounts": []}}


def test_an_empty_document_is_graphql_error(api):
    action_id = publish(api, tool("runner", 'def run(event):\n    return graphql(event["data"]["doc"], check=False)\n'))
    result = invoke(api, action_id, {"doc": ""})
    assert result["status"] == "SUCCEEDED", result["invocation"]["error"]
    output = result["invocation"]["output"]
    assert output["data"] is None and output["errors"][0]["extensions"]["code"] == "graphql_validation_failed"


def test_a_nested_invoke_is_bounded_by_the_callers_response_timeout(api):
    import time

    from invoke_helpers import INVOKE

    spinner = publish(api, tool("spinner", 'def run(event):\n    for i in range(2000000000):\n        for j in range(2000000000):\n'
                                           '            pass\n', timeout_ms=60_000))
    caller = invoker("caller", check=False)
    caller["tool"]["responseTimeout"] = 1000
    caller_id = publish(api, caller)
    started = time.monotonic()
    body = api.post(INVOKE, {"id": caller_id, "input": {"executionId": str(uuid.uuid4()),
                                                        "input": {"target": spinner, "eid": str(uuid.uuid4())}}},
                    headers={"Request-Timeout": "8"}).json()
    assert time.monotonic() - started < 5
    result = body["data"]["actions"]["invokeAction"]
    assert result["status"] == "FAILED"
    assert result["invocation"]["error"]["code"] == "action_response_timeout"


def test_a_started_executions_program_is_refused_reentry_through_graphql_too(api, services):
    import time

    from ledger.queue.worker import Worker

    start = """mutation($id: UUID!, $input: StartActionInput!) { actions { startAction(id: $id, input: $input) {
               executionId } } }"""
    read = """query($id: UUID!) { actions { execution(id: $id) { status invocation { output } } } }"""
    again = str(uuid.uuid4())
    api.gql("""mutation($id: UUID!, $d: ActionInput!) { actions { createAction(id: $id, input: $d) { actionId }
               publishAction(id: $id) { status } } }""", {"id": again, "d": invoker("again", check=False)})
    execution_id = str(uuid.uuid4())
    api.gql(start, {"id": again, "input": {"executionId": execution_id,
                                           "input": {"target": again, "eid": str(uuid.uuid4())}}})
    worker = Worker(services, concurrency=1, lease_seconds=2.0, poll_interval=0.1).start()
    try:
        deadline = time.monotonic() + 20
        while (execution := api.gql(read, {"id": execution_id})["actions"]["execution"])["status"] not in ("SUCCEEDED", "FAILED"):
            assert time.monotonic() < deadline, execution
            time.sleep(0.05)
    finally:
        worker.stop()
    errors = execution["invocation"]["output"][0]["errors"]
    assert [e["extensions"]["code"] for e in errors] == ["action_call_limit_exceeded"]
