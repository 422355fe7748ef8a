"""A property-based fuzzer (hypothesis) over the GraphQL inputs of createAction, invokeAction and
createTransfer, and over the Starlark source given to createAction.

Bodies are sent as raw bytes, so that they can carry what a JSON library would refuse to write: NaN,
Infinity, 1e999, lone surrogates (`"\\ud800"`), integers beyond 64 bits, nesting past 32 levels, and
strings of megabytes. The properties:

- never an HTTP 5xx, always a JSON body; every error has an `extensions.code`, never `internal_error`;
- an answer with errors wrote nothing (the tenant's rows are unchanged);
- an invokeAction answered without errors is SUCCEEDED, or FAILED with a code;
- a program is accepted, or refused with `action_definition_invalid` naming a line of the source.

Each `fuzz_*` function runs `examples` examples; `make test` runs few, `make test-soak` many.
"""

from __future__ import annotations

import json
import math
import os
import uuid
from typing import Any

import psycopg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import CREATE_TRANSFER
from invoke_helpers import INVOKE
from registry_helpers import CREATE

HUGE = ["x" * 100_000, "é" * 600_000, "y" * 1_100_000, "z" * 9_000_000]  # the last is past the body limit
SURROGATES = st.sampled_from(["\ud800", "a\udfffb", "\udc00\ud800", "x\ud83d", "\ud83d\ude00\ud83d"])
BIG_INTEGERS = st.sampled_from([2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1, 10**30, -(10**40)])
SPECIAL_FLOATS = st.sampled_from([math.nan, math.inf, -math.inf, 1e308, -0.0, 5e-324])


