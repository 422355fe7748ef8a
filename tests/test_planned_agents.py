"""An agent's call through a `confirm: true` reference (DESIGN 14) with the `scripted` provider: the tool
does not run, the model gets the planned result, and only another client's confirmation moves money."""

from __future__ import annotations

import json

import pytest

from agent_helpers import agent, agent_settings, call, execution, money_tools, new_id, script, seen, tool_results
from helpers import balance, create_account, funded_account
from invoke_helpers import invoke, publish, tool
from planned_helpers import CONFIRM, confirm, new_client, plan_of, reject
from mcp_helpers import EVERYTHING
from test_queue import wait_for
from trigger_helpers import REVIEW, create_trigger, runs


@pytest.fixture
def settings(db_url, tmp_path, model_server):
    return agent_settings(db_url, tmp_path, model_server.url)


def propose_a_move(api, services, amount: int):
    """An agent whose `move` needs confirmation, asked once to move `amount`: (turn, plan id, payer, payee)."""
    money_tools(api)
    _, payer = funded_account(api, 1_000)
    payee = create_account(api, "payee")
    agent_id = publish(api, agent("planner", [{"name": "move", "confirm": True}]))
    move = {"transfer_id": new_id(), "from_account": payer, "to_account": payee, "amount": amount}
    script(services, [{"tool_calls": [call("move", move)]}, {"text": "proposed"}])
    turn = invoke(api, agent_id, {})
    (result,) = tool_results(seen(services)[1])
    assert not result.is_error, result.content
    planned = json.loads(result.content)
    return turn, planned, payer, payee


def test_an_agent_proposes_a_transfer_and_nothing_moves_until_another_client_confirms(api, services, worker):
    turn, planned, payer, payee = propose_a_move(api, services, 250)
    assert turn["status"] == "SUCCEEDED" and turn["invocation"]["output"] == {"text": "proposed"}
    assert (planned["planned"], planned["status"]) == (True, "PROPOSED")
    assert planned["preview"]["status"] == "SUCCEEDED" and planned["preview"]["output"]["amount"] == 250
    assert (balance(api, payer), balance(api, payee)) == (1_000, 0)

    plan = plan_of(api, planned["plannedActionId"])
    assert plan["status"] == "PROPOSED" and plan["proposedByExecutionId"] == turn["executionId"]
    _, person = new_client(api, "person", EVERYTHING)
    confirmed = confirm(api.as_client(person), planned["plannedActionId"])
    assert confirmed["execution"]["startedBy"] == {"executionId": turn["executionId"]}
    run = wait_for(api, confirmed["executionId"])
    assert run["status"] == "SUCCEEDED", run
    assert (balance(api, payer), balance(api, payee)) == (750, 250)


def test_the_agents_proposal_is_a_child_of_its_turn_with_the_preview_rolled_back_beneath_it(api, services):
    turn, planned, _, _ = propose_a_move(api, services, 250)
    recorded = execution(api, turn["executionId"])
    model_call, proposal, _ = recorded["children"]
    assert (proposal["status"], proposal["invocation"]["output"]) == ("SUCCEEDED", planned)


def test_the_proposing_client_cannot_confirm_its_agents_plan(api, services):
    _, planned, payer, payee = propose_a_move(api, services, 250)
    error = api.error(CONFIRM, {"id": planned["plannedActionId"]})
    assert error["extensions"]["code"] == "permission_denied"
    assert "another client" in error["extensions"]["hint"]
    assert (balance(api, payer), balance(api, payee)) == (1_000, 0)


def test_an_agents_proposal_previews_the_failure_a_short_balance_gives(api, services):
    _, planned, payer, _ = propose_a_move(api, services, 5_000)
    assert planned["preview"]["status"] == "FAILED"
    assert planned["preview"]["error"]["code"] == "insufficient_funds"
    assert balance(api, payer) == 1_000


def test_a_proposal_and_its_rejection_raise_planned_action_events_for_triggers(api, services):
    review = publish(api, tool("review_plan", REVIEW))
    inserted = create_trigger(api, review, name="on_proposal", event="financial.PlannedAction.inserted")
    updated = create_trigger(api, review, name="on_decision", event="financial.PlannedAction.updated",
                             condition='event.record.status == "REJECTED"')
    _, planned, _, _ = propose_a_move(api, services, 250)
    (proposed,) = runs(api, inserted["id"])
    assert proposed["event"]["recordType"] == "financial.PlannedAction"
    assert proposed["event"]["recordId"] == planned["plannedActionId"]
    assert proposed["event"]["data"]["status"] == "PROPOSED" and "client_claims" not in proposed["event"]["data"]
    assert runs(api, updated["id"]) == []

    _, person = new_client(api, "person", EVERYTHING)
    reject(api.as_client(person), planned["plannedActionId"], "not today")
    (decided,) = runs(api, updated["id"])
    assert (decided["event"]["data"]["status"], decided["event"]["data"]["reason"]) == ("REJECTED", "not today")
