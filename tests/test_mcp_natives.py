"""The natives an MCP server can list (DESIGN 12): `invoke` (call, preview, start), `get_task`,
`cancel_task` and `program` (code mode), through the SDK's own client over real HTTP against a running
server, on the real PostgreSQL."""

from __future__ import annotations

import time
import uuid

from helpers import balance, create_account, transfer
from test_invoke_limits import chain_of_tools
from live_helpers import TRANSFER
from mcp_helpers import (EVERYTHING, UPDATE_SERVER, call_tool, count_rows, create_client, create_server, list_tools,
                         reference)
from mcp_helpers import examples, served, settings  # noqa: F401  (fixtures)

from ledger.actions.natives import CEL_ID, GRAPHQL_ID, INVOKE_ID, PROGRAM_ID

TREE = """query($id: UUID!) { actions { execution(id: $id) {
  executionId actionId status rolledBack mcpServerId startedBy { executionId }
  invocation { output error { code message hint } }
  children { executionId actionId status rolledBack parentExecutionId
             children { actionId status rolledBack } } } } }"""
TRANSFERS = """query($id: UUID!) { financial { transfers(accountId: $id, first: 50) { id amount } } }"""
# A server that lets its callers do anything (the tools' own layers still narrow), and cancel tasks.
NATIVES = [reference("invoke"), reference("get_task"), reference("cancel_task"), reference("program")]


def worker_for(services):
    from ledger.queue.worker import Worker

    return Worker(services, concurrency=2, lease_seconds=2.0, poll_interval=0.2).start()


def url_of(served: str, name: str) -> str:
    return f"{served}/mcp/{name}"


def money(api) -> tuple[str, str, str]:
    """A payer holding 10,000 and two empty accounts."""
    opening = create_account(api, "opening", overdraft=True)
    payer, middle, payee = create_account(api, "payer"), create_account(api, "middle"), create_account(api, "payee")
    transfer(api, opening, payer, 10_000)
    return payer, middle, payee


def moving(source: str, target: str, amount: int) -> dict:
    return {"transfer_id": str(uuid.uuid4()), "from_account": source, "to_account": target, "amount": amount}


def tree(api, execution_id: str) -> dict:
    return api.gql(TREE, {"id": execution_id})["actions"]["execution"]


def error_of(result) -> dict:
    assert result.is_error is True, result.content
    return result.meta["ledger/error"]


def desk(api, *tools: dict, policies=None) -> str:
    return create_server(api, "desk", [reference("transfer"), reference("get_account_activity"), *NATIVES, *tools],
                         EVERYTHING if policies is None else policies)


# ---------------------------------------------------------------------------- listing


def test_a_server_lists_the_natives_it_names_with_their_schemas(served, examples):
    desk(examples)
    tools = {t.name: t for t in list_tools(url_of(served, "desk"), examples.token)}
    assert list(tools) == ["transfer", "get_account_activity", "invoke", "get_task", "cancel_task", "program"]
    assert tools["program"].input_schema["required"] == ["src"]
    assert tools["invoke"].input_schema["required"] == ["tool"]
    assert tools["get_task"].output_schema["required"] == ["taskId", "status"]
    assert tools["program"].meta["ledger/actionId"] == str(PROGRAM_ID)


# ---------------------------------------------------------------------------- program


THREE_MOVES = """
def run():
    first = tools.transfer(transfer_id = "{t1}", from_account = "{payer}", to_account = "{middle}", amount = 600)
    second = tools.transfer(transfer_id = "{t2}", from_account = "{middle}", to_account = "{payee}",
                            amount = first["amount"] // 2)
    print("moved", first["amount"], second["amount"])
    third = tools.transfer(transfer_id = "{t3}", from_account = "{middle}", to_account = "{payee}",
                           amount = {third})
    return [first["amount"], second["amount"], third["amount"]]
"""


