"""A call tree's records as `records.flush` sends them: the rows' JSON with its UUIDs and timestamps
written by orjson is the text the general path (str(), isoformat(), storable_json) writes, byte for byte;
a tree stored either way reads back the same, and what is stored is what its calls held."""

from __future__ import annotations

import datetime
import json
import random
import uuid
from dataclasses import replace

import psycopg
import psycopg.rows
import pytest

from ledger.executions import records
from ledger.executions.records import PendingExecution, _rows_json
from ledger.values import storable_json

from invoke_helpers import invoke, publish, tool

_UTC = datetime.timezone.utc


def _as_text(row: list) -> list:
    """A row with its ids and times written out, as the general path writes them."""
    return [str(value) if isinstance(value, uuid.UUID) else
            value.isoformat() if isinstance(value, datetime.datetime) else value for value in row]


def _general_text(pending: list[PendingExecution]) -> str:
    return storable_json([_as_text(row) for row in records._rows(pending)])


def _call(rng: random.Random, root: uuid.UUID, sequence: int) -> PendingExecution:
    document = {"document": "query($id: UUID!) { a(id: $id) { b } }", "variables": {"id": str(uuid.uuid4())},
                "operationName": rng.choice([None, "Q"])}
    started = datetime.datetime(2026, 12, 2, 3, 4, 5, rng.choice([0, 1, 999999]),
                                tzinfo=rng.choice([_UTC, datetime.timezone(datetime.timedelta(hours=-5))]))
    call = PendingExecution(
        execution_id=uuid.uuid4(), action_id=uuid.uuid4(), action_version=rng.randrange(1, 4),
        status=rng.choice(["SUCCEEDED", "FAILED"]), parent_execution_id=rng.choice([None, root]),
        root_execution_id=root, call_sequence=rng.choice([None, sequence]), depth=rng.randrange(3),
        client_id=uuid.uuid4(), event={"eventType": "action.invoked", "data": document, "recordType": None,
                                       "recordId": None},
        input=rng.choice([document, {"other": [1, 2.5, "x\x00y"]}, None]), session_id=rng.choice([None, uuid.uuid4()]),
        parent_attempt=rng.choice([None, 1, 2]), mcp_server_id=rng.choice([None, uuid.uuid4()]),
        output=rng.choice([{"data": {"a": {"b": 7}}, "errors": None}, None, [True, "\\u0000", -0.0]]),
        error=rng.choice([None, {"code": "x", "message": "m\x00", "hint": None}]),
        tools=rng.choice([[], [{"name": "t"}]]), logs=rng.choice([[], ["printed \x00"]]),
        started_at=rng.choice([None, started]),
        finished_at=rng.choice([None, started + datetime.timedelta(microseconds=rng.randrange(10**6))]),
        usage=rng.choice([None, {"inputTokens": 3, "outputTokens": 4, "modelCalls": 1}]),
    )
    call.rolled_back = rng.choice([False, True])
    return call


def test_a_trees_rows_are_the_bytes_the_general_path_writes():
    rng = random.Random(25)
    for _ in range(200):
        root = uuid.uuid4()
        pending = [_call(rng, root, sequence) for sequence in range(rng.randrange(1, 6))]
        assert _rows_json(pending) == _general_text(pending)


@pytest.mark.parametrize("field, value", [
    ("output", {"nan": float("nan")}), ("output", {"big": 2**64 + 1}), ("error", {"tuple": (1, 2)}),
    ("usage", {3: "three"}), ("logs", ["\ud800"]), ("tools", [{"inf": float("-inf")}]),
], ids=["nan", "big-integer", "tuple", "integer-key", "lone-surrogate", "infinity"])
def test_a_value_orjson_writes_otherwise_takes_the_general_path(field, value):
    rng = random.Random(7)
    pending = [_call(rng, uuid.uuid4(), 1), replace(_call(rng, uuid.uuid4(), 2), **{field: value})]
    assert records.storable_json_around(records._rows(pending), records._given_values(pending)) is None
    assert _rows_json(pending) == _general_text(pending)


