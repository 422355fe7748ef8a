"""A planned document answers exactly as its full execution: data, errors, nulls and their order.

Each test sends the same document twice, once down the plan (api/plans.py) and once down graphql-core's
full execution, and compares the two answers byte for byte. Writes are sent as dry runs, so both ways
see the same records.
"""

from __future__ import annotations

import enum
import json
import uuid
from typing import Optional

import pytest
import strawberry
from graphql import execute, parse
from strawberry.execution import optimized_is_awaitable

from helpers import CREATE_ACCOUNT, create_account, funded_account
from invoke_helpers import invoke, publish, tool
from test_policies import allow, as_client, deny

from ledger.api import plans

DRY_RUN = {"Ledger-Dry-Run": "true"}


@pytest.fixture
def planned(monkeypatch):
    """Counts the runs that took a plan; `full()` turns plans off (every document runs in full)."""
    runs = {"planned": 0}
    real = plans.run

    def counting(*args, **kwargs):
        result = real(*args, **kwargs)
        runs["planned"] += result is not None
        return result

    monkeypatch.setattr(plans, "run", counting)

    class Switch:
        def full(self):
            monkeypatch.setattr(plans, "run", lambda *a, **k: None)

        def on(self):
            monkeypatch.setattr(plans, "run", counting)

        @property
        def count(self):
            return runs["planned"]

    return Switch()


def both_ways(api, planned, query: str, variables: dict | None = None, *, headers: dict | None = None,
              expect_plan: bool = True) -> dict:
    """The answer of `query`, which must be the same planned and in full; whether a plan ran is checked."""
    before = planned.count
    first = api.post(query, variables, headers=headers)
    assert (planned.count > before) == expect_plan
    planned.full()
    second = api.post(query, variables, headers=headers)
    planned.on()
    assert first.status_code == second.status_code
    assert first.content == second.content, (first.json(), second.json())
    return first.json()


ACCOUNT_FIELDS = "query($id: UUID!) { financial { account(id: $id) { id name balance currency allowOverdraft createdAt __typename } } }"


def test_a_found_record_answers_the_same(api, planned):
    _, funded = funded_account(api, 70)
    body = both_ways(api, planned, ACCOUNT_FIELDS, {"id": funded})
    assert body["data"]["financial"]["account"]["balance"] == 70


def test_a_missing_record_is_null_both_ways(api, planned):
    body = both_ways(api, planned, ACCOUNT_FIELDS, {"id": str(uuid.uuid4())})
    assert body == {"data": {"financial": {"account": None}}}


def test_aliases_and_typename_answer_the_same(api, planned):
    a, b = create_account(api, "a"), create_account(api, "b")
    body = both_ways(api, planned, f"""{{ __typename f: financial {{ __typename x: account(id: "{a}") {{ n: name
      t: __typename }} y: account(id: "{b}") {{ name balance }} z: account(id: "{uuid.uuid4()}") {{ id }} }} }}""")
    assert body["data"]["f"]["x"] == {"n": "a", "t": "Account"}


def test_a_listing_with_nested_fields_answers_the_same(api, planned):
    opening, funded = funded_account(api, 5)
    both_ways(api, planned, """query($first: Int) { financial { accounts(first: $first) { id balance
      transfers { id amount fromAccountId } } transfers { id currency } } }""", {"first": 10})


def test_a_permission_denied_answers_the_same(api, planned):
    usd = create_account(api, "usd", "USD")
    eur = create_account(api, "eur", "EUR")
    reader = as_client(api, [allow(["SELECT"], ["financial.Account.*"]),
                             deny(["SELECT"], ["financial.Account.document"], 'context.document.currency == "EUR"')])
    body = both_ways(reader, planned, f"""{{ financial {{ u: account(id: "{usd}") {{ balance }}
      e: account(id: "{eur}") {{ balance }} accounts {{ id }} }} }}""")
    assert body["data"]["financial"]["e"] is None
    assert body["errors"][0]["path"] == ["financial", "e"]


def test_a_denial_under_a_non_null_list_nulls_its_parent_the_same(api, planned):
    create_account(api, "usd", "USD")
    reader = as_client(api, [allow(["SELECT"], ["financial.Account.*"]),
                             deny(["SELECT"], ["financial.Transfer.*"])])
    body = both_ways(reader, planned, "{ financial { accounts { id transfers { id } } } }")
    # [Transfer!]! inside [Account!]! inside a non-null `financial`: the denial nulls the whole answer.
    assert body["data"] is None
    assert body["errors"][0]["path"] == ["financial", "accounts", 0, "transfers"]


