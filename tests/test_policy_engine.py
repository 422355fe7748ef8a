"""The policy engine on its own: patterns, statements, CEL, layers and the chain. No database."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.errors import LedgerError, PermissionDenied
from ledger.policy.cel import CelError, compile_assertion, compile_expression_check, evaluate_expression
from bench.policy import bench_decisions
from ledger.policy.chain import NO_STATEMENT_ALLOWS, Chain, Layer
from ledger.policy.statements import Statement, parse_policies, resource_matches

PRINCIPAL = {"tenant": "t1", "client": "c1", "claims": {"sub": "alice", "roles": ["teller"]}}
ACCOUNT = "financial.Account.document"
ACCOUNT_INDEX = "financial.Account.indexes.by_name"
ACTION_ID = "9f3e2a50-7c1b-4d2e-8f00-0123456789ab"


def layer(name: str, *statements: dict) -> Layer:
    parsed, problems = parse_policies(list(statements))
    assert problems == []
    return Layer(name, parsed)


def decide(chain: Chain, operation: str = "SELECT", resource: str = ACCOUNT, document: dict | None = None, **kw):
    return chain.decide(
        operation,
        resource,
        principal=kw.get("principal", PRINCIPAL),
        document=document,
        has_document=kw.get("has_document", document is not None),
        action=kw.get("action"),
    )


def allow(resources=("financial.*",), actions=("SELECT",), assertion=None) -> dict:
    return {"effect": "ALLOW", "actions": list(actions), "resources": list(resources), "assertion": assertion}


def deny(resources=("financial.*",), actions=("SELECT",), assertion=None) -> dict:
    return {"effect": "DENY", "actions": list(actions), "resources": list(resources), "assertion": assertion}


# --- resource patterns ---------------------------------------------------------------------------


def test_trailing_star_matches_one_or_more_remaining_segments():
    assert resource_matches("financial.Account.*", "financial.Account.document")
    assert resource_matches("financial.Account.*", "financial.Account.indexes.by_name")
    assert not resource_matches("financial.Account.*", "financial.Account")
    assert resource_matches("*", "financial.Transfer.indexes.by_date")


def test_middle_star_matches_exactly_one_segment():
    assert resource_matches("financial.*.document", "financial.Transfer.document")
    assert not resource_matches("financial.*.document", "financial.Account.indexes.document")
    assert not resource_matches("financial.*.document", "financial.document")


def test_exact_pattern_matches_only_that_resource():
    assert resource_matches(ACCOUNT, ACCOUNT)
    assert not resource_matches(ACCOUNT, "financial.Account.documents")
    assert not resource_matches("financial.Account", ACCOUNT)


def test_invalid_resource_patterns_are_reported_with_their_path():
    _, problems = parse_policies([allow(resources=["financial.Acc*", "a..b", "", "fin-ancial.x", "financial.*"])])
    assert [p["path"] for p in problems] == [
        "policies[0].resources[0]",
        "policies[0].resources[1]",
        "policies[0].resources[2]",
        "policies[0].resources[3]",
    ]


# --- parsing -------------------------------------------------------------------------------------


def test_every_problem_of_every_statement_is_reported_at_once():
    raw = [
        allow(),
        {"effect": "PERMIT", "actions": [], "resources": []},
        allow(actions=["SELECT", "READ"], assertion="context.document.currency =="),
        deny(assertion="principal.client == 'x'"),
        deny(assertion="1 + 1"),
        {"effect": "ALLOW", "actions": ["SELECT"], "resources": ["*"], "resource": "typo"},
        "not a statement",
    ]
    statements, problems = parse_policies(raw)
    paths = [problem["path"] for problem in problems]
    assert paths == [
        "policies[1].effect",
        "policies[1].actions",
        "policies[1].resources",
        "policies[2].actions[1]",
        "policies[2].assertion",
        "policies[4].assertion",
        "policies[5].resource",
        "policies[6]",
    ]
    assert "line 1, column" in problems[4]["message"]
    assert "boolean" in problems[5]["message"]
    assert [s.effect for s in statements] == ["ALLOW", "DENY"]


def test_problem_paths_use_the_given_prefix():
    _, problems = parse_policies([deny(actions=["NOPE"])], path="input.policies")
    assert problems[0]["path"] == "input.policies[0].actions[0]"


def test_true_equals_one_is_rejected_at_compile_time():
    with pytest.raises(CelError) as raised:
        compile_assertion("true == 1")
    assert raised.value.code == "cel_error"
    assert "line 1, column 6" in raised.value.message
    assert "'=='" in raised.value.message
    assert "true == 1" in raised.value.message  # the caret excerpt


def test_no_policies_parse_to_no_statements():
    assert parse_policies(None) == ((), [])


def test_statement_round_trips_through_json():
    raw = allow(resources=["financial.Account.*"], actions=["SELECT", "UPDATE"], assertion="true")
    (statement,), _ = parse_policies([raw])
    assert statement.to_json() == raw
    assert parse_policies([statement.to_json()])[0] == (statement,)


# --- one layer -----------------------------------------------------------------------------------


def test_deny_wins_over_allow():
    chain = Chain((layer("client", allow(), deny(resources=[ACCOUNT])),))
    denial = decide(chain, document={"currency": "EUR"})
    assert denial is not None
    assert denial.reason == "denied by statement policies[1]"


def test_deny_whose_assertion_cannot_be_evaluated_applies():
    chain = Chain((layer("client", allow(), deny(assertion="context.document.missing == 1")),))
    denial = decide(chain, document={"currency": "EUR"})
    assert denial is not None
    assert denial.reason.startswith("denied by statement policies[1]")


def test_deny_whose_assertion_is_false_does_not_apply():
    chain = Chain((layer("client", allow(), deny(assertion="context.document.currency == 'USD'")),))
    assert decide(chain, document={"currency": "EUR"}) is None


def test_allow_whose_assertion_cannot_be_evaluated_does_not_allow():
    chain = Chain((layer("client", allow(assertion="context.document.missing == 1")),))
    denial = decide(chain, document={"currency": "EUR"})
    assert denial is not None
    assert denial.reason.startswith(NO_STATEMENT_ALLOWS)


def test_allow_with_a_non_boolean_dynamic_result_does_not_allow():
    chain = Chain((layer("client", allow(assertion="context.document.currency")),))
    assert decide(chain, document={"currency": "EUR"}) is not None


def test_nothing_matching_denies_by_default():
    chain = Chain((layer("client", allow(resources=["financial.Transfer.*"]), allow(actions=["UPDATE"])),))
    denial = decide(chain, document={})
    assert denial is not None
    assert denial.reason == NO_STATEMENT_ALLOWS


def test_statements_only_apply_to_their_operations():
    chain = Chain((layer("client", allow(actions=["SELECT"])),))
    assert decide(chain, "SELECT", document={}) is None
    assert decide(chain, "DELETE", document={}) is not None


def test_assertion_sees_the_document_in_context():
    chain = Chain((layer("client", allow(assertion="context.document.currency == 'EUR'")),))
    assert decide(chain, document={"currency": "EUR"}) is None
    assert decide(chain, document={"currency": "USD"}) is not None


def test_assertion_sees_principal_operation_resource_and_action():
    assertion = (
        "principal.claims.sub == 'alice' && context.operation == 'SELECT' "
        f"&& context.resource == '{ACCOUNT}' && action.name == 'transfer'"
    )
    chain = Chain((layer("client", allow(assertion=assertion)),))
    assert decide(chain, document={}, action={"id": ACTION_ID, "version": 1, "name": "transfer"}) is None
    assert decide(chain, document={}, action=None) is not None


def test_document_is_absent_for_index_resources():
    chain = Chain((layer("client", allow(assertion="!has(context.document)")),))
    assert decide(chain, resource=ACCOUNT_INDEX, has_document=False) is None


def test_document_assertion_cannot_be_evaluated_on_an_index_resource():
    chain = Chain((layer("client", allow(assertion="context.document.currency == 'EUR'")),))
    denial = decide(chain, resource=ACCOUNT_INDEX, document={"currency": "EUR"}, has_document=False)
    assert denial is not None
    assert "cannot be evaluated" in denial.reason


def test_uuid_canonicalises_uppercase_input():
    statement = f'context.document.action_id == uuid("{ACTION_ID.upper()}")'
    chain = Chain((layer("client", allow(assertion=statement)),))
    assert decide(chain, document={"action_id": ACTION_ID}) is None
    assert decide(chain, document={"action_id": uuid.UUID(ACTION_ID)}) is None  # as a database row has it


def test_malformed_uuid_cannot_be_evaluated():
    assertion = compile_assertion('uuid("9f3e-not-a-uuid") == ""')
    assert assertion.evaluate(PRINCIPAL, {"operation": "SELECT"}, None) is None


def test_evaluation_distinguishes_true_false_and_cannot_be_evaluated():
    assertion = compile_assertion("context.document.n > 1")
    assert assertion.evaluate(PRINCIPAL, {"document": {"n": 2}}, None) is True
    assert assertion.evaluate(PRINCIPAL, {"document": {"n": 0}}, None) is False
    assert assertion.evaluate(PRINCIPAL, {"document": {"n": "x"}}, None) is None
    assert assertion.evaluate(PRINCIPAL, {}, None) is None


def test_exhausted_iteration_budget_cannot_be_evaluated():
    assertion = compile_assertion("context.document.xs.map(a, context.document.xs.map(b, a + b)).size() > 0")
    assert assertion.evaluate(PRINCIPAL, {"document": {"xs": list(range(2000))}}, None) is None


# --- the chain -----------------------------------------------------------------------------------


def test_every_layer_of_the_chain_must_allow():
    chain = Chain((layer('client "admin"', allow()), layer('tool "transfer" v3', allow(["financial.Transfer.*"]))))
    denial = decide(chain, document={})
    assert denial is not None
    assert denial.layer == 'tool "transfer" v3'
    assert decide(chain, resource="financial.Transfer.document", document={}) is None


def test_the_outermost_denying_layer_is_reported():
    chain = Chain((layer("client", deny()), layer("tool", deny())))
    assert decide(chain, document={}).layer == "client"


def test_extended_returns_a_new_chain():
    base = Chain((layer("client", allow()),))
    longer = base.extended(Layer('tool "cel" v1', ()))
    assert len(base.layers) == 1 and len(longer.layers) == 2
    assert decide(base, document={}) is None
    assert decide(longer, document={}).layer == 'tool "cel" v1'


def test_allow_all_layer_allows_everything():
    chain = Chain((layer("client", allow(actions=["DELETE"])), Layer('tool "graphql" v1', (), allow_all=True)))
    assert decide(chain, "DELETE", "financial.Account.indexes.by_name", has_document=False) is None


def test_empty_layer_denies_everything():
    chain = Chain((layer("client", allow(actions=["SELECT", "INVOKE"])), Layer('tool "cel" v1', ())))
    for operation in ("SELECT", "INVOKE"):
        denial = decide(chain, operation, document={})
        assert denial is not None and denial.layer == 'tool "cel" v1'


def test_chain_without_layers_denies():
    assert decide(Chain(), document={}) is not None


def test_a_chain_allows_whatever_the_inputs_only_when_every_layer_allows_unconditionally():
    """What lets Scope.require skip building a document: it must agree with `decide` for every input."""
    everything = Layer('tool "graphql" v1', (), allow_all=True)
    plain = Chain((layer("client", allow()), everything))
    assert plain.allows_whatever_the_inputs("SELECT", ACCOUNT)
    assert decide(plain, document={"balance": -5}) is None
    asserted = Chain((layer("client", allow(assertion="context.document.balance >= 0")), everything))
    denying = Chain((layer("client", allow(), deny(["financial.Account.*"], assertion="context.document.balance < 0")),))
    for chain in (asserted, denying):
        assert not chain.allows_whatever_the_inputs("SELECT", ACCOUNT)
        assert decide(chain, document={"balance": -5}) is not None
        assert decide(chain, document={"balance": 5}) is None
    assert not Chain((layer("client", allow()), Layer('tool "cel" v1', ()))).allows_whatever_the_inputs(
        "SELECT", ACCOUNT)
    assert not plain.allows_whatever_the_inputs("UPDATE", ACCOUNT)  # its client layer allows SELECT only
    assert not Chain().allows_whatever_the_inputs("SELECT", ACCOUNT)
    assert not plain.allows_whatever_the_inputs("TRUNCATE", ACCOUNT)


def test_a_layers_kept_verdict_whatever_the_inputs_is_the_one_it_computes_afresh():
    statements = [allow(), deny(["financial.Account.*"], actions=["UPDATE"]),
                  allow(["financial.Transfer.*"], actions=["INSERT"], assertion="context.document.amount > 0")]
    kept = layer("client", *statements)
    questions = [(operation, resource) for operation in ("SELECT", "UPDATE", "INSERT", "TRUNCATE")
                 for resource in (ACCOUNT, ACCOUNT_INDEX, "financial.Transfer.document")]
    for _ in range(2):  # the second round answers from what the first kept
        for operation, resource in questions:
            fresh = layer("client", *statements)
            assert kept.allows_whatever_the_inputs(operation, resource) == \
                fresh.allows_whatever_the_inputs(operation, resource), (operation, resource)
            assert Chain((kept, kept)).allows_whatever_the_inputs(operation, resource) == \
                fresh.allows_whatever_the_inputs(operation, resource)


def test_check_raises_permission_denied_naming_operation_resource_and_layer():
    chain = Chain((layer('client "admin" (8c1e)', allow(actions=["INSERT"])),))
    with pytest.raises(PermissionDenied) as raised:
        chain.check("UPDATE", ACCOUNT, principal=PRINCIPAL, document={}, has_document=True, action=None)
    error = raised.value
    assert (error.operation, error.resource, error.layer) == ("UPDATE", ACCOUNT, 'client "admin" (8c1e)')
    assert NO_STATEMENT_ALLOWS in error.hint


def test_decisions_from_many_threads_agree():
    chain = Chain((layer("client", allow(assertion="context.document.n % 2 == 0")),))

    def run(offset: int) -> list[bool]:
        return [decide(chain, document={"n": offset + i}) is None for i in range(500)]

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(run, range(8)))
    for offset, allowed in enumerate(results):
        assert allowed == [(offset + i) % 2 == 0 for i in range(500)]


def test_bench_decisions_reports_percentiles():
    result = bench_decisions(200)
    assert set(result) == {"p50_us", "p99_us"}
    assert 0 < result["p50_us"] <= result["p99_us"]


# --- the `cel` tool ------------------------------------------------------------------------------


def test_cel_tool_evaluates_over_its_variables():
    assert evaluate_expression("x > 3", {"x": 5}) is True
    assert evaluate_expression("{'sum': a + b, 'names': names.map(n, n + '!')}", {"a": 1, "b": 2, "names": ["x"]}) == {
        "sum": 3,
        "names": ["x!"],
    }
    assert evaluate_expression("uuid(id)", {"id": ACTION_ID.upper()}) == ACTION_ID


def test_cel_tool_returns_json_for_bytes_timestamps_and_durations():
    result = evaluate_expression(
        "[b'hi', timestamp('2024-05-01T10:00:00Z'), duration('90.5s'), 1.0 / 0.0, type(1)]", {}
    )
    assert result == ["aGk=", "2024-05-01T10:00:00Z", "90.5s", "Infinity", "int"]


def test_cel_tool_compile_error_is_a_cel_error_with_position():
    with pytest.raises(CelError) as raised:
        evaluate_expression("x >", {"x": 1})
    assert isinstance(raised.value, LedgerError) and raised.value.code == "cel_error"
    assert "line 1, column 4" in raised.value.message
    assert raised.value.hint


def test_cel_tool_undeclared_variable_is_a_compile_error():
    with pytest.raises(CelError, match="undeclared reference to 'y'"):
        evaluate_expression("y > 1", {"x": 1})


def test_cel_tool_evaluation_error_is_a_cel_error():
    with pytest.raises(CelError, match="could not be evaluated: no such key"):
        evaluate_expression("x.missing == 1", {"x": {}})
    with pytest.raises(CelError, match="divide by zero"):
        evaluate_expression("1 / x", {"x": 0})


def test_cel_tool_iteration_budget_is_a_cel_error():
    with pytest.raises(CelError, match="could not be evaluated"):
        evaluate_expression("xs.map(a, xs.map(b, a + b)).size()", {"xs": list(range(2000))})


def test_cel_tool_rejects_variable_names_cel_cannot_reference():
    for name in ("in", "a-b", "1x"):
        with pytest.raises(CelError, match="cannot be a CEL variable name"):
            evaluate_expression("true", {name: 1})


def test_compile_expression_check_validates_against_the_given_names():
    compile_expression_check("session.id == event.data.id", ["session", "event"])
    with pytest.raises(CelError):
        compile_expression_check("session.id == other", ["session", "event"])


# --- property: the chain agrees with a small reference model --------------------------------------

SEGMENTS = ("financial", "Account", "document", "indexes", "*")
# Random patterns seldom match anything; these do, so that layers' statements interact.
TYPICAL_PATTERNS = (
    "*",
    "financial.*",
    "financial.Account.*",
    "financial.*.document",
    "financial.Account.document",
    "financial.Account.indexes.*",
    "*.*.document",
)
RESOURCES = (
    "financial.Account.document",
    "financial.Account.indexes.by_name",
    "financial.Transfer.document",
    "financial",
)
OPERATION_NAMES = ("SELECT", "INSERT", "UPDATE", "DELETE", "INVOKE")

# assertion text -> its value given (document present, document flag); None: cannot be evaluated
ASSERTIONS = {
    None: lambda present, flag: True,
    "true": lambda present, flag: True,
    "false": lambda present, flag: False,
    "context.document.flag": lambda present, flag: flag if present else None,
    "context.document.flag == false": lambda present, flag: (not flag) if present else None,
    "context.nothing == 1": lambda present, flag: None,
    "has(context.document) || principal.claims.sub == 'bob'": lambda present, flag: present,
}


def reference_matches(pattern: str, resource: str) -> bool:
    wanted, actual = pattern.split("."), resource.split(".")
    if wanted[-1] == "*":
        fixed = wanted[:-1]
        return len(actual) > len(fixed) and all(w in ("*", a) for w, a in zip(fixed, actual))
    return len(actual) == len(wanted) and all(w in ("*", a) for w, a in zip(wanted, actual))


def reference_layer_allows(statements: list[dict], operation: str, resource: str, present: bool, flag: bool) -> bool:
    matching = [
        s for s in statements
        if operation in s["actions"] and any(reference_matches(p, resource) for p in s["resources"])
    ]
    verdicts = [(s["effect"], ASSERTIONS[s["assertion"]](present, flag)) for s in matching]
    if any(effect == "DENY" and verdict is not False for effect, verdict in verdicts):
        return False
    return any(effect == "ALLOW" and verdict is True for effect, verdict in verdicts)


statement_strategy = st.fixed_dictionaries(
    {
        "effect": st.sampled_from(("ALLOW", "DENY")),
        "actions": st.lists(st.sampled_from(OPERATION_NAMES), min_size=1, max_size=3, unique=True),
        "resources": st.lists(
            st.one_of(
                st.sampled_from(TYPICAL_PATTERNS),
                st.lists(st.sampled_from(SEGMENTS), min_size=1, max_size=4).map(".".join),
            ),
            min_size=1,
            max_size=2,
        ),
        "assertion": st.sampled_from(tuple(ASSERTIONS)),
    }
)
layers_strategy = st.lists(
    st.tuples(st.lists(statement_strategy, max_size=5), st.integers(0, 9).map(lambda n: n == 0)),
    min_size=1,
    max_size=3,
)


@settings(max_examples=600, deadline=None)
@given(
    layers=layers_strategy,
    operation=st.sampled_from(OPERATION_NAMES),
    resource=st.sampled_from(RESOURCES),
    present=st.booleans(),
    flag=st.booleans(),
)
def test_chain_agrees_with_reference_model(layers, operation, resource, present, flag):
    built = []
    for index, (statements, allow_all) in enumerate(layers):
        parsed, problems = parse_policies(statements)
        assert problems == []
        built.append(Layer(f"layer {index}", parsed, allow_all=allow_all))
    chain = Chain(tuple(built))
    expected_denier = next(
        (
            f"layer {index}"
            for index, (statements, allow_all) in enumerate(layers)
            if not allow_all and not reference_layer_allows(statements, operation, resource, present, flag)
        ),
        None,
    )
    denial = chain.decide(
        operation,
        resource,
        principal=PRINCIPAL,
        document={"flag": flag} if present else None,
        has_document=present,
        action=None,
    )
    assert (denial.layer if denial else None) == expected_denier
