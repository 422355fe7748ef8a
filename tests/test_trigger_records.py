"""Trigger records (DESIGN 15): written, read, listed and deleted under the chain, validated when written,
and never by a program."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from psycopg.types.json import Jsonb

from invoke_helpers import invoke, publish, tool
from trigger_helpers import (CREATE_TRIGGER, DELETE_TRIGGER, LIST_TRIGGERS, READ_TRIGGER, REVIEW, UPDATE_TRIGGER,
                             create_trigger, create_trigger_error, new_client, problems, trigger_input)

# May write and read triggers, and read actions, but invoke none.
NO_INVOKE = [{"effect": "ALLOW", "actions": ["SELECT", "INSERT", "UPDATE", "DELETE"], "resources": ["financial.*"]}]


@pytest.fixture
def review(api) -> str:
    return publish(api, tool("review", REVIEW))


def test_a_created_trigger_is_read_back_and_listed_with_its_writers_client(api, review):
    created = create_trigger(api, review, condition="event.record.amount > 100000", input={"why": "large"})
    assert (created["event"], created["actionVersion"], created["enabled"]) == ("financial.Transfer.inserted", None,
                                                                               True)
    assert created["clientId"] == str(api.client_id)
    assert api.gql(READ_TRIGGER, {"id": created["id"]})["triggers"]["trigger"] == created
    assert api.gql(LIST_TRIGGERS)["triggers"]["triggers"] == [created]


def test_an_update_replaces_the_definition_and_records_its_writer_as_the_client(api, review):
    created = create_trigger(api, review)
    ops_id, token = new_client(api, "ops", [{"effect": "ALLOW", "actions": ["SELECT", "INSERT", "UPDATE", "INVOKE"],
                                             "resources": ["financial.*"]}])
    updated = api.as_client(token).gql(UPDATE_TRIGGER, {"id": created["id"], "input": trigger_input(
        review, name="renamed", enabled=False, actionVersion=1)})["triggers"]["updateTrigger"]
    assert (updated["name"], updated["enabled"], updated["actionVersion"]) == ("renamed", False, 1)
    assert updated["clientId"] == ops_id


def test_a_deleted_trigger_reads_as_null_and_deleting_it_again_returns_it(api, review):
    created = create_trigger(api, review)
    first = api.gql(DELETE_TRIGGER, {"id": created["id"]})["triggers"]["deleteTrigger"]
    assert first == created
    assert api.gql(READ_TRIGGER, {"id": created["id"]})["triggers"]["trigger"] is None
    assert api.gql(DELETE_TRIGGER, {"id": created["id"]})["triggers"]["deleteTrigger"] == created
    assert api.gql(LIST_TRIGGERS)["triggers"]["triggers"] == []


def test_another_tenants_trigger_does_not_exist_for_the_reader(api, other_api, review):
    created = create_trigger(api, review)
    assert other_api.gql(READ_TRIGGER, {"id": created["id"]})["triggers"]["trigger"] is None
    assert other_api.error(DELETE_TRIGGER, {"id": created["id"]})["extensions"]["code"] == "not_found"


def test_writing_a_trigger_needs_insert_on_its_document(api, review):
    _, token = new_client(api, "reader", [{"effect": "ALLOW", "actions": ["SELECT", "INVOKE"],
                                           "resources": ["financial.*"]}])
    error = create_trigger_error(api.as_client(token), review)
    assert error["extensions"]["code"] == "permission_denied"
    assert "financial.Trigger.document" in error["extensions"]["hint"]


def test_a_missing_invoke_grant_on_the_action_is_a_problem_at_action_id(api, review):
    _, token = new_client(api, "no_invoke", NO_INVOKE)
    (problem,) = problems(create_trigger_error(api.as_client(token), review))
    assert problem["path"] == "actionId" and "INVOKE" in problem["message"]


def test_a_bad_event_name_is_a_problem_at_event(api, review):
    (problem,) = problems(create_trigger_error(api, review, event="financial.Transfer.deleted"))
    assert problem["path"] == "event" and "financial.Account.updated" in problem["message"]


def test_a_condition_that_does_not_compile_is_a_problem_at_condition(api, review):
    (problem,) = problems(create_trigger_error(api, review, condition="event.record.amount >"))
    assert problem["path"] == "condition" and "does not compile" in problem["message"]


def test_a_condition_that_is_not_boolean_is_a_problem_at_condition(api, review):
    (problem,) = problems(create_trigger_error(api, review, condition="1 + 2"))
    assert problem["path"] == "condition" and "boolean" in problem["message"]


def test_an_input_expression_that_does_not_compile_is_a_problem_at_its_path(api, review):
    found = problems(create_trigger_error(api, review, input={"amount": {"$cel": "event.record."}}))
    assert [p["path"] for p in found] == ["input.amount"]
    found = problems(create_trigger_error(api, review, input={"$cel": "{"}))
    assert [p["path"] for p in found] == ["input"]


def test_a_missing_action_or_version_is_a_problem(api, review):
    assert [p["path"] for p in problems(create_trigger_error(api, str(uuid.uuid4())))] == ["actionId"]
    assert [p["path"] for p in problems(create_trigger_error(api, review, actionVersion=7))] == ["actionVersion"]


def test_every_problem_is_listed_at_once(api, review):
    found = problems(create_trigger_error(api, review, name="Bad Name", event="nope", condition="("))
    assert [p["path"] for p in found] == ["name", "event", "condition"]


def test_an_action_without_a_tool_block_is_a_problem_at_action_id(api, db_url):
    # No kind this ledger can write lacks a tool block yet (agents without one come later), so the version
    # is written as such an action's would be.
    action_id = uuid.uuid4()
    with psycopg.connect(db_url) as conn:
        conn.execute("INSERT INTO actions (tenant_id, id, name, kind, status, latest_version)"
                     " VALUES (%s, %s, 'blockless', 'agent', 'ACTIVE', 1)", (api.tenant_id, action_id))
        conn.execute("INSERT INTO action_versions (tenant_id, action_id, version, definition) VALUES (%s, %s, 1, %s)",
                     (api.tenant_id, action_id, Jsonb({"name": "blockless", "kind": "agent", "tool": None})))
    (problem,) = problems(create_trigger_error(api, str(action_id)))
    assert problem["path"] == "actionId" and "no tool block" in problem["message"]


def test_a_session_tool_cannot_be_a_triggers_action(api):
    doc = tool("chat", 'def run(event):\n    return {}\n')
    doc["tool"]["session"] = True
    (problem,) = problems(create_trigger_error(api, publish(api, doc)))
    assert problem["path"] == "actionId" and "sessions" in problem["message"]


def test_two_triggers_cannot_share_a_name(api, review):
    create_trigger(api, review, name="same")
    (problem,) = problems(create_trigger_error(api, review, name="same"))
    assert problem["path"] == "name"


def test_writing_or_deleting_a_trigger_from_inside_an_execution_is_start_not_allowed(api, review):
    created = create_trigger(api, review)
    writer = publish(api, tool("writer", (
        'def run(event):\n'
        '    d = event["data"]\n'
        '    u = graphql("""mutation($id: UUID!, $input: TriggerInput!) { triggers {\n'
        '        updateTrigger(id: $id, input: $input) { id } } }""", variables={"id": d["id"], "input": d["input"]},\n'
        '        check=False)\n'
        '    r = graphql("""mutation($id: UUID!) { triggers { deleteTrigger(id: $id) { id } } }""",\n'
        '        variables={"id": d["id"]}, check=False)\n'
        '    return {"codes": [u["errors"][0]["extensions"]["code"], r["errors"][0]["extensions"]["code"]]}\n')))
    done = invoke(api, writer, {"id": created["id"], "input": trigger_input(review, enabled=False)})
    assert done["invocation"]["output"] == {"codes": ["start_not_allowed", "start_not_allowed"]}
    assert api.gql(READ_TRIGGER, {"id": created["id"]})["triggers"]["trigger"] == created


def test_a_trigger_id_cannot_be_created_twice(api, review):
    trigger_id = str(uuid.uuid4())
    api.gql(CREATE_TRIGGER, {"id": trigger_id, "input": trigger_input(review)})
    error = api.error(CREATE_TRIGGER, {"id": trigger_id, "input": trigger_input(review, name="other")})
    assert error["extensions"]["code"] == "already_exists"
