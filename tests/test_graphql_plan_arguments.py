"""A plan coerces input-object variables and reads literal input objects of variables itself (api/plans.py
`_variables`, `_arguments`), answering exactly what graphql-core's `get_variable_values`,
`get_argument_values` and `coerce_input_literal` answer: the same values, of the same types, in the same
key order; and where graphql-core answers an error, the plan gives way to it (None or Undefined), so that
graphql-core reports it. No database: the plans are made on the ledger's schema, or on a schema built here
for the corner cases of input objects."""

from __future__ import annotations

import uuid

import pytest
from graphql import build_schema, parse, parse_value
from graphql.execution.values import get_argument_values, get_variable_values
from graphql.pyutils import Undefined
from graphql.utilities.coerce_input_value import coerce_input_literal

from ledger.api import plans
from ledger.api.schema import schema

_SCHEMA = schema._schema
INVOKE = """mutation($id: UUID!, $input: InvokeActionInput!) { actions { invokeAction(id: $id, input: $input) {
  status } } }"""
TRANSFER = """mutation($id: UUID!, $from: UUID!, $to: UUID!, $amount: Int64!, $memo: String) { financial {
  createTransfer(id: $id, input: {fromAccountId: $from, toAccountId: $to, amount: $amount, memo: $memo}) { id } } }"""
TRANSFER_WITHOUT_MEMO = """mutation($id: UUID!, $from: UUID!, $to: UUID!) { financial {
  createTransfer(id: $id, input: {fromAccountId: $from, toAccountId: $to, amount: "7"}) { id } } }"""


def _plan(document: str) -> plans.Plan:
    made = plans.plan(_SCHEMA, parse(document), None)
    assert made is not None and made.variables is not None
    return made


def _deep_fields(plan_: plans.Plan):
    pending = list(plan_.fields)
    while pending:
        field = pending.pop()
        pending.extend(field.selection or ())
        if field.arguments is not None:
            yield field


def _same(planned, general) -> None:
    assert list(planned.items()) == list(general.items())
    assert [type(value) for value in planned.values()] == [type(value) for value in general.values()]


def _variables_both_ways(document: str, raw: dict):
    plan_ = _plan(document)
    general = get_variable_values(_SCHEMA, plan_.operation.variable_definitions, raw, max_errors=50)
    planned = plans._variables(plan_, raw)
    if isinstance(general, list):
        assert planned is None  # the general path answers, with its errors
        return plan_, None
    assert planned is not None
    _same(planned.coerced, general.coerced)
    assert {name: (source.signature.name, str(source.signature.type), source.value)
            for name, source in planned.sources.items()} == {
        name: (source.signature.name, str(source.signature.type), source.value)
        for name, source in general.sources.items()}
    return plan_, planned


_EXECUTION = str(uuid.uuid4())


@pytest.mark.parametrize("value", [
    {"executionId": _EXECUTION},
    {"executionId": _EXECUTION, "input": {"a": [1, {"b": None}], "c": "d"}, "actionVersion": 2},
    {"executionId": _EXECUTION, "input": None, "actionVersion": None, "sessionId": None},
    {"executionId": _EXECUTION, "sessionId": str(uuid.uuid4())},
    {},  # a required field missing
    {"executionId": "not a uuid"},
    {"executionId": _EXECUTION, "unknown": 1},
    {"executionId": _EXECUTION, "actionVersion": "2"},
    {"executionId": None},
    None,
    "a string",
    [{"executionId": _EXECUTION}],
    {"executionId": _EXECUTION, "input": {"a": {"b": {"c": [[[1]]]}}}},
])
def test_an_input_object_variable_coerces_as_graphql_core_coerces_it(value):
    raw = {"id": str(uuid.uuid4()), "input": value}
    _variables_both_ways(INVOKE, raw)


def test_a_missing_input_object_variable_gives_way_to_graphql_cores_error():
    assert _variables_both_ways(INVOKE, {"id": str(uuid.uuid4())})[1] is None


