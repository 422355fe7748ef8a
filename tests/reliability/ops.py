"""GraphQL operations the reliability tests send over real HTTP (a deployment `Client`)."""

from __future__ import annotations

import time
import uuid
from typing import Any

from helpers import ACCOUNT, CREATE_ACCOUNT, CREATE_TRANSFER
from invoke_helpers import INVOKE, tool
from registry_helpers import CREATE, LIFECYCLE

START = """mutation($id: UUID!, $input: StartActionInput!) { actions { startAction(id: $id, input: $input) {
  executionId status } } }"""
EXECUTION = """query($id: UUID!) { actions { execution(id: $id) { executionId status attempts
  invocation { output error { code message hint } } } } }"""
TWO_TRANSFERS = """mutation($a: UUID!, $b: UUID!, $x: UUID!, $y: UUID!, $z: UUID!, $amount: Int64!) { financial {
  one: createTransfer(id: $a, input: {fromAccountId: $x, toAccountId: $y, amount: $amount}) { id }
  two: createTransfer(id: $b, input: {fromAccountId: $y, toAccountId: $z, amount: $amount}) { id } } }"""

# A transfer tool: what "transfer calls" through invokeAction and startAction run.
TRANSFER_SRC = '''DOC = """mutation($id: UUID!, $f: UUID!, $t: UUID!, $a: Int64!) { financial {
  createTransfer(id: $id, input: {fromAccountId: $f, toAccountId: $t, amount: $a}) { id amount } } }"""

def run(event):
    d = event["data"]
    return graphql(DOC, variables={"id": d["id"], "f": d["source"], "t": d["target"], "a": d["amount"]})["financial"]["createTransfer"]
'''
TRANSFER_SCHEMA = {"type": "object", "required": ["id", "source", "target", "amount"],
                   "properties": {"id": {"type": "string"}, "source": {"type": "string"}, "target": {"type": "string"},
                                  "amount": {"type": "integer"}}}


def create_account(client, name: str, currency: str = "USD", overdraft: bool = False) -> str:
    account_id = str(uuid.uuid4())
    client.gql(CREATE_ACCOUNT, {"id": account_id, "name": name, "currency": currency, "overdraft": overdraft})
    return account_id


def transfer(client, source: str, target: str, amount: int) -> dict:
    return client.gql(CREATE_TRANSFER, {"id": str(uuid.uuid4()), "from": source, "to": target,
                                        "amount": amount})["financial"]["createTransfer"]


def balance(client, account_id: str) -> int:
    return client.gql(ACCOUNT, {"id": account_id})["financial"]["account"]["balance"]


def funded_accounts(client, count: int, amount: int, currency: str = "USD") -> tuple[str, list[str]]:
    """An opening-balance account and `count` accounts funded from it with `amount` each."""
    opening = create_account(client, f"opening {currency}", currency, overdraft=True)
    accounts = [create_account(client, f"{currency} {i}", currency) for i in range(count)]
    for account in accounts:
        transfer(client, opening, account, amount)
    return opening, accounts


def publish(client, doc: dict) -> str:
    action_id = str(uuid.uuid4())
    client.gql(CREATE, {"id": action_id, "input": doc})
    client.gql(LIFECYCLE.format(op="publishAction"), {"id": action_id})
    return action_id


def publish_transfer_tool(client, name: str = "move") -> str:
    return publish(client, tool(name, TRANSFER_SRC, schema=TRANSFER_SCHEMA))


def invoke_body(action_id: str, input: Any, execution_id: str | None = None) -> tuple[str, dict]:
    return INVOKE, {"id": action_id, "input": {"executionId": execution_id or str(uuid.uuid4()), "input": input}}


def start_body(action_id: str, input: Any, execution_id: str | None = None) -> tuple[str, dict]:
    return START, {"id": action_id, "input": {"executionId": execution_id or str(uuid.uuid4()), "input": input}}


def start(client, action_id: str, input: Any) -> str:
    query, variables = start_body(action_id, input)
    return client.gql(query, variables)["actions"]["startAction"]["executionId"]


def execution(client, execution_id: str) -> dict | None:
    return client.gql(EXECUTION, {"id": execution_id})["actions"]["execution"]


def wait_for_execution(client, execution_id: str, statuses=("SUCCEEDED", "FAILED", "CANCELLED"),
                       timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    seen = None
    while time.monotonic() < deadline:
        seen = execution(client, execution_id)
        if seen and seen["status"] in statuses:
            return seen
        time.sleep(0.1)
    raise AssertionError(f"execution {execution_id} did not reach {statuses} in {timeout} s: {seen}")
