"""`actions { executions(where, first, after) }` (DESIGN 15, "Listing executions"): top-level executions
unless `parentExecutionId` is given, narrowed by action, trigger and status, in (createdAt, id) order."""

from __future__ import annotations

from invoke_helpers import invoke, publish, tool
from trigger_helpers import new_client, runs

LEAF = 'def run(event):\n    return {}\n'
CALLER = 'def run(event):\n    tools.leaf({})\n    return {}\n'
BROKEN = 'def run(event):\n    fail("no")\n'


def test_without_a_parent_only_top_level_executions_are_listed(api):
    publish(api, tool("leaf", LEAF))
    caller = publish(api, tool("caller", CALLER, tools=[{"name": "leaf"}]))
    call = invoke(api, caller, {})
    assert [r["executionId"] for r in runs(api)] == [call["executionId"]]


def test_a_parent_lists_the_calls_beneath_it(api):
    leaf = publish(api, tool("leaf", LEAF))
    caller = publish(api, tool("caller", CALLER, tools=[{"name": "leaf"}]))
    call = invoke(api, caller, {})
    (child,) = runs(api, parentExecutionId=call["executionId"])
    assert child["actionId"] == leaf and child["depth"] == 1


def test_action_and_status_narrow_the_listing(api):
    ok = publish(api, tool("ok", LEAF))
    broken = publish(api, tool("broken", BROKEN))
    first = invoke(api, ok, {})
    invoke(api, broken, {})
    second = invoke(api, ok, {})
    assert [r["executionId"] for r in runs(api, actionId=ok)] == [first["executionId"], second["executionId"]]
    assert [r["actionId"] for r in runs(api, status="FAILED")] == [broken]


def test_pages_follow_the_cursor(api):
    ok = publish(api, tool("ok", LEAF))
    ids = [invoke(api, ok, {})["executionId"] for _ in range(3)]
    query = """query($after: String) { actions { executions(first: 2, after: $after) { executionId } } }"""
    page = api.gql(query)["actions"]["executions"]
    rest = api.gql(query, {"after": page[-1]["executionId"]})["actions"]["executions"]
    assert [r["executionId"] for r in page + rest] == ids


def test_the_listing_needs_its_index_and_shows_only_what_the_reader_may_select(api):
    ok = publish(api, tool("ok", LEAF))
    invoke(api, ok, {})
    _, token = new_client(api, "no_index", [{"effect": "ALLOW", "actions": ["SELECT"],
                                             "resources": ["financial.ActionExecution.document"]}])
    error = api.as_client(token).error("{ actions { executions { executionId } } }")
    assert error["extensions"]["code"] == "permission_denied"
    _, token = new_client(api, "index_only", [{"effect": "ALLOW", "actions": ["SELECT"],
                                               "resources": ["financial.ActionExecution.indexes.all"]}])
    assert api.as_client(token).gql("{ actions { executions { executionId } } }")["actions"]["executions"] == []
