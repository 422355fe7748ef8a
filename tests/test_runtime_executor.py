"""The sandbox executor pool: programs run in child processes, host calls come back re-entrantly.

Pure tests (no database): a fake Host answers graphql/cel and runs nested tools on the same lease.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from ledger.runtime import CallFailure, ExecutorPool, Program, RunOutcome

SMALL_MEMORY = 256 << 20


def soon(seconds: float = 10.0) -> float:
    return time.monotonic() + seconds


def program(source: str, *tools: str, key: Any = None) -> Program:
    return Program(key=key or ("test", source, tools), source=source, tool_names=tuple(tools))


class FakeHost:
    """Records host calls; runs `tools.<name>` as a nested program on the same lease."""

    def __init__(self, lease=None, tools: dict[str, Program] | None = None, deadline: float | None = None) -> None:
        self.lease = lease
        self.tools = tools or {}
        self.deadline = deadline
        self.calls: list[tuple] = []
        self.graphql_result: Any = {"data": {"ok": True}}
        self.nested_outcomes: list[RunOutcome] = []

    def graphql(self, document, variables, operation_name, check):
        self.calls.append(("graphql", document, variables, operation_name, check))
        if isinstance(self.graphql_result, BaseException):
            raise self.graphql_result
        return self.graphql_result() if callable(self.graphql_result) else self.graphql_result

    def cel(self, expression, variables, check):
        self.calls.append(("cel", expression, variables, check))
        return True

    def call_tool(self, name, input, check):
        self.calls.append(("tool", name, input, check))
        outcome = self.lease.run(self.tools[name], {"data": input}, self, self.deadline or soon())
        self.nested_outcomes.append(outcome)
        if outcome.ok:
            return outcome.output
        if check:
            raise CallFailure(outcome.error_code, outcome.error_message, outcome.error_hint)
        return {"status": "FAILED", "error": {"code": outcome.error_code, "message": outcome.error_message}}


@pytest.fixture(scope="module")
def pool():
    with ExecutorPool(2, memory_limit_bytes=SMALL_MEMORY, grace_seconds=0.5) as pool:
        yield pool


def run(pool: ExecutorPool, source: str, event: dict | None = None, host: FakeHost | None = None, seconds: float = 10.0):
    with pool.lease(timeout=10) as lease:
        host = host or FakeHost()
        host.lease = lease
        return lease.run(program(source), event if event is not None else {"data": None}, host, soon(seconds))


def test_run_returns_output(pool):
    outcome = run(pool, "def run(event):\n    return {'answer': 42, 'items': [1, 2.5, None, True, 'x']}\n")
    assert outcome.ok, outcome
    assert outcome.output == {"answer": 42, "items": [1, 2.5, None, True, "x"]}


def test_event_data_is_readable(pool):
    outcome = run(pool, "def run(event):\n    return event['data']['n'] * 2\n", {"data": {"n": 21}})
    assert outcome.output == 42


def test_integers_beyond_64_bits_cross_exactly(pool):
    outcome = run(pool, "def run(event):\n    return event['data'] * 4\n", {"data": 1 << 70})
    assert outcome.output == 1 << 72


def test_print_is_captured_into_logs(pool):
    outcome = run(pool, "def run(event):\n    print('hello', 1, {'a': [True, None]})\n    print('second')\n    return None\n")
    assert outcome.ok
    assert outcome.logs == ['hello 1 {"a": [True, None]}', "second"]


def test_logs_are_bounded_with_a_truncation_marker(pool):
    outcome = run(pool, "def run(event):\n    for i in range(1500):\n        print('line', i)\n")
    assert outcome.ok
    assert len(outcome.logs) == 1001
    assert outcome.logs[999] == "line 999"
    assert "500 line(s) not kept" in outcome.logs[-1]


def test_fail_with_hint(pool):
    outcome = run(pool, "def run(event):\n    fail('account overdrawn', hint='top the account up first')\n")
    assert (outcome.ok, outcome.error_code) == (False, "action_failure")
    assert outcome.error_message == "account overdrawn"
    assert outcome.error_hint == "top the account up first"


def test_runtime_error_names_the_line(pool):
    outcome = run(pool, "def run(event):\n    x = 1\n    return x / 0\n")
    assert outcome.error_code == "action_failure"
    assert outcome.error_message == "float division by zero: 1 / 0 (line 3)"
    assert outcome.error_hint is None


def test_host_graphql_receives_document_variables_operation_name_and_check(pool):
    host = FakeHost()
    host.graphql_result = {"data": {"account": {"balance": 7}}}
    source = (
        "def run(event):\n"
        "    a = graphql('query Q { x }', variables={'id': 'A'}, operation_name='Q', check=False)\n"
        "    b = graphql('{ y }')\n"
        "    return a['data']['account']['balance']\n"
    )
    outcome = run(pool, source, host=host)
    assert outcome.output == 7
    assert host.calls == [
        ("graphql", "query Q { x }", {"id": "A"}, "Q", False),
        ("graphql", "{ y }", None, None, True),
    ]


def test_cel_receives_expression_and_variables(pool):
    host = FakeHost()
    outcome = run(pool, "def run(event):\n    return cel('x > 3', {'x': 5})\n", host=host)
    assert outcome.output is True
    assert host.calls == [("cel", "x > 3", {"x": 5}, True)]


def test_call_failure_from_host_fails_the_program_with_its_code(pool):
    host = FakeHost()
    host.graphql_result = CallFailure("insufficient_funds", "the account has 5, the transfer needs 7", "top it up")
    outcome = run(pool, "def run(event):\n    graphql('mutation { transfer }')\n    return 'not reached'\n", host=host)
    assert outcome.error_code == "insufficient_funds"
    assert outcome.error_message == "the account has 5, the transfer needs 7"
    assert outcome.error_hint == "top it up"


def test_nested_runs_reenter_the_same_executor_three_levels_deep(pool):
    level3 = program("def run(event):\n    print('level3')\n    return {'level': 3, 'seen': event['data']}\n")
    level2 = program("def run(event):\n    inner = tools.level3(event['data'] + 1)\n    return {'level': 2, 'inner': inner}\n", "level3")
    level1 = program(
        "def run(event):\n"
        "    inner = tools.level2(event['data'] + 1)\n"
        "    graphql('{ after }')\n"
        "    return {'level': 1, 'inner': inner}\n",
        "level2",
    )
    with pool.lease() as lease:
        host = FakeHost(lease, {"level2": level2, "level3": level3})
        outcome = lease.run(level1, {"data": 1}, host, soon())
    assert outcome.ok, outcome
    assert outcome.output == {"level": 1, "inner": {"level": 2, "inner": {"level": 3, "seen": 3}}}
    assert [call[0:2] for call in host.calls] == [("tool", "level2"), ("tool", "level3"), ("graphql", "{ after }")]
    assert host.nested_outcomes[0].logs == ["level3"]


def test_nested_failure_with_check_false_lets_the_caller_continue(pool):
    failing = program("def run(event):\n    fail('no', hint='h')\n")
    caller = program("def run(event):\n    r = tools.failing(1, check=False)\n    return r['status']\n", "failing")
    with pool.lease() as lease:
        outcome = lease.run(caller, {"data": None}, FakeHost(lease, {"failing": failing}), soon())
    assert outcome.output == "FAILED"


def test_deadline_is_a_response_timeout_and_the_executor_stays_usable(pool):
    with pool.lease() as lease:
        pid = lease.executor_pid
        started = time.monotonic()
        outcome = lease.run(program("def run(event):\n    for i in range(2000000000):\n        pass\n"), {}, FakeHost(lease), soon(0.3))
        assert time.monotonic() - started < 2.0
        assert outcome.error_code == "action_response_timeout"
        assert "responseTimeout" in outcome.error_message
        again = lease.run(program("def run(event):\n    return 'still here'\n"), {}, FakeHost(lease), soon())
        assert again.output == "still here"
        assert lease.executor_pid == pid


def test_huge_string_multiplication_fails_in_bounded_time_and_the_pool_serves_the_next_run(pool):
    started = time.monotonic()
    outcome = run(pool, "def run(event):\n    return len('y' * 2000000000)\n", seconds=2)
    assert time.monotonic() - started < 5
    assert outcome.error_code in ("action_resource_exhausted", "action_response_timeout")
    assert "memory bound of 256 MiB" in (outcome.error_hint or "")
    assert run(pool, "def run(event):\n    return 1\n").output == 1


def test_list_grown_without_bound_is_resource_exhausted(pool):
    source = "def run(event):\n    x = []\n    for i in range(2000000000):\n        x.append(i)\n"
    outcome = run(pool, source, seconds=20)
    assert outcome.error_code == "action_resource_exhausted"
    assert "memory" in outcome.error_message
    assert run(pool, "def run(event):\n    return 2\n").output == 2


def test_deep_recursion_is_bounded(pool):
    outcome = run(pool, "def down(n):\n    return down(n + 1)\n\ndef run(event):\n    return down(0)\n")
    assert outcome.error_code == "action_resource_exhausted"
    assert "call stack exceeded 200 frames" in outcome.error_message


def test_step_budget_bounds_work_before_the_deadline():
    with ExecutorPool(1, memory_limit_bytes=SMALL_MEMORY, step_budget=1000) as small:
        outcome = run(small, "def run(event):\n    for i in range(10000000):\n        pass\n")
    assert outcome.error_code == "action_resource_exhausted"
    assert "step budget of 1,000 steps" in outcome.error_message


def test_output_must_be_json(pool):
    for returned, what in (("struct(a = 1)", "struct"), ("run", "function"), ("{1: 2}", "dict key of type `int`")):
        outcome = run(pool, f"def run(event):\n    return [{{'x': {returned}}}]\n")
        assert outcome.error_code == "action_failure", returned
        assert outcome.error_message.startswith("run() must return JSON values"), outcome.error_message
        assert what in outcome.error_message


def test_output_nested_too_deep_or_cyclic_is_refused_before_encoding(pool):
    deep = "def run(event):\n    x = []\n    for i in range(5000):\n        x = [x]\n    return x\n"
    cyclic = "def run(event):\n    x = []\n    x.append(x)\n    return {'x': x}\n"
    for source in (deep, cyclic):
        outcome = run(pool, source)
        assert outcome.error_code == "action_failure"
        assert outcome.error_message == "run() must return JSON values; the output contains values nested more than 100 levels deep"


def test_host_call_arguments_must_be_json(pool):
    host = FakeHost()
    outcome = run(pool, "def run(event):\n    return graphql('{ x }', {'when': struct(day = 1)})\n", host=host)
    assert outcome.error_code == "action_failure"
    assert outcome.error_message == "the call to graphql() must pass JSON values; it contains a value of type `struct`"
    assert host.calls == []
    outcome = run(pool, "def run(event):\n    return cel('x', {'x': float('nan')})\n", host=host)
    assert outcome.error_message == "the call to cel() must pass JSON values; it contains a float that is not a finite number"
    outcome = run(pool, "def run(event):\n    return graphql(1)\n", host=host)
    assert outcome.error_message == "graphql(): the document must be string, not int"


def test_a_program_reaching_past_the_prelude_cannot_hand_the_host_malformed_calls(pool):
    host = FakeHost()
    source = "def run(event):\n    return __host_graphql('[1, 2, 3, 4]')\n"
    outcome = run(pool, source, host=host)
    assert (outcome.error_code, outcome.error_message) == ("action_failure", "the program made a malformed host call")
    assert host.calls == []
    source = "json = struct(encode = lambda value: 'not json')\n\ndef run(event):\n    return 1\n"
    assert run(pool, source).error_message == "run() must return JSON values"


def test_host_call_payload_is_bounded(pool):
    outcome = run(pool, "def run(event):\n    return graphql('x' * 17000000)\n")
    assert outcome.error_code == "action_resource_exhausted"
    assert "the call to graphql() is at least 17,000,019 bytes as JSON" in outcome.error_message
    assert "16,777,216" in outcome.error_message


def test_host_exception_propagates_and_the_executor_stays_usable(pool):
    with pool.lease() as lease:
        pid = lease.executor_pid
        host = FakeHost(lease)
        host.graphql_result = RuntimeError("database went away")
        with pytest.raises(RuntimeError, match="database went away"):
            lease.run(program("def run(event):\n    return graphql('{ x }')\n"), {}, host, soon())
        assert lease.run(program("def run(event):\n    return 3\n"), {}, FakeHost(lease), soon()).output == 3
        assert lease.executor_pid == pid


def test_run_must_be_a_one_argument_function(pool):
    assert run(pool, "def helper():\n    pass\n").error_message.startswith("the program does not define `run`")
    assert run(pool, "run = 3\n").error_message.startswith("`run` must be a function")
    assert "exactly one argument" in run(pool, "def run():\n    pass\n").error_message


def test_load_is_rejected(pool):
    source = "load('other.star', 'helper')\n\ndef run(event):\n    return 1\n"
    assert pool.compile(source, ()) == [{"line": 1, "column": 1, "message": "`load` is not allowed in this dialect"}]
    outcome = run(pool, source)
    assert outcome.error_code == "action_failure"
    assert "`load` is not allowed" in outcome.error_message


def test_compile_problems_carry_line_and_column(pool):
    assert pool.compile("def run(event):\n    return 1 +\n", ()) == [
        {"line": 2, "column": 15, "message": "Parse error: unexpected new line here"}
    ]
    assert pool.compile("def run(event):\n    return undefined_name\n", ()) == [
        {"line": 2, "column": 12, "message": "Variable `undefined_name` not found"}
    ]


def test_compile_stops_a_top_level_that_runs_too_long(pool):
    source = "def spin():\n    for i in range(2000000000):\n        pass\n\nX = spin()\n\ndef run(event):\n    return X\n"
    started = time.monotonic()
    problems = pool.compile(source, (), timeout=0.3)
    assert time.monotonic() - started < 3
    assert problems == [
        {"line": 2, "column": 5, "message": "evaluating the program's top level took too long; move work into run()"}
    ]


def test_a_native_crash_costs_only_the_executor(pool):
    # json.encode recurses natively: a value nested 5,000 deep overflows the executor's stack.
    source = "def run(event):\n    x = []\n    for i in range(5000):\n        x = [x]\n    return len(json.encode(x))\n"
    outcome = run(pool, source)
    assert outcome.error_code == "action_resource_exhausted"
    assert "SIGSEGV" in outcome.error_message
    assert run(pool, "def run(event):\n    return 'next'\n").output == "next"


def test_compile_accepts_a_good_program(pool):
    source = "LIMIT = 10\n\ndef run(event):\n    return tools.pay({'n': LIMIT})\n"
    assert pool.compile(source, ("pay",)) == []


def test_compile_rejects_host_calls_at_load_time(pool):
    problems = pool.compile("\nrows = graphql('{ x }')\n\ndef run(event):\n    return rows\n", ())
    assert problems == [
        {"line": 2, "column": 1, "message": "graphql() cannot be called while the program loads; call it inside run()"}
    ]


def test_host_call_errors_name_the_function_called(pool):
    # The host callables get the arguments' text alone: the name in an error is rebuilt from it.
    for call, name in (("cel('1')", "cel()"), ("tools.pay({'a': 1})", "tools.pay()")):
        problems = pool.compile(f"\nrows = {call}\n\ndef run(event):\n    return rows\n", ("pay",))
        assert problems == [
            {"line": 2, "column": 1, "message": f"{name} cannot be called while the program loads; call it inside run()"}
        ]
    with pool.lease(timeout=10) as lease:
        source = "def run(event):\n    return tools.pay('x' * 17000000)\n"
        outcome = lease.run(program(source, "pay"), {"data": None}, FakeHost(lease), soon())
    assert outcome.error_code == "action_resource_exhausted"
    assert "the call to tools.pay() is at least 17,000,0" in outcome.error_message


def test_two_leases_run_at_once_on_two_threads(pool):
    # Each program waits inside a host call for the other: serialised runs would never meet.
    barrier = threading.Barrier(2, timeout=5)
    results: list[Any] = []

    def one() -> None:
        host = FakeHost()
        host.graphql_result = lambda: barrier.wait() >= 0
        results.append(run(pool, "def run(event):\n    return graphql('{ meet }')\n", host=host))

    threads = [threading.Thread(target=one) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert [outcome.output for outcome in results] == [True, True]


@pytest.fixture(scope="module")
def big_pool():
    """For cases that need more than the small memory bound: the default 1 GiB."""
    with ExecutorPool(1, grace_seconds=0.3) as big_pool:
        yield big_pool


def test_a_200_mb_output_is_resource_exhausted(big_pool):
    outcome = run(big_pool, "def run(event):\n    return 'x' * 200000000\n")
    assert outcome.error_code == "action_resource_exhausted"
    assert outcome.error_message == (
        "the output is at least 200,000,002 bytes as JSON, over the limit of 16,777,216 bytes (16 MiB)"
    )


def test_a_stuck_nested_run_is_killed_and_every_frame_fails(big_pool):
    # 'ab' * 300000000 is one 3 s operation: check_cancelled never fires, so the server kills.
    stuck = program("def run(event):\n    return len('ab' * 300000000)\n")
    caller = program("def run(event):\n    tools.stuck(None, check=False)\n    return 'not reached'\n", "stuck")
    with big_pool.lease() as lease:
        pid = lease.executor_pid
        host = FakeHost(lease, {"stuck": stuck}, deadline=soon(0.3))
        started = time.monotonic()
        outcome = lease.run(caller, {}, host, soon(5))
        assert time.monotonic() - started < 3
        assert host.nested_outcomes[0].error_code == "action_response_timeout"
        assert outcome.error_code == "action_response_timeout"
        assert lease.executor_pid is None
        again = lease.run(program("def run(event):\n    return 'fresh'\n"), {}, FakeHost(lease), soon())
        assert again.output == "fresh"
        assert lease.executor_pid not in (None, pid)


# ---------------------------------------------------------------------------- fairness between tenants


@pytest.fixture
def shared_pool():
    """Three executors at most, two of them per tenant."""
    with ExecutorPool(1, memory_limit_bytes=SMALL_MEMORY, max_size=3, per_tenant=2) as shared_pool:
        yield shared_pool


def _wait_for(condition, seconds: float = 5.0) -> None:
    give_up = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < give_up
        time.sleep(0.01)


def test_the_default_share_is_half_the_maximum_and_never_above_it():
    assert ExecutorPool(0, max_size=8).per_tenant == 4
    assert ExecutorPool(0, max_size=1).per_tenant == 1
    assert ExecutorPool(0, max_size=3).per_tenant == 1
    assert ExecutorPool(0, max_size=4, per_tenant=9).per_tenant == 4
    with pytest.raises(ValueError):
        ExecutorPool(0, max_size=4, per_tenant=0)


def test_a_tenant_at_its_share_waits_while_another_tenant_gets_an_executor_at_once(shared_pool):
    from ledger.runtime import ExecutorWaitTimedOut

    first, second = shared_pool.lease(timeout=5, tenant="a"), shared_pool.lease(timeout=5, tenant="a")
    try:
        assert shared_pool.held_by("a") == 2
        # One executor is still free, but not for tenant a: a third would leave none for anyone else.
        with pytest.raises(ExecutorWaitTimedOut) as refused:
            shared_pool.lease(timeout=0.1, tenant="a")
        assert "as many as one tenant may hold" in str(refused.value)
        assert shared_pool.waiting() == 0  # the request that timed out left the queue
        started = time.monotonic()
        with shared_pool.lease(timeout=5, tenant="b") as other:
            assert time.monotonic() - started < 2
            assert other.executor_pid is not None
            assert shared_pool.held_by("b") == 1
    finally:
        first.release()
        second.release()
    assert shared_pool.held_by("a") == shared_pool.held_by("b") == 0


def test_waiters_under_their_share_are_served_first_in_arrival_order(shared_pool):
    held = {"a1": shared_pool.lease(timeout=5, tenant="a"), "a2": shared_pool.lease(timeout=5, tenant="a"),
            "b1": shared_pool.lease(timeout=5, tenant="b")}
    served: list[str] = []
    done = threading.Event()

    def wait(name: str, tenant: str) -> None:
        with shared_pool.lease(timeout=10, tenant=tenant):
            served.append(name)
            done.wait(10)

    threads = []
    for name, tenant in (("a3", "a"), ("b2", "b"), ("c1", "c")):  # in this order
        threads.append(threading.Thread(target=wait, args=(name, tenant)))
        threads[-1].start()
        _wait_for(lambda: shared_pool.waiting() == len(threads))
    try:
        # The pool is full. An executor comes free: a3 came first, but tenant a holds its share.
        held.pop("b1").release()
        _wait_for(lambda: len(served) == 1)
        assert served == ["b2"]
        # Tenant a drops under its share: its waiter came before c1's.
        held.pop("a1").release()
        _wait_for(lambda: len(served) == 2)
        assert served == ["b2", "a3"]
        held.pop("a2").release()
        _wait_for(lambda: len(served) == 3)
        assert served == ["b2", "a3", "c1"]
    finally:
        done.set()
        for lease in held.values():
            lease.release()
        for thread in threads:
            thread.join(10)
    assert shared_pool.waiting() == 0
    assert [shared_pool.held_by(tenant) for tenant in "abc"] == [0, 0, 0]


def test_work_without_a_tenant_is_not_bounded_by_a_share(shared_pool):
    leases = [shared_pool.lease(timeout=5) for _ in range(3)]
    try:
        assert all(lease.executor_pid is not None for lease in leases)
    finally:
        for lease in leases:
            lease.release()


def test_a_lost_executor_is_replaced_for_the_same_tenant(shared_pool):
    with shared_pool.lease(timeout=5, tenant="a") as lease:
        crash = program("def run(event):\n    return len('ab' * 300000000)\n")  # over the memory bound: the executor dies
        outcome = lease.run(crash, {}, FakeHost(lease), soon(0.2))
        assert outcome.error_code == "action_resource_exhausted"
        assert lease.executor_pid is None and shared_pool.held_by("a") == 0
        again = lease.run(program("def run(event):\n    return 'fresh'\n"), {}, FakeHost(lease), soon())
        assert again.output == "fresh" and shared_pool.held_by("a") == 1
    assert shared_pool.held_by("a") == 0


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth - 1):
        value = [value]
    return value


# Results a program may get from a host call: those Starlark's json.decode reads exactly (sorted keys, no
# float, shallow) and those it would not (unsorted keys, floats, integers beyond 64 bits, deep nesting).
HOST_RESULTS = [
    {"financial": {"account": {"balance": 120}}},
    {"a": 1, "b": [1, 2, {"c": None}], "d": True, "e": False},
    {"b": 1, "a": 2},
    {"z": 1, "é": 2}, {"é": 1, "z": 2},
    {"ids": ["6f1f5a2e-8a8e-4c3e-9d1e-0c7b3f6f2a10"], "n": -9223372036854775808, "u": 18446744073709551615},
    {"big": 2**70, "negative": -(2**70)}, [2**64], [9223372036854775807, -1, 0],
    {"f": 0.1, "g": 1e308, "h": 5e-324, "i": -0.0, "j": 1.0, "k": 2.2250738585072011e-308},
    [1.5], 2.5, 7, -7, True, False, None,
    "plain", "", "a\x00b", "quote \" backslash \\ newline \n tab \t \x01 \x1f é 😀 \u2028", '{"a": 1}', "[1, 2]",
    {"s": "a\x00b", "t": "\\u0000"}, [[], {}, [[]], [{}]], [], {},
    _nested(99), _nested(127), _nested(130),
]


def test_a_host_calls_result_reaches_the_program_as_the_same_value_whichever_way_it_crosses(pool):
    # "wrapped" puts each result under an unsorted key, which always takes the general path (a Python value
    # converted by starlark-pyo3): the program must see exactly the same value both ways, its types and key
    # order included (repr shows both).
    host = FakeHost()
    host.calls = []

    def answer() -> Any:
        _, document, variables, _, _ = host.calls[-1]
        result = HOST_RESULTS[variables["i"]]
        return result if document == "direct" else {"z": result, "a": 0}

    host.graphql_result = answer
    source = (
        "def run(event):\n"
        "    seen = []\n"
        "    for i in range(event['data']):\n"
        "        direct = graphql('direct', {'i': i})\n"
        "        wrapped = graphql('wrapped', {'i': i})['z']\n"
        "        seen.append([repr(direct), repr(wrapped), type(direct), type(wrapped)])\n"
        "    return seen\n"
    )
    outcome = run(pool, source, {"data": len(HOST_RESULTS)}, host=host)
    assert outcome.ok, outcome
    for result, (direct, wrapped, direct_type, wrapped_type) in zip(HOST_RESULTS, outcome.output):
        assert (direct, direct_type) == (wrapped, wrapped_type), result
    by_result = dict(zip(map(repr, HOST_RESULTS), outcome.output))
    assert by_result[repr({"b": 1, "a": 2})][0] == '{"b": 1, "a": 2}'
    assert by_result[repr({"big": 2**70, "negative": -(2**70)})][0] == (
        '{"big": 1180591620717411303424, "negative": -1180591620717411303424}'
    )
    assert by_result[repr('{"a": 1}')][2] == "string"
    assert by_result[repr(2.5)][0] == "2.5" and by_result[repr(7)][0] == "7"


def test_which_results_cross_as_json_text():
    from ledger.runtime.executor import _result_for_starlark
    from ledger.runtime.protocol import encode_payload

    # encode_payload: what the server's side sends.
    texts = {repr(result) for result in HOST_RESULTS if isinstance(_result_for_starlark(encode_payload(result)), str)}
    assert texts == {repr(result) for result in (
        {"financial": {"account": {"balance": 120}}},
        {"a": 1, "b": [1, 2, {"c": None}], "d": True, "e": False},
        {"z": 1, "é": 2},
        {"ids": ["6f1f5a2e-8a8e-4c3e-9d1e-0c7b3f6f2a10"], "n": -9223372036854775808, "u": 18446744073709551615},
        [9223372036854775807, -1, 0],
        "plain", "", "a\x00b", "quote \" backslash \\ newline \n tab \t \x01 \x1f é 😀 \u2028", '{"a": 1}', "[1, 2]",
        {"s": "a\x00b", "t": "\\u0000"}, [[], {}, [[]], [{}]], [], {},
        _nested(99),
    )}


def test_each_run_spends_its_own_step_budget_and_deadline_nested_runs_included():
    """Every evaluation's step check goes to the run evaluating: a nested run is stopped at its own step budget
    or deadline while its caller, which has spent little of either, carries on and finishes."""
    spin = program("def run(event):\n    for i in range(2000000000):\n        pass\n")
    caller = program(
        "def run(event):\n"
        "    n = 0\n"
        "    for i in range(80000):\n"  # ~80 steps of the caller's own, before and after: 160 of its 200
        "        n += 1\n"
        "    r = tools.spin(1, check=False)\n"
        "    for i in range(80000):\n"
        "        n += 1\n"
        "    return [r['status'], r['error']['code'], r['error']['message'], n]\n",
        "spin",
    )
    with ExecutorPool(1, memory_limit_bytes=SMALL_MEMORY, step_budget=200, grace_seconds=5.0) as small:
        with small.lease(timeout=10) as lease:
            budget = lease.run(caller, {"data": None}, FakeHost(lease, {"spin": spin}), soon(60))
    with ExecutorPool(1, memory_limit_bytes=SMALL_MEMORY, grace_seconds=5.0) as unbudgeted:
        with unbudgeted.lease(timeout=10) as lease:
            host = FakeHost(lease, {"spin": spin}, deadline=soon(0.5))
            started = time.monotonic()
            deadline = lease.run(caller, {"data": None}, host, soon(60))
            assert time.monotonic() - started < 5
    assert budget.ok, budget
    assert budget.output[:2] == ["FAILED", "action_resource_exhausted"] and "step budget of 200" in budget.output[2]
    assert budget.output[3] == 160000
    assert deadline.ok, deadline
    assert deadline.output[:2] == ["FAILED", "action_response_timeout"] and deadline.output[3] == 160000


def _cpu_limit(pid: int) -> int:
    with open(f"/proc/{pid}/limits") as limits:
        for line in limits:
            if line.startswith("Max cpu time"):
                return int(line.split()[3])
    raise AssertionError("no cpu time limit line")


def test_the_cpu_backstop_follows_each_top_level_runs_deadline(pool):
    """RLIMIT_CPU's soft limit is the CPU used so far plus the run's time left plus the slack, whole seconds,
    set again for each top-level run: lowered for a shorter deadline, raised for a longer one."""
    from ledger.runtime.limits import CPU_BACKSTOP_SLACK_SECONDS

    quick = program("def run(event):\n    return 1\n")
    with pool.lease() as lease:
        limits = []
        for seconds in (300, 300, 5, 5, 120):
            assert lease.run(quick, {"data": None}, FakeHost(lease), soon(seconds)).ok
            limits.append(_cpu_limit(lease.executor_pid))
    for limit, seconds in zip(limits, (300, 300, 5, 5, 120)):
        # The module's executors have used a few seconds of CPU at most.
        assert seconds + CPU_BACKSTOP_SLACK_SECONDS <= limit <= seconds + CPU_BACKSTOP_SLACK_SECONDS + 30
    assert limits[2] < limits[0] and limits[4] > limits[3]


def test_the_cpu_backstop_sets_the_limit_only_when_it_changes(monkeypatch):
    import resource

    from ledger.runtime import limits

    calls = []
    monkeypatch.setattr(limits.resource, "setrlimit", lambda which, value: calls.append((which, value)))
    usage = resource.getrusage(resource.RUSAGE_SELF)
    monkeypatch.setattr(limits.resource, "getrusage", lambda who: usage)  # no CPU second passes meanwhile
    backstop = limits.CpuBackstop()
    backstop.arm(3600)
    backstop.arm(3600)
    backstop.arm(60)
    assert [which for which, _ in calls] == [resource.RLIMIT_CPU, resource.RLIMIT_CPU]
    assert calls[0][1][0] > calls[1][1][0] and calls[1][1][1] == backstop._hard


def test_a_request_arriving_as_an_executor_comes_free_queues_behind_those_already_waiting(shared_pool):
    """An idle executor goes to the earliest servable waiter, never to a request that arrives after it, even
    one that finds the executor idle before the waiter has woken."""
    from ledger.runtime import ExecutorWaitTimedOut

    held = [shared_pool.lease(timeout=5, tenant=tenant) for tenant in ("a", "a", "b")]
    served = []
    waiter = threading.Thread(target=lambda: served.append(shared_pool.lease(timeout=10, tenant="c")))
    waiter.start()
    try:
        _wait_for(lambda: shared_pool.waiting() == 1)
        with shared_pool._condition:  # the waiter cannot take the executor before the late request asks
            held.pop().release()
            with pytest.raises(ExecutorWaitTimedOut):
                shared_pool.lease(timeout=0.2, tenant="d")
        waiter.join(10)
        assert len(served) == 1 and served[0].executor_pid is not None
    finally:
        for lease in held + served:
            lease.release()
        waiter.join(10)
    assert [shared_pool.held_by(tenant) for tenant in "abcd"] == [0, 0, 0, 0]


def test_an_idle_executor_that_died_unseen_is_replaced_when_next_leased(pool):
    import os
    import signal

    with pool.lease() as lease:
        assert lease.run(program("def run(event):\n    return 1\n"), {}, FakeHost(lease), soon()).ok
        pid = lease.executor_pid
    os.kill(pid, signal.SIGKILL)
    _wait_for(lambda: open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z")
    with pool.lease(timeout=10) as lease:
        outcome = lease.run(program("def run(event):\n    return 'alive'\n"), {}, FakeHost(lease), soon())
        assert outcome.output == "alive" and lease.executor_pid != pid


def test_a_dict_output_is_checked_as_any_output_flat_or_not(pool):
    """An output that is a dict of strings, integers, booleans and None is taken as it is; any other dict is
    checked in full, with the same refusals as a value anywhere else."""
    for returned, what in (("{'x': struct(a = 1)}", "a value of type `struct`"), ("{'x': run}", "`function`"),
                           ("{1: 2}", "a dict key of type `int`"), ("{'x': float('nan')}", "not a finite number"),
                           ("{'x': {1: 2}}", "a dict key of type `int`"), ("{'x': None, 2: 'y'}", "key of type `int`")):
        outcome = run(pool, f"def run(event):\n    return {returned}\n")
        assert outcome.error_code == "action_failure", returned
        assert outcome.error_message.startswith("run() must return JSON values") and what in outcome.error_message
    flat = {"s": "é", "n": -(1 << 70), "b": True, "z": None, "f": 2.5, "l": [1], "d": {"x": 1}}
    outcome = run(pool, "def run(event):\n    return event['data']\n", {"data": flat})
    assert outcome.ok and outcome.output == flat and list(outcome.output) == list(flat)
    assert run(pool, "def run(event):\n    return {}\n").output == {}
