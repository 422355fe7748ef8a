"""Static analysis of Starlark programs: graphql() documents and tools.<name>. No database."""

from __future__ import annotations

import textwrap

import graphql
import pytest

from ledger.actions.static_analysis import ProgramProblem, analyze_program

SCHEMA = graphql.build_schema(
    """
    scalar UUID
    type Query { financial: FinancialQuery! viewer: Viewer! }
    type Viewer { tenantId: UUID! }
    type FinancialQuery { account(id: UUID!): Account }
    type Account { id: UUID! balance: Int! currency: String! }
    type Mutation { financial: FinancialMutation! }
    type FinancialMutation { createTransfer(id: UUID!, amount: Int!): Account! }
    """
)

VALID = "{ viewer { tenantId } }"
INVALID = "{ financial { nope } }"
NOPE_ERROR = "Cannot query field 'nope' on type 'FinancialQuery'."
WITH_ID = "query($id: UUID!) { financial { account(id: $id) { balance currency } } }"
TWO_OPERATIONS = "query A { viewer { tenantId } } query B { viewer { tenantId } }"


def analyze(source: str, tools: set[str] | None = None) -> list[ProgramProblem]:
    return analyze_program(textwrap.dedent(source).lstrip("\n"), tools or set(), SCHEMA)


def messages(source: str, tools: set[str] | None = None) -> list[str]:
    return [p.message for p in analyze(source, tools)]


# --- literals ----------------------------------------------------------------------------------------


def test_a_valid_literal_passes():
    assert analyze(f'''
        def run(event):
            return graphql("""{VALID}""")
    ''') == []


def test_an_invalid_field_in_a_literal_is_reported_at_the_literal():
    problems = analyze(f'''
        def run(event):
            x = 1
            return graphql("{INVALID}")
    ''')
    assert problems == [ProgramProblem(3, 20, f"the document at line 3 passed to `graphql()`: {NOPE_ERROR}")]


def test_every_error_of_a_document_is_reported():
    assert len(messages('graphql("{ financial { nope } viewer { nothere } }")')) == 2


def test_a_syntax_error_in_a_document_says_where_in_the_document():
    [message] = messages('graphql("{ viewer { tenantId }")')
    assert "Syntax Error" in message and "(document line 1, column" in message


def test_a_mutation_literal_is_validated_like_a_query():
    assert analyze('''
        graphql("mutation { financial { createTransfer(id: \\"x\\", amount: 5) { balance } } }")
    ''') == []


def test_a_column_counts_characters_not_utf8_bytes():
    [problem] = analyze(f'x = "é"; graphql("{INVALID}")')
    assert (problem.line, problem.column) == (1, 18)


# --- module constants --------------------------------------------------------------------------------


def test_a_module_constant_is_followed():
    problems = analyze(f'''
        DOC = """{INVALID}"""

        def run(event):
            return graphql(DOC)
    ''')
    assert problems == [
        ProgramProblem(1, 7, f"the constant `DOC` (line 1) passed to `graphql()` at line 4: {NOPE_ERROR}")
    ]


def test_a_reassigned_constant_is_not_followed():
    assert analyze(f'''
        DOC = "{INVALID}"
        DOC = "{VALID}"

        def run(event):
            return graphql(DOC)
    ''') == []


def test_a_constant_rebound_under_global_is_not_followed():
    assert analyze(f'''
        DOC = "{INVALID}"

        def reset():
            global DOC
            DOC = "{VALID}"

        def run(event):
            return graphql(DOC)
    ''') == []


def test_a_local_shadowing_a_constant_is_not_followed():
    assert analyze(f'''
        DOC = "{INVALID}"

        def run(event):
            DOC = event["doc"]
            return graphql(DOC)
    ''') == []


# --- through the program's functions -----------------------------------------------------------------


def test_a_literal_through_one_function_names_the_hop():
    assert messages(f'''
        def fetch(doc):
            return graphql(doc)

        def run(event):
            return fetch("{INVALID}")
    ''') == [f"the literal at line 5 passed to `fetch(doc)` reaches `graphql()` at line 2: {NOPE_ERROR}"]


def test_a_constant_through_two_functions_names_every_hop():
    assert messages(f'''
        DOC = "{INVALID}"

        def inner(x):
            return graphql(x)

        def outer(d):
            return inner(d)

        def run(event):
            return outer(DOC)
    ''') == [
        "the constant `DOC` (line 1) passed to `outer(d)` at line 10, then to `inner(x)` at line 7, "
        f"reaches `graphql()` at line 4: {NOPE_ERROR}"
    ]


