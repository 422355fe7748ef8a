"""An agent's turn (DESIGN 13) on the real PostgreSQL with the `scripted` provider: the rounds, what the
model saw of each tool result, the round cap, the budget, offload and read_result, the chain, sessions,
and each kind of bad input the model can send, every one ending with the turn recorded."""

from __future__ import annotations

import json
import uuid

import pytest

from agent_helpers import (MODEL, agent, agent_settings, call, execution, money_tools, new_id, script, seen,
                           tool_results, user_texts)
from helpers import balance, create_account, funded_account
from invoke_helpers import INVOKE, invoke, publish, tool

from ledger.actions.natives import MODEL_CALL_ID, READ_RESULT_ID
from ledger.models import AssistantMessage, ToolSpec, UserMessage

USAGE = {"input_tokens": 100, "output_tokens": 10}


@pytest.fixture
def settings(db_url, tmp_path, model_server):
    return agent_settings(db_url, tmp_path, model_server.url)


def child_id(services, parent: str, sequence: int) -> str:
    return str(services.execution_ids.child(uuid.UUID(parent), 1, sequence))


def move(transfer_id: str, source: str, target: str, amount: int) -> dict:
    return call("move", {"transfer_id": transfer_id, "from_account": source, "to_account": target, "amount": amount})


# ---------------------------------------------------------------------------- the loop


def test_a_two_round_turn_moves_money_in_the_callers_transaction(api, services):
    money_tools(api)
    _, funded = funded_account(api, 1000)
    target = create_account(api, "target")
    agent_id = publish(api, agent("bookkeeper", [{"name": "balance"}, {"name": "move"}]))
    transfer_id = new_id()
    responses = [{"tool_calls": [call("balance", {"account_id": funded})], "usage": USAGE},
                 {"tool_calls": [move(transfer_id, funded, target, 250)], "usage": USAGE},
                 {"text": "Moved 2.50.", "usage": {"input_tokens": 300, "output_tokens": 5}}]
    script(services, responses)
    # In a dry run the agent's transfer goes with the request.
    execution_id = new_id()
    dry = api.post(INVOKE, {"id": agent_id, "input": {"executionId": execution_id, "input": {"request": "pay 2.50"}}},
                   headers={"Ledger-Dry-Run": "true"}).json()
    assert dry["data"]["actions"]["invokeAction"]["status"] == "SUCCEEDED", dry
    assert balance(api, funded) == 1000 and execution(api, execution_id) is None

    script(services, responses)
    ran = invoke(api, agent_id, {"request": "pay 2.50"}, execution_id=execution_id)
    assert ran["status"] == "SUCCEEDED"
    assert ran["invocation"]["output"] == {"text": "Moved 2.50."}
    assert balance(api, funded) == 750 and balance(api, target) == 250
    recorded = execution(api, execution_id)
    assert recorded["invocation"]["usage"] == {"inputTokens": 500, "outputTokens": 25, "modelCalls": 3}
    kinds = [(c["callSequence"], c["actionId"] == str(MODEL_CALL_ID), c["status"]) for c in recorded["children"]]
    assert kinds == [(1, True, "SUCCEEDED"), (2, False, "SUCCEEDED"), (3, True, "SUCCEEDED"), (4, False, "SUCCEEDED"),
                     (5, True, "SUCCEEDED")]
    moved = api.gql("query($id: UUID!) { financial { transfer(id: $id) { executionId } } }", {"id": transfer_id})
    assert moved["financial"]["transfer"]["executionId"] == recorded["children"][3]["executionId"]

    first, second, third = seen(services)
    assert first.instructions == "You keep the books." and first.model == MODEL and first.tool_choice == "auto"
    assert first.messages == (UserMessage('{"request":"pay 2.50"}'),)
    assert [t.name for t in first.tools] == ["balance", "move", "read_result"]
    assert first.tools[0] == ToolSpec("balance", "balance tool", {"type": "object", "required": ["account_id"],
                                                                  "properties": {"account_id": {"type": "string"}}})
    assert [r.content for r in tool_results(second)] == ['{"balance":1000,"currency":"USD"}']
    assert [r.content for r in tool_results(third)][-1] == '{"id":"%s","amount":250}' % transfer_id
    # The model call's record: the new messages of the request and the response, the usage, the stop reason.
    model_call = recorded["children"][2]["invocation"]
    assert model_call["input"]["messages"] == [{"role": "tool", "toolCallId": "call_1_1", "name": "balance",
                                                "content": '{"balance":1000,"currency":"USD"}', "isError": False}]
    assert model_call["input"]["provider"] == "test" and model_call["input"]["model"] == MODEL
    assert model_call["output"]["stopReason"] == "tool_calls"
    assert model_call["output"]["usage"] == {"inputTokens": 100, "outputTokens": 10}
    assert model_call["output"]["messages"][0]["tool_calls"][0]["name"] == "move"
    assert recorded["children"][0]["invocation"]["input"]["messages"] == [
        {"role": "system", "content": "You keep the books."}, {"role": "user", "content": '{"request":"pay 2.50"}'}]