def test_invalid_and_missing_variables_answer_the_same(api, planned):
    both_ways(api, planned, ACCOUNT_FIELDS, {"id": "not-a-uuid"}, expect_plan=False)
    both_ways(api, planned, ACCOUNT_FIELDS, {}, expect_plan=False)
    both_ways(api, planned, ACCOUNT_FIELDS, {"id": None}, expect_plan=False)


def test_an_invalid_literal_and_an_unknown_field_answer_the_same(api, planned):
    both_ways(api, planned, '{ financial { account(id: "nope") { balance } } }', expect_plan=False)
    both_ways(api, planned, "{ financial { account { nothing } } }", expect_plan=False)


def test_an_int64_variable_beyond_64_bits_answers_the_same(api, planned):
    opening, funded = funded_account(api, 5)
    both_ways(api, planned, """mutation($a: Int64!) { financial { createTransfer(id: "%s", input: {fromAccountId: "%s",
      toAccountId: "%s", amount: $a}) { id } } }""" % (uuid.uuid4(), opening, funded), {"a": 2 ** 70},
              headers=DRY_RUN, expect_plan=False)


def test_mutations_run_in_order_and_stop_after_a_failure_the_same(api, planned):
    opening, funded = funded_account(api, 10)
    first, again = str(uuid.uuid4()), str(uuid.uuid4())
    body = both_ways(api, planned, f"""mutation {{ financial {{
      a: createAccount(id: "{first}", input: {{name: "one", currency: "USD"}}) {{ id name }}
      t: createTransfer(id: "{uuid.uuid4()}", input: {{fromAccountId: "{funded}", toAccountId: "{opening}",
        amount: 11}}) {{ id }}
      b: createAccount(id: "{again}", input: {{name: "two", currency: "USD"}}) {{ id }} }} }}""", headers=DRY_RUN)
    codes = [e["extensions"]["code"] for e in body["errors"]]
    assert codes[0] == "insufficient_funds"


def test_a_successful_dry_run_mutation_answers_the_same(api, planned):
    account_id = str(uuid.uuid4())
    body = both_ways(api, planned, CREATE_ACCOUNT, {"id": account_id, "name": "x", "currency": "USD",
                                                   "overdraft": None}, headers=DRY_RUN)
    assert body["data"]["financial"]["createAccount"]["id"] == account_id


def test_a_fragment_runs_in_full(api, planned):
    account_id = create_account(api)
    both_ways(api, planned, """query($id: UUID!) { financial { account(id: $id) { ...f } } }
      fragment f on Account { balance }""", {"id": account_id}, expect_plan=False)


def test_a_directive_runs_in_full(api, planned):
    account_id = create_account(api)
    both_ways(api, planned, """query($id: UUID!, $s: Boolean!) { financial { account(id: $id) {
      balance @include(if: $s) name } } }""", {"id": account_id, "s": False}, expect_plan=False)


READS = '''def docs(event):
  return [
    ("query($id: UUID!) { financial { account(id: $id) { balance __typename } } }", {"id": event["data"]["id"]}),
    ("query($id: UUID!) { financial { account(id: $id) { balance } } }", {"id": event["data"]["missing"]}),
    ("query($id: UUID!) { financial { account(id: $id) { balance } } }", {"id": "bad"}),
    ("query($id: UUID!) { financial { e: account(id: $id) { balance } } }", {"id": event["data"]["eur"]}),
    ("{ financial { nothing } }", None),
    ("mutation($id: UUID!) { financial { createAccount(id: $id, input: {name: \\"n\\", currency: \\"usd\\"}) { id } } }",
     {"id": event["data"]["missing"]}),
  ]

def run(event):
    return {"results": [graphql(d, variables=v, check=False) for d, v in docs(event)]}
'''


