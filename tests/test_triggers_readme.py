"""README "Triggers", as written: its review tool, its createTrigger mutation and its listing of what the
trigger ran, against the real API and a worker: every transfer over 1,000.00 is reviewed once."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

from helpers import funded_account, transfer
from invoke_helpers import ALL_ACCESS, publish
from test_queue import worker  # noqa: F401 - a fixture
from trigger_helpers import wait_for_runs

ROOT = Path(__file__).resolve().parent.parent


def section() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("\n## Triggers\n")
    return text[start:text.index("\n## ", start + 1)]


def blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", section(), flags=re.S | re.M)


def test_the_readme_example_reviews_every_transfer_over_1000_once(api, worker):
    (src,) = blocks("python")
    create, listing = blocks("graphql")
    review = publish(api, {"name": "review_transfer", "kind": "tool", "config": {"runtime": "starlark", "src": src},
                           "tool": {"name": "review_transfer", "description": "reviews a transfer",
                                    "inputSchema": {"type": "object"}}, "policies": ALL_ACCESS})
    opening, funded = funded_account(api, 100_000)  # exactly 1,000.00: not over the limit
    trigger = api.gql(create, {"id": str(uuid.uuid4()), "review": review})["triggers"]["createTrigger"]
    assert trigger["enabled"] and trigger["clientId"] == str(api.client_id)
    transfer(api, funded, opening, 99_999)
    large = transfer(api, opening, funded, 250_000)
    transfer(api, funded, opening, 100_000)
    wait_for_runs(api, trigger["id"], 1)
    (run,) = api.gql(listing, {"trigger": trigger["id"]})["actions"]["executions"]
    assert run["status"] == "SUCCEEDED" and run["triggerDepth"] == 1 and run["startedBy"] == {"executionId": None}
    assert run["event"]["recordId"] == large["id"] and run["event"]["data"]["amount"] == 250_000
    assert run["invocation"]["output"] == {"transfer": large["id"], "amount": 250_000, "escalate": False}