def test_a_failed_tool_call_is_fed_back_and_corrected_in_the_next_round(api, services):
    money_tools(api)
    _, funded = funded_account(api, 1000)
    target = create_account(api, "target")
    agent_id = publish(api, agent("bookkeeper", [{"name": "move"}]))
    script(services, [{"tool_calls": [move(new_id(), funded, target, 5000)]},
                      {"tool_calls": [move(new_id(), funded, target, 1000)]},
                      {"text": "Moved all there was."}])
    ran = invoke(api, agent_id, {"request": "move 50.00"})
    assert ran["status"] == "SUCCEEDED" and ran["invocation"]["output"] == {"text": "Moved all there was."}
    (refused,) = tool_results(seen(services)[1])
    assert refused.is_error
    code, rest = refused.content.split(": ", 1)
    assert code == "insufficient_funds" and "\nhint: " in rest
    assert balance(api, funded) == 0 and balance(api, target) == 1000
    statuses = [c["status"] for c in ran["children"]]
    assert statuses == ["SUCCEEDED", "FAILED", "SUCCEEDED", "SUCCEEDED", "SUCCEEDED"]


def test_all_results_of_one_response_go_back_together_in_call_order(api, services):
    money_tools(api)
    _, funded = funded_account(api, 700)
    other = create_account(api, "other")
    agent_id = publish(api, agent("bookkeeper", [{"name": "balance"}]))
    script(services, [{"tool_calls": [call("balance", {"account_id": funded}, "a"),
                                      call("balance", {"account_id": other}, "b"),
                                      call("balance", {"nothing": 1}, "c")]},
                      {"text": "done"}])
    invoke(api, agent_id, {})
    second = seen(services)[1]
    assert isinstance(second.messages[1], AssistantMessage) and len(second.messages[1].tool_calls) == 3
    results = tool_results(second)
    assert [(r.call_id, r.is_error) for r in results] == [("a", False), ("b", False), ("c", True)]
    assert results[0].content == '{"balance":700,"currency":"USD"}'
    assert results[1].content == '{"balance":0,"currency":"USD"}'
    # A schema failure names the first failing path.
    assert results[2].content.startswith("action_input_invalid: the input does not match the tool's inputSchema")
    assert results[2].content.endswith("hint: fix the input at /")


def test_the_round_cap_ends_an_always_calling_model_with_one_call_without_tools(api, services):
    money_tools(api)
    _, funded = funded_account(api, 10)
    agent_id = publish(api, agent("looper", [{"name": "balance"}]))
    script(services, [{"text": "Still checking.", "tool_calls": [call("balance", {"account_id": funded})]}], loop=True)
    ran = invoke(api, agent_id, {})
    assert ran["status"] == "SUCCEEDED" and ran["invocation"]["output"] == {"text": "Still checking."}
    requests = seen(services)
    assert len(requests) == 9
    assert [r.tool_choice for r in requests] == ["auto"] * 8 + ["none"]
    assert [t.name for t in requests[-1].tools] == ["balance", "read_result"]  # still declared
    calls = [c for c in ran["children"] if c["actionId"] == str(MODEL_CALL_ID)]
    assert len(calls) == 9 and len(ran["children"]) == 17
    last = execution(api, ran["executionId"])["children"][-1]["invocation"]
    assert [c["name"] for c in last["output"]["ignoredToolCalls"]] == ["balance"]  # ignored, and recorded
    assert last["input"]["toolChoice"] == "none"


