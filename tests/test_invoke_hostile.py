"""invokeAction against programs that loop, recurse or exhaust memory: each fails only its own call."""

import time
import uuid

import pytest

from invoke_helpers import invoke, publish, tool
from ledger.config import Settings

# Each hostile program is called first, then a well-behaved one, in the same request.
BOTH = """mutation($bad: UUID!, $good: UUID!, $b: InvokeActionInput!, $g: InvokeActionInput!) { actions {
  bad: invokeAction(id: $bad, input: $b) { status invocation { error { code message hint } } }
  good: invokeAction(id: $good, input: $g) { status invocation { output } } } }"""

ECHO = 'def run(event):\n    return "still here"\n'


@pytest.fixture
def settings(db_url, tmp_path) -> Settings:
    # A small memory bound makes exhausting it quick.
    return Settings(database_url=db_url, data_dir=tmp_path / "data", pool_min=1, pool_max=10,
                    executor_memory_bytes=512 << 20)


def run_hostile(api, src: str, timeout_ms: int = 10_000, data_in: dict | None = None) -> tuple[dict, float]:
    """Invoke the hostile program and then a good one in one request; returns (the hostile call, seconds)."""
    bad = publish(api, tool("hostile", src, timeout_ms=timeout_ms))
    good = publish(api, tool("good", ECHO))
    started = time.monotonic()
    data = api.gql(BOTH, {"bad": bad, "good": good, "b": {"executionId": str(uuid.uuid4()), "input": data_in or {}},
                          "g": {"executionId": str(uuid.uuid4()), "input": {}}})["actions"]
    elapsed = time.monotonic() - started
    assert data["good"] == {"status": "SUCCEEDED", "invocation": {"output": "still here"}}
    assert data["bad"]["status"] == "FAILED"
    return data["bad"]["invocation"]["error"], elapsed


def test_an_endless_loop_fails_with_action_response_timeout_and_the_next_request_is_answered(api):
    src = ('def run(event):\n    n = 0\n    for i in range(2000000000):\n        for j in range(2000000000):\n'
           '            n += 1\n    return n\n')
    loop = publish(api, tool("loop", src, timeout_ms=1000))
    started = time.monotonic()
    result = invoke(api, loop)
    assert time.monotonic() - started < 5
    assert result["status"] == "FAILED"
    assert result["invocation"]["error"]["code"] == "action_response_timeout"
    assert result["invocation"]["error"]["hint"]
    echo = publish(api, tool("echo", ECHO))
    assert invoke(api, echo)["invocation"]["output"] == "still here"


def test_a_timeout_bounds_the_children_too(api):
    publish(api, tool("spin", 'def run(event):\n    for i in range(2000000000):\n        for j in range(2000000000):\n'
                              '            pass\n', timeout_ms=60_000))
    caller = publish(api, tool("impatient", 'def run(event):\n    return tools.spin({}, check=False)\n',
                               tools=[{"name": "spin"}], timeout_ms=1000))
    started = time.monotonic()
    result = invoke(api, caller)
    assert time.monotonic() - started < 5
    assert result["status"] == "FAILED"
    assert result["invocation"]["error"]["code"] == "action_response_timeout"


def test_deep_recursion_fails_only_its_call(api):
    error, elapsed = run_hostile(api, 'def down(n):\n    return down(n + 1)\n\ndef run(event):\n    return down(0)\n')
    assert error["code"] == "action_resource_exhausted"
    assert "recursion" in error["message"]
    assert elapsed < 10


def test_a_huge_string_repetition_fails_only_its_call(api):
    # The count comes from the input: a constant expression would be folded (and refused) when the tool is written.
    error, elapsed = run_hostile(api, "def run(event):\n    return len('y' * event['data']['n'])\n", data_in={"n": 2000000000})
    assert error["code"] == "action_resource_exhausted"
    assert "memory" in error["message"] or "memory" in (error["hint"] or "")
    assert elapsed < 10


