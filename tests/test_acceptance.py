"""Client-level acceptance: `ledger serve` on its embedded default, driven over real HTTP through the
contract's names and error codes — the registry, invokeAction, startAction and sessions."""

from __future__ import annotations

import time
import uuid

import httpx
import pytest

from test_cli_serve import Server, workdir  # noqa: F401 - the module-scoped work dir fixture

TOOL_FIELDS = "actionId version latestVersion status pending name"


@pytest.fixture(scope="module")
def server(workdir):  # noqa: F811
    srv = Server(workdir / "data")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(server):
    token = (server.data_dir / "admin-token").read_text().strip()
    return Client(server.url, token)


class Client:
    def __init__(self, url: str, token: str) -> None:
        self.url, self.token = url, token

    def post(self, query: str, variables: dict | None = None) -> dict:
        response = httpx.post(f"{self.url}/graphql", json={"query": query, "variables": variables or {}},
                              headers={"Authorization": f"Bearer {self.token}"}, timeout=60)
        assert response.status_code in (200, 400, 401), response.text
        return response.json()

    def data(self, query: str, variables: dict | None = None) -> dict:
        body = self.post(query, variables)
        assert "errors" not in body, body
        return body["data"]

    def code(self, query: str, variables: dict | None = None) -> str:
        body = self.post(query, variables)
        assert body.get("errors"), body
        return body["errors"][0]["extensions"]["code"]


def definition(name: str, src: str, **extra) -> dict:
    doc = {"name": name, "kind": "tool", "description": f"{name} (acceptance)",
           "config": {"runtime": "starlark", "src": src},
           "tool": {"name": name, "description": f"{name} tool", "inputSchema": {"type": "object"}},
           "policies": [{"effect": "ALLOW", "actions": ["SELECT", "INSERT", "UPDATE", "INVOKE"],
                         "resources": ["financial.*"]}]}
    doc.update(extra)
    return doc


CREATE = f"""mutation($id: UUID!, $input: ActionInput!) {{ actions {{ createAction(id: $id, input: $input) {{ {TOOL_FIELDS} }} }} }}"""
UPDATE = f"""mutation($id: UUID!, $input: ActionInput!) {{ actions {{ updateAction(id: $id, input: $input) {{ {TOOL_FIELDS} }} }} }}"""
PUBLISH = f"""mutation($id: UUID!) {{ actions {{ publishAction(id: $id) {{ {TOOL_FIELDS} }} }} }}"""
INVOKE = """mutation($id: UUID!, $input: InvokeActionInput!) { actions { invokeAction(id: $id, input: $input) {
  executionId status sessionId event { eventType data } invocation { output error { code message hint } tools { name actionVersion } }
  children { status callSequence } } } }"""
START = """mutation($id: UUID!, $input: StartActionInput!) { actions { startAction(id: $id, input: $input) {
  executionId status startedBy { executionId } } } }"""
EXECUTION = """query($id: UUID!) { actions { execution(id: $id) { status attempts invocation { output error { code } } } } }"""


def publish(client: Client, doc: dict) -> str:
    action_id = str(uuid.uuid4())
    client.data(CREATE, {"id": action_id, "input": doc})
    client.data(PUBLISH, {"id": action_id})
    return action_id


def test_registry_versions_lifecycle_and_validation(client):
    action_id = str(uuid.uuid4())
    created = client.data(CREATE, {"id": action_id, "input": definition("acc_echo", 'def run(event):\n    return event["data"]\n')})
    assert created["actions"]["createAction"]["status"] == "UNPUBLISHED"
    same = client.data(UPDATE, {"id": action_id, "input": definition("acc_echo", 'def run(event):\n    return event["data"]\n')})
    assert same["actions"]["updateAction"]["version"] == 1
    changed = client.data(UPDATE, {"id": action_id, "input": definition("acc_echo", 'def run(event):\n    return 2\n')})
    assert changed["actions"]["updateAction"]["version"] == 2
    assert client.data(PUBLISH, {"id": action_id})["actions"]["publishAction"]["status"] == "ACTIVE"
    old = client.data("query($id: UUID!) { actions { action(id: $id, version: 1) { version latestVersion } } }", {"id": action_id})
    assert old["actions"]["action"] == {"version": 1, "latestVersion": 2}
    natives = client.data("{ actions { actions(where: {native: true}) { name } } }")["actions"]["actions"]
    assert {n["name"] for n in natives} == {"graphql", "cel", "program", "invoke", "get_task", "cancel_task",
                                              "model_call"}
    bad = client.post(CREATE, {"id": str(uuid.uuid4()), "input": definition("Bad Name", "def run(:\n")})
    error = bad["errors"][0]
    assert error["extensions"]["code"] == "action_definition_invalid"
    assert {p["path"] for p in error["extensions"]["problems"]} >= {"name", "config.src"}