def test_a_programs_graphql_answers_the_same(api, planned):
    usd = create_account(api, "usd", "USD")
    eur = create_account(api, "eur", "EUR")
    policies = [allow(["SELECT", "INSERT"], ["financial.*"]),
                deny(["SELECT"], ["financial.Account.document"], 'context.document.currency == "EUR"')]
    action_id = publish(api, tool("plan_reads", READS, policies=policies))
    event = {"id": usd, "eur": eur, "missing": str(uuid.uuid4())}
    execution_id = str(uuid.uuid4())
    before = planned.count
    first = invoke(api, action_id, event, execution_id=execution_id)
    assert planned.count > before
    planned.full()
    second = invoke(api, action_id, event)
    planned.on()
    assert first["status"] == second["status"] == "SUCCEEDED"
    assert json.dumps(first["invocation"]["output"]) == json.dumps(second["invocation"]["output"])
    results = first["invocation"]["output"]["results"]
    assert results[0]["data"] == {"financial": {"account": {"balance": 0, "__typename": "Account"}}}
    assert results[3]["errors"][0]["extensions"]["code"] == "action_permission_denied"


def test_a_programs_failing_graphql_fails_the_call_the_same(api, planned):
    eur = create_account(api, "eur", "EUR")
    src = ('def run(event):\n    return graphql("query($id: UUID!) { financial { account(id: $id) { balance } } }",'
           ' variables={"id": event["data"]["id"]})\n')
    policies = [allow(["SELECT"], ["financial.*"]),
                deny(["SELECT"], ["financial.Account.document"], 'context.document.currency == "EUR"')]
    action_id = publish(api, tool("plan_denied", src, policies=policies))
    first = invoke(api, action_id, {"id": eur})
    planned.full()
    second = invoke(api, action_id, {"id": eur})
    assert first["status"] == second["status"] == "FAILED"
    assert first["invocation"]["error"] == second["invocation"]["error"]
    assert first["invocation"]["error"]["code"] == "action_permission_denied"



@strawberry.type
class PlannedItem:
    plain: int
    missing: Optional[str]
    null_but_required: int
    too_big: Optional[int]
    refused: int
    error_value: Optional[str]


@strawberry.type
class PlannedQuery:
    @strawberry.field
    def item(self) -> Optional[PlannedItem]:
        return PlannedItem(plain=7, missing=None, null_but_required=None, too_big=1 << 40,  # type: ignore[arg-type]
                           refused=1 << 40, error_value=ValueError("an error as a value"))  # type: ignore[arg-type]


def test_scalar_fields_that_are_null_or_fail_to_serialize_answer_as_graphql_core_does():
    """A field read from its source's attribute as a scalar is answered without an info or a path when it
    completes plainly (api/plans.py); a null, a non-null field that is null, a value the scalar refuses and
    an error value take the general path, and answer as graphql-core's own execution does."""
    schema = strawberry.Schema(query=PlannedQuery)._schema
    for text in ("{ item { plain missing tooBig errorValue } }", "{ item { plain nullButRequired } }",
                 "{ item { plain refused } }", "{ a: item { plain } b: item { missing plain } }"):
        document = parse(text)
        plan = plans.plan(schema, document, None)
        assert plan is not None, text
        data, errors = plans.run(schema, plan, None, None, optimized_is_awaitable)
        full = execute(schema, document, is_awaitable=optimized_is_awaitable)
        assert data == full.data, text
        assert [e.formatted for e in errors or []] == [e.formatted for e in full.errors or []], text


@strawberry.type
class ObjectsQuery:
    """Object fields whose resolvers take no info (the plan builds none unless completing needs one)."""

    @strawberry.field
    def found(self) -> PlannedItem:
        return PlannedQuery().item()  # type: ignore[return-value]

    @strawberry.field
    def required_but_null(self) -> PlannedItem:
        return None  # type: ignore[return-value]

    @strawberry.field
    def optional_null(self) -> Optional[PlannedItem]:
        return None

    @strawberry.field
    def error_value(self) -> Optional[PlannedItem]:
        return ValueError("an object that is an error")  # type: ignore[return-value]

    @strawberry.field
    def required_error_value(self) -> PlannedItem:
        return ValueError("a required object that is an error")  # type: ignore[return-value]

    @strawberry.field
    def listed(self) -> list[Optional[PlannedItem]]:
        return [PlannedQuery().item(), None]  # type: ignore[list-item]


