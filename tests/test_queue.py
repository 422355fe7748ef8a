"""startAction: a transactional queue with workers, retries, recovery, cancel and carried authority."""

from __future__ import annotations

import time
import uuid

import pytest

from invoke_helpers import publish, tool
from registry_helpers import create

START = """mutation($id: UUID!, $input: StartActionInput!) { actions { startAction(id: $id, input: $input) {
  executionId status attempts startedBy { executionId } event { eventType data } } } }"""
READ = """query($id: UUID!) { actions { execution(id: $id) { executionId status attempts startedBy { executionId }
  invocation { attempt output error { code message hint } } invocations { attempt error { code } } } } }"""
CANCEL = """mutation($id: UUID!) { actions { cancelExecution(id: $id) { status } } }"""


@pytest.fixture
def worker(services):
    from ledger.queue.worker import Worker

    w = Worker(services, concurrency=2, lease_seconds=2.0, poll_interval=0.2).start()
    yield w
    w.stop()


def start(api, action_id: str, input=None, **extra) -> dict:
    payload = {"executionId": str(uuid.uuid4()), "input": input if input is not None else {}, **extra}
    return api.gql(START, {"id": action_id, "input": payload})["actions"]["startAction"]


def read(api, execution_id: str) -> dict:
    return api.gql(READ, {"id": execution_id})["actions"]["execution"]


def wait_for(api, execution_id: str, statuses=("SUCCEEDED", "FAILED", "CANCELLED"), timeout: float = 20.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        execution = read(api, execution_id)
        if execution and execution["status"] in statuses:
            return execution
        time.sleep(0.05)
    raise AssertionError(f"execution {execution_id} did not reach {statuses}: {read(api, execution_id)}")


ECHO = 'def run(event):\n    return {"echo": event["data"]}\n'


def test_a_start_returns_queued_at_once_with_the_started_event(api):
    action_id = publish(api, tool("echo", ECHO))
    started = start(api, action_id, {"a": 1})
    assert started["status"] == "QUEUED"
    assert started["startedBy"] == {"executionId": None}
    assert started["event"] == {"eventType": "action.started", "data": {"a": 1}}


def test_a_committed_start_runs(api, worker):
    action_id = publish(api, tool("echo", ECHO))
    done = wait_for(api, start(api, action_id, {"a": 1})["executionId"])
    assert done["status"] == "SUCCEEDED"
    assert done["invocation"]["output"] == {"echo": {"a": 1}}
    assert done["attempts"] == 1


def test_a_rolled_back_start_never_runs(api, worker):
    action_id = publish(api, tool("echo", ECHO))
    execution_id = str(uuid.uuid4())
    body = api.post(START + "", {"id": action_id, "input": {"executionId": execution_id, "input": {}}},
                    headers={"Ledger-Dry-Run": "true"}).json()
    assert body["data"]["actions"]["startAction"]["status"] == "QUEUED"
    time.sleep(0.5)
    assert read(api, execution_id) is None


def test_failures_are_retried_up_to_max_attempts_then_failed(api, worker):
    doc = tool("flaky", 'def run(event):\n    fail("always")\n')
    doc["execution"] = {"maxAttempts": 3, "backoffSeconds": 0.05}
    action_id = publish(api, doc)
    done = wait_for(api, start(api, action_id)["executionId"])
    assert done["status"] == "FAILED" and done["attempts"] == 3
    assert [i["attempt"] for i in done["invocations"]] == [1, 2, 3]


def test_backoff_is_honoured_between_attempts(api, worker):
    doc = tool("slowretry", 'def run(event):\n    fail("again")\n')
    doc["execution"] = {"maxAttempts": 2, "backoffSeconds": 1.5}
    action_id = publish(api, doc)
    execution_id = start(api, action_id)["executionId"]
    deadline = time.monotonic() + 10
    while len(read(api, execution_id)["invocations"]) < 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    first_finished = time.monotonic()
    between = read(api, execution_id)
    assert between["status"] == "QUEUED" and between["invocation"]["error"]["code"] == "action_failure"
    done = wait_for(api, execution_id)
    assert done["attempts"] == 2
    assert time.monotonic() - first_finished >= 1.2


def test_run_at_in_the_future_waits(api, worker):
    import datetime

    action_id = publish(api, tool("echo", ECHO))
    run_at = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=1.5)).isoformat()
    execution_id = start(api, action_id, runAt=run_at)["executionId"]
    time.sleep(0.7)
    assert read(api, execution_id)["status"] == "QUEUED"
    assert wait_for(api, execution_id)["status"] == "SUCCEEDED"


def test_cancel_of_a_queued_execution_means_it_never_runs(api):
    action_id = publish(api, tool("echo", ECHO))
    execution_id = start(api, action_id)["executionId"]
    assert api.gql(CANCEL, {"id": execution_id})["actions"]["cancelExecution"]["status"] == "CANCELLED"
    assert read(api, execution_id)["status"] == "CANCELLED"


