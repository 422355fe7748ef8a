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


def invoke_while_the_account_is_locked(api, db_url, name: str, src: str) -> tuple[dict, float]:
    """Publish a mover with a 1 s responseTimeout, and invoke it while another transaction holds the funded
    account's row: (the execution, the seconds the call took)."""
    opening, funded = funded_account(api, 10)
    action_id = publish(api, tool(name, src, timeout_ms=1000))
    with psycopg.connect(db_url) as blocker:
        blocker.execute("SELECT 1 FROM accounts WHERE id = %s FOR UPDATE", (funded,))
        began = time.monotonic()
        execution = invoke(api, action_id, {"id": str(uuid.uuid4()), "f": funded, "t": opening})
        elapsed = time.monotonic() - began
        blocker.rollback()
    return execution, elapsed


def test_a_statement_blocked_past_the_tools_response_timeout_fails_the_call_not_the_request(api, db_url):
    execution, elapsed = invoke_while_the_account_is_locked(api, db_url, "mover", MOVE)
    assert execution["status"] == "FAILED"
    assert execution["invocation"]["error"]["code"] == "action_response_timeout"
    assert elapsed < 10


def test_a_program_reaching_the_database_through_the_preludes_internals_is_bounded_all_same(api, db_url):
    # A program reaching graphql() through the prelude's internals, without calling it, is bounded too.
    hidden = MOVE.replace('graphql("""', '__send(__host_graphql, "a call", ["""').replace(
        '"t": event["data"]["t"]})', '"t": event["data"]["t"]}, None, True])').replace('variables=', '')
    execution, elapsed = invoke_while_the_account_is_locked(api, db_url, "hidden_mover", hidden)
    assert execution["status"] == "FAILED"
    assert execution["invocation"]["error"]["code"] == "action_response_timeout"
    assert elapsed < 10
