"""Kind `agent` when it is written (DESIGN 13): its config with the harness defaults, and every problem
with its path."""

from __future__ import annotations

import pytest

from agent_helpers import agent
from invoke_helpers import invoke_error, publish
from registry_helpers import create, create_error, problems


def test_an_agent_is_stored_with_every_harness_default(api):
    written = create(api, agent("helper", harness={"budget": {"tokens": 5000}}))
    assert written["kind"] == "agent"
    assert written["config"] == {
        "model": {"provider": "test", "name": "scripted-model"}, "instructions": "You keep the books.",
        "harness": {"maxRounds": 8, "budget": {"toolCalls": 64, "tokens": 5000},
                    "context": {"offload": {"over_tokens": 2000}, "history": 20}}}


def test_every_config_problem_is_rejected_at_write_with_its_path(api):
    doc = agent("helper")
    doc["config"] = {
        "model": {"provider": "", "temperature": 3, "maxOutputTokens": 0, "top_p": 1},
        "instructions": "x" * (64 * 1024 + 1),
        "harness": {"maxRounds": 0, "budget": {"toolCalls": "many", "tokens": 10**9},
                    "context": {"offload": {"over_tokens": -1}, "history": 5000, "memory": True}, "retries": 2},
        "extra": 1,
    }
    found = {p["path"]: p["message"] for p in problems(create_error(api, doc))}
    assert set(found) == {
        "config", "config.model", "config.model.provider", "config.model.name", "config.model.temperature",
        "config.model.maxOutputTokens", "config.instructions", "config.harness.maxRounds",
        "config.harness.budget.toolCalls", "config.harness.budget.tokens", "config.harness.context.offload.over_tokens",
        "config.harness.context.history", "config.harness.context.memory", "config.harness.retries"}
    assert "64 KiB" in found["config.instructions"]
    assert found["config.harness.maxRounds"] == "must be a whole number from 1 to 100 (default 8)"
    assert "top_p" in found["config.model"] and "extra" in found["config"]


def test_an_agent_without_config_is_told_its_shape(api):
    doc = agent("helper")
    del doc["config"]
    assert {p["path"] for p in problems(create_error(api, doc))} == {"config"}


def test_an_agent_may_list_graphql_and_cel_but_not_its_turns_own_natives(api):
    assert create(api, agent("querier", [{"name": "graphql"}, {"name": "cel"}]))["tools"][0]["name"] == "graphql"
    found = {p["path"]: p["message"] for p in problems(create_error(
        api, agent("reader", [{"name": "read_result"}, {"name": "model_call"}, {"name": "invoke"}])))}
    assert "given to every agent that has a tool with output.offload AUTO" in found["tools[0].name"]
    assert set(found) == {"tools[0].name", "tools[1].name", "tools[2].name"}


@pytest.mark.parametrize("timeout", [0, 300_001])
def test_an_agents_response_timeout_is_at_most_300_seconds(api, timeout):
    assert {p["path"] for p in problems(create_error(api, agent("slow", timeout_ms=timeout)))} == {
        "tool.responseTimeout"}


def test_an_agent_without_a_tool_block_is_written_but_not_callable(api):
    doc = agent("inner")
    del doc["tool"]
    action_id = publish(api, doc)
    assert invoke_error(api, action_id)["extensions"]["code"] == "action_not_callable"


def test_the_natives_of_an_agents_turn_cannot_be_invoked(api):
    for native in ("00000000-0000-4000-8000-000000000007", "00000000-0000-4000-8000-000000000008"):
        error = invoke_error(api, native)
        assert error["extensions"]["code"] == "action_not_callable"
        assert "acts for an agent or a model tool" in error["message"]
