"""README "Connect an agent", as written: its token request, its JSON client configurations (through the
Python and the TypeScript SDK clients, with exactly the url and headers they give), its curl call, and its
OpenAI Agents SDK snippet (run when `openai-agents` is importable here, or by LEDGER_AGENTS_PYTHON),
against a running ledger over real HTTP with `examples/` published."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mcp_helpers import publish_examples, running_server
from mcp_ts_helpers import run_ts_client, sdk_modules

from ledger.config import Settings

ROOT = Path(__file__).resolve().parent.parent
README_HOST = "http://127.0.0.1:8000"
EXAMPLE_TOOLS = ["get_account_activity", "transfer", "settle_invoice"]


def section() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("\n## Connect an agent\n")
    return text[start:text.index("\n## ", start + 1)]


def blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", section(), flags=re.S | re.M)


def block_with(language: str, marker: str) -> str:
    (found,) = [b for b in blocks(language) if marker in b]
    return found


def heredoc(script: str) -> str:
    """The body of the script's `<<'JSON'` here-document."""
    lines = script.splitlines()
    start = next(i for i, line in enumerate(lines) if "<<'JSON'" in line)
    end = lines.index("JSON", start)
    return "\n".join(lines[start + 1:end])


@pytest.fixture
def settings(db_url, tmp_path) -> Settings:
    return Settings(database_url=db_url, data_dir=tmp_path / "data", pool_min=1, pool_max=10,
                    mcp_allowed_hosts="127.0.0.1:*")


@pytest.fixture
def served(services, api):
    publish_examples(api)
    with running_server(services) as url:
        yield url


@pytest.fixture
def agent_token(api) -> str:
    """The README's request for the agent's client and its confined token, sent as written."""
    response = api.http.post("/graphql", content=heredoc(block_with("sh", "issueToken")),
                             headers={"Authorization": f"Bearer {api.token}", "Content-Type": "application/json"})
    body = response.json()
    assert "errors" not in body, body
    return body["data"]["clients"]["issueToken"]["token"]


def listed_names(url: str, headers: dict[str, str]) -> list[str]:
    async def main() -> list[str]:
        async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
            async with Client(streamable_http_client(url, http_client=http)) as client:
                return [tool.name for tool in (await client.list_tools()).tools]

    return anyio.run(main)


def test_the_readme_s_agent_token_lists_the_assistant_s_tools_and_nothing_else(served, agent_token):
    names = listed_names(f"{served}/mcp/assistant", {"Authorization": f"Bearer {agent_token}"})
    assert names[:3] == EXAMPLE_TOOLS
    # Confined to the assistant: refused at /graphql.
    response = httpx.post(f"{served}/graphql", json={"query": "{ viewer { clientName } }"},
                          headers={"Authorization": f"Bearer {agent_token}"})
    assert response.status_code == 401


def test_the_cursor_style_config_connects_as_written(served, agent_token):
    config = json.loads(block_with("json", '"mcpServers"'))
    entry = config["mcpServers"]["ledger"]
    url = entry["url"].replace(README_HOST, served)
    headers = {name: value.replace("<the agent token>", agent_token) for name, value in entry["headers"].items()}
    assert listed_names(url, headers)[:3] == EXAMPLE_TOOLS
    sdk_modules()
    report = run_ts_client(url, None, headers=headers)
    assert "error" not in report, report
    assert [tool["name"] for tool in report["tools"]][:3] == EXAMPLE_TOOLS


def test_the_vs_code_config_connects_as_written(served, agent_token):
    config = json.loads(block_with("json", '"servers"'))
    (prompt,) = config["inputs"]
    assert prompt["type"] == "promptString" and prompt["password"] is True
    entry = config["servers"]["ledger"]
    assert entry["type"] == "http"
    url = entry["url"].replace(README_HOST, served)
    headers = {name: value.replace("${input:" + prompt["id"] + "}", agent_token)
               for name, value in entry["headers"].items()}
    assert listed_names(url, headers)[:3] == EXAMPLE_TOOLS


def test_the_readme_s_curl_call_answers_structured_content(served, api, agent_token):
    script = block_with("sh", "tools/call")
    body = json.loads(heredoc(script))
    account = body["params"]["arguments"]["account_id"]
    api.gql("mutation($id: UUID!) { financial { createAccount(id: $id, input: {name: \"acme\", currency: \"USD\"})"
            " { id } } }", {"id": account})
    headers = dict(re.findall(r"-H '([^:']+): ([^']+)'", script))
    headers["Authorization"] = f"Bearer {agent_token}"
    response = httpx.post(f"{served}/mcp/assistant", content=json.dumps(body), headers=headers, timeout=60)
    assert response.status_code == 200, response.text
    result = response.json()["result"]
    assert result["isError"] is False, result
    assert result["structuredContent"]["account_id"] == account
    assert result["_meta"]["ledger/executionId"] == body["params"]["_meta"]["ledger/executionId"]


def _agents_python() -> str:
    if importlib.util.find_spec("agents") is not None:
        return sys.executable
    given = os.environ.get("LEDGER_AGENTS_PYTHON")
    if given:
        return given
    pytest.skip("openai-agents is not installed here (pip install openai-agents, or set LEDGER_AGENTS_PYTHON to a "
                "Python that has it)")


def test_the_openai_agents_sdk_snippet_lists_the_tools_as_written(served, agent_token, tmp_path):
    python = _agents_python()
    snippet = block_with("python", "MCPServerStreamableHttp")
    script = tmp_path / "agent.py"
    script.write_text(snippet.replace(README_HOST, served))
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}  # no model: it only lists
    result = subprocess.run([python, str(script)], capture_output=True, text=True, timeout=120,
                            env={**env, "LEDGER_AGENT_TOKEN": agent_token})
    assert result.returncode == 0, result.stderr[-3000:]
    printed = ast.literal_eval(result.stdout.strip().splitlines()[-1])
    # The README shows every tool the assistant lists; a build without the natives serves the others.
    (shown,) = [ast.literal_eval(b.strip()) for b in blocks("") if b.strip().startswith("['")]
    assert printed[:3] == EXAMPLE_TOOLS and set(printed) <= set(shown)