def test_a_keyword_argument_at_a_call_site_is_followed():
    assert len(messages(f'''
        def fetch(first, doc):
            return graphql(doc)

        fetch(1, doc="{INVALID}")
    ''')) == 1


def test_call_sites_passing_non_constants_are_not_checked():
    assert messages(f'''
        def fetch(doc):
            return graphql(doc)

        def run(event):
            fetch(event["doc"])
            fetch("x" + event["more"])
            fetch("{INVALID}")
    ''') == [f"the literal at line 7 passed to `fetch(doc)` reaches `graphql()` at line 2: {NOPE_ERROR}"]


def test_the_same_constant_from_two_call_sites_is_reported_once():
    assert len(messages(f'''
        DOC = "{INVALID}"

        def fetch(doc):
            return graphql(doc)

        fetch(DOC)
        fetch(DOC)
    ''')) == 1


def test_a_recursive_function_chain_terminates():
    assert len(messages(f'''
        def a(d, n):
            return b(d, n - 1)

        def b(x, n):
            if n > 0:
                return a(x, n)
            return graphql(x)

        def run(event):
            return a("{INVALID}", 3)
    ''')) == 1


def test_a_long_chain_of_functions_does_not_exhaust_the_stack():
    depth = 1500
    chain = "\n".join(f"def f{i}(d):\n    return f{i + 1}(d)" for i in range(depth))
    source = f'{chain}\ndef f{depth}(d):\n    return graphql(d)\nf0("{INVALID}")\n'
    [problem] = analyze_program(source, set(), SCHEMA)
    assert problem.message.endswith(NOPE_ERROR)


def test_a_parameter_rebound_in_the_function_is_not_followed():
    assert analyze(f'''
        def fetch(doc):
            doc = doc + " "
            return graphql(doc)

        fetch("{INVALID}")
    ''') == []


# --- left for run time -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "document",
    [
        f'"{INVALID}" if event["x"] else "{VALID}"',  # a conditional expression
        f'"{INVALID}" + ""',  # a concatenation
        f'f"{INVALID}{{event}}"',  # an f-string
        "doc",  # a loop element
        f'["{INVALID}"][0]',  # an element of a list
        f'"%s" % "{INVALID}"',  # a %-format
        "make()",  # a call result
    ],
    ids=["conditional", "concatenation", "f-string", "loop-element", "list-element", "percent-format", "call"],
)
def test_a_document_built_at_run_time_is_left_for_run_time(document):
    assert analyze(f'''
        def make():
            return "{INVALID}"

        def run(event):
            for doc in ["{INVALID}"]:
                graphql({document})
    ''') == []


def test_a_lambda_parameter_is_left_for_run_time():
    assert analyze(f'''
        fetch = lambda d: graphql(d)
        fetch("{INVALID}")
    ''') == []


# --- check= ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("check", ["False", "some_var"])
def test_a_check_other_than_true_skips_validation(check):
    assert analyze(f'''
        some_var = False
        graphql("{INVALID}", check={check})
    ''') == []


def test_check_true_validates():
    assert messages(f'graphql("{INVALID}", check=True)') == [
        f"the document at line 1 passed to `graphql()`: {NOPE_ERROR}"
    ]


def test_a_positional_check_false_skips_validation():
    assert analyze(f'graphql("{INVALID}", None, None, False)') == []


# --- operation names ---------------------------------------------------------------------------------


def test_two_operations_without_an_operation_name_are_reported():
    assert messages(f'graphql("{TWO_OPERATIONS}")') == [
        "the document at line 1 passed to `graphql()`: "
        "Must provide operation name if query contains multiple operations."
    ]


def test_two_operations_with_a_known_operation_name_pass():
    assert analyze(f'graphql("{TWO_OPERATIONS}", operation_name="B")') == []


def test_an_unknown_operation_name_is_reported():
    assert messages(f'graphql("{TWO_OPERATIONS}", operation_name="C")') == [
        "the document at line 1 passed to `graphql()`: Unknown operation named 'C'."
    ]


def test_an_operation_name_chosen_at_run_time_is_not_checked():
    assert analyze(f'''
        def run(event):
            return graphql("{TWO_OPERATIONS}", operation_name=event["op"])
    ''') == []