def test_a_lower_round_cap_is_honoured(api, services):
    money_tools(api)
    _, funded = funded_account(api, 10)
    agent_id = publish(api, agent("looper", [{"name": "balance"}], harness={"maxRounds": 2}))
    script(services, [{"text": "more", "tool_calls": [call("balance", {"account_id": funded})]}], loop=True)
    invoke(api, agent_id, {})
    assert [r.tool_choice for r in seen(services)] == ["auto", "auto", "none"]


def test_the_budget_note_is_appended_to_the_last_result_of_each_round_from_80_percent(api, services):
    money_tools(api)
    _, funded = funded_account(api, 10)
    agent_id = publish(api, agent("counter", [{"name": "balance"}], harness={"budget": {"toolCalls": 5}}))
    check = call("balance", {"account_id": funded})
    script(services, [{"tool_calls": [check, check, check]}, {"tool_calls": [check]}, {"tool_calls": [check]},
                      {"text": "Balance is 0.10."}])
    ran = invoke(api, agent_id, {})
    assert ran["invocation"]["output"] == {"text": "Balance is 0.10."}
    requests = seen(services)
    plain = '{"balance":10,"currency":"USD"}'
    by_round = [[r.content for r in tool_results(req)] for req in requests[1:]]
    assert by_round[0] == [plain] * 3  # 3 of 5: below 80%
    assert by_round[1][-1] == plain + "\n\nBudget low: 4 of 5 tool calls used. Finish with what you have."
    assert by_round[2][-1] == plain + "\n\nBudget low: 5 of 5 tool calls used. Finish with what you have."
    # Spent: the next call may not call tools.
    assert [r.tool_choice for r in requests] == ["auto", "auto", "auto", "none"]


def test_the_token_budget_has_its_note_and_ends_the_tools_when_spent(api, services):
    money_tools(api)
    _, funded = funded_account(api, 10)
    agent_id = publish(api, agent("counter", [{"name": "balance"}], harness={"budget": {"tokens": 1000}}))
    check = call("balance", {"account_id": funded})
    script(services, [{"tool_calls": [check], "usage": {"input_tokens": 790, "output_tokens": 20}},
                      {"tool_calls": [check], "usage": {"input_tokens": 200, "output_tokens": 0}},
                      {"text": "ok"}])
    invoke(api, agent_id, {})
    requests = seen(services)
    assert tool_results(requests[1])[-1].content.endswith(
        "\n\nBudget low: 810 of 1000 tokens used. Finish with what you have.")
    assert tool_results(requests[2])[-1].content.endswith(
        "\n\nBudget low: 1010 of 1000 tokens used. Finish with what you have.")
    assert [r.tool_choice for r in requests] == ["auto", "auto", "none"]


# ---------------------------------------------------------------------------- offload and read_result

BIG_SRC = '''
def run(event):
    shape = event["data"]["shape"]
    if shape == "array":
        return list(range(5000))
    if shape == "nested":
        return {"l1": {"l2": {"l3": {"l4": {"l5": {"l6": "z" * 9000}}}}}, "count": 3}
    return "a" * 50000 + "b" * 50000
'''