def three_moves(payer: str, middle: str, payee: str, third: int) -> str:
    return THREE_MOVES.format(t1=uuid.uuid4(), t2=uuid.uuid4(), t3=uuid.uuid4(), payer=payer, middle=middle,
                              payee=payee, third=third)


def test_a_program_makes_three_dependent_calls_and_answers_value_and_logs(served, examples):
    payer, middle, payee = money(examples)
    server_id = desk(examples)
    result = call_tool(url_of(served, "desk"), examples.token, "program", {"src": three_moves(payer, middle, payee, 300)})
    assert result.is_error is False, result.content
    assert result.structured_content == {"value": [600, 300, 300], "logs": ["moved 600 300"]}
    assert (balance(examples, payer), balance(examples, middle), balance(examples, payee)) == (9_400, 0, 600)
    recorded = tree(examples, result.meta["ledger/executionId"])
    assert (recorded["actionId"], recorded["status"], recorded["mcpServerId"]) == (str(PROGRAM_ID), "SUCCEEDED",
                                                                                   server_id)
    assert [(c["actionId"], c["status"], c["rolledBack"]) for c in recorded["children"]] == \
        [(TRANSFER, "SUCCEEDED", False)] * 3


def test_a_failure_in_a_program_s_third_call_rolls_back_the_first_two(served, examples):
    payer, middle, payee = money(examples)
    desk(examples)
    # The third call would take more than `middle` holds: insufficient_funds.
    result = call_tool(url_of(served, "desk"), examples.token, "program", {"src": three_moves(payer, middle, payee, 301)})
    error = error_of(result)
    assert error["code"] == "insufficient_funds"
    assert (balance(examples, payer), balance(examples, middle), balance(examples, payee)) == (10_000, 0, 0)
    assert examples.gql(TRANSFERS, {"id": middle})["financial"]["transfers"] == []
    recorded = tree(examples, result.meta["ledger/executionId"])
    assert recorded["status"] == "FAILED"
    assert [(c["status"], c["rolledBack"]) for c in recorded["children"]] == \
        [("SUCCEEDED", True), ("SUCCEEDED", True), ("FAILED", True)]


def test_attempt_returns_a_failure_instead_of_failing_the_program(served, examples):
    payer, middle, _ = money(examples)
    desk(examples)
    src = f"""
def run():
    r = attempt(tools.transfer, transfer_id = "{uuid.uuid4()}", from_account = "{middle}", to_account = "{payer}",
                amount = 5)
    return [r["status"], r["error"]["code"], len(r["executionId"])]
"""
    result = call_tool(url_of(served, "desk"), examples.token, "program", {"src": src})
    assert result.is_error is False, result.content
    assert result.structured_content["value"] == ["FAILED", "insufficient_funds", 36]


def test_tools_take_keyword_arguments_and_attempt_takes_a_tool(served, examples):
    desk(examples)
    positional = error_of(call_tool(url_of(served, "desk"), examples.token, "program",
                                    {"src": "def run():\n    return tools.transfer({'amount': 1})\n"}))
    assert positional["code"] == "action_failure"
    assert "keyword arguments" in positional["message"]
    not_a_tool = error_of(call_tool(url_of(served, "desk"), examples.token, "program",
                                    {"src": "def run():\n    return attempt(len, x = 1)\n"}))
    assert "attempt() takes one of tools.<name>" in not_a_tool["message"]


def test_a_program_s_compile_error_answers_its_line_and_column(served, examples):
    desk(examples)
    result = call_tool(url_of(served, "desk"), examples.token, "program",
                       {"src": "def run():\n    return graphql('{ __typename }')\n"})
    error = error_of(result)
    # The server lists no graphql: in its programs graphql() does not exist.
    assert error["code"] == "action_failure"
    assert "line 2, column 12" in error["message"] and "graphql" in error["message"]
    wrong = error_of(call_tool(url_of(served, "desk"), examples.token, "program", {"src": "def run(event):\n    return 1\n"}))
    assert "no argument" in wrong["message"]


