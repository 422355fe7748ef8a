"""The exploring path, in a real browser: headless Chromium opens the GraphiQL URL `ledger serve` prints
(the embedded default, with its admin token in the URL fragment), runs `{ viewer { tenantId } }` with the
run button and an invokeAction of a published tool with Ctrl-Enter, and reads both results off the page.

GraphiQL's assets must come from the server itself (the machine has no internet): the test fails if the
page would load them from the CDN. Screenshots are saved into the test's tmp dir (their paths printed).
Chromium is installed when missing (as root); the test skips only where it cannot be.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import pytest

from ledger.db.cluster import PostgresNotFound, find_pg_bin

pytest.importorskip("websockets", reason="the browser test drives Chromium over websockets (pip install websockets)")

from cdp import Browser, find_or_install_chromium  # noqa: E402
from invoke_helpers import publish, tool  # noqa: E402
from test_cli_serve import Server, _env, _ledger  # noqa: E402

ECHO = 'def run(event):\n    return {"echo": event["data"]["text"], "n": len(event["data"]["text"])}\n'


class HttpApi:
    """What the registry helpers need of a client: `gql`, over real HTTP."""

    def __init__(self, url: str, token: str) -> None:
        self.url, self.token = url, token

    def gql(self, query: str, variables: dict | None = None) -> dict:
        body = httpx.post(f"{self.url}/graphql", json={"query": query, "variables": variables or {}},
                          headers={"Authorization": f"Bearer {self.token}"}, timeout=30).json()
        assert "errors" not in body, body
        return body["data"]


@pytest.fixture(scope="module")
def chromium() -> str:
    executable, why = find_or_install_chromium()
    if executable is None:
        pytest.skip(f"no headless Chromium: {why}")
    return executable


@pytest.fixture(scope="module")
def server():
    try:
        find_pg_bin()
    except PostgresNotFound as exc:
        pytest.skip(f"no PostgreSQL server binaries: {exc.message}")
    root = Path(tempfile.mkdtemp(prefix="ledger-browser-"))
    os.chmod(root, 0o755)  # the cluster may run as another OS user (when we are root)
    served = Server(root / "data")
    try:
        yield served
    finally:
        served.stop()
        shutil.rmtree(root, ignore_errors=True)


def _require_local_assets(server: Server) -> None:
    """The server serves GraphiQL's assets itself (from the checkout's cache that `make` fills, or from its
    data dir, fetched in the background on start). Where they cannot be fetched at all (no npm registry),
    GraphiQL cannot work offline: skip, saying so; where they can, a fallback to the CDN is a failure."""
    from ledger.api.graphiql import CDN

    deadline = time.monotonic() + 30
    while CDN in httpx.get(f"{server.url}/graphql", timeout=10).text:
        if time.monotonic() > deadline:
            break
        time.sleep(0.5)
    else:
        return
    probe = subprocess.run([*_ledger(), "assets", "fetch", "--dest", str(server.data_dir.parent / "probe")],
                           capture_output=True, text=True, env=_env(), timeout=180)
    if probe.returncode != 0:
        pytest.skip(f"GraphiQL's assets cannot be fetched on this machine: {probe.stderr.strip()}")
    raise AssertionError(f"the GraphiQL page falls back to the CDN although its assets can be fetched:\n"
                         f"{server.output()}")


def _editor_value(selector: str) -> str:
    return f"document.querySelector({json.dumps(selector)}).CodeMirror.getValue()"


QUERY_EDITOR = ".graphiql-query-editor .CodeMirror"
RESULT = ".result-window .CodeMirror"


def _run_in_graphiql(browser: Browser, document: str, *, how: str) -> dict:
    """Put the document in the query editor, run it, and read the JSON result off the page."""
    browser.evaluate(f"document.querySelector({json.dumps(QUERY_EDITOR)}).CodeMirror.setValue({json.dumps(document)})")
    before = browser.evaluate(_editor_value(RESULT))
    if how == "button":
        browser.click(".graphiql-execute-button")
    else:  # GraphiQL's keyboard shortcut, typed into the focused editor
        browser.evaluate(f"document.querySelector({json.dumps(QUERY_EDITOR)}).CodeMirror.focus()")
        for kind in ("rawKeyDown", "keyUp"):
            browser.send("Input.dispatchKeyEvent", {"type": kind, "modifiers": 2, "key": "Enter", "code": "Enter",
                                                    "windowsVirtualKeyCode": 13, "nativeVirtualKeyCode": 13})
    text = browser.wait_for(
        f"(() => {{ const v = {_editor_value(RESULT)}; return v && v !== {json.dumps(before)} ? v : null; }})()",
        timeout=20, what="GraphiQL's result")
    return json.loads(text)


def test_graphiql_in_headless_chromium(server, chromium, tmp_path):
    started = time.monotonic()
    printed = re.search(r"GraphiQL: (http://127\.0\.0\.1:\d+/graphql#token=(\S+))", server.output())
    assert printed, f"`ledger serve` printed no GraphiQL URL with a token:\n{server.output()}"
    url, token = printed.groups()
    admin = json.loads((server.data_dir / "admin.json").read_text())

    # A published tool to invoke from the page.
    api = HttpApi(server.url, token)
    action_id = publish(api, tool("echo", ECHO, schema={"type": "object", "required": ["text"],
                                                        "properties": {"text": {"type": "string"}}}))

    _require_local_assets(server)
    browser = Browser(chromium)
    try:
        browser.send("Page.enable")
        browser.send("Runtime.enable")
        browser.send("Page.navigate", {"url": url})
        browser.wait_for(f"document.querySelector({json.dumps(QUERY_EDITOR)}) !== null", timeout=30,
                         what="GraphiQL to render (blank page: were its assets served?)")

        # Its scripts and styles came from this server, not a CDN; the token left the address bar.
        sources = browser.evaluate("[...document.scripts].map(s => s.src).filter(Boolean)"
                                   ".concat([...document.querySelectorAll('link[rel=stylesheet]')].map(l => l.href))")
        assert sources and all(s.startswith(f"{server.url}/graphiql/") for s in sources), sources
        assert browser.evaluate("window.location.hash") == ""

        viewer = _run_in_graphiql(browser, "{ viewer { tenantId } }", how="button")
        assert viewer == {"data": {"viewer": {"tenantId": admin["tenant"]}}}
        first = browser.screenshot(tmp_path / "graphiql-viewer.png")

        execution_id = str(uuid.uuid4())
        invoked = _run_in_graphiql(browser, f"""mutation {{
  actions {{
    invokeAction(id: "{action_id}", input: {{executionId: "{execution_id}", input: {{text: "hello from GraphiQL"}}}}) {{
      executionId
      status
      invocation {{ output durationMs outputBytes }}
    }}
  }}
}}""", how="ctrl-enter")
        call = invoked["data"]["actions"]["invokeAction"]
        assert call["executionId"] == execution_id and call["status"] == "SUCCEEDED", invoked
        assert call["invocation"]["output"] == {"echo": "hello from GraphiQL", "n": 19}
        assert call["invocation"]["outputBytes"] == len(b'{"echo":"hello from GraphiQL","n":19}')
        assert call["invocation"]["durationMs"] >= 0
        second = browser.screenshot(tmp_path / "graphiql-invoke.png")
    finally:
        browser.close()
    print(f"\nGraphiQL screenshots: {first} {second} ({time.monotonic() - started:.1f} s in the browser)")
    assert first.stat().st_size > 10_000 and second.stat().st_size > 10_000
