"""ledger.client: against a real `ledger serve` (one for the module), and its retry loop with a fake transport."""

from __future__ import annotations

import json
import shutil
import time
import uuid

import pytest

from live_helpers import (EXAMPLES, GET_ACCOUNT_ACTIVITY, SETTLE_INVOICE, TRANSFER, balances, graphql_url,
                          new_tenant_token, open_accounts)
from test_cli_serve import Server, workdir  # noqa: F401 - the module-scoped work dir fixture

from ledger.client import Execution, LedgerClient, LedgerRequestError, WaitTimeout, urllib_transport
from ledger.client.publish import DefinitionError, PublishRejected

ECHO = """mutation($id: UUID!, $src: String!) { actions {
  createAction(id: $id, input: {name: "echo", kind: "tool", config: {runtime: "starlark", src: $src},
    tool: {name: "echo", description: "echoes", inputSchema: {type: "object"}}}) { version }
  publishAction(id: $id) { status } } }"""
ECHO_SRC = """def run(event):
    if event["data"].get("fail"):
        fail("asked to fail", hint="send fail = false")
    print("echoing")
    return {"echo": event["data"]}
"""


@pytest.fixture(scope="module")
def server(workdir):  # noqa: F811
    served = Server(workdir / "data")
    yield served
    served.stop()


@pytest.fixture(scope="module")
def client(server):
    return LedgerClient(graphql_url(server), new_tenant_token(server))


@pytest.fixture(scope="module")
def echo(client):
    action_id = str(uuid.uuid4())
    client.query(ECHO, {"id": action_id, "src": ECHO_SRC})
    return action_id


@pytest.fixture(scope="module")
def examples(client):
    return client.publish([EXAMPLES])


# ---------------------------------------------------------------------------- against a server


def test_query_returns_data_and_reads_the_environment(server, client, monkeypatch):
    monkeypatch.setenv("LEDGER_URL", graphql_url(server))
    monkeypatch.setenv("LEDGER_TOKEN", client.token)
    viewer = LedgerClient().query("{ viewer { clientName } }")["viewer"]
    assert viewer == {"clientName": "admin"}


def test_an_error_answer_raises_with_code_hint_and_problems(client):
    with pytest.raises(LedgerRequestError) as caught:
        client.query("""mutation { actions { createAction(id: "8f4c2a46-31a4-4f6b-8c42-1b1b6c0d9e01", input: {
            name: "Bad Name", kind: "tool", config: {runtime: "starlark", src: "def run(event):\\n  return 1\\n"},
            tool: {name: "bad", description: "x", inputSchema: {type: "object"}}}) { version } } }""")
    error = caught.value
    assert error.code == "action_definition_invalid" and error.hint
    assert [p["path"] for p in error.problems] == ["name"]
    assert error.path == ["actions", "createAction"] and not error.retryable
    assert "name:" in str(error)


def test_a_bad_token_is_unauthenticated(server):
    with pytest.raises(LedgerRequestError) as caught:
        LedgerClient(graphql_url(server), "forged").query("{ viewer { tenantId } }")
    assert caught.value.code == "unauthenticated" and caught.value.status == 401


def test_invoke_returns_a_typed_execution(client, echo):
    execution = client.invoke(echo, {"n": 1})
    assert isinstance(execution, Execution)
    assert execution.succeeded and execution.final
    assert execution.output == {"echo": {"n": 1}} and execution.input == {"n": 1}
    assert execution.action_id == echo and execution.action_version == 1
    assert execution.logs == ("echoing",)
    assert execution.check() is execution


def test_a_failed_call_is_returned_and_check_raises_its_error(client, echo):
    execution = client.invoke(echo, {"fail": True})
    assert execution.failed
    assert (execution.error.code, execution.error.message, execution.error.hint) == \
        ("action_failure", "asked to fail", "send fail = false")
    with pytest.raises(LedgerRequestError) as caught:
        execution.check()
    assert caught.value.code == "action_failure" and caught.value.hint == "send fail = false"


