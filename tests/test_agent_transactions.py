"""A model in a transaction (DESIGN 13): a request that called a model is never run again by the server,
the called agent's deadline, the per-tenant bound on called agents, the sandbox payload bound on a tool
result, startAction of an agent on a worker, and an MCP server listing and calling an agent."""

from __future__ import annotations

import json
import threading
import time

import pytest

from agent_helpers import agent, agent_settings, call, execution, money_tools, new_id, script, seen, tool_results
from helpers import balance, create_account, funded_account, transfer
from invoke_helpers import INVOKE, invoke, publish, tool
from mcp_helpers import EVERYTHING, call_tool, create_client, create_server, list_tools, running_server
from test_queue import start, wait_for

PAYLOAD_BOUND = 64 * 1024


@pytest.fixture
def settings(db_url, tmp_path, model_server):
    return agent_settings(db_url, tmp_path, model_server.url, agent_calls_per_tenant=1,
                          max_payload_bytes=PAYLOAD_BOUND, mcp_allowed_hosts="127.0.0.1:*")


def chat(message: dict, finish_reason: str = "stop") -> dict:
    """A Chat Completions answer (the `local` provider speaks that wire format)."""
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 1700000000, "model": "m",
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}


def chat_tool_call(name: str, arguments: dict) -> dict:
    return chat({"role": "assistant", "content": None, "tool_calls": [
        {"id": f"call_{name}", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}]},
        "tool_calls")


def invoke_in_thread(api, agent_id: str, execution_id: str, headers: dict | None = None) -> tuple[threading.Thread, dict]:
    answer: dict = {}

    def run() -> None:
        started = time.monotonic()
        answer["body"] = api.post(INVOKE, {"id": agent_id, "input": {"executionId": execution_id, "input": {}}},
                                  headers=headers).json()
        answer["seconds"] = time.monotonic() - started

    thread = threading.Thread(target=run)
    thread.start()
    return thread, answer