def test_a_list_grown_without_bound_fails_only_its_call(api):
    src = 'def run(event):\n    items = [0]\n    for i in range(200):\n        items.extend(items)\n    return len(items)\n'
    error, elapsed = run_hostile(api, src)
    assert error["code"] == "action_resource_exhausted"
    assert elapsed < 10


def test_a_list_appended_to_in_a_loop_fails_only_its_call(api):
    src = 'def run(event):\n    items = []\n    for i in range(2000000000):\n        items.append(i)\n    return len(items)\n'
    error, elapsed = run_hostile(api, src, timeout_ms=30_000)
    assert error["code"] == "action_resource_exhausted"
    assert elapsed < 20


def test_a_200_megabyte_output_fails_only_its_call(api):
    error, elapsed = run_hostile(api, 'def run(event):\n    return "x" * event["data"]["n"]\n', data_in={"n": 200000000})
    assert error["code"] == "action_resource_exhausted"
    assert elapsed < 10


def test_a_hostile_child_fails_its_caller_and_the_request_carries_on(api):
    publish(api, tool("hostile", "def run(event):\n    return len('y' * event['data']['n'])\n"))
    caller = publish(api, tool("caller", 'def run(event):\n    return tools.hostile({"n": 2000000000})\n',
                               tools=[{"name": "hostile"}]))
    good = publish(api, tool("good", ECHO))
    data = api.gql(BOTH, {"bad": caller, "good": good, "b": {"executionId": str(uuid.uuid4()), "input": {}},
                          "g": {"executionId": str(uuid.uuid4()), "input": {}}})["actions"]
    assert data["bad"]["status"] == "FAILED"
    assert data["bad"]["invocation"]["error"]["code"] == "action_resource_exhausted"
    assert data["good"]["status"] == "SUCCEEDED"


def test_a_call_cut_short_by_the_request_deadline_is_retryable_and_records_nothing(api):
    from invoke_helpers import INVOKE

    spin = publish(api, tool("spin", 'def run(event):\n    for i in range(2000000000):\n        for j in range(2000000000):\n'
                                     '            pass\n', timeout_ms=60_000))
    execution_id = str(uuid.uuid4())
    started = time.monotonic()
    body = api.post(INVOKE, {"id": spin, "input": {"executionId": execution_id, "input": {}}},
                    headers={"Request-Timeout": "1.5"}).json()
    assert time.monotonic() - started < 5
    assert body["errors"][0]["extensions"]["code"] == "retryable", body
    assert "Request-Timeout" in body["errors"][0]["extensions"]["hint"]
    read = "query($id: UUID!) { actions { execution(id: $id) { status } } }"
    assert api.gql(read, {"id": execution_id})["actions"]["execution"] is None


def test_a_document_with_ten_thousand_aliases_through_graphql_fails_only_its_call(api):
    # Built at run time (a literal would be refused when the tool is written): 10,000 aliased fields.
    src = ('def run(event):\n'
           '    fields = ["a%d: viewer { tenantId }" % i for i in range(event["data"]["n"])]\n'
           '    return graphql("{ " + " ".join(fields) + " }")\n')
    error, elapsed = run_hostile(api, src, data_in={"n": 10_000})
    assert error["code"] == "graphql_error"
    assert elapsed < 10


def test_ten_thousand_aliases_with_check_false_return_the_errors_to_the_program(api):
    src = ('def run(event):\n'
           '    fields = ["a%d: viewer { tenantId }" % i for i in range(event["data"]["n"])]\n'
           '    r = graphql("{ " + " ".join(fields) + " }", check=False)\n'
           '    return {"data": r["data"], "codes": [e["extensions"]["code"] for e in r["errors"]]}\n')
    action_id = publish(api, tool("aliases", src))
    result = invoke(api, action_id, {"n": 10_000})
    assert result["status"] == "SUCCEEDED", result["invocation"]["error"]
    assert result["invocation"]["output"]["data"] is None
    assert result["invocation"]["output"]["codes"] == ["graphql_validation_failed"]
