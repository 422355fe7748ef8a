"""A small Chrome DevTools Protocol client: headless Chromium driven over a websocket, for browser tests.

Chromium is Debian's `chromium` package; `find_or_install_chromium` installs it when missing and we are
root (the tests install what they need), and says why not otherwise.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
         "--disable-dev-shm-usage", "--window-size=1400,900", "--remote-debugging-port=0"]


def find_or_install_chromium() -> tuple[str | None, str]:
    """(the chromium executable, '') or (None, why it cannot be had)."""
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found, ""
    if os.geteuid() != 0:
        return None, "Chromium is not installed and installing it needs root (apt-get install chromium)"
    if shutil.which("apt-get") is None:
        return None, "Chromium is not installed and there is no apt-get to install it with"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "--no-install-recommends", "chromium"]
    result = subprocess.run(install, capture_output=True, text=True, env=env, timeout=600)
    if result.returncode != 0:
        subprocess.run(["apt-get", "update"], capture_output=True, text=True, env=env, timeout=600)
        result = subprocess.run(install, capture_output=True, text=True, env=env, timeout=600)
    found = shutil.which("chromium")
    if found:
        return found, ""
    return None, f"`apt-get install chromium` failed: {(result.stderr or result.stdout).strip()[-300:]}"


class CDPError(Exception):
    pass


class Browser:
    """One headless Chromium with a fresh profile, and a connection to its first page."""

    def __init__(self, executable: str, *, timeout: float = 20.0) -> None:
        from websockets.sync.client import connect

        self.profile = Path(tempfile.mkdtemp(prefix="ledger-chromium-"))
        self.log = self.profile / "chromium.log"
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen([executable, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
                                            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        port_file = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while not (port_file.exists() and port_file.read_text().strip()):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise CDPError(f"Chromium did not start: {self.log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.05)
        port = int(port_file.read_text().split()[0])
        self.page_ws = self._page_websocket(port, deadline)
        self._connection = connect(self.page_ws, max_size=None, open_timeout=timeout)
        self.ws = self._connection.__enter__()  # (websockets wants connect() used as a context manager)
        self._ids = itertools.count(1)
        self.events: list[dict] = []

    @staticmethod
    def _page_websocket(port: int, deadline: float) -> str:
        import httpx

        while True:
            try:
                targets = httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=2).json()
                pages = [t for t in targets if t.get("type") == "page"]
                if pages:
                    return pages[0]["webSocketDebuggerUrl"]
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise CDPError("Chromium opened no page")
            time.sleep(0.05)

    def send(self, method: str, params: dict | None = None, timeout: float = 20.0) -> dict:
        message_id = next(self._ids)
        self.ws.send(json.dumps({"id": message_id, "method": method, "params": params or {}}))
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CDPError(f"{method} got no answer in {timeout} s")
            message = json.loads(self.ws.recv(timeout=left))
            if message.get("id") == message_id:
                if "error" in message:
                    raise CDPError(f"{method}: {message['error']}")
                return message.get("result", {})
            self.events.append(message)

    def evaluate(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                "awaitPromise": True})
        if "exceptionDetails" in result:
            raise CDPError(f"{expression!r} threw: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 20.0, what: str | None = None) -> Any:
        """Poll a JavaScript expression until it is truthy; returns its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise CDPError(f"timed out after {timeout} s waiting for {what or expression}")
            time.sleep(0.1)

    def click(self, selector: str) -> None:
        """A real mouse click (pressed and released) at the middle of the element."""
        box = self.evaluate(f"""(() => {{ const r = document.querySelector({json.dumps(selector)})
            .getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; }})()""")
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", {"type": kind, "x": box[0], "y": box[1], "button": "left",
                                                   "clickCount": 1})

    def screenshot(self, path: Path) -> Path:
        data = self.send("Page.captureScreenshot", {"format": "png"})["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        try:
            if getattr(self, "ws", None) is not None:
                self._connection.__exit__(None, None, None)
        finally:
            if self.process.poll() is None:
                self.process.terminate()
                try:
                    self.process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait()
            shutil.rmtree(self.profile, ignore_errors=True)