# --- required variables ------------------------------------------------------------------------------


def test_a_required_variable_is_missing_when_variables_is_absent():
    assert messages(f'graphql("{WITH_ID}")') == [
        "the document at line 1 passed to `graphql()`: Variable '$id' of required type 'UUID!' was not provided."
    ]


def test_a_variables_dict_literal_supplies_the_required_variable():
    assert analyze(f'''
        def run(event):
            return graphql("{WITH_ID}", variables={{"id": event["data"]["account_id"]}})
    ''') == []


def test_a_variables_dict_literal_without_the_required_variable_is_reported():
    assert len(messages(f'graphql("{WITH_ID}", variables={{"other": 1}})')) == 1


def test_a_non_literal_variables_expression_skips_the_variable_check():
    assert analyze(f'''
        def run(event):
            return graphql("{WITH_ID}", variables=event["data"])
    ''') == []


def test_a_variable_with_a_default_is_not_required():
    assert analyze('graphql("query($id: UUID! = \\"x\\") { financial { account(id: $id) { id } } }")') == []


def test_variables_of_the_chosen_operation_only_are_required():
    document = f"query A {{ viewer {{ tenantId }} }} {WITH_ID.replace('query', 'query B', 1)}"
    assert analyze(f'graphql("{document}", operation_name="A")') == []


# --- tools.<name> ------------------------------------------------------------------------------------


def test_an_undeclared_tool_is_reported():
    assert analyze('''
        def run(event):
            return tools.transfr({"amount": 5})
    ''', {"transfer", "notify"}) == [
        ProgramProblem(
            2,
            12,
            "`tools.transfr` is not declared: the action's `tools` references declare `notify`, `transfer`; "
            "add a reference to it in `tools`, or fix the name (did you mean `transfer`?)",
        )
    ]


def test_an_undeclared_tool_with_no_references_says_none():
    [message] = messages("f = tools.transfer")
    assert "references declare none;" in message


def test_a_declared_tool_passes():
    assert analyze('''
        def run(event):
            moved = tools.transfer({"amount": 5})
            return tools.transfer
    ''', {"transfer"}) == []


def test_a_program_binding_tools_itself_is_not_checked():
    assert analyze('''
        tools = struct(mine = 1)
        x = tools.mine
    ''') == []


# --- robustness --------------------------------------------------------------------------------------


def test_unparseable_source_returns_no_problems():
    assert analyze("def run(event:\n    return graphql('{ nope }')") == []


def test_source_with_a_null_byte_returns_no_problems():
    assert analyze_program("x = 1\0", set(), SCHEMA) == []


def test_a_property_named_from_in_a_dict_literal_is_not_a_problem():
    assert analyze(f'''
        def run(event):
            acct = graphql("{WITH_ID}", variables={{"id": event["id"], "filter": {{"from": 1, "class": 2}}}})
            return tools.transfer({{"from": {{"from": "a"}}, "to": "b", "amount": 5}})
    ''', {"transfer"}) == []


def test_a_program_defining_its_own_graphql_is_not_checked():
    assert analyze(f'''
        def graphql(doc):
            return doc

        graphql("{INVALID}")
    ''') == []


def test_problems_past_the_cap_are_summarised_in_one_note():
    problems = analyze("\n".join(f"x{i} = tools.nope{i}" for i in range(150)))
    assert len(problems) == 101
    assert problems[-1].message.startswith("more problems follow; only the first 100 are listed")


def test_a_repeated_document_is_judged_once():
    from ledger.actions import static_analysis

    static_analysis._judge_document.cache_clear()
    for _ in range(3):
        analyze(f'graphql("{INVALID}")')
    assert static_analysis._judge_document.cache_info().hits == 2


def test_the_real_schema_accepts_the_design_example():
    try:
        from ledger.api.schema import schema
    except ImportError:
        pytest.skip("the API schema is not importable")
    source = textwrap.dedent(f'''
        def run(event):
            acct = graphql("""{WITH_ID}""", variables={{"id": event["data"]["account_id"]}})
            bad = graphql("""{{ viewer {{ nope }} }}""")
            return {{"balance": acct["financial"]["account"]["balance"]}}
    ''')
    problems = analyze_program(source, set(), schema._schema)
    [problem] = problems
    assert problem.line == 4
    assert problem.message.startswith("the document at line 4 passed to `graphql()`: Cannot query field 'nope'")
