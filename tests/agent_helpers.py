"""Builders for the agent tests (DESIGN 13): a models file with a `scripted` provider (`test`) and an
`openai` one (`local`, a tests/model_server.py), an agent definition, and the script a test gives the
model. The scripted provider keeps the requests it answered: tests assert what the model SAW."""

from __future__ import annotations

import itertools
import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

from invoke_helpers import ALL_ACCESS, publish, tool

from ledger.config import Settings
from ledger.models import AssistantMessage, ToolResult, UserMessage

MODEL = "scripted-model"
_stamps = itertools.count(1)

AGENT_EXECUTION = """query($id: UUID!) { actions { execution(id: $id) {
  executionId status actionId
  invocation { input output error { code message hint } usage tools { name actionVersion } }
  children { executionId status callSequence actionId depth rolledBack
             invocation { input output error { code message hint } } } } } }"""


def agent_settings(db_url: str, tmp_path: Path, model_server_url: str, **extra: Any) -> Settings:
    (tmp_path / "script.json").write_text("[]")
    models = tmp_path / "models.toml"
    models.write_text('[test]\ntype = "scripted"\nscript = "script.json"\n\n'
                      f'[local]\ntype = "openai"\nbase_url = "{model_server_url}/v1"\nstrict = false\n')
    return Settings(database_url=db_url, data_dir=tmp_path / "data", pool_min=1, pool_max=10, models_file=models,
                    **extra)


def scripted(services):
    return services.models.providers["test"]


def script(services, responses: list[dict], *, loop: bool = False) -> None:
    """The model's next answers, from the first; what it was asked so far is forgotten."""
    provider = scripted(services)
    path = provider.script
    path.write_text(json.dumps({"responses": responses, "loop": loop}))
    # A distinct mtime, so that the provider sees the change even within one clock tick.
    stamp = time.time_ns() + next(_stamps) * 1_000_000
    os.utime(path, ns=(stamp, stamp))
    provider.reset()


def seen(services) -> list:
    """The requests the scripted model was sent, oldest first."""
    return list(scripted(services).requests)


def call(name: str, arguments: Any, call_id: str | None = None) -> dict:
    out = {"name": name, "arguments": arguments}
    if call_id:
        out["id"] = call_id
    return out


def agent(name: str, tools: list[dict] | None = None, *, policies: list | None = None, harness: dict | None = None,
          output_schema: dict | None = None, session: bool = False, instructions: str = "You keep the books.",
          input_schema: dict | None = None, provider: str = "test", timeout_ms: int | None = None) -> dict:
    config: dict = {"model": {"provider": provider, "name": MODEL}, "instructions": instructions}
    if harness is not None:
        config["harness"] = harness
    block: dict = {"name": name, "description": f"the {name} agent",
                   "inputSchema": input_schema or {"type": "object", "properties": {"request": {"type": "string"}}}}
    if output_schema is not None:
        block["outputSchema"] = output_schema
    if session:
        block["session"] = True
    if timeout_ms is not None:
        block["responseTimeout"] = timeout_ms
    return {"name": name, "kind": "agent", "config": config, "tool": block,
            "policies": ALL_ACCESS if policies is None else policies, "tools": tools or []}


TRANSFER_SRC = '''
MOVE = """mutation($id: UUID!, $from: UUID!, $to: UUID!, $amount: Int64!) { financial {
  createTransfer(id: $id, input: {fromAccountId: $from, toAccountId: $to, amount: $amount}) { id amount } } }"""

def run(event):
    d = event["data"]
    moved = graphql(MOVE, variables = {"id": d["transfer_id"], "from": d["from_account"], "to": d["to_account"],
                                       "amount": d["amount"]})
    return moved["financial"]["createTransfer"]
'''
TRANSFER_SCHEMA = {"type": "object", "required": ["transfer_id", "from_account", "to_account", "amount"],
                   "additionalProperties": False,
                   "properties": {"transfer_id": {"type": "string"}, "from_account": {"type": "string"},
                                  "to_account": {"type": "string"}, "amount": {"type": "integer", "minimum": 1}}}
BALANCE_SRC = '''
def run(event):
    a = graphql("query($id: UUID!) { financial { account(id: $id) { balance currency } } }",
                variables = {"id": event["data"]["account_id"]})["financial"]["account"]
    return {"balance": a["balance"], "currency": a["currency"]}
'''
BALANCE_SCHEMA = {"type": "object", "required": ["account_id"], "properties": {"account_id": {"type": "string"}}}


def money_tools(api) -> None:
    publish(api, tool("move", TRANSFER_SRC, schema=TRANSFER_SCHEMA))
    publish(api, tool("balance", BALANCE_SRC, schema=BALANCE_SCHEMA))


def execution(api, execution_id: str) -> dict:
    return api.gql(AGENT_EXECUTION, {"id": execution_id})["actions"]["execution"]


def tool_results(request) -> list[ToolResult]:
    """The results of the latest round the request sends back (after the model's last answer)."""
    last = max((i for i, m in enumerate(request.messages) if isinstance(m, AssistantMessage)), default=-1)
    return [m for m in request.messages[last + 1:] if isinstance(m, ToolResult)]


def user_texts(request) -> list[str]:
    return [m.content for m in request.messages if isinstance(m, UserMessage)]


def new_id() -> str:
    return str(uuid.uuid4())
