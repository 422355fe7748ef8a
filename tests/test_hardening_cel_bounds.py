"""CEL is bounded wherever it runs (DESIGN section 17): an expression of at most 16 KiB, values of at
most 1 MiB, and no expression may hold the server's memory or time.

The bomb is a balanced `(s+s)` tree over a 1 MB string: 256 leaves would build 256 MB (the server
reached 2 GB before the bound), 1,024 leaves a GB. Measured in this (the server's) process: RSS.
"""

from __future__ import annotations

import time
import uuid

import pytest

from invoke_helpers import INVOKE, invoke, publish, tool
from ledger.actions.natives import CEL_ID
from registry_helpers import create_error, problems

MB = 1 << 20

# Builds the balanced `(s+s)` tree of event.data.leaves leaves in Starlark, then asks cel() for its size.
BOMB = (
    'def run(event):\n'
    '    parts = ["s"] * event["data"]["leaves"]\n'
    '    for _ in range(20):\n'
    '        if len(parts) == 1:\n'
    '            break\n'
    '        parts = ["(%s+%s)" % (parts[i], parts[i + 1]) for i in range(0, len(parts), 2)]\n'
    '    return cel("size(" + parts[0] + ")", {"s": "x" * 1000000}, check=event["data"].get("check", True))\n'
)


def bomb_text(leaves: int, leaf: str = "s") -> str:
    parts = [leaf] * leaves
    while len(parts) > 1:
        parts = [f"({parts[i]}+{parts[i + 1]})" for i in range(0, len(parts), 2)]
    return parts[0]


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        import os

        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def invoke_native_cel(api, expression: str, variables: dict) -> dict:
    payload = {"executionId": str(uuid.uuid4()), "input": {"expression": expression, "vars": variables}}
    return api.gql(INVOKE, {"id": str(CEL_ID), "input": payload})["actions"]["invokeAction"]


@pytest.mark.parametrize("leaves", [256, 1024])
def test_a_cel_string_bomb_from_a_program_fails_only_its_call_quickly_and_the_server_stays_small(api, leaves):
    bomb = publish(api, tool("bomb", BOMB, timeout_ms=1000))
    before = rss_bytes()
    started = time.monotonic()
    result = invoke(api, bomb, {"leaves": leaves})
    elapsed = time.monotonic() - started
    grew = rss_bytes() - before
    assert result["status"] == "FAILED"
    error = result["invocation"]["error"]
    assert error["code"] == "cel_error", error
    assert "1 MiB" in error["message"] and error["hint"]
    assert elapsed < 2.0, elapsed
    assert grew < 200 * MB, grew / MB
    # The refused cel() is still recorded as the call's child.
    assert [(c["status"], c["callSequence"]) for c in result["children"]] == [("FAILED", 1)]
    # And the server carries on.
    echo = publish(api, tool("echo", 'def run(event):\n    return "still here"\n'))
    assert invoke(api, echo)["invocation"]["output"] == "still here"


def test_a_refused_cel_call_with_check_false_returns_the_failure_to_the_program(api):
    bomb = publish(api, tool("bomb", BOMB, timeout_ms=1000))
    result = invoke(api, bomb, {"leaves": 256, "check": False})
    assert result["status"] == "SUCCEEDED"
    output = result["invocation"]["output"]
    assert output["status"] == "FAILED" and output["error"]["code"] == "cel_error"


def test_a_cel_bomb_given_directly_to_the_native_cel_tool_is_refused(api):
    before = rss_bytes()
    result = invoke_native_cel(api, "size(" + bomb_text(256) + ")", {"s": "x" * 1_000_000})
    assert result["status"] == "FAILED"
    assert result["invocation"]["error"]["code"] == "cel_error"
    assert rss_bytes() - before < 200 * MB


def test_a_value_over_1_mib_is_refused_and_one_under_it_is_built(api):
    over = invoke_native_cel(api, "size(s + s)", {"s": "x" * 600_000})
    assert over["status"] == "FAILED"
    error = over["invocation"]["error"]
    assert error["code"] == "cel_error" and "1 MiB" in error["message"] and error["hint"]
    under = invoke_native_cel(api, "size(s + s)", {"s": "x" * 400_000})
    assert under["status"] == "SUCCEEDED" and under["invocation"]["output"] == {"value": 800_000}
    # A list counts its items with their sizes.
    items = invoke_native_cel(api, "size(l + l)", {"l": ["y" * 1000] * 600})
    assert items["status"] == "FAILED" and items["invocation"]["error"]["code"] == "cel_error"