def test_invoke_with_an_execution_id_runs_once(client, echo):
    execution_id = str(uuid.uuid4())
    first = client.invoke(echo, {"n": 2}, execution_id=execution_id)
    again = client.invoke(echo, {"n": 2}, execution_id=execution_id)
    assert first.execution_id == again.execution_id == execution_id
    assert again.raw["invocation"]["startedAt"] == first.raw["invocation"]["startedAt"]
    with pytest.raises(LedgerRequestError) as caught:
        client.invoke(echo, {"n": 3}, execution_id=execution_id)
    assert caught.value.code == "execution_id_conflict"


def test_invoke_of_a_version(client, echo):
    assert client.invoke(echo, {}, version=1).action_version == 1
    with pytest.raises(LedgerRequestError) as caught:
        client.invoke(echo, {}, version=9)
    assert caught.value.code == "action_not_callable"


def test_start_then_wait(client, echo):
    started = client.start(echo, {"later": True})
    assert started.status == "QUEUED"
    done = client.wait(started.execution_id, timeout=30)
    assert done.succeeded and done.output == {"echo": {"later": True}}


def test_wait_gives_up_after_its_timeout(client, echo):
    started = client.start(echo, {}, run_at="2999-01-01T00:00:00Z")
    began = time.monotonic()
    with pytest.raises(WaitTimeout) as caught:
        client.wait(started.execution_id, timeout=0.3)
    assert time.monotonic() - began < 5
    assert caught.value.code == "timeout" and "QUEUED" in caught.value.message
    client.query("mutation($id: UUID!) { actions { cancelExecution(id: $id) { status } } }",
                 {"id": started.execution_id})


def test_wait_for_an_unknown_execution_is_not_found(client):
    with pytest.raises(LedgerRequestError) as caught:
        client.wait(str(uuid.uuid4()), timeout=1)
    assert caught.value.code == "not_found"


def test_publish_from_python_then_settle_an_invoice(client, examples):
    assert [change.name for change in examples.changes][-1] == "settle_invoice"
    assert all(change.created and change.published for change in examples.changes)
    again = client.publish([EXAMPLES])
    assert [change.describe() for change in again.changes] == [
        f"{change.name}: unchanged (v1)" for change in examples.changes]
    payer, payee = open_accounts(client, 500)
    settled = client.invoke(SETTLE_INVOICE, {"invoice_id": str(uuid.uuid4()), "payer_account": payer,
                                             "payee_account": payee, "amount": 500})
    assert settled.check().output["payer_balance"] == 0
    assert balances(client, payer, payee) == (0, 500)
    assert {child.action_id for child in settled.children} >= {GET_ACCOUNT_ACTIVITY, TRANSFER}


def test_publish_from_python_raises_located_problems(client, tmp_path):
    broken = shutil.copytree(EXAMPLES, tmp_path / "examples")
    (broken / "transfer.star").write_text("def run(event):\n    return undefined_name\n")
    with pytest.raises(PublishRejected) as caught:
        client.publish([broken], dry_run=True)
    assert [item.file for item in caught.value.located] == [str(broken / "transfer.star")]
    assert caught.value.located[0].line == 2
    with pytest.raises(DefinitionError):
        client.publish([tmp_path / "nothing-here"])


def test_a_retryable_answer_is_retried_a_bounded_number_of_times(server, client):
    # A deadline that has passed before the transaction starts: the server answers `retryable`.
    sent: list[dict] = []
    waits: list[float] = []

    def counting(method, url, body, headers, timeout):
        sent.append(headers)
        return urllib_transport(method, url, body, headers, timeout)

    hurried = LedgerClient(graphql_url(server), client.token, request_timeout=0.000001, retries=3,
                           backoff=0.1, max_backoff=0.25, transport=counting, sleep=waits.append)
    with pytest.raises(LedgerRequestError) as caught:
        hurried.query("{ viewer { tenantId } }")
    assert caught.value.code == "retryable" and caught.value.retryable
    assert len(sent) == 4 and all(h["Request-Timeout"] == "1e-06" for h in sent)
    assert len(waits) == 3 and all(w <= 0.25 for w in waits)


