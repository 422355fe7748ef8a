"""README "Agents", followed as written with its `scripted` provider: its models file, its script, its
agent definition published with `ledger publish`, its curl request, and the documented answer."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from helpers import balance
from mcp_helpers import _Querying, publish_examples

from ledger.client.publish import publish
from ledger.config import Settings

ROOT = Path(__file__).resolve().parent.parent
ALICE = "7a1c0c51-2f2e-4a8e-9b1e-000000000002"


def section(title: str) -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index(f"\n## {title}\n")
    return text[start:text.index("\n## ", start + 1)]


def block_with(title: str, language: str, marker: str) -> str:
    found = [b for b in re.findall(rf"^```{language}\n(.*?)^```$", section(title), flags=re.S | re.M) if marker in b]
    assert len(found) == 1, (language, marker, found)
    return found[0]


def heredoc(script: str) -> str:
    lines = script.splitlines()
    start = next(i for i, line in enumerate(lines) if "<<'JSON'" in line)
    return "\n".join(lines[start + 1:lines.index("JSON", start)])


@pytest.fixture
def settings(db_url, tmp_path) -> Settings:
    (tmp_path / "models.toml").write_text(block_with("Agents", "toml", "[local]"))
    (tmp_path / "agent-script.json").write_text(block_with("Agents", "json", '"responses"'))
    return Settings(database_url=db_url, data_dir=tmp_path / "data", pool_min=1, pool_max=10,
                    models_file=tmp_path / "models.toml")


def test_the_readme_walk_through_with_a_scripted_provider_gets_the_documented_answer(api, services, tmp_path):
    # The first walk-through's accounts, and the example tools.
    api.gql(block_with("A walk-through: money, then a tool", "graphql", "createAccount"))
    publish_examples(api)
    definition = tmp_path / "bookkeeper.toml"
    definition.write_text(block_with("Agents", "toml", 'kind = "agent"'))
    result = publish(_Querying(api), [definition])
    printed = [c.describe() for c in result.changes] + [result.summary()]
    assert "\n".join(printed) + "\n" == block_with("Agents", "", "bookkeeper: created v1")

    response = api.http.post("/graphql", content=heredoc(block_with("Agents", "sh", "invokeAction")),
                             headers={"Authorization": f"Bearer {api.token}", "Content-Type": "application/json"})
    assert response.json() == json.loads(block_with("Agents", "json", '"invokeAction"'))
    assert balance(api, ALICE) == 7500
    # What the model saw of the first tool result: the example tool's own output.
    request = services.models.providers["scripted"].requests[1]
    assert json.loads(request.messages[-1].content)["balance"] == 10000
