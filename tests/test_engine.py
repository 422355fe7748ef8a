"""The call engine on its own: no HTTP and no GraphQL schema, a fake runner behind `graphql()`.

The engine reaches GraphQL only through the services' `GraphQLRunner` port, so a runner that answers what
a test says (and writes through the domain services, under the scope it is given) shows what the engine
itself does: admission, savepoints, `check=False` shapes, fixed input and limits. The database and the
sandbox are real.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from typing import Any, Callable

import pytest

from ledger.actions import registry
from ledger.auth.clients import create_tenant
from ledger.domain import accounts
from ledger.errors import LedgerError
from ledger.executions import records
from ledger.executions.invoke import invoke_action
from ledger.policy.chain import Chain, Layer
from ledger.policy.principal import Principal
from ledger.policy.statements import OPERATIONS, Statement
from ledger.scope import Scope

EVERYTHING = [{"effect": "ALLOW", "actions": list(OPERATIONS), "resources": ["financial.*"]}]


class FakeRunner:
    """Answers every `graphql()` with `answer(scope, document, variables)`, and remembers what it saw."""

    def __init__(self, answer: Callable[[Scope, str, dict | None], tuple[Any, list[dict] | None]]) -> None:
        self.answer = answer
        self.seen: list[dict] = []

    def __call__(self, scope: Scope, document: str, variables: dict | None, operation_name: str | None):
        self.seen.append({"document": document, "frames": [f.name for f in scope.frames],
                          "layers": [layer.name for layer in scope.chain.layers]})
        return self.answer(scope, document, variables)


def _data(value: Any) -> Callable:
    return lambda scope, document, variables: (value, None)


@dataclasses.dataclass
class Engine:
    services: Any
    tenant_id: uuid.UUID
    client_id: uuid.UUID

    def scope(self, conn) -> Scope:
        principal = Principal(self.tenant_id, self.client_id, "admin", {})
        chain = Chain((Layer(f'client "admin" ({self.client_id})',
                             (Statement("ALLOW", tuple(OPERATIONS), ("financial.*",)),)),))
        return Scope(conn=conn, principal=principal, chain=chain, services=self.services,
                     deadline=time.monotonic() + 30)

    def in_transaction(self, work: Callable[[Scope], Any]) -> Any:
        with self.services.db.transaction(self.tenant_id, deadline=time.monotonic() + 30) as conn:
            return work(self.scope(conn))

    def tool(self, name: str, src: str, *, tools: list[dict] | None = None, properties: dict | None = None) -> uuid.UUID:
        action_id = uuid.uuid4()
        doc = {"name": name, "kind": "tool", "config": {"runtime": "starlark", "src": src}, "policies": EVERYTHING,
               "tool": {"name": name, "description": name,
                        "inputSchema": {"type": "object", "properties": properties or {}}}}
        if tools:
            doc["tools"] = tools

        def write(scope: Scope) -> None:
            registry.create_action(scope, action_id, doc)
            registry.publish_action(scope, action_id)

        self.in_transaction(write)
        return action_id

    def invoke(self, action_id: uuid.UUID, input: Any = None, execution_id: uuid.UUID | None = None) -> dict:
        execution_id = execution_id or uuid.uuid4()
        return self.in_transaction(lambda scope: invoke_action(scope, action_id, execution_id, None,
                                                               input if input is not None else {}, None))

    def children(self, execution_id: uuid.UUID) -> list[dict]:
        return self.in_transaction(lambda scope: records.children_of(scope, execution_id, 1))


@pytest.fixture
def engine_for(services, db_url):
    tenant_id, admin_id = create_tenant(db_url, "engine")
    made: list = []

    def make(answer: Callable = _data({})) -> tuple[Engine, FakeRunner]:
        runner = FakeRunner(answer)
        # The services as wiring builds them, but for the GraphQL runner and without program analysis
        # (which needs the schema): the engine must not need either.
        own = dataclasses.replace(services, graphql=runner, analyze_program=None)
        made.append(own)
        return Engine(own, tenant_id, admin_id), runner

    yield make
    for own in made:
        pool = own.started_executor_pool()
        if pool is not None:
            pool.close()


def test_graphql_goes_to_the_runner_under_the_tools_scope(engine_for):
    engine, runner = engine_for(_data({"financial": {"account": None}}))
    reader = engine.tool("reader", 'def run(event):\n    return graphql("{ financial { accounts { id } } }")\n')
    result = engine.invoke(reader)
    assert result["status"] == "SUCCEEDED"
    assert result["invocations"][0]["output"] == {"financial": {"account": None}}
    assert runner.seen[0]["frames"] == ["reader"]
    assert runner.seen[0]["layers"][1:] == ['tool "reader" v1', 'native tool "graphql" v1']


def test_a_runner_error_with_check_true_fails_the_call_with_its_kept_code(engine_for):
    denial = {"message": "SELECT on financial.Account.document is not allowed",
              "extensions": {"code": "permission_denied", "hint": "the client layer denied it"}}
    engine, _ = engine_for(lambda scope, document, variables: (None, [denial]))
    reader = engine.tool("reader", 'def run(event):\n    return graphql("{ financial { accounts { id } } }")\n')
    error = engine.invoke(reader)["invocations"][0]["error"]
    assert error == {"code": "action_permission_denied", "message": denial["message"],
                     "hint": "the client layer denied it"}


def test_check_false_returns_the_graphql_response_shape(engine_for):
    failure = {"message": "no such field", "extensions": {"code": "graphql_validation_failed", "hint": "check it"}}
    engine, _ = engine_for(lambda scope, document, variables: (None, [failure]))
    tolerant = engine.tool("tolerant", 'def run(event):\n    return graphql("{ nope }", check=False)\n')
    result = engine.invoke(tolerant)
    assert result["status"] == "SUCCEEDED"
    assert result["invocations"][0]["output"] == {"data": None, "errors": [failure]}


def test_a_failed_tool_with_check_false_returns_its_failure_and_the_caller_goes_on(engine_for):
    engine, _ = engine_for()
    failing = engine.tool("failing", 'def run(event):\n    fail("no", hint="try again")\n')
    caller = engine.tool("caller", 'def run(event):\n    return tools.failing({}, check=False)\n',
                         tools=[{"name": "failing"}])
    result = engine.invoke(caller)
    assert result["status"] == "SUCCEEDED"
    output = result["invocations"][0]["output"]
    assert output["status"] == "FAILED"
    assert output["error"] == {"code": "action_failure", "message": "no", "hint": "try again"}
    [child] = engine.children(result["execution_id"])
    assert str(child["execution_id"]) == output["executionId"] and child["action_id"] == failing


def test_a_failed_childs_writes_roll_back_with_its_savepoint(engine_for):
    account_id = uuid.uuid4()

    def create_account(scope, document, variables):
        accounts.create_account(scope, account_id, "made by the child", "USD", False)
        return {"financial": {"createAccount": {"id": str(account_id)}}}, None

    engine, _ = engine_for(create_account)
    engine.tool("writer", 'def run(event):\n    graphql("mutation { x }")\n    fail("after the write")\n')
    caller = engine.tool("caller", 'def run(event):\n    return tools.writer({}, check=False)["status"]\n',
                         tools=[{"name": "writer"}])
    result = engine.invoke(caller)
    assert result["status"] == "SUCCEEDED" and result["invocations"][0]["output"] == "FAILED"
    assert engine.in_transaction(lambda scope: accounts.get_account(scope, account_id)) is None


def test_a_succeeding_childs_writes_commit_with_the_caller(engine_for):
    account_id = uuid.uuid4()

    def create_account(scope, document, variables):
        accounts.create_account(scope, account_id, "made by the child", "USD", False)
        return {"ok": True}, None

    engine, _ = engine_for(create_account)
    engine.tool("writer", 'def run(event):\n    return graphql("mutation { x }")\n')
    caller = engine.tool("caller", 'def run(event):\n    return tools.writer({})\n', tools=[{"name": "writer"}])
    assert engine.invoke(caller)["status"] == "SUCCEEDED"
    assert engine.in_transaction(lambda scope: accounts.get_account(scope, account_id))["name"] == "made by the child"


def test_fixed_input_replaces_what_the_caller_supplies_and_cel_reads_the_event(engine_for):
    engine, _ = engine_for()
    engine.tool("echo", 'def run(event):\n    return event["data"]\n',
                properties={"limit": {"type": "integer"}, "who": {"type": "string"}, "note": {"type": "string"}})
    caller = engine.tool(
        "caller", 'def run(event):\n    return tools.echo({"limit": 500, "note": "kept"})\n',
        tools=[{"name": "echo", "input": {"limit": 20, "who": {"$cel": "event.data.name"}}}])
    output = engine.invoke(caller, {"name": "ada"})["invocations"][0]["output"]
    assert output == {"limit": 20, "who": "ada", "note": "kept"}


def test_a_fixed_input_that_cannot_be_evaluated_fails_the_call_before_it_runs(engine_for):
    engine, _ = engine_for()
    engine.tool("echo", 'def run(event):\n    return event["data"]\n', properties={"who": {"type": "string"}})
    caller = engine.tool("caller", 'def run(event):\n    return tools.echo({}, check=False)["error"]["code"]\n',
                         tools=[{"name": "echo", "input": {"who": {"$cel": "event.data.missing"}}}])
    assert engine.invoke(caller)["invocations"][0]["output"] == "action_input_invalid"


def test_the_1025th_call_beneath_one_call_is_refused(engine_for):
    engine, runner = engine_for(_data({"ok": True}))
    busy = engine.tool("busy", 'def run(event):\n    for i in range(1025):\n        graphql("{ a }")\n')
    error = engine.invoke(busy)["invocations"][0]["error"]
    assert error["code"] == "action_call_limit_exceeded"
    assert len(runner.seen) == 1024


def test_a_call_may_go_eight_tool_levels_below_the_first_and_a_deeper_call_fails_its_caller(engine_for):
    engine, _ = engine_for()
    name = "level9"
    engine.tool(name, 'def run(event):\n    return 9\n')
    for level in range(8, -1, -1):
        below = name
        name = f"level{level}"
        engine.tool(name, f'def run(event):\n    return tools.{below}({{}}, check=False)\n',
                    tools=[{"name": below}])
    output = engine.invoke(registry_id(engine, "level0"))["invocations"][0]["output"]
    succeeded = 0
    while output["status"] == "SUCCEEDED":  # each level's return: its call of the level below
        succeeded += 1
        output = output["output"]
    # Levels 1..8 ran; level 8's call of level 9 was refused, which fails level 8 itself (a limit is the
    # caller's failure, not a result check=False could take), so level 7 got level 8's failure.
    assert succeeded == 7
    assert output["error"]["code"] == "action_call_limit_exceeded"
    assert "level9" in output["error"]["message"]


def test_a_nested_invoke_never_reenters_a_tool_on_the_stack(engine_for):
    holder: dict = {}

    def invoke_again(scope, document, variables):
        try:
            invoke_action(scope, holder["again"], uuid.uuid4(), None, {}, None)
        except LedgerError as refused:
            return None, [{"message": refused.message, "extensions": refused.as_extensions()}]
        return {"ok": True}, None

    engine, _ = engine_for(invoke_again)
    holder["again"] = engine.tool("again", 'def run(event):\n    return graphql("mutation { invoke }")\n')
    error = engine.invoke(holder["again"])["invocations"][0]["error"]
    assert error["code"] == "action_call_limit_exceeded"
    assert "already on the call stack" in error["message"]


def registry_id(engine: Engine, name: str) -> uuid.UUID:
    found = engine.in_transaction(lambda scope: registry.list_actions(scope, {"name": name}, 1, None))
    return found[0]["action_id"]
