"""Tenant isolation by the paths tests/test_tenancy.py does not take: graphql() inside a tool, nested
calls, execution(id) / session(id) / action(id) with the other tenant's ids, invokeAction and startAction
of the other tenant's action, and a started execution run by a worker. Tenant B's records do not exist
for tenant A on any of them, and nothing A does changes B.

(Direct reads, listings, transfers and client administration across tenants, and the database role
without a tenant: tests/test_tenancy.py. Tokens naming one tenant with another's client: tests/test_tokens.py.)
"""

from __future__ import annotations

import uuid

import pytest

from helpers import balance, funded_account, transfer
from invoke_helpers import INVOKE, invoke, publish, tool
from registry_helpers import LIFECYCLE, UPDATE
from test_queue import START, start, wait_for, worker  # noqa: F401 - the worker fixture

EXECUTION = """query($id: UUID!) { actions { execution(id: $id) { executionId status invocation { output } } } }"""
SESSION = """query($id: UUID!) { actions { session(id: $id) { id input } } }"""
ACTION = """query($id: UUID!) { actions { action(id: $id) { actionId name } } }"""
ACTIONS = """{ actions { actions(first: 500) { actionId name native } } }"""
CANCEL = """mutation($id: UUID!) { actions { cancelExecution(id: $id) { status } } }"""
CLOSE_SESSION = """mutation($id: UUID!) { actions { closeSession(id: $id) { closed } } }"""

# A's spy: reads and writes B's records by id through graphql(), and lists what it can see.
SPY = '''ACCOUNT = """query($id: UUID!) { financial { account(id: $id) { id balance } } }"""
TRANSFER = """query($id: UUID!) { financial { transfer(id: $id) { id } } }"""
EXECUTION = """query($id: UUID!) { actions { execution(id: $id) { executionId } } }"""
SESSION = """query($id: UUID!) { actions { session(id: $id) { id } } }"""
ACTION = """query($id: UUID!) { actions { action(id: $id) { actionId } } }"""
LISTS = """{ financial { accounts(first: 500) { id } transfers(first: 500) { id } } actions { actions(first: 500) { actionId native } } }"""
MOVE = """mutation($id: UUID!, $f: UUID!, $t: UUID!) { financial { createTransfer(id: $id, input: {fromAccountId: $f,
  toAccountId: $t, amount: 5}) { id } } }"""
INVOKE = """mutation($id: UUID!, $e: UUID!) { actions { invokeAction(id: $id, input: {executionId: $e, input: {}}) { status } } }"""
CANCEL = """mutation($id: UUID!) { actions { cancelExecution(id: $id) { status } } }"""

def codes(r):
    return [e["extensions"]["code"] for e in (r["errors"] or [])]

def run(event):
    b = event["data"]["theirs"]
    mine = event["data"]["mine"]
    lists = graphql(LISTS)
    return {
        "account": graphql(ACCOUNT, variables={"id": b["account"]})["financial"]["account"],
        "transfer": graphql(TRANSFER, variables={"id": b["transfer"]})["financial"]["transfer"],
        "execution": graphql(EXECUTION, variables={"id": b["execution"]})["actions"]["execution"],
        "session": graphql(SESSION, variables={"id": b["session"]})["actions"]["session"],
        "action": graphql(ACTION, variables={"id": b["action"]})["actions"]["action"],
        "accounts": [a["id"] for a in lists["financial"]["accounts"]],
        "transfers": [t["id"] for t in lists["financial"]["transfers"]],
        "actions": [a["actionId"] for a in lists["actions"]["actions"] if not a["native"]],
        "move_from_theirs": codes(graphql(MOVE, variables={"id": b["new_transfer"], "f": b["account"], "t": mine},
                                          check=False)),
        "move_to_theirs": codes(graphql(MOVE, variables={"id": b["new_transfer"], "f": mine, "t": b["account"]},
                                        check=False)),
        "invoke_theirs": codes(graphql(INVOKE, variables={"id": b["action"], "e": b["new_execution"]}, check=False)),
        "cancel_theirs": codes(graphql(CANCEL, variables={"id": b["execution"]}, check=False)),
    }
'''