def test_graphql_and_cel_exist_in_a_program_when_the_server_lists_them(served, examples):
    desk(examples, reference("graphql"), reference("cel"))
    src = "def run():\n    return [cel('x + 1', {'x': 2}), graphql('{ __typename }')['__typename']]\n"
    result = call_tool(url_of(served, "desk"), examples.token, "program", {"src": src})
    assert result.is_error is False, result.content
    assert result.structured_content["value"] == [3, "Query"]
    recorded = tree(examples, result.meta["ledger/executionId"])
    assert [c["actionId"] for c in recorded["children"]] == [str(CEL_ID), str(GRAPHQL_ID)]


def test_the_1025th_call_in_a_program_fails_with_the_call_limit(served, examples):
    desk(examples, reference("cel"))
    loop = "def run():\n    for i in range({n}):\n        cel('1')\n    return {n}\n"
    full = call_tool(url_of(served, "desk"), examples.token, "program", {"src": loop.format(n=1024)})
    assert full.is_error is False, full.content
    over = call_tool(url_of(served, "desk"), examples.token, "program", {"src": loop.format(n=1025)})
    assert error_of(over)["code"] == "action_call_limit_exceeded"


def test_a_program_adds_no_tool_level(served, examples):
    chain_of_tools(examples, 10)  # t0 -> t1 -> ... -> t9
    create_server(examples, "nine", [reference("t1"), reference("program")], EVERYTHING)
    create_server(examples, "ten", [reference("t0"), reference("program")], EVERYTHING)
    # Nine tool levels beneath the program, as beneath any first call.
    nine = call_tool(url_of(served, "nine"), examples.token, "program", {"src": "def run():\n    return tools.t1(depth = 1)\n"})
    assert nine.is_error is False, nine.content
    assert nine.structured_content["value"] == list(range(1, 10))
    ten = call_tool(url_of(served, "ten"), examples.token, "program", {"src": "def run():\n    return tools.t0(depth = 0)\n"})
    assert error_of(ten)["code"] == "action_call_limit_exceeded"


def test_a_program_preview_answers_the_same_and_keeps_its_records_rolled_back(served, examples):
    payer, middle, payee = money(examples)
    desk(examples)
    result = call_tool(url_of(served, "desk"), examples.token, "program",
                       {"src": three_moves(payer, middle, payee, 300), "preview": True})
    assert result.is_error is False, result.content
    assert result.structured_content == {"value": [600, 300, 300], "logs": ["moved 600 300"], "preview": True}
    assert (balance(examples, payer), balance(examples, payee)) == (10_000, 0)
    recorded = tree(examples, result.meta["ledger/executionId"])
    assert recorded["status"] == "SUCCEEDED"
    assert [c["rolledBack"] for c in recorded["children"]] == [True, True, True]


def test_a_denial_in_a_program_names_the_server_s_layer(served, examples):
    payer, middle, _ = money(examples)
    no_writes = [{"effect": "ALLOW", "actions": ["SELECT", "INVOKE"], "resources": ["financial.*"]},
                 {"effect": "ALLOW", "actions": ["INSERT"], "resources": ["financial.ActionExecution.document"]}]
    desk(examples, policies=no_writes)
    src = f"""
def run():
    return tools.transfer(transfer_id = "{uuid.uuid4()}", from_account = "{payer}", to_account = "{middle}", amount = 5)
"""
    error = error_of(call_tool(url_of(served, "desk"), examples.token, "program", {"src": src}))
    assert error["code"] == "action_permission_denied"
    assert 'MCP server "desk"' in error["hint"]
    assert balance(examples, payer) == 10_000


# ---------------------------------------------------------------------------- invoke