def test_large_results_reach_the_model_as_shape_keeping_previews_and_read_result_slices_them(api, services):
    publish(api, tool("big", BIG_SRC, schema={"type": "object", "properties": {"shape": {"type": "string"}}}))
    agent_id = publish(api, agent("reader", [{"name": "big"}]))
    execution_id = new_id()
    array_id, nested_id, text_id = (child_id(services, execution_id, n) for n in (2, 3, 4))
    script(services, [
        {"tool_calls": [call("big", {"shape": "array"}), call("big", {"shape": "nested"}),
                        call("big", {"shape": "text"})]},
        {"tool_calls": [call("read_result", {"executionId": array_id, "offset": 10, "limit": 3}),
                        call("read_result", {"executionId": nested_id, "path": "/l1/l2/l3/l4/l5/l6", "limit": 4}),
                        call("read_result", {"executionId": text_id, "offset": 49998, "limit": 4}),
                        call("read_result", {"executionId": child_id(services, execution_id, 1)}),
                        call("read_result", {"executionId": array_id, "path": "/9999"})]},
        {"text": "read"}])
    ran = invoke(api, agent_id, {}, execution_id=execution_id)
    assert ran["status"] == "SUCCEEDED"
    second, third = seen(services)[1:]
    previews = [json.loads(r.content) for r in tool_results(second)]
    assert previews[0] == {"$offloaded": array_id, "preview": [0, 1, 2, {"$omitted": 4996}, 4999]}
    assert previews[1] == {"$offloaded": nested_id,
                           "preview": {"l1": {"l2": {"l3": {"l4": {"$omitted": "object with 1 key"}}}}, "count": 3}}
    assert previews[2] == {"$offloaded": text_id,
                           "preview": "a" * 200 + "…(99600 characters omitted)…" + "b" * 200}
    reads = tool_results(third)
    assert [r.content for r in reads[:3]] == ["[10,11,12]", '"zzzz"', '"aabb"']
    # Only this turn's own tool results: the turn's model call is no tool result.
    assert reads[3].content.startswith("not_found: ") and reads[3].is_error
    assert reads[4].content.startswith("not_found: the result has nothing at '/9999'")
    # The child records keep each whole result; each read is a child of its own.
    children = execution(api, execution_id)["children"]
    assert children[1]["invocation"]["output"] == list(range(5000))
    assert [c["actionId"] for c in children[5:10]] == [str(READ_RESULT_ID)] * 5
    assert children[5]["invocation"]["output"] == [10, 11, 12]
    assert children[8]["status"] == "FAILED" and children[8]["invocation"]["error"]["code"] == "not_found"


def test_a_never_offloaded_tool_reaches_the_model_whole_and_gets_no_read_result(api, services):
    doc = tool("big", BIG_SRC, schema={"type": "object", "properties": {"shape": {"type": "string"}}})
    doc["tool"]["output"] = {"offload": "NEVER"}
    publish(api, doc)
    agent_id = publish(api, agent("reader", [{"name": "big"}]))
    script(services, [{"tool_calls": [call("big", {"shape": "array"})]}, {"text": "ok"}])
    invoke(api, agent_id, {})
    first, second = seen(services)
    assert [t.name for t in first.tools] == ["big"]
    assert json.loads(tool_results(second)[0].content) == list(range(5000))


# ---------------------------------------------------------------------------- the chain


def test_a_tool_call_the_agents_layer_denies_is_fed_back_as_action_permission_denied(api, services):
    money_tools(api)
    _, funded = funded_account(api, 1000)
    target = create_account(api, "target")
    read_only = [{"effect": "ALLOW", "actions": ["SELECT", "INVOKE"], "resources": ["financial.*"]},
                 {"effect": "ALLOW", "actions": ["INSERT"], "resources": ["financial.ActionExecution.document"]}]
    agent_id = publish(api, agent("cautious", [{"name": "move"}], policies=read_only))
    script(services, [{"tool_calls": [move(new_id(), funded, target, 100)]}, {"text": "I may not move money."}])
    ran = invoke(api, agent_id, {})
    assert ran["status"] == "SUCCEEDED"
    (denied,) = tool_results(seen(services)[1])
    assert denied.content.startswith("action_permission_denied: INSERT on financial.Transfer.document is not allowed")
    assert 'the agent "cautious" v1 layer denied INSERT' in denied.content
    assert balance(api, funded) == 1000


def test_graphql_is_a_tool_only_when_the_agent_lists_it(api, services):
    _, funded = funded_account(api, 42)
    agent_id = publish(api, agent("querier", [{"name": "graphql"}]))
    document = "query($id: UUID!) { financial { account(id: $id) { balance } } }"
    script(services, [{"tool_calls": [call("graphql", {"document": document, "variables": {"id": funded}})]},
                      {"text": "42"}])
    invoke(api, agent_id, {})
    first, second = seen(services)
    assert [t.name for t in first.tools] == ["graphql", "read_result"]
    assert tool_results(second)[0].content == '{"data":{"financial":{"account":{"balance":42}}},"errors":null}'


