"""A planned field whose argument is an input object of scalars (createTransfer, invokeAction) builds it as
strawberry's own conversion does (api/plan_inputs.py), and answers exactly as the full execution does:
each test sends the same document down the plan and down graphql-core's full execution (with strawberry's
resolver wrapper) and compares the answers byte for byte, errors included. Writes are dry runs."""

from __future__ import annotations

import json
import uuid

import pytest
import strawberry
from graphql import parse
from strawberry.types.arguments import convert_argument

from helpers import create_account, funded_account
from invoke_helpers import invoke, publish, tool
from test_graphql_plans import DRY_RUN, both_ways, planned  # noqa: F401 - `planned` is a fixture

from ledger.api import plans
from ledger.api.plan_inputs import input_builder
from ledger.api.schema import ActionWhere, CreateTransferInput, InvokeActionInput, schema

_CONVERTER = schema.schema_converter
TRANSFER = """mutation($id: UUID!, $from: UUID!, $to: UUID!, $amount: Int64!, $memo: String) {
  financial { createTransfer(id: $id, input: {fromAccountId: $from, toAccountId: $to, amount: $amount, memo: $memo}) {
    id amount currency memo executionId } } }"""


def _strawberrys(type_, value):
    return convert_argument(value, type_, _CONVERTER.scalar_registry, schema.config)


@pytest.mark.parametrize("value", [
    {"fromAccountId": uuid.uuid4(), "toAccountId": uuid.uuid4(), "amount": 5},
    {"fromAccountId": uuid.uuid4(), "toAccountId": uuid.uuid4(), "amount": 5, "memo": None},
    {"fromAccountId": uuid.uuid4(), "toAccountId": uuid.uuid4(), "amount": 2 ** 62, "memo": "rent"},
])
def test_a_transfers_input_is_built_as_strawberry_builds_it(value):
    built = input_builder(schema._schema, CreateTransferInput)(value)
    assert built == _strawberrys(CreateTransferInput, value)
    assert type(built) is CreateTransferInput


@pytest.mark.parametrize("value", [
    {"executionId": uuid.uuid4()},
    {"executionId": uuid.uuid4(), "actionVersion": None, "input": None, "sessionId": None},
    {"executionId": uuid.uuid4(), "actionVersion": 3, "input": {"a": [1, {"b": None}]}, "sessionId": uuid.uuid4()},
])
def test_an_invocations_input_is_built_as_strawberry_builds_it_unset_fields_included(value):
    built = input_builder(schema._schema, InvokeActionInput)(value)
    assert built == _strawberrys(InvokeActionInput, value)
    assert (built.action_version is strawberry.UNSET) == ("actionVersion" not in value)


def test_an_input_with_an_enum_or_a_nested_input_keeps_strawberrys_conversion():
    from ledger.api.schema import ActionInput

    assert input_builder(schema._schema, ActionWhere) is None  # an enum field
    assert input_builder(schema._schema, ActionInput) is None  # nested inputs and lists
    document = parse("query { actions { actions(where: {name: \"x\"}) { name } } }")
    assert plans.plan(schema._schema, document, None) is not None  # planned, through strawberry's wrapper


def _transfer(api, planned, variables: dict, query: str = TRANSFER, *,  # noqa: F811
              expect_plan: bool = True) -> dict:
    return both_ways(api, planned, query, {"id": str(uuid.uuid4()), **variables}, headers=DRY_RUN,
                     expect_plan=expect_plan)


def test_a_transfer_answers_the_same_with_its_memo_given_null_or_omitted(api, planned):  # noqa: F811
    opening, funded = funded_account(api, 10)
    for memo in ("rent", None):
        body = _transfer(api, planned, {"from": funded, "to": opening, "amount": 3, "memo": memo})
        assert body["data"]["financial"]["createTransfer"]["amount"] == 3
    omitted = """mutation($id: UUID!, $from: UUID!, $to: UUID!) { financial { createTransfer(id: $id,
      input: {fromAccountId: $from, toAccountId: $to, amount: 2}) { id amount memo } } }"""
    assert _transfer(api, planned, {"from": funded, "to": opening}, omitted)["data"]["financial"][
        "createTransfer"]["memo"] is None


