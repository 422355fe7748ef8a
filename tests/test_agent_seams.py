"""Where agents meet the other features (DESIGN 13-15): a trigger's agent run on a worker, an agent's
graphql() refused the decisions and the records a running execution may not write, model tools beside
agents in an MCP server and in an agent's tools, a confirmed plan's run raising its events, an agent
through the `anthropic` adapter, and the payload bound on a non-program tool's result."""

from __future__ import annotations

import threading
import time

import pytest

from agent_helpers import agent, agent_settings, call, execution, money_tools, new_id, script, seen, tool_results
from helpers import balance, create_account, funded_account, transfer
from invoke_helpers import INVOKE, invoke, publish, tool
from mcp_helpers import EVERYTHING, call_tool, create_server, list_tools, running_server
from planned_helpers import new_client, plan_of
from test_planned_agents import propose_a_move
from trigger_helpers import REVIEW, create_trigger, wait_for_runs

PAYLOAD_BOUND = 64 * 1024
CLASSIFY_OUTPUT = {"type": "object", "required": ["category"], "additionalProperties": False,
                   "properties": {"category": {"enum": ["rent", "food", "other"]}}}


@pytest.fixture
def settings(db_url, tmp_path, model_server):
    settings = agent_settings(db_url, tmp_path, model_server.url, agent_calls_per_tenant=1,
                              max_payload_bytes=PAYLOAD_BOUND, mcp_allowed_hosts="127.0.0.1:*")
    with settings.models_file.open("a") as models:
        models.write(f'\n[claude]\ntype = "anthropic"\nbase_url = "{model_server.url}"\n')
    return settings


def chat(content: str) -> dict:
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 1700000000, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}


def anthropic_message(content: list, stop_reason: str) -> dict:
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test", "content": content,
            "stop_reason": stop_reason, "stop_sequence": None, "usage": {"input_tokens": 11, "output_tokens": 4}}


def model_tool(name: str = "classify") -> dict:
    return {"name": name, "kind": "model", "description": "Classifies a memo",
            "config": {"model": {"provider": "test", "name": "test-model"}, "instructions": "Classify the memo."},
            "tool": {"name": name, "description": "Classifies a payment memo.",
                     "inputSchema": {"type": "object", "properties": {"memo": {"type": "string"}},
                                     "required": ["memo"]},
                     "outputSchema": CLASSIFY_OUTPUT},
            "policies": EVERYTHING}


def refused(result, message: str) -> bool:
    """A graphql tool call whose document was refused (`start_not_allowed` inside): the model gets the failure
    as a checked graphql() gives it (DESIGN 7: `graphql_error`), with the refusal's message and hint."""
    return result.is_error and result.content.startswith(f"graphql_error: {message}\nhint: ")


# ---------------------------------------------------------------------------- triggers


def test_a_triggers_agent_run_on_a_worker_holds_no_agent_slot(api, services, model_server, worker):
    slow = publish(api, agent("slow", provider="local"))
    model_server.queue(200, chat("first"), delay=5)
    holder: dict = {}
    thread = threading.Thread(target=lambda: holder.update(body=api.post(
        INVOKE, {"id": slow, "input": {"executionId": new_id(), "input": {}}}).json()))
    thread.start()
    deadline = time.monotonic() + 10
    while len(model_server.seen) < 1:  # the called agent holds the tenant's only slot
        assert time.monotonic() < deadline
        time.sleep(0.02)
    watcher = publish(api, agent("watcher"))
    script(services, [{"text": "noted"}])
    trigger = create_trigger(api, watcher, name="watch_accounts", event="financial.Account.inserted",
                             input={"request": {"$cel": "event.recordId"}})
    create_account(api, "savings")
    (run,) = wait_for_runs(api, trigger["id"], 1, timeout=4)
    assert thread.is_alive(), "the run must finish while the called agent still holds the slot"
    assert run["status"] == "SUCCEEDED" and run["invocation"]["output"] == {"text": "noted"}
    thread.join(30)
    assert holder["body"]["data"]["actions"]["invokeAction"]["invocation"]["output"] == {"text": "first"}


def test_an_agent_cannot_create_a_trigger_through_graphql(api, services):
    review = publish(api, tool("review", REVIEW))
    agent_id = publish(api, agent("standing", [{"name": "graphql"}]))
    document = ('mutation($id: UUID!, $action: UUID!) { triggers { createTrigger(id: $id, input: {name: "standing",'
                ' event: "financial.Transfer.inserted", actionId: $action}) { id } } }')
    script(services, [{"tool_calls": [call("graphql", {"document": document,
                                                       "variables": {"id": new_id(), "action": review}})]},
                      {"text": "refused"}])
    assert invoke(api, agent_id, {})["status"] == "SUCCEEDED"
    (result,) = tool_results(seen(services)[1])
    assert refused(result, "a trigger cannot be written from inside an execution"), result.content
    assert api.gql("{ triggers { triggers { id } } }")["triggers"]["triggers"] == []


