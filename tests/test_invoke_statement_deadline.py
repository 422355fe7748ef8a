"""A program's database statements stop at its own responseTimeout."""

from __future__ import annotations

import time
import uuid

import psycopg

from helpers import funded_account
from invoke_helpers import invoke, publish, tool

MOVE = (
    'def run(event):\n'
    '    graphql("""mutation($id: UUID!, $f: UUID!, $t: UUID!) { financial { createTransfer(id: $id,'
    ' input: {fromAccountId: $f, toAccountId: $t, amount: 1}) { id } } }""", variables={"id": event["data"]["id"],'
    ' "f": event["data"]["f"], "t": event["data"]["t"]})\n'
    '    return "moved"\n'
)


def test_a_statement_blocked_past_the_tools_response_timeout_fails_the_call_not_the_request(api, db_url):
    opening, funded = funded_account(api, 10)
    action_id = publish(api, tool("mover", MOVE, timeout_ms=1000))
    with psycopg.connect(db_url) as blocker:
        blocker.execute("SELECT 1 FROM accounts WHERE id = %s FOR UPDATE", (funded,))
        began = time.monotonic()
        execution = invoke(api, action_id, {"id": str(uuid.uuid4()), "f": funded, "t": opening})
        elapsed = time.monotonic() - began
        blocker.rollback()
    assert execution["status"] == "FAILED"
    assert execution["invocation"]["error"]["code"] == "action_response_timeout"
    assert elapsed < 10


def test_a_program_reaching_the_database_through_the_preludes_internals_is_bounded_all_same(api, db_url):
    # The bound is skipped only for a program that provably makes no statement: one naming neither
    # graphql nor tools nor any of the prelude's internals.
    hidden = MOVE.replace('graphql("""', '__send("graph" + "ql", "a call", ["""').replace(
        '"t": event["data"]["t"]})', '"t": event["data"]["t"]}, None, True])').replace('variables=', '')
    opening, funded = funded_account(api, 10)
    action_id = publish(api, tool("hidden_mover", hidden, timeout_ms=1000))
    with psycopg.connect(db_url) as blocker:
        blocker.execute("SELECT 1 FROM accounts WHERE id = %s FOR UPDATE", (funded,))
        began = time.monotonic()
        execution = invoke(api, action_id, {"id": str(uuid.uuid4()), "f": funded, "t": opening})
        elapsed = time.monotonic() - began
        blocker.rollback()
    assert execution["status"] == "FAILED"
    assert execution["invocation"]["error"]["code"] == "action_response_timeout"
    assert elapsed < 10