@pytest.fixture
def theirs(other_api):
    """Tenant B's records of every kind: accounts and a transfer, a tool and its execution, a session, a
    queued (started, not yet run) execution."""
    opening, funded = funded_account(other_api, 100)
    moved = transfer(other_api, opening, funded, 5)
    echo = publish(other_api, tool("echo", 'def run(event):\n    return {"echo": event["data"]}\n'))
    execution = invoke(other_api, echo, {"secret": "B"})
    chat = tool("chat", 'def run(event):\n    return 1\n')
    chat["tool"]["session"] = True
    chat_id = publish(other_api, chat)
    session_id = invoke_session(other_api, chat_id)
    queued = start(other_api, echo, {"queued": True})["executionId"]  # no worker runs in B's fixture
    return {"account": funded, "opening": opening, "transfer": moved["id"], "action": echo,
            "execution": execution["executionId"], "session": session_id, "queued": queued,
            "new_transfer": str(uuid.uuid4()), "new_execution": str(uuid.uuid4())}


def invoke_session(api, action_id: str) -> str:
    query = """mutation($id: UUID!, $input: InvokeActionInput!) { actions { invokeAction(id: $id, input: $input) {
      sessionId } } }"""
    return api.gql(query, {"id": action_id, "input": {"executionId": str(uuid.uuid4()), "input": {}}})[
        "actions"]["invokeAction"]["sessionId"]


def _b_unchanged(other_api, theirs) -> None:
    assert balance(other_api, theirs["account"]) == 105
    assert other_api.gql(EXECUTION, {"id": theirs["queued"]})["actions"]["execution"]["status"] == "QUEUED"
    assert other_api.gql(EXECUTION, {"id": theirs["execution"]})["actions"]["execution"]["status"] == "SUCCEEDED"
    assert other_api.gql(SESSION, {"id": theirs["session"]})["actions"]["session"]["id"] == theirs["session"]
    for transfer_id in (theirs["new_transfer"],):
        assert other_api.gql("""query($id: UUID!) { financial { transfer(id: $id) { id } } }""",
                             {"id": transfer_id})["financial"]["transfer"] is None
    assert other_api.gql(EXECUTION, {"id": theirs["new_execution"]})["actions"]["execution"] is None


# ---------------------------------------------------------------------------- direct, by id


def test_the_other_tenants_execution_session_and_action_read_as_null(api, other_api, theirs):
    for execution_id in (theirs["execution"], theirs["queued"]):
        assert api.gql(EXECUTION, {"id": execution_id})["actions"]["execution"] is None
    assert api.gql(SESSION, {"id": theirs["session"]})["actions"]["session"] is None
    assert api.gql(ACTION, {"id": theirs["action"]})["actions"]["action"] is None
    assert all(a["native"] for a in api.gql(ACTIONS)["actions"]["actions"])


def test_the_other_tenants_execution_and_session_cannot_be_cancelled_or_closed(api, other_api, theirs):
    assert api.error(CANCEL, {"id": theirs["queued"]})["extensions"]["code"] == "not_found"
    assert api.error(CLOSE_SESSION, {"id": theirs["session"]})["extensions"]["code"] == "not_found"
    _b_unchanged(other_api, theirs)


def test_the_other_tenants_action_cannot_be_invoked_started_changed_or_referenced(api, other_api, theirs):
    payload = {"executionId": str(uuid.uuid4()), "input": {}}
    assert api.error(INVOKE, {"id": theirs["action"], "input": payload})["extensions"]["code"] == "not_found"
    assert api.error(START, {"id": theirs["action"], "input": payload})["extensions"]["code"] == "not_found"
    for op in ("publishAction", "disableAction", "deleteAction"):
        assert api.error(LIFECYCLE.format(op=op), {"id": theirs["action"]})["extensions"]["code"] == "not_found", op
    update = api.error(UPDATE, {"id": theirs["action"], "input": tool("echo", 'def run(event):\n    return 2\n')})
    assert update["extensions"]["code"] == "not_found"
    # A reference to B's tool by name finds nothing in A's registry.
    from registry_helpers import create_error, problems

    error = create_error(api, tool("caller", 'def run(event):\n    return tools.echo({})\n', tools=[{"name": "echo"}]))
    assert any(p["path"].startswith("tools") for p in problems(error))
    _b_unchanged(other_api, theirs)