def test_a_trigger_on_execution_updated_reacts_to_a_confirmed_plans_run(api, services, worker):
    _, planned, payer, payee = propose_a_move(api, services, 250)
    move = plan_of(api, planned["plannedActionId"])["actionId"]
    alert = publish(api, tool("alert", REVIEW))
    trigger = create_trigger(api, alert, name="after_confirmed", event="financial.ActionExecution.updated",
                             condition=f'event.record.status == "SUCCEEDED" && event.record.action_id == "{move}"',
                             input={"execution": {"$cel": "event.recordId"}, "was": {"$cel": "event.previous.status"}})
    _, person = new_client(api, "person", EVERYTHING)
    confirmed = api.as_client(person).gql(
        "mutation($id: UUID!) { plannedActions { confirmPlannedAction(id: $id) { executionId } } }",
        {"id": planned["plannedActionId"]})["plannedActions"]["confirmPlannedAction"]
    (run,) = wait_for_runs(api, trigger["id"], 1)
    assert run["status"] == "SUCCEEDED", run["invocation"]
    assert run["event"]["data"] == {"execution": confirmed["executionId"], "was": "RUNNING"}
    assert (balance(api, payer), balance(api, payee)) == (750, 250)


# ---------------------------------------------------------------------------- plans


@pytest.mark.parametrize("decision", ["confirmPlannedAction(id: $id) { status }",
                                      'rejectPlannedAction(id: $id, reason: "no") { status }'])
def test_an_agent_cannot_decide_a_plan_through_graphql(api, services, decision):
    _, planned, payer, payee = propose_a_move(api, services, 250)
    # Another client's agent, so that only being inside an execution refuses it.
    _, person = new_client(api, "person", EVERYTHING)
    decider = publish(api, agent("decider", [{"name": "graphql"}]))
    script(services, [{"tool_calls": [call("graphql", {
        "document": f"mutation($id: UUID!) {{ plannedActions {{ {decision} }} }}",
        "variables": {"id": planned["plannedActionId"]}})]}, {"text": "refused"}])
    assert invoke(api.as_client(person), decider, {})["status"] == "SUCCEEDED"
    (result,) = tool_results(seen(services)[1])
    assert refused(result, "a planned action cannot be decided from inside an execution"), result.content
    assert plan_of(api, planned["plannedActionId"])["status"] == "PROPOSED"
    assert (balance(api, payer), balance(api, payee)) == (1_000, 0)


# ---------------------------------------------------------------------------- model tools beside agents


def test_an_mcp_server_lists_a_model_tool_and_an_agent_side_by_side(api, services):
    publish(api, model_tool())
    publish(api, agent("bookkeeper"))
    create_server(api, "desk", [{"name": "classify"}, {"name": "bookkeeper"}], policies=EVERYTHING)
    script(services, [{"output": {"category": "rent"}}, {"text": "done"}])
    with running_server(services) as url:
        listed = list_tools(f"{url}/mcp/desk", api.token)
        classified = call_tool(f"{url}/mcp/desk", api.token, "classify", {"memo": "May rent"})
        answered = call_tool(f"{url}/mcp/desk", api.token, "bookkeeper", {"request": "hello"})
    assert sorted(t.name for t in listed) == ["bookkeeper", "classify"]
    assert {t.name: t.output_schema for t in listed}["classify"] == CLASSIFY_OUTPUT
    assert classified.structured_content == {"category": "rent"}
    assert answered.structured_content == {"text": "done"}


def test_an_agents_tools_may_list_a_model_tool_called_as_a_child_of_its_turn(api, services):
    classify = publish(api, model_tool())
    agent_id = publish(api, agent("sorter", [{"name": "classify"}]))
    script(services, [{"tool_calls": [call("classify", {"memo": "pizza"})]},
                      {"output": {"category": "food"}},
                      {"text": "food"}])
    ran = invoke(api, agent_id, {})
    assert ran["status"] == "SUCCEEDED" and ran["invocation"]["output"] == {"text": "food"}
    first, model_request, last = seen(services)
    assert [t.name for t in first.tools] == ["classify", "read_result"]
    assert model_request.response_schema == CLASSIFY_OUTPUT and model_request.tools == ()
    assert tool_results(last)[0].content == '{"category":"food"}'
    recorded = execution(api, ran["executionId"])
    assert recorded["invocation"]["usage"]["modelCalls"] == 2  # the turn's own calls; the tool's are its own
    child = next(c for c in recorded["children"] if c["actionId"] == classify)
    assert child["status"] == "SUCCEEDED" and child["depth"] == 1