def test_cancel_of_a_running_execution_rolls_its_writes_back(api, worker):
    from helpers import balance, funded_account

    opening, funded = funded_account(api, 0)
    src = ('def run(event):\n'
           '    graphql("""mutation($id: UUID!, $f: UUID!, $t: UUID!) { financial { createTransfer(id: $id,'
           ' input: {fromAccountId: $f, toAccountId: $t, amount: 5}) { id } } }""", variables={"id": event["data"]["id"],'
           ' "f": event["data"]["f"], "t": event["data"]["t"]})\n'
           '    n = 0\n    for i in range(20000000):\n        n += 1\n'
           '    return cel("n > 0", {"n": n})\n')
    action_id = publish(api, tool("slow", src, timeout_ms=60000))
    execution_id = start(api, action_id, {"id": str(uuid.uuid4()), "f": opening, "t": funded})["executionId"]
    wait_for(api, execution_id, statuses=("RUNNING",))
    api.gql(CANCEL, {"id": execution_id})
    assert wait_for(api, execution_id, timeout=60)["status"] == "CANCELLED"
    assert balance(api, funded) == 0


def test_a_start_of_a_session_tool_is_rejected(api):
    doc = tool("chat", ECHO)
    doc["tool"]["session"] = True
    action_id = publish(api, doc)
    error = api.error(START, {"id": action_id, "input": {"executionId": str(uuid.uuid4()), "input": {}}})
    assert error["extensions"]["code"] == "start_not_allowed"


def test_a_start_from_inside_an_execution_is_rejected(api):
    from invoke_helpers import invoke

    target = publish(api, tool("echo", ECHO))
    src = ('def run(event):\n    return graphql("""mutation($id: UUID!, $e: UUID!) { actions { startAction(id: $id,'
           ' input: {executionId: $e, input: {}}) { status } } }""", variables={"id": event["data"]["id"],'
           ' "e": event["data"]["e"]}, check=False)\n')
    starter = publish(api, tool("starter", src))
    result = invoke(api, starter, {"id": target, "e": str(uuid.uuid4())})
    assert result["invocation"]["output"]["errors"][0]["extensions"]["code"] == "start_not_allowed"


def test_invalid_input_fails_the_start_and_queues_nothing(api):
    action_id = publish(api, tool("typed", ECHO, schema={"type": "object", "required": ["n"]}))
    execution_id = str(uuid.uuid4())
    error = api.error(START, {"id": action_id, "input": {"executionId": execution_id, "input": {}}})
    assert error["extensions"]["code"] == "action_input_invalid"
    assert read(api, execution_id) is None


def test_an_unpublished_action_cannot_be_started(api):
    action = create(api, tool("draft", ECHO))
    error = api.error(START, {"id": action["actionId"], "input": {"executionId": str(uuid.uuid4()), "input": {}}})
    assert error["extensions"]["code"] == "action_not_callable"


def test_an_expired_credential_is_refused_at_the_attempt(api, services, worker):
    action_id = publish(api, tool("echo", ECHO))
    token, _ = services.tokens.mint(api.tenant_id, api.client_id, ttl_seconds=2)
    execution_id = start(api.as_client(token), action_id, runAt=_in(3))["executionId"]
    done = wait_for(api, execution_id)
    assert done["status"] == "FAILED"
    assert done["invocation"]["error"]["code"] == "action_access_denied"
    assert "expired" in done["invocation"]["error"]["hint"]


def test_a_disabled_client_stops_its_queued_work(api, worker):
    from test_registry import _limited_token

    action_id = publish(api, tool("echo", ECHO))
    token = _limited_token(api, [{"effect": "ALLOW", "actions": ["SELECT", "INSERT", "INVOKE", "UPDATE"],
                                  "resources": ["financial.*"]}])
    limited = api.as_client(token)
    client_id = limited.gql("{ viewer { clientId } }")["viewer"]["clientId"]
    execution_id = start(limited, action_id, runAt=_in(1.5))["executionId"]
    api.gql("mutation($id: UUID!) { clients { disableClient(id: $id) { enabled } } }", {"id": client_id})
    done = wait_for(api, execution_id)
    assert done["invocation"]["error"]["code"] == "action_access_denied"


def test_a_disable_waits_for_started_executions_to_drain(api, worker):
    action_id = publish(api, tool("echo", ECHO))
    execution_id = start(api, action_id, runAt=_in(1.0))["executionId"]
    pending = api.gql("mutation($id: UUID!) { actions { disableAction(id: $id) { status pending } } }",
                      {"id": action_id})["actions"]["disableAction"]
    assert pending == {"status": "ACTIVE", "pending": "DISABLE"}
    wait_for(api, execution_id)
    time.sleep(0.2)
    final = api.gql("query($id: UUID!) { actions { action(id: $id) { status pending } } }", {"id": action_id})
    assert final["actions"]["action"] == {"status": "DISABLED", "pending": None}


def test_two_workers_never_run_one_execution_at_once(api, services):
    from ledger.queue.worker import Worker

    action_id = publish(api, tool("echo", ECHO))
    ids = [start(api, action_id, {"i": i})["executionId"] for i in range(20)]
    workers = [Worker(services, concurrency=3, lease_seconds=5, poll_interval=0.1).start() for _ in range(2)]
    try:
        for execution_id in ids:
            done = wait_for(api, execution_id)
            assert done["status"] == "SUCCEEDED" and done["attempts"] == 1
            assert len(done["invocations"]) == 1
    finally:
        for w in workers:
            w.stop()


def _in(seconds: float) -> str:
    import datetime

    return (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=seconds)).isoformat()