# ---------------------------------------------------------------------------- the retry loop, with a fake transport


class FakeTransport:
    """Answers from a script: a dict is a JSON body (HTTP 200), an exception is raised."""

    def __init__(self, *answers) -> None:
        self.answers = list(answers)
        self.bodies: list[dict] = []

    def __call__(self, method, url, body, headers, timeout):
        self.bodies.append(json.loads(body))
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        status, payload = answer if isinstance(answer, tuple) else (200, answer)
        return status, payload if isinstance(payload, bytes) else json.dumps(payload).encode()


RETRYABLE = {"data": None, "errors": [{"message": "write conflict", "extensions": {
    "code": "retryable", "retryable": True, "hint": "retry"}}]}
EXECUTION = {"executionId": "e", "actionId": "a", "actionVersion": 1, "status": "SUCCEEDED", "attempts": 1,
             "invocation": {"input": {}, "output": 7, "error": None, "logs": []}, "children": []}


def fake_client(transport, **kw) -> tuple[LedgerClient, list[float]]:
    waits: list[float] = []
    return LedgerClient("http://ledger.invalid/graphql", "t", transport=transport, sleep=waits.append, **kw), waits


def test_retryable_then_success_returns_the_data_after_backing_off():
    transport = FakeTransport(RETRYABLE, RETRYABLE, {"data": {"ok": 1}})
    client, waits = fake_client(transport, backoff=1.0, max_backoff=100)
    assert client.query("{ ok }") == {"ok": 1}
    assert len(transport.bodies) == 3
    assert 0.5 <= waits[0] <= 1.0 and 1.0 <= waits[1] <= 2.0  # exponential, with jitter


def test_backoff_is_capped_and_retries_are_bounded():
    transport = FakeTransport(*[RETRYABLE] * 7)
    client, waits = fake_client(transport, retries=6, backoff=1.0, max_backoff=3.0)
    with pytest.raises(LedgerRequestError) as caught:
        client.query("{ ok }")
    assert caught.value.code == "retryable"
    assert len(transport.bodies) == 7 and len(waits) == 6 and max(waits) <= 3.0


def test_other_errors_are_not_retried():
    transport = FakeTransport({"data": None, "errors": [{"message": "no", "extensions": {"code": "permission_denied"}}]})
    client, waits = fake_client(transport)
    with pytest.raises(LedgerRequestError) as caught:
        client.query("{ ok }")
    assert caught.value.code == "permission_denied" and waits == []


def test_a_refused_connection_is_retried_but_a_lost_one_only_when_idempotent():
    refused = FakeTransport(ConnectionRefusedError(111, "refused"), {"data": {"ok": 1}})
    assert fake_client(refused)[0].query("{ ok }") == {"ok": 1}
    lost = FakeTransport(ConnectionResetError(104, "reset"), {"data": {"ok": 1}})
    with pytest.raises(LedgerRequestError) as caught:
        fake_client(lost)[0].query("mutation { ok }")
    assert caught.value.code == "transport_error"


def test_invoke_is_resent_with_the_same_execution_id_after_a_lost_connection():
    transport = FakeTransport(TimeoutError("timed out"), {"data": {"actions": {"invokeAction": EXECUTION}}})
    client, _ = fake_client(transport)
    assert client.invoke("a", {"x": 1}).output == 7
    first, second = (body["variables"]["input"] for body in transport.bodies)
    assert first == second and first["executionId"]


def test_a_non_graphql_answer_is_an_http_error():
    transport = FakeTransport((502, b"<html>bad gateway</html>"))
    client, _ = fake_client(transport)
    with pytest.raises(LedgerRequestError) as caught:
        client.query("{ ok }")
    assert caught.value.code == "http_error" and caught.value.status == 502


def test_no_token_is_an_error_before_sending():
    transport = FakeTransport()
    with pytest.raises(LedgerRequestError) as caught:
        LedgerClient("http://ledger.invalid/graphql", "", transport=transport).query("{ ok }")
    assert caught.value.code == "unauthenticated" and transport.bodies == []
