"""Tenants share the sandbox executors fairly (DESIGN 17): one tenant's slow calls cannot hold every
executor, and a call never waits for an executor past its own deadline."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from invoke_helpers import INVOKE, invoke, publish, tool
from ledger.config import Settings

# Spins until its responseTimeout stops it (then fails with action_response_timeout).
SPIN = 'def run(event):\n    for i in range(2000000000):\n        for j in range(2000000000):\n            pass\n'
ECHO = 'def run(event):\n    return "here"\n'
SPIN_MS = 4000


@pytest.fixture
def settings(db_url, tmp_path) -> Settings:
    # Two executors at most: by default one tenant holds at most one of them.
    return Settings(database_url=db_url, data_dir=tmp_path / "data", pool_min=1, pool_max=10,
                    executors=1, executors_max=2)


@pytest.fixture
def background(http):
    """Start calls on threads: `background(api, action_id, count)` -> their answers, as they come.

    Every thread is joined before the app and the database go away, even when the test failed."""
    threads: list[threading.Thread] = []

    def start(api, action_id: str, count: int) -> list[dict]:
        results: list[dict] = []

        def call() -> None:
            results.append(api.post(INVOKE, {"id": action_id, "input": {"executionId": str(uuid.uuid4()),
                                                                         "input": {}}}).json())

        for _ in range(count):
            threads.append(threading.Thread(target=call))
            threads[-1].start()
        return results

    start.join = lambda: [thread.join(timeout=60) for thread in threads]
    yield start
    start.join()


def _wait_until(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the calls did not reach the executors in time"
        time.sleep(0.02)


def test_one_tenants_slow_calls_leave_an_executor_for_another_tenants_call(api, other_api, services, background):
    spin = publish(other_api, tool("spin", SPIN, timeout_ms=SPIN_MS))
    echo = publish(api, tool("echo", ECHO))
    pool = services.executor_pool()
    # Tenant B's three slow calls: more than the pool holds.
    results = background(other_api, spin, 3)
    _wait_until(lambda: pool.waiting() >= 1)

    started = time.monotonic()
    answered = invoke(api, echo)
    elapsed = time.monotonic() - started
    assert answered["status"] == "SUCCEEDED" and answered["invocation"]["output"] == "here"
    # Not after one of B's calls ended (SPIN_MS): at once.
    assert elapsed < 1.5, f"tenant A waited {elapsed:.1f} s for an executor"
    assert pool.held_by(other_api.tenant_id) <= 1

    background.join()
    # B's calls beyond its share waited until their own responseTimeout, and then failed as calls do.
    assert len(results) == 3
    for body in results:
        call = body["data"]["actions"]["invokeAction"]
        assert call["status"] == "FAILED"
        assert call["invocation"]["error"]["code"] == "action_response_timeout"


def test_a_call_whose_response_timeout_passes_while_waiting_for_an_executor_fails_and_is_recorded(api, services, background):
    spin = publish(api, tool("spin", SPIN, timeout_ms=SPIN_MS))
    quick = publish(api, tool("quick", ECHO, timeout_ms=1000))
    pool = services.executor_pool()
    background(api, spin, 1)
    _wait_until(lambda: pool.held_by(api.tenant_id) == 1)

    started = time.monotonic()
    answered = invoke(api, quick)
    elapsed = time.monotonic() - started
    assert answered["status"] == "FAILED"
    error = answered["invocation"]["error"]
    assert error["code"] == "action_response_timeout"
    assert "executor" in error["message"] and error["hint"]
    # At its own deadline (1 s), not when the executor came free.
    assert elapsed < 2.5, elapsed
    stored = api.gql('query($id: UUID!) { actions { execution(id: $id) { status invocation { error { code } } } } }',
                     {"id": answered["executionId"]})["actions"]["execution"]
    assert stored == {"status": "FAILED", "invocation": {"error": {"code": "action_response_timeout"}}}
    # Its waiting left nothing behind in the pool.
    assert pool.waiting() == 0


def test_a_request_whose_own_deadline_passes_while_waiting_for_an_executor_is_retryable(api, services, background):
    spin = publish(api, tool("spin", SPIN, timeout_ms=SPIN_MS))
    patient = publish(api, tool("patient", ECHO))  # the default responseTimeout (30 s) outlasts the request
    pool = services.executor_pool()
    background(api, spin, 1)
    _wait_until(lambda: pool.held_by(api.tenant_id) == 1)

    execution_id = str(uuid.uuid4())
    started = time.monotonic()
    body = api.post(INVOKE, {"id": patient, "input": {"executionId": execution_id, "input": {}}},
                    headers={"Request-Timeout": "1"}).json()
    elapsed = time.monotonic() - started
    assert body["errors"][0]["extensions"]["code"] == "retryable", body
    assert elapsed < 2.5, elapsed
    assert pool.waiting() == 0
    background.join()
    # Nothing was recorded: the retry runs it.
    assert invoke(api, patient, execution_id=execution_id)["status"] == "SUCCEEDED"


def test_the_executors_per_tenant_setting_reaches_the_pool(db_url, tmp_path, monkeypatch):
    from ledger.wiring import open_services

    monkeypatch.setenv("LEDGER_EXECUTORS_MAX", "6")
    monkeypatch.setenv("LEDGER_EXECUTORS_PER_TENANT", "5")
    settings = Settings(database_url=db_url, data_dir=tmp_path / "data", pool_min=1, pool_max=2, executors=1)
    services = open_services(settings, db_url)
    try:
        pool = services.executor_pool()
        assert (pool.max_size, pool.per_tenant) == (6, 5)
    finally:
        services.close()