def test_invoke_calls_a_listed_tool_as_a_child_with_a_derived_id(served, examples):
    payer, middle, _ = money(examples)
    desk(examples)
    result = call_tool(url_of(served, "desk"), examples.token, "invoke",
                       {"tool": "transfer", "input": moving(payer, middle, 250)})
    assert result.is_error is False, result.content
    assert result.structured_content["amount"] == 250
    invoke_id = result.meta["ledger/executionId"]
    recorded = tree(examples, invoke_id)
    assert recorded["actionId"] == str(INVOKE_ID)
    (child,) = recorded["children"]
    assert (child["actionId"], child["parentExecutionId"], child["rolledBack"]) == (TRANSFER, invoke_id, False)
    assert uuid.UUID(child["executionId"]).version == 8  # keyed: only the server derives it
    assert balance(examples, middle) == 250


def test_invoke_preview_keeps_its_records_rolled_back_and_writes_nothing(served, examples, db_url):
    payer, middle, _ = money(examples)
    desk(examples)
    transfers_before = count_rows(db_url, "transfers")
    result = call_tool(url_of(served, "desk"), examples.token, "invoke",
                       {"tool": "transfer", "input": moving(payer, middle, 250), "preview": True})
    assert result.is_error is False, result.content
    answer = result.structured_content
    assert (answer["status"], answer["output"]["amount"]) == ("SUCCEEDED", 250)
    assert answer["children"] == [{"actionId": str(GRAPHQL_ID), "status": "SUCCEEDED"}]
    assert count_rows(db_url, "transfers") == transfers_before
    assert balance(examples, middle) == 0
    (child,) = tree(examples, result.meta["ledger/executionId"])["children"]
    assert (child["status"], child["rolledBack"]) == ("SUCCEEDED", True)
    assert child["children"] == [{"actionId": str(GRAPHQL_ID), "status": "SUCCEEDED", "rolledBack": True}]


def test_invoke_refuses_a_version_other_than_the_reference_s_pin(served, examples):
    payer, middle, _ = money(examples)
    create_server(examples, "desk", [reference("transfer", version=1), reference("invoke")], EVERYTHING)
    result = call_tool(url_of(served, "desk"), examples.token, "invoke",
                       {"tool": "transfer", "version": 2, "input": moving(payer, middle, 250)})
    error = error_of(result)
    assert error["code"] == "action_not_callable"
    assert "version 1" in error["hint"]
    assert balance(examples, middle) == 0
    same = call_tool(url_of(served, "desk"), examples.token, "invoke",
                     {"tool": "transfer", "version": 1, "input": moving(payer, middle, 250)})
    assert same.is_error is False, same.content


def test_invoke_of_a_tool_the_server_does_not_list_is_not_found(served, examples):
    create_server(examples, "desk", [reference("invoke")], EVERYTHING)
    error = error_of(call_tool(url_of(served, "desk"), examples.token, "invoke", {"tool": "transfer"}))
    assert error["code"] == "not_found"


def test_invoke_of_a_confirm_reference_never_runs_the_tool(served, examples):
    # DESIGN 14: it answers the planned result (tests/test_planned.py follows the plan).
    payer, middle, _ = money(examples)
    create_server(examples, "desk", [reference("transfer", confirm=True), reference("invoke")], EVERYTHING)
    result = call_tool(url_of(served, "desk"), examples.token, "invoke",
                       {"tool": "transfer", "input": moving(payer, middle, 250)})
    assert result.is_error is False, result.content
    assert result.structured_content["planned"] is True
    assert balance(examples, middle) == 0


# ---------------------------------------------------------------------------- tasks


def start_task(url: str, token: str, tool: str, input: dict) -> tuple[str, str]:
    """(taskId, the invoke's executionId)."""
    result = call_tool(url, token, "invoke", {"tool": tool, "input": input, "start": True})
    assert result.is_error is False, result.content
    assert result.structured_content["status"] == "working"
    return result.structured_content["taskId"], result.meta["ledger/executionId"]


def poll(url: str, token: str, task_id: str, until=("completed", "failed", "cancelled"), timeout: float = 20) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        result = call_tool(url, token, "get_task", {"taskId": task_id})
        assert result.is_error is False, result.content
        if result.structured_content["status"] in until or time.monotonic() > deadline:
            return result.structured_content
        time.sleep(0.2)