# ---------------------------------------------------------------------------- the anthropic adapter


def test_an_agent_runs_its_turn_through_the_anthropic_adapter(api, services, model_server):
    money_tools(api)
    _, funded = funded_account(api, 120)
    agent_id = publish(api, agent("claude_keeper", [{"name": "balance"}], provider="claude"))
    model_server.queue(200, anthropic_message([{"type": "tool_use", "id": "toolu_1", "name": "balance",
                                                "input": {"account_id": funded}}], "tool_use"))
    model_server.queue(200, anthropic_message([{"type": "text", "text": "1.20"}], "end_turn"))
    ran = invoke(api, agent_id, {"request": "balance?"})
    assert ran["status"] == "SUCCEEDED", ran["invocation"]["error"]
    assert ran["invocation"]["output"] == {"text": "1.20"}
    first, second = model_server.seen
    assert first.path == second.path == "/v1/messages"
    assert first.body["system"] == "You keep the books."
    assert first.body["messages"] == [{"role": "user", "content": '{"request":"balance?"}'}]
    assert [t["name"] for t in first.body["tools"]] == ["balance", "read_result"]
    assert second.body["messages"][1:] == [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "balance",
                                           "input": {"account_id": funded}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                      "content": '{"balance":120,"currency":"USD"}'}]}]
    assert execution(api, ran["executionId"])["invocation"]["usage"] == {"inputTokens": 22, "outputTokens": 8,
                                                                          "modelCalls": 2}


# ---------------------------------------------------------------------------- the payload bound


READ_TWO = """query($a: UUID!, $b: UUID!) {
  a: actions { execution(id: $a) { invocation { output } } }
  b: actions { execution(id: $b) { invocation { output } } } }"""


def test_a_graphql_result_over_the_payload_bound_fails_that_call_and_is_fed_back(api, services):
    half = publish(api, tool("half", 'def run(event):\n    return "x" * 40000\n'))
    a, b = invoke(api, half, {})["executionId"], invoke(api, half, {})["executionId"]
    agent_id = publish(api, agent("reader", [{"name": "graphql"}]))
    script(services, [{"tool_calls": [call("graphql", {"document": READ_TWO, "variables": {"a": a, "b": b}})]},
                      {"text": "too big"}])
    ran = invoke(api, agent_id, {})
    assert ran["status"] == "SUCCEEDED" and ran["invocation"]["output"] == {"text": "too big"}
    (result,) = tool_results(seen(services)[1])
    assert result.is_error and result.content.startswith("action_resource_exhausted: ")
    assert f"payload bound of {PAYLOAD_BOUND} bytes" in result.content
    assert ran["children"][1]["status"] == "FAILED"


# ---------------------------------------------------------------------------- a model tool in a transaction


PAY_SRC = '''
def run(event):
    d = event["data"]
    graphql("query($id: UUID!) { financial { account(id: $id) { balance } } }", variables = {"id": d["from"]})
    label = tools.classify({"memo": "rent"})
    graphql("""mutation($id: UUID!, $from: UUID!, $to: UUID!) { financial {
      createTransfer(id: $id, input: {fromAccountId: $from, toAccountId: $to, amount: 100}) { id } } }""",
            variables = {"id": d["transfer_id"], "from": d["from"], "to": d["to"]})
    return label
'''


def test_a_request_whose_model_tool_was_called_is_not_run_again_after_a_lost_race(api, services, model_server):
    opening, funded = funded_account(api, 1000)
    target = create_account(api, "target")
    publish(api, {**model_tool(), "config": {"model": {"provider": "local", "name": "m"},
                                             "instructions": "Classify the memo."}})
    pay = publish(api, tool("pay", PAY_SRC, tools=[{"name": "classify"}]))
    model_server.queue(200, chat('{"category": "rent"}'), delay=1.5)
    answer: dict = {}
    thread = threading.Thread(target=lambda: answer.update(body=api.post(INVOKE, {"id": pay, "input": {
        "executionId": new_id(), "input": {"from": funded, "to": target, "transfer_id": new_id()}}}).json()))
    thread.start()
    deadline = time.monotonic() + 10
    while len(model_server.seen) < 1:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    # While the model thinks, another request moves money from the account the call has read.
    transfer(api, funded, opening, 50)
    thread.join(30)
    (error,) = answer["body"]["errors"]
    assert error["extensions"]["code"] == "retryable" and "did not run it again" in error["extensions"]["hint"]
    assert len(model_server.seen) == 1  # the server did not call the model again
    assert balance(api, funded) == 950 and balance(api, target) == 0