def test_a_transfer_given_its_input_as_one_variable_answers_the_same(api, planned):  # noqa: F811
    opening, funded = funded_account(api, 10)
    whole = """mutation($id: UUID!, $input: CreateTransferInput!) { financial { createTransfer(id: $id,
      input: $input) { id amount memo currency } } }"""
    body = _transfer(api, planned, {"input": {"fromAccountId": funded, "toAccountId": opening, "amount": "4",
                                              "memo": "as a decimal string"}}, whole)
    assert body["data"]["financial"]["createTransfer"]["memo"] == "as a decimal string"
    # A value the input type refuses is refused before anything runs (no plan runs), the same both ways.
    _transfer(api, planned, {"input": {"fromAccountId": funded, "toAccountId": opening}}, whole, expect_plan=False)


@pytest.mark.parametrize("case", ["insufficient", "unknown", "same", "zero", "currency"])
def test_a_refused_transfer_answers_the_same(api, planned, case):  # noqa: F811
    opening, funded = funded_account(api, 10)
    euro = create_account(api, "eur", "EUR")
    source, target, amount = {"insufficient": (funded, opening, 11), "unknown": (funded, str(uuid.uuid4()), 1),
                              "same": (funded, funded, 1), "zero": (funded, opening, 0),
                              "currency": (funded, euro, 1)}[case]
    body = _transfer(api, planned, {"from": source, "to": target, "amount": amount, "memo": None})
    assert body["data"] is None and body["errors"][0]["extensions"]["code"]


_INVOKE = """mutation($id: UUID!, $input: InvokeActionInput!) { actions { invokeAction(id: $id, input: $input) {
  executionId status actionVersion invocation { input output error { code message hint } } } } }"""

_MOVE = '''DOC = """mutation($id: UUID!, $from: UUID!, $to: UUID!, $amount: Int64!) { financial {
  createTransfer(id: $id, input: {fromAccountId: $from, toAccountId: $to, amount: $amount}) { id amount } } }"""

def run(event):
    d = event["data"]
    return graphql(DOC, variables={"id": d["id"], "from": d["from"], "to": d["to"], "amount": d["amount"]})
'''


def test_an_invocation_answers_the_same_with_its_optional_fields_given_null_or_omitted(api, planned):  # noqa: F811
    opening, funded = funded_account(api, 10)
    action_id = publish(api, tool("plan_move", _MOVE))
    event = {"id": str(uuid.uuid4()), "from": funded, "to": opening, "amount": 2}
    execution_id = str(uuid.uuid4())
    for extra in ({}, {"actionVersion": None, "sessionId": None}, {"actionVersion": 1}, {"actionVersion": 9},
                  {"sessionId": str(uuid.uuid4())}):
        body = both_ways(api, planned, _INVOKE, {"id": action_id, "input": {
            "executionId": execution_id, "input": event, **extra}}, headers=DRY_RUN)
        assert body.get("errors") or body["data"]["actions"]["invokeAction"]["status"] == "SUCCEEDED"
    # No input at all: the tool gets {} and fails in its program, the same both ways.
    both_ways(api, planned, _INVOKE, {"id": action_id, "input": {"executionId": execution_id}}, headers=DRY_RUN)


def test_a_programs_transfer_moves_the_same_and_fails_the_same(api, planned):  # noqa: F811
    opening, funded = funded_account(api, 10)
    action_id = publish(api, tool("plan_move_twice", _MOVE))
    outputs = []
    for amount in (3, 30):  # a transfer, then an overdraft
        event = {"from": funded, "to": opening, "amount": amount}
        first = invoke(api, action_id, {**event, "id": str(uuid.uuid4())})
        planned.full()
        second = invoke(api, action_id, {**event, "id": str(uuid.uuid4())})
        planned.on()
        assert first["status"] == second["status"]
        outputs.append((first, second))
    (moved, _), (refused, refused_again) = outputs
    assert moved["status"] == "SUCCEEDED"
    assert moved["invocation"]["output"]["financial"]["createTransfer"]["amount"] == 3
    assert refused["status"] == "FAILED" and refused["invocation"]["error"]["code"] == "insufficient_funds"
    assert json.dumps(refused["invocation"]["error"]) == json.dumps(refused_again["invocation"]["error"])
    assert api.gql("query($id: UUID!) { financial { account(id: $id) { balance } } }",
                   {"id": funded})["financial"]["account"]["balance"] == 4
