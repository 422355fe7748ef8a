"""The TypeScript SDK's MCP client as a second, independent client (tests/mcp_ts_client.mjs): the npm
package is installed into the ignored `.cache/mcp-ts-sdk` on first use, as the bench installs its peers.

Skipped only when it cannot run here: Node.js or npm is missing, or the npm registry cannot be reached.
An install that fails while the registry answers is a failure, not a skip.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
SDK_DIR = ROOT / ".cache" / "mcp-ts-sdk"
# Pinned: the client's behaviour (its protocol version, its validation) is what the test checks against.
SDK_PACKAGE, SDK_VERSION = "@modelcontextprotocol/sdk", "1.32.2"
SCRIPT = ROOT / "tests" / "mcp_ts_client.mjs"


def _installed_version(modules: Path) -> str | None:
    manifest = modules / SDK_PACKAGE / "package.json"
    try:
        return json.loads(manifest.read_text())["version"]
    except (OSError, ValueError, KeyError):
        return None


def _registry_reachable() -> bool:
    try:
        return subprocess.run(["npm", "ping", "--loglevel=error"], capture_output=True, timeout=60).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def sdk_modules() -> Path:
    """node_modules holding the pinned SDK, installed when missing; skips the test when it cannot be."""
    if not shutil.which("node") or not shutil.which("npm"):
        pytest.skip("Node.js and npm are not installed: the TypeScript SDK client cannot run")
    modules = SDK_DIR / "node_modules"
    if _installed_version(modules) == SDK_VERSION:
        return modules
    SDK_DIR.mkdir(parents=True, exist_ok=True)
    (SDK_DIR / "package.json").write_text('{"name": "ledger-mcp-ts-client", "private": true}\n')
    try:
        result = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error",
                                 f"{SDK_PACKAGE}@{SDK_VERSION}"], cwd=SDK_DIR, capture_output=True, text=True,
                                timeout=600)
    except subprocess.TimeoutExpired:
        result = None
    if result is None or result.returncode != 0 or _installed_version(modules) != SDK_VERSION:
        detail = "timed out" if result is None else (result.stderr.strip() or result.stdout.strip())[-2000:]
        if not _registry_reachable():
            pytest.skip(f"the npm registry cannot be reached, so {SDK_PACKAGE} cannot be installed: {detail}")
        pytest.fail(f"npm install {SDK_PACKAGE}@{SDK_VERSION} failed although the registry answers: {detail}")
    return modules


def run_ts_client(url: str, token: str | None, calls: list[dict] | None = None, *,
                  headers: dict[str, str] | None = None) -> dict[str, Any]:
    """Runs the TypeScript client against `url` with `token` (or exactly `headers`): its JSON report (see
    mcp_ts_client.mjs)."""
    modules = sdk_modules()
    job = json.dumps({"url": url, "token": token, "headers": headers, "calls": calls or []})
    result = subprocess.run(["node", str(SCRIPT), job], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "LEDGER_MCP_TS_MODULES": str(modules)})
    lines = result.stdout.strip().splitlines()
    assert lines, f"the TypeScript client printed nothing (exit {result.returncode}): {result.stderr[-3000:]}"
    return json.loads(lines[-1])
