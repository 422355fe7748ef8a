"""A layer remembers a decision by the values at the paths its assertions read, when those are bounded
exactly, and by its whole inputs otherwise. No database."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.policy.cel import CompiledAssertion, compile_assertion
from ledger.policy.chain import NO_STATEMENT_ALLOWS, Chain, Layer
from ledger.policy.statements import parse_policies
from ledger.scope import as_document

PRINCIPAL = {"tenant": "t1", "client": "c1", "claims": {"sub": "alice", "roles": ["teller"]}}
TRANSFER = "financial.Transfer.document"
ACTION = {"id": "9f3e2a50-7c1b-4d2e-8f00-0123456789ab", "version": 1, "name": "pay"}


def chain_of(*statements: dict) -> Chain:
    parsed, problems = parse_policies(list(statements))
    assert problems == []
    return Chain((Layer("tool", parsed),))


def allow(assertion: str | None, operation: str = "INSERT") -> dict:
    return {"effect": "ALLOW", "actions": [operation], "resources": ["financial.*"], "assertion": assertion}


def deny(assertion: str | None, operation: str = "INSERT") -> dict:
    return {"effect": "DENY", "actions": [operation], "resources": ["financial.*"], "assertion": assertion}


def decide(chain: Chain, document, *, principal=PRINCIPAL, action=ACTION, operation: str = "INSERT", view=None):
    denial = chain.decide(operation, TRANSFER, principal=principal, document=document,
                          has_document=document is not None, action=action, document_view=view)
    return None if denial is None else denial.reason


def transfer(amount, **more) -> dict:
    return {"tenant_id": "t1", "id": str(uuid.uuid4()), "from_account_id": str(uuid.uuid4()),
            "to_account_id": str(uuid.uuid4()), "amount": amount, "currency": "USD", "memo": None,
            "execution_id": str(uuid.uuid4()), "created_at": None, **more}


@pytest.fixture
def evaluations(monkeypatch) -> list[str]:
    """The texts of the assertions evaluated, in order."""
    seen: list[str] = []
    original = CompiledAssertion.evaluate_in

    def counted(self, activation, variables):
        seen.append(self.text)
        return original(self, activation, variables)

    monkeypatch.setattr(CompiledAssertion, "evaluate_in", counted)
    return seen


# --- what an assertion reads ---------------------------------------------------------------------


@pytest.mark.parametrize(("text", "reads"), [
    ("context.document.amount <= 1000", {("context", "document", "amount")}),
    ('principal.claims["role"] == "teller"', {("principal", "claims", "role")}),
    ('action.name == "pay" || principal.tenant == context.document.tenant_id',
     {("action", "name"), ("principal", "tenant"), ("context", "document", "tenant_id")}),
    ('"teller" in principal.claims.roles', {("principal", "claims", "roles")}),
    ('uuid(context.document.id) == principal.client', {("context", "document", "id"), ("principal", "client")}),
    ("type(context.document.amount) == int", {("context", "document", "amount")}),
    ("true", set()),
    # A value read whole is the path to it: has() of a field reads the map it tests, size() what it measures.
    ("has(context.document.memo)", {("context", "document")}),
    ("size(context.document.memo) < 10", {("context", "document", "memo")}),
    ('context.document == {"amount": 1}', {("context", "document")}),
    ("context.document[0] == 1", {("context", "document")}),
    ("dyn(context).document.amount > 1", {("context",)}),
    ("context.document[principal.claims.field] == 1", {("context", "document"), ("principal", "claims", "field")}),
    ("context.document.memo.size() < 3 && context.document == {}", {("context", "document")}),
])
def test_an_assertion_reads_the_paths_it_selects(text, reads):
    assert compile_assertion(text).reads == frozenset(reads)


@pytest.mark.parametrize("text", [
    'context.document.tags.exists(t, t == "a")',  # a macro
    'principal.claims.all(k, k != "admin")',  # a macro over a map
    'context.document.memo.contains("rent")',  # a search: not flat, so its bound check reads sizes
    'context.document.memo.matches("^r")',
    "context.document.amount + 1 <= 1000",
])
def test_an_assertion_whose_reads_are_not_bounded_reads_no_paths(text):
    assert compile_assertion(text).reads is None


# --- decisions remembered by what is read ------------------------------------------------------


def test_a_decision_is_reused_for_inputs_that_differ_only_where_no_assertion_reads(evaluations):
    chain = chain_of(allow("context.document.amount <= 1000"))
    for _ in range(3):  # new ids, executions and principals' claims each time
        assert decide(chain, transfer(5), principal={**PRINCIPAL, "claims": {"n": str(uuid.uuid4())}}) is None
    assert evaluations == ["context.document.amount <= 1000"]


def test_a_decision_changes_when_a_value_an_assertion_reads_changes(evaluations):
    chain = chain_of(allow("context.document.amount <= 1000"), deny('context.document.currency == "EUR"'))
    assert decide(chain, transfer(5)) is None
    assert decide(chain, transfer(5000)) == NO_STATEMENT_ALLOWS
    assert decide(chain, transfer(5, currency="EUR")) == "denied by statement policies[1]"
    assert decide(chain, transfer("5")) == f"{NO_STATEMENT_ALLOWS} (the assertion of policies[0] cannot be evaluated)"
    missing = transfer(5)
    del missing["amount"]
    assert decide(chain, missing) == f"{NO_STATEMENT_ALLOWS} (the assertion of policies[0] cannot be evaluated)"
    assert decide(chain, None) == "denied by statement policies[1] (its assertion cannot be evaluated)"
    evaluated = len(evaluations)
    assert decide(chain, transfer(5)) is None
    assert len(evaluations) == evaluated  # the first decision's values again


def test_a_value_read_whole_keys_the_decision_by_all_of_it(evaluations):
    chain = chain_of(allow("has(context.document.memo)"))
    assert decide(chain, transfer(5, memo="rent")) is None
    assert decide(chain, transfer(6, memo="rent")) is None
    assert len(evaluations) == 2  # the document is the value read: another amount is another input
    without_memo = transfer(5)
    del without_memo["memo"]
    assert decide(chain, without_memo) == NO_STATEMENT_ALLOWS


def test_a_variable_that_does_not_convert_cannot_be_evaluated_whatever_the_values_read():
    # cel-expr-python converts a variable whole: a lone surrogate or a key that is not a string anywhere in
    # the document makes `context.document.amount` an error, so a decision kept for amount 5 does not apply.
    chain = chain_of(allow("context.document.amount <= 1000"))
    assert decide(chain, transfer(5)) is None
    unevaluable = f"{NO_STATEMENT_ALLOWS} (the assertion of policies[0] cannot be evaluated)"
    assert decide(chain, transfer(5, memo="\ud800")) == unevaluable
    assert decide(chain, {**transfer(5), uuid.uuid4(): "x"}) == unevaluable
    assert decide(chain, transfer(5, memo={b"k": "x"})) == unevaluable
    assert decide(chain, transfer(5, memo={1: "x"})) is None  # an int key converts (not remembered: unsure)
    # The principal is another variable: one that does not convert leaves the document's reads alone.
    assert decide(chain, transfer(5), principal={**PRINCIPAL, "tenant": "\udc80"}) is None


def nested(depth: int):
    value: object = 1
    for _ in range(depth):
        value = {"a": [value]}
    return value


def test_a_deeply_nested_document_is_decided_by_its_whole_inputs(evaluations):
    chain = chain_of(allow("context.document.amount <= 1000"))
    assert decide(chain, transfer(5)) is None
    assert decide(chain, transfer(5, deep=nested(80))) is None
    assert decide(chain, transfer(5, deep=nested(80))) is None
    assert len(evaluations) == 3
    # Deeper than the conversion can go: it fails as before, not with the decision kept for amount 5.
    with pytest.raises(RecursionError):
        decide(chain, transfer(5, deep=nested(900)))


def test_an_assertion_whose_reads_are_not_bounded_is_decided_by_its_whole_inputs(evaluations):
    chain = chain_of(allow('context.document.tags.exists(t, t == "a")'))
    assert decide(chain, transfer(5, tags=["a"])) is None
    assert decide(chain, transfer(5, tags=["a"])) is None
    assert len(evaluations) == 2
    assert decide(chain, transfer(5, tags=["b"])) == NO_STATEMENT_ALLOWS


def test_values_equal_in_python_but_not_in_cel_are_decided_apart():
    # One instant in two time zones: CEL sees their ISO text, which differs.
    chain = chain_of(allow('context.document.at.startsWith("2026-01-01T01")'))
    utc = dt.datetime(2026, 1, 1, 0, tzinfo=dt.timezone.utc)
    assert decide(chain, transfer(5, at=utc)) == NO_STATEMENT_ALLOWS
    assert decide(chain, transfer(5, at=utc.astimezone(dt.timezone(dt.timedelta(hours=1))))) is None
    # true and 1 as a map's keys (the whole inputs' key, for a macro): CEL tells them apart.
    keys = chain_of(allow("context.document.m.exists(k, k == 1)"))
    document = transfer(5)
    assert decide(keys, {**document, "m": {1: "a"}}) is None
    assert decide(keys, {**document, "m": {True: "a"}}) == NO_STATEMENT_ALLOWS
    # A tuple is a CEL list: it is not the bool or float whose stand-in it could spell.
    tagged = chain_of(allow("context.document.v == 1.5"))
    assert decide(tagged, transfer(5, v=1.5)) is None
    assert decide(tagged, transfer(5, v=("float", 1.5))) == NO_STATEMENT_ALLOWS


def test_the_principal_and_the_action_are_made_only_for_a_decision_that_needs_them():
    made: list[str] = []

    def principal():
        made.append("principal")
        return PRINCIPAL

    def action():
        made.append("action")
        return ACTION

    chain = chain_of(allow("context.document.amount <= 1000"))
    assert decide(chain, transfer(5), principal=principal, action=action) is None
    assert made == ["principal", "action"]  # evaluated: the activation holds every variable
    assert decide(chain, transfer(5), principal=principal, action=action) is None
    assert made == ["principal", "action"]  # remembered by the amount alone
    reading = chain_of(allow('principal.claims.sub == "alice" && action.name == "pay"'))
    assert decide(reading, transfer(5), principal=principal, action=action) is None
    assert decide(reading, transfer(6), principal=principal, action=action) is None
    # Read for the key (made once a decision, the evaluation reusing them), then for the key alone.
    assert sorted(made) == ["action"] * 3 + ["principal"] * 3


def test_a_document_is_remembered_as_read_and_evaluated_through_its_view():
    account_id = uuid.uuid4()
    at = dt.datetime(2026, 1, 1, 0, tzinfo=dt.timezone.utc)
    chain = chain_of(allow(f'context.document.id == "{account_id}" && context.document.at == "{at.isoformat()}"'))
    assert decide(chain, transfer(5, id=account_id, at=at), view=as_document) is None
    assert decide(chain, transfer(5, id=account_id, at=at), view=as_document) is None
    assert decide(chain, transfer(5, id=uuid.uuid4(), at=at), view=as_document) == NO_STATEMENT_ALLOWS
    # The text the view makes is not the value read: the same text given as text is another input.
    assert decide(chain, transfer(5, id=str(account_id), at=at.isoformat())) is None


# --- remembered decisions against fresh ones ---------------------------------------------------

_ID = uuid.UUID("9f3e2a50-7c1b-4d2e-8f00-0123456789ab")
_AT = dt.datetime(2026, 1, 1, 0, tzinfo=dt.timezone.utc)
ASSERTIONS = [
    "context.document.amount <= 10",
    'context.document.currency == "EUR"',
    "has(context.document.memo)",
    "size(context.document.memo) < 3",
    'context.document.memo == null || principal.claims.sub == "alice"',
    "context.document.nested.x == 1",
    "context.document.nested == {'x': 1}",
    'context.document["amount"] > 2 && action.version == 1',
    "context.document.amount == 1.0",
    "type(context.document.amount) == bool",
    '"EUR" in context.document.tags',
    "dyn(context).document.amount < 3",
    f'context.document.id == "{_ID}"',
    'context.document.id.startsWith("2026-01-01T01")',
]

_scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 12), st.sampled_from([1.0, 1.5, 2**64]),
                     st.sampled_from(["EUR", "USD", "a", "\ud800", "é", str(_ID), _AT.isoformat()]),
                     st.sampled_from([_ID, _AT, _AT.astimezone(dt.timezone(dt.timedelta(hours=1))), _AT.date()]))
_values = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3),
    st.dictionaries(st.sampled_from(["x", "y", "amount", 1]), inner, max_size=2)), max_leaves=4)
_documents = st.one_of(st.none(), st.dictionaries(
    st.sampled_from(["amount", "currency", "memo", "nested", "tags", "id"]), _values, max_size=5))
_principals = st.fixed_dictionaries({"tenant": st.just("t1"), "claims": st.dictionaries(
    st.sampled_from(["sub", "role"]), st.sampled_from(["alice", "bob", "\udc80", 1]), max_size=2)})
_actions = st.one_of(st.none(), st.fixed_dictionaries({"version": st.sampled_from([1, 2, True]),
                                                       "name": st.just("pay")}))


@settings(max_examples=200, deadline=None)
@given(assertions=st.lists(st.sampled_from(ASSERTIONS), min_size=1, max_size=3, unique=True),
       effects=st.lists(st.booleans(), min_size=3, max_size=3),
       inputs=st.lists(st.tuples(_documents, _principals, _actions, st.sampled_from([None, as_document])),
                       min_size=1, max_size=6))
def test_a_remembered_decision_is_the_one_a_fresh_layer_makes(assertions, effects, inputs):
    statements = [(allow if effect else deny)(text) for text, effect in zip(assertions, effects)]
    remembering = chain_of(*statements)
    for document, principal, action, view in inputs:
        fresh = chain_of(*statements)
        assert (decide(remembering, document, principal=principal, action=action, view=view)
                == decide(fresh, document, principal=principal, action=action, view=view))