def _arguments_both_ways(document: str, raw: dict) -> dict | None:
    plan_, variables = _variables_both_ways(document, raw)
    assert variables is not None
    (field,) = [field for field in _deep_fields(plan_) if field.name in ("createTransfer", "invokeAction")]
    planned = plans._arguments(field, variables)
    if planned is None:
        with pytest.raises(Exception):
            get_argument_values(field.definition, field.node, variables)
        return None
    _same(planned, get_argument_values(field.definition, field.node, variables))
    return planned


@pytest.mark.parametrize("memo", ["rent", None, Undefined])
def test_a_literal_input_object_of_variables_reads_as_graphql_core_reads_it(memo):
    raw = {"id": str(uuid.uuid4()), "from": str(uuid.uuid4()), "to": str(uuid.uuid4()), "amount": "12"}
    if memo is not Undefined:
        raw["memo"] = memo
    arguments = _arguments_both_ways(TRANSFER, raw)
    assert arguments is not None and arguments["input"]["amount"] == 12
    assert list(arguments["input"]) == ["fromAccountId", "toAccountId", "amount", "memo"]


def test_a_literal_input_object_with_a_constant_and_a_field_left_out_reads_as_graphql_core_reads_it():
    arguments = _arguments_both_ways(TRANSFER_WITHOUT_MEMO,
                                     {"id": str(uuid.uuid4()), "from": str(uuid.uuid4()), "to": str(uuid.uuid4())})
    assert arguments is not None and arguments["input"]["amount"] == 7 and arguments["input"]["memo"] is None


def test_an_input_object_variable_given_as_an_argument_reads_as_graphql_core_reads_it():
    arguments = _arguments_both_ways(INVOKE, {"id": str(uuid.uuid4()), "input": {"executionId": _EXECUTION}})
    assert arguments is not None and arguments["input"] == {"executionId": uuid.UUID(_EXECUTION)}


_CORNERS = build_schema("""
  input Corner { required: Int!  defaulted: Int! = 3  nullable: String = "x"  plain: String  list: [Int] }
  input One @oneOf { a: Int  b: String }
  type Query { corner(c: Corner!): Int  one(o: One): Int }
""")
_CORNER = _CORNERS.type_map["Corner"]


def _corner_variables(raw: dict):
    document = parse("query($r: Int, $d: Int, $n: String, $p: String, $l: [Int]) { corner(c: {required: 1}) }")
    variables = get_variable_values(_CORNERS, document.definitions[0].variable_definitions, raw)
    assert not isinstance(variables, list)
    return variables


@pytest.mark.parametrize("literal", [
    "{required: $r, defaulted: $d, nullable: $n, plain: $p, list: $l}",
    "{required: $r}",
    "{required: 5, plain: $p}",
    "{required: $r, nullable: null, plain: \"given\"}",
    "{required: $r, defaulted: $d}",
    "{required: $r, list: $l}",
])
@pytest.mark.parametrize("raw", [
    {"r": 1, "d": 2, "n": "n", "p": "p", "l": [1, 2]},
    {"r": 1},
    {"r": None, "d": None, "n": None, "p": None, "l": None},
    {"d": 4, "l": 5},
    {},
])
def test_a_literal_object_coerces_as_coerce_input_literal_does_defaults_nulls_and_missing_variables(literal, raw):
    node = parse_value(literal)
    shape = plans._literal_object(_CORNER, node)
    assert shape is not None
    variables = _corner_variables(raw)
    planned = plans._coerce_literal_object(shape, variables.coerced)
    general = coerce_input_literal(node, _CORNER, variables)
    if general is Undefined:
        assert planned is Undefined
    else:
        _same(planned, general)


@pytest.mark.parametrize("type_name, literal", [
    ("One", "{a: $r}"),  # @oneOf: graphql-core's own checks
    ("Corner", "{required: $r, list: [1, $r]}"),  # a nested literal
    ("Corner", "{required: $r, unknown: 1}"),  # a field the type does not define
    ("Corner", "{required: \"not an int\"}"),  # a constant that does not coerce
    ("Corner", "{required: null}"),
])
def test_a_literal_object_the_plan_does_not_read_is_left_to_graphql_core(type_name, literal):
    assert plans._literal_object(_CORNERS.type_map[type_name], parse_value(literal)) is None