def test_fixed_input_is_hidden_from_the_model_and_merged_into_the_call(api, services):
    money_tools(api)
    _, funded = funded_account(api, 5)
    agent_id = publish(api, agent("fixed", [{"name": "balance", "input": {"account_id": funded}}]))
    script(services, [{"tool_calls": [call("balance", {})]}, {"text": "5"}])
    invoke(api, agent_id, {})
    first, second = seen(services)
    assert first.tools[0].input_schema == {"type": "object", "required": [], "properties": {}}
    assert tool_results(second)[0].content == '{"balance":5,"currency":"USD"}'


# ---------------------------------------------------------------------------- the final answer


ANSWER_SCHEMA = {"type": "object", "required": ["moved"], "properties": {"moved": {"type": "integer"}},
                 "additionalProperties": False}


def test_the_final_answer_is_structured_output_validated_with_one_corrective_retry(api, services):
    agent_id = publish(api, agent("typed", output_schema=ANSWER_SCHEMA))
    script(services, [{"output": {"moved": "ten"}}, {"output": {"moved": 10}}])
    ran = invoke(api, agent_id, {})
    assert ran["status"] == "SUCCEEDED" and ran["invocation"]["output"] == {"moved": 10}
    first, second = seen(services)
    assert first.response_schema == ANSWER_SCHEMA
    assert user_texts(second)[-1] == ("Your final answer does not match the required output schema at /moved: "
                                      '"ten" is not of type "integer". Answer again with only a JSON value of that shape.')


def test_a_final_answer_wrong_twice_fails_the_turn_with_action_output_invalid(api, services):
    agent_id = publish(api, agent("typed", output_schema=ANSWER_SCHEMA))
    script(services, [{"text": "ten"}, {"output": {"moved": "ten"}}])
    ran = invoke(api, agent_id, {})
    assert ran["status"] == "FAILED"
    assert ran["invocation"]["error"]["code"] == "action_output_invalid"
    assert "/moved" in ran["invocation"]["error"]["message"]
    assert user_texts(seen(services)[1])[-1].startswith(
        "Your final answer does not match the required output schema at /: the answer is not JSON")
    assert execution(api, ran["executionId"])["invocation"]["usage"]["modelCalls"] == 2


# ---------------------------------------------------------------------------- sessions


def test_an_agent_in_a_session_sees_its_earlier_turns(api, services):
    agent_id = publish(api, agent("chat", session=True))
    script(services, [{"text": "Hello, Ada."}, {"text": "You are Ada."}])
    first = invoke(api, agent_id, {"request": "I am Ada"})
    second = invoke(api, agent_id, {"request": "who am I?"})
    assert second["invocation"]["output"] == {"text": "You are Ada."}
    assert seen(services)[1].messages == (UserMessage('{"request":"I am Ada"}'), AssistantMessage(content="Hello, Ada."),
                                          UserMessage('{"request":"who am I?"}'))
    session_id = api.gql("query($id: UUID!) { actions { execution(id: $id) { sessionId } } }",
                         {"id": second["executionId"]})["actions"]["execution"]["sessionId"]
    inputs = api.gql("query($id: UUID!) { actions { session(id: $id) { inputs { executionId input output } } } }",
                     {"id": session_id})["actions"]["session"]["inputs"]
    assert inputs == [
        {"executionId": first["executionId"], "input": {"request": "I am Ada"}, "output": {"text": "Hello, Ada."}},
        {"executionId": second["executionId"], "input": {"request": "who am I?"}, "output": {"text": "You are Ada."}}]


def test_a_session_replays_at_most_history_turns(api, services):
    agent_id = publish(api, agent("chat", session=True, harness={"context": {"history": 1}}))
    script(services, [{"text": "one"}, {"text": "two"}, {"text": "three"}])
    for n in ("1", "2", "3"):
        invoke(api, agent_id, {"request": n})
    assert seen(services)[2].messages == (UserMessage('{"request":"2"}'), AssistantMessage(content="two"),
                                          UserMessage('{"request":"3"}'))