def test_invoke_moves_money_and_failed_calls_are_recorded(client):
    accounts = client.data("""mutation($o: UUID!, $a: UUID!, $t: UUID!) { financial {
        o: createAccount(id: $o, input: {name: "opening", currency: "EUR", allowOverdraft: true}) { id }
        a: createAccount(id: $a, input: {name: "alice", currency: "EUR"}) { id }
        fund: createTransfer(id: $t, input: {fromAccountId: $o, toAccountId: $a, amount: 100}) { amount } } }""",
                           {"o": str(uuid.uuid4()), "a": str(uuid.uuid4()), "t": str(uuid.uuid4())})["financial"]
    src = ('MOVE = """mutation($id: UUID!, $f: UUID!, $t: UUID!, $n: Int64!) { financial { createTransfer(id: $id,'
           ' input: {fromAccountId: $f, toAccountId: $t, amount: $n}) { executionId } } }"""\n\n'
           'def run(event):\n    d = event["data"]\n'
           '    return graphql(MOVE, variables={"id": d["id"], "f": d["f"], "t": d["t"], "n": d["n"]})["financial"]["createTransfer"]\n')
    mover = publish(client, definition("acc_mover", src))
    ok = client.data(INVOKE, {"id": mover, "input": {"executionId": str(uuid.uuid4()), "input": {
        "id": str(uuid.uuid4()), "f": accounts["a"]["id"], "t": accounts["o"]["id"], "n": 30}}})["actions"]["invokeAction"]
    assert ok["status"] == "SUCCEEDED" and ok["invocation"]["output"]["executionId"] == ok["executionId"]
    assert ok["event"]["eventType"] == "action.invoked"
    short = client.data(INVOKE, {"id": mover, "input": {"executionId": str(uuid.uuid4()), "input": {
        "id": str(uuid.uuid4()), "f": accounts["a"]["id"], "t": accounts["o"]["id"], "n": 1000}}})["actions"]["invokeAction"]
    assert short["status"] == "FAILED" and short["invocation"]["error"]["code"] == "insufficient_funds"
    balance = client.data("query($id: UUID!) { financial { account(id: $id) { balance } } }", {"id": accounts["a"]["id"]})
    assert balance["financial"]["account"]["balance"] == 70
    unpublished = str(uuid.uuid4())
    client.data(CREATE, {"id": unpublished, "input": definition("acc_draft", "def run(event):\n    return 1\n")})
    assert client.code(INVOKE, {"id": unpublished, "input": {"executionId": str(uuid.uuid4())}}) == "action_not_callable"


def test_start_runs_on_the_in_process_worker(client):
    echo = publish(client, definition("acc_started", 'def run(event):\n    return {"seen": event["data"]}\n'))
    started = client.data(START, {"id": echo, "input": {"executionId": str(uuid.uuid4()), "input": {"k": 1}}})
    execution = started["actions"]["startAction"]
    assert execution["status"] == "QUEUED" and execution["startedBy"] == {"executionId": None}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        read = client.data(EXECUTION, {"id": execution["executionId"]})["actions"]["execution"]
        if read["status"] == "SUCCEEDED":
            break
        time.sleep(0.1)
    assert read["status"] == "SUCCEEDED" and read["invocation"]["output"] == {"seen": {"k": 1}}


def test_sessions_and_fixed_input(client):
    publish(client, definition("acc_greet", 'def run(event):\n    return event["data"]\n'))
    chat = definition("acc_chat", 'def run(event):\n    return tools.acc_greet({"said": event["data"]["text"]})\n',
                      tools=[{"name": "acc_greet", "input": {"opening": {"$cel": "session.input.text"}}}])
    chat["tool"]["session"] = True
    chat_id = publish(client, chat)
    first = client.data(INVOKE, {"id": chat_id, "input": {"executionId": str(uuid.uuid4()), "input": {"text": "hi"}}})
    second = client.data(INVOKE, {"id": chat_id, "input": {"executionId": str(uuid.uuid4()), "input": {"text": "bye"}}})
    first, second = first["actions"]["invokeAction"], second["actions"]["invokeAction"]
    assert first["sessionId"] == second["sessionId"]
    assert second["invocation"]["output"] == {"said": "bye", "opening": "hi"}
    session = client.data("query($id: UUID!) { actions { session(id: $id) { input inputs { input } } } }",
                          {"id": first["sessionId"]})["actions"]["session"]
    assert session["input"] == {"text": "hi"} and [i["input"]["text"] for i in session["inputs"]] == ["hi", "bye"]
    assert client.code(START, {"id": chat_id, "input": {"executionId": str(uuid.uuid4())}}) == "start_not_allowed"
