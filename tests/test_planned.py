"""Planned actions (DESIGN 14): a model's call through a `confirm` reference is a proposal that a person
confirms or rejects. Through the SDK's own MCP client over real HTTP, on the real PostgreSQL."""

from __future__ import annotations

import time
import uuid

import psycopg
import pytest

from helpers import balance
from mcp_helpers import EVERYTHING, READ_ONLY, call_tool, create_server, funded_accounts, list_tools, reference
from mcp_helpers import examples, served, settings  # noqa: F401  (fixtures)
from planned_helpers import (CONFIRM, PLANS, REJECT, confirm, confirm_desk, moving, new_client, plan_of, reject)
from live_helpers import TRANSFER

from ledger.executions.planned import PLANNED_RESULT_SCHEMA

TREE = """query($id: UUID!) { actions { execution(id: $id) {
  executionId actionId status rolledBack invocation { output }
  children { executionId actionId status rolledBack invocation { output error { code } }
             children { actionId status rolledBack
                        children { actionId status rolledBack } } } } } }"""
TRANSFERS = """query($id: UUID!) { financial { transfers(accountId: $id, first: 50) { id amount } } }"""
EXECUTION = """query($id: UUID!) { actions { execution(id: $id) { executionId status startedBy { executionId }
  mcpServerId invocation { output error { code message hint } } } } }"""
# What a person may do in the examples: anything (the admin's own policies), as a separate client.
PERSON = EVERYTHING


@pytest.fixture
def worker(services):
    from ledger.queue.worker import Worker

    w = Worker(services, concurrency=2, lease_seconds=2.0, poll_interval=0.2, expiry_interval=0.2).start()
    yield w
    w.stop()


def url_of(served: str, name: str = "desk") -> str:
    return f"{served}/mcp/{name}"


def proposal(result) -> dict:
    assert result.is_error is False, result.content
    planned = result.structured_content
    assert planned["planned"] is True and planned["status"] == "PROPOSED", planned
    return planned


def error_of(result) -> dict:
    assert result.is_error is True, result.content
    return result.meta["ledger/error"]