def test_object_fields_whose_resolvers_take_no_info_answer_as_graphql_core_does():
    """An object value that is neither null nor an error completes as its sub-selection without an info
    (api/plans.py `_Run.field`); a null where the field is non-null, an error value, a list, take the
    general path, with the info built then, and answer as graphql-core's own execution does."""
    schema = strawberry.Schema(query=ObjectsQuery)._schema
    for text in ("{ found { plain missing } }", "{ found { plain } requiredButNull { plain } }",
                 "{ optionalNull { plain } found { plain } }", "{ errorValue { plain } }",
                 "{ requiredErrorValue { plain } }", "{ listed { plain missing } }",
                 "{ found { plain nullButRequired } }", "{ found { __typename plain } }"):
        document = parse(text)
        plan = plans.plan(schema, document, None)
        assert plan is not None, text
        data, errors = plans.run(schema, plan, None, None, optimized_is_awaitable)
        full = execute(schema, document, is_awaitable=optimized_is_awaitable)
        assert data == full.data, text
        assert [e.formatted for e in errors or []] == [e.formatted for e in full.errors or []], text
    assert plans.plan(schema, parse("{ found { plain } }"), None).fields[0].blind


def test_nullable_variables_omitted_null_or_given_answer_the_same(api, planned):
    """A nullable variable left out leaves its argument's default in force; one sent as null passes null."""
    create_account(api, "a")
    listing = "query($first: Int, $after: String) { financial { accounts(first: $first, after: $after) { name } } }"
    for variables in ({}, {"first": None}, {"first": 1}, {"first": 1, "after": None}, {"first": "one"}):
        both_ways(api, planned, listing, variables, expect_plan="first" not in variables or variables["first"] != "one")


@strawberry.enum
class Shade(enum.Enum):
    LIGHT = "LIGHT"
    DARK = "DARK"


@strawberry.type
class VariablesQuery:
    @strawberry.field
    def echo(self, n: Optional[int] = 3, shade: Optional[Shade] = None, word: str = "w") -> str:
        return f"{n} {shade} {word}"

    @strawberry.field
    def strict(self, n: int) -> int:
        return n


def _comparable(variables) -> tuple:
    # A signature's wrapping type (NonNull) is a new object each time graphql-core builds one: compare its name.
    return ({name: (str(source.signature.type), source.signature.default, source.value)
             for name, source in variables.sources.items()}, variables.coerced)


def test_scalar_variables_are_coerced_as_graphql_core_coerces_them():
    """The plan coerces variables of scalar and enum types itself (api/plans.py `_variables`), and reads
    arguments given as variables from them (`_arguments`): the same values and sources as graphql-core's
    `get_variable_values` and `get_argument_values`, or None, and then those functions answer (errors)."""
    from graphql.execution.values import get_argument_values, get_variable_values

    schema = strawberry.Schema(query=VariablesQuery)._schema
    text = "query($n: Int, $s: Shade, $w: String!) { echo(n: $n, shade: $s, word: $w) }"
    plan = plans.plan(schema, parse(text), None)
    assert plan is not None and plan.variables is not None
    field = plan.fields[0]
    cases = [{"w": "x"}, {"w": "x", "n": None}, {"w": "x", "n": 5, "s": "DARK"}, {"w": "x", "s": None},
             {"w": None}, {}, {"w": 5}, {"w": "x", "n": "5"}, {"w": "x", "n": 1 << 40}, {"w": "x", "s": "GREY"},
             {"w": "x", "n": True}, {"w": "x", "extra": [1]}]
    taken = 0
    for raw in cases:
        full = get_variable_values(schema, plan.operation.variable_definitions, raw, max_errors=50)
        fast = plans._variables(plan, raw)
        if fast is None:
            continue
        taken += 1
        assert not isinstance(full, list), raw
        assert _comparable(fast) == _comparable(full), raw
        arguments = plans._arguments(field, fast)
        expected = get_argument_values(field.definition, field.node, full)
        assert arguments is None or arguments == expected, raw
        data, errors = plans.run(schema, plan, None, raw, optimized_is_awaitable)
        answer = execute(schema, parse(text), variable_values=raw, is_awaitable=optimized_is_awaitable)
        assert (data, [e.formatted for e in errors or []]) == (answer.data, [e.formatted for e in answer.errors or []])
    assert taken == 5
    for raw in cases:  # whichever way, the answer is graphql-core's
        planned_answer = plans.run(schema, plan, None, raw, optimized_is_awaitable)
        answer = execute(schema, parse(text), variable_values=raw, is_awaitable=optimized_is_awaitable)
        if planned_answer is not None:
            assert planned_answer[0] == answer.data, raw
        else:
            assert answer.errors, raw
    # A variable with a default, or of an input type, leaves the coercion to graphql-core.
    assert plans.plan(schema, parse("query($n: Int = 4) { echo(n: $n) }"), None).variables is None
    # An argument given as a literal, or left to its default, is read by get_argument_values.
    assert plans.plan(schema, parse('query { echo(word: "x") }'), None).fields[0].arguments is None
    assert plans.plan(schema, parse("query($w: String!) { echo(word: $w) }"), None).fields[0].arguments is None
    assert plans.plan(schema, parse("query($n: Int!) { strict(n: $n) }"), None).fields[0].arguments is not None