def wait_until(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the condition did not hold in time"
        time.sleep(0.02)


def test_a_called_agent_whose_model_answers_slowly_is_not_run_again_after_a_lost_race(api, services, model_server):
    money_tools(api)
    opening, funded = funded_account(api, 1000)
    target = create_account(api, "target")
    agent_id = publish(api, agent("slow", [{"name": "balance"}, {"name": "move"}], provider="local"))
    model_server.queue(200, chat_tool_call("balance", {"account_id": funded}))
    model_server.queue(200, chat_tool_call("move", {"transfer_id": new_id(), "from_account": funded,
                                                    "to_account": target, "amount": 100}), delay=1.5)
    model_server.queue(200, chat({"role": "assistant", "content": "moved"}))
    execution_id = new_id()
    thread, answer = invoke_in_thread(api, agent_id, execution_id)
    wait_until(lambda: len(model_server.seen) == 2)
    # While the model thinks, another request moves money from the account the turn has read.
    transfer(api, funded, opening, 50)
    thread.join(30)
    (error,) = answer["body"]["errors"]
    assert error["extensions"]["code"] == "retryable" and error["extensions"]["retryable"] is True
    assert "did not run it again" in error["extensions"]["hint"]
    assert len(model_server.seen) == 2  # the server did not call the model again
    assert balance(api, funded) == 950 and balance(api, target) == 0
    assert execution(api, execution_id) is None


def test_a_deadline_passed_during_a_model_call_is_a_recorded_action_response_timeout(api, services, model_server):
    agent_id = publish(api, agent("slow", provider="local"))
    model_server.queue(200, chat({"role": "assistant", "content": "late"}), delay=6)
    execution_id = new_id()
    thread, answer = invoke_in_thread(api, agent_id, execution_id, headers={"Request-Timeout": "3"})
    thread.join(30)
    ran = answer["body"]["data"]["actions"]["invokeAction"]
    assert ran["status"] == "FAILED" and ran["invocation"]["error"]["code"] == "action_response_timeout"
    assert answer["seconds"] < 3.5
    assert len(model_server.seen) == 1
    recorded = execution(api, execution_id)
    assert recorded["status"] == "FAILED" and recorded["children"][0]["status"] == "FAILED"


def test_an_agents_own_response_timeout_bounds_its_turn(api, services, model_server):
    agent_id = publish(api, agent("slow", provider="local", timeout_ms=1000))
    model_server.queue(200, chat({"role": "assistant", "content": "late"}), delay=4)
    started = time.monotonic()
    ran = invoke(api, agent_id, {})
    assert ran["invocation"]["error"]["code"] == "action_response_timeout"
    assert time.monotonic() - started < 3


def test_called_agents_beyond_the_tenants_bound_fail_at_once_with_retryable(api, services, model_server):
    agent_id = publish(api, agent("slow", provider="local"))
    model_server.queue(200, chat({"role": "assistant", "content": "first"}), delay=1.5)
    thread, answer = invoke_in_thread(api, agent_id, new_id())
    wait_until(lambda: len(model_server.seen) == 1)
    started = time.monotonic()
    second = api.post(INVOKE, {"id": agent_id, "input": {"executionId": new_id(), "input": {}}}).json()
    assert time.monotonic() - started < 1
    (error,) = second["errors"]
    assert error["extensions"]["code"] == "retryable" and "startAction" in error["extensions"]["hint"]
    thread.join(30)
    assert answer["body"]["data"]["actions"]["invokeAction"]["invocation"]["output"] == {"text": "first"}
    assert len(model_server.seen) == 1
    # Once the first is done, the slot is free again.
    model_server.queue(200, chat({"role": "assistant", "content": "third"}))
    assert invoke(api, agent_id, {})["invocation"]["output"] == {"text": "third"}


BIG_SRC = 'def run(event):\n    return "x" * 100000\n'


def test_a_tool_result_over_the_payload_bound_fails_that_call_and_is_fed_back(api, services):
    publish(api, tool("big", BIG_SRC))
    agent_id = publish(api, agent("reader", [{"name": "big"}]))
    script(services, [{"tool_calls": [call("big", {})]}, {"text": "too big"}])
    ran = invoke(api, agent_id, {})
    assert ran["status"] == "SUCCEEDED" and ran["invocation"]["output"] == {"text": "too big"}
    (result,) = tool_results(seen(services)[1])
    assert result.is_error and result.content.startswith("action_resource_exhausted: ")
    assert ran["children"][1]["status"] == "FAILED"


def test_start_action_runs_an_agent_on_a_worker(api, services, worker):
    money_tools(api)
    _, funded = funded_account(api, 300)
    agent_id = publish(api, agent("background", [{"name": "balance"}]))
    script(services, [{"tool_calls": [call("balance", {"account_id": funded})],
                       "usage": {"input_tokens": 7, "output_tokens": 3}},
                      {"text": "3.00", "usage": {"input_tokens": 9, "output_tokens": 1}}])
    started = start(api, agent_id, {"request": "balance?"})
    assert started["status"] == "QUEUED"
    done = wait_for(api, started["executionId"])
    assert done["status"] == "SUCCEEDED" and done["invocation"]["output"] == {"text": "3.00"}
    recorded = execution(api, started["executionId"])
    assert recorded["invocation"]["usage"] == {"inputTokens": 16, "outputTokens": 4, "modelCalls": 2}
    assert [c["status"] for c in recorded["children"]] == ["SUCCEEDED"] * 3
    assert tool_results(seen(services)[1])[0].content == '{"balance":300,"currency":"USD"}'


def test_an_mcp_server_lists_a_callable_agent_and_runs_its_turn(api, services):
    money_tools(api)
    _, funded = funded_account(api, 120)
    publish(api, agent("bookkeeper", [{"name": "balance"}]))
    server_id = create_server(api, "desk", [{"name": "bookkeeper"}], policies=EVERYTHING)
    token = create_client(api, "desk agent", EVERYTHING, mcp_server=server_id)
    script(services, [{"tool_calls": [call("balance", {"account_id": funded})]}, {"text": "1.20"}])
    with running_server(services) as url:
        (listed,) = list_tools(f"{url}/mcp/desk", token)
        assert listed.name == "bookkeeper" and listed.description == "the bookkeeper agent"
        result = call_tool(f"{url}/mcp/desk", token, "bookkeeper", {"request": "balance?"})
    assert not result.is_error
    assert result.structured_content == {"text": "1.20"}
    assert tool_results(seen(services)[1])[0].content == '{"balance":120,"currency":"USD"}'