def test_a_comprehension_that_would_copy_without_bound_is_refused(api):
    # cel-cpp copies the accumulated list at every step of map(): 5,000 items took 0.7 s and 425 MB.
    started = time.monotonic()
    result = invoke_native_cel(api, "l.map(x, x + 1).size()", {"l": list(range(5000))})
    assert time.monotonic() - started < 2.0
    assert result["status"] == "FAILED"
    assert "too much work" in result["invocation"]["error"]["message"]
    small = invoke_native_cel(api, "l.map(x, x + 1).size()", {"l": list(range(500))})
    assert small["invocation"]["output"] == {"value": 500}


def test_an_expression_over_16_kib_is_refused_everywhere(api):
    long_text = " || ".join(["x == 1"] * 3000)  # ~28 KiB
    assert len(long_text) > 16 << 10
    result = invoke_native_cel(api, long_text, {"x": 1})
    assert result["status"] == "FAILED"
    error = result["invocation"]["error"]
    assert error["code"] == "cel_error" and "16 KiB" in error["message"] and error["hint"]
    # From a program.
    caller = publish(api, tool("caller", 'def run(event):\n    return cel(event["data"]["e"], {"x": 1})\n'))
    from_program = invoke(api, caller, {"e": long_text})
    assert from_program["invocation"]["error"]["code"] == "cel_error"
    # A policy assertion at write: a problem with its path.
    doc = tool("guarded", 'def run(event):\n    return 1\n',
               policies=[{"effect": "ALLOW", "actions": ["SELECT"], "resources": ["financial.*"],
                          "assertion": " || ".join(["principal.clientId == 'a'"] * 800)}])
    found = problems(create_error(api, doc))
    assert any(p["path"] == "policies[0].assertion" and "16 KiB" in p["message"] for p in found), found
    # A `$cel` fixed input at write.
    publish(api, tool("target", 'def run(event):\n    return event["data"]\n'))
    doc = tool("fixer", 'def run(event):\n    return tools.target({})\n',
               tools=[{"name": "target", "input": {"v": {"$cel": long_text.replace("x", "event.data.x")}}}])
    found = problems(create_error(api, doc))
    assert any(p["path"].endswith(".input.v") and "16 KiB" in p["message"] for p in found), found


def test_a_fixed_input_cel_bomb_fails_the_call_without_holding_the_server(api):
    publish(api, tool("target", 'def run(event):\n    return event["data"]\n'))
    caller = publish(api, tool("fixer", 'def run(event):\n    return tools.target({}, check=False)\n',
                               tools=[{"name": "target",
                                       "input": {"v": {"$cel": "size(" + bomb_text(256, "event.data.s") + ")"}}}]))
    before = rss_bytes()
    result = invoke(api, caller, {"s": "x" * 1_000_000})
    assert rss_bytes() - before < 200 * MB
    output = result["invocation"]["output"]
    assert output["status"] == "FAILED" and output["error"]["code"] == "action_input_invalid"
    assert "1 MiB" in output["error"]["message"]


def test_a_normal_cel_call_still_works_and_is_recorded(api):
    caller = publish(api, tool("normal", 'def run(event):\n    return cel("x + 1", {"x": event["data"]["x"]})\n'))
    result = invoke(api, caller, {"x": 41})
    assert result["status"] == "SUCCEEDED" and result["invocation"]["output"] == 42
    assert [(c["status"], c["invocation"]["output"]) for c in result["children"]] == [("SUCCEEDED", {"value": 42})]


def test_a_policy_assertion_past_the_bounds_cannot_be_evaluated_and_costs_the_server_nothing():
    from ledger.policy.cel import compile_assertion

    assertion = compile_assertion("size(" + bomb_text(256, "context.document.name") + ") > 0")
    before = rss_bytes()
    started = time.monotonic()
    verdict = assertion.evaluate({"clientId": "c"}, {"document": {"name": "x" * 1_000_000}}, None)
    assert verdict is None  # "cannot be evaluated": a deny statement denies, an allow statement does not allow
    assert time.monotonic() - started < 0.5
    assert rss_bytes() - before < 50 * MB
    # Over small documents the same assertion is evaluated.
    assert assertion.evaluate({"clientId": "c"}, {"document": {"name": "ab"}}, None) is True