def mostly(friendly: st.SearchStrategy[Any], hostile: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Three draws in four from `friendly`: inputs mostly get far enough to reach the code behind them."""
    return st.one_of(friendly, friendly, friendly, hostile)


@st.composite
def corrupt_one(draw, friendly: dict[str, Any], hostile: dict[str, Any]) -> dict:
    """Friendly values for every field, then often one field replaced by a hostile one: each example
    gets far enough for that one field to reach the code that checks it. Sometimes all of it is random."""
    values = {key: draw(strategy) for key, strategy in friendly.items()}
    # About half the examples keep every field friendly.
    choice = draw(st.sampled_from([None] * (len(hostile) + 2) + ["*", *hostile]))
    if choice == "*":
        return draw(json_values(8))
    if choice is not None:
        values[choice] = draw(hostile[choice])
    return values


def text() -> st.SearchStrategy[str]:
    return st.one_of(st.text(max_size=30), SURROGATES, st.sampled_from(HUGE[:2]))


def nested(depth: int, kind: str, leaf: Any = 1) -> Any:
    value = leaf
    for _ in range(depth):
        value = [value] if kind == "list" else {"a": value}
    return value


def deep_values() -> st.SearchStrategy[Any]:
    """Nesting around the 32-level limit, as lists or objects."""
    return st.builds(nested, st.integers(28, 40), st.sampled_from(["list", "dict"]))


def json_values(max_leaves: int = 12) -> st.SearchStrategy[Any]:
    scalars = st.one_of(
        st.none(), st.booleans(), st.integers(), BIG_INTEGERS,
        st.floats(allow_nan=True, allow_infinity=True), SPECIAL_FLOATS, text(),
    )
    tree = st.recursive(scalars, lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.one_of(st.text(max_size=8), SURROGATES), children,
                                                        max_size=4)), max_leaves=max_leaves)
    return st.one_of(tree, tree, tree, tree, tree, deep_values(), st.sampled_from(HUGE))


def encode(value: Any) -> str:
    """JSON text of `value`, writing NaN, Infinity and 1e999 as the raw tokens a strict parser refuses,
    and lone surrogates as `\\uXXXX` escapes."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "1e999" if value > 0 else "-Infinity"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # ensure_ascii: a lone surrogate becomes an escape
    if isinstance(value, list):
        return "[" + ",".join(encode(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(str(k))}:{encode(v)}" for k, v in value.items()) + "}"
    raise TypeError(type(value))


# ---------------------------------------------------------------------------- checking one answer


class Target:
    """The tenant a fuzzer works in: its API, and a look at its rows through the owner role."""

    def __init__(self, api, db_url: str) -> None:
        self.api = api
        self.db_url = db_url
        self.conn = psycopg.connect(db_url, autocommit=True)

    def close(self) -> None:
        self.conn.close()

    def post(self, query: str, variables: Any) -> Any:
        body = encode({"query": query, "variables": variables}).encode("utf-8", "surrogatepass")
        return self.api.http.post("/graphql", content=body, headers={
            "Authorization": f"Bearer {self.api.token}", "Content-Type": "application/json"})

    def fingerprint(self) -> tuple:
        tenant = self.api.tenant_id
        return self.conn.execute(
            "SELECT (SELECT count(*) FROM actions WHERE tenant_id = %(t)s),"
            " (SELECT count(*) FROM action_versions WHERE tenant_id = %(t)s),"
            " (SELECT count(*) FROM executions WHERE tenant_id = %(t)s),"
            " (SELECT count(*) FROM invocations WHERE tenant_id = %(t)s),"
            " (SELECT count(*) FROM accounts WHERE tenant_id = %(t)s),"
            " (SELECT count(*) FROM transfers WHERE tenant_id = %(t)s),"
            " (SELECT coalesce(array_agg(balance ORDER BY id), '{}') FROM accounts WHERE tenant_id = %(t)s)",
            {"t": tenant}).fetchone()

    def send(self, query: str, variables: Any) -> tuple[dict, bool]:
        """Post, check the answer's shape; returns (body, wrote_nothing_checked)."""
        before = self.fingerprint()
        response = self.post(query, variables)
        assert response.status_code < 500, (response.status_code, response.text[:500])
        body = response.json()
        errors = body.get("errors")
        if errors:
            codes = [(e.get("extensions") or {}).get("code") for e in errors]
            assert all(codes), errors
            assert "internal_error" not in codes, errors
            assert self.fingerprint() == before, f"an answer with errors {codes} wrote something"
        return body, bool(errors)

    def money_adds_up(self) -> None:
        rows = self.conn.execute("SELECT currency, sum(balance) FROM accounts WHERE tenant_id = %s GROUP BY 1",
                                 (self.api.tenant_id,)).fetchall()
        assert all(total == 0 for _, total in rows), rows
        negative = self.conn.execute("SELECT count(*) FROM accounts WHERE tenant_id = %s AND balance < 0"
                                     " AND NOT allow_overdraft", (self.api.tenant_id,)).fetchone()[0]
        assert negative == 0


def _settings(examples: int):
    # Random inputs on a developer's machine find new bugs; CI replays a fixed sequence, so that a red
    # build always means a change broke something.
    return settings(max_examples=examples, deadline=None, database=None, derandomize=bool(os.environ.get("CI")),
                    suppress_health_check=list(HealthCheck))


def fresh_ids() -> st.SearchStrategy[str]:
    """A new UUID every draw (hypothesis would repeat its own, and a repeated id is only a conflict)."""
    return st.builds(lambda: str(uuid.uuid4()))


def _uuids() -> st.SearchStrategy[Any]:
    return st.one_of(st.uuids().map(str), st.sampled_from(["", "not-a-uuid", "00000000-0000-0000-0000-00000000000g",
                                                            "{" + str(uuid.UUID(int=1)) + "}"]), json_values(4))


# ---------------------------------------------------------------------------- createTransfer


def fuzz_create_transfer(target: Target, pairs: list[tuple[str, str]], examples: int) -> dict:
    """`pairs`: (from, to) account pairs a transfer may be made between."""
    seen: dict[str, int] = {}
    accounts = sorted({a for pair in pairs for a in pair})
    friendly = {"id": fresh_ids(), "pair": st.sampled_from(pairs),
                "amount": st.integers(1, 500), "memo": st.one_of(st.none(), st.text(max_size=20))}
    hostile = {"id": _uuids(), "pair": st.tuples(mostly(st.sampled_from(accounts), _uuids()),
                                                 mostly(st.sampled_from(accounts), _uuids())),
               "memo": st.one_of(text(), json_values(3)),
               "amount": st.one_of(st.integers(), BIG_INTEGERS, st.integers(-5, 0), SPECIAL_FLOATS, st.floats(),
                                   st.sampled_from(["1", "12", "-3", "1e3", "0x10", " 7", "9223372036854775808", ""]),
                                   json_values(3))}

    @_settings(examples)
    @given(variables=corrupt_one(friendly, hostile))
    def run(variables):
        if isinstance(variables, dict) and "pair" in variables:
            variables = {**variables}
            variables["from"], variables["to"] = variables.pop("pair")
        body, failed = target.send(CREATE_TRANSFER, variables)
        if failed:
            outcome = "error:" + body["errors"][0]["extensions"]["code"]
        else:
            made = body["data"]["financial"]["createTransfer"]
            assert made["id"] == str(uuid.UUID(str(variables["id"])))
            outcome = "written"
        seen[outcome] = seen.get(outcome, 0) + 1
        target.money_adds_up()

    run()
    return seen


# ---------------------------------------------------------------------------- invokeAction


def fuzz_invoke_action(target: Target, action_ids: list[str], examples: int) -> dict:
    """`action_ids`: tools taking {n, s}, and the last one a transfer tool taking {id, amount}."""
    seen: dict[str, int] = {}
    mover = action_ids[-1]
    tool_inputs = st.one_of(
        corrupt_one({"n": st.integers(-5, 5), "s": st.text(max_size=10)},
                    {"n": st.one_of(BIG_INTEGERS, json_values(3)), "s": text(), "x": json_values(4)}),
        corrupt_one({"id": fresh_ids(), "amount": st.integers(1, 50)},
                    {"id": _uuids(), "amount": st.one_of(st.integers(), BIG_INTEGERS, SPECIAL_FLOATS, json_values(2))}),
    )
    invoke_inputs = corrupt_one({"executionId": fresh_ids(), "input": tool_inputs},
                                {"executionId": _uuids(), "actionVersion": st.one_of(st.integers(), json_values(2)),
                                 "sessionId": _uuids(), "input": json_values()})

    @_settings(examples)
    @given(variables=corrupt_one({"id": st.sampled_from(action_ids), "input": invoke_inputs}, {"id": _uuids()}))
    def run(variables):
        action = variables.get("id") if isinstance(variables, dict) else None
        body, failed = target.send(INVOKE, variables)
        if failed:
            outcome = "error:" + body["errors"][0]["extensions"]["code"]
        else:
            execution = body["data"]["actions"]["invokeAction"]
            assert execution["status"] in ("SUCCEEDED", "FAILED"), execution
            if execution["status"] == "FAILED":
                code = (execution["invocation"]["error"] or {}).get("code")
                assert code, execution
                outcome = "FAILED:" + code
            else:
                outcome = "SUCCEEDED"
            if action == mover:  # a transfer call made its transfer exactly when it succeeded
                made = target.conn.execute("SELECT count(*) FROM transfers WHERE tenant_id = %s AND execution_id = %s",
                                           (target.api.tenant_id, execution["executionId"])).fetchone()[0]
                assert made == (1 if execution["status"] == "SUCCEEDED" else 0), execution
        seen[outcome] = seen.get(outcome, 0) + 1

    run()
    return seen


# ---------------------------------------------------------------------------- createAction


def json_schemas() -> st.SearchStrategy[Any]:
    types = st.sampled_from(["object", "string", "integer", "number", "array", "boolean", "null", "objet", 5])
    keywords = {
        "type": st.one_of(types, st.lists(types, max_size=3)),
        "minimum": st.one_of(st.integers(), SPECIAL_FLOATS), "maxLength": st.one_of(st.integers(), text()),
        "pattern": st.sampled_from(["^a+$", "(", "[z-a]", "(?<=x)y", "\\", "a{99999999}"]),
        "format": st.sampled_from(["email", "uuid", "date-time", "regex", "nonsense"]),
        "$ref": st.sampled_from(["#/$defs/x", "http://example.invalid/schema.json", "#", "file:///etc/passwd"]),
        "required": st.one_of(st.lists(st.text(max_size=6), max_size=3), json_values(2)),
        "enum": st.lists(json_values(2), max_size=3),
        "additionalProperties": st.booleans(),
    }
    base = st.fixed_dictionaries({}, optional=keywords)
    return st.one_of(
        st.recursive(base, lambda inner: st.one_of(
            st.fixed_dictionaries({"type": st.just("object"),
                                   "properties": st.dictionaries(st.one_of(st.text(max_size=8),
                                                                           st.sampled_from(["class", "match", "1x",
                                                                                            "a-b", "ok"])),
                                                                 inner, max_size=3)}),
            st.fixed_dictionaries({"type": st.just("array"), "items": inner}),
            st.fixed_dictionaries({"allOf": st.lists(inner, max_size=2)}),
        ), max_leaves=6),
        json_values(4),
    )


def action_inputs(sources: st.SearchStrategy[str]) -> st.SearchStrategy[Any]:
    names = st.from_regex(r"\A[a-z][a-z0-9_]{3,12}\Z")
    bad_names = st.one_of(st.sampled_from(["graphql", "cel", "Bad Name", "a" * 65, ""]), text())
    statement = st.fixed_dictionaries(
        {"effect": st.sampled_from(["ALLOW", "DENY"]),
         "actions": st.lists(st.sampled_from(["SELECT", "INSERT", "UPDATE", "DELETE", "INVOKE"]), max_size=3),
         "resources": st.lists(st.sampled_from(["financial.*", "financial.Account.document"]), max_size=3)})
    bad_statement = corrupt_one(
        {"effect": st.sampled_from(["ALLOW", "DENY"]), "actions": st.just(["SELECT"]), "resources": st.just(["financial.*"])},
        {"effect": json_values(1), "actions": st.one_of(st.just(["DROP"]), json_values(2)),
         "resources": st.lists(st.sampled_from(["*.*.*", "financial.", "financial.**", "", "a.*.b.*"]), max_size=2),
         "assertion": st.sampled_from(["1 +", "principal.nope", "uuid('x') == 'y'", "size('a') > 0" * 50,
                                       "context.document.currency == 'USD'", "true"])})
    tool_block = corrupt_one(
        {"name": names, "description": st.text(min_size=1, max_size=20), "inputSchema": st.just({"type": "object"})},
        {"name": bad_names, "description": st.one_of(text(), st.none()), "inputSchema": json_schemas(),
         "outputSchema": json_schemas(), "responseTimeout": st.one_of(st.integers(), BIG_INTEGERS),
         "output": st.fixed_dictionaries({"offload": st.sampled_from(["AUTO", "NEVER", "SOMETIMES"])}),
         "session": json_values(1)})
    return corrupt_one(
        {"name": names, "kind": st.just("tool"), "description": st.text(max_size=20),
         "config": st.fixed_dictionaries({"runtime": st.just("starlark"), "src": sources}), "tool": tool_block,
         "policies": st.lists(statement, max_size=2)},
        {"name": bad_names, "kind": st.one_of(st.sampled_from(["graphql", "cel", "agent"]), text()),
         "description": json_values(2),
         "config": st.one_of(st.fixed_dictionaries({"version": st.one_of(st.integers(), json_values(2))}),
                             st.fixed_dictionaries({"runtime": text(), "src": sources}), json_values(4)),
         "tool": json_values(3), "policies": st.one_of(st.lists(bad_statement, min_size=1, max_size=2), json_values(3)),
         "tools": st.one_of(st.lists(st.fixed_dictionaries({"name": names}, optional={
             "version": st.integers(), "input": json_values(3)}), max_size=2), json_values(2)),
         "execution": st.one_of(st.fixed_dictionaries({}, optional={
             "maxAttempts": st.one_of(st.integers(), BIG_INTEGERS),
             "backoffSeconds": st.one_of(st.floats(allow_nan=True), st.integers())}), json_values(2)),
         "enabled": json_values(1)})


VALID_SRC = 'def run(event):\n    return {"echo": event["data"]}\n'


def fuzz_create_action(target: Target, examples: int) -> dict:
    seen: dict[str, int] = {}
    sources = st.one_of(st.just(VALID_SRC), st.just(VALID_SRC), starlark_sources())

    @_settings(examples)
    @given(variables=corrupt_one({"id": fresh_ids(), "input": action_inputs(sources)}, {"id": _uuids()}))
    def run(variables):
        body, failed = target.send(CREATE, variables)
        outcome = "error:" + body["errors"][0]["extensions"]["code"] if failed else "created"
        seen[outcome] = seen.get(outcome, 0) + 1

    run()
    return seen


# ---------------------------------------------------------------------------- Starlark source


TOKENS = ["def", "run", "(", ")", ":", "\n", "    ", "return", "for", "in", "range", "if", "else", "elif", "while",
          "lambda", "load", "'", '"', '"""', "[", "]", "{", "}", ",", ".", "1", "0", "-1", "x", "event", "=", "==",
          "+", "*", "**", "%", "//", "fail", "graphql", "cel", "tools", "tools.x", "print", "struct", "None", "True",
          "not", "and", "or", "pass", "break", "continue", "#", "\\", "\t", "\r", "@", "$", "?", ";", "\x00",
          "99999999999999999999999", "1e999", "\ud800", "é", "🙂", "async", "class", "import", "global", "yield"]


def starlark_sources() -> st.SearchStrategy[str]:
    tokens = st.lists(st.sampled_from(TOKENS), max_size=40).map(" ".join)
    glued = st.lists(st.sampled_from(TOKENS), max_size=40).map("".join)

    def mutate(args):
        src, position, insert, delete = args
        position = position % (len(src) + 1)
        return src[:position] + insert + src[position + delete:]

    base_programs = st.sampled_from([
        VALID_SRC,
        'DOC = """query { viewer { tenantId } }"""\n\ndef run(event):\n    return graphql(DOC)\n',
        'def helper(x):\n    return [i * x for i in range(10)]\n\ndef run(event):\n    return helper(2)\n',
        'def run(event):\n    if event["data"]:\n        fail("no", hint="x")\n    return cel("1 + 1", {})\n',
    ])
    mutated = st.tuples(base_programs, st.integers(0, 200), st.one_of(st.sampled_from(TOKENS), st.text(max_size=5)),
                        st.integers(0, 5)).map(mutate)
    prefixed = st.tuples(st.one_of(tokens, glued), base_programs).map(lambda t: t[1] + "\n" + t[0])
    return st.one_of(tokens, glued, mutated, prefixed, st.text(max_size=200))


def fuzz_starlark_source(target: Target, examples: int) -> dict:
    """Every source is accepted, or refused with `action_definition_invalid` whose problems with the
    program name a line; the server answers the next request."""
    seen: dict[str, int] = {}

    @_settings(examples)
    @given(src=starlark_sources())
    def run(src):
        name = f"fuzzed_{uuid.uuid4().hex[:12]}"
        doc = {"name": name, "kind": "tool", "config": {"runtime": "starlark", "src": src},
               "tool": {"name": name, "description": "fuzzed", "inputSchema": {"type": "object"}}}
        body, failed = target.send(CREATE, {"id": str(uuid.uuid4()), "input": doc})
        if failed:
            error = body["errors"][0]
            code = error["extensions"]["code"]
            if code == "bad_request":  # a lone surrogate is not JSON text the server takes at all
                assert any(0xD800 <= ord(c) <= 0xDFFF for c in src), error
                seen["bad_request"] = seen.get("bad_request", 0) + 1
                return
            assert code == "action_definition_invalid", error
            src_problems = [p for p in error["extensions"]["problems"] if p["path"].startswith("config")]
            assert src_problems, error
            for problem in src_problems:
                # A program's problem names its line; the source as a whole may be missing or too long.
                assert problem["path"] == "config.src" and (
                    problem["message"].startswith("line ") or not src.strip()
                    or problem["message"].startswith("the program is ")), problem
            seen["refused"] = seen.get("refused", 0) + 1
        else:
            seen["accepted"] = seen.get("accepted", 0) + 1
        viewer = target.api.post("{ viewer { tenantId } }")
        assert viewer.status_code == 200

    run()
    return seen