@strawberry.type
class Located:
    @strawberry.field
    def where(self, info: strawberry.Info) -> str:
        return ".".join(str(key) for key in info.path.as_list()) + f" in {info.parent_type.name}"

    @strawberry.field
    def fails(self, info: strawberry.Info) -> Optional[str]:
        raise ValueError(f"failed at {info.path.as_list()}")

    @strawberry.field
    def fails_required(self) -> str:
        raise ValueError("a required field failed")


@strawberry.type
class Namespace:
    @strawberry.field
    def here(self) -> Located:
        return Located()

    @strawberry.field
    def inner(self) -> "Namespace":
        return Namespace()

    @strawberry.field
    def items(self) -> list[Located]:
        return [Located(), Located()]

    @strawberry.field
    def maybe(self) -> Optional[Located]:
        return Located()


@strawberry.type
class PathsQuery:
    @strawberry.field
    def namespace(self) -> Namespace:
        return Namespace()


def test_paths_fixed_per_plan_are_the_paths_graphql_core_gives_resolvers_and_errors():
    """A field with no list above it has its response path made once, with the plan (api/plans.py
    `_Field.path`); beneath a list each run makes it. Resolvers see, and errors are located at, the same
    paths as in graphql-core's own execution, aliases included."""
    schema = strawberry.Schema(query=PathsQuery)._schema
    for text in ("{ namespace { here { where fails } } }",
                 "{ n: namespace { inner { i: inner { here { where w: where } } } } }",
                 "{ namespace { items { where fails } inner { items { where } } } }",
                 "{ namespace { maybe { where failsRequired } here { where } } }",
                 "{ namespace { items { where failsRequired } } }",
                 "{ namespace { here { failsRequired } } }"):
        document = parse(text)
        plan = plans.plan(schema, document, None)
        assert plan is not None, text
        data, errors = plans.run(schema, plan, None, None, optimized_is_awaitable)
        full = execute(schema, document, is_awaitable=optimized_is_awaitable)
        assert json.dumps(data) == json.dumps(full.data), text
        assert [e.formatted for e in errors or []] == [e.formatted for e in full.errors or []], text
    plan = plans.plan(schema, parse("{ namespace { here { where } items { where } } }"), None)
    here, items = plan.fields[0].selection
    assert here.selection[0].path.as_list() == ["namespace", "here", "where"]
    assert items.path is not None and items.selection[0].path is None


def test_several_operations_without_a_name_are_refused_naming_each_callers_argument(api):
    """The refusal's message names the argument each caller sends (api/documents.py `Caller.several`)."""
    both = "query a { __typename } query b { __typename }"
    answer = api.post(both).json()
    assert answer["errors"][0]["message"] == (
        "the document has several operations: name the one to run with `operationName`")
    src = f'def run(event):\n    return graphql("{both}", check=False)\n'
    action_id = publish(api, tool("plan_several", src, policies=[allow(["SELECT"], ["financial.*"])]))
    output = invoke(api, action_id, {})["invocation"]["output"]
    assert output["errors"][0]["message"] == (
        "the document has several operations: name the one to run with `operation_name`")