def test_a_value_json_dumps_refuses_fails_the_rows_as_the_general_path_does():
    pending = [replace(_call(random.Random(3), uuid.uuid4(), 1), output={"id": uuid.uuid4()})]
    with pytest.raises(TypeError):
        _general_text(pending)
    with pytest.raises(TypeError):
        _rows_json(pending)


def test_an_input_that_is_not_its_events_data_is_walked_on_its_own():
    call = replace(_call(random.Random(5), uuid.uuid4(), 1), input={"nan": float("nan")})
    assert records.storable_json_around(records._rows([call]), records._given_values([call])) is None
    assert _rows_json([call]) == _general_text([call])



def _built_call(variables, data) -> PendingExecution:
    """A graphql() child as the host builds it: its event, input and output around the values it was given."""
    document = "query($id: UUID!) { a(id: $id) { b } }"
    call = _call(random.Random(11), uuid.uuid4(), 1)
    given = {"document": document, "variables": variables, "operationName": None}
    call.event = {"eventType": "action.invoked", "data": given, "recordType": None, "recordId": None}
    call.input, call.output = given, {"data": data, "errors": None}
    call.error, call.tools, call.logs, call.usage = None, [], [], None
    call.built = (call.event, call.input, call.output, (document, variables, None, data))
    return call


def test_a_built_calls_walk_is_its_given_values_alone():
    call = _built_call({"id": "x"}, {"a": {"b": 7}})
    walked = records._given_values([call])
    assert walked[:4] == list(call.built[3]) and len(walked) == 8  # then error, tools, logs, usage
    assert _rows_json([call]) == _general_text([call])


@pytest.mark.parametrize("variables, data", [({"n": float("nan")}, {"a": 1}), ({"id": "x"}, {"a": float("inf")}),
                                             ({"id": "x"}, {"big": 2**63})], ids=["variables", "answer", "big"])
def test_a_value_orjson_writes_otherwise_in_a_built_calls_given_values_takes_the_general_path(variables, data):
    call = _built_call(variables, data)
    assert records.storable_json_around(records._rows([call]), records._given_values([call])) is None
    assert _rows_json([call]) == _general_text([call])


@pytest.mark.parametrize("part", ["event", "input", "output"])
def test_a_built_call_whose_part_was_replaced_is_walked_whole(part):
    call = _built_call({"id": "x"}, {"a": 1})
    if part == "event":
        call.event = {**call.event, "recordType": float("nan")}
    elif part == "input":
        call.input = {"nan": float("nan")}
    else:
        call.output = {"data": {"a": float("nan")}, "errors": None}
    assert records.storable_json_around(records._rows([call]), records._given_values([call])) is None
    assert _rows_json([call]) == _general_text([call])


# A tree with reads, a failed read, CEL values and a printed NUL: what its records store.
_TREE_SRC = '''DOC = """query($id: UUID!) { financial { account(id: $id) { id name balance } } }"""

def run(event):
    print("read \\x00 %d" % event["data"]["n"])
    for i in range(event["data"]["n"]):
        graphql(DOC, variables={"id": event["data"]["account_id"]})
    graphql("query { financial { nothing } }", check=False)
    cel("[1, 2.5, 'x']", {})
    return {"done": True}
'''
_EXECUTIONS = ("SELECT action_id, action_version, status, call_sequence, depth, attempts, client_id, event, input,"
               " session_id, parent_attempt, rolled_back, mcp_server_id, trigger_depth,"
               " parent_execution_id = root_execution_id AS under_root FROM executions"
               " WHERE root_execution_id = %s AND id <> root_execution_id ORDER BY call_sequence")
_INVOCATIONS = ("SELECT i.attempt, i.input, i.output, i.error, i.tools, i.logs, i.output_bytes, i.usage,"
                " i.started_at <= i.finished_at AS ordered, i.duration_ms >= 0 AS timed"
                " FROM invocations i JOIN executions e ON e.tenant_id = i.tenant_id AND e.id = i.execution_id"
                " WHERE e.root_execution_id = %s AND e.id <> e.root_execution_id ORDER BY e.call_sequence")