# ---------------------------------------------------------------------------- bad input


def test_an_undeclared_tool_is_an_error_result_naming_the_declared_tools(api, services):
    money_tools(api)
    agent_id = publish(api, agent("bookkeeper", [{"name": "balance"}]))
    script(services, [{"tool_calls": [call("wire_money", {"amount": 1})]}, {"text": "I cannot wire money."}])
    ran = invoke(api, agent_id, {})
    assert ran["status"] == "SUCCEEDED"
    (result,) = tool_results(seen(services)[1])
    assert result.content == ("tool_not_declared: there is no tool 'wire_money' in this turn\n"
                              "hint: call one of the declared tools: balance, read_result")
    assert len(ran["children"]) == 2  # the two model calls; the undeclared call ran nothing


def test_arguments_that_are_not_json_are_action_input_invalid_at_the_empty_path_and_recorded(api, services):
    money_tools(api)
    agent_id = publish(api, agent("bookkeeper", [{"name": "balance"}]))
    script(services, [{"tool_calls": [call("balance", '{"account_id": ')]}, {"text": "sorry"}])
    ran = invoke(api, agent_id, {})
    (result,) = tool_results(seen(services)[1])
    assert result.is_error and result.content.startswith("action_input_invalid: the arguments are not JSON (")
    assert 'at the path ""' in result.content
    refused = execution(api, ran["executionId"])["children"][1]
    assert refused["status"] == "FAILED" and refused["invocation"]["input"] == '{"account_id": '
    assert refused["invocation"]["error"]["code"] == "action_input_invalid"


def test_a_provider_answering_garbage_fails_the_turn_with_the_call_recorded(api, services, model_server):
    agent_id = publish(api, agent("remote", provider="local"))
    model_server.queue(200, {"unexpected": "shape"})
    ran = invoke(api, agent_id, {})
    assert ran["status"] == "FAILED"
    assert ran["invocation"]["error"]["code"] == "model_response_invalid"
    (model_call,) = execution(api, ran["executionId"])["children"]
    assert model_call["status"] == "FAILED" and model_call["actionId"] == str(MODEL_CALL_ID)
    assert model_call["invocation"]["error"]["code"] == "model_response_invalid"


def test_an_unconfigured_provider_fails_the_call_with_model_unavailable_naming_the_file(api, services):
    agent_id = publish(api, agent("nowhere", provider="absent"))
    ran = invoke(api, agent_id, {})
    assert ran["status"] == "FAILED"
    error = ran["invocation"]["error"]
    assert error["code"] == "model_unavailable" and "models.toml" in error["hint"]
    assert ran["children"] == []


def test_a_script_that_runs_out_fails_the_turn_with_model_unavailable(api, services):
    agent_id = publish(api, agent("short"))
    script(services, [])
    ran = invoke(api, agent_id, {})
    assert ran["invocation"]["error"]["code"] == "model_unavailable"
    assert [c["status"] for c in ran["children"]] == ["FAILED"]


def test_model_calls_count_toward_the_limit_of_1024_calls_beneath_one_call(api, services):
    agent_id = publish(api, agent("counter", [{"name": "cel"}],
                                  harness={"maxRounds": 100, "budget": {"toolCalls": 1000, "tokens": 10**7}}))
    ten = [call("cel", {"expression": "1 + 1"})] * 10
    script(services, [{"tool_calls": ten}], loop=True)
    ran = invoke(api, agent_id, {})
    # 93 rounds make 93 model calls and 930 tool calls; the 94th model call is the 1,024th call, its tool
    # calls are refused, and the next model call, the 1,035th, fails the turn before reaching the model.
    assert ran["status"] == "FAILED"
    assert ran["invocation"]["error"]["code"] == "action_call_limit_exceeded"
    assert len(seen(services)) == 94
    recorded = execution(api, ran["executionId"])
    assert len(recorded["children"]) == 1024
    assert recorded["invocation"]["usage"]["modelCalls"] == 94