def test_a_uuid_variable_is_read_as_strawberrys_uuid_scalar_reads_it():
    """A UUID's text without a colon or a brace is read without `UUID.__init__` (api/plans.py
    `_uuid_from_text`); every other value, and text `int(…, 16)` refuses, goes to strawberry's UUID scalar:
    the same UUID (type, int, is_safe) or the same error either way."""
    from strawberry.schema.types.base_scalars import UUIDDefinition

    class Text(str):
        pass

    given = str(uuid.uuid4())
    values = [given, given.upper(), "00000000-0000-0000-0000-000000000000", "ffffffff-ffff-ffff-ffff-ffffffffffff",
              given.replace("-", ""), "{" + given + "}", "urn:uuid:" + given, given[:35] + "g", given[:35],
              given + "0", given[:8] + given[9:] + "-", given[:8] + "_" + given[9:], "+" + given[1:],
              " " + given[1:], given[:35] + "\u0663", given[:35] + "\uff11", Text(given), 7, None, "",
              "-" + given.replace("-", "") + "-", "{-" + given + "}", "-{" + given[2:] + "}",
              " " + given.replace("-", "")[1:], given.replace("-", "")[:31] + "\n",
              given[:8] + "-" + given[8:12] + given[13:14] + "-" + given[15:]]
    for value in values:
        outcomes = []
        # `_uuid_from_text` twice: a text it read is kept with its UUID, and read from there the second time.
        for read in (plans._uuid_from_text, plans._uuid_from_text, UUIDDefinition.parse_value):
            try:
                made = read(value)
                outcomes.append((type(made), made.int, made.is_safe))
            except Exception as error:
                outcomes.append((type(error), str(error)))
        assert outcomes[0] == outcomes[1] == outcomes[2], value
    from ledger.api.schema import schema as ledger_schema

    plan = plans.plan(ledger_schema._schema, parse("query($id: UUID!, $n: Int) { financial { account(id: $id) {"
                                                   " transfers(first: $n) { id } } } }"), None)
    assert [coerce is plans._uuid_from_text for *_, coerce in plan.variables] == [True, False]


CALLS = {"namespace": 0}


@strawberry.type
class MarkedNamespace:
    @strawberry.field
    def here(self) -> Located:
        return Located()

    @strawberry.field
    def fails_required(self) -> str:
        raise ValueError("a required field failed")

    @strawberry.field
    def fails(self, info: strawberry.Info) -> Optional[str]:
        raise ValueError(f"failed at {info.path.as_list()}")


@strawberry.type
class NamespacesQuery:
    @strawberry.field(metadata={plans.NAMESPACE: True})
    def marked(self) -> MarkedNamespace:
        CALLS["namespace"] += 1
        return MarkedNamespace()

    @strawberry.field(metadata={plans.NAMESPACE: True})
    def nullable(self) -> Optional[MarkedNamespace]:
        CALLS["namespace"] += 1
        return MarkedNamespace()

    @strawberry.field(metadata={plans.NAMESPACE: True})
    def with_info(self, info: strawberry.Info) -> MarkedNamespace:
        return MarkedNamespace()


def test_a_namespace_field_is_resolved_once_per_plan_and_answers_as_graphql_core_does_every_run():
    """A field marked `plans.NAMESPACE` is resolved by a plan's first run and its value shared by the later
    ones (`_Field.namespace`): each run answers as graphql-core's own execution, errors beneath it, their
    paths and the null they propagate (to the field, or past a non-null one) included."""
    schema = strawberry.Schema(query=NamespacesQuery)._schema
    for text in ("{ marked { here { where fails } } }", "{ marked { failsRequired } }",
                 "{ nullable { failsRequired } marked { fails } }", "{ a: marked { fails } b: nullable { here { where } } }"):
        document = parse(text)
        plan = plans.plan(schema, document, None)
        assert plan is not None, text
        CALLS["namespace"] = 0
        for _ in range(3):
            data, errors = plans.run(schema, plan, None, None, optimized_is_awaitable)
            full = execute(schema, document, is_awaitable=optimized_is_awaitable)
            assert json.dumps(data) == json.dumps(full.data), text
            assert [e.formatted for e in errors or []] == [e.formatted for e in full.errors or []], text
        # graphql-core calls each namespace field on each of its three runs; the plan, on its first run only
        assert CALLS["namespace"] == 3 * len(plan.fields) + len(plan.fields), text
    with_info = plans.plan(schema, parse("{ withInfo { here { where } } }"), None)
    assert with_info.fields[0].namespace is None  # a resolver that reads its info is called on every run


def test_the_schemas_namespace_fields_return_types_without_state():
    """Sharing a namespace field's value is sound only for a type with nothing but resolvers."""
    from ledger.api.schema import schema as ledger_schema

    marked = []
    for root in (ledger_schema._schema.query_type, ledger_schema._schema.mutation_type):
        for name, field in root.fields.items():
            own = field.extensions["strawberry-definition"]
            if own.metadata.get(plans.NAMESPACE):
                definition = own.type.__strawberry_definition__
                assert [f.name for f in definition.fields if f.base_resolver is None] == [], name
                assert own.base_resolver.arguments == [] and own.base_resolver.info_parameter is None, name
                marked.append(name)
    assert "financial" in marked