def test_invoke_start_then_get_task_until_completed(served, examples, services):
    payer, middle, _ = money(examples)
    server_id = desk(examples)
    task_id, invoke_id = start_task(url_of(served, "desk"), examples.token, "transfer", moving(payer, middle, 400))
    first = call_tool(url_of(served, "desk"), examples.token, "get_task", {"taskId": task_id}).structured_content
    assert (first["status"], first["pollIntervalMs"]) == ("working", 1000)
    worker = worker_for(services)
    try:
        task = poll(url_of(served, "desk"), examples.token, task_id)
    finally:
        worker.stop()
    assert (task["taskId"], task["status"], task["error"]) == (task_id, "completed", None)
    assert task["output"]["amount"] == 400
    assert balance(examples, middle) == 400
    started = tree(examples, task_id)
    assert started["startedBy"] == {"executionId": invoke_id}
    assert started["mcpServerId"] == server_id


def test_cancel_task_cancels_a_queued_task_and_refuses_a_finished_one(served, examples, services):
    payer, middle, _ = money(examples)
    desk(examples)
    task_id, _ = start_task(url_of(served, "desk"), examples.token, "transfer", moving(payer, middle, 400))
    cancelled = call_tool(url_of(served, "desk"), examples.token, "cancel_task", {"taskId": task_id})
    assert cancelled.is_error is False, cancelled.content
    assert cancelled.structured_content["status"] == "cancelled"
    assert poll(url_of(served, "desk"), examples.token, task_id)["status"] == "cancelled"
    done_id, _ = start_task(url_of(served, "desk"), examples.token, "transfer", moving(payer, middle, 100))
    worker = worker_for(services)
    try:
        assert poll(url_of(served, "desk"), examples.token, done_id)["status"] == "completed"
    finally:
        worker.stop()
    error = error_of(call_tool(url_of(served, "desk"), examples.token, "cancel_task", {"taskId": done_id}))
    assert error["code"] == "execution_finished"
    assert balance(examples, middle) == 100


def test_a_task_whose_server_was_disabled_meanwhile_fails_with_access_denied(served, examples, services):
    payer, middle, _ = money(examples)
    server_id = desk(examples)
    task_id, _ = start_task(url_of(served, "desk"), examples.token, "transfer", moving(payer, middle, 400))
    examples.gql(UPDATE_SERVER, {"id": server_id, "input": {
        "name": "desk", "tools": [reference("transfer")], "policies": EVERYTHING, "enabled": False}})
    worker = worker_for(services)
    try:
        deadline = time.monotonic() + 20
        while (recorded := tree(examples, task_id))["status"] not in ("FAILED", "SUCCEEDED"):
            assert time.monotonic() < deadline
            time.sleep(0.2)
    finally:
        worker.stop()
    assert recorded["status"] == "FAILED"
    assert recorded["invocation"]["error"]["code"] == "action_access_denied"
    assert "MCP server" in recorded["invocation"]["error"]["message"]
    assert balance(examples, middle) == 0


def test_get_task_of_another_client_s_task_is_not_found(served, examples):
    payer, middle, _ = money(examples)
    desk(examples)
    task_id, _ = start_task(url_of(served, "desk"), examples.token, "transfer", moving(payer, middle, 400))
    other = create_client(examples, "other", EVERYTHING)
    error = error_of(call_tool(url_of(served, "desk"), other, "get_task", {"taskId": task_id}))
    assert error["code"] == "not_found"
    assert error_of(call_tool(url_of(served, "desk"), other, "cancel_task", {"taskId": task_id}))["code"] == "not_found"
    unknown = error_of(call_tool(url_of(served, "desk"), examples.token, "get_task", {"taskId": str(uuid.uuid4())}))
    assert unknown["code"] == "not_found"