def _stored_children(db_url: str, root: str) -> tuple[list, list]:
    with psycopg.connect(db_url) as conn:
        return conn.execute(_EXECUTIONS, (root,)).fetchall(), conn.execute(_INVOCATIONS, (root,)).fetchall()


def test_a_tree_stored_through_orjsons_ids_and_times_reads_back_as_through_the_general_path(api, db_url,
                                                                                             monkeypatch):
    account = api.gql('mutation { financial { createAccount(id: "%s", input: {name: "a", currency: "USD"})'
                      ' { id } } }' % uuid.uuid4())["financial"]["createAccount"]["id"]
    action_id = publish(api, tool("tree", _TREE_SRC))
    fast = invoke(api, action_id, {"account_id": account, "n": 3})
    monkeypatch.setattr(records, "storable_json_around", lambda value, open_parts: None)
    general = invoke(api, action_id, {"account_id": account, "n": 3})
    assert fast["status"] == general["status"] == "SUCCEEDED"
    fast_rows, general_rows = (_stored_children(db_url, run["executionId"]) for run in (fast, general))
    assert len(fast_rows[0]) == len(fast_rows[1]) == 5
    assert fast_rows == general_rows


def _as_stored(value):
    """A value as jsonb gives it back (a NUL recorded as U+FFFD)."""
    return json.loads(storable_json(value))


def test_every_column_of_a_trees_records_is_what_its_calls_held(api, db_url, monkeypatch):
    written: list[PendingExecution] = []
    rows_json = records._rows_json

    def capturing(pending):
        written.extend(pending)
        return rows_json(pending)

    monkeypatch.setattr(records, "_rows_json", capturing)
    account = api.gql('mutation { financial { createAccount(id: "%s", input: {name: "a", currency: "USD"})'
                      ' { id } } }' % uuid.uuid4())["financial"]["createAccount"]["id"]
    written.clear()
    root = invoke(api, publish(api, tool("tree", _TREE_SRC)), {"account_id": account, "n": 2})["executionId"]
    assert [str(call.root_execution_id) for call in written] == [root] * 5
    with psycopg.connect(db_url, row_factory=psycopg.rows.dict_row) as conn:
        for call in written:
            execution = conn.execute("SELECT * FROM executions WHERE id = %s", (call.execution_id,)).fetchone()
            invocation = conn.execute("SELECT * FROM invocations WHERE execution_id = %s", (call.execution_id,)).fetchone()
            assert {key: execution[key] for key in (
                "action_id", "action_version", "status", "parent_execution_id", "root_execution_id", "call_sequence",
                "depth", "attempts", "client_id", "event", "input", "session_id", "parent_attempt", "rolled_back",
                "mcp_server_id", "trigger_depth")} == {
                "action_id": call.action_id, "action_version": call.action_version, "status": call.status,
                "parent_execution_id": call.parent_execution_id, "root_execution_id": call.root_execution_id,
                "call_sequence": call.call_sequence, "depth": call.depth, "attempts": call.attempt,
                "client_id": call.client_id, "event": _as_stored(call.event), "input": _as_stored(call.input),
                "session_id": call.session_id, "parent_attempt": call.parent_attempt, "rolled_back": call.rolled_back,
                "mcp_server_id": call.mcp_server_id, "trigger_depth": 0}
            assert {key: invocation[key] for key in (
                "attempt", "input", "output", "error", "tools", "logs", "started_at", "finished_at", "duration_ms",
                "output_bytes", "usage")} == {
                "attempt": call.attempt, "input": _as_stored(call.input), "output": _as_stored(call.output),
                "error": _as_stored(call.error) if call.error else None, "tools": _as_stored(call.tools),
                "logs": _as_stored(call.logs), "started_at": call.started_at, "finished_at": call.finished_at,
                "duration_ms": call.duration_ms, "output_bytes": call.result_bytes(),
                "usage": _as_stored(call.usage) if call.usage else None}
    assert sorted(call.status for call in written) == ["FAILED", "SUCCEEDED", "SUCCEEDED", "SUCCEEDED", "SUCCEEDED"]
    # The graphql() children (both reads and the failed one) carry what they were built around.
    assert [call.built is not None for call in written] == [False, True, True, True, False]
