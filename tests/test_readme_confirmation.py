"""README "Confirmation", as written: its shell blocks run with bash and curl (only the host and port changed
to the test server's), in order, against a running ledger over real HTTP with `examples/` published and a
worker; each answer matches the output the README shows ("…" stands for a value that differs per run)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from helpers import balance
from mcp_helpers import examples, served, settings  # noqa: F401  (fixtures)

ROOT = Path(__file__).resolve().parent.parent
PAYER, PAYEE = "5d0c2a9e-6f3b-4b7a-9c1d-00000000ac01", "5d0c2a9e-6f3b-4b7a-9c1d-00000000ac02"


def section() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("\n## Confirmation: a model proposes, a person decides\n")
    return text[start:text.index("\n## ", start + 1)]


def blocks(language: str) -> list[str]:
    """The section's fenced blocks of `language` ("" for a bare fence), in order."""
    found, current, lang = [], None, None
    for line in section().splitlines():
        if current is None and line.startswith("```"):
            current, lang = [], line[3:].strip()
        elif current is not None and line == "```":
            if lang == language:
                found.append("\n".join(current) + "\n")
            current = None
        elif current is not None:
            current.append(line)
    return found


def matches(expected, actual) -> bool:
    """`actual` is `expected`, where the string "…" in `expected` stands for any value."""
    if expected == "…":
        return True
    if isinstance(expected, dict):
        return (isinstance(actual, dict) and set(expected) == set(actual)
                and all(matches(expected[k], actual[k]) for k in expected))
    if isinstance(expected, list):
        return (isinstance(actual, list) and len(expected) == len(actual)
                and all(matches(e, a) for e, a in zip(expected, actual)))
    return type(expected) is type(actual) and expected == actual


@pytest.fixture
def worker(services):
    from ledger.queue.worker import Worker

    w = Worker(services, concurrency=2, lease_seconds=2.0, poll_interval=0.2).start()
    yield w
    w.stop()


def test_the_readme_s_confirmation_flow_works_as_written(served, examples, worker, tmp_path):
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    (tmp_path / ".ledger").mkdir()
    (tmp_path / ".ledger" / "admin-token").write_text(examples.token)
    host = served.removeprefix("http://")

    def run(script: str) -> str:
        result = subprocess.run(["bash", "-euo", "pipefail", "-c", script.replace("localhost:8000", host)],
                                cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        return result.stdout

    setup, propose, decide, follow = blocks("sh")
    proposed, confirmed, followed = (json.loads(b) for b in blocks(""))

    run(setup)
    assert (tmp_path / ".ledger" / "desk-token").read_text().strip()
    answer = json.loads(run(propose))["result"]
    assert answer["isError"] is False, answer
    assert matches(proposed, answer["structuredContent"]), answer["structuredContent"]
    assert (balance(examples, PAYER), balance(examples, PAYEE)) == (10_000, 0)

    decision = run(decide + '\nprintf %s "$PLAN" > .ledger/plan-id\n')
    assert matches(confirmed, json.loads(decision)), decision
    plan_id = (tmp_path / ".ledger" / "plan-id").read_text()
    assert plan_id == answer["structuredContent"]["plannedActionId"]

    deadline = time.monotonic() + 30
    while balance(examples, PAYEE) != 2_500 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert (balance(examples, PAYER), balance(examples, PAYEE)) == (7_500, 2_500)
    task = json.loads(run(f'PLAN={plan_id}\n' + follow))["result"]
    assert matches(followed, task["structuredContent"]), task["structuredContent"]
    assert task["structuredContent"]["taskId"] == plan_id