def wait_for(api, execution_id: str, statuses=("SUCCEEDED", "FAILED", "CANCELLED"), timeout: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        execution = api.gql(EXECUTION, {"id": execution_id})["actions"]["execution"]
        if execution and execution["status"] in statuses:
            return execution
        time.sleep(0.05)
    raise AssertionError(f"execution {execution_id} did not reach {statuses}")


def transfers_of(api, account: str) -> list[dict]:
    return api.gql(TRANSFERS, {"id": account})["financial"]["transfers"]


def assistant(api, server_id: str, policies=EVERYTHING) -> tuple[str, str]:
    """The agent's client: (client id, a token confined to the server)."""
    return new_client(api, "assistant", policies, mcp_server=server_id)


def propose_transfer(served, api, payer: str, payee: str, amount: int) -> tuple[dict, str, str]:
    """A desk, an assistant, and its proposal of a transfer: (the planned result, the MCP call's id, the
    assistant's client id)."""
    server_id = confirm_desk(api)
    client_id, token = assistant(api, server_id)
    result = call_tool(url_of(served), token, "transfer", moving(payer, payee, amount))
    return proposal(result), result.meta["ledger/executionId"], client_id


# ---------------------------------------------------------------------------- proposing


def test_an_mcp_call_of_a_confirm_tool_returns_the_plan_and_moves_nothing(served, examples):
    payer, payee = funded_accounts(examples)
    server_id = confirm_desk(examples)
    client_id, token = assistant(examples, server_id)
    move = moving(payer, payee, 250)
    result = call_tool(url_of(served), token, "transfer", move)
    planned = proposal(result)
    assert planned["preview"]["status"] == "SUCCEEDED"
    assert planned["preview"]["output"]["amount"] == 250
    assert planned["preview"]["children"] == [{"actionId": "00000000-0000-4000-8000-000000000001",
                                               "status": "SUCCEEDED"}]
    assert (balance(examples, payer), balance(examples, payee)) == (10_000, 0)
    assert transfers_of(examples, payee) == []

    plan = plan_of(examples, planned["plannedActionId"])
    call_id = result.meta["ledger/executionId"]
    assert (plan["status"], plan["actionId"], plan["actionVersion"], plan["input"]) == ("PROPOSED", TRANSFER, 1, move)
    assert (plan["clientId"], plan["mcpServerId"], plan["proposedByExecutionId"]) == (client_id, server_id, call_id)
    assert plan["preview"] == planned["preview"] and plan["executionId"] is None and plan["decidedBy"] is None

    # The MCP call's child is the proposal, SUCCEEDED with the planned result; the preview beneath it rolled back.
    call = examples.gql(TREE, {"id": call_id})["actions"]["execution"]
    assert call["status"] == "SUCCEEDED" and call["invocation"]["output"] == planned
    [proposed] = call["children"]
    assert (proposed["actionId"], proposed["status"], proposed["rolledBack"]) == (TRANSFER, "SUCCEEDED", False)
    assert proposed["invocation"]["output"] == planned
    [preview] = proposed["children"]
    assert (preview["actionId"], preview["status"], preview["rolledBack"]) == (TRANSFER, "SUCCEEDED", True)
    assert [(c["status"], c["rolledBack"]) for c in preview["children"]] == [("SUCCEEDED", True)]


def test_a_confirm_tool_is_listed_with_the_planned_result_schema(served, examples):
    confirm_desk(examples)
    tools = {t.name: t for t in list_tools(url_of(served), examples.token)}
    assert tools["transfer"].output_schema == PLANNED_RESULT_SCHEMA
    assert "a person confirms" in tools["transfer"].description
    assert tools["get_account_activity"].output_schema != PLANNED_RESULT_SCHEMA


def test_the_preview_shows_the_failure_a_short_balance_gives(served, examples):
    payer, payee = funded_accounts(examples)
    planned, _, _ = propose_transfer(served, examples, payer, payee, 10_001)
    assert planned["preview"]["status"] == "FAILED"
    assert planned["preview"]["error"]["code"] == "insufficient_funds"
    assert "output" not in planned["preview"]
    assert plan_of(examples, planned["plannedActionId"])["status"] == "PROPOSED"


def test_invoke_and_program_cannot_get_around_a_confirm(served, examples):
    payer, payee = funded_accounts(examples)
    server_id = confirm_desk(examples)
    _, token = assistant(examples, server_id)
    url = url_of(served)
    called = proposal(call_tool(url, token, "invoke", {"tool": "transfer", "input": moving(payer, payee, 1)}))
    started = call_tool(url, token, "invoke", {"tool": "transfer", "input": moving(payer, payee, 2), "start": True})
    previewed = call_tool(url, token, "invoke", {"tool": "transfer", "input": moving(payer, payee, 3),
                                                 "preview": True})
    move = moving(payer, payee, 4)
    program = call_tool(url, token, "program", {"src": f"""
def run():
    first = tools.transfer(transfer_id = "{move['transfer_id']}", from_account = "{payer}", to_account = "{payee}",
                           amount = 4)
    second = attempt(tools.transfer, transfer_id = "{uuid.uuid4()}", from_account = "{payer}",
                     to_account = "{payee}", amount = 5)
    return [first, second["output"]]
"""})
    assert program.is_error is False, program.content
    answers = [called, proposal(started), proposal(previewed), *program.structured_content["value"]]
    assert [a["status"] for a in answers] == ["PROPOSED"] * 5
    assert [a["preview"]["output"]["amount"] for a in answers] == [1, 2, 3, 4, 5]
    assert len({a["plannedActionId"] for a in answers}) == 5
    assert (balance(examples, payer), balance(examples, payee)) == (10_000, 0)
    plans = examples.gql(PLANS, {"status": "PROPOSED"})["plannedActions"]["plannedActions"]
    assert sorted(p["input"]["amount"] for p in plans) == [1, 2, 3, 4, 5]


# ---------------------------------------------------------------------------- deciding


def test_nothing_moves_until_a_person_confirms_then_the_transfer_happens_once(served, examples, worker):
    payer, payee = funded_accounts(examples)
    planned, call_id, _ = propose_transfer(served, examples, payer, payee, 250)
    time.sleep(0.5)  # a worker is running: a plan is not a start
    assert (balance(examples, payer), balance(examples, payee)) == (10_000, 0)

    _, person = new_client(examples, "person", PERSON)
    confirmed = confirm(examples.as_client(person), planned["plannedActionId"])
    assert confirmed["status"] == "CONFIRMED" and confirmed["decidedAt"] is not None
    assert confirmed["execution"]["startedBy"] == {"executionId": call_id}
    run = wait_for(examples, confirmed["executionId"])
    assert run["status"] == "SUCCEEDED", run
    assert run["invocation"]["output"]["amount"] == 250
    assert (balance(examples, payer), balance(examples, payee)) == (9_750, 250)
    assert [t["amount"] for t in transfers_of(examples, payee)] == [250]

    again = examples.as_client(person).error(CONFIRM, {"id": planned["plannedActionId"]})
    assert again["extensions"]["code"] == "planned_action_decided"
    time.sleep(0.5)
    assert [t["amount"] for t in transfers_of(examples, payee)] == [250]


def test_a_reject_leaves_the_books_untouched_and_records_the_reason(served, examples, worker):
    payer, payee = funded_accounts(examples)
    planned, _, _ = propose_transfer(served, examples, payer, payee, 250)
    rejected = reject(examples, planned["plannedActionId"], "not this month")
    assert (rejected["status"], rejected["reason"], rejected["executionId"]) == ("REJECTED", "not this month", None)
    assert rejected["decidedBy"] == str(examples.client_id)
    time.sleep(0.5)
    assert (balance(examples, payer), balance(examples, payee)) == (10_000, 0)
    error = examples.error(CONFIRM, {"id": planned["plannedActionId"]})
    assert error["extensions"]["code"] == "planned_action_decided"
    assert "rejected" in error["extensions"]["hint"]


def test_a_confirmer_narrower_than_the_proposer_is_refused_and_the_plan_stays_proposed(served, examples, worker):
    payer, payee = funded_accounts(examples)
    planned, _, _ = propose_transfer(served, examples, payer, payee, 250)
    # This person may read, call and decide plans, but not create transfers.
    narrow = [*READ_ONLY, {"effect": "ALLOW", "actions": ["INSERT", "UPDATE"],
                           "resources": ["financial.PlannedAction.document", "financial.ActionExecution.document"]}]
    _, token = new_client(examples, "clerk", narrow)
    error = examples.as_client(token).error(CONFIRM, {"id": planned["plannedActionId"]})
    assert error["extensions"]["code"] == "permission_denied"
    assert 'client "clerk"' in error["extensions"]["hint"]
    assert "INSERT on financial.Transfer.document" in error["extensions"]["hint"]
    assert plan_of(examples, planned["plannedActionId"])["status"] == "PROPOSED"
    assert (balance(examples, payer), balance(examples, payee)) == (10_000, 0)


def test_a_confirmer_without_update_on_the_plan_cannot_decide_it(served, examples):
    payer, payee = funded_accounts(examples)
    planned, _, _ = propose_transfer(served, examples, payer, payee, 250)
    _, token = new_client(examples, "reader", READ_ONLY)
    error = examples.as_client(token).error(REJECT, {"id": planned["plannedActionId"], "reason": "no"})
    assert error["extensions"]["code"] == "permission_denied"
    assert "UPDATE on financial.PlannedAction.document" in error["extensions"]["hint"]


def test_the_proposer_cannot_confirm_its_own_plan(served, examples):
    payer, payee = funded_accounts(examples)
    planned, _, client_id = propose_transfer(served, examples, payer, payee, 250)
    from mcp_helpers import token_for

    own = examples.as_client(token_for(examples, client_id))  # the same client, with a /graphql token
    for document, variables in ((CONFIRM, {"id": planned["plannedActionId"]}),
                                (REJECT, {"id": planned["plannedActionId"], "reason": "mine"})):
        error = own.error(document, variables)
        assert error["extensions"]["code"] == "permission_denied"
        assert "another client must confirm" in error["extensions"]["hint"]
    assert plan_of(examples, planned["plannedActionId"])["status"] == "PROPOSED"


def test_a_program_cannot_confirm_a_plan_through_graphql(served, examples):
    payer, payee = funded_accounts(examples)
    server_id = create_server(examples, "desk", [reference("transfer", confirm=True), reference("program"),
                                                 reference("graphql")], EVERYTHING)
    _, token = assistant(examples, server_id)
    result = call_tool(url_of(served), token, "program", {"src": f"""
CONFIRM = "mutation($id: UUID!) {{ plannedActions {{ confirmPlannedAction(id: $id) {{ status }} }} }}"

def run():
    plan = tools.transfer(transfer_id = "{uuid.uuid4()}", from_account = "{payer}", to_account = "{payee}",
                          amount = 250)
    answer = graphql(CONFIRM, variables = {{"id": plan["plannedActionId"]}}, check = False)
    return {{"plan": plan["plannedActionId"], "code": answer["errors"][0]["extensions"]["code"]}}
"""})
    assert result.is_error is False, result.content
    value = result.structured_content["value"]
    assert value["code"] == "start_not_allowed"
    assert plan_of(examples, value["plan"])["status"] == "PROPOSED"
    assert balance(examples, payee) == 0


def test_another_tenant_s_plan_is_not_found(served, examples, http, services, db_url):
    from conftest import new_tenant

    payer, payee = funded_accounts(examples)
    planned, _, _ = propose_transfer(served, examples, payer, payee, 250)
    other = new_tenant(http, services, db_url, "globex")
    error = other.error(CONFIRM, {"id": planned["plannedActionId"]})
    assert error["extensions"]["code"] == "not_found"
    assert plan_of(other, planned["plannedActionId"]) is None
    assert plan_of(examples, planned["plannedActionId"])["status"] == "PROPOSED"


# ---------------------------------------------------------------------------- tasks and expiry


def test_get_task_follows_a_plan_from_working_to_its_run(served, examples, worker):
    payer, payee = funded_accounts(examples)
    server_id = confirm_desk(examples)
    _, token = assistant(examples, server_id)
    url = url_of(served)
    planned = proposal(call_tool(url, token, "transfer", moving(payer, payee, 250)))
    task = {"taskId": planned["plannedActionId"]}
    waiting = call_tool(url, token, "get_task", task).structured_content
    assert (waiting["taskId"], waiting["status"]) == (planned["plannedActionId"], "working")
    assert "waiting for a person" in waiting["statusMessage"]
    confirmed = confirm(examples, planned["plannedActionId"])
    wait_for(examples, confirmed["executionId"])
    done = call_tool(url, token, "get_task", task).structured_content
    assert (done["taskId"], done["status"], done["output"]["amount"]) == (planned["plannedActionId"], "completed", 250)


def test_get_task_of_a_rejected_plan_is_cancelled_with_the_reason(served, examples):
    payer, payee = funded_accounts(examples)
    server_id = confirm_desk(examples)
    _, token = assistant(examples, server_id)
    planned = proposal(call_tool(url_of(served), token, "transfer", moving(payer, payee, 250)))
    reject(examples, planned["plannedActionId"], "the payee is not verified")
    task = call_tool(url_of(served), token, "get_task", {"taskId": planned["plannedActionId"]}).structured_content
    assert (task["status"], task["statusMessage"]) == ("cancelled", "rejected: the payee is not verified")
    refused = error_of(call_tool(url_of(served), token, "cancel_task", {"taskId": planned["plannedActionId"]}))
    assert refused["code"] == "start_not_allowed"


def test_a_plan_nobody_decides_expires_after_24_hours(served, examples, worker, db_url):
    payer, payee = funded_accounts(examples)
    server_id = confirm_desk(examples)
    _, token = assistant(examples, server_id)
    planned = proposal(call_tool(url_of(served), token, "transfer", moving(payer, payee, 250)))
    plan = plan_of(examples, planned["plannedActionId"])
    created = plan["createdAt"]
    with psycopg.connect(db_url) as owner:
        hours = owner.execute("SELECT extract(epoch FROM expires_at - created_at) / 3600 FROM planned_actions"
                              " WHERE id = %s", (planned["plannedActionId"],)).fetchone()[0]
        assert float(hours) == 24.0, created
        # A day passes (the owner moves the plan's clock back; nothing else about it changes).
        owner.execute("UPDATE planned_actions SET created_at = created_at - interval '24 hours 1 second',"
                      " expires_at = expires_at - interval '24 hours 1 second' WHERE id = %s",
                      (planned["plannedActionId"],))
    deadline = time.monotonic() + 10
    while True:  # the worker settles it
        with psycopg.connect(db_url) as owner:
            stored = owner.execute("SELECT status FROM planned_actions WHERE id = %s",
                                   (planned["plannedActionId"],)).fetchone()[0]
        if stored == "EXPIRED" or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert stored == "EXPIRED"
    assert plan_of(examples, planned["plannedActionId"])["status"] == "EXPIRED"
    error = examples.error(CONFIRM, {"id": planned["plannedActionId"]})
    assert error["extensions"]["code"] == "planned_action_decided"
    assert "expired" in error["extensions"]["hint"]
    task = call_tool(url_of(served), token, "get_task", {"taskId": planned["plannedActionId"]}).structured_content
    assert task["status"] == "cancelled" and task["statusMessage"].startswith("expired")
    assert (balance(examples, payer), balance(examples, payee)) == (10_000, 0)


# ---------------------------------------------------------------------------- where confirm may be written


def test_confirm_on_a_tool_s_reference_is_a_problem_at_write(examples):
    from registry_helpers import tool_input as tool

    error = examples.error("""mutation($id: UUID!, $input: ActionInput!) { actions {
      createAction(id: $id, input: $input) { actionId } } }""", {"id": str(uuid.uuid4()), "input": tool(
        "caller", 'def run(event):\n    return tools.transfer(event["data"])\n',
        tools=[{"name": "transfer", "confirm": True}])})
    assert error["extensions"]["code"] == "action_definition_invalid"
    problem = next(p for p in error["extensions"]["problems"] if p["path"] == "tools[0].confirm")
    assert "only an agent's or an MCP server's tools" in problem["message"]


def test_confirm_on_a_server_s_reference_to_a_native_is_a_problem_at_write(examples):
    from mcp_helpers import CREATE_SERVER

    error = examples.error(CREATE_SERVER, {"id": str(uuid.uuid4()), "input": {
        "name": "desk", "tools": [reference("graphql", confirm=True)], "policies": EVERYTHING}})
    assert error["extensions"]["code"] == "mcp_server_definition_invalid"
    assert [p["path"] for p in error["extensions"]["problems"]] == ["tools[0].confirm"]


# ---------------------------------------------------------------------------- the confirmed run's chain


def own_client_only(client_id: str) -> list[dict]:
    """Everything, but writes only while the layer's principal is `client_id`."""
    return [{"effect": "ALLOW", "actions": ["SELECT", "INVOKE", "UPDATE"], "resources": ["financial.*"]},
            {"effect": "ALLOW", "actions": ["INSERT"], "resources": ["financial.*"],
             "assertion": f'principal.client == "{client_id}"'}]


def test_each_client_layer_of_a_confirmed_run_sees_its_own_client_as_principal(served, examples, worker):
    from planned_helpers import UPDATE_CLIENT_POLICIES

    payer, payee = funded_accounts(examples)
    server_id = confirm_desk(examples)
    proposer_id, agent = assistant(examples, server_id)
    person_id, person = new_client(examples, "person", EVERYTHING)
    # Each client allows writes only when it is itself the principal: the run succeeds only if the
    # proposer's layer sees the proposer and the confirmer's layer sees the confirmer.
    for client_id, name in ((proposer_id, "assistant"), (person_id, "person")):
        examples.gql(UPDATE_CLIENT_POLICIES, {"id": client_id, "name": name, "policies": own_client_only(client_id)})
    planned = proposal(call_tool(url_of(served), agent, "transfer", moving(payer, payee, 40)))
    confirmed = confirm(examples.as_client(person), planned["plannedActionId"])
    assert wait_for(examples, confirmed["executionId"])["status"] == "SUCCEEDED"
    assert balance(examples, payee) == 40


def test_a_confirmed_run_re_reads_the_confirmer_at_each_attempt(served, examples, services):
    from planned_helpers import DISABLE_CLIENT

    payer, payee = funded_accounts(examples)
    planned, _, _ = propose_transfer(served, examples, payer, payee, 250)
    person_id, person = new_client(examples, "person", PERSON)
    confirmed = confirm(examples.as_client(person), planned["plannedActionId"])
    examples.gql(DISABLE_CLIENT, {"id": person_id})  # before any worker ran the start
    from ledger.queue.worker import Worker

    worker = Worker(services, concurrency=2, lease_seconds=2.0, poll_interval=0.2).start()
    try:
        run = wait_for(examples, confirmed["executionId"])
    finally:
        worker.stop()
    assert run["status"] == "FAILED"
    assert run["invocation"]["error"]["code"] == "action_access_denied"
    assert "confirmed this plan was revoked" in run["invocation"]["error"]["message"]
    assert balance(examples, payee) == 0


def test_the_confirmer_s_token_expiry_binds_the_confirmed_run(served, examples, services):
    from mcp_helpers import token_for

    payer, payee = funded_accounts(examples)
    planned, _, _ = propose_transfer(served, examples, payer, payee, 250)
    person_id, _ = new_client(examples, "person", PERSON)
    short = token_for(examples, person_id, ttl=2)
    confirmed = confirm(examples.as_client(short), planned["plannedActionId"])
    time.sleep(2.2)  # the confirmer's token expires before a worker runs the start
    from ledger.queue.worker import Worker

    worker = Worker(services, concurrency=2, lease_seconds=2.0, poll_interval=0.2).start()
    try:
        run = wait_for(examples, confirmed["executionId"])
    finally:
        worker.stop()
    assert run["status"] == "FAILED"
    assert (run["invocation"]["error"]["code"], run["invocation"]["error"]["message"]) == (
        "action_access_denied", "the credential this plan was confirmed with expired")
    assert balance(examples, payee) == 0


def test_a_confirmed_run_keeps_the_server_s_layer(served, examples, worker):
    from mcp_helpers import UPDATE_SERVER

    payer, payee = funded_accounts(examples)
    planned, _, _ = propose_transfer(served, examples, payer, payee, 250)
    plan = plan_of(examples, planned["plannedActionId"])
    # The server now forbids transfers: the confirm's preview under the plan's chain meets the denial.
    examples.gql(UPDATE_SERVER, {"id": plan["mcpServerId"], "input": {
        "name": "desk", "tools": [reference("transfer", confirm=True)], "policies": [
            *EVERYTHING, {"effect": "DENY", "actions": ["INSERT"], "resources": ["financial.Transfer.document"]}]}})
    error = examples.error(CONFIRM, {"id": planned["plannedActionId"]})
    assert error["extensions"]["code"] == "permission_denied"
    assert 'MCP server "desk"' in error["extensions"]["hint"]
    assert plan_of(examples, planned["plannedActionId"])["status"] == "PROPOSED"