def test_an_execution_id_used_by_the_other_tenant_is_a_fresh_one_here(api, other_api, theirs):
    mine = publish(api, tool("echo", 'def run(event):\n    return {"echo": event["data"]}\n'))
    # Neither a conflict nor B's recorded result: the id names nothing in A's tenant.
    result = invoke(api, mine, {"mine": True}, execution_id=theirs["execution"])
    assert result["status"] == "SUCCEEDED"
    assert result["invocation"]["output"] == {"echo": {"mine": True}}
    started = api.gql(START, {"id": mine, "input": {"executionId": theirs["queued"], "input": {"a": 1}}})
    assert started["actions"]["startAction"]["status"] == "QUEUED"
    seen_by_b = other_api.gql(EXECUTION, {"id": theirs["execution"]})["actions"]["execution"]
    assert seen_by_b["invocation"]["output"] == {"echo": {"secret": "B"}}
    _b_unchanged(other_api, theirs)


# ---------------------------------------------------------------------------- through graphql() in a tool


def _spy_input(api, theirs) -> dict:
    opening, mine = funded_account(api, 50)
    return {"theirs": theirs, "mine": mine}, mine


def _assert_saw_nothing(output: dict, theirs: dict, mine_accounts: set) -> None:
    for key in ("account", "transfer", "execution", "session", "action"):
        assert output[key] is None, key
    assert set(output["accounts"]) == mine_accounts
    assert theirs["transfer"] not in output["transfers"]
    assert theirs["action"] not in output["actions"]
    # A write naming B's records is refused as for a missing record; nothing is changed.
    assert output["move_from_theirs"] == ["not_found"]
    assert output["move_to_theirs"] == ["not_found"]
    assert output["invoke_theirs"] == ["not_found"]
    assert output["cancel_theirs"] == ["not_found"]


def test_graphql_inside_a_tool_sees_nothing_of_the_other_tenant(api, other_api, theirs):
    data, mine = _spy_input(api, theirs)
    spy = publish(api, tool("spy", SPY))
    result = invoke(api, spy, data)
    assert result["status"] == "SUCCEEDED", result["invocation"]["error"]
    accounts = {a["id"] for a in api.gql("{ financial { accounts(first: 500) { id } } }")["financial"]["accounts"]}
    _assert_saw_nothing(result["invocation"]["output"], theirs, accounts)
    _b_unchanged(other_api, theirs)


def test_a_nested_call_sees_nothing_of_the_other_tenant(api, other_api, theirs):
    data, mine = _spy_input(api, theirs)
    publish(api, tool("spy", SPY))
    outer = publish(api, tool("outer", 'def run(event):\n    return tools.spy(event["data"])\n',
                              tools=[{"name": "spy"}]))
    result = invoke(api, outer, data)
    assert result["status"] == "SUCCEEDED", result["invocation"]["error"]
    accounts = {a["id"] for a in api.gql("{ financial { accounts(first: 500) { id } } }")["financial"]["accounts"]}
    _assert_saw_nothing(result["invocation"]["output"], theirs, accounts)
    _b_unchanged(other_api, theirs)


def test_a_nested_invoke_through_graphql_of_the_other_tenants_action_is_refused(api, other_api, theirs):
    src = ('def run(event):\n    return graphql("""mutation($id: UUID!, $e: UUID!) { actions { invokeAction(id: $id,'
           ' input: {executionId: $e, input: {}}) { status invocation { output } } } }""",'
           ' variables={"id": event["data"]["action"], "e": event["data"]["e"]})\n')
    caller = publish(api, tool("caller", src))
    result = invoke(api, caller, {"action": theirs["action"], "e": str(uuid.uuid4())})
    assert result["status"] == "FAILED"
    assert result["invocation"]["error"]["code"] == "graphql_error"
    assert "echo" not in str(result["invocation"])
    _b_unchanged(other_api, theirs)


# ---------------------------------------------------------------------------- through startAction and a worker


def test_a_started_execution_runs_in_its_starters_tenant_only(api, other_api, theirs, worker):  # noqa: F811
    data, mine = _spy_input(api, theirs)
    spy = publish(api, tool("spy", SPY))
    done = wait_for(api, start(api, spy, data)["executionId"], timeout=30)
    assert done["status"] == "SUCCEEDED", done
    accounts = {a["id"] for a in api.gql("{ financial { accounts(first: 500) { id } } }")["financial"]["accounts"]}
    _assert_saw_nothing(done["invocation"]["output"], theirs, accounts)
    # B's queued execution is B's: A's worker pass did not run it for A (it runs, for B, as B's).
    b_queued = wait_for(other_api, theirs["queued"], timeout=30)
    assert b_queued["invocation"]["output"] == {"echo": {"queued": True}}
    assert balance(other_api, theirs["account"]) == 105
