"""The GraphQL surface: `ledger schema` is schema.graphql, and it breaks nothing of the shared contract."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from graphql import build_schema, find_breaking_changes

from ledger.api.sdl import schema_sdl

ROOT = Path(__file__).resolve().parents[1]


def _contract_path() -> Path | None:
    explicit = os.environ.get("LEDGER_CONTRACT")
    candidates = [Path(explicit)] if explicit else []
    candidates.append(Path(__file__).resolve().parents[2] / "shared" / "contract.graphql")
    return next((path for path in candidates if path.is_file()), None)


# The parts of ../shared/contract/ (one file per DESIGN section) whose section is built: each extends
# contract.graphql, and the schema must keep them too. A section that is built adds its file here.
BUILT_SECTIONS = ["17-hardening.graphql", "12-mcp.graphql", "13-agents.graphql", "14-planned.graphql",
                  "15-triggers.graphql"]


@pytest.fixture(scope="module")
def contract() -> str:
    path = _contract_path()
    if path is None:
        pytest.skip("the shared contract is absent: set LEDGER_CONTRACT or place it at ../shared/contract.graphql")
    parts = [path.read_text()]
    for name in BUILT_SECTIONS:
        section = path.parent / "contract" / name
        assert section.is_file(), f"the built section's contract {section} is missing"
        parts.append(section.read_text())
    return "\n".join(parts)


def test_schema_graphql_is_exactly_the_generated_sdl():
    assert (ROOT / "schema.graphql").read_text() == schema_sdl(), "run `make schema` and commit schema.graphql"


def test_ledger_schema_command_prints_the_sdl():
    printed = subprocess.run([sys.executable, "-m", "ledger.cli", "schema"], capture_output=True, check=True,
                             cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout
    assert printed.decode() == (ROOT / "schema.graphql").read_text()


def test_generated_schema_breaks_nothing_of_the_contract(contract):
    changes = find_breaking_changes(build_schema(contract), build_schema(schema_sdl()))
    assert [f"{c.type.name}: {c.description}" for c in changes] == []


def test_generated_schema_builds_and_keeps_the_contracts_root_fields(contract):
    ours = build_schema(schema_sdl())
    theirs = build_schema(contract)
    for root in ("query_type", "mutation_type"):
        assert set(getattr(theirs, root).fields) <= set(getattr(ours, root).fields)
